"""Work per core: a real test suite, N copies at once, under gvx, host
Docker and runsc, in the same run.

    python benchmarks/work_per_core.py [--runsc PATH] [--docker] [--no-spin] [--pin] [--only-gvx]
                                       [--profile] [--ns 1,2,4,8,16] [--rounds 2]

The suite is click 8.1.7's own tests (its PyPI sdist), run offline by
Debian bookworm's python3-pytest. The image is made here once and cached
under $GVX_CACHE/bench/work-per-core: debootstrap (minbase, python3 and
python3-pytest) plus the sdist unpacked at /work/click, written as an OCI
layout. Every engine runs that one image and the same command:

- gvx: ``gvx.Sandbox(image)``, ``exec(command)``, ``close()``, one thread each;
- host Docker: ``docker run --rm --network none`` of the same layer, imported;
- runsc (built from the gVisor version gvx pins): ``runsc --network=none do
  --erofs FILE``, with the EROFS file gvx made of the image, so that both
  gVisors read the same root.

For each N the engines take turns, in an order that rotates each round.
A run is timed from the first start to the last end; its CPU is the whole
machine's busy time over that span (/proc/stat: user, nice, system, irq,
softirq), so that each engine's daemons and helpers count. Every copy must
pass the suite (pytest exits 0). --no-spin and --pin add gvx with spin=False
and with each sandbox on one CPU; --profile then splits gvx's CPU between
the Sentry and the stubs (the guest) and counts context switches per test. Prints markdown; run by benchmarks/run.sh
(`work`). Needs root (debootstrap, runsc do), and a docker daemon for the
Docker column.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import gvx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))
from conftest import descendants, sandboxes_of  # noqa: E402

CLICK = "8.1.7"
SUITE = f"click {CLICK}"
COMMAND = "cd /work/click && python3 -m pytest -q -p no:cacheprovider tests"
DOCKER_TAG = f"gvx.bench/click-tests:{CLICK}"
RUN_TIMEOUT = 900.0  # one engine's N copies; far beyond what 16 take on 2 cores


def cache_dir() -> Path:
    root = Path(os.environ.get("GVX_CACHE") or Path.home() / ".cache" / "gvx")
    return root / "bench" / "work-per-core"


def prepare(work: Path) -> Path:
    """The suite's image as an OCI layout (made once); returns the layout."""
    layout = work / f"click-{CLICK}-oci"
    if (layout / "index.json").exists():
        return layout
    work.mkdir(parents=True, exist_ok=True)
    rootfs = work / "rootfs"
    if not (rootfs / "usr" / "bin" / "python3").exists():
        if shutil.which("debootstrap") is None:
            subprocess.run(["apt-get", "install", "-y", "-qq", "debootstrap"], check=True)
        shutil.rmtree(rootfs, ignore_errors=True)
        print(f"(debootstrapping bookworm with python3-pytest into {rootfs}, once …)", file=sys.stderr)
        with open(work / "debootstrap.log", "w") as log:
            subprocess.run(
                ["debootstrap", "--variant=minbase", "--include=python3,python3-pytest", "bookworm", str(rootfs),
                 os.environ.get("GVX_DEBIAN_MIRROR", "http://deb.debian.org/debian")],
                check=True, stdout=log, stderr=subprocess.STDOUT,
            )
        # Nothing of the building host's apt state is wanted in the image.
        shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
    sdists = work / "sdist"
    if not list(sdists.glob(f"click-{CLICK}.tar.gz")):
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        f"click=={CLICK}", "-d", str(sdists)], check=True)
    suite = rootfs / "work" / "click"
    shutil.rmtree(suite, ignore_errors=True)
    suite.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdists / f"click-{CLICK}.tar.gz") as tf:
        tf.extractall(suite.parent, filter="data")
    (suite.parent / f"click-{CLICK}").rename(suite)
    # The suite imports click from its source tree, not from site-packages.
    site = rootfs / "usr" / "lib" / "python3" / "dist-packages"
    (site / "click-src.pth").write_text("/work/click/src\n")
    write_layout(rootfs, layout)
    return layout


def write_layout(rootfs: Path, layout: Path) -> None:
    """rootfs as a one-layer OCI image layout (uncompressed layer)."""
    tmp = Path(tempfile.mkdtemp(prefix=layout.name + ".", dir=layout.parent))
    blobs = tmp / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    layer = tmp / "layer.tar"
    subprocess.run(["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(layer), "."], check=True)

    def blob(path: Path) -> dict[str, object]:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        digest = h.hexdigest()
        size = path.stat().st_size
        path.rename(blobs / digest)
        return {"digest": f"sha256:{digest}", "size": size}

    def json_blob(value: object, media_type: str) -> dict[str, object]:
        path = tmp / "json"
        path.write_text(json.dumps(value, sort_keys=True))
        return {"mediaType": media_type, **blob(path)}

    layer_desc = blob(layer)
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "WorkingDir": "/work/click"},
        "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": json_blob(config, "application/vnd.oci.image.config.v1+json"),
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer_desc}],
    }
    manifest_desc = json_blob(manifest, "application/vnd.oci.image.manifest.v1+json")
    manifest_desc["annotations"] = {"org.opencontainers.image.ref.name": "latest"}
    (tmp / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest_desc]}))
    (tmp / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    tmp.rename(layout)


def docker_image(layout: Path) -> None:
    """Imports the layout's one layer into the docker daemon as DOCKER_TAG."""
    if subprocess.run(["docker", "image", "inspect", DOCKER_TAG], capture_output=True).returncode == 0:
        return
    index = json.loads((layout / "index.json").read_text())
    manifest_digest = index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads((layout / "blobs" / "sha256" / manifest_digest).read_text())
    layer = layout / "blobs" / "sha256" / manifest["layers"][0]["digest"].split(":")[1]
    subprocess.run(["docker", "import", "--change", "WORKDIR /work/click", str(layer), DOCKER_TAG], check=True, capture_output=True)


def erofs_of(ref: str) -> Path:
    """The EROFS file gvx made of the image ref (pulling it first)."""
    rungv = str(gvx.rungv_path())
    subprocess.run([rungv, "pull", "-q", ref], check=True, capture_output=True)
    images = json.loads(subprocess.run([rungv, "images", "--format", "json"], check=True, capture_output=True, text=True).stdout)
    for image in images:
        if ref in image["refs"]:
            return Path(image["erofs"])
    raise SystemExit(f"work_per_core: `rungv images` does not list {ref}")


def busy_seconds() -> float:
    """The whole machine's busy CPU time so far (user, nice, system, irq, softirq)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def at_once(n: int, one: Callable[[int], None]) -> tuple[float, float]:
    """Runs one(i) for i < n in n threads at once; returns wall seconds and
    machine CPU seconds from the first start to the last end."""
    errors: list[BaseException] = []
    go = threading.Event()

    def body(i: int) -> None:
        go.wait()
        try:
            one(i)
        except BaseException as e:  # noqa: BLE001 - reported below, with the others
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    cpu, start = busy_seconds(), time.perf_counter()
    go.set()
    deadline = time.monotonic() + RUN_TIMEOUT
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    wall, used = time.perf_counter() - start, busy_seconds() - cpu
    if any(t.is_alive() for t in threads):
        raise SystemExit(f"work_per_core: {n} copies did not finish within {RUN_TIMEOUT:g} s")
    if errors:
        raise SystemExit(f"work_per_core: {len(errors)} of {n} copies failed; the first: {errors[0]}")
    return wall, used


def checked(what: str, code: int, out: str) -> None:
    if code != 0 or " passed" not in out:
        raise RuntimeError(f"{what}: the suite did not pass (exit {code}):\n{out[-2000:]}")


def run_in_gvx(ref: str, spin: Optional[bool] = None, cpuset: Optional[list[int]] = None) -> str:
    """One copy of the suite in a sandbox of its own; returns its output."""
    with gvx.Sandbox(ref, spin=spin, cpuset=cpuset) as sb:
        r = sb.exec(COMMAND, timeout=RUN_TIMEOUT, max_output=1 << 20)
    checked("gvx", r.exit_code, r.stdout + r.stderr)
    return r.stdout


def gvx_engine(ref: str, spin: Optional[bool] = None, pin: bool = False) -> Callable[[int], None]:
    cpus = sorted(os.sched_getaffinity(0))

    def one(i: int) -> None:
        run_in_gvx(ref, spin, [cpus[i % len(cpus)]] if pin else None)

    return one


def command_engine(argv: list[str], what: str) -> Callable[[int], None]:
    def one(_: int) -> None:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        checked(what, r.returncode, r.stdout + r.stderr)

    return one


def tests_in_suite(ref: str) -> int:
    """How many tests pass in one copy (from a gvx run's summary line)."""
    words = run_in_gvx(ref).strip().splitlines()[-1].replace(",", " ").split()
    return int(words[words.index("passed") - 1])


def perf_stat(n: int, name: str, one: Callable[[int], None], tests: int) -> None:
    """One run of n copies under `perf stat -a`: machine-wide context
    switches, migrations and page faults per test."""
    events = "context-switches,cpu-migrations,page-faults"
    with tempfile.NamedTemporaryFile(prefix="perfstat-", suffix=".csv") as out:
        perf = subprocess.Popen(["perf", "stat", "-a", "-x", ",", "-e", events, "-o", out.name])
        try:
            at_once(n, one)
        finally:
            perf.send_signal(2)
            perf.wait(60)
        counts = {}
        for line in Path(out.name).read_text().splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[0].strip().isdigit():
                counts[fields[2]] = int(fields[0])
    per = " | ".join(f"{counts.get(e, 0) / (n * tests):.1f}" for e in events.split(","))
    print(f"| {n} | {name} | {per} |")


def gvx_components(n: int, one: Callable[[int], None], tests: int) -> None:
    """One gvx run of n copies, its CPU split between the Sentry (the rungv
    processes) and the systrap stubs under them (the guest's own code, and
    the host kernel's work for it), from /proc read every 0.2 s; a process
    counts with its last reading."""
    me, tck = os.getpid(), os.sysconf("SC_CLK_TCK")
    last: dict[int, tuple[str, int, int]] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            sentries = set(sandboxes_of(me))
            for pid in descendants(me):
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue  # gone meanwhile
                last[pid] = ("Sentry" if pid in sentries else "stubs", int(fields[11]), int(fields[12]))
            done.wait(0.2)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        wall, cpu = at_once(n, one)
    finally:
        done.set()
        sampler.join()
    parts = {"Sentry": [0, 0], "stubs": [0, 0]}
    for kind, user, system in last.values():
        parts[kind][0] += user
        parts[kind][1] += system
    cells = " | ".join(f"{parts[k][0] / tck:.1f} / {parts[k][1] / tck:.1f}" for k in ("Sentry", "stubs"))
    print(f"| {n} | {wall:.1f} | {cpu:.1f} | {cells} | {(parts['Sentry'][0] + parts['Sentry'][1]) / tck / (n * tests) * 1000:.2f} ms |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runsc", default=None, help="runsc built from the gVisor version gvx pins (optional)")
    p.add_argument("--docker", action="store_true", help="include host Docker (needs a daemon)")
    p.add_argument("--ns", default="1,2,4,8,16", help="copies at once, comma-separated (default 1,2,4,8,16)")
    p.add_argument("--rounds", type=int, default=2, help="rounds; the engines' order rotates each round (default 2)")
    p.add_argument("--no-spin", action="store_true", help="also gvx with spin=False (no sandbox spins)")
    p.add_argument("--pin", action="store_true", help="also gvx with each sandbox on one CPU, round robin (cpuset=)")
    p.add_argument("--only-gvx", action="store_true", help="leave out Docker and runsc (for A/B runs of gvx settings)")
    p.add_argument("--profile", action="store_true",
                   help="then split gvx's CPU between Sentry and stubs at each N, and count context switches per test at the largest N (perf)")
    a = p.parse_args()
    ns = [int(x) for x in a.ns.split(",")]

    layout = prepare(cache_dir())
    ref = f"oci:{layout}:latest"
    engines: dict[str, Callable[[int], None]] = {"gvx": gvx_engine(ref)}
    if a.no_spin:
        engines["gvx, spin=False"] = gvx_engine(ref, spin=False)
    if a.pin:
        engines["gvx, one CPU each (round robin)"] = gvx_engine(ref, pin=True)
    if a.docker and not a.only_gvx:
        docker_image(layout)
        engines["docker"] = command_engine(["docker", "run", "--rm", "--network", "none", DOCKER_TAG, "sh", "-c", COMMAND], "docker run")
    if a.runsc and not a.only_gvx:
        erofs = erofs_of(ref)
        engines["runsc"] = command_engine(
            [a.runsc, "--network=none", "do", f"--erofs={erofs}", "--cwd=/", "--quiet", "--", "sh", "-c", COMMAND], "runsc do"
        )
    tests = tests_in_suite(ref)  # also warms gvx's image and the page cache
    for name, one in engines.items():
        if not name.startswith("gvx"):
            one(0)  # warm: dockerd's layer, runsc's start

    names = list(engines)
    walls: dict[tuple[str, int], list[float]] = {}
    cpus: dict[tuple[str, int], list[float]] = {}
    for r in range(a.rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for n in ns:
            for name in order:
                wall, cpu = at_once(n, engines[name])
                walls.setdefault((name, n), []).append(wall)
                cpus.setdefault((name, n), []).append(cpu)
                print(f"(round {r + 1}, N={n}, {name}: {wall:.1f} s, {cpu:.1f} CPU-s)", file=sys.stderr, flush=True)

    def span(xs: list[float], fmt: str = "{:.1f}") -> str:
        med = fmt.format(statistics.median(xs))
        return med if len(xs) == 1 else f"{med} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"

    print(f"{SUITE}'s suite ({tests} tests pass), N copies at once on {os.cpu_count()} CPUs, {a.rounds} rounds; "
          "wall s and machine CPU-s, median (range)")
    print()
    print("| N | engine | wall s | CPU-s | CPU per test | wall × docker | CPU × docker |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in ns:
        for name in names:
            w, c = walls[(name, n)], cpus[(name, n)]
            per_test = statistics.median(c) / (n * tests) * 1000
            rel_w = rel_c = ""
            if "docker" in engines and name != "docker":
                rel_w = f"{statistics.median(w) / statistics.median(walls[('docker', n)]):.2f}"
                rel_c = f"{statistics.median(c) / statistics.median(cpus[('docker', n)]):.2f}"
            print(f"| {n} | {name} | {span(w)} | {span(c)} | {per_test:.1f} ms | {rel_w} | {rel_c} |")

    if a.profile:
        print()
        print(f"Where gvx's CPU goes, one run each (/proc: the rungv processes and the stub processes under them), CPU-s user / system:")
        print()
        print("| N | wall s | machine CPU-s | Sentry | stubs (the guest) | Sentry per test |")
        print("| --- | --- | --- | --- | --- | --- |")
        for n in ns:
            gvx_components(n, engines["gvx"], tests)
        if shutil.which("perf") is None:
            print("\n(no perf: the context-switch counts are left out; apt-get install linux-perf)")
            return
        print()
        print(f"Per test, the whole machine, {ns[-1]} copies at once (`perf stat -a`, one run each):")
        print()
        print("| N | engine | context switches | CPU migrations | page faults |")
        print("| --- | --- | --- | --- | --- |")
        for name in names:
            perf_stat(ns[-1], name, engines[name], tests)

if __name__ == "__main__":
    main()

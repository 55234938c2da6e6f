"""Copying a source tree into and out of a sandbox, beside the ways around it.

    python benchmarks/copy_tree.py [--tree DIR] [--runs N] [--docker-image REF]

The tree defaults to a generated one shaped like a repository an agent
works on: 3,000 files in 300 directories, 18.6 MiB, the same on every machine. gvx's Sandbox.upload/download
are measured against building a tar in Python and piping it to `tar -x`
through exec (what one does without them) and, when a host docker daemon
and --docker-image are there, `docker cp` into and out of a container
started with --network none. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable

import gvx


def measure(runs: int, once: Callable[[int], object]) -> float:
    """Returns the median seconds of once(i) over runs calls."""
    times = []
    for i in range(runs):
        t = time.perf_counter()
        once(i)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def make_tree(root: Path, files: int = 3000, dirs: int = 300) -> None:
    """Writes a repository-like tree: small source files, a few large ones."""
    rng = random.Random(0)
    for i in range(files):
        d = root / f"pkg{i % dirs // 30}" / f"mod{i % dirs}"
        d.mkdir(parents=True, exist_ok=True)
        size = 256 << 10 if i % 500 == 0 else rng.choice((600, 1500, 4000, 8000, 16000))
        (d / f"file{i}.py").write_bytes(rng.randbytes(size))


def tree_size(tree: Path) -> tuple[int, int]:
    files = size = 0
    for d, _, names in os.walk(tree):
        for n in names:
            p = os.path.join(d, n)
            if os.path.isfile(p) and not os.path.islink(p):
                files += 1
                size += os.path.getsize(p)
    return files, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=None, help="a host directory (default: a generated tree)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--docker-image", default="", help="a loaded image with tar and sleep, for the docker cp anchor")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="gvx-copy-bench-"))
    tree: Path = args.tree or scratch / "tree"
    if args.tree is None:
        make_tree(tree)
    files, size = tree_size(tree)
    print(f"tree: {tree}, {files} files, {size / (1 << 20):.1f} MiB")
    print("| copy | gvx | anchor | anchor's time |")
    print("|---|---|---|---|")
    try:
        with gvx.Sandbox() as sb:
            upload = measure(args.runs, lambda i: sb.upload(tree, f"/w/up{i}"))

            def through_exec(i: int) -> None:
                buf = io.BytesIO()
                with tarfile.open(fileobj=buf, mode="w") as tf:
                    tf.add(tree, arcname=".")
                sb.exec(f"mkdir -p /w/tar{i} && tar -x -C /w/tar{i}", stdin=buf.getvalue(), check=True)

            via_tar = measure(args.runs, through_exec)
            download = measure(args.runs, lambda i: sb.download(f"/w/up{i}", scratch / f"down{i}"))

            def out_through_exec(i: int) -> None:
                r = sb.exec(f"tar -c -C /w/up{i} .", max_output=1 << 40)
                dest = scratch / f"tar-down{i}"
                dest.mkdir()
                with tarfile.open(fileobj=io.BytesIO(r.stdout_bytes)) as tf:
                    tf.extractall(dest, filter="data")

            via_tar_out = measure(args.runs, out_through_exec)
        print(f"| into the sandbox | {upload * 1000:.0f} ms (`upload`) | Python `tarfile` + exec `tar -x` | {via_tar * 1000:.0f} ms |")
        print(f"| out of it | {download * 1000:.0f} ms (`download`) | exec `tar -c` + Python `tarfile` | {via_tar_out * 1000:.0f} ms |")

        for old in scratch.glob("*down*"):
            shutil.rmtree(old)
        host_tar = scratch / "host.tar"
        subprocess.run(["tar", "-c", "-f", str(host_tar), "-C", str(tree), "."], check=True)

        def host_extract(i: int) -> None:
            dest = scratch / f"host{i}"
            dest.mkdir()
            subprocess.run(["tar", "-x", "-f", str(host_tar), "-C", str(dest)], check=True)

        print(f"| host `tar -x` of the same tree (the host disk's own pace) | | | {measure(args.runs, host_extract) * 1000:.0f} ms |")

        if args.docker_image and shutil.which("docker"):
            cid = subprocess.run(["docker", "run", "-d", "--rm", "--network", "none", args.docker_image, "sleep", "3600"],
                                 check=True, capture_output=True, text=True).stdout.strip()
            try:
                into = measure(args.runs, lambda i: subprocess.run(["docker", "cp", f"{tree}/.", f"{cid}:/w{i}"], check=True))
                out = measure(args.runs, lambda i: subprocess.run(["docker", "cp", f"{cid}:/w{i}/.", str(scratch / f"dcp{i}")], check=True))
            finally:
                subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
            print(f"| `docker cp` in / out (host docker, no sandbox) | | | {into * 1000:.0f} / {out * 1000:.0f} ms |")
        else:
            print("| `docker cp` | skipped: no host docker or no --docker-image | | |", file=sys.stdout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

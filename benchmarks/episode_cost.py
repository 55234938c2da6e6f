"""What one Docker episode costs a node: CPU, memory and disk, for sizing a cluster.

    python benchmarks/episode_cost.py --docker-image REF --archive busybox.tar [-n 5]

Runs n episodes one after another, each the episode of the Docker load test
(python/tests/test_docker_load.py: dockerd starts on a clone of a golden
/var/lib/docker, then `docker run`, `docker build` + run, a named volume
written by one container and read by another, `docker ps`), in a GvxEnv with
no warm pool, so that each episode's sandbox is its own. Per episode: wall
time, CPU time of rungv and its stub processes, the memory that is the
sandbox's own when the episode ends (anonymous pages and its guest memory
file, as the load test counts it), its peak resident memory (rungv's
high-water mark plus its stubs' resident sets, shared pages included), and
the disk its clone holds when the episode ends. Run by benchmarks/run.sh
(`episode`). Prints markdown; nothing here is a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import gvx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))
from conftest import descendants  # noqa: E402
from test_docker_load import episode_steps, sandbox_memory_kib, status_kib  # noqa: E402

CLOCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User plus system time of pids, those that are still alive."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLOCK


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docker-image", required=True, help="the Docker-in-gvx image (make docker-image)")
    parser.add_argument("--archive", required=True, type=Path, help="a `docker save` archive for the golden (busybox)")
    parser.add_argument("-n", type=int, default=5, help="episodes (default 5)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="gvx-episode-cost-") as tmp:
        work = Path(tmp)
        golden = gvx.docker.golden(args.docker_image, archives=[args.archive], volume=work / "golden.ext4", size="2g", progress=False)
        golden_bytes = os.stat(golden.path).st_blocks * 512
        episodes = work / "episodes"
        episodes.mkdir()
        rows = []
        with gvx.GvxEnv(
            args.docker_image, golden=golden, setup=gvx.docker.SETUP, warm=0, episode_dir=str(episodes), step_timeout=600.0, **gvx.docker.SANDBOX_OPTIONS
        ) as env:
            for n in range(args.n):
                start = time.perf_counter()
                env.reset()
                ready = time.perf_counter() - start
                for step in episode_steps(n):
                    obs, *_ = env.step(step.command)
                    if obs["exit_code"] != 0 or obs["stdout"] != step.stdout:
                        raise SystemExit(f"episode {n}: {step.command!r} exited {obs['exit_code']}: {obs['stderr'][-2000:]}")
                rungv = env.sandbox.pid
                pids = [rungv, *descendants(rungv)]
                (clone,) = list(episodes.iterdir())
                rows.append(
                    (
                        time.perf_counter() - start,
                        ready,
                        cpu_seconds(pids),
                        sandbox_memory_kib(pids)[0] / 1024,
                        (status_kib(rungv, "VmHWM") + sum(status_kib(p, "VmRSS") for p in pids[1:])) / 1024,
                        os.stat(clone).st_blocks * 512 / 2**20,
                    )
                )
    print(f"One Docker episode at a time, {len(rows)} episodes (golden: {golden_bytes / 2**20:.0f} MiB on disk, 2 GiB apparent)")
    print()
    print("| per episode | median | min | max |")
    print("| --- | --- | --- | --- |")
    names = (
        "wall time, reset to the last step",
        "reset → dockerd ready",
        "CPU, rungv + stubs",
        "its own memory at the end (anonymous + guest memory file)",
        "peak resident memory (shared pages included)",
        "disk its clone holds",
    )
    units = ("s", "s", "core-s", "MiB", "MiB", "MiB")
    for i, (name, unit) in enumerate(zip(names, units)):
        xs = [r[i] for r in rows]
        print(f"| {name} | {statistics.median(xs):.2f} {unit} | {min(xs):.2f} {unit} | {max(xs):.2f} {unit} |")


if __name__ == "__main__":
    main()

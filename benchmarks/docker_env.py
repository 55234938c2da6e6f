"""Docker episodes from Python: reset → dockerd answering on a clone of a golden
/var/lib/docker, with and without GvxEnv's warm pool.

    python benchmarks/docker_env.py --docker-image REF --archive busybox.tar [-n 20] [--pace 2]

"ready" is env.reset() plus a first `docker info` inside the episode (the CLI
asks the episode's dockerd, which found the golden's images on its clone). With
the warm pool the next episodes — clone, boot, dockerd start — are prepared
while the current one runs; `--pace` is how long an episode runs before the
next reset. A pool of one keeps up only when an episode lasts longer than a
dockerd start (about 1.6 s); `--warm N` prepares N at once. Run by
benchmarks/run.sh docker. Prints markdown; nothing here is a test.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import gvx


def percentiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def row(name: str, xs: list[float]) -> None:
    p50, p99 = percentiles(xs)
    print(f"| {name} | {p50 * 1000:.0f} ms | {p99 * 1000:.0f} ms | {min(xs) * 1000:.0f} ms | {max(xs) * 1000:.0f} ms |")


def ready_times(image: str, golden: gvx.Volume, warm: int, n: int, pace: float, work: Path) -> tuple[list[float], list[float]]:
    """reset() times and reset() → `docker info` OK times over n episodes."""
    resets, ready = [], []
    with gvx.GvxEnv(
        image,
        golden=golden,
        setup=gvx.docker.SETUP,
        warm=warm,
        step_timeout=120.0,
        episode_dir=str(work),
        **gvx.docker.SANDBOX_OPTIONS,
    ) as env:
        env.reset()  # the first episode is cold either way
        if warm:
            time.sleep(10)  # let the pool fill, as it has in a long training run
        for _ in range(n):
            time.sleep(pace)
            start = time.perf_counter()
            env.reset()
            resets.append(time.perf_counter() - start)
            obs, *_ = env.step("docker info --format '{{.Driver}} {{.Images}}'")
            ready.append(time.perf_counter() - start)
            if obs["exit_code"] != 0 or not obs["stdout"].startswith("overlay2 "):
                raise SystemExit(f"docker info in an episode: {obs}")
    return resets, ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docker-image", required=True, help="the Docker-in-gvx image (make docker-image prints it)")
    parser.add_argument("--archive", required=True, help="a `docker save` tarball for the golden")
    parser.add_argument("-n", type=int, default=20, help="episodes per measurement")
    parser.add_argument("--pace", type=float, default=2.0, help="seconds an episode runs before the next reset")
    parser.add_argument("--warm", type=int, default=2, help="the deeper warm pool measured beside a pool of one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gvx-docker-env-") as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        golden = gvx.docker.golden(args.docker_image, archives=[args.archive], volume=work / "golden.ext4", size="4g", progress=False)
        print(f"golden /var/lib/docker (dockerd start, docker load, graceful stop): {time.perf_counter() - start:.1f} s\n")
        print(f"{args.n} episodes each, {args.pace:g} s per episode\n")
        print("| Python, GvxEnv on golden clones | p50 | p99 | min | max |")
        print("|---|---|---|---|---|")
        for warm in (args.warm, 1, 0):
            resets, ready = ready_times(args.docker_image, golden, warm, args.n, args.pace, work)
            label = f"warm pool of {warm}" if warm else "no warm pool"
            row(f"{label}: env.reset()", resets)
            row(f"{label}: env.reset() → `docker info` OK", ready)


if __name__ == "__main__":
    main()

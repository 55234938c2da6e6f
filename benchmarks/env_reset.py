"""GvxEnv reset latency and step throughput, beside the same loop over
`runsc do` and host `docker run` (a fresh container per episode).

    python benchmarks/env_reset.py [--runsc PATH] [--docker-image IMAGE] [-n 100]

Run by benchmarks/run.sh with the anchors it prepares. Prints markdown.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import gvx


def percentiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def row(name: str, xs: list[float]) -> None:
    p50, p99 = percentiles(xs)
    print(f"| {name} | {p50 * 1000:.1f} ms | {p99 * 1000:.1f} ms |")


def reset_latency(warm: bool, n: int, pace: float) -> list[float]:
    """reset() times; with `pace` seconds of "episode" between resets, as a trainer has."""
    out = []
    with gvx.GvxEnv(warm=warm) as env:
        env.reset()
        for _ in range(n):
            env.step("true")
            time.sleep(pace)
            start = time.perf_counter()
            env.reset()
            out.append(time.perf_counter() - start)
    return out


def anchor_loop(cmd: list[str], n: int) -> list[float]:
    """A fresh sandbox per episode, as `runsc do` or `docker run` gives it."""
    out = []
    subprocess.run(cmd, check=True, capture_output=True)
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        out.append(time.perf_counter() - start)
    return out


def steps_per_second(envs: int, seconds: float) -> float:
    with gvx.EnvPool(envs) as pool:
        pool.reset()
        time.sleep(2 + envs * 0.1)  # the next episodes' sandboxes finish booting
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            pool.step(["echo step"] * envs)
            steps += envs
        return steps / (time.perf_counter() - start)


def anchor_steps_per_second(envs: int, seconds: float, cmd: list[str]) -> float:
    """Each step a fresh `runsc do`/`docker run` (what a loop without gvx pays)."""
    with ThreadPoolExecutor(envs) as pool:
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            list(pool.map(lambda _: subprocess.run(cmd, check=True, capture_output=True), range(envs)))
            steps += envs
        return steps / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runsc", default=None)
    p.add_argument("--docker-image", default=None)
    p.add_argument("-n", type=int, default=100)
    p.add_argument("--seconds", type=float, default=10.0)
    a = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs; {a.n} resets each\n")
    print("## env.reset() (a fresh sandbox per episode)\n")
    print("| what | p50 | p99 |\n|---|---|---|")
    row("GvxEnv warm pool (200 ms episodes)", reset_latency(True, a.n, 0.2))
    row("GvxEnv without the warm pool", reset_latency(False, a.n, 0.0))
    anchors: dict[str, list[str]] = {}
    if a.runsc:
        anchors["`runsc do /bin/true` per episode"] = [a.runsc, "--network=none", "do", "/bin/true"]
    if a.docker_image and shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        anchors["`docker run --rm` per episode"] = ["docker", "run", "--rm", "--pull", "never", "--network", "none", a.docker_image, "true"]
    for name, cmd in anchors.items():
        row(name, anchor_loop(cmd, min(a.n, 50)))
    print("\n## Steps per second (`echo` steps, EnvPool threads)\n")
    print("| envs | gvx | " + " | ".join(anchors) + " |")
    print("|---|---|" + "---|" * len(anchors))
    for envs in (1, 8, 32):
        cells = [f"{steps_per_second(envs, a.seconds):.0f}"]
        cells += [f"{anchor_steps_per_second(envs, a.seconds / 2, cmd):.0f}" for cmd in anchors.values()]
        print(f"| {envs} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

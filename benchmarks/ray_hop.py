"""What the Ray hop costs a gvx step, and how a pool scales over nodes.

    python benchmarks/ray_hop.py [-n 300]

Starts the tests' three-node Ray cluster on this machine (loopback only, in
network and PID namespaces; python/tests/raycluster.py), then drives it
from inside the namespaces. All in one run:

- Ray's floor: an empty method call on an actor pinned to one node (a
  plain actor, and an asyncio one as gvx's node actor is);
- one environment's ``step("true")`` through gvx.EnvPool in the driver's
  process, and through gvx.ray.EnvPool on one node;
- a batched step of 8 environments on one node, both ways: one hop, not 8;
- scaling: 12 environments on 1, 2 and 3 nodes against gvx.EnvPool, in
  steps/s and reset p50/p99 (the nodes share this machine's CPUs, so the
  total is the same at every size).

Prints markdown. Run by benchmarks/run.sh (`ray`); needs root (unshare -n).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python" / "tests"))


def percentiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def timed(fn: Callable[[], Any], n: int) -> list[float]:
    fn()  # warm
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def ms(x: float) -> str:
    return f"{x * 1000:.2f} ms"


def driver(address: str, n: int) -> None:
    import ray

    import gvx
    import gvx.ray
    from raycluster import connect

    names = connect(address)
    (node_a,) = [node for node, name in names.items() if name == "node_a"]
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    on_a = NodeAffinitySchedulingStrategy(node_id=node_a, soft=False)

    class Empty:
        def call(self) -> None:
            return None

    class AsyncEmpty:
        async def call(self) -> None:
            return None

    rows: list[tuple[str, list[float]]] = []
    # For a step, how much of it was not the environments' own step: the
    # driver's time less the longest info["wall_time"] (measured around the
    # exec where it runs), so that the exec's own noise does not hide the hop.
    outside: dict[str, list[float]] = {}
    empty: Any = ray.remote(Empty).options(scheduling_strategy=on_a, num_cpus=0).remote()
    rows.append(("Ray's floor: an empty actor method call", timed(lambda: ray.get(empty.call.remote()), n)))
    async_empty: Any = ray.remote(AsyncEmpty).options(scheduling_strategy=on_a, num_cpus=0).remote()
    rows.append(("Ray's floor: an empty asyncio actor method call", timed(lambda: ray.get(async_empty.call.remote()), n)))

    def step_row(name: str, pool: Any, k: int, calls: int) -> None:
        pool.reset()
        pool.step(["true"] * k)  # warm
        took, rest = [], []
        for _ in range(calls):
            start = time.perf_counter()
            _, _, _, _, infos = pool.step(["true"] * k)
            took.append(time.perf_counter() - start)
            rest.append(took[-1] - max(float(i["wall_time"]) for i in infos))
        rows.append((name, took))
        outside[name] = rest

    with gvx.EnvPool(1, warm=0) as local:
        step_row("gvx.EnvPool(1).step(['true']), in this process", local, 1, n)
    with gvx.ray.EnvPool(1, warm=0, resources_per_env={"node_a": 0.1}) as remote:
        step_row("gvx.ray.EnvPool(1).step(['true']), on one node", remote, 1, n)
    with gvx.EnvPool(8, warm=0) as local:
        step_row("gvx.EnvPool(8).step(8 × 'true'), in this process", local, 8, n // 3)
    with gvx.ray.EnvPool(8, warm=0, resources_per_env={"node_a": 0.1}) as remote:
        step_row("gvx.ray.EnvPool(8).step(8 × 'true'), all on one node", remote, 8, n // 3)

    print("| call | p50 | p99 | of which outside the environments' steps, p50 | calls |")
    print("| --- | --- | --- | --- | --- |")
    for name, xs in rows:
        p50, p99 = percentiles(xs)
        rest = ms(percentiles(outside[name])[0]) if name in outside else ""
        print(f"| {name} | {ms(p50)} | {ms(p99)} | {rest} | {len(xs)} |")
    median = {name: percentiles(xs)[0] for name, xs in rows}
    rest50 = {name: percentiles(xs)[0] for name, xs in outside.items()}
    one = rest50["gvx.ray.EnvPool(1).step(['true']), on one node"] - rest50["gvx.EnvPool(1).step(['true']), in this process"]
    eight = rest50["gvx.ray.EnvPool(8).step(8 × 'true'), all on one node"] - rest50["gvx.EnvPool(8).step(8 × 'true'), in this process"]
    print()
    for label in ("Ray's floor: an empty actor method call", "Ray's floor: an empty asyncio actor method call"):
        floor, what = median[label], label.removeprefix("Ray's floor: ")
        print(f"gvx's cost over {what} ({ms(floor)}), p50 of the time outside the environments' steps: "
              f"{ms(one - floor)} for one environment, {ms(eight - floor)} for a batch of 8 (target ≤ 0.3 ms)")

    # Scaling: the same 12 environments on 1, 2 and 3 nodes.
    envs, steps = 12, 30
    print()
    print(f"| {envs} environments | steps/s ({steps} batched steps of `true`) | reset p50 | reset p99 | × gvx.EnvPool |")
    print("| --- | --- | --- | --- | --- |")

    def measure(pool: Any) -> tuple[float, list[float]]:
        pool.reset()
        resets = []
        for i in range(3 * envs):
            start = time.perf_counter()
            pool.reset_one(i % envs)
            resets.append(time.perf_counter() - start)
        pool.step(["true"] * envs)
        start = time.perf_counter()
        for _ in range(steps):
            pool.step(["true"] * envs)
        return envs * steps / (time.perf_counter() - start), resets

    with gvx.EnvPool(envs, warm=1) as local:
        base, resets = measure(local)
    r50, r99 = percentiles(resets)
    print(f"| gvx.EnvPool, in this process | {base:.0f} | {ms(r50)} | {ms(r99)} | 1.00 |")
    for label, demand in (("1 node", {"node_a": 0.01}), ("2 nodes", {"pair": 0.1}), ("3 nodes", None)):
        with gvx.ray.EnvPool(envs, warm=1, resources_per_env=demand) as pool:
            nodes = len({p.node_id for p in pool.placement()})
            rate, resets = measure(pool)
        r50, r99 = percentiles(resets)
        print(f"| gvx.ray.EnvPool on {label} ({nodes} used) | {rate:.0f} | {ms(r50)} | {ms(r99)} | {rate / base:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=300, help="calls per latency row (default 300)")
    args = parser.parse_args()
    from raycluster import Cluster, skip_reason

    why = skip_reason()
    if why:
        raise SystemExit(f"ray_hop: {why}")
    with tempfile.TemporaryDirectory(prefix="gvxray-", dir="/tmp") as tmp:
        cluster = Cluster(Path(tmp))
        try:
            cluster.start()
            cluster.run(Path(__file__).resolve(), "driver", str(args.n))
        finally:
            cluster.stop()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "driver":
        from raycluster import driver_alarm

        driver_alarm()
        driver(sys.argv[2], int(sys.argv[3]))
    else:
        main()

"""What the Ray hop costs a gvx step, and how a pool scales over nodes.

    python benchmarks/ray_hop.py [-n 300]

Starts the tests' three-node Ray cluster on this machine (loopback only, in
network and PID namespaces; python/tests/raycluster.py), then drives it
from inside the namespaces. All in one run:

- Ray's floor: an empty method call on an actor pinned to one node (a
  plain actor and an asyncio one), and a call to a method that sleeps as
  long as the environments' step takes (Ray pays more for a call that
  leaves its threads idle for milliseconds than for one that returns at once);
- one environment's ``step("true")`` through gvx.EnvPool in the driver's
  process, and through gvx.ray.EnvPool on one node;
- a batched step of 8 environments on one node, both ways: one hop, not 8;
- scaling: 12 environments on 1, 2 and 3 nodes against gvx.EnvPool, in
  steps/s and reset p50/p99, in rounds that take each in turn (the nodes
  share this machine's CPUs, so the total is the same at every size);
- then, on a second cluster whose node_a and node_b each have a CPU of their
  own (taskset), 2 nodes of one CPU against gvx.EnvPool on both CPUs: the
  same total CPUs without one node's Ray processes running on another's.

Prints markdown. Run by benchmarks/run.sh (`ray`); needs root (unshare -n).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
DRIVER_SECONDS = 1200.0  # the whole benchmark, at its default sizes, takes a few minutes
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


def driver(address: str, n: int, rounds: int) -> None:
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

    class Sleeper:
        def sleep(self, seconds: float) -> tuple[Any, ...]:
            start = time.perf_counter()
            time.sleep(seconds)
            # Shaped as a pool's step of one environment.
            return [{}], [0.0], [False], [False], [{"wall_time": time.perf_counter() - start}]

    rows: list[tuple[str, list[float]]] = []
    # For a step, how much of it was not the environments' own step: the
    # driver's time less the longest info["wall_time"] (measured around the
    # exec where it runs), so that the exec's own noise does not hide the hop.
    outside: dict[str, list[float]] = {}
    empty: Any = ray.remote(Empty).options(scheduling_strategy=on_a, num_cpus=0).remote()
    rows.append(("Ray's floor: an empty actor method call", timed(lambda: ray.get(empty.call.remote()), n)))
    async_empty: Any = ray.remote(AsyncEmpty).options(scheduling_strategy=on_a, num_cpus=0).remote()
    rows.append(("Ray's floor: an empty asyncio actor method call", timed(lambda: ray.get(async_empty.call.remote()), n)))

    def step_row(name: str, step: Callable[[], Any], calls: int) -> float:
        """Times step; returns the p50 of the environments' own step time."""
        step()  # warm
        took, rest, inside = [], [], []
        for _ in range(calls):
            start = time.perf_counter()
            _, _, _, _, infos = step()
            took.append(time.perf_counter() - start)
            inside.append(max(float(i["wall_time"]) for i in infos))
            rest.append(took[-1] - inside[-1])
        rows.append((name, took))
        outside[name] = rest
        return statistics.median(inside)

    def pool_row(name: str, pool: Any, k: int, calls: int) -> float:
        pool.reset()
        return step_row(name, lambda: pool.step(["true"] * k), calls)

    sleeper: Any = ray.remote(Sleeper).options(scheduling_strategy=on_a, num_cpus=0).remote()
    local1, local8 = "gvx.EnvPool(1).step(['true']), in this process", "gvx.EnvPool(8).step(8 × 'true'), in this process"
    remote1, remote8 = "gvx.ray.EnvPool(1).step(['true']), on one node", "gvx.ray.EnvPool(8).step(8 × 'true'), all on one node"
    with gvx.EnvPool(1, warm=0) as local:
        one_step = pool_row(local1, local, 1, n)
    sleep1 = f"Ray's floor: a method that sleeps {ms(one_step)} (one step's p50)"
    step_row(sleep1, lambda: ray.get(sleeper.sleep.remote(one_step)), n)
    with gvx.ray.EnvPool(1, warm=0, resources_per_env={"node_a": 0.1}) as remote:
        pool_row(remote1, remote, 1, n)
    with gvx.EnvPool(8, warm=0) as local:
        batch_step = pool_row(local8, local, 8, n // 3)
    sleep8 = f"Ray's floor: a method that sleeps {ms(batch_step)} (a batch's p50)"
    step_row(sleep8, lambda: ray.get(sleeper.sleep.remote(batch_step)), n // 3)
    with gvx.ray.EnvPool(8, warm=0, resources_per_env={"node_a": 0.1}) as remote:
        pool_row(remote8, remote, 8, n // 3)

    print("| call | p50 | p99 | of which outside the environments' steps (or the sleep), p50 | calls |")
    print("| --- | --- | --- | --- | --- |")
    for name, xs in rows:
        p50, p99 = percentiles(xs)
        rest = ms(percentiles(outside[name])[0]) if name in outside else ""
        print(f"| {name} | {ms(p50)} | {ms(p99)} | {rest} | {len(xs)} |")
    median = {name: percentiles(xs)[0] for name, xs in rows}
    rest50 = {name: percentiles(xs)[0] for name, xs in outside.items()}
    one = rest50[remote1] - rest50[local1]
    eight = rest50[remote8] - rest50[local8]
    print()
    print("gvx's cost: the time outside the environments' steps through gvx.ray less that in this process, over each floor, p50 (target ≤ 0.3 ms)")
    for label in ("Ray's floor: an empty actor method call", "Ray's floor: an empty asyncio actor method call"):
        floor, what = median[label], label.removeprefix("Ray's floor: ")
        print(f"- over {what} ({ms(floor)}): {ms(one - floor)} for one environment, {ms(eight - floor)} for a batch of 8")
    print(f"- over a call as long as the step ({ms(rest50[sleep1])} / {ms(rest50[sleep8])} outside the sleep): "
          f"{ms(one - rest50[sleep1])} for one environment, {ms(eight - rest50[sleep8])} for a batch of 8")

    # Scaling: the same 12 environments on 1, 2 and 3 nodes that share the host's CPUs.
    print()
    scaling(
        [
            ("gvx.EnvPool, in this process", lambda: gvx.EnvPool(ENVS, warm=1)),
            ("gvx.ray.EnvPool on 1 node", lambda: gvx.ray.EnvPool(ENVS, warm=1, resources_per_env={"node_a": 0.01})),
            ("gvx.ray.EnvPool on 2 nodes", lambda: gvx.ray.EnvPool(ENVS, warm=1, resources_per_env={"pair": 0.1})),
            ("gvx.ray.EnvPool on 3 nodes", lambda: gvx.ray.EnvPool(ENVS, warm=1)),
        ],
        rounds,
    )


def driver_pinned(address: str, rounds: int) -> None:
    """Scaling on a cluster whose node_a and node_b each run on a CPU of
    their own: 2 nodes of one CPU against one process on both."""
    import gvx
    import gvx.ray
    from raycluster import connect

    connect(address)
    scaling(
        [
            ("gvx.EnvPool, in this process (2 CPUs)", lambda: gvx.EnvPool(ENVS, warm=1)),
            ("gvx.ray.EnvPool on 2 nodes of 1 CPU each", lambda: gvx.ray.EnvPool(ENVS, warm=1, resources_per_env={"pair": 0.1})),
        ],
        rounds,
    )


ENVS, STEPS = 12, 30  # the scaling comparison's environments, and batched steps per round


def settle(pool: Any) -> None:
    """Waits until every environment's next sandbox is prepared, so that no
    boot runs while steps are timed."""
    deadline = time.monotonic() + 120
    while pool.stats().warm < ENVS:
        if time.monotonic() > deadline:
            raise SystemExit(f"ray_hop: {ENVS} warm sandboxes were not ready within 120 s: {pool.stats()}")
        time.sleep(0.05)


def scaling(configs: list[tuple[str, Callable[[], Any]]], rounds: int) -> None:
    """Steps/s and reset latencies of each pool configs makes, against the
    first, in rounds that take each in turn; one pool is alive at a time, so
    each has the host's spin budget to itself. Prints a markdown table."""
    rates: dict[str, list[float]] = {name: [] for name, _ in configs}
    ratios: dict[str, list[float]] = {name: [] for name, _ in configs}
    resets: dict[str, list[float]] = {name: [] for name, _ in configs}
    used: dict[str, int] = {}
    for _ in range(rounds):
        for name, make in configs:
            with make() as pool:
                used[name] = len({p.node_id for p in pool.placement()}) if hasattr(pool, "placement") else 1
                pool.reset()
                for i in range(3 * ENVS):
                    start = time.perf_counter()
                    pool.reset_one(i % ENVS)
                    resets[name].append(time.perf_counter() - start)
                settle(pool)
                pool.step(["true"] * ENVS)
                start = time.perf_counter()
                for _ in range(STEPS):
                    pool.step(["true"] * ENVS)
                rates[name].append(ENVS * STEPS / (time.perf_counter() - start))
        base = rates[configs[0][0]][-1]
        for name, _ in configs:
            ratios[name].append(rates[name][-1] / base)

    print(f"| {ENVS} environments, {rounds} rounds | steps/s ({STEPS} batched steps of `true`), median (range) | reset p50 | reset p99 "
          "| × the first row in the same round, median (range) |")
    print("| --- | --- | --- | --- | --- |")
    for name, _ in configs:
        r50, r99 = percentiles(resets[name])
        label = name if name == configs[0][0] else f"{name} ({used[name]} used)"
        print(f"| {label} | {statistics.median(rates[name]):.0f} ({min(rates[name]):.0f}–{max(rates[name]):.0f}) | {ms(r50)} | {ms(r99)} "
              f"| {statistics.median(ratios[name]):.2f} ({min(ratios[name]):.2f}–{max(ratios[name]):.2f}) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=300, help="calls per latency row (default 300)")
    parser.add_argument("-rounds", type=int, default=5, help="rounds of the scaling comparison (default 5)")
    args = parser.parse_args()
    from raycluster import Cluster, skip_reason

    why = skip_reason()
    if why:
        raise SystemExit(f"ray_hop: {why}")
    with tempfile.TemporaryDirectory(prefix="gvxray-", dir="/tmp") as tmp:
        cluster = Cluster(Path(tmp))
        try:
            cluster.start()
            cluster.run(Path(__file__).resolve(), "driver", str(args.n), str(args.rounds), timeout=DRIVER_SECONDS)
        finally:
            cluster.stop()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("\n(no second CPU: the comparison with nodes on CPUs of their own is left out)")
        return
    with tempfile.TemporaryDirectory(prefix="gvxray-", dir="/tmp") as tmp:
        # node_c, unused, shares node_a's CPU.
        cluster = Cluster(Path(tmp), cpu_of={"node_a": cpus[0], "node_b": cpus[1], "node_c": cpus[0]})
        try:
            cluster.start()
            print()
            cluster.run(Path(__file__).resolve(), "pinned", str(args.rounds), timeout=DRIVER_SECONDS)
        finally:
            cluster.stop()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("driver", "pinned"):
        from raycluster import driver_alarm

        driver_alarm(DRIVER_SECONDS)
        if sys.argv[1] == "driver":
            driver(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        else:
            driver_pinned(sys.argv[2], int(sys.argv[3]))
    else:
        main()

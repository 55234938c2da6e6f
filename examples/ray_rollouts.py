"""Rollouts across a Ray cluster, written as a verl or SkyRL rollout worker writes them.

    python examples/ray_rollouts.py [--envs N] [--episodes M] [--max-steps S]

Each episode is a coroutine: it takes a free environment slot, resets it with
its own task (``reset_one_async(i, options=...)``), and steps it with the
policy's actions (``step_one_async``) until the task is solved or the episode
is truncated; ``asyncio.gather`` runs them all, so at most N sandboxes run
at once while M episodes go through. Nothing blocks the event loop: every
call awaits a Ray object reference, as verl's ``AgentLoopWorker`` awaits its
tools.

The cluster is whatever ``ray.init()`` finds: ``RAY_ADDRESS`` (``ray start
--head`` on one machine, ``ray start --address=...`` on the others), or a
local one started here. The environments spread over its nodes, one gvx
actor per node; ``gvx.ray.EnvPool.stats()`` shows where they ran.

The "policy" is a stand-in for a model: it reads the task's issue from the
sandbox and writes the answer it asks for. A dead node or sandbox ends its
episode truncated with ``info["sandbox_error"]``; the episode's trajectory
says so, and the slot's next reset lands on a live node.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any

import ray

import gvx
import gvx.ray

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--envs", type=int, default=6, help="environments running at once (default 6)")
parser.add_argument("--episodes", type=int, default=12, help="episodes to roll out (default 12)")
parser.add_argument("--max-steps", type=int, default=4, help="steps before an episode is truncated (default 4)")
parser.add_argument(
    "--resource",
    action="append",
    default=[],
    metavar="NAME=AMOUNT",
    help="Ray resources each environment reserves, as resources_per_env (repeatable; "
    "e.g. --resource gvx_slots=1 on examples/k8s's cluster; default: none, spread over every node)",
)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()


def solved(sb: gvx.Sandbox, action: str, result: gvx.ExecResult) -> float:
    """The reward, run on the node next to the sandbox: is /tmp/answer what the issue asks for?"""
    check = sb.exec("test \"$(cat /tmp/answer 2>/dev/null)\" = \"$(cat /task/expected)\"")
    return 1.0 if check.ok else 0.0


def is_solved(sb: gvx.Sandbox, action: str, result: gvx.ExecResult) -> bool:
    return solved(sb, action, result) > 0


@dataclass
class Trajectory:
    task: int
    actions: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)
    error: str = ""

    @property
    def solved(self) -> bool:
        return bool(self.rewards) and self.rewards[-1] > 0


def policy(observation: dict[str, Any], rng: random.Random) -> str:
    """A stand-in for the model: look at the issue, then answer it (sometimes wrongly)."""
    asked = re.search(r"write (\d+) to /tmp/answer", observation["stdout"])
    if asked is None:
        return "cat /task/ISSUE.md"
    answer = int(asked.group(1)) + rng.choice([0, 0, 1])
    return f"echo {answer} > /tmp/answer && cat /task/ISSUE.md"


async def episode(pool: gvx.ray.EnvPool, slots: asyncio.Queue[int], task: int, rng: random.Random) -> Trajectory:
    trajectory = Trajectory(task)
    slot = await slots.get()
    try:
        expected = 100 + task
        obs, info = await pool.reset_one_async(
            slot,
            seed=task,
            options={"files": {"/task/ISSUE.md": f"Task {task}: write {expected} to /tmp/answer\n", "/task/expected": str(expected)}},
        )
        trajectory.nodes.add(info["ray_node"])
        for _ in range(args.max_steps):
            action = policy(obs, rng)
            obs, reward, terminated, truncated, info = await pool.step_one_async(slot, action)
            trajectory.actions.append(action)
            trajectory.rewards.append(reward)
            trajectory.nodes.add(info.get("ray_node", ""))
            if "sandbox_error" in info:
                trajectory.error = info["sandbox_error"]
            if terminated or truncated:
                break
        return trajectory
    finally:
        slots.put_nowait(slot)


def resources() -> dict[str, float]:
    """--resource NAME=AMOUNT flags as resources_per_env."""
    out = {}
    for flag in args.resource:
        name, sep, amount = flag.partition("=")
        try:
            out[name] = float(amount)
        except ValueError:
            sep = ""
        if not sep or not name:
            parser.error(f"--resource {flag!r}: want NAME=AMOUNT, e.g. gvx_slots=1")
    return out


async def main() -> None:
    if not ray.is_initialized():
        ray.init(log_to_driver=False)
    rng = random.Random(args.seed)
    start = time.perf_counter()
    async with gvx.ray.EnvPool(
        args.envs, warm=1, reward_fn=solved, done_fn=is_solved, max_steps=args.max_steps, resources_per_env=resources() or None
    ) as pool:
        print(f"{args.envs} environments on {len({p.node_id for p in pool.placement()})} nodes in {time.perf_counter() - start:.1f} s")
        slots: asyncio.Queue[int] = asyncio.Queue()
        for i in range(args.envs):
            slots.put_nowait(i)
        start = time.perf_counter()
        trajectories = await asyncio.gather(*(episode(pool, slots, task, rng) for task in range(args.episodes)))
        elapsed = time.perf_counter() - start
        stats = await pool.stats_async()
    steps = sum(len(t.actions) for t in trajectories)
    print(
        f"{len(trajectories)} episodes, {steps} steps in {elapsed:.2f} s ({steps / elapsed:.1f} steps/s): "
        f"{sum(t.solved for t in trajectories)} solved, {sum(bool(t.error) for t in trajectories)} lost to a failure"
    )
    for node in stats.nodes:
        print(
            f"node {node.node[:12]} ({node.address}): {node.resets} resets (p50 {node.reset_p50 * 1000:.0f} ms), "
            f"{node.steps} steps (p50 {node.step_p50 * 1000:.0f} ms, p99 {node.step_p99 * 1000:.0f} ms), {node.failed} failed"
        )


asyncio.run(main())

"""What gvx.EnvPool and gvx.ray.EnvPool check the same way.

Both pools take a batch of actions and per-environment reset arguments; they
check them here, before any environment is touched, so that one bad entry
cannot leave some environments stepped and others not, and so that the two
pools cannot drift apart in what they accept or in the words they refuse with.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from . import errors
from ._task import episode_task

EpisodeOptions = Optional[dict[str, Any]]


def check_count(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise errors.InvalidArgumentError(f"n={n!r}: a pool needs at least one environment (an int >= 1)")


def check_index(i: int, n: int) -> None:
    if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n:
        raise errors.InvalidArgumentError(f"environment {i!r}: the pool has environments 0..{n - 1}")


def check_actions(actions: Sequence[str], n: int) -> list[str]:
    """The batch of actions, one shell command string per environment."""
    if isinstance(actions, str) or not isinstance(actions, Sequence):
        raise errors.InvalidArgumentError(f"actions must be a list of {n} shell commands, not {type(actions).__name__}")
    if len(actions) != n:
        raise errors.InvalidArgumentError(f"{len(actions)} actions for {n} environments: give one shell command each")
    bad = [i for i, a in enumerate(actions) if not isinstance(a, str)]
    if bad:
        raise errors.InvalidArgumentError(
            f"actions {bad[:8]} are not strings (the first is {type(actions[bad[0]]).__name__}): each action is a shell command"
        )
    return list(actions)


def reset_options(options: Optional[Sequence[EpisodeOptions]], n: int) -> list[EpisodeOptions]:
    """Each environment's episode task for a pool's reset, checked (see GvxEnv.reset)."""
    if options is None:
        return [None] * n
    if isinstance(options, dict) or not isinstance(options, Sequence) or len(options) != n:
        raise errors.InvalidArgumentError(
            f"reset(options=...) takes one episode task (a dict, or None) for each of the {n} environments, "
            "e.g. [{'files': {'/workspace/ISSUE.md': text}}, ...]; reset_one(i, options=...) takes one"
        )
    for o in options:
        episode_task(o)
    return list(options)


def seeds(seed: Optional[int], n: int) -> list[Optional[int]]:
    """A pool's reset seeds environment i with seed + i."""
    if seed is None:
        return [None] * n
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise errors.InvalidArgumentError(f"seed={seed!r}: give an int, or None")
    return [seed + i for i in range(n)]


@dataclass(frozen=True)
class NodeStats:
    """One node's part of a pool, from :meth:`EnvPool.stats`.

    Latencies are seconds, as the pool's caller saw them (for a Ray pool,
    including the hop to the node), over the last ``WINDOW`` resets and
    steps; 0.0 before the first.
    """

    node: str  # the Ray node id; "" for gvx.EnvPool's own machine
    address: str  # the node's address as Ray reports it; "" for gvx.EnvPool
    environments: int  # environments it hosts now
    live: int  # of them, with an episode running (reset, not yet terminated or truncated)
    warm: int  # sandboxes prepared and ready for the next resets
    failed: int  # episodes ended by a failed sandbox or a lost node, since the pool began
    resets: int
    steps: int
    reset_p50: float
    reset_p99: float
    step_p50: float
    step_p99: float
    error: str = ""  # why the pool stopped using the node; "" while it uses it


@dataclass(frozen=True)
class PoolStats:
    """A pool's environments, node by node."""

    nodes: tuple[NodeStats, ...]

    @property
    def environments(self) -> int:
        return sum(n.environments for n in self.nodes)

    @property
    def live(self) -> int:
        return sum(n.live for n in self.nodes)

    @property
    def warm(self) -> int:
        return sum(n.warm for n in self.nodes)

    @property
    def failed(self) -> int:
        return sum(n.failed for n in self.nodes)


WINDOW = 1024  # resets and steps each node's latency percentiles are taken over


def _percentile(samples: Sequence[float], p: int) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


@dataclass
class _NodeRecord:
    resets: int = 0
    steps: int = 0
    failed: int = 0
    reset_times: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    step_times: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))


class Tracker:
    """What both pools count for stats(): each environment's episode state,
    and each node's resets, steps, failures and latencies."""

    def __init__(self, n: int) -> None:
        self._live = [False] * n
        self._nodes: dict[str, _NodeRecord] = {}
        self._lock = threading.Lock()

    def _node(self, node: str) -> _NodeRecord:
        return self._nodes.setdefault(node, _NodeRecord())

    def reset(self, node: str, env: int, seconds: float) -> None:
        with self._lock:
            record = self._node(node)
            record.resets += 1
            record.reset_times.append(seconds)
            self._live[env] = True

    def step(self, node: str, env: int, seconds: float, terminated: bool, truncated: bool, info: dict[str, Any]) -> None:
        with self._lock:
            record = self._node(node)
            record.steps += 1
            record.step_times.append(seconds)
            if "sandbox_error" in info and self._live[env]:
                record.failed += 1
            self._live[env] = self._live[env] and not (terminated or truncated)

    def lost(self, node: str, envs: Sequence[int]) -> None:
        """envs' episodes ended with their node."""
        with self._lock:
            record = self._node(node)
            for env in envs:
                if self._live[env]:
                    record.failed += 1
                self._live[env] = False

    def node_stats(self, node: str, address: str, envs: Sequence[int], warm: int, error: str = "") -> NodeStats:
        with self._lock:
            record = self._node(node)
            return NodeStats(
                node=node,
                address=address,
                environments=len(envs),
                live=sum(1 for env in envs if self._live[env]),
                warm=warm,
                failed=record.failed,
                resets=record.resets,
                steps=record.steps,
                reset_p50=_percentile(record.reset_times, 50),
                reset_p99=_percentile(record.reset_times, 99),
                step_p50=_percentile(record.step_times, 50),
                step_p99=_percentile(record.step_times, 99),
                error=error,
            )

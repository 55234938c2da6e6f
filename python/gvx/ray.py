"""gvx episodes across a Ray cluster, with the API of one node.

:class:`EnvPool` spreads ``n`` environments over the cluster's nodes. Each
node runs one long-lived actor that hosts that node's environments as
in-process :class:`gvx.GvxEnv`\\ s, so a batched :meth:`EnvPool.step` is one
actor call per node, not one per environment. Ray places, ships and reports;
gvx only runs sandboxes on each node.

>>> import ray, gvx.ray
>>> ray.init()  # or ray.init(address=...) on a cluster
>>> with gvx.ray.EnvPool(24, warm=1) as pool:
...     observations, infos = pool.reset()
...     observations, rewards, terminated, truncated, infos = pool.step(["ls /"] * 24)

Needs the ``ray`` extra: ``pip install 'gvx[ray]'``. ``import gvx`` never
imports Ray.
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

try:
    import ray
    import ray.exceptions
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError as _e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        f"gvx.ray needs Ray, which is not installed ({_e}): pip install 'gvx[ray]'"
    ) from _e

from . import errors
from .env import GvxEnv

__all__ = ["EnvPool", "Placement"]

# What one environment's reset returns, and one step.
_Reset = tuple[dict[str, Any], dict[str, Any]]
_Step = tuple[dict[str, Any], float, bool, bool, dict[str, Any]]

# Ray's errors that mean an actor, or the node under it, is gone or cut off.
_LOST = (ray.exceptions.RayActorError, ray.exceptions.NodeDiedError, ray.exceptions.GetTimeoutError)


class _NodeHost:
    """The actor on one node: it owns that node's environments.

    Its sandboxes are children of its worker process, so they die with it,
    and the actor, not detached, dies with the driver that owns it.
    """

    def __init__(self, env_options: dict[str, Any], pin_cpus: bool) -> None:
        self._options = env_options
        self._pin_cpus = pin_cpus
        self._envs: dict[int, GvxEnv] = {}
        self._added = 0
        # Threads are made as calls need them: a batch of k environments uses k.
        self._threads = ThreadPoolExecutor(max_workers=1024, thread_name_prefix="gvx-ray-node")

    def pid(self) -> int:
        """The process that owns this node's sandboxes."""
        return os.getpid()

    def add(self, env_ids: list[int]) -> None:
        options = []
        cpus = sorted(os.sched_getaffinity(0))
        for _ in env_ids:
            o = dict(self._options)
            if self._pin_cpus:
                o["cpuset"] = [cpus[self._added % len(cpus)]]
            self._added += 1
            options.append(o)
        envs = list(self._threads.map(lambda o: GvxEnv(**o), options))
        self._envs.update(zip(env_ids, envs))

    def reset(self, items: list[tuple[int, Optional[int]]]) -> list[_Reset]:
        return list(self._threads.map(lambda item: self._envs[item[0]].reset(seed=item[1]), items))

    def step(self, items: list[tuple[int, str]]) -> list[_Step]:
        def one(item: tuple[int, str]) -> _Step:
            obs, reward, terminated, truncated, info = self._envs[item[0]].step(item[1])
            return obs, float(reward), terminated, truncated, info

        return list(self._threads.map(one, items))

    def close(self) -> None:
        envs, self._envs = list(self._envs.values()), {}
        list(self._threads.map(lambda e: e.close(), envs))


@dataclass(frozen=True)
class Placement:
    """Where one environment of an :class:`EnvPool` runs."""

    env: int
    node_id: str  # Ray's node id (hex); "" while the environment has no node
    address: str  # the node's address, as Ray reports it
    actor_pid: int  # the process on that node that owns the environment's sandboxes; 0 with no node


@dataclass
class _Host:
    """The driver's record of one node actor."""

    actor: Any
    node_id: str
    address: str
    pid: int
    envs: list[int] = field(default_factory=list)
    error: str = ""  # why the actor is no longer used; "" while it is

    def name(self) -> str:
        return f"Ray node {self.node_id} ({self.address})"


class EnvPool:
    """``n`` :class:`gvx.GvxEnv` environments spread over a Ray cluster's nodes.

    The same methods, results and semantics as :class:`gvx.EnvPool`; each info
    also carries ``"ray_node"``, the id of the node that ran the environment.

    Args:
        n: how many environments.
        image, warm, **env_options: as for :class:`gvx.GvxEnv` (``setup``,
            ``reward_fn``, ``max_steps``, ``step_timeout``, …); functions are
            shipped to the nodes by Ray.
        pin_cpus: as for :class:`gvx.EnvPool`, per node.
        resources_per_env: Ray resources one environment takes, e.g.
            ``{"CPU": 1, "memory": 2 << 30}`` or a custom resource the nodes
            advertise for sandbox slots (``ray start --resources='{"gvx_slots": 64}'``
            with ``{"gvx_slots": 1}``). Each node's actor reserves them for the
            environments it hosts; by default environments take none and are
            spread evenly over every alive node.
        runtime_env: Ray's runtime environment for the node actors (for
            example ``{"env_vars": {...}}``).
        start_timeout: seconds a node actor may take to start and make its
            environments.
        reset_timeout: seconds a reset may take on a node (booting, ``setup``
            and the episode's task).
        grace: seconds a step's remote call may take beyond ``step_timeout``.

    A node or actor that dies, or does not answer within its deadline, ends
    the episodes it hosted: their next step returns ``truncated=True`` with
    ``info["sandbox_error"]`` naming the node, and their next reset starts them
    on a live node.
    """

    def __init__(
        self,
        n: int,
        *,
        image: Optional[str] = None,
        warm: Union[bool, int] = True,
        pin_cpus: bool = False,
        resources_per_env: Optional[Mapping[str, float]] = None,
        runtime_env: Optional[dict[str, Any]] = None,
        start_timeout: float = 300.0,
        reset_timeout: float = 900.0,
        grace: float = 30.0,
        **env_options: Any,
    ) -> None:
        if n < 1:
            raise errors.InvalidArgumentError(f"n={n}: a pool needs at least one environment")
        if pin_cpus and "cpuset" in env_options:
            raise errors.InvalidArgumentError("pin_cpus=True chooses each environment's cpuset; drop cpuset=")
        if min(start_timeout, reset_timeout, grace) <= 0:
            raise errors.InvalidArgumentError(
                f"start_timeout, reset_timeout and grace are seconds > 0 (got {start_timeout}, {reset_timeout}, {grace})"
            )
        demand = dict(resources_per_env or {})
        if any(not isinstance(v, (int, float)) or v < 0 for v in demand.values()):
            raise errors.InvalidArgumentError(f"resources_per_env={demand!r}: give amounts >= 0, e.g. {{'CPU': 1}}")
        self._demand = {k: float(v) for k, v in demand.items() if v > 0}
        self._env_options = {"image": image, "warm": warm, **env_options}
        self._pin_cpus = pin_cpus
        self._runtime_env = runtime_env
        self._start_timeout = start_timeout
        self._reset_timeout = reset_timeout
        self._step_deadline = float(env_options.get("step_timeout", 60.0)) + grace
        self._max_output = int(env_options.get("max_output", 8192))
        self._hosts: list[_Host] = []
        self._where: list[Optional[_Host]] = [None] * n
        self._lost: dict[int, str] = {}  # env -> why its episode ended with its node
        self._steps = [0] * n
        self._closed = False
        # Checks the options here, not on every node.
        GvxEnv(**self._env_options).close()
        if not ray.is_initialized():
            ray.init()
        try:
            self._place(list(range(n)), avoid=set())
        except BaseException:
            self.close()
            raise

    # Placement.

    def _alive_nodes(self) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        return sorted((node for node in nodes if node.get("Alive")), key=lambda node: str(node["NodeID"]))

    def _capacity(self, node: Mapping[str, Any]) -> float:
        """How many environments a node's resources hold (inf with no demand)."""
        total = node.get("Resources", {})
        return min((math.floor(total.get(r, 0.0) / need) for r, need in self._demand.items()), default=math.inf)

    def _place(self, envs: list[int], avoid: set[str]) -> None:
        """Starts envs on alive nodes, spread evenly, preferring nodes not in avoid.

        Without a resource demand an environment joins the node's live actor;
        with one a new actor reserves the resources for the environments it gets,
        since an actor's reservation cannot grow.
        """
        nodes = self._alive_nodes()
        if not nodes:
            raise errors.GvxError("the Ray cluster has no alive node: start one (ray start) and try again")
        load = {str(node["NodeID"]): 0 for node in nodes}
        for host in self._hosts:
            if not host.error and host.node_id in load:
                load[host.node_id] += len(host.envs)
        room = {str(node["NodeID"]): self._capacity(node) - load[str(node["NodeID"])] for node in nodes}
        addresses = {str(node["NodeID"]): str(node.get("NodeManagerAddress", "")) for node in nodes}
        plan: dict[str, list[int]] = {}
        for env in envs:
            candidates = [nid for nid in load if room[nid] >= 1]
            if not candidates:
                raise errors.GvxError(
                    f"the Ray cluster has room for {sum(len(v) for v in plan.values())} more environments "
                    f"of {len(envs)} asked, at resources_per_env={self._demand}: add nodes, or ask for fewer resources"
                )
            nid = min(candidates, key=lambda c: (c in avoid, load[c], c))
            plan.setdefault(nid, []).append(env)
            load[nid] += 1
            room[nid] -= 1
        # Every node's actor starts and makes its environments at once; then
        # the driver waits, with one deadline for all.
        pending: list[tuple[_Host, Any, Any, list[int]]] = []
        for nid, batch in plan.items():
            live = None if self._demand else next((h for h in self._hosts if h.node_id == nid and not h.error), None)
            pid = None
            if live is None:
                host = self._start_host(nid, addresses[nid], len(batch))
                pid = host.actor.pid.remote()
            else:
                host = live
            pending.append((host, pid, host.actor.add.remote(batch), batch))
        deadline = time.monotonic() + self._start_timeout
        failures = []
        for host, pid, ref, batch in pending:
            try:
                if pid is not None:
                    host.pid = self._get(pid, deadline)
                self._get(ref, deadline)
            except _LOST as e:
                self._retire(host, _why(e, f"did not start within start_timeout={self._start_timeout:g}s"))
                failures.append(host.name())
                continue
            host.envs.extend(batch)
            for env in batch:
                self._where[env] = host
                self._lost.pop(env, None)
        if failures:
            raise errors.GvxError(
                f"could not start environments on {', '.join(failures)} within start_timeout={self._start_timeout:g}s: "
                "check those nodes' resources with `ray status` and their logs under /tmp/ray/session_latest/logs"
            )

    def _start_host(self, node_id: str, address: str, envs: int) -> _Host:
        """Creates the actor on node_id that will host envs environments."""
        options: dict[str, Any] = {
            "num_cpus": envs * self._demand.get("CPU", 0.0),
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
            "max_restarts": 0,
            "max_task_retries": 0,
        }
        if "GPU" in self._demand:
            options["num_gpus"] = envs * self._demand["GPU"]
        if "memory" in self._demand:
            options["memory"] = envs * self._demand["memory"]
        custom = {k: envs * v for k, v in self._demand.items() if k not in ("CPU", "GPU", "memory")}
        if custom:
            options["resources"] = custom
        if self._runtime_env is not None:
            options["runtime_env"] = self._runtime_env
        actor = ray.remote(_NodeHost).options(**options).remote(self._env_options, self._pin_cpus)
        host = _Host(actor=actor, node_id=node_id, address=address, pid=0)
        self._hosts.append(host)
        return host

    def _get(self, ref: Any, deadline: float) -> Any:
        """ray.get with a deadline; a task's own error is raised as itself."""
        try:
            return ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
        except ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, BaseException) and not isinstance(e.cause, _LOST):
                raise e.cause from None
            raise

    def _retire(self, host: _Host, why: str) -> None:
        """Stops using a host whose actor died or stopped answering; its episodes end."""
        if host.error:
            return
        host.error = why
        message = f"the gvx actor on {host.name()} {why}; the episode is over, and reset() starts the next one on a live node"
        for env in host.envs:
            self._where[env] = None
            self._lost[env] = message
        host.envs = []
        try:
            ray.kill(host.actor, no_restart=True)  # its sandboxes die with its process
        except Exception:  # noqa: BLE001 - the actor may already be gone with its node
            pass

    # The EnvPool API.

    def __len__(self) -> int:
        return len(self._where)

    def placement(self) -> list[Placement]:
        """Where each environment runs now."""
        out = []
        for env, host in enumerate(self._where):
            if host is None:
                out.append(Placement(env, "", "", 0))
            else:
                out.append(Placement(env, host.node_id, host.address, host.pid))
        return out

    def _check_open(self) -> None:
        if self._closed:
            raise errors.SandboxClosedError("the pool is closed; create a new gvx.ray.EnvPool")

    def reset(self, *, seed: Optional[int] = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Resets every environment; seeds are ``seed + i`` when given."""
        results = self._reset([(i, None if seed is None else seed + i) for i in range(len(self))])
        return [results[i][0] for i in range(len(self))], [results[i][1] for i in range(len(self))]

    def reset_one(self, i: int, *, seed: Optional[int] = None) -> tuple[dict[str, Any], dict[str, Any]]:
        if not 0 <= i < len(self):
            raise errors.InvalidArgumentError(f"environment {i}: the pool has 0..{len(self) - 1}")
        return self._reset([(i, seed)])[i]

    def _reset(self, items: list[tuple[int, Optional[int]]]) -> dict[int, _Reset]:
        self._check_open()
        seeds = dict(items)
        out: dict[int, _Reset] = {}
        todo = [env for env, _ in items]
        failed: list[str] = []
        # Two rounds: environments whose node fails during a reset start again
        # on another node once.
        for _ in range(2):
            orphans = [env for env in todo if self._where[env] is None]
            if orphans:
                self._place(orphans, avoid={h.node_id for h in self._hosts if h.error})
            by_host: dict[int, tuple[_Host, list[int]]] = {}
            for env in todo:
                host = self._where[env]
                assert host is not None
                by_host.setdefault(id(host), (host, []))[1].append(env)
            calls = [(host, envs, host.actor.reset.remote([(e, seeds[e]) for e in envs])) for host, envs in by_host.values()]
            deadline = time.monotonic() + self._reset_timeout
            todo, failed = [], []
            for host, envs, ref in calls:
                try:
                    results = self._get(ref, deadline)
                except _LOST as e:
                    self._retire(host, _why(e, f"did not finish a reset within reset_timeout={self._reset_timeout:g}s"))
                    failed.append(f"{host.name()}: {host.error}")
                    todo.extend(envs)
                    continue
                for env, (obs, info) in zip(envs, results):
                    self._steps[env] = 0
                    out[env] = (obs, {**info, "ray_node": host.node_id})
            if not todo:
                return out
        raise errors.GvxError(
            f"environments {sorted(todo)} could not be reset on two nodes in turn ({'; '.join(failed)}): "
            "check the cluster with `ray status`"
        )

    def step(
        self, actions: Sequence[str]
    ) -> tuple[list[dict[str, Any]], list[float], list[bool], list[bool], list[dict[str, Any]]]:
        """Steps environment i with actions[i], all at once: one remote call per node."""
        self._check_open()
        if len(actions) != len(self):
            raise errors.InvalidArgumentError(f"{len(actions)} actions for {len(self)} environments")
        start = time.perf_counter()
        results: list[Optional[_Step]] = [None] * len(self)
        by_host: dict[int, tuple[_Host, list[int]]] = {}
        for env, host in enumerate(self._where):
            if host is None:
                continue
            by_host.setdefault(id(host), (host, []))[1].append(env)
        calls = [(host, envs, host.actor.step.remote([(e, actions[e]) for e in envs])) for host, envs in by_host.values()]
        deadline = time.monotonic() + self._step_deadline
        for host, envs, ref in calls:
            try:
                got = self._get(ref, deadline)
            except _LOST as e:
                self._retire(host, _why(e, f"did not finish a step within {self._step_deadline:g}s (step_timeout plus grace)"))
                continue
            for env, (obs, reward, terminated, truncated, info) in zip(envs, got):
                self._steps[env] = int(info.get("step", self._steps[env] + 1))
                results[env] = (obs, reward, terminated, truncated, {**info, "ray_node": host.node_id})
        for env in range(len(self)):
            if results[env] is None:
                self._steps[env] += 1
                results[env] = self._failed_step(env, start)
        done = [r for r in results if r is not None]
        return (
            [r[0] for r in done],
            [r[1] for r in done],
            [r[2] for r in done],
            [r[3] for r in done],
            [r[4] for r in done],
        )

    def _failed_step(self, env: int, start: float) -> _Step:
        """The step of an episode whose node failed, as GvxEnv's failed step."""
        message = self._lost.get(env)
        if message is None:
            raise errors.GvxError(f"environment {env}: no episode is running: call reset() first")
        obs = {"stdout": "", "stderr": message[: self._max_output], "exit_code": 255}
        info = {"step": self._steps[env], "wall_time": time.perf_counter() - start, "sandbox_error": message}
        return obs, 0.0, False, True, info

    def close(self) -> None:
        """Closes every environment and ends the node actors. Calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        hosts = [h for h in self._hosts if not h.error]
        calls = [(h, h.actor.close.remote()) for h in hosts]
        deadline = time.monotonic() + self._start_timeout
        for host, ref in calls:
            try:
                self._get(ref, deadline)
            except Exception:  # noqa: BLE001 - killing the actor below ends its sandboxes anyway
                pass
        for host in self._hosts:
            try:
                ray.kill(host.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._hosts = []
        self._where = [None] * len(self._where)

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _why(error: BaseException, timed_out: str) -> str:
    """Why a host is retired, from the Ray error of a call to it."""
    if isinstance(error, ray.exceptions.GetTimeoutError):
        return f"{timed_out} and was killed"
    text = str(error).strip()
    return f"died ({type(error).__name__}: {text.splitlines()[0] if text else 'no message'})"

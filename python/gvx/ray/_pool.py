"""gvx.ray.EnvPool: gvx.EnvPool's environments spread over a Ray cluster.

Each node runs a threaded actor (_NodeHost) that hosts that node's
environments as in-process GvxEnvs; the driver's EnvPool places them, sends
each node its part of a batch in one call, and turns a lost node into
truncated episodes.
"""

from __future__ import annotations

import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, TypeVar, Union

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .. import _pool, errors
from ..env import GvxEnv
from ._provision import Provisioned, provision, recipes_out
from ._remote import Call, Lost, Plan, run, run_async, value

# What one environment's reset returns, and one step.
_Reset = tuple[dict[str, Any], dict[str, Any]]
_Step = tuple[dict[str, Any], float, bool, bool, dict[str, Any]]

_T = TypeVar("_T")
_R = TypeVar("_R")


class _NodeHost:
    """The actor on one node: it owns that node's environments.

    Its sandboxes are children of its worker process, so they die with it,
    and the actor, not detached, dies with the driver that owns it. It is a
    threaded actor: Ray runs each call in a thread of the actor's own, as
    many at once as the environments it was made for (see _Host.slots), and
    a call runs its environment's work in that thread. An asyncio actor
    would hand every call to its event loop and from there to a thread,
    which costs a step more than Ray's own call does; a batch still fans out
    to one thread per environment, the calling thread taking the first.
    """

    def __init__(self, env_options: dict[str, Any], pin_cpus: bool) -> None:
        self._recipes = env_options
        self._options: Optional[dict[str, Any]] = None  # env_options once provisioned on this node
        self._provisioning = threading.Lock()
        self._pin_cpus = pin_cpus
        self._envs: dict[int, GvxEnv] = {}
        self._added = 0
        # A batch's other environments run here; threads are made as batches need them.
        self._threads = ThreadPoolExecutor(max_workers=1024, thread_name_prefix="gvx-ray-node")

    def _each(self, fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
        """fn of each item, at once; the calling thread runs the first."""
        rest = [self._threads.submit(fn, item) for item in items[1:]]
        try:
            first = [fn(items[0])] if items else []
        finally:
            wait(rest)  # every item's work ends before the call returns, even when the first fails
        return first + [f.result() for f in rest]

    def add(self, env_ids: list[int]) -> tuple[int, list[Provisioned]]:
        """Makes the environments env_ids, provisioning this node first if need
        be; returns the process that owns their sandboxes and what it provisioned."""
        made: list[Provisioned] = []
        with self._provisioning:
            if self._options is None:
                self._options, made = provision(ray.get_runtime_context().get_node_id(), self._recipes)
            base: dict[str, Any] = self._options
            options = []
            cpus = sorted(os.sched_getaffinity(0))
            for _ in env_ids:
                o = dict(base)
                if self._pin_cpus:
                    o["cpuset"] = [cpus[self._added % len(cpus)]]
                self._added += 1
                options.append(o)
        envs = self._each(lambda o: GvxEnv(**o), options)
        self._envs.update(zip(env_ids, envs))
        return os.getpid(), made

    def reset(self, items: list[tuple[int, Optional[int], Optional[dict[str, Any]]]]) -> list[_Reset]:
        return self._each(lambda item: self._envs[item[0]].reset(seed=item[1], options=item[2]), items)

    def step(self, items: list[tuple[int, str]]) -> list[_Step]:
        def one(item: tuple[int, str]) -> _Step:
            obs, reward, terminated, truncated, info = self._envs[item[0]].step(item[1])
            return obs, float(reward), terminated, truncated, info

        return self._each(one, items)

    def warm(self) -> int:
        """How many prepared sandboxes wait, ready, in this node's environments."""
        return sum(env.ready for env in list(self._envs.values()))

    def close(self) -> None:
        envs, self._envs = list(self._envs.values()), {}
        self._each(lambda e: e.close(), envs)


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
    slots: int  # how many environments the actor was made for: one call at a time each
    envs: list[int] = field(default_factory=list)
    error: str = ""  # why the actor is no longer used; "" while it is

    def name(self) -> str:
        return f"Ray node {self.node_id} ({self.address})"


class EnvPool:
    """``n`` :class:`gvx.GvxEnv` environments spread over a Ray cluster's nodes.

    The same methods, results and semantics as :class:`gvx.EnvPool`; each info
    also carries ``"ray_node"``, the id of the node that ran the environment.
    Every method has an asyncio twin (``await pool.step_async(actions)``) that
    awaits Ray's object references instead of blocking a thread, for rollout
    loops written as coroutines; ``step_one_async(i, action)`` steps one
    environment, so each episode can be its own coroutine.

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
    on a live node. An episode task's ``upload`` paths (``reset(options=...)``)
    are read on the node that hosts the environment.
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
        _pool.check_count(n)
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
        self._tracker = _pool.Tracker(n)
        self._closed = False
        # Held while a plan runs between its waits: threads and coroutines may
        # step different environments at once.
        self._lock = threading.Lock()
        self._provisioning: list[Provisioned] = []
        # Checks the options here, not on every node (recipes are checked when made).
        GvxEnv(**recipes_out(self._env_options)).close()
        if not ray.is_initialized():
            ray.init()
        try:
            self._run(self._place(list(range(n)), avoid=set()))
        except BaseException:
            self.close()
            raise

    def _run(self, plan: Plan[_R]) -> _R:
        return run(plan, self._lock)

    async def _run_async(self, plan: Plan[_R]) -> _R:
        return await run_async(plan, self._lock)

    # Placement.

    def _alive_nodes(self) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        return sorted((node for node in nodes if node.get("Alive")), key=lambda node: str(node["NodeID"]))

    def _capacity(self, node: Mapping[str, Any]) -> float:
        """How many environments a node's resources hold (inf with no demand)."""
        total = node.get("Resources", {})
        return min((math.floor(total.get(r, 0.0) / need) for r, need in self._demand.items()), default=math.inf)

    def _place(self, envs: list[int], avoid: set[str]) -> Plan[None]:
        """Starts envs on alive nodes, spread evenly, preferring nodes not in avoid.

        Without a resource demand an environment joins the node's live actor
        if that actor has a call to spare for it (its threads are fixed when
        it is made); otherwise, and always with a demand, a new actor is made
        for the environments it gets, since an actor's reservation cannot grow.
        A node whose actor dies while starting (the cluster may not yet know
        the node is gone) is left out and its environments go to the others,
        within the same start_timeout.
        """
        deadline = time.monotonic() + self._start_timeout
        failed: dict[str, str] = {}  # node: why its actor did not start
        while envs:
            nodes = [node for node in self._alive_nodes() if str(node["NodeID"]) not in failed]
            if not nodes:
                raise errors.GvxError(self._no_start(failed) or "the Ray cluster has no alive node: start one (ray start) and try again")
            plan = self._spread(envs, nodes, avoid)
            addresses = {str(node["NodeID"]): str(node.get("NodeManagerAddress", "")) for node in nodes}
            # Every node's actor starts and makes its environments at once; then
            # the pool waits, with one deadline for all.
            calls, hosts, batches = [], [], []
            for nid, batch in plan.items():
                live = None if self._demand else next((h for h in self._hosts if self._joins(h, nid, batch)), None)
                host = live if live is not None else self._start_host(nid, addresses[nid], len(batch))
                calls.append(Call(host.name(), host.actor.add.remote(batch), deadline))
                hosts.append(host)
                batches.append(batch)
            outcomes = yield calls
            envs = []
            for host, batch, outcome in zip(hosts, batches, outcomes):
                started = value(outcome)
                if isinstance(started, Lost):
                    why = started.why(f"did not start within start_timeout={self._start_timeout:g}s")
                    self._retire(host, why)
                    failed[host.node_id] = f"{host.name()} {why}"
                    envs.extend(batch)
                    continue
                host.pid, provisioned = started
                self._provisioning.extend(provisioned)
                host.envs.extend(batch)
                for env in batch:
                    self._where[env] = host
                    self._lost.pop(env, None)
            if envs and time.monotonic() >= deadline:
                raise errors.GvxError(self._no_start(failed))
            envs.sort()

    @staticmethod
    def _joins(host: _Host, node_id: str, batch: list[int]) -> bool:
        """Whether batch may join host, a live actor on node_id with calls to spare for it."""
        return host.node_id == node_id and not host.error and len(host.envs) + len(batch) <= host.slots

    def _spread(self, envs: list[int], nodes: list[dict[str, Any]], avoid: set[str]) -> dict[str, list[int]]:
        """Which of nodes each of envs goes to, evenly over the environments
        the pool has there, preferring nodes not in avoid."""
        load = {str(node["NodeID"]): 0 for node in nodes}
        for host in self._hosts:
            if not host.error and host.node_id in load:
                load[host.node_id] += len(host.envs)
        room = {str(node["NodeID"]): self._capacity(node) - load[str(node["NodeID"])] for node in nodes}
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
        return plan

    @staticmethod
    def _no_start(failed: Mapping[str, str]) -> str:
        """The error for environments that could not be started, naming why on each node."""
        if not failed:
            return ""
        return (
            f"could not start environments: the gvx actor on {'; on '.join(failed.values())}; "
            "check those nodes with `ray status` and their logs under /tmp/ray/session_latest/logs"
        )

    def _start_host(self, node_id: str, address: str, envs: int) -> _Host:
        """Creates the actor on node_id that will host envs environments."""
        options: dict[str, Any] = {
            "num_cpus": envs * self._demand.get("CPU", 0.0),
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
            "max_restarts": 0,
            "max_task_retries": 0,
            # One call in flight per environment (a step_one_async coroutine
            # each), and two to spare for stats and close meanwhile.
            "max_concurrency": envs + 2,
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
        host = _Host(actor=actor, node_id=node_id, address=address, pid=0, slots=envs)
        self._hosts.append(host)
        return host

    def _retire(self, host: _Host, why: str) -> None:
        """Stops using a host whose actor died or stopped answering; its episodes end."""
        if host.error:
            return
        host.error = why
        message = f"the gvx actor on {host.name()} {why}; the episode is over, and reset() starts the next one on a live node"
        for env in host.envs:
            self._where[env] = None
            self._lost[env] = message
        self._tracker.lost(host.node_id, host.envs)
        host.envs = []
        try:
            ray.kill(host.actor, no_restart=True)  # its sandboxes die with its process
        except Exception:  # noqa: BLE001 - the actor may already be gone with its node
            pass

    @staticmethod
    def _by_host(envs: Sequence[int], where: Sequence[Optional[_Host]]) -> list[tuple[_Host, list[int]]]:
        """envs grouped by the host they are on; envs with none are left out."""
        groups: dict[int, tuple[_Host, list[int]]] = {}
        for env in envs:
            host = where[env]
            if host is not None:
                groups.setdefault(id(host), (host, []))[1].append(env)
        return list(groups.values())

    # The plans behind the EnvPool API.

    def _reset_plan(self, items: list[tuple[int, Optional[int], Optional[dict[str, Any]]]]) -> Plan[dict[int, _Reset]]:
        self._check_open()
        args = {env: (env, seed, options) for env, seed, options in items}
        out: dict[int, _Reset] = {}
        todo = [env for env, _, _ in items]
        failed: list[str] = []
        # Two rounds: environments whose node fails during a reset start again
        # on another node once.
        for _ in range(2):
            start = time.perf_counter()
            orphans = [env for env in todo if self._where[env] is None]
            if orphans:
                yield from self._place(orphans, avoid={h.node_id for h in self._hosts if h.error})
            deadline = time.monotonic() + self._reset_timeout
            groups = self._by_host(todo, self._where)
            outcomes = yield [Call(host.name(), host.actor.reset.remote([args[e] for e in envs]), deadline) for host, envs in groups]
            todo, failed = [], []
            for (host, envs), outcome in zip(groups, outcomes):
                results = value(outcome)
                if isinstance(results, Lost):
                    self._retire(host, results.why(f"did not finish a reset within reset_timeout={self._reset_timeout:g}s"))
                    failed.append(f"{host.name()}: {host.error}")
                    todo.extend(envs)
                    continue
                for env, (obs, info) in zip(envs, results):
                    self._steps[env] = 0
                    self._tracker.reset(host.node_id, env, time.perf_counter() - start)
                    out[env] = (obs, {**info, "ray_node": host.node_id})
            if not todo:
                return out
        raise errors.GvxError(
            f"environments {sorted(todo)} could not be reset on two nodes in turn ({'; '.join(failed)}): "
            "check the cluster with `ray status`"
        )

    def _step_plan(self, actions: dict[int, str]) -> Plan[dict[int, _Step]]:
        self._check_open()
        start = time.perf_counter()
        deadline = time.monotonic() + self._step_deadline
        groups = self._by_host(list(actions), self._where)
        outcomes = yield [Call(host.name(), host.actor.step.remote([(e, actions[e]) for e in envs]), deadline) for host, envs in groups]
        results: dict[int, _Step] = {}
        for (host, envs), outcome in zip(groups, outcomes):
            got = value(outcome)
            if isinstance(got, Lost):
                self._retire(host, got.why(f"did not finish a step within {self._step_deadline:g}s (step_timeout plus grace)"))
                continue
            for env, (obs, reward, terminated, truncated, info) in zip(envs, got):
                self._steps[env] = int(info.get("step", self._steps[env] + 1))
                results[env] = (obs, reward, terminated, truncated, {**info, "ray_node": host.node_id})
                self._tracker.step(host.node_id, env, time.perf_counter() - start, terminated, truncated, info)
        for env in actions:
            if env not in results:
                self._steps[env] += 1
                results[env] = self._failed_step(env, start)
        return results

    def _stats_plan(self) -> Plan[_pool.PoolStats]:
        self._check_open()
        deadline = time.monotonic() + 30.0
        live = [h for h in self._hosts if not h.error]
        outcomes = yield [Call(h.name(), h.actor.warm.remote(), deadline) for h in live]
        warm: dict[str, int] = {}
        for host, outcome in zip(live, outcomes):
            ready = value(outcome)
            warm[host.node_id] = warm.get(host.node_id, 0) + (0 if isinstance(ready, Lost) else int(ready))
        # A node may have several actors (one per placement with a resource
        # demand); its stats are theirs together.
        nodes = []
        for node in dict.fromkeys(h.node_id for h in self._hosts):
            hosts = [h for h in self._hosts if h.node_id == node]
            alive = [h for h in hosts if not h.error]
            envs = [env for h in alive for env in h.envs]
            error = "" if alive else hosts[-1].error
            nodes.append(self._tracker.node_stats(node, hosts[0].address, envs, warm.get(node, 0), error))
        return _pool.PoolStats(tuple(nodes))

    def _failed_step(self, env: int, start: float) -> _Step:
        """The step of an episode whose node failed, as GvxEnv's failed step."""
        message = self._lost.get(env)
        if message is None:
            raise errors.GvxError(f"environment {env}: no episode is running: call reset() first")
        obs = {"stdout": "", "stderr": message[: self._max_output], "exit_code": 255}
        info = {"step": self._steps[env], "wall_time": time.perf_counter() - start, "sandbox_error": message}
        return obs, 0.0, False, True, info

    def _close_plan(self) -> Plan[None]:
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + self._start_timeout
        # Killing the actors below ends their sandboxes anyway; closing first
        # lets each environment delete its episode clones.
        yield [Call(h.name(), h.actor.close.remote(), deadline) for h in self._hosts if not h.error]
        for host in self._hosts:
            try:
                ray.kill(host.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._hosts = []
        self._where = [None] * len(self._where)

    # The EnvPool API.

    def __len__(self) -> int:
        return len(self._where)

    @property
    def provisioning(self) -> tuple[Provisioned, ...]:
        """What each node made or found for this pool: the image, the golden
        volume, the snapshot (``made=False``: it was in the node's cache)."""
        return tuple(self._provisioning)

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

    def _reset_items(
        self, seed: Optional[int], options: Optional[Sequence[Optional[dict[str, Any]]]]
    ) -> list[tuple[int, Optional[int], Optional[dict[str, Any]]]]:
        self._check_open()
        return list(zip(range(len(self)), _pool.seeds(seed, len(self)), _pool.reset_options(options, len(self))))

    def _reset_one_items(
        self, i: int, seed: Optional[int], options: Optional[dict[str, Any]]
    ) -> list[tuple[int, Optional[int], Optional[dict[str, Any]]]]:
        self._check_open()
        _pool.check_index(i, len(self))
        _pool.reset_options([options], 1)
        return [(i, seed, options)]

    def _step_one_actions(self, i: int, action: str) -> dict[int, str]:
        self._check_open()
        _pool.check_index(i, len(self))
        return {i: _pool.check_actions([action], 1)[0]}

    def _step_actions(self, actions: Sequence[str]) -> dict[int, str]:
        self._check_open()
        return dict(enumerate(_pool.check_actions(actions, len(self))))

    def reset(
        self, *, seed: Optional[int] = None, options: Optional[Sequence[Optional[dict[str, Any]]]] = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Resets every environment; seeds are ``seed + i`` when given, and
        ``options[i]`` is environment i's episode task (see :meth:`gvx.GvxEnv.reset`)."""
        return _split_resets(self._run(self._reset_plan(self._reset_items(seed, options))), len(self))

    async def reset_async(
        self, *, seed: Optional[int] = None, options: Optional[Sequence[Optional[dict[str, Any]]]] = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The asyncio twin of :meth:`reset`."""
        return _split_resets(await self._run_async(self._reset_plan(self._reset_items(seed, options))), len(self))

    def reset_one(
        self, i: int, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Resets environment i alone (its episode ended while others run on)."""
        return self._run(self._reset_plan(self._reset_one_items(i, seed, options)))[i]

    async def reset_one_async(
        self, i: int, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The asyncio twin of :meth:`reset_one`."""
        return (await self._run_async(self._reset_plan(self._reset_one_items(i, seed, options))))[i]

    def step(
        self, actions: Sequence[str]
    ) -> tuple[list[dict[str, Any]], list[float], list[bool], list[bool], list[dict[str, Any]]]:
        """Steps environment i with actions[i], all at once: one remote call per node."""
        return _split_steps(self._run(self._step_plan(self._step_actions(actions))), len(self))

    async def step_async(
        self, actions: Sequence[str]
    ) -> tuple[list[dict[str, Any]], list[float], list[bool], list[bool], list[dict[str, Any]]]:
        """The asyncio twin of :meth:`step`."""
        return _split_steps(await self._run_async(self._step_plan(self._step_actions(actions))), len(self))

    def step_one(self, i: int, action: str) -> _Step:
        """Steps environment i alone; returns ``(obs, reward, terminated, truncated, info)``."""
        return self._run(self._step_plan(self._step_one_actions(i, action)))[i]

    async def step_one_async(self, i: int, action: str) -> _Step:
        """The asyncio twin of :meth:`step_one`: each episode can be a coroutine of its own."""
        return (await self._run_async(self._step_plan(self._step_one_actions(i, action))))[i]

    def stats(self) -> _pool.PoolStats:
        """Per node: live, warm and failed environments, and reset and step
        latencies as this driver saw them (the Ray hop included)."""
        return self._run(self._stats_plan())

    async def stats_async(self) -> _pool.PoolStats:
        """The asyncio twin of :meth:`stats`."""
        return await self._run_async(self._stats_plan())

    def close(self) -> None:
        """Closes every environment and ends the node actors. Calling it again does nothing."""
        self._run(self._close_plan())

    async def close_async(self) -> None:
        """The asyncio twin of :meth:`close`."""
        await self._run_async(self._close_plan())

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "EnvPool":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close_async()


def _split_resets(results: dict[int, _Reset], n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return [results[i][0] for i in range(n)], [results[i][1] for i in range(n)]


def _split_steps(
    results: dict[int, _Step], n: int
) -> tuple[list[dict[str, Any]], list[float], list[bool], list[bool], list[dict[str, Any]]]:
    done = [results[i] for i in range(n)]
    return [r[0] for r in done], [r[1] for r in done], [r[2] for r in done], [r[3] for r in done], [r[4] for r in done]



"""gvx.ray.Sandbox: one gvx.Sandbox on a node of a Ray cluster, one handle per episode.

Frameworks that keep a handle per episode (SWE-ReX's deployments,
mini-swe-agent's environments) get a sandbox on a node with room; its
methods and results are gvx.Sandbox's. Without a resource demand the
sandboxes of a driver share one asyncio actor per node (_SandboxHost), so a
sandbox costs a rungv on the node, not a Ray worker; with one, each sandbox
has an actor of its own that holds the reservation.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import threading
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping, NoReturn, Optional, Sequence, TypeVar, Union

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .. import _options, errors
from ..sandbox import Command, ExecResult, FileInfo, Owner, PathLike, SandboxInfo, SandboxStats
from ..sandbox import Sandbox as _LocalSandbox
from ._remote import Call, Lost, Plan, run, run_async, value

_R = TypeVar("_R")

# The gvx.Sandbox methods a remote sandbox calls as they are; the others
# (upload, download) move their files through Ray first.
_DIRECT = frozenset({"exec", "stat", "exists", "read_file", "write_file", "stats", "checkpoint", "signal", "reset"})


class _SandboxHost:
    """The actor on one node that owns remote sandboxes: children of its
    worker process, so they die with it, and it with the driver."""

    def __init__(self) -> None:
        self._sandboxes: dict[str, _LocalSandbox] = {}
        self._threads = ThreadPoolExecutor(max_workers=1024, thread_name_prefix="gvx-ray-sandbox")

    async def _in_thread(self, fn: Any, *args: Any) -> Any:
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(self._threads, fn, *args)

    def _get(self, sandbox: str) -> _LocalSandbox:
        sb = self._sandboxes.get(sandbox)
        if sb is None:
            raise errors.SandboxClosedError("the sandbox is closed; create a new gvx.ray.Sandbox")
        return sb

    async def new(self, image: Optional[str], options: dict[str, Any]) -> tuple[str, str, SandboxInfo]:
        """Starts a sandbox; returns its id, this node's id and its info."""
        sb: _LocalSandbox = await self._in_thread(lambda: _LocalSandbox(image, **options))
        sandbox = uuid.uuid4().hex
        self._sandboxes[sandbox] = sb
        return sandbox, ray.get_runtime_context().get_node_id(), sb.info

    async def call(self, sandbox: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if method not in _DIRECT:
            raise errors.InvalidArgumentError(f"gvx.ray.Sandbox has no remote method {method!r}")
        sb = self._get(sandbox)
        return await self._in_thread(lambda: getattr(sb, method)(*args, **kwargs))

    async def upload(self, sandbox: str, packed: bytes, is_dir: bool, remote: str, mode: Optional[int], owner: Optional[Owner]) -> None:
        sb = self._get(sandbox)
        await self._in_thread(_unpack_and_upload, sb, packed, is_dir, remote, mode, owner)

    async def download(self, sandbox: str, remote: str) -> tuple[bytes, bool]:
        sb = self._get(sandbox)
        packed: tuple[bytes, bool] = await self._in_thread(_download_and_pack, sb, remote)
        return packed

    async def close(self, sandbox: str) -> None:
        sb = self._sandboxes.pop(sandbox, None)
        if sb is not None:
            await self._in_thread(sb.close)


def _pack(local: Path) -> tuple[bytes, bool]:
    """local as bytes to send: a file's content, or a directory's tree as a tar."""
    if local.is_dir():
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(local, arcname=".")
        return buf.getvalue(), True
    return local.read_bytes(), False


def _unpack_and_upload(sb: _LocalSandbox, packed: bytes, is_dir: bool, remote: str, mode: Optional[int], owner: Optional[Owner]) -> None:
    with tempfile.TemporaryDirectory(prefix="gvx-ray-upload-") as tmp:
        if is_dir:
            tree = Path(tmp) / "tree"
            tree.mkdir()
            with tarfile.open(fileobj=io.BytesIO(packed)) as tar:
                tar.extractall(tree, filter="tar")
            sb.upload(tree, remote, owner=owner)
            return
        f = Path(tmp) / "file"
        f.write_bytes(packed)
        f.chmod(0o644 if mode is None else mode)
        sb.upload(f, remote, mode, owner=owner)


def _download_and_pack(sb: _LocalSandbox, remote: str) -> tuple[bytes, bool]:
    with tempfile.TemporaryDirectory(prefix="gvx-ray-download-") as tmp:
        out = Path(tmp) / "out"
        sb.download(remote, out)
        return _pack(out)


def _unpack(packed: bytes, is_dir: bool, local: Path) -> None:
    """What _download_and_pack sent, written at local as gvx.Sandbox.download writes it."""
    if not is_dir:
        local.parent.mkdir(parents=True, exist_ok=True)
        part = local.with_name(f".{local.name}.gvx-{uuid.uuid4().hex[:8]}")
        part.write_bytes(packed)
        os.replace(part, local)  # whole, never half-written
        return
    local.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(packed)) as tar:
        tar.extractall(local, filter=_download_filter)


def _download_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """What gvx.Sandbox.download promises, for the tree a node sends back:
    nothing written outside dest (tarfile's "tar" filter resolves the
    symlinks already extracted), a hard link reaches only a file of the same
    download, set-ID bits are dropped and files belong to the caller; symlinks
    stay as the sandbox made them, absolute or not, as download keeps them."""
    checked = tarfile.tar_filter(member, dest)
    if checked.islnk():
        target = os.path.realpath(os.path.join(dest, checked.linkname))
        if os.path.commonpath([target, os.path.realpath(dest)]) != os.path.realpath(dest):
            raise tarfile.LinkOutsideDestinationError(checked, target)
    return checked.replace(uid=os.getuid(), gid=os.getgid(), uname="", gname="", deep=False)


class _Hosts:
    """This driver's shared sandbox actors, one per node."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._actors: dict[str, Any] = {}
        self._counts: dict[str, int] = {}

    def pick(self, node: Optional[str]) -> tuple[str, Any]:
        """The node for a new sandbox (node, or the alive node with the fewest
        of this driver's sandboxes) and its actor, started if need be."""
        alive = sorted(str(n["NodeID"]) for n in ray.nodes() if n.get("Alive"))  # type: ignore[no-untyped-call]
        if not alive:
            raise errors.GvxError("the Ray cluster has no alive node: start one (ray start) and try again")
        if node is not None and node not in alive:
            raise errors.InvalidArgumentError(f"node={node!r} is not an alive node of the Ray cluster (alive: {alive})")
        with self._lock:
            chosen = node or min(alive, key=lambda n: (self._counts.get(n, 0), n))
            actor = self._actors.get(chosen)
            if actor is None:
                actor = ray.remote(_SandboxHost).options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=chosen, soft=False),
                    num_cpus=0, max_restarts=0, max_task_retries=0,
                ).remote()
                self._actors[chosen] = actor
            self._counts[chosen] = self._counts.get(chosen, 0) + 1
            return chosen, actor

    def done(self, node: str) -> None:
        with self._lock:
            self._counts[node] = max(0, self._counts.get(node, 0) - 1)

    def lost(self, node: str, actor: Any) -> None:
        """The node's actor is gone: the next sandbox there gets a new one."""
        with self._lock:
            if self._actors.get(node) is actor:
                del self._actors[node]
                self._counts.pop(node, None)


_hosts = _Hosts()


def _close_remote(actor: Any, sandbox: str, own_actor: bool) -> None:
    """Ends a sandbox without waiting (a finalizer may not block)."""
    try:
        if own_actor:
            ray.kill(actor, no_restart=True)
        else:
            actor.close.remote(sandbox)
    except Exception:  # noqa: BLE001 - the actor, or Ray, is already gone
        pass


class Sandbox:
    """A :class:`gvx.Sandbox` on a node of the Ray cluster.

    The same methods and results as :class:`gvx.Sandbox`, each with an
    asyncio twin (``await sb.exec_async(...)``); ``gvx.ray.Sandbox.create_async``
    starts one without blocking. Its rungv runs on the node, a child of a gvx
    actor that this driver owns: it dies with the driver.

    Args:
        image, **sandbox_options: as for :class:`gvx.Sandbox`; ``image`` is
            pulled into the node's own cache, and paths (mounts, ``restore``)
            are paths on the node.
        node: a Ray node id to run on; by default the alive node with the
            fewest of this driver's sandboxes.
        resources: Ray resources to reserve for the sandbox, e.g.
            ``{"CPU": 1}``: the sandbox then gets an actor of its own holding
            them, placed by Ray on a node with room.
        start_timeout: seconds the start may take (the node's pull included).
        call_timeout: seconds any other call may take; an ``exec`` may take
            its ``timeout`` plus ``grace``.

    A node or actor that dies, or does not answer in time, raises
    :class:`gvx.SandboxUnavailableError` naming the node: the sandbox is gone.
    ``upload`` sends the driver's file or tree through Ray, ``download``
    brings one back; ``checkpoint`` writes the snapshot on the node
    (``Sandbox(image, restore=path, node=sb.node_id)`` continues it there).
    """

    def __init__(
        self,
        image: Optional[str] = None,
        *,
        node: Optional[str] = None,
        resources: Optional[Mapping[str, float]] = None,
        start_timeout: float = 600.0,
        call_timeout: float = 600.0,
        grace: float = 30.0,
        **sandbox_options: Any,
    ) -> None:
        self.node_id: str
        self._closed = True  # until started
        self.node_id = ""
        run(self._start_plan(image, node, resources, start_timeout, call_timeout, grace, sandbox_options), threading.Lock())

    @classmethod
    async def create_async(cls, image: Optional[str] = None, **options: Any) -> "Sandbox":
        """The asyncio twin of ``gvx.ray.Sandbox(image, **options)``."""
        sb = cls.__new__(cls)
        sb._closed = True
        sb.node_id = ""
        keys = ("node", "resources", "start_timeout", "call_timeout", "grace")
        node, resources, start_timeout, call_timeout, grace = (options.pop(k, d) for k, d in zip(keys, (None, None, 600.0, 600.0, 30.0)))
        await run_async(sb._start_plan(image, node, resources, start_timeout, call_timeout, grace, options), threading.Lock())
        return sb

    def _start_plan(
        self,
        image: Optional[str],
        node: Optional[str],
        resources: Optional[Mapping[str, float]],
        start_timeout: float,
        call_timeout: float,
        grace: float,
        options: dict[str, Any],
    ) -> Plan[None]:
        if min(start_timeout, call_timeout, grace) <= 0:
            raise errors.InvalidArgumentError(
                f"start_timeout, call_timeout and grace are seconds > 0 (got {start_timeout}, {call_timeout}, {grace})"
            )
        if node is not None and resources:
            raise errors.InvalidArgumentError("give node= or resources=, not both: Ray places a sandbox that reserves resources")
        demand = {k: float(v) for k, v in dict(resources or {}).items()}
        if any(v < 0 for v in demand.values()):
            raise errors.InvalidArgumentError(f"resources={demand!r}: give amounts >= 0, e.g. {{'CPU': 1}}")
        # The options are checked here, before anything reaches a node.
        _options.check_sandbox_options("gvx.ray.Sandbox", image, options)
        self._call_timeout = call_timeout
        self._grace = grace
        self._lock = threading.Lock()
        self._own_actor = bool(demand)
        self._actor: Any
        self._info: SandboxInfo
        if demand:
            ray_options: dict[str, Any] = {
                "num_cpus": demand.pop("CPU", 0.0), "max_restarts": 0, "max_task_retries": 0, "scheduling_strategy": "SPREAD",
            }
            if "GPU" in demand:
                ray_options["num_gpus"] = demand.pop("GPU")
            if "memory" in demand:
                ray_options["memory"] = demand.pop("memory")
            if demand:
                ray_options["resources"] = demand
            self._actor = ray.remote(_SandboxHost).options(**ray_options).remote()
            where = "a Ray node with room for the resources asked"
        else:
            self.node_id, self._actor = _hosts.pick(node)
            where = f"Ray node {self.node_id}"
        outcomes = yield [Call(where, self._actor.new.remote(image, options), time.monotonic() + start_timeout)]
        try:
            started = value(outcomes[0])
        except BaseException:
            self._forget()
            raise
        if isinstance(started, Lost):
            self._forget()
            raise errors.SandboxStartError(
                f"the sandbox did not start on {where}: the gvx actor "
                f"{started.why(f'did not answer within start_timeout={start_timeout:g}s')}; "
                "check the cluster with `ray status` and the node's logs under /tmp/ray/session_latest/logs"
            )
        self._id, self.node_id, self._info = started
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_remote, self._actor, self._id, self._own_actor)

    def _forget(self) -> None:
        """Gives back the node slot of a sandbox that did not start or is gone."""
        if self._own_actor:
            _close_remote(self._actor, "", True)
        elif self.node_id:
            _hosts.done(self.node_id)

    # Calls.

    def _call_plan(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], timeout: Optional[float] = None) -> Plan[Any]:
        if self._closed:
            raise errors.SandboxClosedError("the sandbox is closed; create a new gvx.ray.Sandbox")
        limit = self._call_timeout if timeout is None else timeout + self._grace
        if method in _DIRECT:
            ref = self._actor.call.remote(self._id, method, args, kwargs)
        else:
            ref = getattr(self._actor, method).remote(self._id, *args)
        outcomes = yield [Call(self._where(), ref, time.monotonic() + limit)]
        got = value(outcomes[0])
        if isinstance(got, Lost):
            self._lose(got, limit)
        return got

    def _where(self) -> str:
        return f"Ray node {self.node_id}"

    def _lose(self, lost: Lost, limit: float) -> NoReturn:
        """The sandbox's actor died or stopped answering: the sandbox is gone."""
        self._closed = True
        self._finalizer.detach()
        if not self._own_actor:
            _hosts.lost(self.node_id, self._actor)
        try:
            ray.kill(self._actor, no_restart=True)  # its sandboxes die with its process
        except Exception:  # noqa: BLE001 - already gone with its node
            pass
        raise errors.SandboxUnavailableError(
            f"the gvx actor on {self._where()} {lost.why(f'did not answer within {limit:g}s and was killed')}; "
            "the sandbox is gone: create a new gvx.ray.Sandbox (it lands on a live node)"
        )

    def _run(self, plan: Plan[_R]) -> _R:
        return run(plan, self._lock)

    async def _run_async(self, plan: Plan[_R]) -> _R:
        return await run_async(plan, self._lock)

    @staticmethod
    def _exec_args(cmd: Command, options: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any], Optional[float]]:
        if options.get("on_output") is not None:
            raise errors.InvalidArgumentError(
                "exec(on_output=...) streams to a callback in the sandbox's own process, which a remote sandbox cannot: "
                "drop on_output and read the result's stdout and stderr"
            )
        exec_options = {k: v for k, v in options.items() if k not in ("check", "stdin", "on_output")}
        _options.exec_request(cmd, options.get("stdin"), None, exec_options)
        return (cmd,), options, options.get("timeout")

    @property
    def info(self) -> SandboxInfo:
        """The sandbox's info, as on its node (``pid`` is the node's process id)."""
        return self._info

    @property
    def pid(self) -> int:
        return self._info.pid

    @property
    def closed(self) -> bool:
        return self._closed

    def exec(self, cmd: Command, **options: Any) -> ExecResult:
        """As :meth:`gvx.Sandbox.exec` (without ``on_output``)."""
        args, kwargs, timeout = self._exec_args(cmd, options)
        result: ExecResult = self._run(self._call_plan("exec", args, kwargs, timeout))
        return result

    async def exec_async(self, cmd: Command, **options: Any) -> ExecResult:
        """The asyncio twin of :meth:`exec`."""
        args, kwargs, timeout = self._exec_args(cmd, options)
        result: ExecResult = await self._run_async(self._call_plan("exec", args, kwargs, timeout))
        return result

    def stat(self, path: str) -> FileInfo:
        info: FileInfo = self._run(self._call_plan("stat", (path,), {}))
        return info

    async def stat_async(self, path: str) -> FileInfo:
        info: FileInfo = await self._run_async(self._call_plan("stat", (path,), {}))
        return info

    def exists(self, path: str) -> bool:
        return bool(self._run(self._call_plan("exists", (path,), {})))

    async def exists_async(self, path: str) -> bool:
        return bool(await self._run_async(self._call_plan("exists", (path,), {})))

    def read_file(self, path: str) -> bytes:
        return bytes(self._run(self._call_plan("read_file", (path,), {})))

    async def read_file_async(self, path: str) -> bytes:
        return bytes(await self._run_async(self._call_plan("read_file", (path,), {})))

    def write_file(self, path: str, data: Union[bytes, str], mode: int = 0o644, *, make_parents: bool = False, owner: Optional[Owner] = None) -> None:
        self._run(self._call_plan("write_file", (path, data, mode), {"make_parents": make_parents, "owner": owner}))

    async def write_file_async(
        self, path: str, data: Union[bytes, str], mode: int = 0o644, *, make_parents: bool = False, owner: Optional[Owner] = None
    ) -> None:
        await self._run_async(self._call_plan("write_file", (path, data, mode), {"make_parents": make_parents, "owner": owner}))

    @staticmethod
    def _upload_args(local: PathLike, remote: str, mode: Optional[int], owner: Optional[Owner]) -> tuple[Any, ...]:
        p = Path(local)
        if p.is_dir():
            if mode is not None:
                raise errors.InvalidArgumentError(f"upload: mode= applies to a file and {str(p)!r} is a directory; its files keep their own modes")
        elif not p.is_file():
            raise errors.InvalidArgumentError(f"upload: {str(p)!r} is not a regular file or a directory on this machine")
        if mode is not None and not 0 <= mode <= 0o7777:
            raise errors.InvalidArgumentError(f"upload: mode {mode:#o} is not a permission mode (0 to 0o7777)")
        packed, is_dir = _pack(p)
        if not is_dir and mode is None:
            mode = p.stat().st_mode & 0o7777
        return (ray.put(packed), is_dir, remote, mode, owner)

    def upload(self, local: PathLike, remote: str, mode: Optional[int] = None, *, owner: Optional[Owner] = None) -> None:
        """As :meth:`gvx.Sandbox.upload`, from this machine: the file or tree
        travels through Ray's object store to the node."""
        self._run(self._call_plan("upload", self._upload_args(local, remote, mode, owner), {}))

    async def upload_async(self, local: PathLike, remote: str, mode: Optional[int] = None, *, owner: Optional[Owner] = None) -> None:
        await self._run_async(self._call_plan("upload", self._upload_args(local, remote, mode, owner), {}))

    def download(self, remote: str, local: PathLike) -> None:
        """As :meth:`gvx.Sandbox.download`, to this machine."""
        packed, is_dir = self._run(self._call_plan("download", (remote,), {}))
        _unpack(packed, is_dir, Path(local))

    async def download_async(self, remote: str, local: PathLike) -> None:
        packed, is_dir = await self._run_async(self._call_plan("download", (remote,), {}))
        _unpack(packed, is_dir, Path(local))

    def stats(self) -> SandboxStats:
        stats: SandboxStats = self._run(self._call_plan("stats", (), {}))
        return stats

    async def stats_async(self) -> SandboxStats:
        stats: SandboxStats = await self._run_async(self._call_plan("stats", (), {}))
        return stats

    def checkpoint(self, path: str, *, stop: bool = False) -> None:
        """As :meth:`gvx.Sandbox.checkpoint`; ``path`` is on the sandbox's node."""
        self._run(self._call_plan("checkpoint", (path,), {"stop": stop}))

    async def checkpoint_async(self, path: str, *, stop: bool = False) -> None:
        await self._run_async(self._call_plan("checkpoint", (path,), {"stop": stop}))

    def signal(self, sig: int) -> None:
        self._run(self._call_plan("signal", (int(sig),), {}))

    async def signal_async(self, sig: int) -> None:
        await self._run_async(self._call_plan("signal", (int(sig),), {}))

    def reset(self) -> None:
        """As :meth:`gvx.Sandbox.reset`."""
        self._run(self._call_plan("reset", (), {}))

    async def reset_async(self) -> None:
        await self._run_async(self._call_plan("reset", (), {}))

    # Lifecycle.

    def _close_plan(self) -> Plan[None]:
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        try:
            if self._own_actor:
                yield [Call(self._where(), self._actor.close.remote(self._id), time.monotonic() + self._call_timeout)]
            else:
                outcomes = yield [Call(self._where(), self._actor.close.remote(self._id), time.monotonic() + self._call_timeout)]
                if isinstance(value(outcomes[0]), Lost):
                    _hosts.lost(self.node_id, self._actor)
        finally:
            self._forget()

    def close(self) -> None:
        """Stops the sandbox on its node. Calling it again does nothing."""
        self._run(self._close_plan())

    async def close_async(self) -> None:
        await self._run_async(self._close_plan())

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close_async()

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a gvx.ray.Sandbox cannot be pickled or sent to another process: the driver that made it owns it. "
            "Pass the image and options to the worker and create the sandbox there."
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"pid={self._info.pid}"
        return f"<gvx.ray.Sandbox on node {self.node_id[:12] or '?'} {state}>"


"""asyncio twins of :class:`gvx.Sandbox` and :class:`gvx.GvxEnv`.

Every public method and property of the sync class has a twin here with the
same parameters (tests/test_async_twins.py checks it): a coroutine that runs
the sync one in a worker thread of gvx's own pool (libgvx calls release the
GIL), so an event loop can drive hundreds of sandboxes at once; asyncio's
default executor would run only ``os.cpu_count() + 4`` calls at a time. A
property that may call libgvx (``info``, ``pid``) is a coroutine method here
(``await sb.info()``); one that only reads Python state stays a property.
The sync object is ``.inner``, for what has no twin (gymnasium's spaces and
attributes of an environment).

Cancelling an ``exec`` (``asyncio.wait_for``, ``task.cancel()``) kills its
command and frees its thread:

>>> async def main():
...     async with await gvx.aio.Sandbox.create() as sb:
...         result = await sb.exec("echo hi")
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, TypeVar, Union

from . import _ffi, _options, errors
from . import _process
from . import env as _env
from . import sandbox as _sandbox
from . import volumes as _volumes

if TYPE_CHECKING:
    from typing_extensions import Unpack

T = TypeVar("T")

# Threads here mostly wait inside libgvx for a command or a start, so there
# are as many as calls in flight, up to this bound (GVX_AIO_THREADS).
_MAX_THREADS = int(os.environ.get("GVX_AIO_THREADS", "1024"))
_pool: Optional[ThreadPoolExecutor] = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=_MAX_THREADS, thread_name_prefix="gvx-aio")
    return _pool


async def _to_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """asyncio.to_thread on gvx's pool."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_executor(), call)


class Sandbox:
    """An asyncio handle on a :class:`gvx.Sandbox`; create it with ``await Sandbox.create(...)``."""

    def __init__(self, inner: _sandbox.Sandbox) -> None:
        self.inner = inner

    @classmethod
    async def create(
        cls,
        image: Optional[str] = None,
        *,
        env: Union[Mapping[str, str], Sequence[str], None] = None,
        workdir: Optional[str] = None,
        user: Optional[str] = None,
        hostname: Optional[str] = None,
        memory: Union[int, str, None] = None,
        cpus: Optional[float] = None,
        cpuset: Optional[Sequence[int]] = None,
        pids_limit: Optional[int] = None,
        network: str = "none",
        ports: Sequence[str] = (),
        allow_net: Sequence[str] = (),
        host_loopback: bool = False,
        net_raw: bool = False,
        nftables: bool = False,
        mounts: Sequence[_sandbox.Mount] = (),
        volumes: Optional[_sandbox.Volumes] = None,
        timeout: Optional[float] = None,
        platform: str = "auto",
        spin: Optional[bool] = None,
        cache: Optional[_sandbox.PathLike] = None,
        rungv: Optional[_sandbox.PathLike] = None,
        insecure: bool = False,
        restore: Optional[_sandbox.PathLike] = None,
    ) -> "Sandbox":
        """The twin of :class:`gvx.Sandbox`'s constructor."""
        inner = await _to_thread(
            _sandbox.Sandbox, image, env=env, workdir=workdir, user=user, hostname=hostname, memory=memory, cpus=cpus,
            cpuset=cpuset, pids_limit=pids_limit, network=network, ports=ports, allow_net=allow_net,
            host_loopback=host_loopback, net_raw=net_raw, nftables=nftables, mounts=mounts, volumes=volumes, timeout=timeout,
            platform=platform, spin=spin, cache=cache, rungv=rungv, insecure=insecure, restore=restore,
        )
        return cls(inner)

    # Lifecycle.

    async def close(self) -> None:
        await _to_thread(self.inner.close)

    async def reset(self) -> None:
        await _to_thread(self.inner.reset)

    @property
    def closed(self) -> bool:
        return self.inner.closed

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.close()
        except errors.SandboxUnavailableError:
            # As gvx.Sandbox's __exit__: the block's own exception comes first.
            if exc[0] is None:
                raise

    # Introspection.

    async def info(self) -> _sandbox.SandboxInfo:
        """The twin of the property :attr:`gvx.Sandbox.info`."""
        return await _to_thread(lambda: self.inner.info)

    async def port(self, guest_port: int, protocol: str = "tcp") -> _sandbox.PublishedPort:
        return await _to_thread(self.inner.port, guest_port, protocol)

    async def stats(self) -> _sandbox.SandboxStats:
        return await _to_thread(self.inner.stats)

    async def pid(self) -> int:
        """The twin of the property :attr:`gvx.Sandbox.pid`."""
        return await _to_thread(lambda: self.inner.pid)

    # Commands.

    @_options.takes_exec_options
    async def exec(
        self,
        cmd: _sandbox.Command,
        *,
        stdin: Union[bytes, str, None] = None,
        check: bool = False,
        on_output: Optional[Callable[[str, bytes], None]] = None,
        **options: Unpack[_options.ExecOptions],
    ) -> _sandbox.ExecResult:
        return await _cancellable(functools.partial(self.inner.exec, cmd, stdin=stdin, check=check, on_output=on_output, **options))

    @_options.takes_command_options
    async def spawn(self, cmd: _sandbox.Command, **options: Unpack[_options.CommandOptions]) -> "Process":
        return Process(await _to_thread(self.inner.spawn, cmd, **options))

    # Files.

    async def stat(self, path: str) -> _sandbox.FileInfo:
        return await _to_thread(self.inner.stat, path)

    async def exists(self, path: str) -> bool:
        return await _to_thread(self.inner.exists, path)

    async def read_file(self, path: str) -> bytes:
        return await _to_thread(self.inner.read_file, path)

    async def write_file(
        self,
        path: str,
        data: Union[bytes, str],
        mode: int = 0o644,
        *,
        make_parents: bool = False,
        owner: Optional[_sandbox.Owner] = None,
    ) -> None:
        await _to_thread(self.inner.write_file, path, data, mode, make_parents=make_parents, owner=owner)

    async def upload(self, local: _sandbox.PathLike, remote: str, mode: Optional[int] = None, *, owner: Optional[_sandbox.Owner] = None) -> None:
        await _to_thread(self.inner.upload, local, remote, mode, owner=owner)

    async def download(self, remote: str, local: _sandbox.PathLike) -> None:
        await _to_thread(self.inner.download, remote, local)

    # Snapshots and signals.

    async def checkpoint(self, path: _sandbox.PathLike, *, stop: bool = False) -> None:
        await _to_thread(self.inner.checkpoint, path, stop=stop)

    async def signal(self, sig: int) -> None:
        await _to_thread(self.inner.signal, sig)


class Process:
    """An asyncio handle on a :class:`gvx.Process`; get one with ``await sb.spawn(...)``.

    Cancelling a ``read`` or ``wait`` ends the wait, not the command."""

    def __init__(self, inner: _process.Process) -> None:
        self.inner = inner

    @property
    def argv(self) -> list[str]:
        return self.inner.argv

    async def write(self, data: Union[bytes, str]) -> None:
        await _to_thread(self.inner.write, data)

    async def close_stdin(self) -> None:
        await _to_thread(self.inner.close_stdin)

    async def read(self, stream: _process.Stream = "stdout", *, max_bytes: int = 65536, timeout: Optional[float] = None) -> bytes:
        return await _cancellable(functools.partial(self.inner.read, stream, max_bytes=max_bytes, timeout=timeout))

    async def signal(self, sig: int, *, descendants: bool = False) -> None:
        await _to_thread(self.inner.signal, sig, descendants=descendants)

    async def interrupt(self) -> None:
        await _to_thread(self.inner.interrupt)

    async def kill(self) -> None:
        await _to_thread(self.inner.kill)

    async def wait(self, timeout: Optional[float] = None) -> _sandbox.ExecResult:
        return await _cancellable(functools.partial(self.inner.wait, timeout))

    async def close(self) -> None:
        await _to_thread(self.inner.close)

    @property
    def closed(self) -> bool:
        return self.inner.closed

    async def __aenter__(self) -> "Process":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _cancellable(fn: Callable[[], T]) -> T:
    """Runs fn in gvx's pool with a cancel token, so that cancelling the task
    ends fn's libgvx call and frees its thread."""
    token = _ffi.new_cancel_token()

    def run() -> T:
        with _ffi.cancel_scope(token):
            return fn()

    try:
        return await _to_thread(run)
    finally:
        # Ends the call if it still runs: this task was cancelled.
        _ffi.free_cancel_token(token)


class GvxEnv:
    """An asyncio handle on a :class:`gvx.GvxEnv`; made, like it, without a sandbox
    (the first :meth:`reset` takes one)."""

    metadata = _env.GvxEnv.metadata

    def __init__(
        self,
        image: Optional[str] = None,
        *,
        setup: Sequence[str] = (),
        reward_fn: Optional[_env.RewardFn] = None,
        done_fn: Optional[_env.DoneFn] = None,
        max_steps: int = 50,
        step_timeout: float = 60.0,
        max_output: int = 8192,
        max_action_length: int = 4096,
        warm: Union[bool, int] = True,
        render_mode: Optional[str] = None,
        golden: Optional[_volumes.Volume] = None,
        volume_path: str = "/var/lib/docker",
        episode_dir: Optional[str] = None,
        on_sandbox_failure: str = "truncate",
        **sandbox_options: Any,
    ) -> None:
        self.inner = _env.GvxEnv(
            image, setup=setup, reward_fn=reward_fn, done_fn=done_fn, max_steps=max_steps, step_timeout=step_timeout,
            max_output=max_output, max_action_length=max_action_length, warm=warm, render_mode=render_mode,
            golden=golden, volume_path=volume_path, episode_dir=episode_dir, on_sandbox_failure=on_sandbox_failure,
            **sandbox_options,
        )
        self._sandbox: Optional[Sandbox] = None

    @property
    def ready(self) -> int:
        return self.inner.ready

    @property
    def sandbox(self) -> Sandbox:
        """The current episode's sandbox, as an asyncio handle (after :meth:`reset`)."""
        inner = self.inner.sandbox
        if self._sandbox is None or self._sandbox.inner is not inner:
            self._sandbox = Sandbox(inner)
        return self._sandbox

    async def reset(
        self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        return await _to_thread(self.inner.reset, seed=seed, options=options)

    async def step(self, action: str) -> tuple[dict[str, Any], Any, bool, bool, dict[str, Any]]:
        return await _to_thread(self.inner.step, action)

    async def render(self) -> Optional[str]:
        return await _to_thread(self.inner.render)

    async def close(self) -> None:
        await _to_thread(self.inner.close)

    async def __aenter__(self) -> "GvxEnv":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

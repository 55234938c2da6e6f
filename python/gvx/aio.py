"""asyncio twins of :class:`gvx.Sandbox` and :class:`gvx.GvxEnv`.

Every call runs in a worker thread of gvx's own pool (libgvx calls release
the GIL), so an event loop can drive hundreds of sandboxes at once; asyncio's
default executor would run only ``os.cpu_count() + 4`` calls at a time.
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
from typing import Any, Callable, Optional, TypeVar, Union

from . import _ffi, errors
from . import env as _env
from . import sandbox as _sandbox

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
    async def create(cls, image: Optional[str] = None, **options: Any) -> "Sandbox":
        return cls(await _to_thread(_sandbox.Sandbox, image, **options))

    async def exec(self, cmd: _sandbox.Command, **options: Any) -> _sandbox.ExecResult:
        token = _ffi.new_cancel_token()

        def run() -> _sandbox.ExecResult:
            with _ffi.cancel_scope(token):
                return self.inner.exec(cmd, **options)

        try:
            return await _to_thread(run)
        finally:
            # Ends the call if it still runs: this task was cancelled.
            _ffi.free_cancel_token(token)

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
        owner: Optional["_sandbox.Owner"] = None,
    ) -> None:
        await _to_thread(lambda: self.inner.write_file(path, data, mode, make_parents=make_parents, owner=owner))

    async def upload(self, local: "_sandbox.PathLike", remote: str, mode: Optional[int] = None, *, owner: Optional["_sandbox.Owner"] = None) -> None:
        await _to_thread(lambda: self.inner.upload(local, remote, mode, owner=owner))

    async def download(self, remote: str, local: "_sandbox.PathLike") -> None:
        await _to_thread(self.inner.download, remote, local)

    async def stats(self) -> _sandbox.SandboxStats:
        return await _to_thread(self.inner.stats)

    async def close(self) -> None:
        await _to_thread(self.inner.close)

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


class GvxEnv:
    """An asyncio handle on a :class:`gvx.GvxEnv`."""

    def __init__(self, **options: Any) -> None:
        self.inner = _env.GvxEnv(**options)

    async def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        return await _to_thread(lambda: self.inner.reset(**kwargs))

    async def step(self, action: str) -> tuple[dict[str, Any], Any, bool, bool, dict[str, Any]]:
        return await _to_thread(self.inner.step, action)

    async def close(self) -> None:
        await _to_thread(self.inner.close)

    async def __aenter__(self) -> "GvxEnv":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

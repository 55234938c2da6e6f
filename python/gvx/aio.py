"""asyncio twins of :class:`gvx.Sandbox` and :class:`gvx.GvxEnv`.

Every call runs in a worker thread (libgvx calls release the GIL), so an event
loop can drive hundreds of sandboxes at once:

>>> async def main():
...     async with await gvx.aio.Sandbox.create() as sb:
...         result = await sb.exec("echo hi")
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional, Union

from . import env as _env
from . import sandbox as _sandbox


class Sandbox:
    """An asyncio handle on a :class:`gvx.Sandbox`; create it with ``await Sandbox.create(...)``."""

    def __init__(self, inner: _sandbox.Sandbox) -> None:
        self.inner = inner

    @classmethod
    async def create(cls, image: Optional[str] = None, **options: Any) -> "Sandbox":
        return cls(await asyncio.to_thread(_sandbox.Sandbox, image, **options))

    async def exec(self, cmd: _sandbox.Command, **options: Any) -> _sandbox.ExecResult:
        return await asyncio.to_thread(self.inner.exec, cmd, **options)

    async def read_file(self, path: str) -> bytes:
        return await asyncio.to_thread(self.inner.read_file, path)

    async def write_file(self, path: str, data: Union[bytes, str], mode: int = 0o644) -> None:
        await asyncio.to_thread(self.inner.write_file, path, data, mode)

    async def upload(self, local: "_sandbox.PathLike", remote: str, mode: Optional[int] = None) -> None:
        await asyncio.to_thread(self.inner.upload, local, remote, mode)

    async def download(self, remote: str, local: "_sandbox.PathLike") -> None:
        await asyncio.to_thread(self.inner.download, remote, local)

    async def stats(self) -> _sandbox.SandboxStats:
        return await asyncio.to_thread(self.inner.stats)

    async def close(self) -> None:
        await asyncio.to_thread(self.inner.close)

    @property
    def closed(self) -> bool:
        return self.inner.closed

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class GvxEnv:
    """An asyncio handle on a :class:`gvx.GvxEnv`."""

    def __init__(self, **options: Any) -> None:
        self.inner = _env.GvxEnv(**options)

    async def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        return await asyncio.to_thread(lambda: self.inner.reset(**kwargs))

    async def step(self, action: str) -> tuple[dict[str, Any], Any, bool, bool, dict[str, Any]]:
        return await asyncio.to_thread(self.inner.step, action)

    async def close(self) -> None:
        await asyncio.to_thread(self.inner.close)

    async def __aenter__(self) -> "GvxEnv":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

"""Every sync method and property has its asyncio twin, with the same parameters.

The twins are hand-written (gvx.aio's classes, and the ``*_async`` methods of
the pools); these checks keep them from drifting. For each pair of classes,
every public member the sync class defines (gymnasium's own ``Env`` members
and ``object``'s are not gvx's and are left out) must have a twin:

- a method: a coroutine function with the same parameters (names, kinds,
  defaults);
- a property: a property, or a coroutine method taking no arguments (for one
  that may call libgvx, as ``Sandbox.info``);
- a class attribute (``GvxEnv.metadata``): the same value;
- the constructor: the twin's constructor (or ``create``), same parameters;
- ``__enter__``/``__exit__``: ``__aenter__``/``__aexit__``.

Other dunders (``__len__``, ``__repr__``, ``__reduce__``) need none. A member
that cannot have a twin is in the pair's exemptions, with why.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import select
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

import gvx
import gvx.aio
from conftest import live, sandboxes_of


@dataclass(frozen=True)
class Pair:
    sync: type
    twin: type
    suffix: str = ""  # the twin of m is m + suffix
    constructor: Optional[str] = None  # the twin's name for the sync constructor, if it has one
    exempt: dict[str, str] = field(default_factory=dict)  # member -> why it has no twin


def pairs() -> list[Pair]:
    out = [
        Pair(gvx.Sandbox, gvx.aio.Sandbox, constructor="create"),
        Pair(gvx.Process, gvx.aio.Process, exempt={"__init__": "made by Sandbox.spawn and its twin, not by callers"}),
        Pair(gvx.GvxEnv, gvx.aio.GvxEnv, constructor="__init__"),
        Pair(gvx.EnvPool, gvx.EnvPool, suffix="_async"),
    ]
    try:
        ray_pool = importlib.import_module("gvx.ray").EnvPool
    except ImportError:  # Ray is optional; test_ray says so when it is missing
        return out
    out.append(
        Pair(
            ray_pool,
            ray_pool,
            suffix="_async",
            exempt={
                "placement": "reads where the pool put each environment, kept in the driver: no call to wait for",
                "provisioning": "what the nodes made as the pool started, kept in the driver: no call to wait for",
            },
        )
    )
    return out


def _gvx_members(cls: type) -> dict[str, object]:
    """The members gvx's classes in cls's MRO define (the nearest wins)."""
    out: dict[str, object] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.split(".")[0] == "gvx":
            out.update(vars(klass))
    return out


def _function(member: object) -> Optional[Callable[..., Any]]:
    if isinstance(member, (classmethod, staticmethod)):
        member = member.__func__
    return member if inspect.isfunction(member) else None


def _params(fn: Callable[..., Any]) -> list[tuple[str, str, object]]:
    """fn's parameters after self (or cls): name, kind, default."""
    ps = list(inspect.signature(fn).parameters.values())[1:]
    return [(p.name, p.kind.name, p.default) for p in ps]


def drift(pair: Pair) -> list[str]:
    """What pair.twin lacks or has differently; empty when every twin is there."""
    sync, twin = _gvx_members(pair.sync), _gvx_members(pair.twin)
    problems = []
    where = f"{pair.twin.__module__}.{pair.twin.__qualname__}"

    def need_coroutine(name: str, want: Optional[list[tuple[str, str, object]]]) -> None:
        fn = _function(twin.get(name))
        if fn is None or not inspect.iscoroutinefunction(fn):
            problems.append(f"{where}.{name}: missing, or not an async def")
        elif want is not None and _params(fn) != want:
            problems.append(f"{where}.{name}: parameters {_params(fn)}, the sync one's {want}")

    for name, member in sync.items():
        if name.startswith("_") or name in pair.exempt:
            continue
        fn = _function(member)
        if pair.suffix and (name.endswith(pair.suffix) or (fn is not None and inspect.iscoroutinefunction(fn))):
            continue  # a twin itself
        twin_name = name + pair.suffix
        if isinstance(member, property):
            t = twin.get(twin_name)
            if not isinstance(t, property):
                need_coroutine(twin_name, [])
        elif fn is not None:
            need_coroutine(twin_name, _params(fn))
        elif twin_name not in twin or twin[twin_name] != member:
            problems.append(f"{where}.{twin_name}: missing or not {member!r}")
    if pair.constructor is not None:
        want = _params(getattr(pair.sync, "__init__"))
        have = _function(twin.get(pair.constructor))
        if have is None:
            problems.append(f"{where}.{pair.constructor}: missing (the twin of the constructor)")
        elif _params(have) != want:
            problems.append(f"{where}.{pair.constructor}: parameters {_params(have)}, the constructor's {want}")
    if "__enter__" in sync:
        need_coroutine("__aenter__", None)
        need_coroutine("__aexit__", None)
    stale = sorted(set(pair.exempt) - set(sync))
    if stale:
        problems.append(f"exemptions name no member of {pair.sync.__qualname__}: {stale}")
    return problems


@pytest.mark.parametrize("pair", pairs(), ids=lambda p: f"{p.sync.__module__}.{p.sync.__qualname__}")
def test_every_member_has_an_async_twin(pair: Pair) -> None:
    problems = drift(pair)
    assert not problems, "asyncio twins drifted from the sync API:\n" + "\n".join(problems)


def test_the_check_sees_a_missing_or_different_twin() -> None:
    """drift() on classes made to drift: each difference is reported."""

    class Sync:
        metadata = {"a": 1}

        def __init__(self, x: int, *, y: int = 1) -> None: ...

        def __enter__(self) -> None: ...

        def run(self, a: int, b: str = "b", *, c: bool = False) -> None: ...

        def gone(self) -> None: ...

        @property
        def size(self) -> int:
            return 0

        @property
        def name(self) -> str:
            return ""

    class Twin:
        metadata = {"a": 2}

        def __init__(self, x: int, *, y: int = 2) -> None: ...

        async def __aenter__(self) -> None: ...

        async def run(self, a: int, b: str = "b", c: bool = False) -> None: ...

        async def size(self) -> int:
            return 0

        def name(self) -> str:
            return ""

    Sync.__module__ = Twin.__module__ = "gvx.fake"
    problems = drift(Pair(Sync, Twin, constructor="__init__", exempt={"nothing": "stale"}))
    for expected in ("Twin.run: parameters", "Twin.gone: missing", "Twin.name: missing, or not an async def",
                     "Twin.metadata", "Twin.__init__: parameters", "Twin.__aexit__: missing", "exemptions name no member"):
        assert any(expected in p for p in problems), (expected, problems)
    assert not any("Twin.size" in p for p in problems), problems
    assert len(problems) == 7, problems


def test_new_sandbox_twins_work(tmp_path: Path) -> None:
    """info, pid, port, checkpoint, reset and signal of gvx.aio.Sandbox, on real sandboxes."""
    snap = tmp_path / "task.snap"

    async def main() -> None:
        async with await gvx.aio.Sandbox.create(ports=["8000"]) as sb:
            info = await sb.info()
            pid = await sb.pid()
            assert pid == info.pid and live(pid) and pid in sandboxes_of(os.getpid())
            published = await sb.port(8000)
            assert (published.guest_port, published.protocol) == (8000, "tcp") and published.host_port > 0
            with pytest.raises(gvx.NotFoundError, match="8001/tcp is not published"):
                await sb.port(8001)

            await sb.write_file("/work/task.txt", "the task\n", make_parents=True)
            await sb.checkpoint(snap)
            await sb.reset()
            assert not await sb.exists("/work/task.txt"), "reset kept the root's writes"
            fresh = await sb.pid()
            assert fresh != pid, "reset kept the old rungv"

            with pytest.raises(gvx.InvalidArgumentError, match="signal 0"):
                await sb.signal(0)
            exited = os.pidfd_open(fresh)  # readable once the process has ended
            try:
                await sb.signal(signal.SIGTERM)
                ready, _, _ = await asyncio.to_thread(select.select, [exited], [], [], 30)
                assert ready, "SIGTERM to init did not end the sandbox within 30 s"
            finally:
                os.close(exited)
            with pytest.raises(gvx.SandboxUnavailableError, match="exited"):
                await sb.exec("true")

        async with await gvx.aio.Sandbox.create(restore=snap, ports=["8000"]) as ep:
            assert await ep.read_file("/work/task.txt") == b"the task\n"

    asyncio.run(main())


def test_new_env_twins_work() -> None:
    """ready, sandbox, render and metadata of gvx.aio.GvxEnv."""

    async def main() -> None:
        async with gvx.aio.GvxEnv(warm=0, render_mode="ansi", max_steps=3) as env:
            assert env.metadata == gvx.GvxEnv.metadata and env.ready == 0
            with pytest.raises(gvx.GvxError, match="call reset"):
                _ = env.sandbox
            await env.reset(seed=1, options={"files": {"/task": "t\n"}})
            sb = env.sandbox
            assert isinstance(sb, gvx.aio.Sandbox) and sb is env.sandbox
            assert await sb.read_file("/task") == b"t\n"
            obs, _, _, _, info = await env.step("echo hi")
            assert obs["stdout"] == "hi\n" and info["step"] == 1
            assert await env.render() == "$ echo hi\nhi\n[exit 0, " + f"{info['duration'] * 1000:.0f} ms]"

    asyncio.run(main())


def test_exec_options_are_declared_once() -> None:
    """Sandbox.exec's options come from one declaration (gvx._options.ExecOptions):
    each has its check, and exec and its twin show each as a keyword."""
    from gvx import _options

    declared = list(_options.ExecOptions.__annotations__)
    assert sorted(declared) == sorted(_options._EXEC_CHECKS), "an exec option without its check, or a check without its option"
    for fn in (gvx.Sandbox.exec, gvx.aio.Sandbox.exec):
        params = inspect.signature(fn).parameters
        for name in declared:
            assert params[name].kind is inspect.Parameter.KEYWORD_ONLY and params[name].default is None, (fn, name)
        assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), fn
    with pytest.raises(TypeError, match="unexpected keyword argument 'tmeout'"):
        _options.exec_request("true", None, None, {"tmeout": 1})

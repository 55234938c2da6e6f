"""gvx.Process (Sandbox.spawn) against real sandboxes: a command that runs while
the caller writes to its stdin and reads its output, through libgvx's
gvx_process_* calls."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Iterator

import pytest

import gvx
import gvx.aio
from conftest import ANNOUNCE_RUNNING, INTERRUPTED, ctrl_c


@pytest.fixture
def sb() -> Iterator[gvx.Sandbox]:
    with gvx.Sandbox() as s:
        yield s


def read_until(p: gvx.Process, needle: bytes, timeout: float = 60, interrupt: bool = False) -> bytes:
    """What p printed on stdout up to and including needle; ^C to its job
    between reads with interrupt (the shell may not have started it yet)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout} s: no {needle!r} in the output; got {seen!r}")
        if interrupt:
            p.interrupt()
        try:
            chunk = p.read(timeout=0.1)
        except gvx.TimeoutError:
            continue
        assert chunk, f"the output ended before {needle!r}; got {seen!r}"
        seen += chunk
    return seen


def test_a_shell_keeps_its_state_and_survives_ctrl_c(sb: gvx.Sandbox) -> None:
    with sb.spawn("/bin/sh", stderr_to_stdout=True) as shell:
        shell.write("cd /tmp && export X=kept && echo ready\n")
        assert read_until(shell, b"ready\n") == b"ready\n"
        with pytest.raises(gvx.TimeoutError):
            shell.read(timeout=0.05)
        shell.write("sleep 1000; echo rc=$?\n")
        assert read_until(shell, b"rc=130\n", interrupt=True).endswith(b"rc=130\n")
        shell.write("echo $X $(pwd) >&2; exit 3\n")
        assert read_until(shell, b"kept /tmp\n") == b"kept /tmp\n"
        assert shell.read(timeout=60) == b""  # the end of the output
        result = shell.wait(timeout=60)
        assert result.exit_code == 3 and not result.timed_out
        with pytest.raises(gvx.SandboxUnavailableError, match="ended"):
            shell.write("echo late\n")
    assert shell.closed
    with pytest.raises(gvx.SandboxClosedError, match="spawn"):
        shell.read()


def test_stdin_end_separate_streams_and_kill(sb: gvx.Sandbox) -> None:
    with sb.spawn(["/bin/sh", "-c", "cat; echo bye >&2"]) as p:
        p.write(b"in and ")
        p.write("out\n")
        p.close_stdin()
        assert read_until(p, b"out\n") == b"in and out\n"
        assert p.read("stderr", timeout=60) == b"bye\n"
        assert p.wait(timeout=60).exit_code == 0
    with sb.spawn("exec sleep 1000") as p:
        with pytest.raises(gvx.TimeoutError):
            p.wait(timeout=0.05)
        p.kill()
        result = p.wait(timeout=60)
        assert result.signal == signal.SIGKILL and result.exit_code == 137
    with sb.spawn("exec sleep 1000", timeout=0.2) as p:
        assert p.wait(timeout=60).timed_out


def test_closing_the_sandbox_closes_its_processes() -> None:
    sb = gvx.Sandbox()
    p = sb.spawn("exec sleep 1000")
    sb.close()
    assert p.closed
    del p  # the finalizer of a closed process does nothing


def test_bad_arguments_say_what_to_give(sb: gvx.Sandbox) -> None:
    with pytest.raises(TypeError, match="max_output"):
        sb.spawn("true", max_output=10)  # type: ignore[call-arg]
    with pytest.raises(gvx.InvalidArgumentError, match="cmd"):
        sb.spawn([])
    with sb.spawn("cat") as p:
        with pytest.raises(gvx.InvalidArgumentError, match="stream"):
            p.read("stdin")  # type: ignore[arg-type]
        with pytest.raises(gvx.InvalidArgumentError, match="max_bytes"):
            p.read(max_bytes=0)
        with pytest.raises(gvx.InvalidArgumentError, match="timeout"):
            p.wait(timeout=-1)


def test_async_twin_reads_and_is_cancellable() -> None:
    async def main() -> None:
        async with await gvx.aio.Sandbox.create() as sb:
            async with await sb.spawn("/bin/sh") as shell:
                await shell.write("echo hello\n")
                assert await shell.read(timeout=60) == b"hello\n"
                # Cancelling a read ends the wait, not the command.
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(shell.read(), 0.1)
                await shell.write("echo still here\n")
                assert await shell.read(timeout=60) == b"still here\n"
                await shell.close_stdin()
                assert (await shell.wait(timeout=60)).exit_code == 0

    asyncio.run(main())


def test_ctrl_c_during_a_read_leaves_nothing_behind() -> None:
    code = f"""
import sys
import gvx
{ANNOUNCE_RUNNING}
with gvx.Sandbox() as sb:
    with sb.spawn("sleep 997") as p:
        _announce(sb, "sleep 997")
        try:
            p.read()
        except KeyboardInterrupt:
            print("INTERRUPTED", flush=True)
            sys.stdin.read()
            raise
"""

    def interrupted(pid: int, line: str) -> None:
        assert line == INTERRUPTED

    ctrl_c(code, interrupted)

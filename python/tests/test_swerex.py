"""gvx.integrations.swerex against the real SWE-ReX (the version pyproject.toml's
swerex extra pins): its deployment and runtime contracts, driven through
SWE-ReX's own request and action types, on real sandboxes. The cases follow
SWE-ReX's runtime tests (tests/test_execution.py in its repository, which its
package does not ship), with gvx's busybox image and its /bin/sh."""

from __future__ import annotations

import asyncio
import gc
import os
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import pytest

from conftest import ANNOUNCE_RUNNING, INTERRUPTED, ctrl_c, live, readme_example, run_python, sandboxes_of
from waiting import wait_until

pytest.importorskip("swerex", reason="SWE-ReX is not installed (make test installs it; or pip install 'gvx[swerex]')")

from swerex.exceptions import (  # noqa: E402 - SWE-ReX is there only when installed
    BashIncorrectSyntaxError,
    CommandTimeoutError,
    DeploymentNotStartedError,
    NonZeroExitCodeError,
    SessionDoesNotExistError,
    SessionExistsError,
)
from swerex.runtime.abstract import (  # noqa: E402
    BashAction,
    BashInterruptAction,
    CloseBashSessionRequest,
    Command,
    CreateBashSessionRequest,
    ReadFileRequest,
    UploadRequest,
    WriteFileRequest,
)

from gvx.integrations.swerex import GvxDeployment, GvxDeploymentConfig, GvxRuntime  # noqa: E402

T = TypeVar("T")


def A(command: str, **kw: Any) -> BashAction:
    """A session command with SWE-ReX's tests' default timeout."""
    return BashAction(command=command, timeout=kw.pop("timeout", 30), **kw)


def run(test: Callable[[GvxRuntime], Awaitable[T]]) -> T:
    """Runs test(runtime) with a started deployment whose default session
    exists; stops it, and checks that its sandbox is gone."""

    async def main() -> T:
        deployment = GvxDeployment(shell=["/bin/sh"])
        await deployment.start()
        pid = await deployment.sandbox.pid()
        try:
            await deployment.runtime.create_session(CreateBashSessionRequest())
            return await test(deployment.runtime)
        finally:
            await deployment.stop()
            assert not live(pid), "the deployment's sandbox outlived stop()"

    return asyncio.run(main())


def test_a_session_keeps_its_state() -> None:
    async def t(r: GvxRuntime) -> None:
        assert await r.is_alive()
        await r.run_in_session(A("cd /tmp && export X=42 && f() { echo in-f; }"))
        obs = await r.run_in_session(A("echo $X; pwd; f"))
        assert obs.output == "42\n/tmp\nin-f\n" and obs.exit_code == 0
        # Outputs exactly as the command printed them (SWE-ReX's cases).
        assert (await r.run_in_session(A("echo ''"))).output == "\n"
        assert (await r.run_in_session(A("printf '\\nx'"))).output == "\nx"
        assert (await r.run_in_session(A("printf '\\n\\nx\\n\\n\\n'"))).output == "\n\nx\n\n\n"
        assert (await r.run_in_session(A("printf '  x'"))).output == "  x"
        assert (await r.run_in_session(A("echo 'hello\nworld'"))).output == "hello\nworld\n"
        assert (await r.run_in_session(A("\n\n echo 'test1' \n  \n echo 'test2' \n\n"))).output == "test1\ntest2\n"
        assert (await r.run_in_session(A("cat <<EOF\na 'b'\nEOF"))).output == "a 'b'\n"
        assert (await r.run_in_session(A("# echo 'hello world'"))).output == ""
        assert (await r.run_in_session(A(""))).exit_code == 0
        await r.run_in_session(A("(sleep 10) &"))

    run(t)


def test_exit_codes_and_checks() -> None:
    async def t(r: GvxRuntime) -> None:
        assert (await r.run_in_session(A("doesntexist", check="silent"))).exit_code == 127
        assert (await r.run_in_session(A("false && true", check="silent"))).exit_code == 1
        await r.run_in_session(A("false || true", check="raise"))
        with pytest.raises(NonZeroExitCodeError, match="exit code 1"):
            await r.run_in_session(A("false", check="raise"))
        obs = await r.run_in_session(A("false", check="ignore"))
        assert obs.exit_code is None
        with pytest.raises(BashIncorrectSyntaxError) as e:
            await r.run_in_session(A("(a"))
        assert "bash_stdout" in e.value.extra_info and "bash_stderr" in e.value.extra_info
        # The session lives on after a syntax error.
        assert (await r.run_in_session(A("echo ok"))).output == "ok\n"

    run(t)


def test_a_timeout_then_an_interrupt_keeps_the_session() -> None:
    async def t(r: GvxRuntime) -> None:
        await r.run_in_session(A("cd /tmp"))
        with pytest.raises(CommandTimeoutError):
            await r.run_in_session(A("sleep 100", timeout=0.5))
        obs = await r.run_in_session(BashInterruptAction())
        assert obs.exit_code == 0 and not obs.failure_reason
        obs = await r.run_in_session(A("echo asdf; pwd"))
        assert obs.output == "asdf\n/tmp\n"
        # A shell busy in a loop of builtins survives ^C and SIGKILL to
        # its children: the session is restarted, and says so.
        with pytest.raises(CommandTimeoutError):
            await r.run_in_session(A("while :; do :; done", timeout=0.5))
        obs = await r.run_in_session(BashInterruptAction(timeout=0.5, n_retry=1))
        assert "restarted" in obs.failure_reason
        assert (await r.run_in_session(A("echo back; pwd"))).output == "back\n/\n"

    run(t)


def test_interactive_commands_by_their_expect_strings() -> None:
    async def t(r: GvxRuntime) -> None:
        # A program that reads the session's lines, and prompts.
        prompt = "echo 'prompt>'; read x; echo got-$x; echo 'prompt>'; read y"
        obs = await r.run_in_session(A(prompt, is_interactive_command=True, expect=["prompt>"]))
        assert obs.expect_string == "prompt>"
        obs = await r.run_in_session(A("hello", is_interactive_command=True, expect=["prompt>"]))
        assert obs.output == "got-hello"
        # Its last line ends it, and the shell is back, with what it read.
        await r.run_in_session(A("world", is_interactive_quit=True))
        assert (await r.run_in_session(A("echo $x $y"))).output == "hello world\n"
        # One that never prompts as expected times out, and Ctrl-C ends it.
        with pytest.raises(CommandTimeoutError):
            await r.run_in_session(A("cat", is_interactive_command=True, expect=["WONTHITTHIS"], timeout=0.3))
        obs = await r.run_in_session(BashInterruptAction())
        assert not obs.failure_reason
        assert (await r.run_in_session(A("echo ok"))).output == "ok\n"

    run(t)


def test_sessions_are_isolated_and_named() -> None:
    async def t(r: GvxRuntime) -> None:
        await r.create_session(CreateBashSessionRequest(session="shell1"))
        await r.create_session(CreateBashSessionRequest(session="shell2"))
        with pytest.raises(SessionExistsError):
            await r.create_session(CreateBashSessionRequest(session="shell1"))
        await asyncio.gather(
            r.run_in_session(A("x=42", session="shell1")),
            r.run_in_session(A("y=24", session="shell2")),
        )
        assert (await r.run_in_session(A("echo $x", session="shell1"))).output == "42\n"
        assert (await r.run_in_session(A("echo $x", session="shell2"))).output == "\n"
        await r.close_session(CloseBashSessionRequest(session="shell1"))
        with pytest.raises(SessionDoesNotExistError):
            await r.close_session(CloseBashSessionRequest(session="shell1"))
        with pytest.raises(SessionDoesNotExistError):
            await r.run_in_session(A("true", session="shell1"))

    run(t)


def test_commands_and_files(tmp_path: Path) -> None:
    source = tmp_path / "source_dir"
    source.mkdir()
    (source / "file1.txt").write_text("test1")
    (source / "file2.txt").write_text("test2")
    (tmp_path / "one.txt").write_text("one")

    async def t(r: GvxRuntime) -> None:
        assert (await r.execute(Command(command="echo 'hello world'", shell=True))).stdout == "hello world\n"
        assert (await r.execute(Command(command=["echo", "-n", "\nhello world"]))).stdout == "\nhello world"
        merged = await r.execute(Command(command=["sh", "-c", "echo out; echo err >&2"], merge_output_streams=True))
        assert merged.stdout.splitlines() == ["out", "err"] and merged.stderr == ""
        split = await r.execute(Command(command=["sh", "-c", "echo out; echo err >&2"]))
        assert split.stdout == "out\n" and split.stderr == "err\n"
        assert (await r.execute(Command(command=["sh", "-c", "echo $A-$HOME"], env={"A": "a"}))).stdout == "a-\n"
        assert (await r.execute(Command(command="pwd", shell=True, cwd="/tmp"))).stdout == "/tmp\n"
        with pytest.raises(CommandTimeoutError):
            await r.execute(Command(command=["sleep", "10"], timeout=0.1))
        with pytest.raises(NonZeroExitCodeError):
            await r.execute(Command(command="false", shell=True, check=True))
        await r.write_file(WriteFileRequest(path="/work/new/test.txt", content="test"))
        assert (await r.read_file(ReadFileRequest(path="/work/new/test.txt"))).content == "test"
        with pytest.raises(FileNotFoundError):
            await r.read_file(ReadFileRequest(path="/non_existent.txt"))
        await r.upload(UploadRequest(source_path=str(source), target_path="/work/target_dir"))
        assert (await r.read_file(ReadFileRequest(path="/work/target_dir/file2.txt"))).content == "test2"
        await r.upload(UploadRequest(source_path=str(tmp_path / "one.txt"), target_path="/work/one.txt"))
        assert (await r.read_file(ReadFileRequest(path="/work/one.txt"))).content == "one"
        large = "x" * (1 << 20)
        await r.write_file(WriteFileRequest(path="/work/large.txt", content=large))
        assert (await r.read_file(ReadFileRequest(path="/work/large.txt"))).content == large

    run(t)


def test_the_deployment_from_its_config_and_before_start() -> None:
    async def t() -> None:
        deployment = GvxDeploymentConfig(shell=["/bin/sh"], memory="256m").get_deployment()
        with pytest.raises(DeploymentNotStartedError):
            deployment.runtime
        with pytest.raises(DeploymentNotStartedError):
            await deployment.is_alive()
        await deployment.start()
        try:
            assert await deployment.is_alive()
            await deployment.runtime.create_session(CreateBashSessionRequest())
            obs = await deployment.runtime.run_in_session(A("echo $((6 * 7))"))
            assert obs.output == "42\n"
        finally:
            await deployment.stop()
        assert sandboxes_of(os.getpid()) == []
        # A shell the image lacks is an error that says what to pass.
        deployment = GvxDeployment()
        await deployment.start()
        try:
            with pytest.raises(Exception, match="shell=\\['/bin/sh'\\]"):
                await deployment.runtime.create_session(CreateBashSessionRequest())
        finally:
            await deployment.stop()

    asyncio.run(t())


def test_no_sandbox_left_after_an_exception_or_a_dropped_deployment() -> None:
    async def t() -> None:
        with pytest.raises(RuntimeError, match="the harness failed"):
            async with GvxDeployment(shell=["/bin/sh"]) as d:
                pid = await d.sandbox.pid()
                await d.runtime.create_session(CreateBashSessionRequest())
                await d.runtime.run_in_session(A("sleep 600 &"))
                raise RuntimeError("the harness failed")
        assert not live(pid)
        dropped = GvxDeployment(shell=["/bin/sh"])
        await dropped.start()
        pid = await dropped.sandbox.pid()
        del dropped
        gc.collect()
        wait_until(lambda: not live(pid), 60, "the dropped deployment's sandbox gone")

    asyncio.run(t())


def test_golden_and_restore_pass_through(tmp_path: Path) -> None:
    import gvx

    golden = gvx.Volume.create(tmp_path / "golden.ext4", "64m")
    with gvx.Sandbox(mounts=[gvx.Mount(golden.path, "/data")]) as sb:
        sb.exec("echo prepared > /data/state", check=True)
    snap = tmp_path / "task.snap"
    with gvx.Sandbox() as sb:
        sb.exec("echo set-up > /root/task", check=True)
        sb.checkpoint(snap)

    async def t() -> None:
        for _ in range(2):  # each deployment writes its own clone; the golden stays as prepared
            async with GvxDeployment(shell=["/bin/sh"], golden=str(golden.path), golden_path="/data") as d:
                obs = await d.runtime.execute(Command(command="cat /data/state; echo episode >> /data/state", shell=True))
                assert obs.stdout == "prepared\n"
                assert d._booted is not None
                clone_dir = d._booted._episode_dir
                assert clone_dir is not None and clone_dir.is_dir()
            assert not clone_dir.exists()
        async with GvxDeployment(shell=["/bin/sh"], restore=str(snap), workdir="/root") as d:
            assert (await d.runtime.read_file(ReadFileRequest(path="task"))).content == "set-up\n"

    asyncio.run(t())


def test_a_warm_sandbox_is_taken_and_replaced() -> None:
    import gvx.integrations.swerex as adapter

    config = GvxDeploymentConfig(shell=["/bin/sh"], warm=1, env={"WARM": "1"})

    async def t() -> None:
        async with config.get_deployment():
            # The first start boots its own and one ahead.
            (ahead,) = [f for ready in adapter._warm.values() for f in ready]
            warm_pid = ahead.result(timeout=120).sandbox.pid
            async with config.get_deployment() as second:
                assert await second.sandbox.pid() == warm_pid  # took the warm one
                obs = await second.runtime.execute(Command(command="echo $WARM", shell=True))
                assert obs.stdout == "1\n"
            assert not live(warm_pid)
        adapter.close_warm_sandboxes()
        wait_until(lambda: sandboxes_of(os.getpid()) == [], 60, "no sandbox left once the warm ones are closed",
                   lambda: sandboxes_of(os.getpid()))

    asyncio.run(t())


CTRL_C_CHILD = f"""
import asyncio, sys
from swerex.runtime.abstract import BashAction, CreateBashSessionRequest
from gvx.integrations.swerex import GvxDeployment
{ANNOUNCE_RUNNING}

async def main():
    d = GvxDeployment(shell=["/bin/sh"])
    await d.start()
    try:
        await d.runtime.create_session(CreateBashSessionRequest())
        _announce(d.sandbox.inner, "sleep 600")
        await d.runtime.run_in_session(BashAction(command="sleep 600", timeout=900))
    finally:
        await d.stop()

try:
    asyncio.run(main())
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
    sys.stdin.read()
    raise
"""


def test_ctrl_c_mid_command_stops_the_deployment() -> None:
    def interrupted(pid: int, line: str) -> None:
        # The harness's finally stopped the deployment before the interrupt
        # left asyncio.run.
        assert line == INTERRUPTED
        assert not live(pid)

    ctrl_c(CTRL_C_CHILD, interrupted)


def test_readme_example_runs() -> None:
    r = run_python(readme_example("### SWE-ReX (SWE-agent)"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "hi from /tmp\n 0\n"

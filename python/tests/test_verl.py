"""gvx.integrations.verl: the verl tool (the real verl, loaded by verl's own
registry and called as verl's ToolAgentLoop calls it) in real sandboxes.

verl imports torch, so these tests run in a venv of their own: `make
test-integrations`. In make test's venv only the ImportError test runs.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

import gvx
from conftest import ANNOUNCE_RUNNING, INTERRUPTED, ctrl_c, live, readme_example, run_python, sandboxes_of

HAVE_VERL = importlib.util.find_spec("verl") is not None
needs_verl = pytest.mark.skipif(
    not HAVE_VERL, reason="verl is not installed in this venv: `make test-integrations` runs these tests in its own"
)

if HAVE_VERL:
    from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop
    from verl.experimental.agent_loop.tool_parser import FunctionCall
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import ToolResponse
    from verl.tools.tool_registry import initialize_tools_from_config

    from gvx.integrations.verl import GvxTool


# A task as a dataset row's create_kwargs carries it: a script with a bug and
# the test that says whether it was fixed. The busybox default image has sh.
BUGGY = "echo $(($1 - $2))\n"
TASK: dict[str, Any] = {
    "files": {"/app/add.sh": BUGGY},
    "setup": ["chmod +x /app/add.sh"],
    "test": 'test "$(/app/add.sh 2 3)" = 5',
}
FIX = "sed -i 's/ - / + /' /app/add.sh"

YAML = """\
tools:
  - class_name: gvx.integrations.verl.GvxTool
    config:
      type: native
      workdir: {workdir}
      timeout: {timeout}
{extra}
    tool_schema:
      type: function
      function:
        name: bash
        description: Runs a shell command in the task's sandbox.
        parameters:
          type: object
          properties:
            command:
              type: string
              description: The command to run.
          required: [command]
"""

_before: list[int] = []


@pytest.fixture(autouse=True)
def _sandboxes_before() -> None:
    """Sandboxes other tests of the session hold are not this test's."""
    _before[:] = sandboxes_of(os.getpid())


def mine() -> list[int]:
    """The sandboxes this process started during the test and still runs."""
    return [p for p in sandboxes_of(os.getpid()) if p not in _before]


def load(tmp_path: Path, timeout: object = 30, **extra: Any) -> Any:
    """The tool, as verl builds it from a tool config YAML; extra's values are YAML text."""
    workdir = extra.pop("workdir", "/app")
    lines = "".join(f"      {k}: {v}\n" for k, v in extra.items())
    path = tmp_path / "tools.yaml"
    path.write_text(YAML.format(workdir=workdir, timeout=timeout, extra=lines.rstrip("\n")))
    tools = initialize_tools_from_config(str(path))
    assert len(tools) == 1
    return tools[0]


@needs_verl
def test_loads_through_verls_registry(tmp_path: Path) -> None:
    tool = load(tmp_path, memory="256m", max_output="4096")
    assert isinstance(tool, GvxTool) and isinstance(tool, BaseTool)
    assert tool.name == "bash" and tool.get_openai_tool_schema().function.name == "bash"
    assert tool.gvx_config.memory == "256m" and tool.gvx_config.task.workdir == "/app"
    assert mine() == []  # no sandbox until a trajectory uses one


async def trajectory(tool: Any, instance_id: str, commands: list[str]) -> tuple[list[Any], float]:
    """verl's per-trajectory lifecycle (its rollout's: one instance per
    trajectory): create, a command per turn, calc_reward, release."""
    got_id, created = await tool.create(instance_id, create_kwargs=TASK)
    assert got_id == instance_id and isinstance(created, ToolResponse) and created.is_empty()
    # Held past release, so that only release, not garbage collection, can close the sandbox.
    session = tool._instances[instance_id]
    try:
        outs = [await tool.execute(instance_id, {"command": c}) for c in commands]
        return outs, await tool.calc_reward(instance_id)
    finally:
        await tool.release(instance_id)
        assert mine() == [] and session.closed


@needs_verl
def test_a_trajectory_that_fixes_the_bug_is_rewarded(tmp_path: Path) -> None:
    tool = load(tmp_path)
    outs, reward = asyncio.run(trajectory(tool, "traj-1", ["cat add.sh", FIX, "./add.sh 2 3"]))
    (first, r0, m0), (_, _, m1), (last, _, _) = outs
    assert isinstance(first, ToolResponse) and first.text == BUGGY + "[exit code 0]" and r0 == 0.0
    assert m0["exit_code"] == 0 and m0["timed_out"] is False and m1["exit_code"] == 0
    assert last.text == "5\n[exit code 0]"
    assert reward == 1.0
    assert mine() == []


@needs_verl
def test_a_trajectory_that_does_not_fix_it_gets_zero(tmp_path: Path) -> None:
    tool = load(tmp_path)
    outs, reward = asyncio.run(trajectory(tool, "traj-2", ["./add.sh 2 3; echo oops >&2; exit 3"]))
    (out, _, metrics), = outs
    assert out.text == "-1\noops\n[exit code 3]" and metrics["exit_code"] == 3
    assert reward == 0.0
    assert mine() == []


@needs_verl
def test_toolagentloop_calls_share_the_trajectorys_sandbox(tmp_path: Path) -> None:
    """verl's ToolAgentLoop creates and releases an instance around every call
    and passes the trajectory's AgentData: the calls of one trajectory see
    each other's edits; another trajectory has its own sandbox; the sandbox
    goes when the trajectory's AgentData does."""
    tool = load(tmp_path, reward_each_step="true")
    loop = ToolAgentLoop.__new__(ToolAgentLoop)  # only what _call_tool reads: no model, no server
    loop.tools = {tool.name: tool}
    loop.max_tool_response_length = 4096
    loop.tool_response_truncate_side = "middle"

    def agent(request_id: str) -> Any:
        return AgentData(messages=[], image_data=None, video_data=None, audio_data=None, mm_processor_kwargs=None,
                         metrics={}, request_id=request_id, tools_kwargs={"bash": {"create_kwargs": TASK}})

    async def call(data: Any, command: str) -> tuple[Any, float, dict[str, Any]]:
        fc = FunctionCall(name="bash", arguments=json.dumps({"command": command}))
        out: tuple[Any, float, dict[str, Any]] = await loop._call_tool(fc, data.tools_kwargs, data)
        return out

    async def main() -> None:
        a, b = agent("a"), agent("b")
        text, reward, _ = await call(a, FIX)
        assert text.text == "[exit code 0]" and reward == 1.0  # the test passes after the fix
        text, reward, _ = await call(a, "./add.sh 2 3")
        assert text.text == "5\n[exit code 0]" and reward == 1.0
        text, reward, _ = await call(b, "./add.sh 2 3")
        assert text.text == "-1\n[exit code 0]" and reward == 0.0
        assert len(mine()) == 2 and tool.sandboxes() == 2
        del a
        gc.collect()
        assert len(mine()) == 1 and tool.sandboxes() == 1
        tool.close()
        assert mine() == [] and tool.sandboxes() == 0

    asyncio.run(main())


@needs_verl
def test_a_command_past_its_timeout_is_killed(tmp_path: Path) -> None:
    tool = load(tmp_path, timeout=1)

    async def main() -> tuple[Any, dict[str, Any]]:
        await tool.create("t", create_kwargs=TASK)
        try:
            out, _, metrics = await tool.execute("t", {"command": "echo started; sleep 60"})
            after, _, _ = await tool.execute("t", {"command": "echo alive"})
            assert after.text == "alive\n[exit code 0]"
            return out, metrics
        finally:
            await tool.release("t")

    out, metrics = asyncio.run(main())
    assert out.text == "started\n[timed out after 1 s and killed]" and metrics["timed_out"] is True
    assert mine() == []


@needs_verl
def test_bad_calls_are_told_to_the_model(tmp_path: Path) -> None:
    tool = load(tmp_path)

    async def main() -> None:
        await tool.create("t", create_kwargs={**TASK, "setup": ["echo no such thing >&2; exit 3"]})
        out, reward, metrics = await tool.execute("t", {"cmd": "ls"})
        assert 'with a shell command: {"command": "ls"}' in out.text and reward == 0.0
        assert mine() == []  # a call without a command starts nothing
        # The task's setup fails: the sandbox is closed, the model told, the reward 0.
        out, _, metrics = await tool.execute("t", {"command": "ls"})
        assert "the sandbox failed" in out.text and "no such thing" in metrics["sandbox_error"]
        assert mine() == []
        out, _, _ = await tool.execute("t", {"command": "ls"})  # told again, no new sandbox
        assert "the sandbox failed earlier" in out.text and "no such thing" in out.text
        assert mine() == []
        assert await tool.calc_reward("t") == 0.0
        await tool.release("t")
        await tool.release("t")  # again: nothing

    asyncio.run(main())
    assert mine() == []


@needs_verl
def test_an_exception_in_the_harness_leaves_no_sandbox(tmp_path: Path) -> None:
    tool = load(tmp_path)

    async def harness() -> None:
        await tool.create("t", create_kwargs=TASK)
        try:
            await tool.execute("t", {"command": FIX})
            assert len(mine()) == 1
            raise RuntimeError("harness")
        finally:
            await tool.release("t")

    with pytest.raises(RuntimeError, match="harness"):
        asyncio.run(harness())
    assert mine() == []

    # A harness that never releases: the tool's close (and the process's exit) closes them.
    async def forgetful() -> None:
        for i in range(2):
            await tool.create(f"f{i}", create_kwargs=TASK)
            await tool.execute(f"f{i}", {"command": "true"})

    asyncio.run(forgetful())
    assert len(mine()) == 2 and tool.sandboxes() == 2
    tool.close()
    assert mine() == []


@needs_verl
def test_cancelling_an_execute_closes_its_sandbox(tmp_path: Path) -> None:
    tool = load(tmp_path, timeout=900)

    async def main() -> None:
        await tool.create("t", create_kwargs=TASK)
        await tool.execute("t", {"command": "true"})
        assert len(mine()) == 1
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(tool.execute("t", {"command": "sleep 600"}), 1)
        assert mine() == []
        await tool.release("t")

    asyncio.run(main())


@needs_verl
def test_warm_sandboxes_are_handed_over_and_closed(tmp_path: Path) -> None:
    tool = load(tmp_path, warm="1")

    async def main() -> None:
        await tool.create("t", create_kwargs=TASK)  # starts the warm one
        out, _, _ = await tool.execute("t", {"command": "./add.sh 2 3"})
        assert out.text == "-1\n[exit code 0]"
        assert tool.sandboxes() == 2  # the trajectory's and the next warm one
        await tool.release("t")

    asyncio.run(main())
    assert tool.sandboxes() == 1
    tool.close()
    from waiting import wait_until

    wait_until(lambda: mine() == [], 60, "the warm sandbox closed", mine)


@needs_verl
def test_golden_and_restore_pass_through(tmp_path: Path) -> None:
    golden = gvx.Volume.create(tmp_path / "golden.ext4", "64m")
    with gvx.Sandbox(mounts=[gvx.Mount(golden.path, "/data")]) as sb:
        sb.exec("echo prepared > /data/state", check=True)
    tool = load(tmp_path, golden=f'"{golden.path}"', golden_path="/data")

    async def trajectories() -> None:
        for i in range(2):  # each trajectory writes its own clone; the golden stays as prepared
            await tool.create(f"g{i}", create_kwargs={"test": "true"})
            out, _, _ = await tool.execute(f"g{i}", {"command": "cat /data/state; echo trajectory >> /data/state"})
            assert out.text == "prepared\n[exit code 0]"
            clone_dir = tool._instances[f"g{i}"].sandbox._episode_dir
            assert clone_dir is not None and clone_dir.is_dir()
            await tool.release(f"g{i}")
            assert not clone_dir.exists()

    asyncio.run(trajectories())

    snap = tmp_path / "task.snap"
    with gvx.Sandbox() as sb:
        sb.exec("echo set-up > /root/task", check=True)
        sb.checkpoint(snap)
    tool = load(tmp_path, restore=f'"{snap}"', workdir="/root")

    async def restored() -> None:
        await tool.create("r")
        out, _, _ = await tool.execute("r", {"command": "cat task"})
        assert out.text == "set-up\n[exit code 0]"
        await tool.release("r")

    asyncio.run(restored())
    assert mine() == []


@needs_verl
def test_bad_config_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(gvx.InvalidArgumentError, match=r"config 'timeout' must be seconds > 0, not 'soon'"):
        load(tmp_path, timeout='"soon"')
    with pytest.raises(gvx.InvalidArgumentError, match=r"unknown config keys \['memroy'\]"):
        load(tmp_path, memroy="1g")
    with pytest.raises(gvx.InvalidArgumentError, match=r"config 'files' maps absolute guest paths"):
        load(tmp_path, files='{"app/x": y}')
    with pytest.raises(gvx.InvalidArgumentError, match=r"unknown gvx.Sandbox options \['pid_limit'\]"):
        load(tmp_path, sandbox_options="{pid_limit: 5}")
    with pytest.raises(gvx.InvalidArgumentError, match=r"config 'sandbox_options' may not set \['memory'\]"):
        load(tmp_path, sandbox_options="{memory: 1g}")
    with pytest.raises(gvx.InvalidArgumentError, match=r"config 'warm' must be the number of sandboxes"):
        load(tmp_path, warm="-1")
    with pytest.raises(gvx.InvalidArgumentError, match=r"config 'network' is 'none' \(loopback only\) or 'nat'"):
        load(tmp_path, network="bridge")
    tool = load(tmp_path)

    async def main() -> None:
        with pytest.raises(gvx.InvalidArgumentError, match=r"config 'setup' is a list of shell commands"):
            await tool.create("t", create_kwargs={"setup": [1]})
        await tool.create("t", create_kwargs={"files": {}})
        with pytest.raises(gvx.InvalidArgumentError, match=r"the task has no 'test' command"):
            await tool.calc_reward("t")
        await tool.release("t")

    asyncio.run(main())
    assert mine() == []


# A verl rollout reduced to one trajectory whose command outlives any patience.
CTRL_C_CHILD = f"""
import asyncio, sys
from gvx.integrations.verl import GvxTool
# Ray (which verl imports) registers ray.shutdown to run at exit, and after it
# a process that an uncaught KeyboardInterrupt ends exits 1 rather than by
# SIGINT, which ctrl_c checks. This process never started Ray.
import atexit
from ray._private import worker
atexit.unregister(worker.shutdown)
{ANNOUNCE_RUNNING}
tool = GvxTool({{"type": "native", "timeout": 900}})
async def main():
    await tool.create("t", create_kwargs={{"test": "true"}})
    await tool.execute("t", {{"command": "true"}})
    _announce(tool._instances["t"].sandbox.sandbox, "sleep 600")
    await tool.execute("t", {{"command": "sleep 600"}})
try:
    asyncio.run(main())
except KeyboardInterrupt:
    print("INTERRUPTED", tool.sandboxes(), flush=True)
    sys.stdin.read()
    raise
"""


@needs_verl
def test_ctrl_c_mid_execute_closes_the_sandbox() -> None:
    def interrupted(pid: int, line: str) -> None:
        # The interrupted execute closed the trajectory's sandbox before the
        # interrupt left asyncio.run: the harness holds no sandbox.
        assert line == f"{INTERRUPTED} 0", line
        assert not live(pid)

    ctrl_c(CTRL_C_CHILD, interrupted)


@needs_verl
def test_readme_example_runs(tmp_path: Path) -> None:
    r = run_python(readme_example("### verl"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("5\n[exit code 0]\n1.0\n"), r.stdout

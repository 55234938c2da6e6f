"""gvx.integrations.minisweagent against the real mini-swe-agent package:
its DefaultAgent, driven by its DeterministicModel, runs commands in a real
sandbox through GvxEnvironment."""

from __future__ import annotations

import gc
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import ANNOUNCE_RUNNING, INTERRUPTED, ctrl_c, sandboxes_of


os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # no banner on import
try:
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments import get_environment
    from minisweagent.models.test_models import DeterministicModel, make_output

    from gvx.integrations.minisweagent import SUBMIT_SENTINEL, GvxEnvironment

    MISSING = ""
except ImportError as e:
    MISSING = f"mini-swe-agent is not installed ({e}); `make deps-python` or pip install 'gvx[minisweagent]'"
    print(f"test_minisweagent: skipping the agent tests: {MISSING}", file=sys.stderr)

needs_minisweagent = pytest.mark.skipif(bool(MISSING), reason=MISSING or "installed")

CLASS_PATH = "gvx.integrations.minisweagent.GvxEnvironment"
# The task's directory: absent on the host, so only the sandbox can have it.
CWD = "/testbed-gvx-msa"
AGENT_CONFIG: dict[str, Any] = {
    "system_template": "You are a helpful assistant. System: {{system}}",
    "instance_template": "Please solve this issue: {{task}}",
    "step_limit": 10,
    "cost_limit": 0,
}


def agent(env: Any, *commands: str) -> Any:
    """mini-swe-agent's DefaultAgent whose model answers with one command per step, in order."""
    model = DeterministicModel(outputs=[make_output(f"step {i}", [{"command": c}]) for i, c in enumerate(commands)])  # type: ignore[no-untyped-call]
    return DefaultAgent(model, env, **AGENT_CONFIG)


def observations(a: Any) -> list[str]:
    """What the agent was shown after each command."""
    return [m["content"] for m in a.messages if m["role"] == "user"][1:]


@pytest.fixture
def env() -> Iterator[Any]:
    with GvxEnvironment(cwd=CWD, timeout=20) as e:
        yield e


@needs_minisweagent
def test_agent_edits_runs_tests_and_submits(env: Any) -> None:
    assert not Path(CWD).exists()
    a = agent(
        env,
        "echo broken > answer.txt && sed -i s/broken/fixed/ answer.txt && cat answer.txt",
        "grep -q fixed answer.txt && echo TESTS PASSED",
        "grep -q broken answer.txt",
        "echo to stderr >&2; echo $GVX_MSA_VAR; pwd",
        f"echo {SUBMIT_SENTINEL} && cat answer.txt",
    )
    result = a.run("make answer.txt say fixed", GVX_MSA_VAR="unused")
    assert result == {"exit_status": "Submitted", "submission": "fixed\n"}, a.messages[-1]
    edit, tests, failing, streams = observations(a)
    assert "<returncode>0</returncode>" in edit and "fixed" in edit, edit
    assert "<returncode>0</returncode>" in tests and "TESTS PASSED" in tests, tests
    assert "<returncode>1</returncode>" in failing, failing
    # stderr on the same stream, each command in a fresh shell in cwd.
    assert "to stderr\n\n" + CWD in streams, streams
    # The work happened in the sandbox, and the trajectory says where.
    assert env.sandbox.read_file(f"{CWD}/answer.txt") == b"fixed\n"
    assert not Path(CWD).exists()
    saved = a.save(None)
    assert saved["info"]["config"]["environment_type"] == CLASS_PATH
    assert saved["info"]["exit_status"] == "Submitted"


@needs_minisweagent
def test_a_command_past_its_timeout_is_an_observation_and_is_killed() -> None:
    with GvxEnvironment(timeout=2) as env:
        a = agent(
            env,
            "echo started; sleep 60 & echo $! > /tmp/sleeper; wait",
            "kill -0 $(cat /tmp/sleeper) && echo ALIVE || echo GONE",
            f"echo {SUBMIT_SENTINEL}",
        )
        t0 = time.monotonic()
        assert a.run("time out")["exit_status"] == "Submitted"
        assert time.monotonic() - t0 < 20
        timed_out, after = observations(a)
        # As mini-swe-agent's Docker and local environments report it: the
        # agent sees the exception and the output so far, and goes on.
        assert "<returncode>-1</returncode>" in timed_out, timed_out
        assert "<exception>An error occurred while executing the command: Command " in timed_out, timed_out
        assert "timed out after 2 seconds</exception>" in timed_out, timed_out
        assert "started" in timed_out, timed_out
        # gvx kills what the command started (docker exec leaves it running).
        assert "GONE" in after, after

        # execute's own timeout wins over the config's.
        t0 = time.monotonic()
        out = env.execute({"command": "sleep 30"}, timeout=1)
        assert time.monotonic() - t0 < 10
        assert out["returncode"] == -1 and out["extra"]["exception_type"] == "TimeoutExpired", out
        assert out["extra"]["exception"].endswith("timed out after 1 seconds"), out


@needs_minisweagent
def test_execute_results_env_and_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GVX_MSA_FORWARDED", "from-host")
    monkeypatch.setenv("GVX_MSA_BOTH", "host-loses")
    with GvxEnvironment(
        cwd=CWD, env={"GVX_MSA_SET": "set", "GVX_MSA_BOTH": "env-wins"}, forward_env=["GVX_MSA_FORWARDED", "GVX_MSA_BOTH", "GVX_MSA_UNSET"]
    ) as env:
        out = env.execute({"command": 'echo "$GVX_MSA_SET $GVX_MSA_FORWARDED $GVX_MSA_BOTH ${GVX_MSA_UNSET-unset}"; pwd; exit 7'})
        assert out == {"output": f"set from-host env-wins unset\n{CWD}\n", "returncode": 7, "exception_info": ""}
        assert env.execute({"command": "pwd"}, cwd="/tmp")["output"] == "/tmp\n"
        # No state carries over between commands but the filesystem.
        env.execute({"command": "cd /; export GVX_MSA_LATER=1; touch kept"})
        assert env.execute({"command": 'pwd; echo "${GVX_MSA_LATER-none}"; ls /kept'})["output"] == f"{CWD}\nnone\n/kept\n"
        # The sentinel counts only as the first line of a successful command.
        assert env.execute({"command": f"echo {SUBMIT_SENTINEL}; exit 1"})["returncode"] == 1
        assert env.execute({"command": f"echo first; echo {SUBMIT_SENTINEL}"})["returncode"] == 0
        assert env.get_template_vars()["cwd"] == CWD and "system" in env.get_template_vars()


@needs_minisweagent
def test_chosen_by_import_path_and_by_short_name() -> None:
    for name in (CLASS_PATH, "gvx"):
        env = get_environment({"environment_class": name, "cwd": CWD, "timeout": 5})
        assert isinstance(env, GvxEnvironment)
        try:
            assert env.execute({"command": "pwd"})["output"] == f"{CWD}\n"
        finally:
            env.cleanup()


@needs_minisweagent
def test_no_sandbox_is_left() -> None:
    me = os.getpid()
    assert sandboxes_of(me) == []

    env = GvxEnvironment()
    assert env.sandbox is not None and sandboxes_of(me) == [env.sandbox.pid]
    env.close()
    assert sandboxes_of(me) == []
    env.cleanup()  # again: nothing
    out = env.execute({"command": "echo late"})
    assert out["returncode"] == -1 and out["extra"]["exception_type"] == "SandboxClosedError", out

    # The harness raises mid-episode: its scripted model runs out of answers.
    with pytest.raises(IndexError):
        with GvxEnvironment() as env:
            agent(env, "echo one").run("fail")
    assert sandboxes_of(me) == []

    # Dropped without cleanup, as mini-swe-agent's run scripts leave their environments.
    GvxEnvironment()
    gc.collect()
    assert sandboxes_of(me) == []

    # A sandbox that cannot start leaves nothing either.
    with pytest.raises(Exception):
        GvxEnvironment(image="oci:/nonexistent-gvx-msa-layout:latest")
    assert sandboxes_of(me) == []



@needs_minisweagent
def test_golden_and_restore_pass_through(tmp_path: Path) -> None:
    import gvx

    golden = gvx.Volume.create(tmp_path / "golden.ext4", "64m")
    with gvx.Sandbox(mounts=[gvx.Mount(golden.path, "/data")]) as sb:
        sb.exec("echo prepared > /data/state", check=True)
    for _ in range(2):  # each environment writes its own clone; the golden stays as prepared
        with GvxEnvironment(golden=str(golden.path), golden_path="/data") as env:
            assert env.execute({"command": "cat /data/state; echo episode >> /data/state"})["output"] == "prepared\n"
            clone_dir = env._episode_dir
            assert clone_dir is not None and clone_dir.is_dir()
        assert not clone_dir.exists()

    snap = tmp_path / "task.snap"
    with gvx.Sandbox() as sb:
        sb.exec("echo set-up > /root/task", check=True)
        sb.checkpoint(snap)
    with GvxEnvironment(restore=str(snap), cwd="/root") as env:
        assert env.execute({"command": "cat task"})["output"] == "set-up\n"


# The harness's own loop, as `mini` runs it (the environment by import path,
# never cleaned up), with a command that outlives any patience.
CTRL_C_CHILD = f"""
import os, sys
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
from minisweagent.agents.default import DefaultAgent
from minisweagent.environments import get_environment
from minisweagent.models.test_models import DeterministicModel, make_output
{ANNOUNCE_RUNNING}
env = get_environment({{"environment_class": {CLASS_PATH!r}, "timeout": 900}})
_announce(env.sandbox, "sleep 600")
model = DeterministicModel(outputs=[make_output("wait", [{{"command": "sleep 600"}}])])
try:
    DefaultAgent(model, env, **{AGENT_CONFIG!r}).run("wait")
except KeyboardInterrupt:
    print("INTERRUPTED", env.execute({{"command": "ps -o args"}})["output"].replace(chr(10), "|"), flush=True)
    sys.stdin.read()
    raise
"""


@needs_minisweagent
def test_ctrl_c_kills_the_command_and_leaves_no_sandbox() -> None:
    def interrupted(pid: int, line: str) -> None:
        # The command is killed and the sandbox still serves: mini's
        # InteractiveAgent catches the interrupt, asks the user, and goes on
        # with the same environment; the sandbox goes with the process.
        processes = [p.strip() for p in line[len(INTERRUPTED) :].split("|")]
        assert "gvx-init" in processes and "sleep 600" not in processes, line

    ctrl_c(CTRL_C_CHILD, interrupted)

"""gvx.integrations.skyrl: SkyRL-Gym episodes (the real skyrl-gym) in real sandboxes."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

import gvx
from conftest import ANNOUNCE_RUNNING, INTERRUPTED, ctrl_c, live, readme_example, run_python, sandboxes_of

skyrl_gym = pytest.importorskip("skyrl_gym", reason="skyrl-gym is not installed (make test installs it; or pip install 'gvx[skyrl]')")

from omegaconf import OmegaConf  # noqa: E402 - skyrl-gym's own dependency, there only when it is

from gvx.integrations.skyrl import GvxTextEnv, parse_action  # noqa: E402


# A task as a dataset row carries it: a script with a bug and the test that
# says whether it was fixed. The busybox default image has sh, not Python.
BUGGY = 'echo $(($1 - $2))\n'
ROW: dict[str, Any] = {
    "files": {"/app/add.sh": BUGGY},
    "setup": ["chmod +x /app/add.sh"],
    "test": 'test "$(/app/add.sh 2 3)" = 5',
    # What SkyRL's rows carry besides; the environment reads only its own keys.
    "reward_spec": {"method": "rule", "ground_truth": None},
    "max_turns": 5,
}
PROMPT = [{"role": "user", "content": "/app/add.sh should add its arguments. Fix it."}]
FIX = "<bash>sed -i 's/ - / + /' /app/add.sh && /app/add.sh 2 3</bash>"


_before: list[int] = []


@pytest.fixture(autouse=True)
def _sandboxes_before() -> None:
    """Sandboxes other tests of the session hold are not this test's."""
    _before[:] = sandboxes_of(os.getpid())


def mine() -> list[int]:
    """The sandboxes this process started during the test and still runs."""
    return [p for p in sandboxes_of(os.getpid()) if p not in _before]


def make(**row: Any) -> Any:
    return skyrl_gym.make("gvx", env_config=OmegaConf.create({"step_timeout": 30}), extras={**ROW, **row})


def test_episode_through_make_rewards_the_fix() -> None:
    env = make()
    assert isinstance(env, GvxTextEnv) and env.spec.id == "gvx"
    assert mine() == []
    prompt, _ = env.init(PROMPT)
    assert prompt == PROMPT and len(mine()) == 1
    out = env.step("The script subtracts.\n" + FIX)
    assert out["done"] is False and out["reward"] == 0.0
    assert out["observations"] == [{"role": "user", "content": "5\n[exit code 0]"}]
    assert out["metadata"]["exit_code"] == 0
    out = env.step("Fixed. <submit/>")
    assert out["done"] is True and out["reward"] == 1.0 and out["observations"] == []
    assert out["metadata"]["test_exit_code"] == 0
    assert env.get_metrics() == {"turns": 2, "solved": 1.0}
    assert mine() == []  # the episode's end closes its sandbox
    env.close()
    with pytest.raises(gvx.SandboxClosedError, match="episode has ended"):
        env.step("<bash>true</bash>")


def test_no_fix_rewards_zero() -> None:
    with make() as env:
        env.init(PROMPT)
        out = env.step("<bash>cat /app/add.sh</bash>")
        assert out["observations"][0]["content"] == BUGGY + "[exit code 0]"
        out = env.step("<submit/>")
        assert out["done"] is True and out["reward"] == 0.0 and out["metadata"]["test_exit_code"] == 1
    assert mine() == []


def test_files_as_records_and_max_turns_end_the_episode_scored() -> None:
    """Files as a Parquet column holds them; the last allowed turn ends the
    episode and scores it, submitted or not; a turn without a command is told
    the convention."""
    env = make(files=[{"path": "/app/add.sh", "content": BUGGY.encode()}], max_turns=2)
    try:
        env.init(PROMPT)
        out = env.step("I will think about it.")
        assert not out["done"] and "<bash>...</bash>" in out["observations"][0]["content"]
        out = env.step(FIX)
        assert out["done"] is True and out["reward"] == 1.0 and out["metadata"]["submitted"] is False
    finally:
        env.close()


def test_a_command_past_step_timeout_is_killed() -> None:
    env = skyrl_gym.make("gvx", env_config=OmegaConf.create({"step_timeout": 1}), extras=ROW)
    with env:
        env.init(PROMPT)
        out = env.step("<bash>echo started; sleep 60</bash>")
        assert out["observations"][0]["content"] == "started\n[timed out after 1 s and killed]"
        assert out["metadata"]["timed_out"] is True


def test_close_and_exceptions_leave_no_sandbox() -> None:
    env = make()
    env.init(PROMPT)
    assert len(mine()) == 1
    env.close()
    env.close()
    assert mine() == []
    # A failing setup command: init raises, and stops the sandbox it started.
    failing = make(setup=["echo no such thing >&2; exit 3"])
    with pytest.raises(gvx.ExecError, match="no such thing"):
        failing.init(PROMPT)
    assert mine() == []
    # An exception out of step (an action that is not text).
    env = make()
    env.init(PROMPT)
    with pytest.raises(gvx.InvalidArgumentError, match="the model's text"):
        env.step(None)
    assert mine() == []
    # An exception in the harness's own code, inside `with`.
    with pytest.raises(RuntimeError, match="harness"):
        with make() as env:
            env.init(PROMPT)
            assert len(mine()) == 1
            raise RuntimeError("harness")
    assert mine() == []


def test_a_failed_sandbox_ends_the_episode_unscored() -> None:
    env = make()
    env.init(PROMPT)
    assert env.sandbox is not None
    os.kill(env.sandbox.pid, signal.SIGKILL)
    out = env.step(FIX)
    assert out["done"] is True and out["reward"] == 0.0
    assert "SIGKILL" in out["metadata"]["sandbox_error"]
    assert mine() == []


def test_a_task_without_a_test_is_refused_before_any_sandbox() -> None:
    with pytest.raises(gvx.InvalidArgumentError, match="'test' shell command"):
        skyrl_gym.make("gvx", env_config={}, extras={"files": {"/app/a": "x"}})
    with pytest.raises(gvx.InvalidArgumentError, match="absolute guest paths"):
        make(files={"app/a": "x"})
    with pytest.raises(gvx.InvalidArgumentError, match="unknown gvx.Sandbox options"):
        make(sandbox_options={"memroy": "1g"})
    assert mine() == []


def test_readme_example_runs() -> None:
    r = run_python(readme_example("### SkyRL-Gym"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "5\n[exit code 0]\nTrue 1.0\n"


@pytest.mark.parametrize(
    "action, parsed",
    [
        ("look first\n<bash>ls /app</bash> then <bash>rm -rf /</bash>", ("ls /app", False)),
        ("<bash>\n  cat /app/add.sh\n</bash>\n<submit/>", ("cat /app/add.sh", True)),
        ("<bash>ls /app", ("ls /app", False)),  # the sampler stopped at </bash> and dropped it
        ("Done. <submit>", (None, True)),
        ("<bash>  </bash>", (None, False)),
        ("no tags at all", (None, False)),
    ],
)
def test_parse_action(action: str, parsed: tuple[object, bool]) -> None:
    assert parse_action(action) == parsed


# SkyRL's generator loop, reduced to one episode whose turn outlives any patience.
CTRL_C_CHILD = f"""
import sys
import skyrl_gym
import gvx.integrations.skyrl
{ANNOUNCE_RUNNING}
env = skyrl_gym.make("gvx", env_config={{"step_timeout": 900}}, extras={{"test": "true"}})
env.init({PROMPT!r})
_announce(env.sandbox, "sleep 600")
try:
    env.step("<bash>sleep 600</bash>")
except KeyboardInterrupt:
    print("INTERRUPTED", env.sandbox is None, env.done, flush=True)
    sys.stdin.read()
    raise
"""


def test_ctrl_c_mid_step_closes_the_sandbox() -> None:
    def interrupted(pid: int, line: str) -> None:
        # The step that was interrupted closed the episode's sandbox before
        # the interrupt left it, as a step that raises does: the harness
        # that catches it holds no sandbox.
        assert line == f"{INTERRUPTED} True True", line
        assert not live(pid)

    ctrl_c(CTRL_C_CHILD, interrupted)

"""gvx.GvxEnv and gvx.EnvPool against real sandboxes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
import time
import warnings

import pytest

import gvx
from gvx import _episodes
from conftest import BUSY_CHILD, PS, busy_children, open_fds, rss_kib, sandboxes_of
import pool_cases
from waiting import await_until, wait_until

gymnasium = pytest.importorskip("gymnasium", reason="gymnasium is not installed (make test installs it)")


def test_check_env_passes() -> None:
    from gymnasium.utils.env_checker import check_env

    env = gvx.GvxEnv(step_timeout=5, max_steps=5, max_output=1024, max_action_length=64)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # any checker warning fails the test
            check_env(env, skip_render_check=True)
    finally:
        env.close()


def test_gymnasium_make() -> None:
    env = gymnasium.make("gvx/Shell-v0", max_steps=2)
    try:
        env.reset()
        obs, *_ = env.step("echo made")
        assert obs["stdout"] == "made\n"
        assert env.spec is not None and env.spec.nondeterministic
    finally:
        env.close()


def test_episode_semantics() -> None:
    calls = []

    def reward(sb: gvx.Sandbox, action: str, result: gvx.ExecResult) -> float:
        calls.append(action)
        return 1.0 if "solved" in result.stdout else 0.0

    with gvx.GvxEnv(
        reward_fn=reward,
        done_fn=lambda sb, a, r: "solved" in r.stdout,
        max_steps=3,
        setup=["echo prepared > /tmp/setup"],
        render_mode="ansi",
    ) as env:
        obs, info = env.reset(seed=1)
        assert obs == {"stdout": "", "stderr": "", "exit_code": 0}
        obs, reward_value, terminated, truncated, info = env.step("cat /tmp/setup; touch /tmp/mine")
        assert obs["stdout"] == "prepared\n" and reward_value == 0.0 and not terminated and not truncated
        assert info["step"] == 1 and info["memory_usage"] > 0 and info["tasks"] >= 1
        assert "$ cat /tmp/setup" in (env.render() or "")
        obs, reward_value, terminated, _, _ = env.step("echo solved")
        assert reward_value == 1.0 and terminated
        _, _, _, truncated, _ = env.step("exit 7")
        assert truncated
        # A new episode is a fresh sandbox: the previous one's file is gone.
        env.reset()
        obs, _, _, _, _ = env.step("test -e /tmp/mine; echo $?")
        assert obs["stdout"] == "1\n"
        obs, _, _, _, info = env.step("sleep 30")
        assert info["timed_out"] is False  # default step_timeout is 60 s; killed below instead
    assert calls


def test_reset_options_give_each_episode_its_task(tmp_path: Path) -> None:
    for task in ("a", "b"):
        (tmp_path / task / "repo").mkdir(parents=True)
        (tmp_path / task / "repo" / "main.sh").write_text(f"echo task {task}\n")
    with gvx.GvxEnv(setup=["echo env-setup > /tmp/env"]) as env:
        for task in ("a", "b"):
            env.reset(options={
                "upload": {tmp_path / task / "repo": "/workspace/repo"},
                "files": {"/workspace/notes/ISSUE.md": f"fix {task}", "/tmp/raw": b"\x00\x01"},
                "setup": ["cat /tmp/env > /workspace/order", "cd /workspace/repo && sh main.sh >> /workspace/order"],
            })
            obs, *_ = env.step("cat /workspace/order /workspace/notes/ISSUE.md; wc -c < /tmp/raw")
            assert obs["stdout"] == f"env-setup\ntask {task}\nfix {task}2\n", obs
        with pytest.raises(gvx.InvalidArgumentError, match="unknown keys \\['file'\\]"):
            env.reset(options={"file": {}})
        with pytest.raises(gvx.InvalidArgumentError, match="does not exist on the host"):
            env.reset(options={"upload": {tmp_path / "nope": "/x"}})
        with pytest.raises(gvx.InvalidArgumentError, match="absolute guest paths"):
            env.reset(options={"files": {"relative": "x"}})
        with pytest.raises(gvx.ExecError):
            env.reset(options={"setup": ["exit 3"]})


def test_step_timeout_and_binary_output() -> None:
    with gvx.GvxEnv(step_timeout=0.5, max_output=128) as env:
        env.reset()
        obs, _, _, _, info = env.step("sleep 10")
        assert info["timed_out"] and obs["exit_code"] == 137
        obs, _, _, _, info = env.step(BUSY_CHILD)
        assert info["timed_out"] and obs["exit_code"] == 137
        wait_until(lambda: not busy_children(env.step(PS)[0]["stdout"]), 10, "the timed-out step's child to end")
        obs, _, _, _, info = env.step("head -c 100000 /dev/urandom")
        assert env.observation_space.contains(obs) and info["output_truncated"]


def test_warm_reset_hands_over_a_prepared_sandbox() -> None:
    with gvx.GvxEnv(warm=True) as env:
        env.reset()
        wait_until(lambda: env.ready == 1, 60, "the next sandbox to be prepared")
        _, info = env.reset()
        assert info["warm"] is True
        assert info["reset_time"] < 0.5, info  # a hand-over, not a boot (generous for loaded CI)


def test_next_sandbox_starts_after_the_last_one_shut_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox a reset prepares for later starts once the episode's old
    sandbox has shut down, so that its spin choice does not take that
    shutdown for a loaded host (a lone environment's sandboxes kept
    spinning in 20 of 20 episodes with this, 14 of 20 without)."""
    events: list[str] = []

    class Recorded(gvx.Sandbox):
        def __init__(self, *args: object, **kwargs: object) -> None:
            events.append("start")
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]

        def close(self) -> None:
            super().close()
            events.append("closed")

    monkeypatch.setattr(gvx.env, "Sandbox", Recorded)
    with gvx.GvxEnv(warm=1) as env:
        env.reset()
        env._next[0].result(timeout=60)
        del events[:]
        env.reset()
        env._next[0].result(timeout=60)
        assert events == ["closed", "start"], events


def test_warm_pool_depth_serves_back_to_back_resets() -> None:
    """warm=3 keeps three sandboxes prepared, so three resets in a row are all
    hand-overs (with one prepared sandbox, the second would wait for a boot)."""
    env = gvx.GvxEnv(warm=3, setup=["touch /tmp/prepared"])
    try:
        env.reset()
        wait_until(lambda: env.ready == 3, 60, "three prepared sandboxes to be ready")  # three boots in parallel
        infos = [env.reset()[1] for _ in range(3)]
        assert [i["warm"] for i in infos] == [True, True, True], infos
        assert len({i["sandbox_pid"] for i in infos}) == 3
        obs, *_ = env.step("test -e /tmp/prepared && echo setup-ran")
        assert obs["stdout"] == "setup-ran\n"
    finally:
        env.close()
    # close() also closes the sandboxes still waiting in the pool.
    wait_until(lambda: not sandboxes_of(os.getpid()), 10, "the sandboxes to end after close", state=lambda: sandboxes_of(os.getpid()))


@pytest.mark.parametrize("warm", [-1, 1.5, "2", None])
def test_warm_must_be_a_count(warm: object) -> None:
    with pytest.raises(gvx.InvalidArgumentError, match="number of sandboxes to keep prepared"):
        gvx.GvxEnv(warm=warm)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", pool_cases.CASES)
def test_pool(case: str) -> None:
    """The cases gvx.EnvPool shares with gvx.ray.EnvPool (test_ray.py runs them there)."""
    getattr(pool_cases, case)(gvx.EnvPool)


def test_pool_pins_each_environment_to_a_cpu() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip(f"this process may run on {len(cpus)} CPU; pinning needs a choice of 2")
    with gvx.EnvPool(2, pin_cpus=True) as pool:
        _, infos = pool.reset()
        assert [os.sched_getaffinity(i["sandbox_pid"]) for i in infos] == [{cpus[0]}, {cpus[1]}]
        obs, *_ = pool.step(["nproc", "nproc"])
        assert [o["stdout"] for o in obs] == ["1\n", "1\n"]
    with pytest.raises(gvx.InvalidArgumentError, match="pin_cpus"):
        gvx.EnvPool(1, pin_cpus=True, cpuset=[0])


def test_a_failed_sandbox_truncates_its_episode() -> None:
    """One sandbox dying among many must not stop training: its step ends
    the episode with the error in info, and the next reset starts afresh."""
    with gvx.GvxEnv(warm=False) as env:
        env.reset()
        os.kill(env.sandbox.pid, signal.SIGKILL)
        obs, reward, terminated, truncated, info = env.step("echo hi")
        assert truncated and not terminated and reward == 0.0 and obs["exit_code"] == 255
        assert "rungv was killed by SIGKILL" in info["sandbox_error"]
        assert env.observation_space.contains(obs)
        env.reset()
        obs, *_ = env.step("echo back")
        assert obs["stdout"] == "back\n"
    with gvx.GvxEnv(warm=False, on_sandbox_failure="raise") as env:
        env.reset()
        os.kill(env.sandbox.pid, signal.SIGKILL)
        with pytest.raises(gvx.SandboxUnavailableError, match="SIGKILL"):
            env.step("echo hi")
    with pytest.raises(gvx.InvalidArgumentError, match="on_sandbox_failure"):
        gvx.GvxEnv(on_sandbox_failure="ignore")


def test_a_sandbox_that_did_not_stop_cleanly_is_a_warning() -> None:
    """The last episode's sandbox failing to stop cleanly (its rungv killed) is a
    RuntimeWarning, not an error: reset still hands over a fresh sandbox, and
    close still closes."""
    with gvx.GvxEnv(warm=False) as env:
        env.reset()
        old = env.sandbox.pid
        os.kill(old, signal.SIGKILL)
        with pytest.warns(RuntimeWarning, match="did not stop cleanly(.|\n)*killed by SIGKILL"):
            _, info = env.reset()
            assert env._retiring is not None
            env._retiring.result(timeout=60)  # the old sandbox is retired in the background
        assert info["sandbox_pid"] != old
        obs, *_ = env.step("echo fresh")
        assert obs["stdout"] == "fresh\n"
        os.kill(env.sandbox.pid, signal.SIGKILL)
        with pytest.warns(RuntimeWarning, match="did not stop cleanly"):
            env.close()
        assert env._closed


def test_episode_dirs_of_killed_processes_are_swept(tmp_path: Path) -> None:
    """A process killed without cleanup (SIGKILL, or SIGTERM's default, as a
    preempted job is) leaves its episode clones behind; making the next
    episode directory removes them, and never a live process's."""
    code = (
        "import sys, time; from pathlib import Path; from gvx import _episodes; "
        "d, _ = _episodes.new_episode_dir(Path(sys.argv[1])); (d / 'episode.ext4').write_bytes(b'x' * 4096); "
        "print(d, flush=True); time.sleep(600)"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    dead = Path(child.stdout.readline().strip())
    live, live_lock = _episodes.new_episode_dir(tmp_path)
    assert dead.is_dir(), "a live process's episode directory was swept"
    child.send_signal(signal.SIGTERM)
    child.wait()
    assert (dead / "episode.ext4").exists()
    again, again_lock = _episodes.new_episode_dir(tmp_path)
    try:
        assert not dead.exists(), "a dead process's episode clones were left behind"
        assert live.is_dir() and again.is_dir()
    finally:
        os.close(live_lock)
        os.close(again_lock)


def test_asyncio_twin(tmp_path: Path) -> None:
    local = tmp_path / "data"
    local.write_text("data\n")

    async def main() -> list[str]:
        boxes = await asyncio.gather(*(gvx.aio.Sandbox.create() for _ in range(3)))
        try:
            results = await asyncio.gather(*(b.exec(f"echo {i}") for i, b in enumerate(boxes)))
            await boxes[0].write_file("/tmp/task", "task\n", owner="nobody")
            await boxes[0].upload(local, "/tmp/data", owner=1000)
            owners = await boxes[0].exec("stat -c %u /tmp/task /tmp/data")
            return [r.stdout for r in results] + [owners.stdout]
        finally:
            await asyncio.gather(*(b.close() for b in boxes))

    assert asyncio.run(main()) == ["0\n", "1\n", "2\n", "65534\n1000\n"]


def test_asyncio_runs_more_execs_at_once_than_asyncios_default_pool() -> None:
    """asyncio.to_thread runs at most min(32, cpus + 4) calls at once; gvx.aio
    must not: each exec here waits until all of them have started."""
    n = min(32, (os.cpu_count() or 1) + 4) + 2
    wait_for_all = f"touch /tmp/started.$$; while [ $(ls /tmp/started.* | wc -l) -lt {n} ]; do sleep 0.05; done"

    async def main() -> list[gvx.ExecResult]:
        async with await gvx.aio.Sandbox.create() as sb:
            return await asyncio.gather(*(sb.exec(wait_for_all, timeout=60) for _ in range(n)))

    results = asyncio.run(main())
    assert [r.timed_out for r in results] == [False] * n, "some execs waited for others to finish before starting"
    assert [r.exit_code for r in results] == [0] * n


def test_asyncio_missing_command_is_a_result() -> None:
    async def main() -> gvx.ExecResult:
        async with await gvx.aio.Sandbox.create() as sb:
            return await sb.exec(["no-such-cmd"])

    r = asyncio.run(main())
    assert (r.exit_code, r.stderr) == (127, 'gvx: exec: "no-such-cmd": executable file not found in $PATH\n')


def test_step_without_a_shell_is_an_observation() -> None:
    """An agent that removed /bin/sh gets 127 and why for its next step, not an
    error that ends the episode."""
    with gvx.GvxEnv(max_steps=5) as env:
        env.reset()
        obs, _, terminated, truncated, info = env.step("rm /bin/sh")
        assert obs["exit_code"] == 0, obs
        obs, _, terminated, truncated, info = env.step("ls /")
        assert obs == {"stdout": "", "stderr": 'gvx: exec: "/bin/sh": no such file or directory\n', "exit_code": 127}
        assert not terminated and not truncated and "sandbox_error" not in info


def test_cancelling_an_asyncio_exec_kills_its_command() -> None:
    async def main() -> str:
        async with await gvx.aio.Sandbox.create() as sb:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(sb.exec(BUSY_CHILD), 0.5)
            async def ended() -> bool:
                return not busy_children((await sb.exec(PS)).stdout)

            await await_until(ended, 10, "the cancelled command (and its child) to end")
            return (await sb.exec("echo usable")).stdout

    assert asyncio.run(main()) == "usable\n"


def test_reset_step_cycles_leak_nothing(tmp_path: Path) -> None:
    """Episodes on clones of a golden volume, as RL training runs them."""
    cycles = int(os.environ.get("GVX_TEST_CYCLES", "1000"))
    golden = gvx.golden.build(None, setup=["echo seeded > /var/lib/docker/seed"], volume=tmp_path / "golden.ext4", size="64m", progress=False)
    episodes = tmp_path / "episodes"
    episodes.mkdir()
    env = gvx.GvxEnv(warm=True, golden=golden, episode_dir=str(episodes))
    try:
        env.reset()
        env.step("true")
        warmup = min(50, cycles // 4)
        for _ in range(warmup):
            env.reset()
            env.step("echo warm")
        # The last retired sandbox has closed once the next is prepared (it
        # starts after that close).
        wait_until(lambda: env.ready == 1, 60, "the next sandbox to be prepared")
        fds, kids, rss = open_fds(), len(sandboxes_of(os.getpid())), rss_kib()
        start = time.perf_counter()
        for i in range(cycles):
            env.reset()
            obs, _, _, _, _ = env.step(f"echo {i} >> /var/lib/docker/seed; tail -1 /var/lib/docker/seed; wc -l < /var/lib/docker/seed")
            assert obs["stdout"] == f"{i}\n2\n", obs
        elapsed = time.perf_counter() - start
        wait_until(lambda: env.ready == 1, 60, "the next sandbox to be prepared")
        assert len(sandboxes_of(os.getpid())) <= kids, "sandbox processes accumulate"
        # The live and the prepared sandbox hold a few descriptors each, with
        # new numbers every episode: compare counts, with some room.
        assert len(open_fds()) <= len(fds) + 8, f"file descriptors leak: {len(fds)} → {len(open_fds())}"
        grown = rss_kib() - rss
        assert grown < 64 * 1024, f"RSS grew by {grown} KiB over {cycles} cycles"
        # The live episode's clone and the prepared one's; older ones are gone.
        assert len(list(episodes.iterdir())) <= 2, "episode clones accumulate"
        print(f"{cycles} reset+step cycles in {elapsed:.1f} s ({elapsed / cycles * 1000:.1f} ms each)")
    finally:
        env.close()
    assert sandboxes_of(os.getpid()) == [], "sandboxes outlive GvxEnv.close()"
    assert list(episodes.iterdir()) == [], "episode clones outlive GvxEnv.close()"


def test_async_vector_env_in_spawned_workers() -> None:
    """The README's recipe for gymnasium's AsyncVectorEnv: workers started
    with ``spawn`` (Go's runtime does not survive fork) and
    ``shared_memory=False``, without which gymnasium returns every Text
    observation as a run of '0's (its shared-memory copy of Text spaces)."""
    import functools

    from gymnasium.vector import AsyncVectorEnv

    fns = [functools.partial(gvx.GvxEnv, step_timeout=10, max_output=256) for _ in range(2)]
    envs = AsyncVectorEnv(fns, context="spawn", shared_memory=False)
    try:
        envs.reset(seed=0)
        obs, _, _, _, _ = envs.step(("echo one", "echo two >&2; echo two"))
        assert list(obs["stdout"]) == ["one\n", "two\n"], obs
        assert list(obs["stderr"]) == ["", "two\n"], obs
    finally:
        envs.close()

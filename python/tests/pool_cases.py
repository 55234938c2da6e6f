"""What gvx.EnvPool and gvx.ray.EnvPool must both do, written once.

Each case takes the pool class. test_env.py runs every case against
gvx.EnvPool in the test's process; test_ray.py runs every case against
gvx.ray.EnvPool, with this file as the driver of the three-node cluster
(``python pool_cases.py CASE ADDRESS``). So the two pools cannot drift apart
in their results, their semantics or their errors.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any, Callable

import pytest

import gvx
from waiting import wait_until

Pool = Callable[..., Any]  # gvx.EnvPool or gvx.ray.EnvPool


def _ok(sb: gvx.Sandbox, action: str, result: gvx.ExecResult) -> float:
    return float(result.ok)


def _says_done(sb: gvx.Sandbox, action: str, result: gvx.ExecResult) -> bool:
    return "DONE" in result.stdout


def case_reset_and_step(make: Pool) -> None:
    n = 3
    with make(n, warm=1, max_steps=3, step_timeout=30, reward_fn=_ok, done_fn=_says_done) as pool:
        assert len(pool) == n
        obs, infos = pool.reset(seed=7)
        assert obs == [{"stdout": "", "stderr": "", "exit_code": 0}] * n
        assert len({i["sandbox_pid"] for i in infos}) == n, infos
        assert all(isinstance(i["reset_time"], float) for i in infos)

        obs, rewards, terminated, truncated, infos = pool.step([f"echo env-{i}" for i in range(n)])
        assert [o["stdout"] for o in obs] == [f"env-{i}\n" for i in range(n)]
        assert rewards == [1.0] * n and all(type(r) is float for r in rewards)
        assert terminated == [False] * n and truncated == [False] * n
        assert [i["step"] for i in infos] == [1] * n

        obs, rewards, terminated, *_ = pool.step(["exit 3", "echo DONE", "echo -n x >&2"])
        assert [o["exit_code"] for o in obs] == [3, 0, 0] and obs[2]["stderr"] == "x"
        assert rewards == [0.0, 1.0, 1.0] and terminated == [False, True, False]
        *_, truncated, infos = pool.step(["true"] * n)
        assert truncated == [True] * n, "max_steps=3 truncates the third step"
        assert [i["step"] for i in infos] == [3] * n


def case_one_environment(make: Pool) -> None:
    n = 3
    with make(n, warm=1, step_timeout=30) as pool:
        pool.reset()
        pool.step(["true"] * n)
        _, info = pool.reset_one(1, seed=3)
        assert info["sandbox_pid"] > 0
        obs, reward, terminated, truncated, info = pool.step_one(1, "echo alone")
        assert obs["stdout"] == "alone\n" and reward == 0.0 and not terminated and not truncated
        assert info["step"] == 1
        *_, infos = pool.step(["true"] * n)
        assert [i["step"] for i in infos] == [2, 2, 2]


def case_episode_tasks(make: Pool) -> None:
    n = 2
    with make(n, warm=1) as pool:
        pool.reset(options=[{"files": {"/task/ISSUE.md": f"issue {i}"}} for i in range(n)])
        obs, *_ = pool.step(["cat /task/ISSUE.md"] * n)
        assert [o["stdout"] for o in obs] == ["issue 0", "issue 1"]
        pool.reset(options=[None, {"setup": ["echo from-setup > /task.txt"]}])
        obs, *_ = pool.step(["cat /task.txt 2>/dev/null || echo none"] * n)
        assert [o["stdout"] for o in obs] == ["none\n", "from-setup\n"]
        pool.reset_one(0, options={"files": {"/w/a": b"bytes"}})
        obs, *_ = pool.step_one(0, "cat /w/a")
        assert obs["stdout"] == "bytes"


def case_bad_arguments(make: Pool) -> None:
    with pytest.raises(gvx.InvalidArgumentError, match="at least one environment"):
        make(0)
    with pytest.raises(gvx.InvalidArgumentError, match="pin_cpus"):
        make(1, pin_cpus=True, cpuset=[0])
    with pytest.raises(gvx.InvalidArgumentError, match="max_steps"):
        make(1, max_steps=0)
    n = 2
    with make(n, warm=0) as pool:
        pool.reset()
        for actions, words in [
            (["true"], "1 actions for 2 environments"),
            ("true", "list of 2 shell commands"),
            (["true", 3], r"actions \[1\] are not strings"),
        ]:
            with pytest.raises(gvx.InvalidArgumentError, match=words):
                pool.step(actions)
        for i in (-1, n, "0", True):
            with pytest.raises(gvx.InvalidArgumentError, match=r"the pool has environments 0\.\.1"):
                pool.reset_one(i)
            with pytest.raises(gvx.InvalidArgumentError, match=r"the pool has environments 0\.\.1"):
                pool.step_one(i, "true")
        with pytest.raises(gvx.InvalidArgumentError, match="one episode task"):
            pool.reset(options=[None])
        with pytest.raises(gvx.InvalidArgumentError, match="unknown keys"):
            pool.reset(options=[None, {"task": "x"}])
        with pytest.raises(gvx.InvalidArgumentError, match="seed"):
            pool.reset(seed="7")
        # None of the refused calls touched an environment: each is still on step 0.
        *_, infos = pool.step(["true"] * n)
        assert [i["step"] for i in infos] == [1, 1]


def case_setup_error_is_raised(make: Pool) -> None:
    with make(1, warm=0, setup=["echo no such task >&2; exit 3"]) as pool:
        with pytest.raises(gvx.ExecError, match="no such task") as e:
            pool.reset()
        assert e.value.result.exit_code == 3


def case_killed_sandbox_truncates(make: Pool) -> None:
    n = 2
    with make(n, warm=1, step_timeout=30) as pool:
        _, infos = pool.reset()
        os.kill(infos[0]["sandbox_pid"], signal.SIGKILL)
        obs, rewards, terminated, truncated, infos = pool.step(["echo after"] * n)
        assert truncated[0] and not terminated[0] and rewards[0] == 0.0 and obs[0]["exit_code"] == 255
        assert "rungv was killed by SIGKILL" in infos[0]["sandbox_error"], infos[0]
        assert obs[1]["stdout"] == "after\n" and not truncated[1] and "sandbox_error" not in infos[1]
        pool.reset_one(0)
        obs, *_ = pool.step(["echo back"] * n)
        assert [o["stdout"] for o in obs] == ["back\n"] * n


def case_closed_pool(make: Pool) -> None:
    pool = make(1, warm=1)
    pool.reset()
    pool.close()
    pool.close()  # again: does nothing
    calls: list[Callable[[], object]] = [
        lambda: pool.step(["true"]), lambda: pool.reset(), lambda: pool.reset_one(0), lambda: pool.step_one(0, "true")
    ]
    for call in calls:
        with pytest.raises(gvx.SandboxClosedError, match="closed"):
            call()


def case_stats(make: Pool) -> None:
    n = 2
    with make(n, warm=1, step_timeout=30) as pool:
        stats = pool.stats()
        assert isinstance(stats, gvx.PoolStats) and stats.environments == n and stats.live == 0 and stats.failed == 0
        _, infos = pool.reset()
        pool.step(["true"] * n)
        # Each environment prepares its next sandbox in the background.
        wait_until(lambda: pool.stats().warm >= n, 60, "the pool's warm sandboxes to be ready", state=pool.stats)
        os.kill(infos[0]["sandbox_pid"], signal.SIGKILL)
        pool.step(["true"] * n)
        pool.step(["true"] * n)  # the failed episode is counted once
        stats = pool.stats()
        assert (stats.environments, stats.live, stats.failed) == (n, 1, 1), stats
        assert stats.warm == sum(node.warm for node in stats.nodes)
        assert sum(node.resets for node in stats.nodes) == n and sum(node.steps for node in stats.nodes) == 3 * n
        for node in stats.nodes:
            assert 0 < node.step_p50 <= node.step_p99 and 0 < node.reset_p50 <= node.reset_p99, node
            assert node.error == "" and node.environments >= 1
        pool.reset_one(0)
        assert pool.stats().live == 2


def case_asyncio(make: Pool) -> None:
    n = 3

    async def episode(pool: Any, i: int) -> list[str]:
        # Each episode is a coroutine of its own, as in an agent loop.
        seen = []
        for k in range(3):
            obs, *_ = await pool.step_one_async(i, f"echo {i}-{k}")
            seen.append(obs["stdout"])
        return seen

    async def main() -> None:
        async with make(n, warm=1, reward_fn=_ok) as pool:
            obs, infos = await pool.reset_async(seed=1, options=[{"files": {"/id": str(i)}} for i in range(n)])
            assert len(obs) == n and len({i["sandbox_pid"] for i in infos}) == n
            seen = await asyncio.gather(*(episode(pool, i) for i in range(n)))
            assert seen == [[f"{i}-{k}\n" for k in range(3)] for i in range(n)]
            obs, rewards, _, _, infos = await pool.step_async(["cat /id"] * n)
            assert [o["stdout"] for o in obs] == ["0", "1", "2"] and rewards == [1.0] * n
            assert [i["step"] for i in infos] == [4] * n
            await pool.reset_one_async(2)
            *_, infos = await pool.step_async(["true"] * n)
            assert [i["step"] for i in infos] == [5, 5, 1]
            stats = await pool.stats_async()
            assert stats.environments == n and stats.live == n
        with pytest.raises(gvx.SandboxClosedError):
            await pool.step_async(["true"] * n)

    asyncio.run(main())


CASES = sorted(name for name in dir() if name.startswith("case_"))


if __name__ == "__main__":
    # A driver of the test cluster: python pool_cases.py CASE ADDRESS.
    from raycluster import connect, driver_alarm

    driver_alarm()
    connect(sys.argv[2])
    import gvx.ray

    try:
        globals()[sys.argv[1]](gvx.ray.EnvPool)
        print(f"{sys.argv[1]} ok")
    finally:
        import ray

        ray.shutdown()

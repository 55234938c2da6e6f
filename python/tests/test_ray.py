"""gvx.ray.EnvPool on a real three-node Ray cluster on this machine.

The cluster (raycluster.py, the session's ``ray_cluster`` fixture) runs in
network and PID namespaces with only ``lo``. Each test's driver runs inside
them too: this file, run as a script (``python test_ray.py SCENARIO
ADDRESS``), is that driver; its functions are then shipped to the nodes by
value. The cases gvx.EnvPool shares with gvx.ray.EnvPool are in
pool_cases.py; here is what only a cluster has: placement, resources, dead
and hung nodes, a killed driver.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

import pool_cases
from raycluster import DRIVER_TIMEOUT, NODES, Cluster, connect as _connect, driver_alarm

HERE = Path(__file__).resolve().parent


@pytest.fixture
def cluster(ray_cluster: Cluster) -> Cluster:
    return ray_cluster


def run(cluster: Cluster, scenario: Callable[[], None]) -> str:
    return cluster.run(Path(__file__).resolve(), scenario.__name__)


# The scenarios: drivers that run inside the namespaces.


def _gone(pids: list[int], seconds: float) -> bool:
    """Whether every pid has exited (or is a zombie) within seconds.

    A pidfd becomes readable when its process exits, child or not."""
    deadline = time.monotonic() + seconds
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
                return False
        finally:
            os.close(fd)
    return True


def scenario_spread() -> None:
    import gvx.ray
    from conftest import sandboxes_of

    names = _connect(sys.argv[2])
    n = 24
    with gvx.ray.EnvPool(n, warm=1, max_steps=3, step_timeout=30, reward_fn=lambda sb, action, result: float(result.ok)) as pool:
        assert len(pool) == n
        placement = pool.placement()
        by_node: dict[str, list[int]] = {}
        for p in placement:
            by_node.setdefault(p.node_id, []).append(p.env)
            assert p.address == "127.0.0.1"
        assert set(by_node) == set(names), (by_node, names)
        assert sorted(len(v) for v in by_node.values()) == [8, 8, 8]
        # One actor per node hosts that node's environments.
        pids = {p.node_id: p.actor_pid for p in placement}
        assert len(set(pids.values())) == len(NODES)

        obs, infos = pool.reset(seed=7)
        assert [o["exit_code"] for o in obs] == [0] * n
        assert [i["ray_node"] for i in infos] == [p.node_id for p in placement]
        for node, pid in pids.items():
            # Each environment's current sandbox, at least, is a child of its node's actor.
            assert len(sandboxes_of(pid)) >= len(by_node[node]), (node, sandboxes_of(pid))
        obs, rewards, *_, infos = pool.step([f"echo env-{i}" for i in range(n)])
        assert [o["stdout"] for o in obs] == [f"env-{i}\n" for i in range(n)] and rewards == [1.0] * n
        assert [i["ray_node"] for i in infos] == [p.node_id for p in placement]
        # An environment keeps its node across resets.
        for env in (4, 17):
            _, info = pool.reset_one(env)
            assert info["ray_node"] == placement[env].node_id

    # Closing ended the actors, and their sandboxes with them.
    assert _gone(list(pids.values()), 30), pids
    print("spread ok")


def scenario_node_dies() -> None:
    import gvx.ray
    from conftest import sandboxes_of

    names = _connect(sys.argv[2])
    n = 6
    with gvx.ray.EnvPool(n, warm=1, step_timeout=30) as pool:
        pool.reset()
        pool.step(["echo before"] * n)
        victim = pool.placement()[1]
        lost = [p.env for p in pool.placement() if p.node_id == victim.node_id]
        sandboxes = sandboxes_of(victim.actor_pid)
        assert sandboxes, "the actor owns its node's sandboxes"
        print(f"killing the actor on {names[victim.node_id]} (pid {victim.actor_pid}), hosting {lost}")
        os.kill(victim.actor_pid, signal.SIGKILL)

        start = time.monotonic()
        obs, rewards, terminated, truncated, infos = pool.step(["echo after"] * n)
        print(f"the step after the kill took {time.monotonic() - start:.2f} s")
        print("sandbox_error:", infos[lost[0]]["sandbox_error"])
        for i in range(n):
            if i in lost:
                assert truncated[i] and not terminated[i] and rewards[i] == 0.0, (i, infos[i])
                assert victim.node_id in infos[i]["sandbox_error"], infos[i]
                assert obs[i]["exit_code"] == 255
            else:
                assert obs[i]["stdout"] == "after\n" and not truncated[i], (i, obs[i], infos[i])
        # The episode stays over until it is reset, as on one node.
        *_, truncated, infos = pool.step(["true"] * n)
        assert all(truncated[i] and "sandbox_error" in infos[i] for i in lost)
        # The sandboxes died with the actor that owned them.
        assert _gone(sandboxes, 10), sandboxes

        actors = {p.actor_pid for p in pool.placement()}
        _, info = pool.reset_one(lost[0])
        assert info["ray_node"] != victim.node_id and info["ray_node"] in names
        # The live actors have a call for each of their own environments and
        # none to spare, so the moved one gets an actor of its own there.
        assert pool.placement()[lost[0]].actor_pid not in actors, (actors, pool.placement())
        pool.reset()
        placement = pool.placement()
        assert all(p.node_id not in ("", victim.node_id) for p in placement), placement
        obs, _, _, truncated, infos = pool.step([f"echo again-{i}" for i in range(n)])
        assert [o["stdout"] for o in obs] == [f"again-{i}\n" for i in range(n)]
        assert truncated == [False] * n and not any("sandbox_error" in i for i in infos)
    print("node_dies ok")


def scenario_raylet_killed() -> None:
    """A whole node goes: its raylet is killed, and the worker processes with it."""
    import ray

    import gvx.ray
    from conftest import sandboxes_of
    from raycluster import raylet_of

    names = _connect(sys.argv[2])
    (victim,) = [node for node, name in names.items() if name == "node_c"]
    n = 6
    with gvx.ray.EnvPool(n, warm=1, step_timeout=30) as pool:
        pool.reset()
        pool.step(["echo before"] * n)
        lost = [p.env for p in pool.placement() if p.node_id == victim]
        actor = pool.placement()[lost[0]].actor_pid
        sandboxes = sandboxes_of(actor)
        assert lost and sandboxes, (lost, sandboxes)
        os.kill(raylet_of("node_c"), signal.SIGKILL)
        try:
            # A worker outlives its raylet by a moment and may still answer a
            # step; the node is gone once its worker is, so the test waits for that.
            assert _gone([actor], 30), f"node_c's gvx actor (pid {actor}) still runs 30 s after its raylet was killed"
            start = time.monotonic()
            obs, _, _, truncated, infos = pool.step(["echo after"] * n)
            took = time.monotonic() - start
            for i in range(n):
                if i in lost:
                    assert truncated[i] and victim in infos[i].get("sandbox_error", ""), infos[i]
                    assert obs[i]["exit_code"] == 255, obs[i]
                else:
                    assert obs[i]["stdout"] == "after\n" and not truncated[i], (i, infos[i])
            print(f"the step after node_c's worker died took {took:.2f} s: {infos[lost[0]]['sandbox_error']}")
            # The node's sandboxes died with its worker.
            assert _gone(sandboxes, 30), sandboxes
            _, infos = pool.reset()
            assert all(i["ray_node"] not in ("", victim) for i in infos), infos
            obs, *_ = pool.step(["echo again"] * n)
            assert [o["stdout"] for o in obs] == ["again\n"] * n
            stats = pool.stats()
            assert stats.failed == len(lost) and stats.environments == n, stats
            # A new pool while the cluster may still count node_c alive: an actor
            # placed there dies with the node, and its environments go to the others.
            listed = any(node["NodeID"] == victim and node["Alive"] for node in ray.nodes())  # type: ignore[no-untyped-call]
            with gvx.ray.EnvPool(3, warm=1) as other:
                other.reset()
                assert all(p.node_id != victim for p in other.placement()), other.placement()
                obs, *_ = other.step(["echo new"] * 3)
                assert [o["stdout"] for o in obs] == ["new\n"] * 3
            print(f"a new pool started on the live nodes (node_c still listed alive: {listed})")
        finally:
            # The cluster marks the node dead by its missed health checks, and
            # the test then starts a new node_c; until then a new pool could
            # pick the dead node. A task bound to the node waits for it and
            # fails once the cluster has marked it dead: that is the event.
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            bound = ray.remote(lambda: None).options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=victim, soft=False))
            try:
                ray.get(bound.remote(), timeout=90)
                raise AssertionError("a task ran on node_c after its raylet was killed")
            except ray.exceptions.TaskUnschedulableError:
                pass
            except ray.exceptions.GetTimeoutError:
                raise AssertionError("the cluster still counts the killed node alive after 90 s") from None
            assert not any(node["NodeID"] == victim and node["Alive"] for node in ray.nodes())  # type: ignore[no-untyped-call]
    print("raylet_killed ok")


def scenario_concurrent_steps() -> None:
    """A node's environments step at once when each episode is a coroutine
    of its own: its actor has a thread for every environment's call. Were
    the calls queued, the third would miss its deadline and end its episode."""
    import asyncio

    import gvx.ray

    names = _connect(sys.argv[2])
    (node_b,) = [node for node, name in names.items() if name == "node_b"]
    n = 4

    async def main() -> None:
        # A step's remote call may take step_timeout + grace = 5 s.
        async with gvx.ray.EnvPool(n, warm=0, step_timeout=3, grace=2, resources_per_env={"node_b": 0.1}) as pool:
            assert {p.node_id for p in pool.placement()} == {node_b}
            await pool.reset_async()
            steps = await asyncio.gather(*(pool.step_one_async(i, f"sleep 2; echo {i}") for i in range(n)))
            for i, (obs, _, _, truncated, info) in enumerate(steps):
                assert obs["stdout"] == f"{i}\n" and not truncated and "sandbox_error" not in info, (i, obs, info)

    asyncio.run(main())
    print("concurrent_steps ok")


def scenario_provisioning() -> None:
    """A golden volume with a Docker image, and a snapshot of a ready dockerd
    on it, each used on two nodes: made once on each, found there after."""
    import gvx
    import gvx.ray
    from raycluster import PAIR

    names = _connect(sys.argv[2])
    pair = {node for node, name in names.items() if name in ("node_a", "node_b")}
    dind, archive = os.environ["GVX_TEST_DIND_IMAGE"], HERE.parents[1] / "build" / "default-image.tar"
    recipe = gvx.ray.docker_golden(dind, archives=(archive,), size="2g")
    options: dict[str, Any] = dict(image=dind, warm=0, step_timeout=120, resources_per_env={PAIR: 1}, **gvx.docker.SANDBOX_OPTIONS)
    images = "docker images --format '{{.Repository}}:{{.Tag}}'"

    def made(pool: gvx.ray.EnvPool) -> list[tuple[str, str, bool]]:
        return sorted((p.node, p.kind, p.made) for p in pool.provisioning)

    start = time.monotonic()
    with gvx.ray.EnvPool(2, golden=recipe, setup=gvx.docker.SETUP, **options) as pool:
        print(f"a golden made on two nodes in {time.monotonic() - start:.1f} s: {pool.provisioning}")
        assert {p.node_id for p in pool.placement()} == pair
        assert made(pool) == sorted((node, kind, True) for node in pair for kind in ("image", "golden"))
        pool.reset()
        obs, *_ = pool.step([images] * 2)
        assert [o["stdout"] for o in obs] == ["gvx.test/default:latest\n"] * 2, obs
    # Another pool with the same recipe finds everything on the nodes.
    with gvx.ray.EnvPool(2, golden=recipe, setup=gvx.docker.SETUP, **options) as pool:
        assert made(pool) == sorted((node, kind, False) for node in pair for kind in ("image", "golden"))

    start = time.monotonic()
    snapshot = gvx.ray.docker_snapshot(dind, golden=recipe)
    with gvx.ray.EnvPool(2, restore=snapshot, **options) as pool:
        print(f"a snapshot made on two nodes in {time.monotonic() - start:.1f} s")
        assert made(pool) == sorted(
            [(node, "image", False) for node in pair] + [(node, "golden", False) for node in pair] + [(node, "snapshot", True) for node in pair]
        )
        pool.reset()
        # The restored dockerd answers at once: no setup ran.
        obs, *_ = pool.step([images] * 2)
        assert [o["stdout"] for o in obs] == ["gvx.test/default:latest\n"] * 2, obs
    with pytest.raises(gvx.InvalidArgumentError, match="not a file"):
        gvx.ray.docker_golden(dind, archives=("/no/such.tar",))
    print("provisioning ok")


def scenario_resources() -> None:
    import gvx
    import gvx.ray

    names = _connect(sys.argv[2])
    # Each node has one CPU: one environment each, and its actor holds that CPU.
    with gvx.ray.EnvPool(3, warm=0, resources_per_env={"CPU": 1}) as pool:
        assert {p.node_id for p in pool.placement()} == set(names)
        obs, _ = pool.reset()
        assert [o["exit_code"] for o in obs] == [0] * 3
    with pytest.raises(gvx.GvxError, match="room for 3 more environments of 4"):
        gvx.ray.EnvPool(4, warm=0, resources_per_env={"CPU": 1})
    # A custom resource one node advertises puts every environment there.
    (only_b,) = [node for node, name in names.items() if name == "node_b"]
    with gvx.ray.EnvPool(2, warm=0, resources_per_env={"node_b": 0.5}) as pool:
        assert [p.node_id for p in pool.placement()] == [only_b] * 2
    print("resources ok")


def scenario_actor_hangs() -> None:
    import gvx.ray
    from conftest import sandboxes_of

    names = _connect(sys.argv[2])
    with gvx.ray.EnvPool(3, warm=0, step_timeout=2, grace=3) as pool:
        pool.reset()
        victim = pool.placement()[0]
        sandboxes = sandboxes_of(victim.actor_pid)
        os.kill(victim.actor_pid, signal.SIGSTOP)  # alive, but answers nothing
        start = time.monotonic()
        obs, _, _, truncated, infos = pool.step(["echo after"] * 3)
        took = time.monotonic() - start
        print(f"the step with {names[victim.node_id]}'s actor stopped took {took:.2f} s: {infos[0]['sandbox_error']}")
        assert 5 <= took < 15, took
        assert truncated[0] and victim.node_id in infos[0]["sandbox_error"] and "within 5s" in infos[0]["sandbox_error"]
        assert [o["stdout"] for o in obs[1:]] == ["after\n"] * 2
        # The stopped actor was killed, and its sandboxes with it.
        assert _gone([victim.actor_pid, *sandboxes], 30), (victim.actor_pid, sandboxes)
        _, info = pool.reset_one(0)
        assert info["ray_node"] != victim.node_id
    print("actor_hangs ok")


def scenario_remote_sandbox() -> None:
    import asyncio
    import pickle
    import tempfile

    import gvx
    import gvx.ray

    names = _connect(sys.argv[2])
    sbs = [gvx.ray.Sandbox() for _ in NODES]
    try:
        # Spread: one on each node, each a child of that node's sandbox actor.
        assert {sb.node_id for sb in sbs} == set(names), [sb.node_id for sb in sbs]
        sb = sbs[0]
        assert sb.exec("echo hi").stdout == "hi\n"
        r = sb.exec(["sh", "-c", "cat; echo err >&2; exit 3"], stdin="in", env={"X": "1"})
        assert (r.stdout, r.stderr, r.exit_code) == ("in", "err\n", 3) and isinstance(r, gvx.ExecResult)
        with pytest.raises(gvx.ExecError, match="exit") as e:
            sb.exec("exit 4", check=True)
        assert e.value.result.exit_code == 4
        assert sb.exec("sleep 30", timeout=0.5).timed_out
        with pytest.raises(gvx.InvalidArgumentError, match="on_output"):
            sb.exec("true", on_output=lambda stream, data: None)
        with pytest.raises(gvx.InvalidArgumentError, match="timeout"):
            sb.exec("true", timeout=-1)

        sb.write_file("/w/a.txt", "alpha", make_parents=True)
        assert sb.read_file("/w/a.txt") == b"alpha" and sb.exists("/w/a.txt") and not sb.exists("/w/none")
        info = sb.stat("/w/a.txt")
        assert isinstance(info, gvx.FileInfo) and info.size == 5 and info.is_file
        with pytest.raises(gvx.NotFoundError):
            sb.read_file("/w/none")
        assert sb.stats().tasks >= 1

        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp) / "repo"
            (tree / "src").mkdir(parents=True)
            (tree / "src" / "main.py").write_text("print('hi')\n")
            (tree / "run.sh").write_text("#!/bin/sh\necho ran\n")
            (tree / "run.sh").chmod(0o755)
            (tree / "link").symlink_to("src/main.py")
            sb.upload(tree, "/workspace/repo")
            assert sb.exec("cd /workspace/repo && ./run.sh && cat link && readlink link").stdout == "ran\nprint('hi')\nsrc/main.py\n"
            single = Path(tmp) / "one.txt"
            single.write_text("one")
            sb.upload(single, "/workspace/one.txt", mode=0o600)
            assert sb.stat("/workspace/one.txt").permissions == 0o600
            with pytest.raises(gvx.InvalidArgumentError, match="not a regular file or a directory"):
                sb.upload(Path(tmp) / "missing", "/x")

            sb.exec("cd /workspace/repo && echo out > result.txt && ln -s /etc/passwd escape")
            back = Path(tmp) / "back"
            sb.download("/workspace/repo", back)
            assert (back / "result.txt").read_text() == "out\n" and (back / "src" / "main.py").read_text() == "print('hi')\n"
            assert os.readlink(back / "escape") == "/etc/passwd" and (back / "run.sh").stat().st_mode & 0o111
            sb.download("/workspace/one.txt", Path(tmp) / "one-back.txt")
            assert (Path(tmp) / "one-back.txt").read_text() == "one"

        # A snapshot is written on the node, and continued there.
        sb.exec("echo remembered > /root/state")
        sb.checkpoint("/tmp/gvx-ray-test.snap")
        with gvx.ray.Sandbox(restore="/tmp/gvx-ray-test.snap", node=sb.node_id) as again:
            assert again.node_id == sb.node_id and again.read_file("/root/state") == b"remembered\n"
        os.unlink("/tmp/gvx-ray-test.snap")

        async def twins() -> None:
            async with await gvx.ray.Sandbox.create_async() as a:
                results = await asyncio.gather(*(a.exec_async(f"echo {i}") for i in range(4)), sbs[1].exec_async("hostname"))
                assert [r.stdout for r in results[:4]] == [f"{i}\n" for i in range(4)]
                await a.write_file_async("/f", b"x")
                assert await a.read_file_async("/f") == b"x"

        asyncio.run(twins())

        with pytest.raises(TypeError, match="cannot be pickled"):
            pickle.dumps(sb)

        # The actor that owns a node's sandboxes dies: their calls say so, naming the node.
        victim = sbs[2]
        actor_pid = int(Path(f"/proc/{victim.pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        os.kill(actor_pid, signal.SIGKILL)
        with pytest.raises(gvx.SandboxUnavailableError, match=victim.node_id):
            victim.exec("true")
        assert victim.closed and _gone([victim.pid], 10)
        victim.close()
        # The next sandbox on that node gets a new actor.
        with gvx.ray.Sandbox(node=victim.node_id) as fresh:
            assert fresh.exec("echo fresh").stdout == "fresh\n"
        with pytest.raises(gvx.InvalidArgumentError, match="not an alive node"):
            gvx.ray.Sandbox(node="ffff")
        with pytest.raises(gvx.InvalidArgumentError, match="unknown gvx.Sandbox options"):
            gvx.ray.Sandbox(memroy="1g")

        # With a resource demand each sandbox reserves it in an actor of its own.
        with gvx.ray.Sandbox(resources={"node_c": 0.5}) as placed:
            assert names[placed.node_id] == "node_c"
    finally:
        for sb in sbs:
            sb.close()
    pids = [sb.pid for sb in sbs]
    sbs[0].close()  # again: does nothing
    with pytest.raises(gvx.SandboxClosedError):
        sbs[0].exec("true")
    assert _gone(pids, 30), pids
    print("remote_sandbox ok")


def scenario_driver_killed() -> None:
    """A driver killed with SIGKILL leaves no actor and no sandbox behind,
    neither a pool's nor a remote sandbox's."""
    from conftest import sandboxes_of

    _connect(sys.argv[2])
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "_driver_to_kill", sys.argv[2]], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], 120)
    assert ready, "the driver to kill did not start its pool within 120 s"
    actors = [int(pid) for pid in child.stdout.readline().split()]
    assert len(actors) == len(NODES) + 1, actors  # the pool's, and a gvx.ray.Sandbox's
    sandboxes = [sb for pid in actors for sb in sandboxes_of(pid)]
    assert len(sandboxes) >= len(NODES) + 1, sandboxes
    child.kill()
    child.wait(timeout=10)
    start = time.monotonic()
    assert _gone(actors + sandboxes, 10), "actors or sandboxes outlived their driver by 10 s"
    print(f"driver_killed ok: {len(actors)} actors and {len(sandboxes)} sandboxes gone {time.monotonic() - start:.2f} s after the driver")


def scenario__driver_to_kill() -> None:
    import gvx.ray

    _connect(sys.argv[2])
    pool = gvx.ray.EnvPool(3, warm=1)
    pool.reset()
    sb = gvx.ray.Sandbox()
    sandbox_actor = int(Path(f"/proc/{sb.pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    print(" ".join(str(pid) for pid in [*(p.actor_pid for p in pool.placement()), sandbox_actor]), flush=True)
    threading.Event().wait(DRIVER_TIMEOUT)  # until killed


# The tests.


@pytest.mark.parametrize("case", pool_cases.CASES)
def test_pool(cluster: Cluster, case: str) -> None:
    """The cases gvx.ray.EnvPool shares with gvx.EnvPool (test_env.py runs them there)."""
    assert f"{case} ok" in cluster.run(HERE / "pool_cases.py", case)


def test_envpool_spreads_over_nodes(cluster: Cluster) -> None:
    assert "spread ok" in run(cluster, scenario_spread)


def test_dead_node_truncates_and_reset_moves(cluster: Cluster) -> None:
    assert "node_dies ok" in run(cluster, scenario_node_dies)


def test_killed_raylet_truncates_and_reset_moves(cluster: Cluster) -> None:
    try:
        assert "raylet_killed ok" in run(cluster, scenario_raylet_killed)
    finally:
        cluster.add_node("node_c")  # the next tests have three nodes again


def test_a_nodes_environments_step_at_once(cluster: Cluster) -> None:
    assert "concurrent_steps ok" in run(cluster, scenario_concurrent_steps)


@pytest.mark.skipif(
    not os.environ.get("GVX_TEST_DIND_IMAGE") or not (HERE.parents[1] / "build" / "default-image.tar").is_file(),
    reason="no Docker-in-gvx image (GVX_TEST_DIND_IMAGE; `make docker-image` builds it) or no build/default-image.tar",
)
def test_goldens_and_snapshots_are_made_once_per_node(cluster: Cluster) -> None:
    assert "provisioning ok" in run(cluster, scenario_provisioning)


def test_envpool_honours_ray_resources(cluster: Cluster) -> None:
    assert "resources ok" in run(cluster, scenario_resources)


def test_unanswering_actor_is_killed_at_the_deadline(cluster: Cluster) -> None:
    assert "actor_hangs ok" in run(cluster, scenario_actor_hangs)


def test_remote_sandbox(cluster: Cluster) -> None:
    assert "remote_sandbox ok" in run(cluster, scenario_remote_sandbox)


def test_killed_driver_leaves_no_sandbox(cluster: Cluster) -> None:
    assert "driver_killed ok" in run(cluster, scenario_driver_killed)


def test_ray_rollouts_example(cluster: Cluster) -> None:
    """examples/ray_rollouts.py, run as a user runs it on a cluster's machine."""
    # Each environment reserves a tenth of a CPU, as examples/k8s reserves a sandbox slot.
    out = cluster.run_as_user(HERE.parents[1] / "examples" / "ray_rollouts.py", "--envs", "6", "--episodes", "12", "--resource", "CPU=0.1")
    assert "6 environments on 3 nodes" in out, out
    summary = re.search(r"12 episodes, (\d+) steps .*: (\d+) solved, 0 lost to a failure", out)
    assert summary, out
    steps, solved = int(summary.group(1)), int(summary.group(2))
    # Each episode reads its issue, then answers: 2 steps if right, up to max_steps if not.
    assert 24 <= steps <= 48 and 1 <= solved <= 12, out
    assert out.count("node ") == 3, out


def test_import_gvx_does_not_need_ray() -> None:
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    check = (
        "import sys\n"
        "import gvx\n"
        "assert 'ray' not in sys.modules, 'import gvx imported ray'\n"
        "sys.modules['ray'] = None  # as if Ray were not installed\n"
        "try:\n"
        "    import gvx.ray\n"
        "except ImportError as e:\n"
        "    assert \"pip install 'gvx[ray]'\" in str(e), e\n"
        "else:\n"
        "    raise AssertionError('import gvx.ray worked without ray')\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


if __name__ == "__main__":
    # A driver: python test_ray.py SCENARIO ADDRESS, inside the cluster's namespaces.
    driver_alarm()
    scenarios: dict[str, Any] = {k: v for k, v in globals().items() if k.startswith("scenario_")}
    try:
        scenarios["scenario_" + sys.argv[1].removeprefix("scenario_")]()
    finally:
        import ray

        ray.shutdown()

"""Docker inside gvx from Python: a golden /var/lib/docker, episodes with their
own dockerd on clones, and the rollout example's Docker task.

The Docker-in-gvx image is built by `make docker-image` (debootstrap; cached);
make test passes its reference in GVX_TEST_DIND_IMAGE.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import gvx
from test_examples import EXAMPLES, run_example

DIND_IMAGE = os.environ.get("GVX_TEST_DIND_IMAGE", "")
ARCHIVE = Path(__file__).resolve().parents[2] / "build" / "default-image.tar"
BASE = "gvx.test/default:latest"  # the image in ARCHIVE

pytestmark = pytest.mark.skipif(
    not DIND_IMAGE or not ARCHIVE.is_file(),
    reason="no Docker-in-gvx image (GVX_TEST_DIND_IMAGE; `make docker-image` builds it) or no build/default-image.tar",
)


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Iterator[gvx.Volume]:
    work = tmp_path_factory.mktemp("docker-golden")
    lines: list[str] = []
    vol = gvx.docker.golden(DIND_IMAGE, archives=[ARCHIVE], volume=work / "golden.ext4", size="2g", progress=lines.append)
    assert any("docker load" in line for line in lines), lines
    # No custom network in the seed: dockerd's network database is left out,
    # so episodes' dockerd need not take down the seed's bridge network.
    stat = subprocess.run(
        ["debugfs", "-R", "stat /network/files/local-kv.db", str(vol.path)], capture_output=True, text=True, check=True
    )
    assert "File not found" in stat.stderr, (stat.stdout, stat.stderr)
    yield vol


def test_episodes_see_the_golden_images_and_nothing_of_each_other(golden: gvx.Volume, tmp_path: Path) -> None:
    before = os.stat(golden.path)
    with gvx.GvxEnv(
        DIND_IMAGE,
        golden=golden,
        setup=gvx.docker.SETUP,
        step_timeout=120.0,
        episode_dir=str(tmp_path),
        **gvx.docker.SANDBOX_OPTIONS,
    ) as env:
        env.reset()
        obs, *_ = env.step("docker info --format '{{.Driver}}' && docker images --format '{{.Repository}}:{{.Tag}}'")
        assert obs["exit_code"] == 0, obs
        assert obs["stdout"].split() == ["overlay2", BASE], obs
        obs, *_ = env.step(f"docker run --name left-behind {BASE} echo episode-one")
        assert obs["stdout"] == "episode-one\n", obs
        obs, *_ = env.step(
            f"mkdir -p /w && printf 'FROM {BASE}\\nRUN echo built > /built\\n' > /w/Dockerfile && "
            "docker build -q -t ep1-built /w >/dev/null && docker run --rm ep1-built cat /built"
        )
        assert obs["stdout"] == "built\n", obs

        env.reset()
        obs, *_ = env.step("docker ps -a --format '{{.Names}}'; docker images --format '{{.Repository}}'")
        assert obs["exit_code"] == 0, obs
        assert "left-behind" not in obs["stdout"] and "ep1-built" not in obs["stdout"], obs
    after = os.stat(golden.path)
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size), "the golden changed"
    assert golden.check().clean


def test_episodes_restore_a_ready_dockerd(golden: gvx.Volume, tmp_path: Path) -> None:
    snap = tmp_path / "ready.snap"
    ready = gvx.docker.snapshot(DIND_IMAGE, golden=golden, snapshot=snap, volume=tmp_path / "ready.ext4")
    assert snap.stat().st_size > 0 and ready.check().clean
    assert not list(tmp_path.glob(".*.seed")), "the seed's clone was left behind"
    (tmp_path / "episodes").mkdir()
    with gvx.GvxEnv(
        DIND_IMAGE,
        golden=ready,
        restore=snap,
        step_timeout=120.0,
        warm=0,
        episode_dir=str(tmp_path / "episodes"),
        **gvx.docker.SANDBOX_OPTIONS,
    ) as env:
        for episode in ("one", "two"):
            env.reset()
            # No setup ran: the restored dockerd answers at once, with the
            # golden's images, and runs containers on its bridge.
            obs, *_ = env.step(
                f"docker ps -a --format '{{{{.Names}}}}'; docker run --name left-{episode} {BASE} sh -c 'ip -4 -o addr show eth0 | grep -c 172.17.'"
            )
            assert obs == {"stdout": "1\n", "stderr": "", "exit_code": 0}, obs


def test_a_seed_network_survives_into_episodes(tmp_path: Path) -> None:
    vol = gvx.docker.golden(
        DIND_IMAGE, setup=["docker network create gvx-seeded >/dev/null"], volume=tmp_path / "net.ext4", size="1g", progress=False
    )
    with gvx.GvxEnv(DIND_IMAGE, golden=vol, setup=gvx.docker.SETUP, step_timeout=120.0, **gvx.docker.SANDBOX_OPTIONS) as env:
        env.reset()
        obs, *_ = env.step("docker network ls --format '{{.Name}}'")
        assert obs["exit_code"] == 0, obs
        assert sorted(obs["stdout"].split()) == ["bridge", "gvx-seeded", "host", "none"], obs


def test_dockerd_waits_for_a_slow_containerd(golden: gvx.Volume, tmp_path: Path) -> None:
    """On a host busy with many sandboxes containerd can take longer to
    answer than the 15 s dockerd gives a containerd it starts itself (then
    it fails: "timeout waiting for containerd to start"), and dockerd longer
    than a minute to answer. Here containerd starts 65 s late, standing in
    for that load; dockerd must still come up."""
    clone = golden.clone(tmp_path / "slow.ext4")
    with gvx.Sandbox(DIND_IMAGE, mounts=[gvx.Mount(clone.path, "/var/lib/docker")], **gvx.docker.SANDBOX_OPTIONS) as sb:
        real = sb.exec("command -v containerd").stdout.strip()
        assert real.startswith("/usr/bin/"), real
        # /usr/local/bin comes first in the image's PATH.
        sb.write_file("/usr/local/bin/containerd", f'#!/bin/sh\nsleep 65\nexec {real} "$@"\n', mode=0o755)
        assert sb.exec("command -v containerd").stdout.strip() == "/usr/local/bin/containerd"
        gvx.docker.start(sb, timeout=300)
        r = sb.exec(f"docker run --rm {BASE} echo answered", timeout=120)
        assert (r.exit_code, r.stdout) == (0, "answered\n"), r


def test_dockerd_without_nftables_says_how_to_fix() -> None:
    with gvx.Sandbox(DIND_IMAGE) as sb:
        with pytest.raises(gvx.ExecError) as err:
            gvx.docker.start(sb, timeout=60)
    assert "--nftables --net-raw" in err.value.result.stderr, err.value.result.stderr


def test_rollout_pool_runs_a_docker_task_per_episode() -> None:
    out = run_example(str(EXAMPLES / "rollout_pool.py"), "2", "2", "--docker-image", DIND_IMAGE, "--archive", str(ARCHIVE))
    assert "2 envs, 4 steps (docker build + docker run)" in out, out


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-rs"]))

"""Volumes in sandboxes, golden volumes, and episodes on O(1) clones."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import gvx


def sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def test_volume_survives_its_sandbox(tmp_path: Path) -> None:
    vol = gvx.Volume.create(tmp_path / "data.ext4", "256m")
    with gvx.Sandbox(mounts=[gvx.Mount(vol.path, "/data")]) as sb:
        sb.exec("mkdir -p /data/a/b && echo kept > /data/a/b/file && ln -s b /data/a/link", check=True)
    assert vol.check().clean
    with gvx.Sandbox(mounts=[gvx.Mount(vol.path, "/data", read_only=True)]) as sb:
        assert sb.exec("cat /data/a/link/file").stdout == "kept\n"
        assert sb.exec("touch /data/new").exit_code != 0, "a read-only mount must refuse writes"


def test_golden_episodes_are_isolated(tmp_path: Path) -> None:
    lines: list[str] = []
    golden = gvx.golden.build(
        None,
        setup=["mkdir -p /var/lib/docker/images && echo pre-pulled > /var/lib/docker/images/app"],
        volume=tmp_path / "golden.ext4",
        size="256m",
        progress=lines.append,
    )
    assert any("[1/1]" in line for line in lines)
    before = sha256(golden.path)
    episodes = tmp_path / "episodes"
    episodes.mkdir()
    with gvx.GvxEnv(golden=golden, episode_dir=str(episodes)) as env:
        env.reset()
        obs, *_ = env.step("cat /var/lib/docker/images/app; echo scratch > /var/lib/docker/mine")
        assert obs["stdout"] == "pre-pulled\n"
        env.reset()
        obs, *_ = env.step("test -e /var/lib/docker/mine && echo leaked || echo fresh")
        assert obs["stdout"] == "fresh\n", "an episode saw the previous episode's writes"
    assert sha256(golden.path) == before, "episodes wrote to the golden"
    assert list(episodes.iterdir()) == [], "episode clones outlived the environment"


def test_golden_build_refuses_a_failing_setup(tmp_path: Path) -> None:
    with pytest.raises(gvx.ExecError, match="exited with 3"):
        gvx.golden.build(None, setup=["exit 3"], volume=tmp_path / "bad.ext4", size="64m", progress=False)

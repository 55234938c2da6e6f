"""gvx.Volume: create, clone, flatten, check — real ext4 images, checked with
e2fsck; and gvx.Sandbox's volumes= shorthand for mounting them."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

import gvx
import gvx.aio


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_create_clone_flatten_check(tmp_path: Path) -> None:
    golden = gvx.Volume.create(tmp_path / "golden.ext4", "64m")
    assert golden.path.stat().st_size == 64 << 20
    assert golden.path.stat().st_blocks * 512 < 16 << 20, "the image is sparse"
    if shutil.which("e2fsck") is None:
        pytest.skip("e2fsck is not installed (make test installs e2fsprogs)")
    result = golden.check()
    assert result.clean and result.checker == "e2fsck" and not result.needs_recovery, result
    before = sha256(golden.path)
    episode = golden.clone(tmp_path / "episode.ext4")
    assert episode.clone_method in ("reflink", "delta")
    assert episode.check().clean
    flat = episode.flatten(tmp_path / "flat.ext4")
    assert flat.check().clean
    assert sha256(golden.path) == before, "a clone must never write the golden"
    episode.discard()
    assert not episode.path.exists()


def test_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(gvx.InvalidArgumentError, match="size"):
        gvx.Volume.create(tmp_path / "x.ext4", 0)
    not_ext4 = tmp_path / "junk.ext4"
    not_ext4.write_bytes(b"\0" * 65536)
    with pytest.raises(gvx.GvxError):
        gvx.Volume(not_ext4).clone(tmp_path / "ep.ext4")
    with pytest.raises(gvx.NotFoundError):
        gvx.Volume(tmp_path / "missing.ext4").check()


def test_one_writer_per_volume(tmp_path: Path) -> None:
    """A volume has one writer: a second read-write sandbox on it is refused,
    naming the holder; read-only sandboxes share it once the writer is gone."""
    vol = gvx.Volume.create(tmp_path / "v.ext4", "64m")
    with gvx.Sandbox(mounts=[gvx.Mount(vol.path, "/data")]) as first:
        with pytest.raises(gvx.SandboxStartError, match=r"is open read-write by process \d+ \(rungv\)"):
            gvx.Sandbox(mounts=[gvx.Mount(vol.path, "/data")])
        first.exec(["sh", "-c", "echo kept > /data/f"], check=True)
    with gvx.Sandbox(mounts=[gvx.Mount(vol.path, "/data", read_only=True)]) as a:
        with gvx.Sandbox(mounts=[gvx.Mount(vol.path, "/data", read_only=True)]) as b:
            assert a.exec(["cat", "/data/f"]).stdout == b.exec(["cat", "/data/f"]).stdout == "kept\n"


def test_volumes_shorthand(tmp_path: Path) -> None:
    """gvx.Sandbox(volumes=...) attaches ext4 image files as docker's volumes=
    does: what the sandbox writes there is in the image file afterwards, and
    ":ro" (or docker-py's "mode": "ro") mounts it read-only."""
    image = tmp_path / "data.ext4"
    with gvx.Sandbox(volumes={str(image): "/data"}) as sb:  # a missing file is made
        sb.exec(["sh", "-c", "echo through-volumes > /data/f"], check=True)
    if shutil.which("debugfs") is not None:
        out = subprocess.run(["debugfs", "-R", "cat /f", str(image)], capture_output=True, text=True, check=True)
        assert out.stdout == "through-volumes\n", out
    with gvx.Sandbox(volumes=[f"{image}:/ro:ro"]) as sb:
        assert sb.exec(["cat", "/ro/f"]).stdout == "through-volumes\n"
        r = sb.exec(["sh", "-c", "echo x > /ro/g"])
        assert r.exit_code != 0 and "Read-only" in r.stderr, r
    with gvx.Sandbox(volumes={image: {"bind": "/d", "mode": "ro"}}, mounts=[gvx.Mount(tmp_path / "other.ext4", "/o")]) as sb:
        r = sb.exec(["sh", "-c", "cat /d/f; echo x > /d/g; grep -c ' /o ' /proc/mounts"])
        assert r.stdout == "through-volumes\n1\n" and "Read-only" in r.stderr, r


def test_volumes_through_aio_and_env(tmp_path: Path) -> None:
    """gvx.aio.Sandbox.create and GvxEnv take volumes= as gvx.Sandbox does."""
    image = tmp_path / "data.ext4"

    async def write() -> None:
        async with await gvx.aio.Sandbox.create(volumes=[f"{image}:/data"]) as sb:
            await sb.exec(["sh", "-c", "echo from-aio > /data/f"], check=True)

    asyncio.run(write())
    env = gvx.GvxEnv(warm=0, volumes={image: {"bind": "/data", "mode": "ro"}})
    try:
        env.reset()
        obs, _, _, _, _ = env.step("cat /data/f")
        assert obs["stdout"] == "from-aio\n", obs
    finally:
        env.close()

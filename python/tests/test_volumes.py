"""gvx.Volume: create, clone, flatten, check — real ext4 images, checked with e2fsck."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

import gvx


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

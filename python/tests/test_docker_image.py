"""How a pip user gets the Docker-in-gvx image: gvx.docker.image() reads
$GVX_DOCKER_IMAGE (a registry reference), else finds a `make docker-image`
build in the cache, else says how to get one; and a registry reference works
end to end (the in-process test registry serving what `make docker-image`
built; make test passes its reference in GVX_TEST_DIND_IMAGE)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

import gvx

ROOT = Path(__file__).resolve().parents[2]
DIND_IMAGE = os.environ.get("GVX_TEST_DIND_IMAGE", "")
ARCHIVE = ROOT / "build" / "default-image.tar"
BASE = "gvx.test/default:latest"  # the image in ARCHIVE


def test_image_is_the_environment_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GVX_CACHE", str(tmp_path))
    monkeypatch.setenv(gvx.docker.IMAGE_ENV, "registry.example.com/gvx/docker:1")
    assert gvx.docker.image() == "registry.example.com/gvx/docker:1"


def test_image_is_the_newest_complete_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(gvx.docker.IMAGE_ENV, raising=False)
    monkeypatch.setenv("GVX_CACHE", str(tmp_path))
    for key, mtime in (("old", 1_000_000), ("new", 2_000_000)):
        (tmp_path / "dockerimage" / key / "oci").mkdir(parents=True)
        meta = tmp_path / "dockerimage" / key / "build.json"
        meta.write_text("{}")
        os.utime(meta, (mtime, mtime))
    (tmp_path / "dockerimage" / "unfinished" / "oci").mkdir(parents=True)  # no build.json yet
    assert gvx.docker.image() == f"oci:{tmp_path / 'dockerimage' / 'new' / 'oci'}:latest"


def test_no_image_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(gvx.docker.IMAGE_ENV, raising=False)
    monkeypatch.setenv("GVX_CACHE", str(tmp_path))
    with pytest.raises(gvx.NotFoundError) as e:
        gvx.docker.image()
    assert "GVX_DOCKER_IMAGE" in str(e.value) and "make docker-image" in str(e.value), e.value


@pytest.fixture
def registry() -> Iterator[str]:
    """The in-process test registry (Go) holding the Docker image as gvx/docker:latest."""
    if not DIND_IMAGE.startswith("oci:") or not ARCHIVE.is_file():
        pytest.skip("no Docker-in-gvx image (GVX_TEST_DIND_IMAGE; `make docker-image` builds it) or no build/default-image.tar")
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain to run the test registry (core/internal/testregistry)")
    layout = DIND_IMAGE[len("oci:") : -len(":latest")]
    proc = subprocess.Popen(
        [go, "run", "./core/internal/testregistry/cmd/testregistry", "-push", f"{layout}=gvx/docker:latest"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "CGO_ENABLED": "0"},
    )
    assert proc.stdout is not None
    host = proc.stdout.readline().strip()  # after the push; empty if it failed
    try:
        assert host, f"the test registry did not start (exit {proc.wait(timeout=60)})"
        yield f"{host}/gvx/docker:latest"
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the registry serves until its stdin closes
        proc.wait(timeout=60)


def test_pip_user_gets_docker_from_a_registry(
    registry: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The README's way for pip users: GVX_DOCKER_IMAGE names a registry reference;
    gvx.docker.image() returns it, a golden is built from it (pulled on first use), and
    an episode on a clone runs a container of the golden's images."""
    monkeypatch.setenv(gvx.docker.IMAGE_ENV, registry)
    image = gvx.docker.image()
    assert image == registry
    start = time.monotonic()
    pulled = gvx.pull(image, progress=False)
    assert registry in pulled.refs, pulled
    golden = gvx.docker.golden(image, archives=[ARCHIVE], volume=tmp_path / "golden.ext4", size="2g", progress=False)
    clone = golden.clone(tmp_path / "episode.ext4")
    with gvx.Sandbox(image, mounts=[gvx.Mount(clone.path, "/var/lib/docker")], **gvx.docker.SANDBOX_OPTIONS) as sb:
        gvx.docker.start(sb)
        result = sb.exec(f"docker run --rm {BASE} echo from-a-registry", timeout=120)
    assert result.ok and result.stdout == "from-a-registry\n", result
    print(f"pull, golden and an episode from {registry}: {time.monotonic() - start:.1f} s")

"""gvx.pull against the local test image."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path
from typing import Any

import pytest

import gvx
from gvx.images import _Bar

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def test_image_ref() -> str:
    out = subprocess.run(["go", "run", "./core/internal/testimage/mkimage"], cwd=ROOT, check=True, capture_output=True, text=True)
    return out.stdout.split()[0]


def test_pull_reports_progress_and_caches(test_image_ref: str, tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    img = gvx.pull(test_image_ref, cache=tmp_path, progress=events.append)
    assert img.id.startswith("sha256:") and img.layers == 3 and img.files > 50 and img.xattr_files == 2
    assert Path(img.erofs).is_file() and Path(img.erofs).stat().st_size == img.size
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "resolved" and "layer" in kinds and kinds[-1] == "done"
    again: list[dict[str, Any]] = []
    assert gvx.pull(test_image_ref, cache=tmp_path, progress=again.append).id == img.id
    assert [e["kind"] for e in again] == ["resolved", "cached"]
    # The pulled image runs.
    with gvx.Sandbox(test_image_ref, cache=tmp_path) as sb:
        assert sb.exec("cat /etc/motd").stdout == "top layer\n"


def test_progress_text_without_a_terminal(test_image_ref: str, tmp_path: Path) -> None:
    out = io.StringIO()
    gvx.pull(test_image_ref, cache=tmp_path, progress=_Bar(out))
    text = out.getvalue()
    assert "Pulling " in text and "layer 3/3" in text and "\r" not in text


def test_pull_errors_say_why(tmp_path: Path) -> None:
    with pytest.raises(gvx.NotFoundError, match="no such file or directory"):
        gvx.pull("oci:/nonexistent", cache=tmp_path, progress=False)
    with pytest.raises(gvx.InvalidArgumentError, match="platform"):
        gvx.pull("oci:/x", cache=tmp_path, platform="nonsense", progress=False)

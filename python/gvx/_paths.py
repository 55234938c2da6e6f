"""Where gvx finds its parts: the rungv binary and the embedded default image."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from . import _ffi, errors


def _find(what: str, env: str, candidates: Sequence[Path], hint: str) -> Path:
    override = os.environ.get(env)
    if override:
        return Path(override)
    for path in candidates:
        if path.exists():
            return path
    raise errors.GvxError(f"{what} not found (looked at {', '.join(map(str, candidates))}); {hint}, or set {env}.")


def rungv_path() -> Path:
    """The rungv binary: $GVX_RUNGV, the one in the wheel, or the source tree's build/."""
    return _find(
        "rungv",
        "GVX_RUNGV",
        [_ffi.package_dir() / "_lib" / "rungv", _ffi.source_build_dir() / "rungv"],
        "install gvx with `pip install .` or run `make`",
    )


def default_image() -> str:
    """The embedded default image (busybox): $GVX_DEFAULT_IMAGE, the wheel's, or the source tree's."""
    override = os.environ.get("GVX_DEFAULT_IMAGE")
    if override:
        return override
    layout = _find(
        "the default image",
        "GVX_DEFAULT_IMAGE",
        [_ffi.package_dir() / "_data" / "default-image", _ffi.source_build_dir() / "default-image"],
        "install gvx with `pip install .` or run `make`",
    )
    return f"oci:{layout}:latest"

"""The C ABI as Python sees it."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

import gvx
from gvx import _ffi


def test_library_version_is_the_build_version() -> None:
    version = gvx.library_version()
    # `make test` passes the version it stamped into the build.
    expected = os.environ.get("GVX_EXPECT_VERSION")
    if expected:
        assert version == expected
    else:
        assert version


def test_null_argument_is_reported_not_crashed() -> None:
    err = ctypes.c_void_p()
    status = _ffi.lib().gvx_version(None, ctypes.byref(err))
    with pytest.raises(gvx.InvalidArgumentError, match="must not be NULL"):
        _ffi.raise_for(status, err)


def test_missing_library_says_how_to_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_ffi, "_lib", None)
    monkeypatch.setattr(_ffi, "_candidates", lambda: [tmp_path / "nope.so"])
    with pytest.raises(gvx.LibraryNotFoundError, match="GVX_LIBRARY"):
        _ffi.lib()

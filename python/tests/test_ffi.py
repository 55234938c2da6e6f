"""The C ABI as Python sees it."""

from __future__ import annotations

import ctypes
import multiprocessing
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


def _use_gvx_in_forked_child(inherited: gvx.Sandbox, results: "multiprocessing.Queue[tuple[str, str]]") -> None:
    try:
        gvx.Sandbox()
        results.put(("started", ""))
    except gvx.ForkedProcessError as e:
        results.put(("refused", str(e)))
    inherited.close()  # the parent's sandbox, copied by fork: must be left alone
    results.put(("closed", ""))


def test_forked_child_is_refused_not_hung() -> None:
    """Go's runtime does not survive fork(): a child forked after the library
    loaded would hang in its first call. It gets an error saying to use spawn,
    and its copy of the parent's sandbox closes without touching it."""
    with gvx.Sandbox() as sb:
        ctx = multiprocessing.get_context("fork")
        results: "multiprocessing.Queue[tuple[str, str]]" = ctx.Queue()
        child = ctx.Process(target=_use_gvx_in_forked_child, args=(sb, results))
        child.start()
        child.join(60)
        if child.is_alive():
            child.kill()
            pytest.fail("a forked child calling gvx hung")
        assert child.exitcode == 0
        what, message = results.get(timeout=5)
        assert what == "refused", "a forked child started a sandbox through the parent's Go runtime"
        assert "'spawn'" in message and "fork()" in message
        assert results.get(timeout=5)[0] == "closed"
        assert sb.exec(["echo", "still"]).stdout == "still\n"

"""The C ABI as Python sees it."""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

import gvx
from gvx import _ffi
from conftest import BUSY_CHILD, PS, busy_children


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


@pytest.mark.parametrize(
    "config,field",
    [
        ({"image": "x", "ports": [{"guest_port": 80}, {"host_port": 8080}]}, "ports[1].guest_port"),
        ({"image": "x", "mounts": [{"source": "v.ext4", "target": "data"}]}, "mounts[0].target"),
        ({"image": "x", "allow_packet_socket_write": True}, "allow_packet_socket_write"),
        ({"image": "x", "env": ["NOVALUE"]}, "env[0]"),
        ({"image": "x", "timeout": -1}, "timeout"),
    ],
)
def test_a_bad_spec_names_its_field(config: dict[str, object], field: str) -> None:
    """libgvx checks a sandbox's JSON spec in one place (core/spec), naming the field at fault
    as the JSON does, before any process starts."""
    handle, err = ctypes.c_uint64(), ctypes.c_void_p()
    status = _ffi.lib().gvx_sandbox_new(json.dumps(config).encode(), ctypes.byref(handle), ctypes.byref(err))
    with pytest.raises(gvx.InvalidArgumentError, match=re.escape(field)):
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


def test_ctrl_c_stops_a_long_exec_and_kills_its_command() -> None:
    """A signal reaches Python only between bytecodes, and a ctypes call runs
    none: Ctrl-C during a long exec must still raise KeyboardInterrupt at
    once, not when the command ends, and kill the command."""
    with gvx.Sandbox() as sb:
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        start = time.monotonic()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            sb.exec(BUSY_CHILD)
        timer.join()
        assert time.monotonic() - start < 60, "Ctrl-C waited for the command"
        deadline = time.monotonic() + 10
        while busy_children(sb.exec(PS).stdout):
            assert time.monotonic() < deadline, "the interrupted command (or its child) still runs"
        assert sb.exec(["echo", "usable"]).stdout == "usable\n"


def test_cancel_tokens_are_checked() -> None:
    lib = _ffi.lib()
    with pytest.raises(gvx.SandboxClosedError, match="cancel token 987654321"):
        _ffi.call(lib.gvx_cancel, ctypes.c_uint64(987654321))
    token = ctypes.c_uint64()
    _ffi.call(lib.gvx_cancel_new, ctypes.byref(token))
    _ffi.call(lib.gvx_cancel, token)
    _ffi.call(lib.gvx_cancel_free, token)
    with pytest.raises(gvx.SandboxClosedError):
        _ffi.call(lib.gvx_cancel_free, token)


def test_a_cancelled_token_cancels_the_call() -> None:
    """What a C caller sees: an exec naming a cancelled token returns
    GVX_E_CANCELED."""
    lib = _ffi.lib()
    token = ctypes.c_uint64()
    _ffi.call(lib.gvx_cancel_new, ctypes.byref(token))
    _ffi.call(lib.gvx_cancel, token)
    try:
        with gvx.Sandbox() as sb:
            request = json.dumps({"argv": ["sleep", "300"], "cancel": token.value}).encode()
            out, err_buf, result = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
            n_out, n_err = ctypes.c_size_t(), ctypes.c_size_t()
            with pytest.raises(gvx.CancelledError):
                _ffi.call(
                    lib.gvx_sandbox_exec, sb._h(), request, None, 0, ctypes.byref(result),
                    ctypes.byref(out), ctypes.byref(n_out), ctypes.byref(err_buf), ctypes.byref(n_err),
                )
    finally:
        _ffi.call(lib.gvx_cancel_free, token)

"""Loads libgvx and declares its C ABI (capi/gvx.h) for ctypes.

The library is found, in order, at ``$GVX_LIBRARY``, next to this package
(``gvx/_lib/libgvx.so``, where wheels put it), or in the source tree's
``build/`` directory (after ``make``).

Every call releases the GIL while it runs (ctypes does that for CDLL
functions), so long calls block only their own thread.

A process forked after the library was loaded cannot use it: Go's runtime
keeps its threads in the parent, and a call in the child would hang. Such a
child gets :class:`gvx.ForkedProcessError` instead, and its copies of the
parent's sandboxes close as no-ops, leaving the parent's sandboxes running.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Callable, NoReturn, Optional

from . import errors

GVX_OK = 0

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
# Set in a child forked from a process that had loaded the library.
_forked = False

_FORKED_MESSAGE = (
    "gvx cannot run in a process forked from one that had already used it: libgvx is Go code, "
    "and Go's runtime does not survive fork(), so the call would hang. Start worker processes "
    "with the 'spawn' or 'forkserver' method (multiprocessing.set_start_method('spawn'), "
    "multiprocessing.get_context('spawn'), gymnasium.vector.AsyncVectorEnv(..., context='spawn')), "
    "or create the first sandbox only after forking."
)


def _after_fork_in_child() -> None:
    global _forked, _lock
    if _lib is not None:
        _forked = True
    # Another thread may have held the lock when the process forked.
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)

c_uint8_p = ctypes.POINTER(ctypes.c_uint8)

OUTPUT_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, c_uint8_p, ctypes.c_size_t)
PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


def package_dir() -> Path:
    return Path(__file__).resolve().parent


def source_build_dir() -> Path:
    """The source tree's build/ directory (used when running from a checkout)."""
    return package_dir().parent.parent / "build"


def _candidates() -> list[Path]:
    paths = []
    env = os.environ.get("GVX_LIBRARY")
    if env:
        paths.append(Path(env))
    paths.append(package_dir() / "_lib" / "libgvx.so")
    paths.append(source_build_dir() / "libgvx.so")
    return paths


def _declare(lib: ctypes.CDLL) -> None:
    vp = ctypes.c_void_p
    pvp = ctypes.POINTER(ctypes.c_void_p)
    u64 = ctypes.c_uint64
    size = ctypes.c_size_t
    cs = ctypes.c_char_p
    signatures: dict[str, list[object]] = {
        "gvx_version": [pvp, pvp],
        "gvx_sandbox_new": [cs, ctypes.POINTER(u64), pvp],
        "gvx_sandbox_info": [u64, pvp, pvp],
        "gvx_sandbox_stats": [u64, pvp, pvp],
        "gvx_sandbox_exec": [u64, cs, c_uint8_p, size, pvp, pvp, ctypes.POINTER(size), pvp, ctypes.POINTER(size), pvp],
        "gvx_sandbox_exec_stream": [u64, cs, c_uint8_p, size, OUTPUT_FN, vp, pvp, pvp],
        "gvx_sandbox_read_file": [u64, cs, pvp, ctypes.POINTER(size), pvp],
        "gvx_sandbox_write_file": [u64, cs, c_uint8_p, size, ctypes.c_uint32, pvp],
        "gvx_sandbox_upload": [u64, cs, cs, ctypes.c_int32, pvp],
        "gvx_sandbox_signal": [u64, ctypes.c_int, pvp],
        "gvx_sandbox_wait": [u64, ctypes.POINTER(ctypes.c_int), pvp],
        "gvx_sandbox_close": [u64, pvp],
        "gvx_sandbox_reset": [u64, pvp],
        "gvx_image_pull": [cs, cs, PROGRESS_FN, vp, pvp, pvp],
        "gvx_volume_create": [cs, ctypes.c_int64, pvp],
        "gvx_volume_clone": [cs, cs, pvp, pvp],
        "gvx_volume_flatten": [cs, cs, pvp],
        "gvx_volume_check": [cs, pvp, pvp],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
    lib.gvx_free.argtypes = [vp]
    lib.gvx_free.restype = None


def lib() -> ctypes.CDLL:
    """Returns the loaded library, loading it on first use."""
    global _lib
    if _forked:
        raise errors.ForkedProcessError(_FORKED_MESSAGE)
    with _lock:
        if _lib is None:
            tried = []
            for path in _candidates():
                tried.append(str(path))
                if path.is_file():
                    loaded = ctypes.CDLL(str(path))
                    _declare(loaded)
                    _lib = loaded
                    break
            else:
                raise errors.LibraryNotFoundError(
                    "libgvx.so not found (looked at: " + ", ".join(tried) + "). "
                    "Install gvx with `pip install .` from the source tree, run `make`, "
                    "or point GVX_LIBRARY at the library."
                )
        return _lib


def take_string(ptr: ctypes.c_void_p) -> str:
    """Copies a string libgvx returned and frees it."""
    if not ptr.value:
        return ""
    try:
        return ctypes.string_at(ptr.value).decode("utf-8", errors="replace")
    finally:
        lib().gvx_free(ptr)


def take_bytes(ptr: ctypes.c_void_p, length: int) -> bytes:
    """Copies a buffer libgvx returned and frees it."""
    if not ptr.value:
        return b""
    try:
        return ctypes.string_at(ptr.value, length)
    finally:
        lib().gvx_free(ptr)


def raise_for(status: int, err: ctypes.c_void_p) -> NoReturn:
    """Raises the exception for a failed call, freeing the error text."""
    raise errors.from_status(status, take_string(err))


def call(fn: Callable[..., int], *args: object) -> None:
    """Calls a libgvx function whose last argument is char **err."""
    err = ctypes.c_void_p()
    status = fn(*args, ctypes.byref(err))
    if status != GVX_OK:
        raise_for(status, err)


def buffer(data: Optional[bytes]) -> tuple[Optional["ctypes._Pointer[ctypes.c_uint8]"], int]:
    """A read-only view of data for a const uint8_t * argument."""
    if data is None:
        return None, 0
    if not data:
        return ctypes.cast(ctypes.c_char_p(b""), c_uint8_p), 0
    return ctypes.cast(ctypes.c_char_p(data), c_uint8_p), len(data)

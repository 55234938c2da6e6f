"""Loads libgvx and declares the C ABI (capi/gvx.h) for ctypes.

The library is found, in order, at ``$GVX_LIBRARY``, next to this package
(``gvx/_lib/libgvx.so``, where wheels put it), or in the source tree's
``build/`` directory (after ``make``).
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Optional

from .errors import GvxError, InternalError, InvalidArgumentError, LibraryNotFoundError

GVX_OK = 0
GVX_E_INVALID = -1
GVX_E_INTERNAL = -2

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


def _candidates() -> list[Path]:
    here = Path(__file__).resolve().parent
    paths = []
    env = os.environ.get("GVX_LIBRARY")
    if env:
        paths.append(Path(env))
    paths.append(here / "_lib" / "libgvx.so")
    paths.append(here.parent.parent / "build" / "libgvx.so")
    return paths


def _declare(lib: ctypes.CDLL) -> None:
    lib.gvx_version.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
    lib.gvx_version.restype = ctypes.c_int
    lib.gvx_free.argtypes = [ctypes.c_void_p]
    lib.gvx_free.restype = None


def lib() -> ctypes.CDLL:
    """Returns the loaded library, loading it on first use."""
    global _lib
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
                raise LibraryNotFoundError(
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


def check(status: int, err: ctypes.c_void_p) -> None:
    """Raises the exception for a failed call, freeing the error text."""
    message = take_string(err)
    if status == GVX_OK:
        return
    if status == GVX_E_INVALID:
        raise InvalidArgumentError(message)
    if status == GVX_E_INTERNAL:
        raise InternalError(message)
    raise GvxError(f"libgvx error {status}: {message}")

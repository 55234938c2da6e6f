"""gvx: isolated, Docker-capable sandboxes for training and evaluating coding agents.

Each sandbox is one unprivileged ``rungv`` process running gVisor's Sentry
kernel; this package drives them through ``libgvx``.
"""

from __future__ import annotations

import ctypes

from . import _ffi
from .errors import GvxError, InternalError, InvalidArgumentError, LibraryNotFoundError

__all__ = [
    "GvxError",
    "InternalError",
    "InvalidArgumentError",
    "LibraryNotFoundError",
    "library_version",
]


def library_version() -> str:
    """Returns the version of the loaded libgvx."""
    out = ctypes.c_void_p()
    err = ctypes.c_void_p()
    status = _ffi.lib().gvx_version(ctypes.byref(out), ctypes.byref(err))
    _ffi.check(status, err)
    return _ffi.take_string(out)

"""gvx: isolated, Docker-capable sandboxes for training and evaluating coding agents.

Each sandbox is one unprivileged ``rungv`` process running gVisor's Sentry
kernel; this package drives them through ``libgvx``.

>>> import gvx
>>> with gvx.Sandbox() as sb:
...     result = sb.exec("echo hello")
>>> result.stdout
'hello\\n'
"""

from __future__ import annotations

import ctypes

from . import _ffi
from ._version import __version__ as __version__
from .errors import (
    CancelledError,
    ExecError,
    ForkedProcessError,
    GvxError,
    InternalError,
    InvalidArgumentError,
    LibraryNotFoundError,
    NoSpaceError,
    NotFoundError,
    PermissionDeniedError,
    SandboxClosedError,
    SandboxStartError,
    SandboxUnavailableError,
    TimeoutError,
)
from . import aio, docker, golden
from .env import EnvPool, GvxEnv
from ._pool import NodeStats, PoolStats
from .images import Image, pull
from .volumes import CheckResult, Volume
from ._options import parse_port, parse_size
from ._process import Process
from .sandbox import ExecResult, FileInfo, Mount, PublishedPort, Sandbox, SandboxInfo, SandboxStats, default_image, rungv_path

__all__ = [
    "CheckResult",
    "Volume",
    "Image",
    "pull",
    "EnvPool",
    "GvxEnv",
    "NodeStats",
    "PoolStats",
    "SandboxStats",
    "FileInfo",
    "aio",
    "docker",
    "golden",
    "CancelledError",
    "ExecError",
    "ForkedProcessError",
    "ExecResult",
    "GvxError",
    "InternalError",
    "InvalidArgumentError",
    "LibraryNotFoundError",
    "NotFoundError",
    "NoSpaceError",
    "PermissionDeniedError",
    "Mount",
    "Process",
    "Sandbox",
    "SandboxClosedError",
    "PublishedPort",
    "SandboxInfo",
    "SandboxStartError",
    "SandboxUnavailableError",
    "TimeoutError",
    "default_image",
    "library_version",
    "parse_port",
    "parse_size",
    "rungv_path",
]


def library_version() -> str:
    """Returns the version of the loaded libgvx: ``__version__`` for the wheel's
    (and ``__version__+g<commit>`` for a source tree's ``make`` build)."""
    out = ctypes.c_void_p()
    _ffi.call(_ffi.lib().gvx_version, ctypes.byref(out))
    return _ffi.take_string(out)

"""The exceptions gvx raises. Every message says what went wrong and how to fix it."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._results import ExecResult


class GvxError(Exception):
    """Base class of every gvx error."""


class LibraryNotFoundError(GvxError):
    """libgvx.so could not be found."""


class ForkedProcessError(GvxError):
    """gvx was called in a process forked from one that had already used it.

    libgvx is Go code, and Go's runtime does not survive ``fork()``: the child
    has only the forking thread, so any call into the library would hang. Start
    worker processes with the ``spawn`` or ``forkserver`` method instead.
    """


class InvalidArgumentError(GvxError, ValueError):
    """An argument was rejected; the message names it."""


class InternalError(GvxError):
    """A bug in gvx. Please report the message, which carries a stack trace."""


class NotFoundError(GvxError):
    """No such image or file. (A missing command is an exec result with exit code 127.)"""


class SandboxClosedError(GvxError):
    """The sandbox was closed; create a new one."""


class SandboxUnavailableError(GvxError):
    """The sandbox exited or cannot be reached; the message carries rungv's last words."""


class TimeoutError(GvxError, builtins.TimeoutError):  # noqa: A001 - deliberately shadows the builtin in this module
    """A deadline passed."""


class PermissionDeniedError(GvxError, PermissionError):
    """Denied inside the sandbox."""


class SandboxStartError(GvxError):
    """The sandbox could not start; the message says why."""


class ExecError(GvxError):
    """A command exited non-zero in ``exec(..., check=True)``; ``result`` has its output."""

    def __init__(self, result: "ExecResult", command: object) -> None:
        self.result = result
        self.command = command
        tail = result.stderr.strip()[-2000:]
        what = f"killed by signal {result.signal}" if result.signal else f"exited with {result.exit_code}"
        if result.timed_out:
            what = "timed out and was killed"
        message = f"command {command!r} {what}"
        if tail:
            message += f"; stderr ends with:\n{tail}"
        super().__init__(message)

    def __reduce__(self) -> tuple[type["ExecError"], tuple["ExecResult", object]]:
        # Pickled with its result, so it crosses processes (gvx.ray, multiprocessing) whole.
        return ExecError, (self.result, self.command)


class NoSpaceError(GvxError, OSError):
    """The sandbox is full: its volume, or its memory limit, which holds the files
    written to its root and tmpfs too. The sandbox itself still runs."""


class CancelledError(GvxError):
    """The call was cancelled (its command killed) because the caller was interrupted."""


def status_classes() -> dict[int, type[GvxError]]:
    """Each libgvx status (a GVX_E_* of capi/gvx.h) and the exception it raises."""
    from . import _ffi  # _ffi imports this module; by the time a call fails, both are loaded

    return {
        _ffi.GVX_E_INVALID: InvalidArgumentError,
        _ffi.GVX_E_INTERNAL: InternalError,
        _ffi.GVX_E_NOT_FOUND: NotFoundError,
        _ffi.GVX_E_CLOSED: SandboxClosedError,
        _ffi.GVX_E_UNAVAILABLE: SandboxUnavailableError,
        _ffi.GVX_E_TIMEOUT: TimeoutError,
        _ffi.GVX_E_PERMISSION: PermissionDeniedError,
        _ffi.GVX_E_START: SandboxStartError,
        _ffi.GVX_E_CANCELED: CancelledError,
        _ffi.GVX_E_NO_SPACE: NoSpaceError,
    }


def from_status(status: int, message: str) -> GvxError:
    """The exception for a libgvx status code."""
    cls = status_classes().get(status, GvxError)
    return cls(message or f"libgvx error {status}")

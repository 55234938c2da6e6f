"""Loads libgvx and declares its C ABI (capi/gvx.h) for ctypes.

The library is found, in order, at ``$GVX_LIBRARY``, next to this package
(``gvx/_lib/libgvx.so``, where wheels put it), or in the source tree's
``build/`` directory (after ``make``).

Every call releases the GIL while it runs (ctypes does that for CDLL
functions), so long calls block only their own thread.

The binding follows the header mechanically, and tests/test_abi_drift.py
checks that it does:

- :data:`SIGNATURES` maps each function gvx.h declares (and libgvx exports)
  to ``(restype, [argtypes])``; loading the library declares exactly those.
  The C types map one way: ``int``/``int32_t``/``uint32_t``/``int64_t``/
  ``uint64_t``/``size_t`` to the ctypes type of that name, ``void`` results to
  None, ``const char *`` to ``c_char_p``, ``const uint8_t *`` to
  ``POINTER(c_uint8)``, ``void *`` to ``c_void_p``, a pointer to an integer
  (an out-parameter) to ``POINTER`` of its type, and every ``T **`` (a string
  or buffer libgvx returns, freed with gvx_free) to ``POINTER(c_void_p)``, so
  that the pointer stays ours to free. A callback typedef is the
  ``CFUNCTYPE`` of its prototype under the same rules (:data:`OUTPUT_FN`,
  :data:`PROGRESS_FN`).
- Every ``#define`` of gvx.h that Python uses is a constant here under the
  header's own name (``GVX_E_NOT_FOUND``, ``GVX_WRITE_MAKE_PARENTS``), with
  the header's value; the rest of the package uses these names, never the
  numbers.

A process forked after the library was loaded cannot use it: Go's runtime
keeps its threads in the parent, and a call in the child would hang. Such a
child gets :class:`gvx.ForkedProcessError` instead, and its copies of the
parent's sandboxes close as no-ops, leaving the parent's sandboxes running.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, NoReturn, Optional

from . import errors

if TYPE_CHECKING:  # typing.TypeAlias is Python 3.10+; gvx runs on 3.9
    from typing_extensions import TypeAlias

# Status codes: what every function returns.
GVX_OK = 0
GVX_E_INVALID = -1
GVX_E_INTERNAL = -2
GVX_E_NOT_FOUND = -3
GVX_E_CLOSED = -4
GVX_E_UNAVAILABLE = -5
GVX_E_TIMEOUT = -6
GVX_E_PERMISSION = -7
GVX_E_START = -8
GVX_E_CANCELED = -9
GVX_E_NO_SPACE = -10

# Streams passed to gvx_output_fn.
GVX_STDOUT = 1
GVX_STDERR = 2

# gvx_sandbox_write_file's mode flag: make missing parent directories.
GVX_WRITE_MAKE_PARENTS = 1 << 16

# gvx_sandbox_checkpoint's flags: end the sandbox once the snapshot is written.
GVX_CHECKPOINT_STOP = 1 << 0

# gvx_process_signal's flags.
GVX_SIGNAL_DESCENDANTS = 1 << 0

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
# Set in a child forked from a process that had loaded the library.
_forked = False

_FORKED_MESSAGE = (
    "gvx cannot run in a process forked from one that had already used it: libgvx is Go code, "
    "and Go's runtime does not survive fork(), so the call would hang. Start worker processes "
    "with the 'spawn' or 'forkserver' method (multiprocessing.set_start_method('spawn'), "
    "multiprocessing.get_context('spawn'), gymnasium.vector.AsyncVectorEnv(..., context='spawn', shared_memory=False)), "
    "or create the first sandbox only after forking."
)


def _after_fork_in_child() -> None:
    global _forked, _lock, _helpers
    if _lib is not None:
        _forked = True
    # Another thread may have held the lock when the process forked, and the
    # helpers' threads stayed in the parent.
    _lock = threading.Lock()
    _helpers = None


os.register_at_fork(after_in_child=_after_fork_in_child)

CType: TypeAlias = "type[ctypes._CData]"

c_uint8_p = ctypes.POINTER(ctypes.c_uint8)

# gvx_output_fn and gvx_progress_fn.
OUTPUT_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, c_uint8_p, ctypes.c_size_t)
PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)

_int = ctypes.c_int
_u32 = ctypes.c_uint32
_i32 = ctypes.c_int32
_i64 = ctypes.c_int64
_u64 = ctypes.c_uint64
_size = ctypes.c_size_t
_vp = ctypes.c_void_p
_cs = ctypes.c_char_p
_out = ctypes.POINTER(ctypes.c_void_p)  # char ** and uint8_t **: freed with gvx_free
_u64_p = ctypes.POINTER(ctypes.c_uint64)
_size_p = ctypes.POINTER(ctypes.c_size_t)
_int_p = ctypes.POINTER(ctypes.c_int)

# Each function of gvx.h: (restype, argtypes), in the header's order.
SIGNATURES: dict[str, tuple[Optional[CType], list[CType]]] = {
    "gvx_version": (_int, [_out, _out]),
    "gvx_free": (None, [_vp]),
    "gvx_sandbox_new": (_int, [_cs, _u64_p, _out]),
    "gvx_sandbox_info": (_int, [_u64, _out, _out]),
    "gvx_sandbox_stats": (_int, [_u64, _out, _out]),
    "gvx_sandbox_exec": (_int, [_u64, _cs, c_uint8_p, _size, _out, _out, _size_p, _out, _size_p, _out]),
    "gvx_sandbox_exec_stream": (_int, [_u64, _cs, c_uint8_p, _size, OUTPUT_FN, _vp, _out, _out]),
    "gvx_cancel_new": (_int, [_u64_p, _out]),
    "gvx_cancel": (_int, [_u64, _out]),
    "gvx_cancel_free": (_int, [_u64, _out]),
    "gvx_sandbox_stat": (_int, [_u64, _cs, _out, _out]),
    "gvx_sandbox_read_file": (_int, [_u64, _cs, _out, _size_p, _out]),
    "gvx_sandbox_write_file": (_int, [_u64, _cs, c_uint8_p, _size, _u32, _out]),
    "gvx_sandbox_write_file_as": (_int, [_u64, _cs, c_uint8_p, _size, _u32, _cs, _out]),
    "gvx_sandbox_upload": (_int, [_u64, _cs, _cs, _i32, _out]),
    "gvx_sandbox_upload_as": (_int, [_u64, _cs, _cs, _i32, _cs, _out]),
    "gvx_sandbox_download": (_int, [_u64, _cs, _cs, _out]),
    "gvx_sandbox_checkpoint": (_int, [_u64, _cs, _u32, _out]),
    "gvx_sandbox_signal": (_int, [_u64, _int, _out]),
    "gvx_sandbox_wait": (_int, [_u64, _int_p, _out]),
    "gvx_sandbox_reset": (_int, [_u64, _out]),
    "gvx_sandbox_close": (_int, [_u64, _out]),
    "gvx_process_start": (_int, [_u64, _cs, _u64_p, _out]),
    "gvx_process_write": (_int, [_u64, c_uint8_p, _size, _out]),
    "gvx_process_close_stdin": (_int, [_u64, _out]),
    "gvx_process_read": (_int, [_u64, _int, c_uint8_p, _size, _int, _u64, _size_p, _out]),
    "gvx_process_signal": (_int, [_u64, _int, _u32, _out]),
    "gvx_process_wait": (_int, [_u64, _int, _u64, _out, _out]),
    "gvx_process_close": (_int, [_u64, _out]),
    "gvx_volume_create": (_int, [_cs, _i64, _out]),
    "gvx_volume_clone": (_int, [_cs, _cs, _out, _out]),
    "gvx_volume_flatten": (_int, [_cs, _cs, _out]),
    "gvx_volume_check": (_int, [_cs, _out, _out]),
    "gvx_image_pull": (_int, [_cs, _cs, PROGRESS_FN, _vp, _out, _out]),
}


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
    for name, (restype, argtypes) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = restype


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


# The cancel token of the calls a thread makes inside cancel_scope().
_scope = threading.local()


@contextlib.contextmanager
def cancel_scope(token: int) -> Iterator[None]:
    """Makes the interruptible calls of this thread name ``token``, so that
    cancelling it from elsewhere (an asyncio task being cancelled) stops them
    and kills their commands."""
    outer = getattr(_scope, "token", 0)
    _scope.token = token
    try:
        yield
    finally:
        _scope.token = outer


def new_cancel_token() -> int:
    token = ctypes.c_uint64()
    call(lib().gvx_cancel_new, ctypes.byref(token))
    return token.value


def cancel(token: int) -> None:
    """Ends the calls naming token and kills their commands."""
    call(lib().gvx_cancel, ctypes.c_uint64(token))


def free_cancel_token(token: int) -> None:
    """Forgets token, ending any call that still names it."""
    call(lib().gvx_cancel_free, ctypes.c_uint64(token))


# Runs main-thread calls so that the main thread waits where a signal can
# interrupt it. Its threads are reused, which costs about a tenth of a
# millisecond less per call than a new thread here; a call made while
# another waits (from a signal handler) gets a thread of its own.
_helpers: Optional[ThreadPoolExecutor] = None


def call_interruptibly(run: Callable[[int], None]) -> None:
    """Runs ``run(cancel_token)`` so that Ctrl-C stops it.

    A signal reaches Python only between bytecodes of the main thread, and a
    thread inside a ctypes call runs none: a 10-minute command would keep
    Ctrl-C waiting for 10 minutes. So in the main thread the call runs in a
    helper thread while the main thread waits, which a signal does interrupt;
    on ``KeyboardInterrupt`` the call is cancelled through the token its
    request names (libgvx kills the command) and the interrupt propagates.
    Other threads get no signals, so there ``run`` is called directly, with
    the token of the thread's :func:`cancel_scope` or 0 (none).
    """
    global _helpers
    if threading.current_thread() is not threading.main_thread():
        run(getattr(_scope, "token", 0))
        return
    if _helpers is None:
        _helpers = ThreadPoolExecutor(max_workers=64, thread_name_prefix="gvx-call")
    token = new_cancel_token()
    try:
        try:
            done = _helpers.submit(run, token)
        except RuntimeError:  # the interpreter is exiting: no new threads
            run(token)
            return
        try:
            done.result()
        except KeyboardInterrupt:
            cancel(token)
            wait([done])  # the call returns at once once cancelled
            raise
    finally:
        free_cancel_token(token)


def buffer(data: Optional[bytes]) -> tuple[Optional["ctypes._Pointer[ctypes.c_uint8]"], int]:
    """A read-only view of data for a const uint8_t * argument."""
    if data is None:
        return None, 0
    if not data:
        return ctypes.cast(ctypes.c_char_p(b""), c_uint8_p), 0
    return ctypes.cast(ctypes.c_char_p(data), c_uint8_p), len(data)

"""gvx.Process: a command that runs while the caller writes to its stdin and
reads its output (gvx_process_* in gvx.h)."""

from __future__ import annotations

import ctypes
import json
import signal as _signal
import threading
import weakref
from typing import Literal, Optional, Union

from . import _ffi, _options, errors
from ._results import ExecResult

Stream = Literal["stdout", "stderr"]
_STREAMS = {"stdout": _ffi.GVX_STDOUT, "stderr": _ffi.GVX_STDERR}


def _milliseconds(name: str, timeout: Optional[float]) -> int:
    """A timeout as gvx.h takes it: milliseconds, -1 for none."""
    if timeout is None:
        return -1
    return min(int(_options._seconds(name, timeout) * 1000), 2**31 - 1)


def _close_process(handle: int) -> None:
    try:
        _ffi.call(_ffi.lib().gvx_process_close, ctypes.c_uint64(handle))
    except errors.SandboxClosedError:
        pass


class Process:
    """A command started with :meth:`gvx.Sandbox.spawn` that runs while you write
    to its stdin and read its output as it comes: a shell that keeps its working
    directory and variables between commands, a REPL, a server::

        with sb.spawn(["/bin/bash"], stderr_to_stdout=True) as shell:
            shell.write("cd /repo && export X=1\\n")
            shell.write("echo $X $(pwd)\\n")
            print(shell.read(timeout=5))   # b"1 /repo\\n"

    Output waits for its reader: a stream nobody reads holds up the command once
    1 MiB of it is waiting, as a full pipe would. :meth:`close` (or leaving the
    ``with`` block, or the garbage collector) kills the command if it still runs.
    """

    def __init__(self, handle: int, argv: list[str]) -> None:
        self._handle = handle
        self.argv = argv
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_process, handle)

    def _h(self) -> ctypes.c_uint64:
        if self._closed:
            raise errors.SandboxClosedError("the process is closed; start the command again with Sandbox.spawn")
        return ctypes.c_uint64(self._handle)

    def write(self, data: Union[bytes, str]) -> None:
        """Sends data to the command's stdin, in order (a str as UTF-8).

        Raises :class:`gvx.SandboxUnavailableError` if the command has ended."""
        if isinstance(data, str):
            data = data.encode()
        elif not isinstance(data, (bytes, bytearray, memoryview)):
            raise errors.InvalidArgumentError(f"write: expected bytes or str, got {type(data).__name__}")
        raw = bytes(data)
        ptr, length = _ffi.buffer(raw)
        _ffi.call(_ffi.lib().gvx_process_write, self._h(), ptr, length)

    def close_stdin(self) -> None:
        """Gives the command end of file on its stdin."""
        _ffi.call(_ffi.lib().gvx_process_close_stdin, self._h())

    def read(self, stream: Stream = "stdout", *, max_bytes: int = 65536, timeout: Optional[float] = None) -> bytes:
        """Returns the output that has come on ``stream``, up to ``max_bytes``,
        waiting for some if none has: ``b""`` once the stream has ended.

        With ``timeout`` (seconds), raises :class:`gvx.TimeoutError` if nothing
        came by then; the command runs on. Ctrl-C interrupts the wait.
        """
        if stream not in _STREAMS:
            raise errors.InvalidArgumentError(f"read: stream={stream!r}; give 'stdout' or 'stderr'")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise errors.InvalidArgumentError(f"read: max_bytes={max_bytes!r}; give a positive number of bytes")
        ms = _milliseconds("timeout", timeout)
        buf = (ctypes.c_uint8 * max_bytes)()
        got = ctypes.c_size_t()
        handle = self._h()

        def run(cancel: int) -> None:
            _ffi.call(_ffi.lib().gvx_process_read, handle, _STREAMS[stream], buf, max_bytes, ms, cancel, ctypes.byref(got))

        _ffi.call_interruptibly(run)
        return bytes(buf[: got.value])

    def signal(self, sig: int, *, descendants: bool = False) -> None:
        """Sends ``sig`` to the command and every process it started or, with
        ``descendants=True``, only to the processes it started: what a
        terminal's Ctrl-C does to the job a shell runs, which the shell
        survives. Raises :class:`gvx.SandboxUnavailableError` if the command
        has ended."""
        flags = _ffi.GVX_SIGNAL_DESCENDANTS if descendants else 0
        _ffi.call(_ffi.lib().gvx_process_signal, self._h(), int(sig), ctypes.c_uint32(flags))

    def interrupt(self) -> None:
        """A terminal's Ctrl-C: SIGINT to what the command started, not to the
        command itself. A shell reading commands from its stdin goes on to
        the next one, its state kept; the job exits with status 130."""
        self.signal(_signal.SIGINT, descendants=True)

    def kill(self) -> None:
        """SIGKILL to the command and every process it started."""
        self.signal(_signal.SIGKILL)

    def wait(self, timeout: Optional[float] = None) -> ExecResult:
        """Waits for the command to end and returns how (its output is what
        :meth:`read` returned, so the result carries none).

        With ``timeout`` (seconds), raises :class:`gvx.TimeoutError` if it has
        not ended by then; the command runs on. Ctrl-C interrupts the wait.
        """
        ms = _milliseconds("timeout", timeout)
        handle = self._h()
        out = ctypes.c_void_p()

        def run(cancel: int) -> None:
            _ffi.call(_ffi.lib().gvx_process_wait, handle, ms, cancel, ctypes.byref(out))

        _ffi.call_interruptibly(run)
        r = json.loads(_ffi.take_string(out))
        return ExecResult(
            exit_code=r["exit_code"], stdout_bytes=b"", stderr_bytes=b"", duration=r["duration"],
            timed_out=r.get("timed_out", False), signal=r.get("signal", 0),
        )

    def close(self) -> None:
        """Kills the command if it still runs and releases the process; output
        not read is dropped. Calling it again does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._finalizer.detach()
        _close_process(self._handle)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<gvx.Process {self.argv!r:.60} {state}>"

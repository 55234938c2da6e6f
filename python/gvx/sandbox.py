"""Sandboxes: one unprivileged rungv process each, driven through libgvx."""

from __future__ import annotations

import ctypes
import html
import json
import os
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, NoReturn, Optional, Sequence, Union

from . import _ffi, _options, errors
from ._paths import default_image, rungv_path
from ._process import Process
from ._results import ExecResult, FileInfo, PublishedPort, SandboxInfo, SandboxStats
from ._types import Command, Mount, Owner, PathLike, Volumes, VolumeTarget

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "Command",
    "ExecResult",
    "FileInfo",
    "Mount",
    "Owner",
    "PathLike",
    "PublishedPort",
    "Sandbox",
    "SandboxInfo",
    "SandboxStats",
    "VolumeTarget",
    "Volumes",
    "default_image",
    "rungv_path",
]


def _owner_arg(owner: Optional[Owner], what: str) -> Optional[bytes]:
    """``owner`` as libgvx takes it: the user string the sandbox resolves, or None for root."""
    if owner is None:
        return None
    if isinstance(owner, int) and not isinstance(owner, bool) and 0 <= owner < 1 << 32:
        return str(owner).encode()
    if isinstance(owner, str) and owner:
        return owner.encode()
    raise errors.InvalidArgumentError(f"{what}: owner={owner!r}: give a uid (int), or 'uid:gid', 'name' or 'name:group' as exec's user=")


def _close_handle(handle: int) -> None:
    """Closes a sandbox handle.

    Raises :class:`errors.SandboxUnavailableError` if the sandbox did not stop
    cleanly. A handle already closed, or one inherited by a forked process (whose
    close is a no-op), raises nothing.
    """
    try:
        _ffi.call(_ffi.lib().gvx_sandbox_close, ctypes.c_uint64(handle))
    except errors.SandboxUnavailableError:
        raise
    except errors.GvxError:
        pass


def _finalize_handle(handle: int) -> None:
    """The garbage collector's close: nobody is there to be told that it failed."""
    try:
        _close_handle(handle)
    except errors.GvxError:
        pass


class Sandbox:
    """An isolated, Docker-capable sandbox: one rungv process running gVisor's Sentry.

    ``image=None`` uses the embedded default image (busybox). The sandbox runs an
    idle init; drive it with :meth:`exec`, :meth:`read_file` and :meth:`write_file`,
    and :meth:`close` it (or use ``with``). It dies with the Python process.

    ``spin`` lets systrap's threads spin while the guest and the Sentry wait for
    each other: a lone busy sandbox's system calls run 2–5× faster, but with more
    busy sandboxes than CPUs the spinners take the CPU the others need. ``None``
    (the default) spins unless the host's CPUs are oversubscribed as the
    sandbox starts, and while no more than twice as many sandboxes as the host has usable CPUs
    spin, counted across every process on the host that starts them;
    ``info.spinning`` says what a sandbox does.

    ``pids_limit`` caps the tasks (threads included) in the sandbox; past it the
    guest's ``fork`` fails with ``EAGAIN``. ``None`` (the default) is 2048, enough
    for Docker and a compose project inside while a fork bomb stays bounded (each
    guest process is a process on the host); ``0`` or ``-1`` means no limit, as
    with ``docker run --pids-limit``.

    ``volumes`` attaches volumes, ext4 image files on the host, as docker's
    ``volumes`` does: ``{"data.ext4": "/data"}`` (or docker-py's
    ``{"data.ext4": {"bind": "/data", "mode": "ro"}}``), or
    ``["data.ext4:/data", "golden.ext4:/var/lib/docker:ro"]``; a missing file
    is made (16G, sparse). It is shorthand for ``mounts=[gvx.Mount(...)]``,
    and both may be given. A host directory is refused: the sandbox never
    sees one; copy it in with :meth:`upload`.

    ``restore`` continues a snapshot written by :meth:`checkpoint` instead of
    starting afresh: give the same image, network options and mounts (clones of
    the saved volumes) as the sandbox had. Only the gvx build that wrote a
    snapshot restores it; another raises :class:`gvx.SandboxStartError` saying
    so, and the snapshot is taken again after an upgrade.

    >>> with gvx.Sandbox() as sb:
    ...     print(sb.exec("echo hello").stdout)
    hello
    """

    def __init__(
        self,
        image: Optional[str] = None,
        *,
        env: Union[Mapping[str, str], Sequence[str], None] = None,
        workdir: Optional[str] = None,
        user: Optional[str] = None,
        hostname: Optional[str] = None,
        memory: Union[int, str, None] = None,
        cpus: Optional[float] = None,
        cpuset: Optional[Sequence[int]] = None,
        pids_limit: Optional[int] = None,
        network: str = "none",
        ports: Sequence[str] = (),
        allow_net: Sequence[str] = (),
        host_loopback: bool = False,
        net_raw: bool = False,
        nftables: bool = False,
        mounts: Sequence[Mount] = (),
        volumes: Optional[Volumes] = None,
        timeout: Optional[float] = None,
        platform: str = "auto",
        spin: Optional[bool] = None,
        cache: Optional[PathLike] = None,
        rungv: Optional[PathLike] = None,
        insecure: bool = False,
        restore: Optional[PathLike] = None,
    ) -> None:
        config = _options.sandbox_config(
            image, env=env, workdir=workdir, user=user, hostname=hostname, memory=memory, cpus=cpus, cpuset=cpuset,
            pids_limit=pids_limit, network=network, ports=ports, allow_net=allow_net, host_loopback=host_loopback,
            net_raw=net_raw, nftables=nftables, mounts=mounts, volumes=volumes, timeout=timeout, platform=platform,
            spin=spin, cache=cache, rungv=rungv, insecure=insecure, restore=restore,
        )
        config.setdefault("image", default_image())
        config.setdefault("rungv", str(rungv_path()))
        handle = ctypes.c_uint64()
        _ffi.call(_ffi.lib().gvx_sandbox_new, json.dumps(config).encode(), ctypes.byref(handle))
        self._handle = handle.value
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, _finalize_handle, self._handle)
        self._info: Optional[SandboxInfo] = None
        # The processes spawn started, closed with the sandbox: their
        # commands end with it, and their handles would outlive it.
        self._processes: "weakref.WeakSet[Process]" = weakref.WeakSet()

    # Lifecycle.

    def close(self) -> None:
        """Stops the sandbox and waits for its process. Calling it again does nothing.

        Raises :class:`gvx.SandboxUnavailableError` if the sandbox did not stop
        cleanly; the message says how: its rungv had to be killed, had ended before
        it reported the sandbox's end (killed from outside, or crashed), or could
        not write back the sandbox's volumes. The sandbox is gone and closed all
        the same, so this is raised once and a second ``close()`` does nothing.
        Mounted volumes then keep their last committed state, which may lack what
        was written since a guest's last fsync: check them with ``rungv volume
        check`` before reusing them. Leaving a ``with`` block that is already
        raising does not replace the block's exception with this one, and a
        sandbox closed by the garbage collector raises nothing.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._close_processes()
        self._finalizer.detach()
        _close_handle(self._handle)

    def _close_processes(self) -> None:
        for p in list(self._processes):
            p.close()

    def reset(self) -> None:
        """Replaces this sandbox with a fresh one from the same configuration.

        Every process and every write to the root filesystem are gone; mounted
        volumes keep their content (use :class:`gvx.GvxEnv` with a golden volume
        for fresh volume state per episode). Once the fresh sandbox is in place
        the reset succeeds, even if the old one did not stop cleanly (which
        :meth:`close` would raise).
        """
        _ffi.call(_ffi.lib().gvx_sandbox_reset, self._h())
        self._info = None
        self._close_processes()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Sandbox":
        return self

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a gvx.Sandbox cannot be pickled or sent to another process: it is a handle on a rungv child "
            "of this process and its control connection. Create sandboxes in the process that uses them "
            "(pass the image and options to the worker instead)."
        )

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        except errors.SandboxUnavailableError:
            # The block's own exception comes first: the sandbox's failure
            # to stop often has the same cause.
            if exc[0] is None:
                raise

    def _h(self) -> ctypes.c_uint64:
        if self._closed:
            raise errors.SandboxClosedError("the sandbox is closed; create a new gvx.Sandbox")
        return ctypes.c_uint64(self._handle)

    # Introspection.

    @property
    def info(self) -> SandboxInfo:
        if self._info is None:
            out = ctypes.c_void_p()
            _ffi.call(_ffi.lib().gvx_sandbox_info, self._h(), ctypes.byref(out))
            raw = json.loads(_ffi.take_string(out))
            raw["ports"] = tuple(PublishedPort(**p) for p in raw.get("ports") or ())
            self._info = SandboxInfo(**raw)
        return self._info

    def port(self, guest_port: int, protocol: str = "tcp") -> PublishedPort:
        """Where the host reaches ``guest_port``, like ``docker port``: published with
        ``ports=["8080"]``, the host picked the port, and this says which.

        >>> with gvx.Sandbox(ports=["8080"]) as sb:
        ...     url = f"http://{sb.port(8080).address}/"
        """
        for p in self.info.ports:
            if p.guest_port == guest_port and p.protocol == protocol:
                return p
        published = ", ".join(f"{p.guest_port}/{p.protocol}" for p in self.info.ports) or "none"
        raise errors.NotFoundError(
            f"guest port {guest_port}/{protocol} is not published (published: {published}); "
            f"pass ports=[\"{guest_port}\"] to gvx.Sandbox"
        )

    def stats(self) -> SandboxStats:
        """Current resource use of the whole sandbox."""
        out = ctypes.c_void_p()
        _ffi.call(_ffi.lib().gvx_sandbox_stats, self._h(), ctypes.byref(out))
        return SandboxStats(**json.loads(_ffi.take_string(out)))

    @property
    def pid(self) -> int:
        """The host PID of the sandbox's rungv process."""
        return self.info.pid

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"pid={self.info.pid}"
        return f"<gvx.Sandbox {state}>"

    def _repr_html_(self) -> str:
        if self._closed:
            return "<b>gvx.Sandbox</b> (closed)"
        i = self.info
        return f"<b>gvx.Sandbox</b> {html.escape(i.id)} — rungv pid {i.pid}, image {html.escape(i.image[:19])}…, {html.escape(i.platform)}"

    # Commands.

    @_options.takes_exec_options
    def exec(
        self,
        cmd: Command,
        *,
        stdin: Union[bytes, str, None] = None,
        check: bool = False,
        on_output: Optional[Callable[[str, bytes], None]] = None,
        **options: Unpack[_options.ExecOptions],
    ) -> ExecResult:
        """Runs a command and waits for it.

        ``cmd`` is a shell string (run with ``/bin/sh -c``) or an argv list. ``timeout``
        kills the command and every process it started, not the sandbox (the result
        has ``timed_out``); if the
        sandbox itself does not answer within 5 s more, :class:`gvx.TimeoutError` is
        raised instead, so a step never blocks much longer than its timeout. ``env``
        adds variables. A command that does not exist exits with 127 and one that is
        not executable with 126, with why on stderr, as with ``docker exec``. ``check=True``
        raises :class:`gvx.ExecError` on a non-zero exit. ``on_output(stream, data)``
        receives output as it arrives (``stream`` is ``"stdout"`` or ``"stderr"``);
        the result then carries no output. ``max_output`` bounds the bytes kept of
        stdout and of stderr: beyond it the middle is left out (``truncated``).
        """
        checked = _options.exec_request(cmd, stdin, on_output, options)
        request, on_output = checked.request, checked.on_output
        stdin_ptr, stdin_len = _ffi.buffer(checked.stdin)
        lib = _ffi.lib()
        handle = self._h()
        result = ctypes.c_void_p()
        captured: list[bytes] = [b"", b""]

        def run(cancel: int) -> None:
            if cancel:
                request["cancel"] = cancel
            if on_output is None:
                out, err_buf = ctypes.c_void_p(), ctypes.c_void_p()
                out_len, err_len = ctypes.c_size_t(), ctypes.c_size_t()
                _ffi.call(
                    lib.gvx_sandbox_exec, handle, json.dumps(request).encode(), stdin_ptr, stdin_len,
                    ctypes.byref(result), ctypes.byref(out), ctypes.byref(out_len), ctypes.byref(err_buf), ctypes.byref(err_len),
                )
                captured[:] = [_ffi.take_bytes(out, out_len.value), _ffi.take_bytes(err_buf, err_len.value)]
            else:
                names = {_ffi.GVX_STDOUT: "stdout", _ffi.GVX_STDERR: "stderr"}
                deliver_to = on_output

                def deliver(_: Optional[int], stream: int, data_ptr: "ctypes._Pointer[ctypes.c_uint8]", length: int) -> None:
                    deliver_to(names.get(stream, "stdout"), ctypes.string_at(data_ptr, length))

                callback = _ffi.OUTPUT_FN(deliver)
                _ffi.call(
                    lib.gvx_sandbox_exec_stream, handle, json.dumps(request).encode(), stdin_ptr, stdin_len,
                    callback, None, ctypes.byref(result),
                )

        _ffi.call_interruptibly(run)
        stdout, stderr = captured
        r = json.loads(_ffi.take_string(result))
        res = ExecResult(
            exit_code=r["exit_code"], stdout_bytes=stdout, stderr_bytes=stderr, duration=r["duration"],
            timed_out=r.get("timed_out", False), signal=r.get("signal", 0), truncated=r.get("truncated", False),
        )
        if check and not res.ok:
            raise errors.ExecError(res, cmd)
        return res

    @_options.takes_command_options
    def spawn(self, cmd: Command, **options: Unpack[_options.CommandOptions]) -> Process:
        """Starts a command and returns while it runs, for you to write to its
        stdin and read its output as it comes (:class:`gvx.Process`): a shell
        that keeps its working directory and variables between commands, a
        REPL, a server. ``cmd`` and the options are :meth:`exec`'s; ``timeout``
        kills the command. Close the process (or use ``with``) when done; closing
        or resetting the sandbox closes it too::

            with sb.spawn("bash", stderr_to_stdout=True) as shell:
                shell.write("cd /repo; python -m pytest -x; echo rc=$?\n")
                print(shell.read(timeout=60))
        """
        request = _options.command_request(cmd, options)
        handle = ctypes.c_uint64()
        _ffi.call(_ffi.lib().gvx_process_start, self._h(), json.dumps(request).encode(), ctypes.byref(handle))
        argv = request["argv"]
        assert isinstance(argv, list)
        p = Process(handle.value, argv)
        self._processes.add(p)
        return p

    # Files.

    def stat(self, path: str) -> FileInfo:
        """Describes a file in the sandbox, following symlinks.

        One round trip and no process, so a reward function can check an
        agent's output cheaply (``sb.stat("/workspace/out.txt").size``).
        Raises :class:`gvx.NotFoundError` for a missing file.
        """
        out = ctypes.c_void_p()
        _ffi.call(_ffi.lib().gvx_sandbox_stat, self._h(), path.encode(), ctypes.byref(out))
        return FileInfo(**json.loads(_ffi.take_string(out)))

    def exists(self, path: str) -> bool:
        """Whether a file (of any type) is at path in the sandbox, following symlinks."""
        try:
            self.stat(path)
        except errors.NotFoundError:
            return False
        return True

    def read_file(self, path: str) -> bytes:
        """Returns the content of a file in the sandbox."""
        data, length = ctypes.c_void_p(), ctypes.c_size_t()
        _ffi.call(_ffi.lib().gvx_sandbox_read_file, self._h(), path.encode(), ctypes.byref(data), ctypes.byref(length))
        return _ffi.take_bytes(data, length.value)

    def write_file(
        self, path: str, data: Union[bytes, str], mode: int = 0o644, *, make_parents: bool = False, owner: Optional[Owner] = None
    ) -> None:
        """Creates or replaces a file in the sandbox, whole or not at all.

        The content goes to a hidden file beside ``path``, renamed over it once
        all of it arrived: if the write fails (:class:`gvx.NoSpaceError`, say),
        ``path`` keeps what it held, or stays absent (so replacing a file needs
        room for both until the new one is complete). An existing file is
        replaced by a new one with ``mode``: its mode, owner and other hard
        links do not carry over. A symlink at ``path`` is followed.

        ``make_parents=True`` makes missing directories on the way (0755), as
        ``mkdir -p`` would; without it a missing directory raises
        :class:`gvx.NotFoundError`.

        The file, and the directories ``make_parents`` makes, belong to root
        unless ``owner`` names another user: a uid (``1000``), or a string as
        :meth:`exec`'s ``user`` takes, resolved in the sandbox the same way
        (``"1000:1000"``, ``"agent"``, ``"agent:staff"``; a user without a
        group gets its ``/etc/passwd`` group, or 0 for a uid the image does not
        list). A name the image does not have raises
        :class:`gvx.InvalidArgumentError`::

            sb.write_file("/home/agent/task.md", task, owner="agent")
            sb.exec("cat task.md >> notes.md", user="agent", cwd="/home/agent")
        """
        if not 0 <= mode <= 0o7777:
            raise errors.InvalidArgumentError(f"write_file: mode {mode:#o} is not a permission mode (0 to 0o7777)")
        who = _owner_arg(owner, "write_file")
        raw = data.encode() if isinstance(data, str) else bytes(data)
        ptr, length = _ffi.buffer(raw)
        flags = _ffi.GVX_WRITE_MAKE_PARENTS if make_parents else 0
        _ffi.call(_ffi.lib().gvx_sandbox_write_file_as, self._h(), path.encode(), ptr, length, ctypes.c_uint32(mode | flags), who)

    def upload(self, local: PathLike, remote: str, mode: Optional[int] = None, *, owner: Optional[Owner] = None) -> None:
        """Copies a host file or directory into the sandbox.

        A file lands at ``remote``, keeping its permission bits unless ``mode``
        is given, whole or not at all as with :meth:`write_file`. A directory's
        *contents* land in the directory ``remote`` (created with its parents
        if missing), like ``rsync -a local/ remote/`` without deletions: files
        belong to root and keep their permission bits and modification times,
        symlinks stay symlinks with their times, hard links stay links, and a
        file's holes stay holes (they are not sent). The sandbox unpacks the tree itself, so the
        image needs no ``tar``::

            sb.upload("checkouts/django", "/workspace/django")
            sb.exec("cd /workspace/django && python -m pytest -x", check=True)

        ``owner`` gives what is copied to another user than root, as with
        :meth:`write_file`: the file, or every file, directory and symlink of
        the tree and every directory made on the way (``remote``'s existing
        parents keep theirs)::

            sb.upload("tasks/17/repo", "/home/agent/repo", owner="agent")

        Everything is streamed by libgvx, never read into Python:
        multi-gigabyte ``docker save`` archives and large trees cost no memory
        here.
        """
        p = Path(local)
        if p.is_dir():
            if mode is not None:
                raise errors.InvalidArgumentError(f"upload: mode= applies to a file and {str(p)!r} is a directory; its files keep their own modes")
        elif not p.is_file():
            raise errors.InvalidArgumentError(f"upload: {str(p)!r} is not a regular file or a directory on the host")
        if mode is not None and not 0 <= mode <= 0o7777:
            raise errors.InvalidArgumentError(f"upload: mode {mode:#o} is not a permission mode (0 to 0o7777)")
        who = _owner_arg(owner, "upload")
        _ffi.call(
            _ffi.lib().gvx_sandbox_upload_as,
            self._h(),
            os.fsencode(p),
            remote.encode(),
            ctypes.c_int32(-1 if mode is None else mode),
            who,
        )

    def download(self, remote: str, local: PathLike) -> None:
        """Copies a file or directory out of the sandbox, streaming it.

        A file replaces ``local`` whole (it never appears half-written). A
        directory's contents land in the directory ``local`` (created if
        missing)::

            sb.download("/workspace/django", "results/episode-17")

        The sandbox's contents are not trusted: nothing is written outside
        ``local`` whatever its names and symlinks say (a hard link reaches only
        a file of the same download), files belong to you, set-user-ID and
        set-group-ID bits are dropped, and devices and FIFOs are left out.
        Hard links, holes, and the times of files, directories and symlinks
        are kept.
        """
        _ffi.call(_ffi.lib().gvx_sandbox_download, self._h(), remote.encode(), os.fsencode(Path(local)))

    # Snapshots.

    def checkpoint(self, path: PathLike, *, stop: bool = False) -> None:
        """Writes a snapshot of the sandbox to the file ``path``: its kernel, every
        process with its memory, and its root's writable layer. ``Sandbox(image,
        restore=path)`` continues it in a new sandbox without starting its programs
        again — a ready dockerd answers in a few hundred milliseconds::

            sb.exec("setup-the-task.sh")
            sb.checkpoint("task.snap")
            for episode in range(n):
                with gvx.Sandbox(image, restore="task.snap") as ep:
                    ...

        No :meth:`exec` may be running. With ``stop=True`` the sandbox ends once the
        snapshot is written. A sandbox with ``network="nat"`` must stop, and so must
        one with volumes, each volume's image then being the snapshot's other half:
        restore on a clone of it (:meth:`gvx.Volume.clone`). Connections in progress
        through published ports and the NAT are closed.
        """
        _ffi.call(_ffi.lib().gvx_sandbox_checkpoint, self._h(), os.fsencode(Path(path)), ctypes.c_uint32(_ffi.GVX_CHECKPOINT_STOP if stop else 0))

    # Signals.

    def signal(self, sig: int) -> None:
        """Sends a signal to the sandbox's init process."""
        _ffi.call(_ffi.lib().gvx_sandbox_signal, self._h(), int(sig))

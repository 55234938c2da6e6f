"""gvx sandboxes as a SWE-ReX deployment and runtime (what SWE-agent drives).

SWE-ReX (``pip install 'gvx[swerex]'``) separates where commands run (a
deployment: Docker, Modal, Fargate, ...) from how (a runtime: sessions,
commands, files). :class:`GvxDeployment` starts one gvx sandbox and its
:class:`GvxRuntime` implements SWE-ReX's ``AbstractRuntime`` directly over
gvx, with no server inside the sandbox and no port::

    from gvx.integrations.swerex import GvxDeployment
    from swerex.runtime.abstract import BashAction, CreateBashSessionRequest

    deployment = GvxDeployment(image="oci:./swe-task:latest", memory="2g")
    await deployment.start()
    await deployment.runtime.create_session(CreateBashSessionRequest())
    obs = await deployment.runtime.run_in_session(BashAction(command="cd /testbed && git status"))
    await deployment.stop()

``GvxDeploymentConfig(...).get_deployment()`` makes one from a config, as
SWE-ReX's other deployment configs do.

A session is a shell (``bash`` by default) that reads its commands from a
pipe, so ``cd``, exported variables and functions persist between commands as
in SWE-ReX's own sessions; each command's output (stderr merged) and exit
code come back in a ``BashObservation``; a syntax error raises
``BashIncorrectSyntaxError`` before anything runs; a command past its
``timeout`` raises ``CommandTimeoutError`` and runs on until a
``BashInterruptAction``, which sends Ctrl-C to the command (not to the shell),
then SIGKILL, keeping the session's state.

What differs from SWE-ReX's Docker deployment: no Docker daemon and no
``swerex-remote`` server in the image (the image needs only a shell); the
network is ``"none"`` unless ``network="nat"``; a session's shell has no
terminal, so programs see a pipe (no colours or pagers; ``less`` prints and
exits) and ``is_interactive_command`` suits programs that prompt without one
(``python3 -i``, whose prompt goes to stderr, merged), matched by its
``expect`` strings; a command that keeps the shell itself busy (a ``while``
loop of builtins) cannot be interrupted by Ctrl-C, and then the session is
restarted and the observation's ``failure_reason`` says so.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import posixpath
import threading
import re
import shlex
import signal
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any, Literal, Optional, Union

try:
    from pydantic import BaseModel, ConfigDict
    from swerex.deployment.abstract import AbstractDeployment
    from swerex.deployment.hooks.abstract import CombinedDeploymentHook, DeploymentHook
    from swerex.exceptions import (
        BashIncorrectSyntaxError,
        CommandTimeoutError,
        DeploymentNotStartedError,
        NoExitCodeError,
        NonZeroExitCodeError,
        SessionDoesNotExistError,
        SessionExistsError,
    )
    from swerex.runtime.abstract import (
        AbstractRuntime,
        BashAction,
        BashInterruptAction,
        BashObservation,
        CloseBashSessionResponse,
        CloseResponse,
        Command,
        CommandResponse,
        CreateBashSessionRequest,
        CreateBashSessionResponse,
        IsAliveResponse,
        ReadFileRequest,
        ReadFileResponse,
        UploadRequest,
        UploadResponse,
        WriteFileRequest,
        WriteFileResponse,
    )
    from typing_extensions import Self
except ImportError as _e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        f"gvx.integrations.swerex needs SWE-ReX, which is not installed ({_e}): pip install 'gvx[swerex]'"
    ) from _e

from .. import _episodes, aio, errors
from ..sandbox import Mount

__all__ = ["GvxDeployment", "GvxDeploymentConfig", "GvxRuntime", "close_warm_sandboxes"]


def _quote(text: str) -> str:
    """text as one single-quoted shell word."""
    return "'" + text.replace("'", "'\\''") + "'"


class _Session:
    """One shell reading its commands from a pipe. Each command goes in as a
    quoted word that the shell first parses (``-n``) and then evals, followed
    by a line that prints a marker with the exit code; the output is what
    came before the marker."""

    def __init__(self, sandbox: aio.Sandbox, shell: list[str]) -> None:
        self._sandbox = sandbox
        self._shell = shell
        self._process: Optional[aio.Process] = None
        self._marker = f"__GVX_{uuid.uuid4().hex}__"
        self._done = re.compile(re.escape(self._marker.encode()) + rb"(SYNTAX|[0-9]+)\n")
        self._buffer = b""
        # A command that outlived its timeout and still runs: its marker
        # is yet to come.
        self._running = False
        # An interactive program reads the session's lines: the shell
        # prints no marker until it ends and reads one more line.
        self._in_program = False
        self._startup_source: list[str] = []

    async def start(self, request: CreateBashSessionRequest) -> CreateBashSessionResponse:
        self._startup_source = list(request.startup_source)
        self._process = await self._sandbox.spawn(self._shell, stderr_to_stdout=True, env={"PS1": "", "PS2": "", "PS0": ""})
        script = "; ".join(f"source {shlex.quote(path)}" for path in request.startup_source) or "true"
        output, code = await self._run(script, request.startup_timeout)
        if code is None:
            raise errors.SandboxStartError(
                f"the session's shell {self._shell!r} did not start in the sandbox: {output.strip()!r}; "
                "pass shell=['/bin/sh'] for an image without bash"
            )
        return CreateBashSessionResponse(output=output)

    def _script(self, command: str) -> str:
        word = _quote(command)
        return (
            f"if __gvx_syntax=$({shlex.quote(self._shell[0])} -n -c {word} 2>&1); then command eval {word}; "
            f"printf '\\n{self._marker}%s\\n' \"$?\"; "
            f"else printf '%s\\n{self._marker}SYNTAX\\n' \"$__gvx_syntax\"; fi\n"
        )

    async def _run(self, command: str, timeout: Optional[float]) -> tuple[str, Optional[int]]:
        """Runs command; returns its output and exit code (None: the shell
        ended). Raises CommandTimeoutError past timeout, BashIncorrectSyntaxError."""
        assert self._process is not None
        if self._running or self._in_program:
            raise CommandTimeoutError("the previous command is still running: send a BashInterruptAction first")
        try:
            await self._process.write(self._script(command))
        except errors.SandboxUnavailableError:
            return self._take_all(), None
        self._running = True
        found = await self._read_marker(timeout)
        if found is None:
            raise CommandTimeoutError(f"timeout after {timeout} seconds while running command {command!r}")
        output, status = found
        self._running = False
        if status == "SYNTAX":
            msg = f"Error while checking bash command \n{command!r}\n---- Stderr ----\n{output}\n---- Stdout ----\n"
            raise BashIncorrectSyntaxError(msg, extra_info={"bash_stdout": "", "bash_stderr": output})
        if status == "":
            return output, None
        return output, int(status)

    async def _read_marker(self, timeout: Optional[float]) -> Optional[tuple[str, str]]:
        """Reads until the marker: (output, status), status "" if the shell
        ended; None past timeout."""
        assert self._process is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            m = self._done.search(self._buffer)
            if m is not None:
                output = self._buffer[: m.start()].decode("utf-8", errors="backslashreplace")
                status = m.group(1).decode()
                self._buffer = self._buffer[m.end() :]
                # The marker's own line starts with a newline of ours.
                return (output if status == "SYNTAX" else output.removesuffix("\n")), status
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            try:
                chunk = await self._process.read(timeout=left)
            except errors.TimeoutError:
                return None
            if not chunk:
                return self._take_all(), ""
            self._buffer += chunk

    def _take_all(self) -> str:
        text = self._buffer.decode("utf-8", errors="backslashreplace")
        self._buffer = b""
        return text

    async def run(self, action: Union[BashAction, BashInterruptAction]) -> BashObservation:
        if isinstance(action, BashInterruptAction):
            return await self._interrupt(action)
        if action.is_interactive_command or action.is_interactive_quit:
            return await self._run_interactive(action)
        output, code = await self._run(action.command, action.timeout)
        if action.check == "ignore":
            return BashObservation(output=output, exit_code=None, expect_string=self._marker)
        if code is None:
            if action.check == "raise":
                raise NoExitCodeError(f"the session's shell ended during {action.command!r}; output: {output!r}")
            return BashObservation(output=output, exit_code=None, failure_reason="the session's shell ended")
        if action.check == "raise" and code != 0:
            msg = f"Command {action.command!r} failed with exit code {code}. Here is the output:\n{output!r}"
            if action.error_msg:
                msg = f"{action.error_msg}: {msg}"
            raise NonZeroExitCodeError(msg)
        return BashObservation(output=output, exit_code=code, expect_string=self._marker)

    async def _run_interactive(self, action: BashAction) -> BashObservation:
        """A line for a program the session runs (gdb, python3 -i), read
        until one of action.expect; after is_interactive_quit, until the
        shell is back."""
        assert self._process is not None
        await self._process.write(action.command.rstrip("\n") + "\n")
        self._in_program = True
        if action.is_interactive_quit:
            await self._end_program()
            found = await self._read_marker(action.timeout)
            if found is None:
                self._running = True
                raise CommandTimeoutError(f"timeout after {action.timeout} seconds while running command {action.command!r}")
            return BashObservation(output=found[0], exit_code=0, expect_string=self._marker)
        deadline = None if action.timeout is None else time.monotonic() + action.timeout
        while True:
            text = self._buffer.decode("utf-8", errors="backslashreplace")
            hits = [(text.find(e), e) for e in action.expect if e in text]
            if hits:
                at, expect = min(hits)
                self._buffer = text[at + len(expect) :].encode()
                return BashObservation(output=text[:at].strip(), exit_code=0, expect_string=expect)
            left = None if deadline is None else deadline - time.monotonic()
            try:
                if left is not None and left <= 0:
                    raise errors.TimeoutError("timeout")
                chunk = await self._process.read(timeout=left)
            except errors.TimeoutError:
                raise CommandTimeoutError(f"timeout after {action.timeout} seconds while running command {action.command!r}") from None
            if not chunk:
                raise NoExitCodeError(f"the session's shell ended during {action.command!r}")
            self._buffer += chunk

    async def _end_program(self) -> None:
        """Writes the line the shell reads once the program ends: the marker."""
        assert self._process is not None
        await self._process.write(f"printf '\\n{self._marker}%s\\n' \"$?\"\n")
        self._in_program = False

    async def _interrupt(self, action: BashInterruptAction) -> BashObservation:
        """Ctrl-C to the running command (not to the shell), up to n_retry
        times, then SIGKILL to it; a shell that is itself busy is
        restarted."""
        assert self._process is not None
        if not self._running and not self._in_program:
            return BashObservation(output=self._take_all().strip(), exit_code=0, expect_string=self._marker)
        for attempt in range(action.n_retry + 1):
            last = attempt == action.n_retry
            try:
                await self._process.signal(signal.SIGKILL if last else signal.SIGINT, descendants=True)
                if self._in_program:
                    self._running = True
                    await self._end_program()
            except errors.SandboxUnavailableError:
                break
            found = await self._read_marker(action.timeout)
            if found is not None:
                self._running = False
                return BashObservation(output=found[0].strip(), exit_code=0, expect_string=self._marker)
        output = self._take_all().strip()
        await self.close()
        await self.start(CreateBashSessionRequest(startup_source=self._startup_source))
        return BashObservation(
            output=output, exit_code=None,
            failure_reason="the command did not stop at Ctrl-C nor SIGKILL (the shell itself was busy): the session was "
            "restarted, so its working directory and variables are back to their start",
        )

    async def close(self) -> CloseBashSessionResponse:
        if self._process is not None:
            await self._process.close()
            self._process = None
        self._running = self._in_program = False
        self._buffer = b""
        return CloseBashSessionResponse()


class GvxRuntime(AbstractRuntime):
    """SWE-ReX's runtime over one gvx sandbox: sessions, commands and files
    as SWE-ReX's ``LocalRuntime`` has them, run in the sandbox. The
    sandbox stays the caller's (GvxDeployment's) to close."""

    def __init__(
        self, sandbox: aio.Sandbox, *, shell: Optional[list[str]] = None, cwd: str = "/", logger: Optional[logging.Logger] = None
    ) -> None:
        self.sandbox = sandbox
        self.shell = list(shell or ["/bin/bash"])
        # What relative paths of read_file, write_file and upload are
        # relative to, as LocalRuntime's are to its process's directory.
        self.cwd = cwd
        self.logger = logger or logging.getLogger("gvx.swerex")
        self._sessions: dict[str, _Session] = {}

    async def is_alive(self, *, timeout: Optional[float] = None) -> IsAliveResponse:
        try:
            await self.sandbox.stat("/")
        except errors.GvxError as e:
            return IsAliveResponse(is_alive=False, message=f"the sandbox does not answer: {e}")
        return IsAliveResponse(is_alive=True)

    async def create_session(self, request: CreateBashSessionRequest) -> CreateBashSessionResponse:
        if request.session in self._sessions:
            raise SessionExistsError(f"session {request.session} already exists")
        session = _Session(self.sandbox, self.shell)
        self._sessions[request.session] = session
        try:
            return await session.start(request)
        except BaseException:
            del self._sessions[request.session]
            await session.close()
            raise

    async def run_in_session(self, action: Union[BashAction, BashInterruptAction]) -> BashObservation:
        if action.session not in self._sessions:
            raise SessionDoesNotExistError(f"session {action.session!r} does not exist")
        return await self._sessions[action.session].run(action)

    async def close_session(self, request: Any) -> CloseBashSessionResponse:
        if request.session not in self._sessions:
            raise SessionDoesNotExistError(f"session {request.session!r} does not exist")
        return await self._sessions.pop(request.session).close()

    async def execute(self, command: Command) -> CommandResponse:
        """A command in a fresh process, as subprocess.run runs it: ``shell``
        runs it with ``/bin/sh -c``; ``env``, if given, is its whole
        environment."""
        if command.shell:
            argv = ["/bin/sh", "-c", *([command.command] if isinstance(command.command, str) else command.command)]
        else:
            argv = [command.command] if isinstance(command.command, str) else list(command.command)
        if command.env is not None:
            argv = ["env", "-i", *(f"{k}={v}" for k, v in command.env.items()), *argv]
        result = await self.sandbox.exec(argv, cwd=command.cwd, timeout=command.timeout, stderr_to_stdout=command.merge_output_streams)
        if result.timed_out:
            raise CommandTimeoutError(f"Timeout ({command.timeout}s) exceeded while running command")
        r = CommandResponse(
            stdout=result.stdout_bytes.decode(errors="backslashreplace"),
            stderr=result.stderr_bytes.decode(errors="backslashreplace"),
            exit_code=result.exit_code,
        )
        if command.check and result.exit_code != 0:
            msg = f"Command {command.command!r} failed with exit code {result.exit_code}. Stdout:\n{r.stdout!r}\nStderr:\n{r.stderr!r}"
            if command.error_msg:
                msg = f"{command.error_msg}: {msg}"
            raise NonZeroExitCodeError(msg)
        return r

    def _path(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.cwd, path))

    async def read_file(self, request: ReadFileRequest) -> ReadFileResponse:
        try:
            data = await self.sandbox.read_file(self._path(request.path))
        except errors.NotFoundError as e:
            raise FileNotFoundError(str(e)) from e
        return ReadFileResponse(content=data.decode(request.encoding or "utf-8", request.errors or "strict"))

    async def write_file(self, request: WriteFileRequest) -> WriteFileResponse:
        await self.sandbox.write_file(self._path(request.path), request.content, make_parents=True)
        return WriteFileResponse()

    async def upload(self, request: UploadRequest) -> UploadResponse:
        """A file to the file target_path, a directory's contents into the
        directory target_path, as LocalRuntime's shutil.copy and copytree;
        missing parents are made."""
        target = self._path(request.target_path)
        parent = posixpath.dirname(target)
        if not Path(request.source_path).is_dir() and not await self.sandbox.exists(parent):
            made = await self.sandbox.exec(["mkdir", "-p", parent])
            if not made.ok:
                raise errors.NotFoundError(f"upload: cannot make {parent!r} in the sandbox for {target!r}: {made.stderr.strip()}")
        await self.sandbox.upload(request.source_path, target)
        return UploadResponse()

    async def close(self) -> CloseResponse:
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()
        return CloseResponse()


class GvxDeploymentConfig(BaseModel):
    """How to start a gvx deployment; ``image`` as gvx takes it."""

    image: Optional[str] = None
    """A registry reference, ``oci:<layout>:<tag>``, ``docker-archive:<file>``; None: gvx's default image (busybox)."""
    shell: list[str] = ["/bin/bash"]
    """The sessions' shell; ``["/bin/sh"]`` for an image without bash."""
    memory: Union[int, str, None] = None
    cpus: Optional[float] = None
    network: Literal["none", "nat"] = "none"
    env: dict[str, str] = {}
    workdir: Optional[str] = None
    mounts: list[Mount] = []
    """Volumes (``gvx.Mount``), mounted as they are."""
    golden: str = ""
    """A golden volume (``gvx.golden.build``): each deployment gets its own O(1) clone of it, mounted at
    ``golden_path`` and deleted at ``stop``."""
    golden_path: str = "/var/lib/docker"
    restore: Optional[str] = None
    """A checkpoint to continue instead of booting the image."""
    warm: int = 0
    """Sandboxes of this config kept started ahead, shared by the process's deployments: a
    deployment's ``start`` takes one and starts another in the background."""
    type: Literal["gvx"] = "gvx"
    """Discriminator for (de)serialization, as SWE-ReX's configs have. Do not change."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    def get_deployment(self) -> "GvxDeployment":
        return GvxDeployment.from_config(self)


# Warm sandboxes, by the config they were started for (its sandbox fields),
# shared by the deployments of the process.
_warm: dict[str, deque[concurrent.futures.Future[_episodes.EpisodeSandbox]]] = {}
_warm_lock = threading.Lock()


def _boot(c: GvxDeploymentConfig) -> _episodes.EpisodeSandbox:
    return _episodes.EpisodeSandbox.start(
        c.image, c.golden, c.golden_path, c.mounts, memory=c.memory, cpus=c.cpus, network=c.network,
        env=c.env or None, workdir=c.workdir, restore=c.restore,
    )


def _take(c: GvxDeploymentConfig) -> concurrent.futures.Future[_episodes.EpisodeSandbox]:
    """A sandbox for c, from the warm ones when one is there, and the warm
    ones topped up to c.warm."""
    if c.warm <= 0:
        return aio._executor().submit(_boot, c)
    key = c.model_dump_json(exclude={"warm", "shell", "type"})
    with _warm_lock:
        ready = _warm.setdefault(key, deque())
        taken = ready.popleft() if ready else aio._executor().submit(_boot, c)
        while len(ready) < c.warm:
            ready.append(aio._executor().submit(_boot, c))
    return taken


def _close_booted(f: concurrent.futures.Future[_episodes.EpisodeSandbox]) -> None:
    """Closes the sandbox f started, once it has, if it did."""
    if not f.cancelled() and f.exception() is None:
        try:
            f.result().close()
        except errors.GvxError:
            pass


def close_warm_sandboxes() -> None:
    """Closes the sandboxes kept warm for deployments with ``warm``; run at exit."""
    with _warm_lock:
        futures = [f for ready in _warm.values() for f in ready]
        _warm.clear()
    for f in futures:
        if not f.cancel():
            f.add_done_callback(_close_booted)


atexit.register(close_warm_sandboxes)


class GvxDeployment(AbstractDeployment):
    """One gvx sandbox per deployment: ``start`` boots it, ``stop`` closes it
    and every session's shell (``async with`` does both). A deployment
    dropped without ``stop`` has its sandbox closed by the garbage
    collector."""

    def __init__(self, *, logger: Optional[logging.Logger] = None, **kwargs: Any) -> None:
        self._config = GvxDeploymentConfig(**kwargs)
        self._sandbox: Optional[aio.Sandbox] = None
        self._runtime: Optional[GvxRuntime] = None
        self._booted: Optional[_episodes.EpisodeSandbox] = None
        self.logger = logger or logging.getLogger("gvx.swerex")
        self._hooks = CombinedDeploymentHook()

    @classmethod
    def from_config(cls, config: GvxDeploymentConfig) -> Self:
        return cls(**config.model_dump())

    def add_hook(self, hook: DeploymentHook) -> None:
        self._hooks.add_hook(hook)

    async def start(self) -> None:
        if self._sandbox is not None:
            return
        c = self._config
        self._hooks.on_custom_step("Starting the gvx sandbox")
        starting = _take(c)
        try:
            self._booted = await asyncio.wrap_future(starting)
        except BaseException:
            # Cancelled (or Ctrl-C) while it boots: close it once it has.
            starting.add_done_callback(_close_booted)
            raise
        self._sandbox = aio.Sandbox(self._booted.sandbox)
        self._runtime = GvxRuntime(self._sandbox, shell=c.shell, cwd=c.workdir or "/", logger=self.logger)

    async def stop(self) -> None:
        runtime, booted = self._runtime, self._booted
        self._runtime, self._sandbox, self._booted = None, None, None
        try:
            if runtime is not None:
                await runtime.close()
        finally:
            if booted is not None:
                await aio._to_thread(booted.close)

    async def is_alive(self, *, timeout: Optional[float] = None) -> IsAliveResponse:
        if self._runtime is None:
            raise DeploymentNotStartedError()  # type: ignore[no-untyped-call]
        return await self._runtime.is_alive(timeout=timeout)

    @property
    def runtime(self) -> GvxRuntime:
        if self._runtime is None:
            raise DeploymentNotStartedError()  # type: ignore[no-untyped-call]
        return self._runtime

    @property
    def sandbox(self) -> aio.Sandbox:
        """The deployment's sandbox, for what SWE-ReX has no call for (checkpoints, stats)."""
        if self._sandbox is None:
            raise DeploymentNotStartedError()  # type: ignore[no-untyped-call]
        return self._sandbox

    async def __aenter__(self) -> "GvxDeployment":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __del__(self) -> None:
        # AbstractDeployment's __del__ runs stop() on an event loop, which a
        # finalizer must not do; the sandbox's own finalizer closes it.
        pass

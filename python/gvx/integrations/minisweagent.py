"""gvx sandboxes as a mini-swe-agent environment.

mini-swe-agent (``pip install 'gvx[minisweagent]'``) runs each command of its
agent through an environment class; :class:`GvxEnvironment` runs them in one
gvx sandbox, with the semantics of mini-swe-agent's own
``DockerEnvironment``: every command is a fresh ``bash -lc`` in ``cwd`` with
``env``, its stderr merged into its stdout, and one that outlives ``timeout``
comes back as ``returncode`` -1 with a ``subprocess.TimeoutExpired`` in
``exception_info`` and ``extra``. Select it by its import path, which
mini-swe-agent accepts wherever it takes an environment class::

    mini --environment-class gvx.integrations.minisweagent.GvxEnvironment ...

or, in a config file, ``environment: {environment_class:
gvx.integrations.minisweagent.GvxEnvironment, image: ..., cwd: /testbed}``.
Importing this module also registers the short name ``"gvx"`` in
mini-swe-agent's table of environments, for harnesses that import it first.

From Python::

    from minisweagent.agents.default import DefaultAgent
    from gvx.integrations.minisweagent import GvxEnvironment

    with GvxEnvironment(image="python:3.12", cwd="/work", timeout=60) as env:
        DefaultAgent(model, env, **agent_config).run("fix the failing test")

What differs from the Docker backend: no Docker daemon (each environment is
one unprivileged rungv process); a command that times out is killed with
every process it started (``docker exec`` leaves it running in the
container); the network is ``"none"`` unless ``network="nat"``; the default
image is gvx's busybox, where ``bash`` is absent and commands run with
``sh -lc`` unless ``interpreter`` says otherwise.
"""

from __future__ import annotations

import logging
import os
import platform
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any, Optional

try:
    import minisweagent.environments
    from minisweagent.exceptions import Submitted
    from minisweagent.utils.serialize import recursive_merge
    from pydantic import BaseModel
except ImportError as _e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        f"gvx.integrations.minisweagent needs mini-swe-agent, which is not installed ({_e}): "
        "pip install 'gvx[minisweagent]'"
    ) from _e

from .. import _episodes, errors
from ..sandbox import Mount, Sandbox
from ..volumes import Volume

__all__ = ["GvxEnvironment", "GvxEnvironmentConfig", "SUBMIT_SENTINEL"]

# The first line of output by which a command submits (mini-swe-agent's
# environments all check for it; its prompts tell the model to echo it).
SUBMIT_SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

class GvxEnvironmentConfig(BaseModel):
    """The keywords of :class:`GvxEnvironment`; the first five are
    ``DockerEnvironmentConfig``'s and mean the same."""

    image: str = ""
    """The image: a registry reference, ``oci:<layout>:<tag>``, ...; empty: gvx's default image (busybox)."""
    cwd: str = "/"
    """Working directory in which to execute commands."""
    env: dict[str, str] = {}
    """Environment variables set for every command."""
    forward_env: list[str] = []
    """Host environment variables forwarded to every command, if set on the host; ``env`` wins a conflict."""
    timeout: int = 30
    """Seconds a command may run before it is killed, unless ``execute`` is given its own."""
    interpreter: list[str] = []
    """What runs a command, which is appended as one argument; empty: ``bash -lc``, or ``sh -lc`` in an image without bash."""
    memory: Optional[str] = None
    """The sandbox's memory limit, such as ``"4g"``; None: gvx's default."""
    network: str = "none"
    """``"none"`` (no network) or ``"nat"`` (outbound through the host), as gvx.Sandbox's ``network``."""
    restore: str = ""
    """A snapshot written by ``gvx.Sandbox.checkpoint`` to continue instead of booting the image."""
    golden: str = ""
    """A golden volume (``gvx.golden.build``): the sandbox gets its own O(1) clone of it, mounted at ``golden_path``."""
    golden_path: str = "/var/lib/docker"
    """Where the golden volume's clone is mounted."""


class GvxEnvironment:
    """A mini-swe-agent environment whose commands run in one gvx sandbox.

    The sandbox starts with the environment and stops at :meth:`cleanup`
    (also ``close()``, leaving a ``with`` block, or garbage collection).
    See :class:`GvxEnvironmentConfig` for the keyword arguments.
    """

    def __init__(
        self,
        *,
        config_class: type = GvxEnvironmentConfig,
        logger: Optional[logging.Logger] = None,
        **kwargs: Any,
    ) -> None:
        self.logger = logger or logging.getLogger("minisweagent.environment")
        self.config: GvxEnvironmentConfig = config_class(**kwargs)
        self.sandbox: Optional[Sandbox] = None
        self._episode_dir: Optional[Path] = None
        self._episode_lock: Optional[int] = None
        self._interpreter: list[str] = list(self.config.interpreter)
        self._start_sandbox()

    def _start_sandbox(self) -> None:
        c = self.config
        mounts: list[Mount] = []
        try:
            if c.golden:
                self._episode_dir, self._episode_lock = _episodes.new_episode_dir()
                clone = Volume(Path(c.golden)).clone(self._episode_dir / "golden-clone.ext4")
                mounts.append(Mount(clone.path, c.golden_path))
            sb = self.sandbox = Sandbox(
                c.image or None, workdir=c.cwd, memory=c.memory, network=c.network, mounts=mounts,
                restore=c.restore or None,
            )
            if c.cwd != "/":
                # docker run -w makes a missing working directory; so does this.
                sb.exec(["mkdir", "-p", c.cwd], cwd="/", check=True, timeout=60)
            if not self._interpreter:
                bash = sb.exists("/bin/bash") or sb.exists("/usr/bin/bash")
                self._interpreter = ["bash", "-lc"] if bash else ["sh", "-lc"]
        except BaseException:
            self.cleanup()
            raise
        self.logger.info(f"Started gvx sandbox (rungv pid {sb.pid}) from {c.image or 'the default image'}")

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        result: dict[str, Any] = recursive_merge(self.config.model_dump(), platform.uname()._asdict(), kwargs)
        return result

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "environment": self.config.model_dump(mode="json"),
                    "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
                }
            }
        }

    def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: Optional[int] = None) -> dict[str, Any]:
        """Runs ``action["command"]`` in a fresh shell and returns its
        ``output`` (stdout and stderr), ``returncode`` and ``exception_info``.

        As with mini-swe-agent's environments, a failure to run the command
        (a timeout, a sandbox that died) is a result with ``returncode`` -1
        and the exception in ``exception_info`` and ``extra``, not an
        exception; output whose first line is the submission sentinel
        raises ``minisweagent.exceptions.Submitted``.
        """
        command = action.get("command", "")
        cwd = cwd or self.config.cwd
        seconds = timeout or self.config.timeout
        argv = [*self._interpreter, command]
        env = {key: value for key in self.config.forward_env if (value := os.getenv(key)) is not None}
        env.update(self.config.env)
        try:
            if self.sandbox is None:
                raise errors.SandboxClosedError("the environment was cleaned up; create a new GvxEnvironment")
            # stderr on stdout, one pipe in the guest, so the output
            # interleaves exactly as the command wrote it (docker exec,
            # which mini-swe-agent runs with stderr=STDOUT, gives one
            # stream too), without a wrapping shell to start.
            result = self.sandbox.exec(argv, cwd=cwd, env=env, timeout=seconds, stderr_to_stdout=True)
            if result.timed_out:
                # What subprocess.run raises for the Docker backend, so a
                # harness sees the same exception_type and message.
                raise subprocess.TimeoutExpired(argv, seconds, output=result.stdout_bytes)
            output: dict[str, Any] = {"output": result.stdout, "returncode": result.exit_code, "exception_info": ""}
        except Exception as e:
            raw_output = getattr(e, "output", None)
            raw_output = (
                raw_output.decode("utf-8", errors="replace") if isinstance(raw_output, bytes) else (raw_output or "")
            )
            output = {
                "output": raw_output,
                "returncode": -1,
                "exception_info": f"An error occurred while executing the command: {e}",
                "extra": {"exception_type": type(e).__name__, "exception": str(e)},
            }
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict[str, Any]) -> None:
        """Raises Submitted if the output's first line is the submission sentinel and the command succeeded."""
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_SENTINEL and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )

    def cleanup(self) -> None:
        """Stops the sandbox and deletes the golden volume's clone. Calling it again does nothing."""
        sandbox, self.sandbox = getattr(self, "sandbox", None), None
        try:
            if sandbox is not None:
                try:
                    sandbox.close()
                except errors.SandboxUnavailableError as e:
                    # Gone all the same; mini-swe-agent's cleanup reports no failure either.
                    self.logger.warning(f"gvx sandbox did not stop cleanly: {e}")
        finally:
            episode_dir, self._episode_dir = getattr(self, "_episode_dir", None), None
            lock, self._episode_lock = getattr(self, "_episode_lock", None), None
            _episodes.remove_episode_dir(episode_dir, lock)

    close = cleanup

    def __enter__(self) -> "GvxEnvironment":
        return self

    def __exit__(
        self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.cleanup()

    def __del__(self) -> None:
        self.cleanup()


# mini-swe-agent's own table of short names: "gvx" works wherever this module
# was imported before the harness looks the name up. The full import path
# above needs no import.
minisweagent.environments._ENVIRONMENT_MAPPING.setdefault("gvx", f"{__name__}.GvxEnvironment")

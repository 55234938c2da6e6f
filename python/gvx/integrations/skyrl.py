"""A SkyRL-Gym environment whose episode is a gvx sandbox.

Importing this module registers :class:`GvxTextEnv` with SkyRL-Gym as
``"gvx"``, so ``skyrl_gym.make("gvx", env_config=..., extras=...)`` works, as
it does for SkyRL's own environments. Import it in the process that makes the
environments (with skyrl-train: in the Ray task that runs the trainer, where
custom environments are registered).

The task comes from the dataset row (SkyRL passes a row's fields other than
the prompt as ``extras``); defaults shared by every row come from
``env_config`` (skyrl-train: ``environment.skyrl_gym.gvx``). A row's key wins
over the same key in ``env_config``:

``image``
    image reference; absent or ``None`` is gvx's embedded default image.
``files``
    files written before the episode starts: a mapping of absolute guest path
    to text or bytes, or a list of ``{"path": ..., "content": ...}`` records
    (what a Parquet column holds best).
``setup``
    shell commands run after the files are written; one that exits non-zero
    fails :meth:`GvxTextEnv.init`.
``test``
    the shell command that scores the episode: reward 1.0 if it exits 0, else
    0.0. Required.
``max_turns`` (default 10; skyrl-train puts its ``generator.max_turns`` in
every row's extras, so set it there), ``step_timeout`` (seconds, default 60),
``test_timeout`` (seconds the test and each setup command may run, default
600), ``max_output`` (bytes kept of a command's stdout and of its stderr,
default 8192), ``sandbox_options`` (a mapping of :class:`gvx.Sandbox`
keywords: ``memory``, ``cpus``, ``network``, ...).

The model's turn (the action) follows the tag convention of SkyRL's own tool
environments (``<sql>...</sql>``, ``<search>...</search>``):

* ``<bash>COMMAND</bash>`` runs ``COMMAND`` with ``/bin/sh -c`` in the sandbox
  (the first such block; each in a fresh shell, so ``cd`` does not carry over)
  and its output is the next observation. A missing ``</bash>`` at the end of
  the action is allowed: a sampler that stops at ``</bash>`` may drop it.
* ``<submit/>`` (``<submit>`` also counts) ends the episode, after the turn's
  command if it has one. So does reaching ``max_turns``.

When the episode ends the ``test`` command runs and gives the reward, and the
sandbox is closed at once; intermediate turns get 0.0.

>>> import skyrl_gym, gvx.integrations.skyrl
>>> env = skyrl_gym.make("gvx", env_config={}, extras={
...     "files": {"/app/answer.txt": "41\\n"},
...     "test": "grep -qx 42 /app/answer.txt",
... })
>>> prompt, _ = env.init([{"role": "user", "content": "Fix /app/answer.txt"}])
>>> env.step("<bash>echo 42 > /app/answer.txt</bash>")["done"]
False
>>> env.step("<submit/>")["reward"]
1.0
>>> env.close()

Needs the ``skyrl`` extra: ``pip install 'gvx[skyrl]'``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

try:
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
    from skyrl_gym.envs.registration import register, registry
except ImportError as _e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(f"gvx.integrations.skyrl needs SkyRL-Gym, which is not installed ({_e}): pip install 'gvx[skyrl]'") from _e

from .. import _options, errors
from ..sandbox import ExecResult, Sandbox

ENV_ID = "gvx"
"""The SkyRL-Gym id: ``skyrl_gym.make("gvx", ...)`` after importing this module."""

COMMAND = re.compile(r"<bash>(.*?)(?:</bash>|\Z)", re.DOTALL)
"""Where an action holds its command. The closing tag may be missing at the
end, as when ``</bash>`` is the sampler's stop string and is not kept."""

SUBMIT = re.compile(r"<submit\s*/?>")
"""The sentinel that ends an episode."""

_KEYS = ("image", "files", "setup", "test", "max_turns", "step_timeout", "test_timeout", "max_output", "sandbox_options")

Message = dict[str, str]


@dataclass(frozen=True)
class Task:
    """One episode's task, checked before any sandbox starts."""

    test: str
    image: Optional[str] = None
    files: tuple[tuple[str, bytes], ...] = ()
    setup: tuple[str, ...] = ()
    max_turns: int = 10
    step_timeout: float = 60.0
    test_timeout: float = 600.0
    max_output: int = 8192
    sandbox_options: tuple[tuple[str, Any], ...] = ()


def task_of(env_config: Optional[Mapping[str, Any]], extras: Optional[Mapping[str, Any]]) -> Task:
    """The task a dataset row (``extras``) and the environment's defaults
    (``env_config``) describe; a row's key wins. Raises
    :class:`gvx.InvalidArgumentError` naming what is wrong."""
    if env_config is not None and not isinstance(env_config, Mapping):
        raise errors.InvalidArgumentError(f"GvxTextEnv: env_config must be a mapping (a dict or DictConfig), not {type(env_config).__name__}")
    if extras is not None and not isinstance(extras, Mapping):
        raise errors.InvalidArgumentError(f"GvxTextEnv: extras must be a mapping (the dataset row), not {type(extras).__name__}")
    # SkyRL's rows carry other fields too (reward_spec, extra_info, ...): only ours are read.
    merged = {k: v for source in (env_config or {}, extras or {}) for k, v in source.items() if k in _KEYS}
    test = merged.get("test")
    if not isinstance(test, str) or not test.strip():
        raise errors.InvalidArgumentError(
            "GvxTextEnv: the task needs a 'test' shell command (its exit code 0 is reward 1.0), "
            "in extras (the dataset row) or env_config: extras={'test': 'cd /app && python -m pytest -q'}"
        )
    image = merged.get("image")
    if image is not None and not isinstance(image, str):
        raise errors.InvalidArgumentError(f"GvxTextEnv: 'image' is an image reference string or None, not {type(image).__name__}")
    setup = merged.get("setup") or ()
    if isinstance(setup, str) or not isinstance(setup, Sequence) or not all(isinstance(c, str) for c in setup):
        raise errors.InvalidArgumentError("GvxTextEnv: 'setup' is a list of shell commands: ['cd /app && git init -q']")
    sandbox_options = dict(merged.get("sandbox_options") or {})
    _options.check_sandbox_options("GvxTextEnv: 'sandbox_options'", image, sandbox_options)
    try:
        max_turns = int(merged.get("max_turns", 10))
        step_timeout = float(merged.get("step_timeout", 60.0))
        test_timeout = float(merged.get("test_timeout", 600.0))
        max_output = int(merged.get("max_output", 8192))
    except (TypeError, ValueError) as e:
        raise errors.InvalidArgumentError(f"GvxTextEnv: max_turns, step_timeout, test_timeout and max_output are numbers ({e})") from e
    if max_turns < 1 or step_timeout <= 0 or test_timeout <= 0 or max_output < 64:
        raise errors.InvalidArgumentError(
            "GvxTextEnv: max_turns must be >= 1, step_timeout and test_timeout > 0, max_output >= 64 "
            f"(got {max_turns}, {step_timeout}, {test_timeout}, {max_output})"
        )
    return Task(
        test=test,
        image=image,
        files=_files(merged.get("files")),
        setup=tuple(setup),
        max_turns=max_turns,
        step_timeout=step_timeout,
        test_timeout=test_timeout,
        max_output=max_output,
        sandbox_options=tuple(sandbox_options.items()),
    )


def _files(value: object) -> tuple[tuple[str, bytes], ...]:
    how = "'files' maps absolute guest paths to text or bytes ({'/app/main.py': source}), or lists {'path': ..., 'content': ...} records"
    if value is None:
        return ()
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        if not all(isinstance(r, Mapping) and "path" in r and "content" in r for r in value):
            raise errors.InvalidArgumentError(f"GvxTextEnv: {how}")
        pairs = [(r["path"], r["content"]) for r in value]
    else:
        raise errors.InvalidArgumentError(f"GvxTextEnv: {how}")
    out = []
    for path, content in pairs:
        if not isinstance(path, str) or not path.startswith("/") or not isinstance(content, (str, bytes)):
            raise errors.InvalidArgumentError(f"GvxTextEnv: {how}; got {path!r}")
        out.append((path, content.encode() if isinstance(content, str) else bytes(content)))
    return tuple(out)


def parse_action(action: str) -> tuple[Optional[str], bool]:
    """The command an action holds (its first ``<bash>`` block) and whether it submits."""
    match = COMMAND.search(action)
    command = match.group(1).strip() if match else None
    return command or None, SUBMIT.search(action) is not None


def observation(result: ExecResult, timeout: float) -> str:
    """What the model sees of a command: its output, then how it ended."""
    text = result.stdout + result.stderr
    if text and not text.endswith("\n"):
        text += "\n"
    if result.timed_out:
        return text + f"[timed out after {timeout:g} s and killed]"
    return text + f"[exit code {result.exit_code}]"


class GvxTextEnv(BaseTextEnv):  # type: ignore[misc]  # SkyRL-Gym ships no type information
    """A SkyRL-Gym text environment: each episode is a fresh gvx sandbox, each
    turn a shell command, the reward the task's test (see the module's docstring).

    :meth:`init` starts the sandbox and prepares the task; :meth:`close` stops
    it, and is also called when the episode ends, when :meth:`init` fails and
    when a step raises. A sandbox that fails during a step (its rungv died, or
    it stopped answering) ends the episode with reward 0.0 and the error in
    ``metadata["sandbox_error"]``, so one broken sandbox does not stop training.
    """

    def __init__(self, env_config: Optional[Mapping[str, Any]] = None, extras: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        self.task = task_of(env_config, extras)
        self.max_turns = self.task.max_turns
        self.sandbox: Optional[Sandbox] = None
        self.done = False
        self.reward = 0.0

    def init(self, prompt: list[Message]) -> tuple[list[Message], dict[str, Any]]:
        """Starts the episode's sandbox, writes the task's files and runs its
        setup; returns the prompt unchanged. A failing setup command raises
        :class:`gvx.ExecError`, with no sandbox left running."""
        self.close()
        self.turns, self.done, self.reward = 0, False, 0.0
        task = self.task
        sb = Sandbox(task.image, **dict(task.sandbox_options))
        self.sandbox = sb
        try:
            for path, data in task.files:
                sb.write_file(path, data, make_parents=True)
            for command in task.setup:
                sb.exec(command, check=True, timeout=task.test_timeout)
        except BaseException:
            self.close()
            raise
        return prompt, {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Runs the action's command, or ends the episode on ``<submit/>`` or at
        ``max_turns``, scoring it with the task's test."""
        if self.done:
            raise errors.SandboxClosedError(
                "GvxTextEnv.step: the episode has ended (submitted, or max_turns reached) and its sandbox is closed; "
                "make a new environment, or call init() to start another episode"
            )
        if self.sandbox is None:
            raise errors.SandboxClosedError("GvxTextEnv.step: no sandbox yet; call init(prompt) first")
        try:
            return self._step(self.sandbox, action)
        except BaseException:
            self.close()
            raise

    def _step(self, sb: Sandbox, action: str) -> BaseTextEnvStepOutput:
        if not isinstance(action, str):
            raise errors.InvalidArgumentError(f"GvxTextEnv.step: the action is the model's text, not {type(action).__name__}")
        self.turns += 1
        command, submitted = parse_action(action)
        metadata: dict[str, Any] = {"command": command, "submitted": submitted}
        try:
            content = "No command found: put one shell command in <bash>...</bash>, or <submit/> when the task is done."
            if command is not None:
                result = sb.exec(command, timeout=self.task.step_timeout, max_output=self.task.max_output)
                content = observation(result, self.task.step_timeout)
                metadata.update(exit_code=result.exit_code, timed_out=result.timed_out, duration=result.duration)
            if not submitted and self.turns < self.max_turns:
                return BaseTextEnvStepOutput(observations=[{"role": "user", "content": content}], reward=0.0, done=False, metadata=metadata)
            test = sb.exec(self.task.test, timeout=self.task.test_timeout, max_output=self.task.max_output)
            self.reward = 1.0 if test.ok else 0.0
            metadata.update(test_exit_code=test.exit_code, test_timed_out=test.timed_out, test_output=test.stdout + test.stderr)
        except (errors.SandboxUnavailableError, errors.TimeoutError) as e:
            # The sandbox failed, not the model: the episode ends unscored, and
            # the error is reported here rather than again by close.
            self.reward = 0.0
            metadata["sandbox_error"] = str(e)
        self.close(quiet="sandbox_error" in metadata)
        return BaseTextEnvStepOutput(observations=[], reward=self.reward, done=True, metadata=metadata)

    def close(self, quiet: bool = False) -> None:
        """Stops the episode's sandbox; calling it again does nothing. A sandbox
        that does not stop cleanly is a ``RuntimeWarning`` (unless ``quiet``):
        it is gone all the same."""
        sb, self.sandbox = self.sandbox, None
        if sb is None:
            return
        self.done = True
        try:
            sb.close()
        except errors.SandboxUnavailableError as e:
            if not quiet:
                warnings.warn(f"gvx.integrations.skyrl: closing the episode's sandbox: {e}", RuntimeWarning, stacklevel=2)

    def get_metrics(self) -> dict[str, Any]:
        return {"turns": self.turns, "solved": self.reward}


if ENV_ID not in registry:  # a reload must not register it twice, which SkyRL-Gym refuses
    register(id=ENV_ID, entry_point=f"{__name__}:GvxTextEnv")

__all__ = ["COMMAND", "ENV_ID", "SUBMIT", "GvxTextEnv", "Task", "observation", "parse_action", "task_of"]

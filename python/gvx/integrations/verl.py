"""A verl tool whose commands run in a gvx sandbox, one per trajectory.

verl (``pip install 'gvx[verl]'``) loads tools from a YAML file
(``actor_rollout_ref.rollout.multi_turn.tool_config_path``) with
``verl.tools.utils.tool_registry.initialize_tools_from_config`` (in verl
0.9: ``verl.tools.tool_registry``); :class:`GvxTool` is one, by its import
path::

    tools:
      - class_name: gvx.integrations.verl.GvxTool
        config:
          type: native            # verl's tool type
          image: python:3.12      # absent: gvx's default image (busybox)
          workdir: /app
          timeout: 30             # seconds a command may run
          test: cd /app && python -m pytest -q
        tool_schema:
          type: function
          function:
            name: bash
            description: Runs a shell command in the task's sandbox.
            parameters:
              type: object
              properties:
                command: {type: string, description: The command to run.}
              required: [command]

The keys of ``config`` are :class:`GvxToolConfig`'s. The task (``image``,
``files``, ``setup``, ``test``, ``workdir``, ``env``) may also come from each
dataset row's ``tools_kwargs.<tool name>.create_kwargs``, which verl hands to
:meth:`GvxTool.create`; a row's key wins over the config's.

The tool implements verl's ``BaseTool`` lifecycle, keyed by instance id:

``create(instance_id, **kwargs)``
    checks the task and registers the instance; returns ``(instance_id, ToolResponse())``.
    Its sandbox starts at the instance's first ``execute`` or ``calc_reward``
    (files written, ``setup`` run), so that calls which share a trajectory
    share its sandbox (below).
``execute(instance_id, {"command": ...}, **kwargs)``
    runs the command with ``sh -c`` in the sandbox (a fresh shell each time,
    in ``workdir``, stderr merged into stdout); returns
    ``(ToolResponse(text=output + "[exit code N]"), 0.0, metrics)``.
``calc_reward(instance_id)``
    runs the task's ``test`` command: 1.0 if it exits 0, else 0.0.
``release(instance_id)``
    closes the instance's sandbox.

verl's ``ToolAgentLoop`` creates and releases an instance around every tool
call (and never calls ``calc_reward``), passing the trajectory's
``agent_data`` to ``execute``: the calls of one trajectory (one
``agent_data.request_id``) then share one sandbox, which stays open across
their releases and is closed when the trajectory ends (its ``agent_data`` is
freed), or by :meth:`GvxTool.close`. With ``reward_each_step: true`` the
task's test runs after every command there and its outcome is the step
reward, which verl collects in ``tool_rewards`` for the reward function.

Every sandbox the tool opened is closed by ``release``, by an ``execute`` or
``calc_reward`` that is cancelled or interrupted (Ctrl-C), by
:meth:`GvxTool.close` and at the process's exit.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import threading
import warnings
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Optional, TypeVar, Union
from uuid import uuid4

try:
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
    from verl.utils.rollout_trace import rollout_trace_op
except ImportError as _e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(f"gvx.integrations.verl needs verl, which is not installed ({_e}): pip install 'gvx[verl]'") from _e

from .. import _episodes, _options, aio, errors
from ..sandbox import ExecResult, Sandbox

__all__ = ["GvxTool", "GvxToolConfig", "Task"]

T = TypeVar("T")

_WHERE = "gvx.integrations.verl.GvxTool"

# The keys a dataset row's create_kwargs may set; the rest of the config is the tool's.
_TASK_KEYS = ("image", "files", "setup", "test", "workdir", "env")


@dataclass(frozen=True)
class Task:
    """One trajectory's task: where its sandbox starts and how it is scored."""

    image: Optional[str] = None
    files: tuple[tuple[str, bytes], ...] = ()
    setup: tuple[str, ...] = ()
    test: Optional[str] = None
    workdir: str = "/"
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class GvxToolConfig:
    """The ``config`` of the tool's YAML entry, checked when verl builds the
    tool. Task keys (see :class:`Task`) are defaults for every trajectory."""

    type: str = "native"
    """verl's tool type; verl's registry needs ``native``."""
    task: Task = field(default_factory=Task)
    """``image``, ``files``, ``setup``, ``test``, ``workdir``, ``env``: each trajectory's defaults."""
    memory: Union[int, str, None] = None
    """The sandbox's memory limit, such as ``"4g"``; None: gvx's default."""
    cpus: Optional[float] = None
    """CPUs the sandbox may use; None: gvx's default."""
    network: str = "none"
    """``"none"`` (no network) or ``"nat"`` (outbound through the host)."""
    restore: Optional[str] = None
    """A snapshot written by ``gvx.Sandbox.checkpoint`` to continue instead of booting the image."""
    golden: Optional[str] = None
    """A golden volume (``gvx.golden.build``): each sandbox gets its own O(1) clone of it at ``golden_path``."""
    golden_path: str = "/var/lib/docker"
    """Where the golden volume's clone is mounted."""
    sandbox_options: tuple[tuple[str, Any], ...] = ()
    """Other :class:`gvx.Sandbox` keywords (``pids_limit``, ``allow_net``, ...)."""
    warm: int = 0
    """Sandboxes kept started ahead (with the config's image and options), so a trajectory's first command does not wait for a boot."""
    timeout: float = 30.0
    """Seconds a command may run before it is killed with every process it started."""
    test_timeout: float = 600.0
    """Seconds the test and each setup command may run."""
    max_output: int = 16384
    """Bytes kept of a command's output (verl truncates again at ``multi_turn.max_tool_response_length``)."""
    reward_each_step: bool = False
    """Run the test after every command and make its outcome the step reward."""


def _fail(key: str, problem: str) -> errors.InvalidArgumentError:
    return errors.InvalidArgumentError(f"{_WHERE}: config '{key}' {problem} (the tool's `config:` in the tool config YAML, or a row's create_kwargs)")


def _number(key: str, value: object, kind: Callable[[Any], T], low: float, what: str) -> T:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(key, f"must be {what}, not {value!r}")
    out = kind(value)
    if out < low:  # type: ignore[operator]
        raise _fail(key, f"must be {what}, not {value!r}")
    return out


def _files(value: object) -> tuple[tuple[str, bytes], ...]:
    how = "maps absolute guest paths to text ({'/app/main.py': source}), or lists {path: ..., content: ...} records"
    if value is None:
        return ()
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        if not all(isinstance(r, Mapping) and "path" in r and "content" in r for r in value):
            raise _fail("files", how)
        pairs = [(r["path"], r["content"]) for r in value]
    else:
        raise _fail("files", f"{how}; got {type(value).__name__}")
    out = []
    for path, content in pairs:
        if not isinstance(path, str) or not path.startswith("/") or not isinstance(content, (str, bytes)):
            raise _fail("files", f"{how}; got {path!r}")
        out.append((path, content.encode() if isinstance(content, str) else bytes(content)))
    return tuple(out)


def _task(base: Task, values: Mapping[str, Any]) -> Task:
    """base with the task keys of values applied, each checked."""
    changes: dict[str, Any] = {}
    if "image" in values:
        image = values["image"]
        if image is not None and (not isinstance(image, str) or not image):
            raise _fail("image", f"is an image reference (a non-empty string) or null, not {image!r}")
        changes["image"] = image
    if "files" in values:
        changes["files"] = _files(values["files"])
    if "setup" in values:
        setup = values["setup"] or ()
        if isinstance(setup, str):
            setup = (setup,)
        if not isinstance(setup, Sequence) or not all(isinstance(c, str) for c in setup):
            raise _fail("setup", f"is a list of shell commands (['cd /app && git init -q']), not {setup!r}")
        changes["setup"] = tuple(setup)
    if "test" in values:
        test = values["test"]
        if test is not None and (not isinstance(test, str) or not test.strip()):
            raise _fail("test", f"is a shell command whose exit code 0 is reward 1.0 ('cd /app && python -m pytest -q'), not {test!r}")
        changes["test"] = test
    if "workdir" in values:
        workdir = values["workdir"]
        if not isinstance(workdir, str) or not workdir.startswith("/"):
            raise _fail("workdir", f"is an absolute guest path ('/app'), not {workdir!r}")
        changes["workdir"] = workdir
    if "env" in values:
        env = values["env"] or {}
        if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise _fail("env", f"maps variable names to string values ({{'PYTHONUNBUFFERED': '1'}}), not {env!r}")
        changes["env"] = tuple(env.items())
    return replace(base, **changes)


def config_of(config: Mapping[str, Any]) -> GvxToolConfig:
    """The tool's config, as verl hands it to the tool (the YAML's ``config:``
    as a dict). Raises :class:`gvx.InvalidArgumentError` naming the key and
    what it takes."""
    if not isinstance(config, Mapping):
        raise errors.InvalidArgumentError(f"{_WHERE}: config is a mapping (the tool's `config:` in the tool config YAML), not {type(config).__name__}")
    own = [f.name for f in fields(GvxToolConfig) if f.name != "task"]
    unknown = sorted(set(config) - set(own) - set(_TASK_KEYS))
    if unknown:
        raise errors.InvalidArgumentError(f"{_WHERE}: unknown config keys {unknown}; the tool takes {sorted([*own, *_TASK_KEYS])}")
    c = GvxToolConfig(task=_task(Task(), config))
    changes: dict[str, Any] = {}
    if config.get("type", "native") != "native":
        raise _fail("type", f"is verl's tool type and must be 'native', not {config['type']!r}")
    if "memory" in config:
        memory = config["memory"]
        if memory is not None and (isinstance(memory, bool) or not isinstance(memory, (int, str))):
            raise _fail("memory", f"is a size ('4g', '512m') or a number of bytes, not {memory!r}")
        changes["memory"] = memory
    if config.get("cpus") is not None:
        changes["cpus"] = _number("cpus", config["cpus"], float, 0.01, "a number of CPUs > 0")
    if "network" in config:
        if config["network"] not in ("none", "nat"):
            raise _fail("network", f"is 'none' (loopback only) or 'nat' (outbound through the host), not {config['network']!r}")
        changes["network"] = config["network"]
    for key in ("restore", "golden"):
        value = config.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise _fail(key, f"is a path on the host, not {value!r}")
        changes[key] = value or None
    if "golden_path" in config:
        path = config["golden_path"]
        if not isinstance(path, str) or not path.startswith("/"):
            raise _fail("golden_path", f"is an absolute guest path, not {path!r}")
        changes["golden_path"] = path
    options = config.get("sandbox_options") or {}
    if not isinstance(options, Mapping):
        raise _fail("sandbox_options", f"maps gvx.Sandbox keywords to values ({{'pids_limit': 512}}), not {options!r}")
    clash = sorted(set(options) & {"image", "env", "workdir", "memory", "cpus", "network", "restore", "mounts"})
    if clash:
        raise _fail("sandbox_options", f"may not set {clash}: give them as the tool's own config keys (mounts: golden)")
    changes["sandbox_options"] = tuple(options.items())
    for key, least, what in (("warm", 0, "the number of sandboxes to keep started (an int >= 0)"), ("max_output", 64, "a number of bytes >= 64")):
        if key in config:
            if not isinstance(config[key], int):
                raise _fail(key, f"must be {what}, not {config[key]!r}")
            changes[key] = _number(key, config[key], int, least, what)
    for key in ("timeout", "test_timeout"):
        if key in config:
            changes[key] = _number(key, config[key], float, 0.001, "seconds > 0")
    if "reward_each_step" in config:
        if not isinstance(config["reward_each_step"], bool):
            raise _fail("reward_each_step", f"is true or false, not {config['reward_each_step']!r}")
        changes["reward_each_step"] = config["reward_each_step"]
    c = replace(c, **changes)
    try:
        _options.check_sandbox_options(f"{_WHERE}: config", c.task.image, _sandbox_kwargs(c, c.task))
    except errors.InvalidArgumentError as e:
        raise errors.InvalidArgumentError(f"{e} (the tool's `config:` in the tool config YAML)") from e
    return c


def _sandbox_kwargs(c: GvxToolConfig, task: Task) -> dict[str, Any]:
    kwargs: dict[str, Any] = dict(c.sandbox_options)
    kwargs.update(memory=c.memory, cpus=c.cpus, network=c.network, restore=c.restore)
    if task.env:
        kwargs["env"] = dict(task.env)
    return kwargs


class _Sandbox(_episodes.EpisodeSandbox):
    """A trajectory's started sandbox and the golden clone it owns."""

    def close(self) -> None:
        """Stops the sandbox and deletes its golden clone; a sandbox that did
        not stop cleanly is a RuntimeWarning (it is gone all the same)."""
        try:
            super().close()
        except errors.SandboxUnavailableError as e:
            warnings.warn(f"gvx.integrations.verl: closing a trajectory's sandbox: {e}", RuntimeWarning, stacklevel=2)


def _boot(c: GvxToolConfig, task: Task) -> _Sandbox:
    """Starts a sandbox for task (blocking): the golden clone, the boot."""
    return _Sandbox.start(task.image, c.golden or "", c.golden_path, **_sandbox_kwargs(c, task))


def _prepare(booted: _Sandbox, task: Task, test_timeout: float) -> None:
    """Lays out task in a started sandbox: its working directory, files and setup."""
    sb = booted.sandbox
    if task.workdir != "/":
        sb.exec(["mkdir", "-p", task.workdir], cwd="/", check=True, timeout=60)
    for path, data in task.files:
        sb.write_file(path, data, make_parents=True)
    for command in task.setup:
        sb.exec(["sh", "-c", command], cwd=task.workdir, check=True, timeout=test_timeout)


class _Session:
    """A trajectory's sandbox, started at its first use."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.sandbox: Optional[_Sandbox] = None
        self.closed = False
        self.error: Optional[str] = None
        self._starting: Optional[concurrent.futures.Future[_Sandbox]] = None

    async def started(self, tool: "GvxTool") -> Sandbox:
        if self.closed:
            raise errors.SandboxClosedError(f"{_WHERE}: the instance was released; create a new one")
        if self.sandbox is None:
            if self._starting is None:
                # One worker thread does the whole start, so an await that is
                # cancelled (Ctrl-C) cannot drop a sandbox half made: the
                # callback closes what the thread finishes making.
                self._starting = tool._start(self.task)
            try:
                booted = await asyncio.shield(asyncio.wrap_future(self._starting))
            except BaseException:
                self.close()
                raise
            if self.closed:
                raise errors.SandboxClosedError(f"{_WHERE}: the instance was released while its sandbox started")
            self.sandbox = booted
        return self.sandbox.sandbox

    def close(self) -> None:
        """Closes the sandbox, or has it closed once its start ends; again: nothing."""
        if self.closed:
            return
        self.closed = True
        starting, self._starting = self._starting, None
        booted, self.sandbox = self.sandbox, None
        if booted is not None:
            booted.close()
        elif starting is not None:
            starting.add_done_callback(_close_result)


def _close_at_exit(ref: "weakref.ReferenceType[GvxTool]") -> None:
    tool = ref()
    if tool is not None:
        tool.close()


def _close_result(f: concurrent.futures.Future[_Sandbox]) -> None:
    if not f.cancelled() and f.exception() is None:
        f.result().close()


class GvxTool(BaseTool):  # type: ignore[misc]  # verl ships no type information
    """A verl tool that runs the model's shell commands in a gvx sandbox per
    trajectory (see the module's docstring); ``config`` is
    :class:`GvxToolConfig`'s keys, as verl's tool config YAML gives them."""

    def __init__(self, config: dict[str, Any], tool_schema: Optional[OpenAIFunctionToolSchema] = None) -> None:
        self.gvx_config = config_of(config)
        super().__init__(config, tool_schema or default_schema())
        self._instances: dict[str, _Session] = {}
        self._trajectories: dict[str, _Session] = {}
        self._bound: dict[str, str] = {}  # instance id -> trajectory id, for ToolAgentLoop's per-call instances
        self._warm: deque[concurrent.futures.Future[_Sandbox]] = deque()
        self._lock = threading.Lock()
        self._closed = False
        # At exit, what no release closed (the harness raised, or was interrupted) is closed.
        self._atexit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._atexit)

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return self.tool_schema

    # Starting sandboxes.

    def _start(self, task: Task) -> concurrent.futures.Future[_Sandbox]:
        """Starts task's sandbox on gvx's worker pool, from a warm sandbox when one fits."""
        c = self.gvx_config
        warm = None
        with self._lock:
            if task.image == c.task.image and task.env == c.task.env and self._warm:
                warm = self._warm.popleft()
            self._fill()

        def start() -> _Sandbox:
            booted = warm.result() if warm is not None else _boot(c, task)
            try:
                _prepare(booted, task, c.test_timeout)
            except BaseException:
                booted.close()
                raise
            return booted

        return aio._executor().submit(start)

    def _fill(self) -> None:
        """Starts warm sandboxes until `warm` are on their way (holding _lock)."""
        while not self._closed and len(self._warm) < self.gvx_config.warm:
            self._warm.append(aio._executor().submit(_boot, self.gvx_config, self.gvx_config.task))

    # verl's BaseTool lifecycle.

    async def create(self, instance_id: Optional[str] = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Registers an instance whose task is the config's, with the keys of
        ``create_kwargs`` (verl's ToolAgentLoop passes the row's
        ``tools_kwargs.<name>.create_kwargs`` so) or of ``kwargs`` themselves
        (verl's older rollout spread them) applied."""
        if self._closed:
            raise errors.SandboxClosedError(f"{_WHERE}: the tool was closed; build a new one")
        values = {k: v for k, v in kwargs.items() if k in _TASK_KEYS}
        nested = kwargs.get("create_kwargs") or {}
        if not isinstance(nested, Mapping):
            raise errors.InvalidArgumentError(f"{_WHERE}.create: create_kwargs is a mapping of task keys {list(_TASK_KEYS)}, not {nested!r}")
        values.update({k: v for k, v in nested.items() if k in _TASK_KEYS})
        task = _task(self.gvx_config.task, values)
        if instance_id is None:
            instance_id = str(uuid4())
        with self._lock:
            self._fill()
            old = self._instances.get(instance_id)
            self._instances[instance_id] = _Session(task)
        if old is not None:
            old.close()
        return instance_id, ToolResponse()

    def _session(self, instance_id: str, agent_data: Any = None) -> _Session:
        """The session of an instance: its own, or its trajectory's when verl's
        ToolAgentLoop passed agent_data (one request id per trajectory)."""
        own = self._instances.get(instance_id)
        if own is None:
            raise errors.NotFoundError(f"{_WHERE}: no instance {instance_id!r}; call create() first (release() ends one)")
        trajectory = getattr(agent_data, "request_id", None)
        if not isinstance(trajectory, str):
            return own
        with self._lock:
            shared = self._trajectories.get(trajectory)
            if shared is None or shared.closed:
                shared = self._trajectories[trajectory] = _Session(own.task)
                # The trajectory ends when verl frees its AgentData.
                weakref.finalize(agent_data, self.end_trajectory, trajectory)
            self._bound[instance_id] = trajectory
        return shared

    def end_trajectory(self, trajectory: str) -> None:
        """Closes the sandbox that the calls of a trajectory (``agent_data.request_id``)
        share, now rather than when verl frees its ``AgentData``: for an agent loop
        that knows when its trajectory ends. An unknown one is no error."""
        with self._lock:
            session = self._trajectories.pop(trajectory, None)
        if session is not None:
            session.close()

    @rollout_trace_op  # type: ignore[untyped-decorator]  # verl ships no type information
    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float, dict[str, Any]]:
        """Runs ``parameters["command"]`` with ``sh -c`` in the trajectory's
        sandbox; returns its output and how it ended, the step reward (0.0,
        or the test's outcome with ``reward_each_step``) and metrics."""
        session = self._session(instance_id, kwargs.get("agent_data"))
        command = parameters.get("command") if isinstance(parameters, Mapping) else None
        if not isinstance(command, str) or not command.strip():
            text = f"Error: call {self.name} with a shell command: {{\"command\": \"ls\"}} (got {parameters!r})."
            return ToolResponse(text=text), 0.0, {"error": "no command"}
        if session.error is not None:
            return ToolResponse(text=f"Error: the sandbox failed earlier: {session.error}"), 0.0, {"sandbox_error": session.error}
        c = self.gvx_config
        reward = 0.0
        try:
            sb = aio.Sandbox(await session.started(self))
            result = await sb.exec(["sh", "-c", command], cwd=session.task.workdir, timeout=c.timeout, max_output=c.max_output, stderr_to_stdout=True)
            metrics: dict[str, Any] = {"exit_code": result.exit_code, "timed_out": result.timed_out, "duration": result.duration}
            if c.reward_each_step and session.task.test is not None:
                reward = await self._test(sb, session.task)
                metrics["test_reward"] = reward
            return ToolResponse(text=observation(result, c.timeout)), reward, metrics
        except (errors.SandboxUnavailableError, errors.SandboxStartError, errors.ExecError, errors.TimeoutError) as e:
            # The sandbox failed, not the model: the trajectory's sandbox is
            # closed and the model told; its reward will be 0.0.
            session.error = str(e)
            session.close()
            return ToolResponse(text=f"Error: the sandbox failed: {e}"), 0.0, {"sandbox_error": str(e)}
        except BaseException:
            # Cancelled or interrupted (Ctrl-C): nothing may outlive it.
            session.close()
            raise

    async def _test(self, sb: aio.Sandbox, task: Task) -> float:
        assert task.test is not None
        result = await sb.exec(["sh", "-c", task.test], cwd=task.workdir, timeout=self.gvx_config.test_timeout, max_output=self.gvx_config.max_output)
        return 1.0 if result.ok else 0.0

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """Runs the task's test in the trajectory's sandbox: 1.0 if it exits 0,
        else 0.0 (also when it times out or the sandbox failed)."""
        session = self._session(instance_id, kwargs.get("agent_data"))
        if session.task.test is None:
            raise errors.InvalidArgumentError(
                f"{_WHERE}.calc_reward: the task has no 'test' command; set `test:` in the tool's config or in the row's create_kwargs"
            )
        if session.error is not None:
            return 0.0
        try:
            return await self._test(aio.Sandbox(await session.started(self)), session.task)
        except (errors.SandboxUnavailableError, errors.SandboxStartError, errors.TimeoutError) as e:
            session.error = str(e)
            session.close()
            return 0.0
        except BaseException:
            session.close()
            raise

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Closes the instance's sandbox; a trajectory's shared sandbox stays
        open for its next call. An unknown instance is no error."""
        with self._lock:
            session = self._instances.pop(instance_id, None)
            self._bound.pop(instance_id, None)
        if session is not None:
            await asyncio.get_running_loop().run_in_executor(aio._executor(), session.close)

    # The tool's own end.

    def sandboxes(self) -> int:
        """How many sandboxes the tool holds open or is starting (warm ones included)."""
        with self._lock:
            sessions = {id(s): s for s in [*self._instances.values(), *self._trajectories.values()]}
            return sum(1 for s in sessions.values() if not s.closed and (s.sandbox is not None or s._starting is not None)) + len(self._warm)

    def close(self) -> None:
        """Closes every sandbox the tool opened: its instances', its
        trajectories' and the warm ones. verl never calls it; the process's
        exit does."""
        with self._lock:
            self._closed = True
            sessions = [*self._instances.values(), *self._trajectories.values()]
            warm = list(self._warm)
            self._instances.clear()
            self._trajectories.clear()
            self._bound.clear()
            self._warm.clear()
        for session in sessions:
            session.close()
        for f in warm:
            f.add_done_callback(_close_result)
        atexit.unregister(self._atexit)


def observation(result: ExecResult, timeout: float) -> str:
    """What the model sees of a command: its output, then how it ended."""
    text = result.stdout
    if text and not text.endswith("\n"):
        text += "\n"
    if result.timed_out:
        return text + f"[timed out after {timeout:g} s and killed]"
    return text + f"[exit code {result.exit_code}]"


def default_schema() -> OpenAIFunctionToolSchema:
    """The schema used when the YAML gives none: one ``command`` string."""
    return OpenAIFunctionToolSchema.model_validate(
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "Runs a shell command (sh -c) in the task's sandbox and returns its output and exit code.",
                "parameters": {
                    "type": "object",
                    "properties": {"command": {"type": "string", "description": "The shell command to run."}},
                    "required": ["command"],
                },
            },
        }
    )

"""Gymnasium-style environments whose episodes are fresh gvx sandboxes.

An action is a shell command; an observation is the command's stdout, stderr
and exit code. Every :meth:`GvxEnv.reset` hands over a brand-new sandbox —
prepared in the background while the previous episode ran (the warm pool), so
a reset costs the hand-over, not a boot.

>>> env = gvx.GvxEnv(reward_fn=lambda sb, action, result: float(result.ok))
>>> obs, info = env.reset()
>>> obs, reward, terminated, truncated, info = env.step("ls /")
>>> env.close()
"""

from __future__ import annotations

import os
import shutil
import string
import threading
import time
import uuid
import warnings
from pathlib import Path
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Optional, Sequence, SupportsFloat, TypeVar, Union

from . import _episodes, _options, _pool, errors
from ._task import episode_task
from .sandbox import ExecResult, Mount, Sandbox
from .volumes import Volume

_gym: Any
_spaces: Any
try:  # gymnasium is optional: GvxEnv subclasses gymnasium.Env when it is installed.
    import gymnasium as _gym
    from gymnasium import spaces as _spaces

    _Base: Any = _gym.Env
except ImportError:  # pragma: no cover - exercised only without gymnasium
    _gym = None
    _spaces = None
    _Base = object

ENV_ID = "gvx/Shell-v0"
"""The gymnasium id: ``gymnasium.make("gvx/Shell-v0", ...)`` after ``import gvx``."""

CHARSET = string.printable
"""The characters observations and actions are made of; others become '?'."""

RewardFn = Callable[[Sandbox, str, ExecResult], SupportsFloat]
DoneFn = Callable[[Sandbox, str, ExecResult], bool]


def _fit(text: str, limit: int) -> str:
    """Keeps text within the observation space: known characters, bounded length."""
    allowed = _ALLOWED
    if any(c not in allowed for c in text):
        text = "".join(c if c in allowed else "?" for c in text)
    if len(text) > limit:
        text = text[: limit // 2] + text[len(text) - (limit - limit // 2) :]
    return text


_ALLOWED = frozenset(CHARSET)


class GvxEnv(_Base):  # type: ignore[misc]
    """An RL environment: each episode is a fresh sandbox, each step a shell command.

    Args:
        image: image reference; ``None`` is the embedded default image.
        setup: shell commands run in every new sandbox before it is handed over
            (in the background with ``warm=True``).
        reward_fn: ``reward_fn(sandbox, action, result) -> float``; default 0.
        done_fn: ``done_fn(sandbox, action, result) -> bool`` ends the episode
            (``terminated``); default never.
        max_steps: steps until the episode is ``truncated``.
        step_timeout: seconds a command may run; it is killed after that.
        max_output: characters kept of stdout and of stderr in observations.
        warm: how many sandboxes to keep prepared in the background for the
            next resets: ``True`` is one, ``False`` or ``0`` none. One is enough
            when an episode lasts longer than preparing a sandbox (boot plus
            ``setup``); with shorter episodes, e.g. a dockerd that takes 1.6 s
            to start and 0.5 s episodes, ``warm=4`` keeps resets at the hand-over
            cost. Each prepared sandbox holds its memory while it waits.
        golden: a golden :class:`gvx.Volume` (see :func:`gvx.golden.build`): every
            episode mounts its own O(1) clone at ``volume_path``; the clone is
            deleted when the episode ends.
        volume_path: where the episode's clone is mounted.
        episode_dir: where clones live (default: a private temporary directory).
        on_sandbox_failure: what a step does when the sandbox itself fails
            (its rungv died, or it stopped answering for 5 s past
            ``step_timeout``): ``"truncate"`` (the default) ends the episode,
            returning ``truncated=True``, reward 0, exit code 255 and the error
            in ``info["sandbox_error"]``, so that one broken sandbox among a
            thousand does not stop training and the next :meth:`reset` starts
            afresh; ``"raise"`` raises the :class:`gvx.GvxError`.
        sandbox_options: passed to :class:`gvx.Sandbox` (memory, cpus, env, …);
            ``restore=SNAPSHOT`` makes every episode a restored snapshot (see
            :func:`gvx.docker.snapshot`, with ``golden`` the snapshot's volume).

    A sandbox the environment is done with (the last episode's, on
    :meth:`reset`; every one, on :meth:`close`) that does not stop cleanly —
    :meth:`gvx.Sandbox.close` raises :class:`gvx.SandboxUnavailableError` — is
    reported with :func:`warnings.warn` (a ``RuntimeWarning`` carrying the
    error's message) and otherwise ignored: a reset still hands over the fresh
    sandbox, and close still closes the rest.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(
        self,
        image: Optional[str] = None,
        *,
        setup: Sequence[str] = (),
        reward_fn: Optional[RewardFn] = None,
        done_fn: Optional[DoneFn] = None,
        max_steps: int = 50,
        step_timeout: float = 60.0,
        max_output: int = 8192,
        max_action_length: int = 4096,
        warm: Union[bool, int] = True,
        render_mode: Optional[str] = None,
        golden: Optional[Volume] = None,
        volume_path: str = "/var/lib/docker",
        episode_dir: Optional[str] = None,
        on_sandbox_failure: str = "truncate",
        **sandbox_options: Any,
    ) -> None:
        if max_steps < 1 or step_timeout <= 0 or max_output < 64:
            raise errors.InvalidArgumentError(
                "max_steps must be >= 1, step_timeout > 0 and max_output >= 64 "
                f"(got {max_steps}, {step_timeout}, {max_output})"
            )
        if not isinstance(warm, int) or warm < 0:
            raise errors.InvalidArgumentError(
                f"warm={warm!r}: give the number of sandboxes to keep prepared (an int >= 0, or True for one)"
            )
        if on_sandbox_failure not in ("truncate", "raise"):
            raise errors.InvalidArgumentError(f"on_sandbox_failure={on_sandbox_failure!r}: use 'truncate' or 'raise'")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise errors.InvalidArgumentError(f"render_mode={render_mode!r}: use one of {self.metadata['render_modes']}")
        _options.check_sandbox_options("GvxEnv", image, sandbox_options)
        self.image = image
        self.setup = list(setup)
        self.reward_fn = reward_fn
        self.done_fn = done_fn
        self.max_steps = max_steps
        self.step_timeout = step_timeout
        self.max_output = max_output
        self.warm = int(warm)
        self.render_mode = render_mode
        self.on_sandbox_failure = on_sandbox_failure
        self.sandbox_options = sandbox_options
        self.golden = golden
        self.volume_path = volume_path
        # Held while this environment owns episode_dir (a private one).
        self._episode_lock: Optional[int] = None
        self.episode_dir: Optional[Path] = None
        if golden is not None and episode_dir is not None:
            self.episode_dir = Path(episode_dir)
        elif golden is not None:
            self.episode_dir, self._episode_lock = _episodes.new_episode_dir()
        self._clones: dict[int, Path] = {}  # id(sandbox) -> its episode clone
        if _gym is not None and getattr(self, "spec", None) is None:
            # Commands see clocks, PIDs and randomness: the same seed and
            # actions need not give the same observations, and step info
            # carries wall times and resource use.
            self.spec = _gym.envs.registration.EnvSpec(ENV_ID, entry_point="gvx.env:GvxEnv", nondeterministic=True)
        if _spaces is not None:
            self.action_space = _spaces.Text(max_length=max_action_length, min_length=1, charset=CHARSET)
            self.observation_space = _spaces.Dict(
                {
                    "stdout": _spaces.Text(max_length=max_output, min_length=0, charset=CHARSET),
                    "stderr": _spaces.Text(max_length=max_output, min_length=0, charset=CHARSET),
                    "exit_code": _spaces.Discrete(256),
                }
            )
        self._sandbox: Optional[Sandbox] = None
        # Sandboxes being prepared or ready, oldest first.
        self._next: deque["Future[Sandbox]"] = deque()
        # Up to `warm` threads prepare sandboxes, another retires them, so
        # neither a boot nor a shutdown is on the caller's path.
        self._preparer = ThreadPoolExecutor(max_workers=max(1, self.warm), thread_name_prefix="gvx-env-prepare")
        self._retirer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gvx-env-retire")
        self._retiring: Optional["Future[None]"] = None  # the last sandbox given to the retirer
        self._lock = threading.Lock()
        self._steps = 0
        self._last: Optional[tuple[str, ExecResult]] = None
        self._closed = False

    # The sandbox life cycle.

    def _prepare(self, after: Optional["Future[None]"] = None) -> Sandbox:
        if after is not None:
            # A sandbox prepared for later starts once the one before it has
            # shut down: a shutdown keeps the host's CPUs busy for a moment,
            # which the new sandbox would take for a loaded host and not spin
            # for its whole life (see Sandbox's spin).
            wait([after])
        options = dict(self.sandbox_options)
        clone: Optional[Volume] = None
        if self.golden is not None:
            assert self.episode_dir is not None
            clone = self.golden.clone(self.episode_dir / f"episode-{uuid.uuid4().hex[:12]}.ext4")
            options["mounts"] = [Mount(clone.path, self.volume_path), *options.get("mounts", ())]
        try:
            sb = Sandbox(self.image, **options)
        except BaseException:
            if clone is not None:
                clone.discard()
            raise
        if clone is not None:
            self._clones[id(sb)] = clone.path
        try:
            for cmd in self.setup:
                sb.exec(cmd, check=True, timeout=max(self.step_timeout, 600.0))
        except BaseException:
            self._close_and_discard(sb)
            raise
        return sb

    def _close_and_discard(self, sb: Sandbox) -> None:
        """Closes a sandbox and deletes its episode clone.

        A sandbox that did not stop cleanly is a ``RuntimeWarning``, not an
        error: it is gone all the same, its clone is deleted all the same, and
        the reset or close that retires it goes on (see :class:`GvxEnv`).
        """
        try:
            sb.close()
        except errors.SandboxUnavailableError as e:
            warnings.warn(f"gvx.GvxEnv: closing a sandbox it was done with: {e}", RuntimeWarning, stacklevel=2)
        finally:
            clone = self._clones.pop(id(sb), None)
            if clone is not None:
                clone.unlink(missing_ok=True)

    def _take_sandbox(self) -> tuple[Sandbox, bool]:
        """The next episode's sandbox, and whether it was ready before we asked.

        Any prepared sandbox will do: the first that is ready, else the first
        to become ready.
        """
        if not self._next:
            return self._prepare(), False
        was_ready = any(f.done() for f in self._next)
        done, _ = wait(self._next, return_when=FIRST_COMPLETED)
        future = next(f for f in self._next if f in done)
        self._next.remove(future)
        return future.result(), was_ready

    def _top_up(self) -> None:
        """Starts preparing sandboxes until `warm` are on their way."""
        while len(self._next) < self.warm:
            self._next.append(self._preparer.submit(self._prepare, self._retiring))

    def _retire(self, sb: Optional[Sandbox]) -> None:
        if sb is not None:
            self._retiring = self._retirer.submit(self._close_and_discard, sb)

    @property
    def ready(self) -> int:
        """How many prepared sandboxes wait, ready, for the next resets."""
        return sum(1 for f in list(self._next) if f.done() and f.exception() is None)

    @property
    def sandbox(self) -> Sandbox:
        """The current episode's sandbox (after :meth:`reset`)."""
        if self._sandbox is None:
            raise errors.GvxError("no episode is running: call reset() first")
        return self._sandbox

    # The gymnasium API.

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Starts a new episode on a fresh sandbox; returns ``(observation, info)``.

        ``options`` give the episode its task, applied in this order on the
        fresh sandbox, after the environment's own ``setup``:

        - ``"upload"``: ``{host_path: guest_path}``, files or directory trees
          copied in (see :meth:`Sandbox.upload`);
        - ``"files"``: ``{guest_path: str | bytes}``, files written (their
          directories are made);
        - ``"setup"``: shell commands run in order; one that fails raises
          :class:`gvx.ExecError`.

        ::

            obs, info = env.reset(options={
                "upload": {f"tasks/{task_id}/repo": "/workspace/repo"},
                "files": {"/workspace/ISSUE.md": issue_text},
                "setup": ["cd /workspace/repo && git checkout -q " + base_commit],
            })
        """
        if self._closed:
            raise errors.SandboxClosedError("the environment is closed; create a new GvxEnv")
        task = episode_task(options)
        if _gym is not None:
            super().reset(seed=seed)
        start = time.perf_counter()
        with self._lock:
            self._retire(self._sandbox)
            self._sandbox = None
            try:
                sb, was_ready = self._take_sandbox()
            finally:
                # A failed preparation is replaced, so the next reset does
                # not fail the same way without trying again.
                self._top_up()
            self._sandbox = sb
        self._steps = 0
        self._last = None
        task.apply(sb)
        obs = {"stdout": "", "stderr": "", "exit_code": 0}
        info = {"reset_time": time.perf_counter() - start, "warm": was_ready, "sandbox_pid": sb.pid}
        return obs, info

    def step(self, action: str) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        """Runs ``action`` as a shell command; returns ``(obs, reward, terminated, truncated, info)``."""
        sb = self.sandbox
        if not isinstance(action, str):
            raise errors.InvalidArgumentError(f"action must be a shell command string, not {type(action).__name__}")
        start = time.perf_counter()
        self._steps += 1
        try:
            result = sb.exec(action, timeout=self.step_timeout, max_output=self.max_output)
            self._last = (action, result)
            reward = float(self.reward_fn(sb, action, result)) if self.reward_fn else 0.0
            terminated = bool(self.done_fn(sb, action, result)) if self.done_fn else False
            stats = sb.stats()
        except (errors.SandboxUnavailableError, errors.TimeoutError) as e:
            if self.on_sandbox_failure == "raise":
                raise
            return self._failed_step(e, start)
        obs = {
            "stdout": _fit(result.stdout, self.max_output),
            "stderr": _fit(result.stderr, self.max_output),
            "exit_code": result.exit_code & 0xFF,
        }
        truncated = self._steps >= self.max_steps
        info = {
            "step": self._steps,
            "duration": result.duration,
            "wall_time": time.perf_counter() - start,
            "timed_out": result.timed_out,
            "output_truncated": result.truncated,
            "memory_usage": stats.memory_usage,
            "tasks": stats.tasks,
            "oom_kills": stats.oom_kills,
        }
        if self.render_mode == "human":
            print(self._render_text())
        return obs, reward, terminated, truncated, info

    def _failed_step(
        self, error: errors.GvxError, start: float
    ) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        """The step that ends an episode whose sandbox failed."""
        message = str(error)
        obs = {"stdout": "", "stderr": _fit(message, self.max_output), "exit_code": 255}
        info = {
            "step": self._steps,
            "wall_time": time.perf_counter() - start,
            "sandbox_error": message,
        }
        return obs, 0.0, False, True, info

    def _render_text(self) -> str:
        if self._last is None:
            return "(no step yet)"
        action, r = self._last
        lines = [f"$ {action}", r.stdout.rstrip("\n"), r.stderr.rstrip("\n"), f"[exit {r.exit_code}, {r.duration * 1000:.0f} ms]"]
        return "\n".join(line for line in lines if line)

    def render(self) -> Optional[str]:
        """``ansi``: the last step as text; ``human``: steps are printed as they run."""
        if self.render_mode == "ansi":
            return self._render_text()
        return None

    def close(self) -> None:
        """Closes the current and the prepared sandboxes. Calling it again does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            current, self._sandbox = self._sandbox, None
            pending, self._next = list(self._next), deque()
        if current is not None:
            self._close_and_discard(current)
        for future in pending:
            try:
                self._close_and_discard(future.result())
            except errors.GvxError:
                pass
        self._preparer.shutdown(wait=True)
        self._retirer.shutdown(wait=True)
        if self._episode_lock is not None:
            if self.episode_dir is not None:
                shutil.rmtree(self.episode_dir, ignore_errors=True)
            os.close(self._episode_lock)
            self._episode_lock = None
        if _gym is not None:
            super().close()

    def __enter__(self) -> "GvxEnv":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EnvPool:
    """``n`` environments stepped concurrently, one thread each.

    >>> pool = gvx.EnvPool(8, reward_fn=my_reward)
    >>> observations, infos = pool.reset()
    >>> observations, rewards, terminated, truncated, infos = pool.step(actions)

    ``pin_cpus=True`` pins environment ``i``'s sandboxes to the ``i``-th CPU this process
    may use (round robin), which shortens guest system calls and execs and keeps
    environments out of each other's caches; each guest then sees one CPU.
    :class:`gvx.ray.EnvPool` is the same pool spread over a Ray cluster.
    """

    def __init__(self, n: int, *, pin_cpus: bool = False, **env_options: Any) -> None:
        _pool.check_count(n)
        options = [dict(env_options) for _ in range(n)]
        if pin_cpus:
            if "cpuset" in env_options:
                raise errors.InvalidArgumentError("pin_cpus=True chooses each environment's cpuset; drop cpuset=")
            cpus = sorted(os.sched_getaffinity(0))
            for i, o in enumerate(options):
                o["cpuset"] = [cpus[i % len(cpus)]]
        self._closed = False
        self._tracker = _pool.Tracker(n)
        self._threads = ThreadPoolExecutor(max_workers=n, thread_name_prefix="gvx-pool")
        self.envs: list[GvxEnv] = []
        futures = [self._threads.submit(GvxEnv, **o) for o in options]
        try:
            self.envs = [f.result() for f in futures]
        except BaseException:
            # The environments that were made are closed with the pool.
            self.envs = [f.result() for f in futures if f.exception() is None]
            self.close()
            raise

    def __len__(self) -> int:
        return len(self.envs)

    def _check_open(self) -> None:
        if self._closed:
            raise errors.SandboxClosedError("the pool is closed; create a new gvx.EnvPool")

    def reset(
        self, *, seed: Optional[int] = None, options: Optional[Sequence[Optional[dict[str, Any]]]] = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Resets every environment; seeds are ``seed + i`` when given, and
        ``options[i]`` is environment i's episode task (see :meth:`GvxEnv.reset`)."""
        self._check_open()
        items = list(zip(_pool.seeds(seed, len(self)), _pool.reset_options(options, len(self))))
        results = list(self._threads.map(lambda item: self._reset_env(*item), enumerate(items)))
        return [r[0] for r in results], [r[1] for r in results]

    def reset_one(
        self, i: int, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Resets environment i alone (its episode ended while others run on)."""
        self._check_open()
        _pool.check_index(i, len(self))
        return self._reset_env(i, (seed, options))

    def step(
        self, actions: Sequence[str]
    ) -> tuple[list[dict[str, Any]], list[float], list[bool], list[bool], list[dict[str, Any]]]:
        """Steps environment i with actions[i], all at once."""
        self._check_open()
        checked = _pool.check_actions(actions, len(self))
        results = list(self._threads.map(lambda ia: self._step_env(*ia), enumerate(checked)))
        return (
            [r[0] for r in results],
            [float(r[1]) for r in results],
            [r[2] for r in results],
            [r[3] for r in results],
            [r[4] for r in results],
        )

    def step_one(self, i: int, action: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Steps environment i alone; returns ``(obs, reward, terminated, truncated, info)``."""
        self._check_open()
        _pool.check_index(i, len(self))
        return self._step_env(i, _pool.check_actions([action], 1)[0])

    def _reset_env(self, i: int, seed_and_options: tuple[Optional[int], Optional[dict[str, Any]]]) -> tuple[dict[str, Any], dict[str, Any]]:
        start = time.perf_counter()
        obs, info = self.envs[i].reset(seed=seed_and_options[0], options=seed_and_options[1])
        self._tracker.reset("", i, time.perf_counter() - start)
        return obs, info

    def _step_env(self, i: int, action: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        start = time.perf_counter()
        obs, reward, terminated, truncated, info = self.envs[i].step(action)
        self._tracker.step("", i, time.perf_counter() - start, terminated, truncated, info)
        return obs, float(reward), terminated, truncated, info

    def stats(self) -> _pool.PoolStats:
        """The pool's environments: live, warm and failed, and reset and step latencies."""
        self._check_open()
        warm = sum(env.ready for env in self.envs)
        return _pool.PoolStats((self._tracker.node_stats("", "", range(len(self)), warm),))

    def close(self) -> None:
        """Closes every environment. Calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        list(self._threads.map(lambda e: e.close(), self.envs))
        self._threads.shutdown(wait=True)

    # The asyncio twins: each runs its sync method in a thread of gvx.aio's
    # pool, so a rollout loop written as coroutines awaits them.

    async def reset_async(
        self, *, seed: Optional[int] = None, options: Optional[Sequence[Optional[dict[str, Any]]]] = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The asyncio twin of :meth:`reset`."""
        return await _in_thread(self.reset, seed=seed, options=options)

    async def reset_one_async(
        self, i: int, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The asyncio twin of :meth:`reset_one`."""
        return await _in_thread(self.reset_one, i, seed=seed, options=options)

    async def step_async(
        self, actions: Sequence[str]
    ) -> tuple[list[dict[str, Any]], list[float], list[bool], list[bool], list[dict[str, Any]]]:
        """The asyncio twin of :meth:`step`."""
        return await _in_thread(self.step, actions)

    async def step_one_async(self, i: int, action: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """The asyncio twin of :meth:`step_one`: each episode can be a coroutine of its own."""
        return await _in_thread(self.step_one, i, action)

    async def stats_async(self) -> _pool.PoolStats:
        """The asyncio twin of :meth:`stats`."""
        return await _in_thread(self.stats)

    async def close_async(self) -> None:
        """The asyncio twin of :meth:`close`."""
        await _in_thread(self.close)

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "EnvPool":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close_async()


_T = TypeVar("_T")


async def _in_thread(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """fn(*args, **kwargs) in a thread of gvx.aio's pool."""
    from .aio import _to_thread  # gvx.aio imports this module

    return await _to_thread(fn, *args, **kwargs)


if _gym is not None and ENV_ID not in _gym.registry:
    _gym.register(id=ENV_ID, entry_point="gvx.env:GvxEnv", nondeterministic=True)

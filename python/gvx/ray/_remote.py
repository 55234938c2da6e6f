"""Remote calls with deadlines, and the plans that wait for them.

A pool's or a remote sandbox's bookkeeping is written once, as a generator
(a Plan) that yields the calls it waits for and is sent back each call's
outcome: its value, or the exception it raised. run waits with ray.get,
run_async with await, so the sync methods and their async twins cannot drift
apart.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any, Generator, Optional, TypeVar

import ray
import ray.exceptions

# Ray's errors that mean an actor, or the node under it, is gone or cut off.
LOST = (ray.exceptions.RayActorError, ray.exceptions.NodeDiedError, ray.exceptions.GetTimeoutError)

_R = TypeVar("_R")


@dataclass(frozen=True)
class Call:
    """One remote call a pool waits for, until its deadline (time.monotonic)."""

    what: str  # who answers it, for errors: "Ray node ... (address)"
    ref: Any  # ray.ObjectRef
    deadline: float


Plan = Generator[list[Call], list[Any], _R]


def run(plan: Plan[_R], lock: threading.Lock) -> _R:
    """Runs plan, waiting for its calls with ray.get; lock is held while the
    plan runs between its waits (threads may run plans of one object at once)."""
    outcomes: Optional[list[Any]] = None
    while True:
        try:
            with lock:
                calls = next(plan) if outcomes is None else plan.send(outcomes)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        outcomes = [_outcome(call) for call in calls]


async def run_async(plan: Plan[_R], lock: threading.Lock) -> _R:
    """The asyncio twin of run: awaits the plan's calls."""
    outcomes: Optional[list[Any]] = None
    while True:
        try:
            with lock:
                calls = next(plan) if outcomes is None else plan.send(outcomes)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        outcomes = list(await asyncio.gather(*(_outcome_async(call) for call in calls)))


@dataclass(frozen=True)
class Lost:
    """A call whose actor, or the node under it, is gone or did not answer."""

    error: BaseException

    def why(self, timed_out: str) -> str:
        return _why(self.error, timed_out)


def value(outcome: Any) -> Any:
    """A call's value; Lost if its actor or node is lost. An error of the
    call's own (an environment's setup failing) is raised as itself."""
    if isinstance(outcome, LOST):
        return Lost(outcome)
    if isinstance(outcome, ray.exceptions.RayTaskError):
        cause = outcome.cause
        if isinstance(cause, LOST):
            return Lost(cause)
        if isinstance(cause, BaseException):
            raise cause from None
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _outcome(call: Call) -> Any:
    """call's value, or the exception it raised, waiting at most until its deadline."""
    try:
        return ray.get(call.ref, timeout=max(0.0, call.deadline - time.monotonic()))
    except Exception as e:  # noqa: BLE001 - the plan decides what an error means
        return e


async def _outcome_async(call: Call) -> Any:
    """The asyncio twin of _outcome."""
    try:
        return await asyncio.wait_for(asyncio.wrap_future(call.ref.future()), max(0.0, call.deadline - time.monotonic()))
    except asyncio.TimeoutError:
        return ray.exceptions.GetTimeoutError(f"no answer from {call.what} by the call's deadline")
    except Exception as e:  # noqa: BLE001 - the plan decides what an error means
        return e


def _why(error: BaseException, timed_out: str) -> str:
    """Why a host is retired, from the Ray error of a call to it."""
    if isinstance(error, ray.exceptions.GetTimeoutError):
        return f"{timed_out} and was killed"
    text = str(error).strip()
    return f"died ({type(error).__name__}: {text.splitlines()[0] if text else 'no message'})"

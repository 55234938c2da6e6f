"""Waiting, in tests, for something to happen.

A test that sleeps a fixed time for something to happen is wrong both ways:
on a loaded host the time is too short and the test fails for nothing; on a
quiet one it is too long and every run pays for it. A test instead polls for
the event itself and gives up at a deadline, failing with what did not
happen.
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, Optional

# The pause between polls starts short, for events that come at once, and
# doubles up to a bound, so that a long wait does not keep a CPU busy.
_FIRST_PAUSE = 0.001
_MAX_PAUSE = 0.05


def wait_until(
    cond: Callable[[], object], timeout: float, what: str, state: Optional[Callable[[], object]] = None
) -> None:
    """Polls cond until it returns a true value; after timeout seconds raises
    AssertionError "after <timeout> s: <what>", with state() if given (what
    to show of the state that did not change, such as a pool's stats)."""
    deadline = time.monotonic() + timeout
    pause = _FIRST_PAUSE
    while not cond():
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(_timed_out(timeout, what, state))
        time.sleep(min(pause, left))
        pause = min(2 * pause, _MAX_PAUSE)


async def await_until(
    cond: Callable[[], Awaitable[object]], timeout: float, what: str, state: Optional[Callable[[], object]] = None
) -> None:
    """wait_until for a condition that is a coroutine, such as a command run
    with gvx.aio; it pauses with asyncio.sleep, leaving the loop to others."""
    deadline = time.monotonic() + timeout
    pause = _FIRST_PAUSE
    while not await cond():
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(_timed_out(timeout, what, state))
        await asyncio.sleep(min(pause, left))
        pause = min(2 * pause, _MAX_PAUSE)


def _timed_out(timeout: float, what: str, state: Optional[Callable[[], object]]) -> str:
    message = f"after {timeout:g} s: {what}"
    return message if state is None else f"{message} ({state()})"

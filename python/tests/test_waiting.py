"""waiting.py, the tests' way to wait for an event with a deadline."""

from __future__ import annotations

import asyncio
import time

import pytest

from waiting import await_until, wait_until


def test_wait_until_returns_once_the_condition_holds() -> None:
    polls = 0

    def third() -> bool:
        nonlocal polls
        polls += 1
        return polls == 3

    wait_until(third, 60, "the third poll")
    assert polls == 3


def test_wait_until_fails_at_the_deadline_naming_what() -> None:
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"^after 0.1 s: the counter to reach 5 \(it is 4\)$"):
        wait_until(lambda: False, 0.1, "the counter to reach 5", state=lambda: "it is 4")
    assert 0.1 <= time.monotonic() - start < 5


def test_await_until_fails_at_the_deadline_naming_what() -> None:
    async def never() -> bool:
        return False

    with pytest.raises(AssertionError, match=r"^after 0.05 s: a file to appear$"):
        asyncio.run(await_until(never, 0.05, "a file to appear"))

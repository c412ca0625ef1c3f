"""Running a coroutine to completion and waiting for a condition.

Waits poll a condition until a deadline and fail the test with what was awaited, the daemon's exit code if it
died, and the tail of its log: a wait is a bound on a hang, not a timing assertion.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

#: How long one async scenario may run before it fails instead of blocking the suite.
SCENARIO_TIMEOUT_S = 300
#: Pause between two checks of a polled condition.
POLL_S = 0.05
#: Characters of a daemon's log quoted when a wait fails.
LOG_TAIL = 4000


def run(coro: Coroutine[Any, Any, T], timeout_s: float = SCENARIO_TIMEOUT_S) -> T:
    """Run one async scenario to completion on a fresh event loop; ``TimeoutError`` after ``timeout_s``."""
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


def _tail(log: Path | Callable[[], str] | None) -> str:
    if log is None:
        return ""
    text = log() if callable(log) else log.read_text(encoding="utf-8", errors="replace")
    return ":\n" + text[-LOG_TAIL:]


def wait_until(
    what: str,
    check: Callable[[], T],
    timeout_s: float,
    *,
    proc: subprocess.Popen | None = None,
    log: Path | Callable[[], str] | None = None,
    interval_s: float = POLL_S,
) -> T:
    """Poll ``check()`` until it returns something truthy and return that value.

    Fails the test when ``timeout_s`` passes first, or as soon as ``proc`` (the process being waited on)
    has exited; the message names ``what`` and quotes the end of ``log`` (a file, or a callable giving text).
    """
    end = time.monotonic() + timeout_s
    pause = threading.Event()
    while True:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the process exited with {proc.returncode} while waiting for {what}{_tail(log)}")
        if time.monotonic() > end:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}{_tail(log)}")
        pause.wait(interval_s)


async def wait_until_async(
    what: str, check: Callable[[], T | Awaitable[T]], timeout_s: float, *, interval_s: float = POLL_S
) -> T:
    """:func:`wait_until` inside a coroutine: ``check`` may be sync or async; the loop keeps running meanwhile."""
    end = time.monotonic() + timeout_s
    while True:
        value = check()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > end:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(interval_s)

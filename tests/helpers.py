"""Helpers shared by the test files: run a coroutine, find and launch ``cairn``, wait for a condition.

Import them as ``from helpers import run, wait_until`` (pytest puts ``tests/`` on ``sys.path``, as it does
for ``conftest``). Waits poll a condition until a deadline and fail the test with what was awaited, the
daemon's exit code if it died, and the tail of its log: a wait is a bound on a hang, not a timing assertion.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
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


def cairn_executable() -> str:
    """The ``cairn`` console script installed next to this interpreter (the venv's), else the one on PATH."""
    exe = Path(sys.executable).parent / "cairn"
    if exe.exists():
        return str(exe)
    found = shutil.which("cairn")
    if not found:
        pytest.fail(f"the `cairn` console script is not installed next to {sys.executable}; run `make venv`")
    return found


def cairn_env(home: Path) -> dict[str, str]:
    """This process's environment without any ``CAIRN_*``, with every Cairn folder inside ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update(
        {
            "CAIRN_DATA_DIR": str(home / "data"),
            "CAIRN_CONFIG_DIR": str(home / "config"),
            "CAIRN_LOG_DIR": str(home / "log"),
            "CAIRN_KEYRING": "file",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def read_service(home: Path, pid: int) -> dict | None:
    """``<home>/data/service.json`` once the daemon ``pid`` wrote it with its URL; None until then."""
    try:
        info = json.loads((home / "data" / "service.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if info.get("pid") == pid and info.get("url") else None


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

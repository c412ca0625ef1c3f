"""``cairn serve`` spawned in a session of its own, so its process group holds every process it starts: killed
with ``kill -9``, its orphans found in ``/proc``, waited on until serving and until indexed (the crash tests)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from support.cli import cairn_env, cairn_executable, read_service
from support.waits import wait_until

START_DEADLINE_S = 180  # a start takes ~3 s quiet; > 60 s was seen with the 2 cores shared (load average 16)


INDEX_DEADLINE_S = 300  # embedding a small vault: ~30 s quiet; > 120 s was seen with the 2 cores shared (load 12)


#: Seconds the processes a killed daemon started may take to exit (a bound on a hang, not a timing assertion).
ORPHAN_DEADLINE_S = 15


def spawn(home: Path, vault: Path, log_name: str = "serve.stderr") -> subprocess.Popen:
    with open(home / log_name, "ab") as err:
        return subprocess.Popen(
            [cairn_executable(), "serve", "--vault", str(vault), "--port", "0", "--no-tray"],
            env=cairn_env(home),
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its process group holds every process it starts (see group_processes)
        )


def group_processes(pgid: int) -> dict[int, str]:
    """``{pid: command line}`` of the live processes (zombies left out) of process group ``pgid``, from /proc."""
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
    return found


def kill_9(proc: subprocess.Popen) -> dict[int, str]:
    """SIGKILL the daemon ``proc`` (started by :func:`spawn`), then wait up to :data:`ORPHAN_DEADLINE_S` for
    every process it started to end. Returns those still alive then (``{pid: command line}``), after
    killing them so that they do not pile up."""
    proc.kill()
    proc.wait(timeout=30)
    end = time.monotonic() + ORPHAN_DEADLINE_S
    pause = threading.Event()
    while (left := group_processes(proc.pid)) and time.monotonic() < end:
        pause.wait(0.02)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


def wait_serving(home: Path, proc: subprocess.Popen, deadline_s: float = START_DEADLINE_S) -> str:
    """The daemon's URL once its service.json names this pid (store open and checked, HTTP up)."""
    info = wait_until(
        "cairn serve to start",
        lambda: read_service(home, proc.pid),
        deadline_s,
        proc=proc,
        log=home / "serve.stderr",
        interval_s=0.02,
    )
    return info["url"]


def request_json(method: str, url: str, path: str, token: str) -> dict:
    """One authorised request to the daemon; asserts 200 and returns the JSON body."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request(method, path, headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        assert resp.status == 200, body
        return body
    finally:
        conn.close()


def get_json(url: str, path: str, token: str) -> dict:
    return request_json("GET", url, path, token)


def token_for(home: Path, vault: Path) -> str:
    return subprocess.run(
        [cairn_executable(), "token", "--vault", str(vault)],
        env=cairn_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()


@contextmanager
def serving(home: Path, vault: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    proc = spawn(home, vault)
    try:
        yield proc, wait_serving(home, proc)
    finally:
        if proc.poll() is None:
            kill_9(proc)


def wait_indexed(url: str, token: str, proc: subprocess.Popen, notes: int | None = None) -> dict:
    end = time.monotonic() + INDEX_DEADLINE_S
    while time.monotonic() < end:
        stats = get_json(url, "/index/stats", token)
        if stats["pending"] == 0 and not stats["indexing"] and (notes is None or stats["notes"] == notes):
            return stats
        assert proc.poll() is None, "the daemon died"
        time.sleep(0.05)
    pytest.fail(f"not indexed in {INDEX_DEADLINE_S} s: {stats}")

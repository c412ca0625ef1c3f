"""The ``cairn`` console script in subprocesses: where it is, the environment it runs in (every Cairn folder in a
test's own home), and the service file a daemon writes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


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


NOT_FOUND = "I couldn't find this in your indexed notes."


TIMEOUT_S = 180


def run_cairn(
    home: Path, *args: str, check: bool = True, cwd: Path | None = None, stdin=None, env: dict | None = None
) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [cairn_executable(), *args],
        env={**cairn_env(home), **(env or {})},
        cwd=cwd,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    if check and proc.returncode != 0:
        pytest.fail(f"cairn {' '.join(args)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def run_json(home: Path, *args: str) -> dict:
    """Run a ``--json`` command; its whole stdout must be one JSON document (logs go to stderr)."""
    proc = run_cairn(home, *args)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"stdout of cairn {' '.join(args)} is not pure JSON:\n{proc.stdout}\nstderr:\n{proc.stderr}")


def _serve_and_wait(home: Path, vault: Path) -> tuple[subprocess.Popen, str]:
    """Start `cairn serve` on ``vault``; return it and its URL once service.json names its pid."""
    import time

    home.mkdir(parents=True, exist_ok=True)
    err = open(home / "serve.stderr", "wb")
    proc = subprocess.Popen(
        [cairn_executable(), "serve", "--vault", str(vault), "--port", "0", "--no-tray"],
        env=cairn_env(home),
        stdout=subprocess.DEVNULL,
        stderr=err,
        stdin=subprocess.DEVNULL,
    )
    err.close()
    end = time.monotonic() + TIMEOUT_S
    while time.monotonic() < end:
        try:
            info = json.loads((home / "data" / "service.json").read_text(encoding="utf-8"))
            if info.get("pid") == proc.pid and info.get("url"):
                return proc, info["url"]
        except (OSError, ValueError):
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"cairn serve did not start:\n{(home / 'serve.stderr').read_text()[-3000:]}")

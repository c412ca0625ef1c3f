"""The ``cairn`` console script in subprocesses: where it is, the environment it runs in (every Cairn folder in a
test's own home), and the service file a daemon writes."""

from __future__ import annotations

import json
import os
import shutil
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

"""The wheel ``make wheel`` builds (``pip wheel --no-deps .``), built from a copy of the source tree so the checkout
keeps no ``build/`` folder, and :func:`pip` for the tests that install it. The ``cairn_wheel`` fixture
(conftest.py) builds it once per session."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PIP_TIMEOUT_S = 900
#: Not part of the source tree a wheel is built from.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "node_modules", "build", "dist", ".eval-cache", ".build-model-venv", "__pycache__",
    ".pytest_cache", "*.egg-info", "tests", "docs", "examples",
)  # fmt: skip
#: pip's words for "the package index could not be reached".
OFFLINE = re.compile(
    r"Failed to establish a new connection|Temporary failure in name resolution|Network is unreachable|"
    r"No matching distribution found|Could not find a version that satisfies",
    re.I,
)


def pip(args: list[str], what: str) -> None:
    """``python -m pip ARGS`` with this interpreter's pip. Skips the test (one line and pip's tail) when the package
    registry cannot be reached; any other failure fails it."""
    # Without PYTHONPATH: a checkout on it (daemon/, with an editable install's cairn_notes.egg-info) would make
    # pip take Cairn as installed already and leave it out of a new venv.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", *args], env=env, capture_output=True, text=True, timeout=PIP_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"pip ({what}) took longer than {PIP_TIMEOUT_S} s")
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if OFFLINE.search(output):
            pytest.skip(f"pip could not reach the package registry ({what}):\n{output[-1500:]}")
        raise AssertionError(f"pip ({what}) failed (exit {done.returncode}):\n{output[-4000:]}")


def build_wheel(root: Path) -> Path:
    """Build ``cairn_notes-<version>-py3-none-any.whl`` into ``root/dist`` → its path."""
    source = root / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=NOT_SOURCE)
    pip(["wheel", "--quiet", "--no-deps", "--wheel-dir", str(root / "dist"), str(source)], "build the wheel")
    shutil.rmtree(source)
    (wheel,) = (root / "dist").glob("cairn_notes-*.whl")
    return wheel

"""The Obsidian plugin built by ``npm ci && npm run build`` once per session (skipped when Node.js or the npm
registry is out of reach)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support.vaults import REPO

PLUGIN_DIR = REPO / "packaging" / "obsidian-plugin"


NPM_TIMEOUT_S = 600


#: npm's words for "the registry could not be reached" (DNS, refused, timeouts, proxies).
_OFFLINE = re.compile(
    r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|"
    r"network request to .* failed|request to .* failed, reason",
    re.I,
)


def _run(args: list[str], what: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CI": "true", "NO_COLOR": "1", "FORCE_COLOR": "0"}
    try:
        return subprocess.run(args, cwd=PLUGIN_DIR, env=env, capture_output=True, text=True, timeout=NPM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{' '.join(args)}` ({what}) took longer than {NPM_TIMEOUT_S} s")


@functools.cache
def _build() -> tuple[str | None, str]:
    """Run ``npm ci`` then ``npm run build`` once per session → (skip reason or None, build output)."""
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        return "Node.js/npm are not installed: the Obsidian plugin cannot be built here", ""
    ci = _run([npm, "ci", "--no-audit", "--no-fund"], "install the locked dependencies")
    if ci.returncode != 0:
        output = ci.stdout + ci.stderr
        if _OFFLINE.search(output):
            return f"`npm ci` could not reach the npm registry:\n{output[-1500:]}", ""
        raise AssertionError(f"`npm ci` failed (exit {ci.returncode}):\n{output[-4000:]}")
    build = _run([npm, "run", "build"], "type-check and bundle")
    assert build.returncode == 0, (
        f"`npm run build` failed (exit {build.returncode}):\n{(build.stdout + build.stderr)[-4000:]}"
    )
    return None, build.stdout + build.stderr


def built_plugin() -> Path:
    """The plugin folder after a successful ``npm ci && npm run build`` (skips the test when that cannot run)."""
    reason, _ = _build()
    if reason:
        pytest.skip(reason)
    return PLUGIN_DIR

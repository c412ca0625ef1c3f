"""The Obsidian plugin's own build and unit tests, run from pytest so that `make test` covers them.

``npm ci && npm run build && npm test`` in packaging/obsidian-plugin/ (vitest: the SSE parser with
events split at every byte, citation linking, the client's error states, and the sidebar view on the
harness's Obsidian stand-in in happy-dom). Skipped, with the reason, when Node.js
or npm is missing or when ``npm ci`` cannot reach the npm registry; any other failure fails.

The built files are shipped inside the Python package (``cairn/obsidian_plugin/``, what
``cairn plugin install`` copies): a test checks that the shipped copy is the current build.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # npm builds and type-checks the plugin, vitest runs

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "packaging" / "obsidian-plugin"
SHIPPED_DIR = REPO / "daemon" / "cairn" / "obsidian_plugin"
PLUGIN_FILES = ("main.js", "manifest.json", "styles.css")
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


def test_npm_build_type_checks_and_produces_the_three_files_obsidian_loads():
    folder = built_plugin()
    for name in PLUGIN_FILES:
        assert (folder / name).is_file(), f"{name} missing after npm run build"
    main = (folder / "main.js").read_text(encoding="utf-8")
    # CommonJS with `obsidian` left to the app, as Obsidian loads plugins.
    assert 'require("obsidian")' in main
    assert "module.exports" in main
    import json

    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["id"] == "cairn" and manifest["isDesktopOnly"] is True


def test_vitest_unit_tests_pass():
    folder = built_plugin()
    result = _run([shutil.which("npm") or "npm", "test"], "vitest")
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"`npm test` failed:\n{output[-6000:]}"
    passed = re.search(r"Tests\s+(\d+) passed", output)
    assert passed and int(passed.group(1)) >= 50, f"expected the vitest suite to run (≥ 50 tests):\n{output[-3000:]}"
    for name in ("sse.test.ts", "citations.test.ts", "api.test.ts", "view.test.ts"):
        assert name in output, f"{name} did not run:\n{output[-3000:]}"
    assert folder.is_dir()


def test_the_plugin_shipped_in_the_python_package_is_the_current_build():
    folder = built_plugin()
    for name in PLUGIN_FILES:
        shipped = SHIPPED_DIR / name
        assert shipped.is_file(), f"{shipped} is missing; run `npm run ship` in packaging/obsidian-plugin"
        assert shipped.read_bytes() == (folder / name).read_bytes(), (
            f"{shipped} differs from a fresh build of packaging/obsidian-plugin; run `npm run ship` there and commit it"
        )

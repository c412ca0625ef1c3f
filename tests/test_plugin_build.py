"""The Obsidian plugin's own build and unit tests, run from pytest so that `make test` covers them.

``npm ci && npm run build && npm test`` in packaging/obsidian-plugin/ (vitest: the SSE parser with
events split at every byte, citation linking, the client's error states, and the sidebar view on the
harness's Obsidian stand-in in happy-dom). Skipped, with the reason, when Node.js
or npm is missing or when ``npm ci`` cannot reach the npm registry; any other failure fails.

The built files are shipped inside the Python package (``cairn/obsidian_plugin/``, what
``cairn plugin install`` copies): a test checks that the shipped copy is the current build.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from support.plugin_build import _run, built_plugin

pytestmark = pytest.mark.slow  # npm builds and type-checks the plugin, vitest runs

REPO = Path(__file__).resolve().parents[1]
SHIPPED_DIR = REPO / "daemon" / "cairn" / "obsidian_plugin"
PLUGIN_FILES = ("main.js", "manifest.json", "styles.css")


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

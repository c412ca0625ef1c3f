"""The Obsidian plugin's release zip (``make plugin-zip``, packaging/plugin_zip.py) as an Obsidian user gets it.

``make plugin-zip`` runs with only Python and make (this interpreter as ``PYTHON``, no venv, no Node.js). The
zip holds exactly ``main.js``, ``manifest.json`` and ``styles.css`` at its top level, the build shipped in the
package, with Cairn's version in its name and manifest; a version out of step stops the build with the file to
change. The end-to-end test unpacks the zip into ``<vault>/.obsidian/plugins/cairn/`` of a copy of
examples/vault and loads those files in the browser harness (packaging/obsidian-plugin/harness/, headless
Chromium) against a live ``cairn serve`` on that vault: the sidebar comes up, shows the index and finds a note.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cairn import __version__
from support.vaults import REPO, SAMPLE_VAULT
from support.waits import wait_until

PLUGIN_FILES = ("main.js", "manifest.json", "styles.css")
SHIPPED = REPO / "daemon" / "cairn" / "obsidian_plugin"
HARNESS = REPO / "packaging" / "obsidian-plugin" / "harness"


def _plugin_zip_module():
    spec = importlib.util.spec_from_file_location("plugin_zip", REPO / "packaging" / "plugin_zip.py")
    assert spec and spec.loader, "packaging/plugin_zip.py is missing"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_plugin_zip(dist: Path) -> Path:
    """``make plugin-zip DIST=dist`` with this interpreter as the only Python → the one zip it wrote."""
    done = subprocess.run(
        ["make", "-C", str(REPO), "plugin-zip", f"DIST={dist}", f"PYTHON={sys.executable}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"make plugin-zip failed:\n{done.stdout}\n{done.stderr}"
    zips = sorted(dist.glob("*.zip"))
    assert len(zips) == 1, zips
    return zips[0]


pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def test_make_plugin_zip_holds_the_three_shipped_files_at_the_top_with_cairns_version(tmp_path):
    path = make_plugin_zip(tmp_path / "dist")
    assert path.name == f"cairn-obsidian-{__version__}.zip"
    with zipfile.ZipFile(path) as zf:
        assert sorted(zf.namelist()) == sorted(PLUGIN_FILES)
        for name in PLUGIN_FILES:
            assert zf.read(name) == (SHIPPED / name).read_bytes(), f"{name} in the zip is not the shipped build"
        assert json.loads(zf.read("manifest.json"))["version"] == __version__
    # The same files make the same zip (no build time inside), so a release can be rebuilt and compared.
    again = make_plugin_zip(tmp_path / "again")
    assert again.read_bytes() == path.read_bytes()


def test_a_plugin_manifest_out_of_step_with_cairns_version_stops_the_zip(tmp_path):
    plugin_zip = _plugin_zip_module()
    source = tmp_path / "plugin"
    shutil.copytree(SHIPPED, source)
    manifest = json.loads((source / "manifest.json").read_text(encoding="utf-8"))
    manifest["version"] = "0.0.1" if __version__ != "0.0.1" else "0.0.2"
    (source / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(plugin_zip.ReleaseError, match=f"Cairn is {__version__}"):
        plugin_zip.build_zip(tmp_path / "dist", source)
    assert not list((tmp_path / "dist").glob("*")), "a zip was written anyway"


@pytest.fixture
def unpacked_vault(tmp_path) -> Path:
    """A copy of examples/vault with the zip unpacked into .obsidian/plugins/cairn/, as docs/plugin.md says."""
    vault = tmp_path / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    with zipfile.ZipFile(make_plugin_zip(tmp_path / "dist")) as zf:
        zf.extractall(vault / ".obsidian" / "plugins" / "cairn")
    return vault


@pytest.mark.e2e
@pytest.mark.slow
def test_the_unpacked_zip_loads_in_the_harness_and_talks_to_the_daemon(tmp_path, unpacked_vault):
    e2e = pytest.importorskip("support.plugin_page", reason="the `playwright` Python package is not installed")
    from support.daemons import INDEX_DEADLINE_S, running_daemon

    if not Path(e2e.CHROMIUM).exists():
        pytest.skip(f"no Chromium at {e2e.CHROMIUM} (Debian: apt-get install -y chromium; or set CAIRN_CHROMIUM)")
    plugin = unpacked_vault / ".obsidian" / "plugins" / "cairn"
    page_root = tmp_path / "page"
    shutil.copytree(HARNESS, page_root)
    for name in PLUGIN_FILES:
        shutil.copy(plugin / name, page_root / name)
    (page_root / "files.json").write_text(json.dumps(e2e.vault_files(unpacked_vault)), encoding="utf-8")
    server = e2e.serve_folder(page_root)
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text(f'cors_origins = ["app://obsidian.md", "{origin}"]\n', "utf-8")
    try:
        with running_daemon(home, unpacked_vault) as daemon:
            wait_until(
                "the first index of the vault",
                lambda: (
                    (s := daemon.get_json("/index/stats", token=daemon.token))[0] == 200
                    and s[1]["pending"] == 0
                    and not s[1]["indexing"]
                ),
                INDEX_DEADLINE_S,
                proc=daemon.proc,
                log=home / "serve.stderr",
            )
            _drive_the_sidebar(e2e, origin, daemon, notes=len(e2e.vault_files(unpacked_vault)))
    finally:
        server.shutdown()
        server.server_close()


def _drive_the_sidebar(e2e, origin: str, daemon, notes: int) -> None:
    """Open the harness page with the unpacked plugin, check its status line and one search."""
    with e2e.playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=e2e.CHROMIUM, headless=True, args=e2e.CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            settings = {"daemonUrl": daemon.url, "token": daemon.token, "topK": 8, "defaultTags": []}
            page.add_init_script(f"window.__cairnData = {json.dumps(settings)};")
            page.goto(origin + "/index.html")
            page.wait_for_selector("body[data-ready]", timeout=e2e.WAIT_MS)
            assert page.get_attribute("body", "data-ready") == "true", page.get_attribute("body", "data-error")
            status = page.locator(".cairn-status").filter(has_text="notes")
            status.wait_for(timeout=e2e.WAIT_MS)
            assert f"{notes} notes" in status.inner_text()
            page.click(".cairn-tab[data-tab='search']")
            page.locator(".cairn-search-input").fill("sourdough starter")
            first = page.locator(".cairn-result-title").first
            first.wait_for(timeout=e2e.WAIT_MS)
            assert "Sourdough" in first.inner_text(), first.inner_text()
            assert not errors, f"uncaught errors in the page: {errors}"
        finally:
            browser.close()

"""The built Obsidian plugin on its harness page (packaging/obsidian-plugin/harness/: a stand-in for the Obsidian
API) in headless Chromium driven by Playwright: the page served from a temp folder, the vault it shows (a copy of
examples/vault with a PDF), the browser, screenshots."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import pdfgen
from support.pdfgen import GUIDE_PAGES
from support.plugin_build import built_plugin
from support.vaults import REPO, SAMPLE_VAULT

DOCS = REPO / "docs"


CHROMIUM = os.environ.get("CAIRN_CHROMIUM", "/usr/bin/chromium")


#: Flags for a root, offline, headless Chromium (no sandbox as root; no calls home on a closed network).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


WAIT_MS = 30_000


PDF_PATH = "Attachments/Field guide.pdf"


playwright_sync = pytest.importorskip("playwright.sync_api", reason="the `playwright` Python package is not installed")


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
        pass


def serve_folder(folder: Path) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, name="harness-http", daemon=True).start()
    return server


def vault_files(vault: Path) -> list[str]:
    return sorted(
        p.relative_to(vault).as_posix()
        for p in vault.rglob("*")
        if p.suffix in (".md", ".pdf") and ".obsidian" not in p.parts
    )


@pytest.fixture(scope="module")
def plugin_vault(tmp_path_factory) -> Path:
    """A copy of examples/vault with a 4-page PDF attachment whose page 3 answers PDF_QUESTION."""
    vault = tmp_path_factory.mktemp("plugin-vault") / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    (vault / "Attachments").mkdir()
    pdfgen.text_pdf(vault / PDF_PATH, GUIDE_PAGES, title="Moorland Field Guide")
    return vault


@pytest.fixture(scope="module")
def harness(tmp_path_factory, plugin_vault) -> Iterator[str]:
    """The harness page (stand-in API + the freshly built main.js and styles.css) → its URL."""
    plugin = built_plugin()
    root = tmp_path_factory.mktemp("harness")
    for item in (plugin / "harness").iterdir():
        shutil.copy(item, root / item.name)
    for name in ("main.js", "styles.css", "manifest.json"):
        shutil.copy(plugin / name, root / name)
    (root / "files.json").write_text(json.dumps(vault_files(plugin_vault)), encoding="utf-8")
    server = serve_folder(root)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install -y chromium; or set CAIRN_CHROMIUM)")
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


#: Screenshots go to docs/ only when asked (CAIRN_UPDATE_SCREENSHOTS=1), so a test run leaves the checkout clean.
SHOTS = DOCS if os.environ.get("CAIRN_UPDATE_SCREENSHOTS") == "1" else None


def shoot(page, name: str) -> None:
    folder = SHOTS or Path(tempfile.gettempdir()) / "cairn-plugin-screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / name))

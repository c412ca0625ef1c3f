"""The built Obsidian plugin says "Still indexing: results may be incomplete" while the index is being embedded,
and stops saying it once every note has its vectors: headless Chromium on the plugin's harness page (see
tests/test_plugin_e2e.py) against the real HTTP app on 127.0.0.1, over an index caught half-embedded the way a
first index leaves it (tests/test_coverage.py). The app runs in this process so the test decides when the rest of
the vectors are written. Nothing sleeps: every wait is Playwright's wait-for-condition with a timeout.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn.app import Cairn
from cairn.http import make_app, serve
from support import plugin_page
from support.cairns import open_cairn, services_of
from support.half_embedded import half_embedded
from support.http_client import TOKEN
from support.plugin_page import WAIT_MS, shoot

browser, harness, plugin_vault = plugin_page.browser, plugin_page.harness, plugin_page.plugin_vault  # the fixtures

pytestmark = pytest.mark.e2e  # the built plugin in a real browser against the real HTTP app

STOP_S = 60


@pytest.fixture
def live(tmp_path: Path, embedder: Any, harness: str) -> Iterator[tuple[Cairn, str]]:
    """(a Cairn over the half-embedded index, the URL of the HTTP app serving it, the harness origin allowed)."""
    home, vault = half_embedded(tmp_path, embedder)
    cairn = open_cairn(
        vault, home / "data", embedder, config_dir=home / "config", cors_origins=("app://obsidian.md", harness)
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="http-app", daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(
        serve(make_app(services_of(cairn), token=TOKEN), "127.0.0.1", 0), loop
    ).result(STOP_S)
    try:
        yield cairn, server.url
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(STOP_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(STOP_S)
        loop.close()
        cairn.close()


@pytest.fixture
def page(browser: Any, harness: str, live: tuple[Cairn, str]) -> Iterator[Any]:
    """The harness page with the plugin loaded, its settings pointing at the live app."""
    context = browser.new_context(viewport={"width": 1280, "height": 820}, device_scale_factor=1)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    settings = {"daemonUrl": live[1], "token": TOKEN, "topK": 8, "defaultTags": []}
    page.add_init_script(f"window.__cairnData = {json.dumps(settings)};")
    page.goto(harness + "/index.html")
    page.wait_for_selector("body[data-ready]", timeout=WAIT_MS)
    assert page.get_attribute("body", "data-ready") == "true", page.get_attribute("body", "data-error")
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def test_search_and_ask_say_still_indexing_until_every_note_is_embedded(page, live):
    cairn, _ = live
    page.click(".cairn-tab[data-tab='search']")
    page.locator(".cairn-search-input").press_sequentially("quillwort", delay=20)
    notice = page.locator(".cairn-search-results .cairn-coverage")
    notice.wait_for(timeout=WAIT_MS)
    assert "Still indexing: results may be incomplete" in notice.inner_text()
    assert "2 of 5 notes are not yet searchable by meaning" in notice.inner_text()
    assert page.locator(".cairn-result-title").first.inner_text().startswith("Lake.md")  # found by its words
    shoot(page, "plugin-still-indexing.png")

    page.click(".cairn-tab[data-tab='ask']")
    page.fill(".cairn-question", "Where does the quillwort grow?")
    page.click(".cairn-ask-button")
    page.locator(".cairn-elapsed").wait_for(timeout=WAIT_MS)
    assert "Still indexing: results may be incomplete" in page.locator(".cairn-ask-note .cairn-coverage").inner_text()

    cairn.indexing.index()  # the rest of the vectors are written
    page.click(".cairn-tab[data-tab='search']")
    page.fill(".cairn-search-input", "quillwort shore")
    page.locator(".cairn-result-snippet mark", has_text="shore").first.wait_for(timeout=WAIT_MS)
    assert page.locator(".cairn-search-results .cairn-coverage").count() == 0

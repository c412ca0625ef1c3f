"""The built Obsidian plugin end to end: headless Chromium (Playwright driving the system Chromium)
loads packaging/obsidian-plugin/main.js in a small harness page with a stand-in for the Obsidian API
(packaging/obsidian-plugin/harness/), against a live ``cairn serve`` on examples/vault.

The daemon's answers are written by a local OpenAI-compatible STUB model (the one fake the team rules
allow for an LLM) so the stream can be held part-way and its incremental rendering seen:

- a question about tomatoes streams a few words, holds until the test releases it, then finishes;
- a question about garlic gets HTTP 500, so the daemon answers from passages (``grounded: false``);
- a question about sourdough streams a few words, then holds until the client goes away (Stop);
- the follow-up after the garlic question gets a short answer about storing garlic at once.

The harness page's origin (``http://127.0.0.1:<port>``) is added to the daemon's ``cors_origins`` in
this test's config.toml only; in Obsidian the plugin runs at ``app://obsidian.md``, the default.
Screenshots: docs/plugin-*.png (docs/plugin.md) with CAIRN_UPDATE_SCREENSHOTS=1, else a temp
folder (a test run leaves the checkout unchanged). Nothing sleeps: every wait is
Playwright's wait-for-condition with a timeout, or a threading.Event.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import plugin_page
from support.daemons import INDEX_DEADLINE_S, running_daemon
from support.plugin_page import PDF_PATH, WAIT_MS, shoot, vault_files
from support.waits import wait_until

browser, harness, plugin_vault = plugin_page.browser, plugin_page.harness, plugin_page.plugin_vault  # the fixtures

pytestmark = pytest.mark.e2e  # the built plugin in a real browser against a real daemon

REPO = Path(__file__).resolve().parents[1]
SAMPLE_VAULT = REPO / "examples" / "vault"
#: How the sidebar shows a hit's relevance (packaging/obsidian-plugin/src/relevance.ts).
RELEVANCE_WORDS = re.compile(r"(strong match|good match|exact words|similar words|weak match)$")
NOT_RUNNING = "Cairn isn't running for this vault — start it with `cairn serve --vault <this vault's folder>`"

TOMATO_QUESTION = "When do I sow tomatoes, and when do they go into the polytunnel?"
GARLIC_QUESTION = "How deep do I plant garlic cloves?"
SOURDOUGH_QUESTION = "How do I feed my sourdough starter?"
#: Only meaningful after GARLIC_QUESTION: alone it is not found in the sample vault.
FOLLOW_UP_QUESTION = "And how do I store them after lifting?"
OFF_CORPUS_QUESTION = "What is the capital of France?"
#: The Pests note says how to keep slugs off, nothing about lettuce: weak evidence, answered with the closest passages.
WEAK_QUESTION = "How do I stop slugs eating my lettuce?"
#: Answered on page 3 of the PDF added to the vault copy; the stub model refuses it (HTTP 500), so the daemon
#: answers from passages and the citation is the daemon's own.
PDF_QUESTION = "What does the PDF say about building a cairn that lasts the winter?"


# -- the stub model -------------------------------------------------------------------------------


class StubModel:
    """An OpenAI-compatible chat-completions server on 127.0.0.1 (aiohttp, in its own thread)."""

    FIRST = ["Sow", " tomatoes", " indoors", " in", " the", " first", " week", " of", " March", " [1]", "."]
    REST = [
        " Plant",
        " them",
        " out",
        " in",
        " the",
        " polytunnel",
        " in",
        " mid-May",
        ",",
        " 45",
        " cm",
        " apart",
        " [1]",
        ",",
        " and",
        " feed",
        " them",
        " comfrey",
        " tea",
        " once",
        " the",
        " first",
        " truss",
        " has",
        " set",
        " [4]",
        ".",
    ]

    STORE = [
        "Dry",
        " them",
        " for",
        " two",
        " to",
        " three",
        " weeks",
        " in",
        " the",
        " shed",
        ",",
        " then",
        " store",
        " them",
        " somewhere",
        " cool",
        " and",
        " dry",
        " [2]",
        ".",
    ]

    def __init__(self) -> None:
        self.url = ""
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="stub-llm", daemon=True)
        self.held = threading.Event()  # the stream is paused part-way (set by the stub)
        self.cancelled = threading.Event()  # a held stream's client went away (set by the stub)
        self._release: asyncio.Event | None = None
        self._runner = None
        self.questions: list[str] = []
        self.messages: list[list[dict]] = []  # each request's chat messages

    def start(self) -> StubModel:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=30)
        return self

    def release(self) -> None:
        """Let a held tomato answer finish."""
        self.loop.call_soon_threadsafe(self._release.set)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)

    async def _start(self) -> None:
        from aiohttp import web

        self._release = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)

        async def models(request):
            return web.json_response({"data": [{"id": "stub"}]})

        app.router.add_get("/v1/models", models)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"

    @staticmethod
    def _chunk(text: str) -> bytes:
        return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}).encode() + b"\n\n"

    async def _chat(self, request):
        from aiohttp import web

        body = await request.json()
        user = next((m["content"] for m in reversed(body["messages"]) if m["role"] == "user"), "")
        question = user.rpartition("Question:")[2].strip()  # cairn.prompt: context passages, then "Question: ..."
        self.questions.append(question)
        self.messages.append(body["messages"])
        if "garlic" in question.lower() or "pdf" in question.lower():
            return web.json_response({"error": {"message": "model exploded"}}, status=500)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if question == FOLLOW_UP_QUESTION:
            for piece in self.STORE:
                await resp.write(self._chunk(piece))
            await resp.write(b"data: [DONE]\n\n")
            return resp
        try:
            for piece in self.FIRST:
                await resp.write(self._chunk(piece))
            self.held.set()
            if "sourdough" in question.lower():
                await asyncio.Event().wait()  # until the client leaves (Stop) and the daemon cancels us
            await self._release.wait()
            self._release.clear()
            for piece in self.REST:
                await resp.write(self._chunk(piece))
            await resp.write(b"data: [DONE]\n\n")
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return resp


# -- the harness page ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stub_model() -> Iterator[StubModel]:
    stub = StubModel().start()
    try:
        yield stub
    finally:
        stub.release()
        stub.stop()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, harness, stub_model, plugin_vault):
    """``cairn serve`` on the copy of examples/vault with a PDF; the harness origin allowed by this test's config
    only; indexed (the PDF too)."""
    home = tmp_path_factory.mktemp("plugin-daemon")
    (home / "config").mkdir()
    (home / "config" / "config.toml").write_text(
        f'cors_origins = ["app://obsidian.md", "{harness}"]\n\n'
        f'[llm]\nbase_url = "{stub_model.url}"\nmodel = "stub"\nfirst_token_timeout_s = 20\nidle_timeout_s = 20\n',
        encoding="utf-8",
    )
    with running_daemon(home, plugin_vault) as d:

        def indexed():
            status, stats = d.get_json("/index/stats", token=d.token)
            return (
                stats
                if status == 200 and stats["pdfs"] == 1 and stats["pending"] == 0 and not stats["indexing"]
                else None
            )

        wait_until(
            "the first index of examples/vault", indexed, INDEX_DEADLINE_S, proc=d.proc, log=d.home / "serve.stderr"
        )
        yield d


@pytest.fixture
def sidebar(browser, harness, daemon):
    """A fresh harness page with the plugin loaded in the daemon's vault (it checks the daemon serves it), its
    settings pointing at the daemon."""
    context = browser.new_context(viewport={"width": 1280, "height": 820}, device_scale_factor=1)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    settings = {"daemonUrl": daemon.url, "token": daemon.token, "topK": 8, "defaultTags": []}
    page.add_init_script(
        f"window.__cairnData = {json.dumps(settings)}; window.__vaultPath = {json.dumps(str(daemon.vault.resolve()))};"
    )
    page.goto(harness + "/index.html")
    page.wait_for_selector("body[data-ready]", timeout=WAIT_MS)
    assert page.get_attribute("body", "data-ready") == "true", page.get_attribute("body", "data-error")
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def ask(page, question: str) -> None:
    page.fill(".cairn-question", question)
    page.click(".cairn-ask-button")


# -- the tests -------------------------------------------------------------------------------------


def test_the_status_line_shows_the_index_counts(sidebar, daemon):
    notes = len(vault_files(SAMPLE_VAULT)) + 1  # and the PDF
    status = sidebar.locator(".cairn-status")
    status.filter(has_text="notes").wait_for(timeout=WAIT_MS)
    assert f"{notes} notes" in status.inner_text()
    assert "chunks indexed" in status.inner_text()


def test_an_answer_streams_in_with_clickable_citations_and_the_sources_list(sidebar, stub_model):
    stub_model.held.clear()
    ask(sidebar, TOMATO_QUESTION)
    answer = sidebar.locator(".cairn-answer")
    # Part of the answer is on screen while the model is still writing: it is streamed, not all at once.
    answer.filter(has_text="Sow tomatoes indoors in the first week of March").wait_for(timeout=WAIT_MS)
    assert stub_model.held.wait(timeout=30)
    assert "mid-May" not in answer.inner_text()
    assert "is-streaming" in (answer.get_attribute("class") or "")
    assert sidebar.locator(".cairn-stop-button").is_visible()
    shoot(sidebar, "plugin-ask-streaming.png")
    stub_model.release()
    answer.filter(has_text="Plant them out in the polytunnel in mid-May").wait_for(timeout=WAIT_MS)
    sidebar.wait_for_selector(".cairn-answer:not(.is-streaming)", timeout=WAIT_MS)
    assert not sidebar.locator(".cairn-stop-button").is_visible()

    sources = sidebar.locator(".cairn-source")
    assert sources.count() >= 1
    first = sources.first.inner_text()
    assert first.startswith("[1]") and "Garden/Tomatoes.md › " in first, first
    # Each source says how relevant it is in words, never the raw fused score.
    assert RELEVANCE_WORDS.search(first) and "score" not in sidebar.locator(".cairn-sources").inner_text(), first
    # The sources the answer cites ([1], [4]) come first; the others it was given are listed under "Also retrieved".
    lists = sidebar.locator(".cairn-sources ol")
    assert [n.split("]")[0] + "]" for n in lists.first.locator(".cairn-source").all_inner_texts()] == ["[1]", "[4]"]
    titles = sidebar.locator(".cairn-sources .cairn-section-title").all_inner_texts()
    assert [t.lower() for t in titles] == (["sources", "also retrieved"] if sources.count() > 2 else ["sources"])
    # The model's answer: no "built from passages" banner.
    assert not sidebar.locator(".cairn-banner-ungrounded").is_visible()

    cite = sidebar.locator(".cairn-answer a.cairn-cite[data-n='1']").first
    assert cite.inner_text() == "[1]"
    assert "is-pending" not in (cite.get_attribute("class") or "")
    cite.click()
    opened = sidebar.evaluate("window.__opened")
    assert opened, "clicking [1] opened nothing"
    assert opened[-1]["path"] == "Garden/Tomatoes.md"
    assert isinstance(opened[-1]["line"], int) and opened[-1]["line"] >= 0
    assert "opened at line" in sidebar.locator("#note-body").inner_text()
    shoot(sidebar, "plugin-ask.png")

    # A source in the list opens its note too.
    sidebar.locator(".cairn-source-link").first.click()
    assert sidebar.evaluate("window.__opened")[-1]["path"] == "Garden/Tomatoes.md"


def test_an_answer_built_from_passages_shows_the_banner(sidebar):
    ask(sidebar, GARLIC_QUESTION)
    banner = sidebar.locator(".cairn-banner-ungrounded")
    banner.wait_for(state="visible", timeout=WAIT_MS)
    assert "Built from your notes' own sentences" in banner.inner_text()
    assert sidebar.locator(".cairn-source").count() >= 1
    assert "Garden/Garlic.md" in sidebar.locator(".cairn-sources").inner_text()
    # The daemon's own "Sources:" footer is not repeated above the linked list.
    assert "Sources:" not in sidebar.locator(".cairn-answer").inner_text()
    shoot(sidebar, "plugin-passages.png")


def test_an_off_corpus_question_shows_the_not_found_state(sidebar, stub_model):
    asked = len(stub_model.questions)
    ask(sidebar, OFF_CORPUS_QUESTION)
    notfound = sidebar.locator(".cairn-answer.cairn-notfound")
    notfound.wait_for(timeout=WAIT_MS)
    text = notfound.inner_text()
    assert "Not found in your notes" in text
    assert "I couldn't find this in your indexed notes." in text
    assert sidebar.locator(".cairn-source").count() == 0
    assert len(stub_model.questions) == asked, "the model must not be called when nothing passes the floor"
    shoot(sidebar, "plugin-notfound.png")


def test_a_weak_evidence_answer_says_there_is_no_clear_answer_and_never_calls_the_model(sidebar, stub_model):
    asked = len(stub_model.questions)
    ask(sidebar, WEAK_QUESTION)
    banner = sidebar.locator(".cairn-banner-weak")
    banner.wait_for(state="visible", timeout=WAIT_MS)
    assert "No clear answer in your notes" in banner.inner_text()
    assert "none is configured" not in banner.inner_text()
    assert "I couldn't find a clear answer in your indexed notes." in sidebar.locator(".cairn-answer").inner_text()
    assert sidebar.locator(".cairn-answer.cairn-notfound").count() == 0
    assert "Garden/Pests and problems.md" in sidebar.locator(".cairn-sources").inner_text()
    assert len(stub_model.questions) == asked, "the model must not be called when the evidence is weak"


def test_a_follow_up_is_asked_with_the_conversation_and_new_conversation_clears_it(sidebar, stub_model):
    turns = sidebar.locator(".cairn-turn")
    ask(sidebar, GARLIC_QUESTION)
    turns.first.locator(".cairn-elapsed").wait_for(timeout=WAIT_MS)
    assert "Garden/Garlic.md" in turns.first.locator(".cairn-sources").inner_text()
    # A follow-up that names nothing: the daemon retrieves it with the question before, so its own sources are the
    # garlic note's, and the model is shown the first turn as the conversation.
    asked = len(stub_model.messages)
    ask(sidebar, FOLLOW_UP_QUESTION)
    turns.nth(1).locator(".cairn-elapsed").wait_for(timeout=WAIT_MS)
    assert turns.count() == 2
    questions = sidebar.locator(".cairn-turn-question").all_inner_texts()
    assert questions == [GARLIC_QUESTION, FOLLOW_UP_QUESTION]
    second = turns.nth(1)
    cited = second.locator(".cairn-source").first.inner_text()
    assert cited.startswith("[2]") and "Garden/Garlic.md › Garlic › Harvest" in cited, cited
    assert "Built from your notes' own sentences" in turns.first.inner_text()  # each turn keeps its own answer
    assert "Dry them for two to three weeks in the shed" in second.locator(".cairn-answer").inner_text()
    messages = stub_model.messages[asked]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"] == GARLIC_QUESTION
    shoot(sidebar, "plugin-conversation.png")
    # A citation in the second turn opens that turn's source.
    second.locator("a.cairn-cite[data-n='2']").first.click()
    assert sidebar.evaluate("window.__opened")[-1]["path"] == "Garden/Garlic.md"

    sidebar.click(".cairn-new-conversation")
    assert turns.count() == 0
    assert not sidebar.locator(".cairn-new-conversation").is_visible()
    # Asked again without the conversation, the same follow-up finds nothing: no history went with it.
    ask(sidebar, FOLLOW_UP_QUESTION)
    sidebar.locator(".cairn-answer.cairn-notfound").wait_for(timeout=WAIT_MS)
    assert turns.count() == 1


def test_stop_cancels_a_streaming_answer_and_keeps_what_arrived(sidebar, stub_model):
    stub_model.held.clear()
    stub_model.cancelled.clear()
    ask(sidebar, SOURDOUGH_QUESTION)
    sidebar.locator(".cairn-answer").filter(has_text="Sow tomatoes indoors").wait_for(timeout=WAIT_MS)
    assert stub_model.held.wait(timeout=30)
    sidebar.click(".cairn-stop-button")
    sidebar.locator(".cairn-stopped").wait_for(timeout=WAIT_MS)
    assert sidebar.locator(".cairn-ask-button").is_enabled()
    assert "Sow tomatoes indoors" in sidebar.locator(".cairn-answer").inner_text()
    assert not sidebar.locator(".cairn-error").is_visible()
    # The daemon saw the client leave and cancelled the model's request.
    assert stub_model.cancelled.wait(timeout=30)


def test_a_pdf_citation_opens_the_pdf_at_its_page(sidebar):
    ask(sidebar, PDF_QUESTION)
    sidebar.locator(".cairn-banner-ungrounded").wait_for(state="visible", timeout=WAIT_MS)
    first = sidebar.locator(".cairn-source").first.inner_text()
    assert first.startswith("[1]") and PDF_PATH in first and "p. 3" in first, first
    sidebar.locator(".cairn-answer a.cairn-cite[data-n='1']").first.click()
    opened = sidebar.evaluate("window.__opened")[-1]
    assert (opened["path"], opened["subpath"], opened.get("line")) == (PDF_PATH, "#page=3", None)
    assert "opened at #page=3" in sidebar.locator("#note-body").inner_text()
    sidebar.click(".cairn-tab[data-tab='search']")
    sidebar.locator(".cairn-search-input").press_sequentially("widest flat stones", delay=20)
    result = sidebar.locator(".cairn-result").first
    result.wait_for(timeout=WAIT_MS)
    assert PDF_PATH in result.inner_text() and "p. 3" in result.inner_text()
    result.locator(".cairn-result-title").click()
    opened = sidebar.evaluate("window.__opened")[-1]
    assert (opened["path"], opened["subpath"], opened.get("line")) == (PDF_PATH, "#page=3", None)


def test_search_shows_results_as_you_type_with_the_match_and_opens_the_chunk(sidebar):
    sidebar.click(".cairn-tab[data-tab='search']")
    sidebar.locator(".cairn-search-input").press_sequentially("sourdough starter", delay=20)
    results = sidebar.locator(".cairn-result")
    results.first.wait_for(timeout=WAIT_MS)
    marked = {m.lower() for m in sidebar.locator(".cairn-result-snippet mark").all_inner_texts()}
    assert marked and marked <= {"sourdough", "starter"}, marked
    title = results.first.locator(".cairn-result-title")
    expected = title.inner_text().split(" › ")[0]
    metas = sidebar.locator(".cairn-result-meta").all_inner_texts()
    assert metas and all(RELEVANCE_WORDS.search(m) and "score" not in m for m in metas), metas
    shoot(sidebar, "plugin-search.png")
    title.click()
    assert sidebar.evaluate("window.__opened")[-1]["path"] == expected


def test_the_search_tab_opens_on_the_recently_modified_notes_and_follows_a_saved_note(sidebar, daemon):
    """With the box empty the Search tab lists the daemon's recent notes (``GET /search`` without ``q``), newest
    first; the oldest note, saved with a new line, goes to the top once the daemon has indexed it (the line is taken
    out again afterwards, and that save indexed, so the other tests see the vault as it was)."""

    def recent(top_k: int) -> list[dict]:
        status, body = daemon.get_json("/search", token=daemon.token, params={"topK": top_k})
        assert status == 200 and body["recent"] is True, body
        return body["results"]

    def shown() -> list[str]:
        return sidebar.locator(".cairn-recent-title").all_inner_texts()

    def holding(word: str) -> list[str]:
        status, body = daemon.get_json("/search", token=daemon.token, params={"q": word})
        return [r["filePath"] for r in body["results"] if word in r["snippet"]] if status == 200 else []

    sidebar.click(".cairn-tab[data-tab='search']")
    sidebar.locator(".cairn-recent").first.wait_for(timeout=WAIT_MS)
    assert shown() == [r["title"] for r in recent(8)]
    oldest = recent(50)[-1]
    assert oldest["title"] not in shown()
    note = daemon.vault / oldest["filePath"]
    text = note.read_text(encoding="utf-8")
    note.write_text(text + "\nSaved again: zqrecentsave.\n", encoding="utf-8")  # as Obsidian saves an edit
    try:
        sidebar.wait_for_function(
            "title => document.querySelector('.cairn-recent-title')?.textContent === title",
            arg=oldest["title"],
            timeout=WAIT_MS,
        )
        folder = oldest["filePath"].rpartition("/")[0]
        meta = sidebar.locator(".cairn-recent-meta").first.inner_text()
        assert meta == (f"{folder}/ · just now" if folder else "just now"), meta
        assert shown() == [r["title"] for r in recent(8)]
        assert sidebar.locator(".cairn-result").count() == 0  # recent notes are not search results
        shoot(sidebar, "plugin-recent.png")
        sidebar.locator(".cairn-recent-title").first.click()
        assert sidebar.evaluate("window.__opened")[-1]["path"] == oldest["filePath"]
    finally:
        note.write_text(text, encoding="utf-8")
        wait_until("the note's first text indexed again", lambda: not holding("zqrecentsave"), INDEX_DEADLINE_S)


def test_the_tag_scope_restricts_search_to_notes_with_that_tag(sidebar, daemon):
    query = "tomatoes"
    status, scoped = daemon.get_json("/search", token=daemon.token, params={"q": query, "tag": "kitchen", "topK": 8})
    assert status == 200
    expected = [f"{h['filePath']} › {h['symbol']}" if h["symbol"] else h["filePath"] for h in scoped["results"]]
    assert expected and all(
        "kitchen" in h["tags"] or any(t.startswith("kitchen/") for t in h["tags"]) for h in scoped["results"]
    )

    sidebar.click(".cairn-tab[data-tab='search']")
    sidebar.wait_for_selector(".cairn-scope-select option[value='kitchen']", state="attached", timeout=WAIT_MS)
    sidebar.locator(".cairn-search-input").fill(query)
    sidebar.locator(".cairn-result").first.wait_for(timeout=WAIT_MS)
    unscoped = sidebar.locator(".cairn-result-title").all_inner_texts()
    assert any(t.startswith("Garden/") for t in unscoped), unscoped  # without a scope, garden notes answer too
    sidebar.select_option(".cairn-scope-select", "kitchen")
    sidebar.locator(".cairn-chip", has_text="#kitchen").wait_for(timeout=WAIT_MS)
    sidebar.wait_for_function(
        "expected => JSON.stringify([...document.querySelectorAll('.cairn-result-title')].map(a => a.textContent))"
        " === JSON.stringify(expected)",
        arg=expected,
        timeout=WAIT_MS,
    )
    # Removing the chip widens the search again.
    sidebar.click(".cairn-chip-remove")
    sidebar.wait_for_function(
        "() => [...document.querySelectorAll('.cairn-result-title')].some(a => a.textContent.startsWith('Garden/'))",
        timeout=WAIT_MS,
    )


def test_related_shows_links_backlinks_and_similar_notes_for_the_active_note(sidebar):
    sidebar.click(".cairn-tab[data-tab='related']")
    sidebar.locator(".cairn-related", has_text="Open a note").wait_for(timeout=WAIT_MS)
    sidebar.click("#file-list li[data-path='Garden/Tomatoes.md']")
    related = sidebar.locator(".cairn-related")
    related.filter(has_text="Similar notes").wait_for(timeout=WAIT_MS)
    text = related.inner_text()
    assert "Garden/Tomatoes.md" in text
    assert "Garden/Pests and problems.md" in text  # [[Pests and problems#Late blight]]
    assert "Kitchen/Tomato sauce.md" in text  # links to [[Tomatoes|tomato beds]]
    similar = related.locator("ul").nth(2).locator("li").all_inner_texts()
    assert similar and all(RELEVANCE_WORDS.search(row) and "score" not in row for row in similar), similar
    backlinks = related.locator("ul").nth(1).locator("li").all_inner_texts()
    assert len(backlinks) == len(set(backlinks)), backlinks  # one row per linking note
    shoot(sidebar, "plugin-related.png")
    # Switching notes updates the pane.
    sidebar.click("#file-list li[data-path='Kitchen/Sourdough.md']")
    related.filter(has_text="Kitchen/Sourdough.md").wait_for(timeout=WAIT_MS)


def test_a_wrong_token_says_to_give_the_vault_its_token_with_cairn_plugin_install(sidebar):
    sidebar.evaluate(
        "async () => { window.__plugin.settings.token = 'not-the-right-token-0000';"
        " await window.__plugin.saveSettings(); }"
    )
    ask(sidebar, TOMATO_QUESTION)
    error = sidebar.locator(".cairn-pane-ask .cairn-error-unauthorized")
    error.wait_for(timeout=WAIT_MS)
    assert "rejected the token — run `cairn plugin install --vault <this vault's folder>`" in error.inner_text()
    assert "not-the-right-token" not in sidebar.locator(".cairn-view").inner_text()


def test_another_vaults_daemon_is_refused_and_the_sidebar_says_cairn_isnt_running_for_this_vault(sidebar, daemon):
    """The same daemon, seen from a vault in another folder: its /health names another vault, so the sidebar shows
    none of its notes and says Cairn isn't running for this vault."""
    sidebar.evaluate(
        "async () => { window.__vaultPath = '/elsewhere/Another vault';"
        " await window.__plugin.onExternalSettingsChange(); }"
    )
    sidebar.locator(".cairn-tab[data-tab='search']").click()
    sidebar.fill(".cairn-search-input", "tomatoes")
    error = sidebar.locator(".cairn-search-results .cairn-error-elsewhere")
    error.wait_for(timeout=WAIT_MS)
    shown = error.inner_text()
    assert NOT_RUNNING in shown and f"The Cairn daemon at {daemon.url} serves another vault" in shown, shown
    assert sidebar.locator(".cairn-search-results .cairn-result").count() == 0
    sidebar.locator(".cairn-status").filter(has_text="isn't running for this vault").wait_for(timeout=WAIT_MS)
    shoot(sidebar, "plugin-other-vault.png")


def test_with_the_daemon_stopped_the_sidebar_says_cairn_isnt_running_and_offers_retry(sidebar, daemon):
    """Runs last in this module: it stops the module's daemon."""
    sidebar.locator(".cairn-status").filter(has_text="notes").wait_for(timeout=WAIT_MS)
    daemon.proc.send_signal(signal.SIGINT)
    assert daemon.proc.wait(timeout=30) == 0
    ask(sidebar, TOMATO_QUESTION)
    error = sidebar.locator(".cairn-pane-ask .cairn-error-offline")
    error.wait_for(timeout=WAIT_MS)
    assert NOT_RUNNING in error.inner_text()
    assert daemon.url in error.inner_text()
    assert error.locator("button.cairn-retry").is_visible()
    # The status line notices too, from the dropped event stream.
    sidebar.locator(".cairn-status").filter(has_text="isn't running").wait_for(timeout=WAIT_MS)
    shoot(sidebar, "plugin-offline.png")
    # Retry while it is still down: the same message again, not a blank pane.
    error.locator("button.cairn-retry").click()
    sidebar.locator(".cairn-pane-ask .cairn-error-offline").wait_for(timeout=WAIT_MS)

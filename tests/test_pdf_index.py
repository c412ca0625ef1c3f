"""PDF attachments end to end: real PDFs written by tests/support/pdfgen.py, the real PDF library in its worker
process, the real model, a real SQLite index; the `cairn` console script for the CLI acceptance items.

What a vault owner sees: a text PDF's pages become searchable and citable by page; encrypted, image-only,
damaged and mistaken files are listed with their reasons while everything else goes on; a partly readable
PDF is indexed with the pages it has; changing a PDF re-embeds only what changed; PDFs never hold up a note
edited meanwhile (the daemon's queue).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path

import pytest

from cairn.answers import AnswerService, sources_text
from cairn.app import Cairn, build_services
from cairn.index import VaultWatcher
from support import pdfgen
from support.cairns import open_cairn
from support.cli import run_cairn
from support.pdfgen import GUIDE_PAGES
from support.requests import ask_request, caller_of, search_request
from support.vaults import SAMPLE_VAULT

pytestmark = pytest.mark.slow  # PDFs written, read by the worker process and embedded

DEADLINE_S = 60.0

GUIDE_QUESTION = "How do I build a cairn that lasts the winter?"


@pytest.fixture
def pdf_vault(tmp_path):
    """The sample vault plus a folder of PDFs: a good 4-page guide, and one of each kind of bad PDF."""
    vault = tmp_path / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    docs = vault / "Attachments"
    docs.mkdir()
    pdfgen.text_pdf(
        docs / "Field guide.pdf", GUIDE_PAGES, title="Moorland Field Guide", running_header="Moorland Field Guide"
    )
    pdfgen.encrypted_pdf(docs / "Locked.pdf")
    pdfgen.image_only_pdf(docs / "Scan.pdf", pages=2)
    pdfgen.truncated_pdf(docs / "Cut short.pdf")
    pdfgen.not_a_pdf(docs / "Really text.pdf")
    pdfgen.mixed_pdf(docs / "Mixed.pdf")
    return vault


@pytest.fixture
def pdf_cairn(pdf_vault, tmp_path, embedder):
    cairn = open_cairn(pdf_vault, tmp_path / "data", embedder)
    yield cairn
    cairn.close()


def errors_by_path(cairn: Cairn) -> dict[str, dict]:
    return {e["filePath"]: e for e in cairn.indexing.stats()["errors"]}


def test_good_pages_are_indexed_and_every_bad_pdf_is_listed_with_its_reason(pdf_cairn):
    report = pdf_cairn.indexing.index()
    skipped = dict(report.skipped)
    assert set(skipped) == {
        "Attachments/Locked.pdf",
        "Attachments/Scan.pdf",
        "Attachments/Cut short.pdf",
        "Attachments/Really text.pdf",
    }
    assert "password" in skipped["Attachments/Locked.pdf"]
    assert "no text layer" in skipped["Attachments/Scan.pdf"]
    assert "damaged" in skipped["Attachments/Cut short.pdf"] or "truncated" in skipped["Attachments/Cut short.pdf"]
    errors = errors_by_path(pdf_cairn)
    for path, reason in skipped.items():  # shown in /index/stats too
        assert errors[path]["skipped"] is True and errors[path]["reason"] == reason
    # The partly scanned PDF is indexed with its text pages; the image-only pages are named.
    assert errors["Attachments/Mixed.pdf"]["skipped"] is False
    assert "2, 4" in errors["Attachments/Mixed.pdf"]["reason"] or "2, 4–5" in errors["Attachments/Mixed.pdf"]["reason"]
    mixed_pages = {
        page
        for page, _ in pdf_cairn.store.conn.execute(
            "SELECT c.page, c.text FROM chunks c JOIN notes n ON n.id=c.note_id WHERE n.path='Attachments/Mixed.pdf'"
        )
    }
    assert mixed_pages == {1, 3, 6}
    # The good PDF: one or more chunks per page, each with its page, all embedded.
    rows = list(
        pdf_cairn.store.conn.execute(
            "SELECT c.page, c.symbol, c.kind, c.line_start, c.embedded, c.text FROM chunks c JOIN notes n "
            "ON n.id=c.note_id WHERE n.path='Attachments/Field guide.pdf' ORDER BY c.ordinal"
        )
    )
    assert sorted({r[0] for r in rows}) == [1, 2, 3, 4]
    assert all(r[2] == "pdf" and r[3] is None and r[4] == 2 for r in rows)
    page3 = [r for r in rows if r[0] == 3]
    assert page3[0][1].startswith("page 3") and "Building a cairn" in page3[0][1]
    assert "three widest flat stones" in " ".join(r[5] for r in page3)
    assert not any("Moorland Field Guide" in r[5] for r in rows), "the running header is not page text"
    assert pdf_cairn.store.note_by_path("Attachments/Field guide.pdf").title == "Moorland Field Guide"
    # The notes were indexed as before.
    assert pdf_cairn.indexing.stats()["notes"] >= 3


def test_a_question_answered_on_page_3_cites_that_page(pdf_cairn):
    pdf_cairn.indexing.index()
    answer = asyncio.run(build_services(pdf_cairn).answers.answer(ask_request(GUIDE_QUESTION)))
    assert not answer.not_found
    first = answer.sources[0].to_json()
    assert first["filePath"] == "Attachments/Field guide.pdf" and first["page"] == 3
    assert "lines" not in first
    assert "(page 3)" in sources_text(answer.sources)  # the Sources list shown with the answer


def test_cairn_ask_json_cites_the_pdf_with_page_3(pdf_vault, tmp_path):
    home = tmp_path / "home"
    run_cairn(home, "index", "--vault", str(pdf_vault))
    out = json.loads(run_cairn(home, "ask", GUIDE_QUESTION, "--vault", str(pdf_vault), "--json").stdout)
    cited = [s for s in out["sources"] if s["filePath"] == "Attachments/Field guide.pdf"]
    assert out["notFound"] is False and cited and cited[0]["page"] == 3
    assert out["sources"][0] == cited[0]


def test_asking_for_the_pdf_prefers_pdf_pages_over_a_note_saying_the_same(pdf_vault, tmp_path, embedder):
    (pdf_vault / "Cairn building.md").write_text(
        "# Cairn building\n\nTo build a cairn that lasts the winter, set the three widest flat stones as the base "
        "and lean every stone above slightly inward toward the centre.\n",
        encoding="utf-8",
    )
    cairn = open_cairn(pdf_vault, tmp_path / "data", embedder)
    try:
        cairn.indexing.index()
        plain = cairn.query.search(search_request("how to build a cairn that lasts the winter")).hits
        pdf = cairn.query.search(
            search_request("what does the pdf say about building a cairn that lasts the winter")
        ).hits
        assert pdf[0].file_path == "Attachments/Field guide.pdf" and pdf[0].page == 3
        # Without the mention of the pdf the two, saying the same, are the top two in either order.
        assert {h.file_path for h in plain[:2]} == {"Cairn building.md", "Attachments/Field guide.pdf"}
    finally:
        cairn.close()


def test_reindexing_embeds_nothing_and_a_changed_page_re_embeds_only_its_text(pdf_cairn, pdf_vault):
    pdf_cairn.indexing.index()
    again = pdf_cairn.indexing.index()
    assert again.texts_embedded == 0 and again.updated == 0
    pages = list(GUIDE_PAGES)
    pages[3] = ("Weather", "Thunderstorms build quickly over the ridge on summer afternoons; descend early.")
    time.sleep(0.01)  # a new mtime (filesystems with coarse timestamps)
    pdfgen.text_pdf(
        pdf_vault / "Attachments" / "Field guide.pdf",
        pages,
        title="Moorland Field Guide",
        running_header="Moorland Field Guide",
    )
    changed = pdf_cairn.indexing.index()
    assert changed.updated == 1
    assert 0 < changed.texts_embedded <= 3, "only page 4's new sentences (and nothing of pages 1-3)"
    hits = pdf_cairn.query.search(search_request("thunderstorms over the ridge in summer")).hits
    assert hits[0].file_path == "Attachments/Field guide.pdf" and hits[0].page == 4


def test_a_deleted_pdf_leaves_no_rows_and_turning_pdfs_off_removes_them(pdf_cairn, pdf_vault, tmp_path, embedder):
    pdf_cairn.indexing.index()
    (pdf_vault / "Attachments" / "Mixed.pdf").unlink()
    report = pdf_cairn.indexing.index()
    assert report.deleted == 1 and pdf_cairn.store.note_by_path("Attachments/Mixed.pdf") is None
    assert pdf_cairn.indexer.reconcile_diff() == {"added": [], "changed": [], "deleted": []}
    pdf_cairn.close()
    off = open_cairn(pdf_vault, tmp_path / "data", embedder, pdf=False)
    try:
        off.indexing.index()
        kinds = {k for (k,) in off.store.conn.execute("SELECT kind FROM notes")}
        assert kinds == {"markdown"}
        assert off.store.conn.execute("SELECT count(*) FROM chunks WHERE kind='pdf'").fetchone()[0] == 0
    finally:
        off.close()


def test_the_note_view_of_a_pdf_is_its_text_page_by_page(pdf_cairn):
    from cairn.errors import NotFoundError
    from cairn.policy import Withhold

    pdf_cairn.indexing.index()
    with pytest.raises(NotFoundError, match="not indexed: encrypted: needs a password"):
        pdf_cairn.library.note("Attachments/Locked.pdf")
    with pytest.raises(NotFoundError, match="^No indexed note"):  # withheld: exactly as if missing
        pdf_cairn.library.note(
            "Attachments/Locked.pdf", caller=caller_of(pdf_cairn, Withhold.of(folders=["Attachments"]))
        )
    note = pdf_cairn.library.note("Attachments/Field guide.pdf")
    assert note["kind"] == "pdf" and note["pages"] == 4
    content = note["content"]
    assert content.index("[page 1]") < content.index("[page 3]") < content.index("three widest flat stones")
    assert content.count("three widest flat stones") == 1


def test_a_pdf_in_an_ignored_folder_is_not_read(pdf_vault, tmp_path, embedder):
    cairn = open_cairn(pdf_vault, tmp_path / "data", embedder, ignore=("Attachments/",))
    try:
        report = cairn.indexing.index()
        assert report.skipped == [] and cairn.store.note_by_path("Attachments/Field guide.pdf") is None
    finally:
        cairn.close()


def varied_pages(count: int) -> list[str]:
    """``count`` page bodies of different sentences (nothing for the embedding cache to reuse): page ``n``
    holds :func:`pdfgen.page_sentence` (n) and 12 sentences made for it."""
    animals = ["heron", "otter", "lynx", "badger", "kestrel", "marmot", "ibis", "tapir", "plover", "stoat"]
    places = ["lighthouse", "orchard", "quarry", "harbour", "mill", "chapel", "ferry", "bridge", "forge"]
    return [
        " ".join(
            [pdfgen.page_sentence(n)]
            + [
                f"On day {n * 12 + k} the {animals[(n + k) % len(animals)]} "
                f"crossed the {places[(n * k) % len(places)]} "
                f"carrying {k + 2} {['pebbles', 'acorns', 'feathers', 'shells'][k % 4]} for the {n}th cairn."
                for k in range(12)
            ]
        )
        for n in range(1, count + 1)
    ]


def test_a_note_edited_while_a_long_pdf_is_indexing_is_searchable_before_the_pdf_is_done(tmp_path, embedder):
    """The daemon's wiring (the PDF queue on a low-priority thread, the file watcher): PDFs yield to the notes."""
    vault = tmp_path / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    cairn = open_cairn(vault, tmp_path / "data", embedder)
    cairn.indexing.index()

    async def scenario():
        watcher = VaultWatcher(
            vault,
            apply_hints=cairn.indexing.save_lane.save,
            reconcile=cairn.indexing.index,
            hints=cairn.indexing.hints,
            executor=cairn.indexing.save_lane.executor,
            ignore=cairn.config.ignore,
        )
        queue = cairn.indexing.pdf_lane
        queue.start()
        sub = cairn.events.subscribe()  # what /events streams to the plugin's status line
        await watcher.start()
        try:
            pdfgen.text_pdf(vault / "Field guide.pdf", varied_pages(40))
            end = time.monotonic() + DEADLINE_S
            while not cairn.store.conn.execute(
                "SELECT count(*) FROM chunks WHERE kind='pdf' AND embedded > 0"
            ).fetchone()[0]:
                assert time.monotonic() < end, f"the PDF queue never started: {queue.stats()}"
                await asyncio.sleep(0.05)
            (vault / "Quartz note.md").write_text(
                "# Quartz note\n\nThe zebra quartzite outcrop sits above the tarn.\n", encoding="utf-8"
            )
            while "Quartz note.md" not in [
                h.file_path for h in cairn.query.search(search_request("zebra quartzite outcrop")).hits
            ]:
                assert time.monotonic() < end, "the note never became searchable"
                await asyncio.sleep(0.05)
            assert queue.stats()["current"] == "Field guide.pdf", "the note waited for the whole PDF"
            while cairn.store.conn.execute(
                "SELECT count(*) FROM chunks c JOIN notes n ON n.id=c.note_id WHERE "
                "n.path='Quartz note.md' AND c.embedded=0"
            ).fetchone()[0]:
                assert time.monotonic() < end, "the note's vectors never came"
                await asyncio.sleep(0.05)
            assert cairn.store.conn.execute("SELECT count(*) FROM chunks WHERE kind='pdf' AND embedded=0").fetchone()[
                0
            ], "the note's vectors waited for the whole PDF's"
            assert await asyncio.to_thread(queue.wait_idle, DEADLINE_S * 3)
            hits = cairn.query.search(search_request("The marker for page 33")).hits
            assert hits and hits[0].file_path == "Field guide.pdf" and hits[0].page == 33
            await asyncio.sleep(0)  # let the loop deliver what the queue's thread published
            events = []
            while not sub.queue.empty():
                events.append(sub.queue.get_nowait())
            chunks = cairn.store.conn.execute("SELECT count(*) FROM chunks WHERE kind='pdf'").fetchone()[0]
            progress = [d for name, d in events if name == "progress"]
            assert {"phase": "embed", "done": chunks, "total": chunks} in progress, progress
            assert any(d["phase"] == "pdf" for d in progress)
            assert any(name == "indexed" and d["added"] == 1 for name, d in events)
        finally:
            await watcher.stop()

    try:
        asyncio.run(scenario())
    finally:
        cairn.close()


CHOLESTEROL_QUESTION = "What was the cholesterol reading from the lab visit?"


def add_personal_pdf(vault: Path, folder: str = "Health") -> None:
    """A lab-results PDF in ``folder``, embedded by a note tagged personal; the field guide linked from a plain note."""
    (vault / folder).mkdir(exist_ok=True)
    pdfgen.text_pdf(
        vault / folder / "Lab results.pdf",
        [("Lipid panel", "The cholesterol reading from the March lab visit was 5.9 mmol per litre.")],
    )
    (vault / "Checkup.md").write_text(
        "---\ntags: [personal]\n---\n# Checkup\n\nResults from the clinic: ![[Lab results.pdf]]\n", encoding="utf-8"
    )
    (vault / "Hiking plans.md").write_text(
        "# Hiking plans\n\nRead [[Field guide.pdf#page=3]] first.\n", encoding="utf-8"
    )


def test_a_pdf_embedded_in_a_personal_note_is_withheld_with_it(pdf_vault, tmp_path, embedder):
    from cairn.errors import NotFoundError
    from cairn.policy import Withhold

    add_personal_pdf(pdf_vault)
    cairn = open_cairn(pdf_vault, tmp_path / "data", embedder)
    try:
        cairn.indexing.index()
        question = CHOLESTEROL_QUESTION
        owner = cairn.query.search(search_request(question)).hits
        assert owner and owner[0].file_path == "Health/Lab results.pdf"
        withhold = Withhold.of(tags=["personal"])
        others = cairn.query.search(search_request(question), caller_of(cairn, withhold)).hits
        assert all(h.file_path not in ("Health/Lab results.pdf", "Checkup.md") for h in others)
        with pytest.raises(NotFoundError):
            cairn.library.note("Health/Lab results.pdf", caller=caller_of(cairn, withhold))
        # A PDF linked only from allowed notes stays visible.
        guide = cairn.query.search(search_request(GUIDE_QUESTION), caller_of(cairn, withhold)).hits
        assert guide and guide[0].file_path == "Attachments/Field guide.pdf"
    finally:
        cairn.close()


def test_the_daemon_indexes_the_good_pdf_lists_the_bad_ones_and_stays_up(pdf_vault, tmp_path):
    """A real `cairn serve`: PDFs go through the daemon's queue; the bad ones show in /index/stats, the daemon
    answers from the good one, a PDF dropped in later is indexed too, and SIGTERM stops it cleanly."""
    import signal

    from support.daemons import INDEX_DEADLINE_S, running_daemon, stop
    from support.waits import wait_until

    home = tmp_path / "home"
    home.mkdir()
    with running_daemon(home, pdf_vault) as d:

        def settled():
            status, stats = d.get_json("/index/stats", token=d.token)
            done = (
                status == 200
                and stats["pdfs"] == 2
                and stats["pending"] == 0
                and not stats["indexing"]
                and stats["pdf"] == {"queued": 0, "current": None, "scanPending": False}
            )
            return stats if done else None

        stats = wait_until(
            "the PDFs indexed by the daemon", settled, INDEX_DEADLINE_S, proc=d.proc, log=d.home / "serve.stderr"
        )
        reasons = {e["filePath"]: e["reason"] for e in stats["errors"]}
        assert "password" in reasons["Attachments/Locked.pdf"]
        assert "no text layer" in reasons["Attachments/Scan.pdf"]
        assert {"Attachments/Cut short.pdf", "Attachments/Really text.pdf", "Attachments/Mixed.pdf"} <= set(reasons)
        status, health = d.get_json("/health")
        assert status == 200 and health["status"] == "ok"
        status, hits = d.get_json("/search", token=d.token, params={"q": "widest flat stones for a cairn base"})
        assert status == 200 and hits["results"][0]["filePath"] == "Attachments/Field guide.pdf"
        assert hits["results"][0]["page"] == 3
        # A PDF saved while the daemon runs is indexed by the watcher and the queue.
        pdfgen.text_pdf(
            pdf_vault / "Attachments" / "Later.pdf",
            ["Nothing here yet.", "The ferry to the island leaves at seven from the north pier."],
        )

        def found():
            status, hits = d.get_json("/search", token=d.token, params={"q": "when does the ferry to the island leave"})
            return (
                status == 200
                and hits["results"]
                and hits["results"][0]["filePath"] == "Attachments/Later.pdf"
                and hits["results"][0]["page"] == 2
            )

        wait_until("the PDF saved later", found, INDEX_DEADLINE_S, proc=d.proc, log=d.home / "serve.stderr")
        assert stop(d, signal.SIGTERM) == 0


def test_a_pdf_embedded_in_a_personal_note_never_enters_a_remote_models_prompt(pdf_vault, tmp_path, embedder):
    from cairn.llm import OpenAIChatModel
    from support.llm_stub import llm_config, stub_server

    add_personal_pdf(pdf_vault)
    cairn = open_cairn(pdf_vault, tmp_path / "data", embedder)

    async def ask(remote: bool, question: str):
        async with stub_server("normal") as stub:
            model = OpenAIChatModel(llm_config(stub.url))
            model.remote = remote  # what a non-loopback base_url means, without leaving the machine
            answer = await AnswerService(cairn.query, model, withhold_tags=("personal",)).answer(
                ask_request(question, top_k=8)
            )
        return [r["messages"][1]["content"] for r in stub.requests], answer

    try:
        cairn.indexing.index()
        local_prompts, _ = asyncio.run(ask(False, CHOLESTEROL_QUESTION))
        assert "5.9 mmol" in local_prompts[0]
        prompts, answer = asyncio.run(ask(True, CHOLESTEROL_QUESTION))
        assert all("5.9 mmol" not in p and "Lab results.pdf" not in p for p in prompts)
        if not prompts:  # every passage withheld: the model is not called; the local answer stands
            assert answer.grounded is False
        guide_prompts, _ = asyncio.run(ask(True, GUIDE_QUESTION))
        assert "Attachments/Field guide.pdf" in guide_prompts[0]
    finally:
        cairn.close()


def test_a_pdf_added_after_the_personal_note_that_embeds_it_is_withheld(pdf_vault, tmp_path, embedder):
    """The note's link was written while the PDF did not exist (unresolved); the PDF arriving resolves it."""
    from cairn.policy import Withhold

    add_personal_pdf(pdf_vault)
    pdf = pdf_vault / "Health" / "Lab results.pdf"
    kept = tmp_path / "lab.pdf"
    shutil.move(pdf, kept)
    cairn = open_cairn(pdf_vault, tmp_path / "data", embedder)
    try:
        cairn.indexing.index()
        shutil.move(kept, pdf_vault / "Scans.pdf.tmp")
        (pdf_vault / "Scans").mkdir()
        shutil.move(pdf_vault / "Scans.pdf.tmp", pdf_vault / "Scans" / "Lab results.pdf")
        cairn.indexing.save_lane.save({"Scans/Lab results.pdf"})
        withhold = Withhold.of(tags=["personal"])
        assert cairn.query.search(search_request(CHOLESTEROL_QUESTION)).hits[0].file_path == "Scans/Lab results.pdf"
        assert all(
            h.file_path != "Scans/Lab results.pdf"
            for h in cairn.query.search(search_request(CHOLESTEROL_QUESTION), caller_of(cairn, withhold)).hits
        )
        # Moved to another folder: the basename link follows it, and so does the withholding.
        (pdf_vault / "Moved").mkdir()
        shutil.move(pdf_vault / "Scans" / "Lab results.pdf", pdf_vault / "Moved" / "Lab results.pdf")
        cairn.indexing.save_lane.save({"Scans/Lab results.pdf", "Moved/Lab results.pdf"})
        assert cairn.query.search(search_request(CHOLESTEROL_QUESTION)).hits[0].file_path == "Moved/Lab results.pdf"
        assert all(
            h.file_path != "Moved/Lab results.pdf"
            for h in cairn.query.search(search_request(CHOLESTEROL_QUESTION), caller_of(cairn, withhold)).hits
        )
    finally:
        cairn.close()


def test_a_pdf_deleted_while_it_is_being_indexed_leaves_the_index_at_once(tmp_path, embedder):
    """Its rows go at the queue's next step, and the rest of it is not embedded (it used to run to the end —
    minutes for a long PDF — serving text the owner had deleted)."""
    vault = tmp_path / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    cairn = open_cairn(vault, tmp_path / "data", embedder)
    cairn.indexing.index()
    cached = lambda: cairn.store.conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]  # noqa: E731
    before = cached()
    pages = varied_pages(40)  # 40 × 13 different sentences

    async def scenario():
        watcher = VaultWatcher(
            vault,
            apply_hints=cairn.indexing.save_lane.save,
            reconcile=cairn.indexing.index,
            hints=cairn.indexing.hints,
            executor=cairn.indexing.save_lane.executor,
            ignore=cairn.config.ignore,
        )
        queue = cairn.indexing.pdf_lane
        queue.start()
        await watcher.start()
        try:
            pdfgen.text_pdf(vault / "Long.pdf", pages)
            end = time.monotonic() + DEADLINE_S
            while not cairn.store.conn.execute(
                "SELECT count(*) FROM chunks WHERE kind='pdf' AND embedded > 0"
            ).fetchone()[0]:
                assert time.monotonic() < end, f"the PDF queue never started: {queue.stats()}"
                await asyncio.sleep(0.05)
            (vault / "Long.pdf").unlink()
            while cairn.store.note_by_path("Long.pdf") is not None:
                assert time.monotonic() < end, "the deleted PDF stayed in the index"
                await asyncio.sleep(0.05)
            assert await asyncio.to_thread(queue.wait_idle, DEADLINE_S)
        finally:
            await watcher.stop()

    try:
        asyncio.run(scenario())
        assert cairn.store.conn.execute("SELECT count(*) FROM chunks WHERE kind='pdf'").fetchone()[0] == 0
        assert cached() - before < len(pages) * 13 * 3 // 4, "most of the deleted PDF was embedded all the same"
        assert cairn.indexer.reconcile_diff() == {"added": [], "changed": [], "deleted": []}
    finally:
        cairn.close()


def test_raising_a_limit_reads_the_limited_pdfs_again_at_the_next_scan(pdf_vault, tmp_path, embedder):
    data = tmp_path / "data"
    small = open_cairn(pdf_vault, data, embedder, pdf_max_pages=2)
    try:
        small.indexing.index()
        assert "page limit 2" in errors_by_path(small)["Attachments/Field guide.pdf"]["reason"]
        assert small.query.search(search_request(GUIDE_QUESTION)).hits[0].page != 3
        assert small.indexing.index().updated == 0, "nothing changed: nothing read again"
    finally:
        small.close()
    raised = open_cairn(pdf_vault, data, embedder)  # the next start, with the default limits
    try:
        report = raised.indexing.index()
        assert "Attachments/Field guide.pdf" not in errors_by_path(raised)
        assert report.updated >= 1
        hit = raised.query.search(search_request(GUIDE_QUESTION)).hits[0]
        assert (hit.file_path, hit.page) == ("Attachments/Field guide.pdf", 3)
        assert raised.indexing.index().updated == 0
    finally:
        raised.close()


@pytest.mark.parametrize("value", ["2", '"banana"', "[1]"])
def test_a_mistyped_pdf_switch_is_a_config_error_not_pdfs_off(pdf_vault, tmp_path, value):
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text(f"pdf = {value}\n", encoding="utf-8")
    proc = run_cairn(home, "index", "--vault", str(pdf_vault), check=False)
    assert proc.returncode == 1
    assert "'pdf'" in proc.stderr and "expected true or false" in proc.stderr


def test_pdf_false_and_true_in_the_config_file_are_understood(tmp_path):
    from cairn.config import load_config

    for text, expected in (("pdf = false", False), ('pdf = "off"', False), ("pdf = true", True), ("pdf = 1", True)):
        path = tmp_path / "config.toml"
        path.write_text(text + "\n", encoding="utf-8")
        assert load_config(config_file=path, env={}).pdf is expected


def test_reflow_joins_wrapped_lines_but_keeps_a_heading_line_apart():
    from cairn.index.prepare import reflow

    page = (
        "Findings\n"
        "The most common rootstock in the survey was M26, found in forty of the orchards that were\n"
        "visited across the valley, and it was also the most vig-\n"
        "orous one under the Holloway Farm trial conditions of that year.\n\n"
        "Recommendations\n"
        "Plant early in the season and water the young trees late in the day, when the soil is cool."
    )
    out = reflow(page)
    assert out.split("\n\n") == [
        "Findings",
        "The most common rootstock in the survey was M26, found in forty of the orchards that were visited across "
        "the valley, and it was also the most vigorous one under the Holloway Farm trial conditions of that year.",
        "Recommendations",
        "Plant early in the season and water the young trees late in the day, when the soil is cool.",
    ]
    assert reflow(out) == out

"""cairn.index.watch with the real watchfiles watcher on a temp copy of part of the Obsidian help vault.

Each scenario changes files the way editors, file managers and sync tools do, waits (polling with a
deadline) until the watcher is idle and the store matches the disk, then checks: the reconcile diff is
empty, search sees the new state, renames and moves re-embed nothing (counted on the real model), and
the work was done by the event hints (no full reconcile ran) unless the scenario is about reconciling.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import shutil
import time
import unicodedata
from pathlib import Path

import pytest
from tests import pdfgen
from tests.conftest import HELP_VAULT, make_config

from cairn.app import Cairn
from cairn.index import VaultWatcher
from cairn.vault import list_all_files
from test_http_api import AUTH
from test_http_routes import api

pytestmark = pytest.mark.shared_data("vaults/obsidian-help")  # every test runs on a slice of it

#: The slice copied: every note of one folder, three of another.
FOLDERS = {"User interface": "*.md", "Editing and formatting": "[CFT][ao][lg]*.md"}
DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def template(tmp_path_factory, embedder):
    """A slice of the help vault, indexed once: (vault, database file)."""
    base = tmp_path_factory.mktemp("watch-template")
    vault = base / "vault"
    for folder, pattern in FOLDERS.items():
        dest = vault / folder
        dest.mkdir(parents=True)
        for src in (HELP_VAULT / folder).glob(pattern):
            shutil.copy2(src, dest / src.name)
    (vault / ".obsidian").mkdir()
    (vault / ".obsidian" / "app.json").write_text("{}", encoding="utf-8")
    cairn = Cairn(make_config(vault, base / "data"), embedder=embedder)
    cairn.indexing.index()
    db = cairn.config.db_path
    cairn.store.wal_checkpoint()
    cairn.close()
    return vault, db


@pytest.fixture
def cairn(template, tmp_path, embedder):
    """A Cairn over a fresh copy of the template vault and its index (mtimes kept, so nothing to redo)."""
    vault_t, db_t = template
    vault = tmp_path / "vault"
    shutil.copytree(vault_t, vault, copy_function=shutil.copy2)
    config = make_config(vault, tmp_path / "data").replace(ignore=("Templates/", "*.excalidraw.md"))
    config.db_path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(db_t, config.db_path)
    c = Cairn(config, embedder=embedder)
    assert c.indexer.reconcile_diff() == {"added": [], "changed": [], "deleted": []}
    yield c
    c.close()


def make_watcher(cairn: Cairn, **kw) -> VaultWatcher:
    def apply_hints(paths: set[str]) -> None:
        cairn.indexer.index_paths(paths)
        cairn.vectors.embed_pending()

    return VaultWatcher(
        cairn.config.vault, apply_hints=apply_hints, reconcile=cairn.indexing.index, ignore=cairn.config.ignore, **kw
    )


EMPTY = {"added": [], "changed": [], "deleted": []}


async def converge(cairn: Cairn, watcher: VaultWatcher, check=lambda: True) -> None:
    """Wait until the watcher is idle, the store matches the disk and ``check()`` holds (deadline)."""
    end = time.monotonic() + DEADLINE_S
    last = None
    while time.monotonic() < end:
        if watcher.idle():
            last = await asyncio.to_thread(cairn.indexer.reconcile_diff)
            if last == EMPTY and cairn.store.count_pending() == 0 and check() and watcher.idle():
                return
        await asyncio.sleep(0.05)
    pytest.fail(f"no convergence in {DEADLINE_S} s: diff {last}, watcher {watcher.stats()}")


async def run_with(watcher: VaultWatcher, scenario):
    """Start ``watcher``, run ``scenario(watcher)``, stop the watcher (cleanly) whatever happens."""
    await watcher.start()
    try:
        assert watcher.watching
        return await scenario(watcher)
    finally:
        await watcher.stop()


def run(cairn: Cairn, scenario, **kw):
    """:func:`run_with` a test watcher (:func:`make_watcher`) over ``cairn``."""
    return asyncio.run(run_with(make_watcher(cairn, **kw), scenario))


def paths(cairn: Cairn) -> set[str]:
    return {p for p, state in cairn.store.note_states().items() if state.status == "ok"}


def hit_paths(cairn: Cairn, query: str, **kw) -> list[str]:
    return [h.file_path for h in cairn.query.search(query, top_k=10, **kw).hits]


def bump_mtime(p: Path) -> None:
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))


# -- scenarios -----------------------------------------------------------------------------------


def test_an_atomic_save_gives_one_update_with_the_same_note_identity(cairn):
    vault = cairn.config.vault
    note = "User interface/Tabs.md"
    before_id = cairn.store.note_by_path(note).id

    async def scenario(watcher):
        tmp = vault / "User interface" / "Tabs.md.tmp-4242"
        text = (vault / note).read_text(encoding="utf-8")
        tmp.write_text(text + "\n\nThe Zanzibar layout stacks pinned tabs into labelled groups.\n", encoding="utf-8")
        os.replace(tmp, vault / note)
        await converge(cairn, watcher, lambda: "Zanzibar" in " ".join(c.text for c in cairn.store.chunks_of_note(note)))
        assert watcher.reconciles == 0 and watcher.batches >= 1

    run(cairn, scenario)
    assert cairn.store.note_by_path(note).id == before_id
    assert "User interface/Tabs.md.tmp-4242" not in paths(cairn)
    assert hit_paths(cairn, "Zanzibar layout for stacking pinned tabs in groups")[0] == note


def test_renaming_a_note_embeds_only_its_new_title_and_its_chunks_read_whole(cairn, embedder):
    vault = cairn.config.vault

    async def scenario(watcher):
        before = embedder.embeddings_computed
        os.rename(vault / "User interface/Ribbon.md", vault / "User interface/Command ribbon.md")
        await converge(cairn, watcher, lambda: "User interface/Command ribbon.md" in paths(cairn))
        # The new title, and each chunk's whole-chunk text (the title leads it); every sentence came from the cache.
        chunks = cairn.store.chunks_of_note("User interface/Command ribbon.md")
        assert embedder.embeddings_computed - before == 1 + len(chunks)
        assert watcher.reconciles == 0

    run(cairn, scenario)
    assert "User interface/Ribbon.md" not in paths(cairn)
    hits = hit_paths(cairn, "ribbon")
    assert "User interface/Command ribbon.md" in hits and "User interface/Ribbon.md" not in hits


def test_moving_a_whole_folder_re_embeds_nothing(cairn, embedder):
    vault = cairn.config.vault
    old = {p for p in paths(cairn) if p.startswith("User interface/")}
    assert len(old) >= 10

    async def scenario(watcher):
        before = embedder.embeddings_computed
        (vault / "Interface").mkdir()
        os.rename(vault / "User interface", vault / "Interface" / "UI")
        want = {"Interface/UI/" + p.split("/", 1)[1] for p in old}
        await converge(cairn, watcher, lambda: want <= paths(cairn))
        assert embedder.embeddings_computed == before
        assert watcher.reconciles == 0

    run(cairn, scenario)
    assert not {p for p in paths(cairn) if p.startswith("User interface/")}
    assert hit_paths(cairn, "ribbon")[0].startswith("Interface/UI/")


def test_deleting_a_note_removes_every_row(cairn):
    vault = cairn.config.vault
    note = "Editing and formatting/Callouts.md"
    assert note in hit_paths(cairn, "callout")

    async def scenario(watcher):
        (vault / note).unlink()
        await converge(cairn, watcher, lambda: note not in paths(cairn))
        assert watcher.reconciles == 0

    run(cairn, scenario)
    assert cairn.store.chunks_of_note(note) == [] and cairn.store.note_by_path(note) is None
    assert note not in hit_paths(cairn, "callout")


def test_modify_then_delete_and_create_then_delete_within_the_debounce_window(cairn):
    vault = cairn.config.vault
    note = "Editing and formatting/Folding.md"
    fresh = "Editing and formatting/Ephemeral.md"

    async def scenario(watcher):
        (vault / note).write_text("Quetzalcoatl folding instructions.\n", encoding="utf-8")
        (vault / fresh).write_text("Quetzalcoatl was here for a moment.\n", encoding="utf-8")
        (vault / note).unlink()
        (vault / fresh).unlink()
        await converge(cairn, watcher, lambda: note not in paths(cairn))
        assert watcher.reconciles == 0

    run(cairn, scenario)
    assert fresh not in paths(cairn)
    assert not hit_paths(cairn, "Quetzalcoatl", mode="bm25")


def test_a_case_only_rename_follows_the_new_spelling(cairn, embedder):
    vault = cairn.config.vault

    async def scenario(watcher):
        before = embedder.embeddings_computed
        os.rename(vault / "User interface/Hotkeys.md", vault / "User interface/hotkeys.md")
        await converge(cairn, watcher, lambda: "User interface/hotkeys.md" in paths(cairn))
        # At most the title, now spelled "hotkeys", and each chunk's whole-chunk text (the title leads it).
        chunks = cairn.store.chunks_of_note("User interface/hotkeys.md")
        assert embedder.embeddings_computed - before <= 1 + len(chunks)

    run(cairn, scenario)
    assert "User interface/Hotkeys.md" not in paths(cairn)
    assert "User interface/hotkeys.md" in hit_paths(cairn, "hotkeys")


def test_a_burst_of_a_thousand_files_created_then_deleted_converges(cairn):
    vault = cairn.config.vault
    before = paths(cairn)

    async def scenario(watcher):
        burst = vault / "Burst"
        burst.mkdir()
        for i in range(1000):
            (burst / f"Note {i:04d}.md").write_text(f"Burst note number {i} about xylophones.\n", encoding="utf-8")
        for i in range(1000):
            (burst / f"Note {i:04d}.md").unlink()
        burst.rmdir()
        await converge(cairn, watcher)

    run(cairn, scenario)
    assert paths(cairn) == before
    assert not [p for p in hit_paths(cairn, "xylophones burst note") if p.startswith("Burst/")]


def test_an_overflow_of_hints_falls_back_to_one_reconcile(cairn):
    vault = cairn.config.vault

    async def scenario(watcher):
        for i in range(60):
            (vault / f"Checkout {i:02d}.md").write_text(f"Branch file {i} on quokkas.\n", encoding="utf-8")
        await converge(cairn, watcher, lambda: sum(p.startswith("Checkout ") for p in paths(cairn)) == 60)
        assert watcher.reconciles >= 1

    run(cairn, scenario, max_hints=20)
    assert any(p.startswith("Checkout ") for p in hit_paths(cairn, "quokkas branch file"))


def test_ignored_and_hidden_places_cause_no_work(cairn):
    vault = cairn.config.vault

    async def scenario(watcher):
        for rel in (
            ".obsidian/workspace.json",
            ".trash/Old.md",
            ".git/HEAD",
            "Templates/Daily.md",
            "Editing and formatting/Drawing.excalidraw.md",
            "User interface/.hidden.md",
        ):
            (vault / rel).parent.mkdir(parents=True, exist_ok=True)
            (vault / rel).write_text("ignored content about wombats", encoding="utf-8")
        (vault / "Real.md").write_text("A real note about wombats.\n", encoding="utf-8")
        await converge(cairn, watcher, lambda: "Real.md" in paths(cairn))
        assert watcher.hints_seen == 1 and watcher.last_batch == {"Real.md"}, watcher.last_batch

    run(cairn, scenario)
    assert hit_paths(cairn, "wombats") == ["Real.md"]


def test_pause_drops_changes_and_resume_reconciles_them(cairn):
    vault = cairn.config.vault
    note = "User interface/Sidebar.md"

    async def scenario(watcher):
        watcher.hints.pause()
        assert watcher.stats()["paused"] is True and watcher.stats()["watching"] is False
        (vault / note).write_text("The sidebar holds the narwhal panel.\n", encoding="utf-8")
        bump_mtime(vault / note)
        assert cairn.indexer.reconcile_diff()["changed"] == [note]
        watcher.hints.resume()
        await converge(cairn, watcher)
        assert watcher.reconciles == 1 and watcher.stats()["paused"] is False

    run(cairn, scenario)
    assert hit_paths(cairn, "narwhal panel")[0] == note


def test_a_watcher_error_runs_a_full_reconcile_and_watching_starts_again(cairn, monkeypatch):
    import watchfiles

    real = watchfiles.awatch
    calls = []

    def failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OSError(28, "inotify watch limit reached")
        return real(*args, **kwargs)

    monkeypatch.setattr(watchfiles, "awatch", failing_once)
    vault = cairn.config.vault
    note = "User interface/Status bar.md"

    async def main():
        watcher = make_watcher(cairn)
        await watcher.start()
        try:
            end = time.monotonic() + DEADLINE_S
            while not (watcher.watching and watcher.reconciles >= 1):
                assert time.monotonic() < end, watcher.stats()
                await asyncio.sleep(0.05)
            assert "inotify watch limit" in watcher.stats()["watchError"]
            (vault / note).write_text("The status bar shows the pelican counter.\n", encoding="utf-8")
            await converge(cairn, watcher, lambda: "pelican" in cairn.store.chunks_of_note(note)[0].text)
        finally:
            await watcher.stop()

    asyncio.run(main())
    assert len(calls) == 2


# -- hints go through the full scan's rules (symlinks, folders named like notes, names equal in NFC) -------------

NFC_NAME = unicodedata.normalize("NFC", "Résumé.md")
NFD_NAME = unicodedata.normalize("NFD", "Résumé.md")


def app_watcher(cairn: Cairn, **kw) -> VaultWatcher:
    """The daemon's own hint handling (:meth:`SaveLane.save`: notes, then the PDFs among the hints)."""
    return VaultWatcher(
        cairn.config.vault,
        apply_hints=cairn.indexing.save_lane.save,
        reconcile=cairn.indexing.index,
        hints=cairn.indexing.hints,
        executor=cairn.indexing.save_lane.executor,
        ignore=cairn.config.ignore,
        **kw,
    )


async def after_marker(cairn: Cairn, watcher: VaultWatcher, name: str) -> None:
    """Write a marker note after the changes under test and wait until it is indexed and the store matches the
    disk: the watcher has then applied every event before it (events arrive in order, batches run in order)."""
    (cairn.config.vault / name).write_text(f"Marker note {name}.\n", encoding="utf-8")
    await converge(cairn, watcher, lambda: name in paths(cairn))


async def note_then_symlinks(cairn: Cairn, watcher: VaultWatcher, note: str, text: str, links: dict[str, str]) -> None:
    """Write ``note`` (its folder made) and wait until it is indexed; then make each symlink (vault-relative name →
    target, as written in the link) and wait until a marker note written after them is indexed."""
    vault = cairn.config.vault
    (vault / note).parent.mkdir(parents=True, exist_ok=True)
    (vault / note).write_text(text, encoding="utf-8")
    await converge(cairn, watcher, lambda: note in paths(cairn))
    for name, target in links.items():
        os.symlink(target, vault / name)
    await after_marker(cairn, watcher, "Marker.md")


def test_a_folder_symlink_leading_outside_the_vault_made_while_watching_indexes_no_note_or_pdf(cairn, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("zqoutsideword lives outside the vault\n", encoding="utf-8")
    pdfgen.text_pdf(outside / "out.pdf", ["The zqoutsidepdfword report lives outside the vault."])
    before = paths(cairn)

    async def scenario(watcher):
        os.symlink(outside, cairn.config.vault / "ext")
        os.symlink(outside / "secret.md", cairn.config.vault / "out.md")
        await after_marker(cairn, watcher, "Marker 1.md")
        (outside / "later.md").write_text("zqoutsideword written later\n", encoding="utf-8")  # seen through the link?
        await after_marker(cairn, watcher, "Marker 2.md")
        assert watcher.reconciles == 0

    asyncio.run(run_with(app_watcher(cairn), scenario))
    assert paths(cairn) == before | {"Marker 1.md", "Marker 2.md"}
    assert not hit_paths(cairn, "zqoutsideword", mode="bm25")
    assert not hit_paths(cairn, "zqoutsidepdfword", mode="bm25")


def test_a_symlink_loop_made_while_watching_indexes_no_note_twice(cairn):
    async def scenario(watcher):
        await note_then_symlinks(
            cairn, watcher, "Loop/l.md", "zqloopword in a loop\n", {"Loop/again": "../Loop", "Alias": "Loop"}
        )
        assert watcher.reconciles == 0

    run(cairn, scenario)
    assert hit_paths(cairn, "zqloopword", mode="bm25") == ["Loop/l.md"]


def test_a_symlink_to_a_withheld_folder_made_while_watching_leaves_its_notes_withheld(cairn):
    from cairn.policy import Withhold

    async def scenario(watcher):
        await note_then_symlinks(
            cairn,
            watcher,
            "Private/salary.md",
            "zqprivword salary negotiation\n",
            {"Attic": "Private", "zz-alias.md": "Private/salary.md"},
        )

    run(cairn, scenario)
    assert hit_paths(cairn, "zqprivword", mode="bm25") == ["Private/salary.md"]
    assert not hit_paths(cairn, "zqprivword", mode="bm25", withhold=Withhold((), ("Private",)))


def test_renaming_and_moving_away_a_folder_named_like_a_note_while_watching_updates_its_notes(cairn, tmp_path):
    vault = cairn.config.vault
    deep = vault / "Projects.md" / "deep"

    async def scenario(watcher):
        deep.mkdir(parents=True)
        (vault / "Projects.md" / "plan.md").write_text("zqplanword alpha plan\n", encoding="utf-8")
        (deep / "b.md").write_text("zqdeepword beta\n", encoding="utf-8")
        await converge(cairn, watcher, lambda: "Projects.md/deep/b.md" in paths(cairn))
        os.rename(vault / "Projects.md", vault / "Projects")
        await converge(cairn, watcher, lambda: "Projects/deep/b.md" in paths(cairn))
        assert not {p for p in paths(cairn) if p.startswith("Projects.md/")}
        os.rename(vault / "Projects", tmp_path / "elsewhere.md")
        await converge(cairn, watcher, lambda: not {p for p in paths(cairn) if p.startswith("Projects")})
        assert watcher.reconciles == 0

    run(cairn, scenario)
    assert not hit_paths(cairn, "zqplanword zqdeepword", mode="bm25")


def test_a_note_named_like_another_in_nfc_made_while_watching_is_reported_and_the_first_stays(cairn):
    vault = cairn.config.vault

    def skipped() -> list[dict]:
        return [e for e in cairn.indexing.stats()["errors"] if e["skipped"]]

    async def scenario(watcher):
        (vault / NFC_NAME).write_text("zqnfcword composed\n", encoding="utf-8")
        await converge(cairn, watcher, lambda: NFC_NAME in paths(cairn))
        (vault / NFD_NAME).write_text("zqnfdword decomposed\n", encoding="utf-8")
        await converge(cairn, watcher, lambda: bool(skipped()))
        assert [e["filePath"] for e in skipped()] == [NFD_NAME] and repr(NFC_NAME) in skipped()[0]["reason"]
        assert hit_paths(cairn, "zqnfcword zqnfdword", mode="bm25") == [NFC_NAME]
        (vault / NFC_NAME).unlink()  # the other one takes its place
        await converge(cairn, watcher, lambda: not skipped())
        assert watcher.reconciles == 0

    run(cairn, scenario)
    assert hit_paths(cairn, "zqnfcword zqnfdword", mode="bm25") == [NFC_NAME]
    assert "decomposed" in cairn.store.chunks_of_note(NFC_NAME)[0].text


# -- an error opening a file is never a deletion -------------------------------------------------------------------


@contextlib.contextmanager
def no_free_descriptors():
    """While inside: this process has no file descriptor left, so every ``open()`` and ``scandir()`` fails with
    EMFILE (too many open files), as under a flood of idle connections. The soft limit is lowered to what is open
    now plus a few, those are taken, and both are given back on the way out."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
    held: list[int] = []
    try:
        while True:
            try:
                held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError as exc:
                assert exc.errno == errno.EMFILE
                break
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open descriptors in /proc")
def test_a_note_edited_while_no_file_can_be_opened_is_kept_then_indexed_once_files_open_again(cairn):
    vault = cairn.config.vault
    rel = "User interface/Hotkeys.md"
    edited = (vault / rel).read_text(encoding="utf-8") + "\nzqemfileword arrived while no file could be opened.\n"
    watcher = app_watcher(cairn)

    async def scenario(w: VaultWatcher):
        await after_marker(cairn, w, "Warm.md")  # the indexing thread has its database connection open
        fd = os.open(vault / rel, os.O_WRONLY)  # opened before: the edit itself needs no new descriptor
        try:
            batches = w.batches
            with no_free_descriptors():
                os.ftruncate(fd, 0)
                os.write(fd, edited.encode("utf-8"))
                while not (w.batches > batches and not w.busy):  # the batch ran while nothing could be opened
                    await asyncio.sleep(0.05)
                assert rel in paths(cairn)  # kept: not turned into a deletion
                unreadable = cairn.indexing.stats()["unreadable"]
                assert unreadable and "Too many open files" in unreadable[0]["reason"], unreadable
        finally:
            os.close(fd)
        await converge(cairn, w, lambda: hit_paths(cairn, "zqemfileword") == [rel])
        assert cairn.indexing.stats()["unreadable"] == []

    asyncio.run(asyncio.wait_for(run_with(watcher, scenario), DEADLINE_S * 2))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open descriptors in /proc")
def test_a_full_scan_while_no_file_can_be_opened_deletes_nothing_and_keeps_links(cairn):
    before = paths(cairn)
    links_before = cairn.store.backlinks("User interface/Settings.md")
    assert links_before
    with no_free_descriptors():
        report = cairn.indexer.sync_text()
    assert report.deleted == 0 and [p for p, _r in report.deferred] == [""]
    assert paths(cairn) == before
    assert cairn.store.backlinks("User interface/Settings.md") == links_before
    assert cairn.indexer.reconcile_diff() == EMPTY


# -- iCloud placeholders ---------------------------------------------------------------------------------------------


def test_a_note_icloud_evicts_keeps_its_last_version_and_is_listed_as_not_downloaded(cairn):
    """iCloud Drive replaces a note it keeps only online by the hidden ``.Ribbon.md.icloud``: the note stays
    searchable (its last indexed version) and ``/index/stats`` says it is not downloaded; downloaded again, its
    new text is indexed."""
    vault = cairn.config.vault
    rel, placeholder = "User interface/Ribbon.md", vault / "User interface" / ".Ribbon.md.icloud"
    watcher = app_watcher(cairn)

    async def stats() -> dict:
        async with api(cairn) as (_app, server, session):
            async with session.get(f"{server.url}/index/stats", headers=AUTH) as resp:
                return await resp.json()

    async def scenario(w: VaultWatcher):
        before = hit_paths(cairn, "ribbon")
        assert rel in before
        placeholder.write_bytes(b"bplist00\x00placeholder")
        (vault / rel).unlink()
        await after_marker(cairn, w, "Marker.md")
        assert rel in paths(cairn) and rel in hit_paths(cairn, "ribbon")
        listed = {e["filePath"]: e["reason"] for e in (await stats())["notDownloaded"]}
        assert set(listed) == {rel} and listed[rel].startswith("not downloaded"), listed
        (vault / rel).write_text("# Ribbon\n\nThe zqdownloadedword ribbon, downloaded again.\n", encoding="utf-8")
        placeholder.unlink()
        await converge(cairn, w, lambda: hit_paths(cairn, "zqdownloadedword") == [rel])
        assert (await stats())["notDownloaded"] == []

    asyncio.run(run_with(watcher, scenario))


# -- the watcher's mode and cost; polling enters no ignored folder --------------------------------------------------


def test_forced_polling_is_shown_with_its_cost_and_walks_no_ignored_folder(cairn):
    """With polling forced, ``/index/stats`` says so and what a pass costs; a pass looks at the files the index
    scan reads and never enters an ignored folder (the 200 files under ``Templates/`` cost nothing); an edit is
    still picked up, and an edit inside the ignored folder causes no work."""
    vault = cairn.config.vault
    (vault / "Templates").mkdir()
    for i in range(200):
        (vault / "Templates" / f"T{i}.md").write_text(f"Template {i}.\n", encoding="utf-8")
    watcher = app_watcher(cairn, force_polling=True, poll_interval_s=0.2)

    async def stats() -> dict:
        async with api(cairn) as (_app, server, session):
            async with session.get(f"{server.url}/index/stats", headers=AUTH) as resp:
                return await resp.json()

    async def scenario(w: VaultWatcher):
        shown = (await stats())["watcher"]
        assert shown["mode"] == "polling" and shown["intervalS"] == 0.2
        assert shown["files"] == len(list(list_all_files(vault, cairn.config.ignore)))
        entered = [p for p in vault.rglob("*") if p.is_dir() and not {"Templates", ".obsidian"} & set(p.parts)]
        assert shown["folders"] == 1 + len(entered)
        assert 0 <= shown["cpuShare"] < 1 and shown["lastPassMs"] >= 0
        batches = w.batches
        (vault / "Templates" / "T0.md").write_text("Template zqignoredword.\n", encoding="utf-8")
        (vault / "User interface" / "Ribbon.md").write_text("# Ribbon\n\nThe zqpolledword ribbon.\n", encoding="utf-8")
        await converge(cairn, w, lambda: hit_paths(cairn, "zqpolledword") == ["User interface/Ribbon.md"])
        assert w.last_batch == {"User interface/Ribbon.md"} and w.batches == batches + 1
        assert not [p for p in paths(cairn) if p.startswith("Templates/")]

    asyncio.run(run_with(watcher, scenario))


def test_native_file_events_are_shown_as_the_watcher_mode(cairn, monkeypatch):
    monkeypatch.delenv("WATCHFILES_FORCE_POLLING", raising=False)

    async def scenario(w: VaultWatcher):
        assert cairn.indexing.stats()["watcher"]["mode"] == "native"

    watcher = app_watcher(cairn)
    asyncio.run(run_with(watcher, scenario))

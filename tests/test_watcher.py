"""cairn.index.watch with the real watchfiles watcher on a temp copy of part of the Obsidian help vault.

Each scenario changes files the way editors, file managers and sync tools do, waits (polling with a
deadline) until the watcher is idle and the store matches the disk, then checks: the reconcile diff is
empty, search sees the new state, renames and moves re-embed nothing (counted on the real model), and
the work was done by the event hints (no full reconcile ran) unless the scenario is about reconciling.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from support import embedders, watched_vault
from support.watched_vault import DEADLINE_S, bump_mtime, converge, hit_paths, make_watcher, paths, run

template, cairn = watched_vault.template, watched_vault.cairn  # the fixtures

embedder = embedders.stand_in  # the fixture: the stand-in model, these tests only move data

pytestmark = pytest.mark.shared_data("vaults/obsidian-help")  # every test runs on a slice of it


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

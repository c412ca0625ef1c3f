"""cairn.index.watch, what a save made while watching may not do: the hints go through the full scan's rules
(symlinks, folders named like notes, names equal in NFC), an error opening a file is never a deletion, an iCloud
placeholder keeps its note's last version; and the watcher's mode and its cost (polling enters no ignored folder).
The real watchfiles watcher on a temp copy of part of the Obsidian help vault (tests/support/watched_vault.py)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import unicodedata

import pytest

from cairn.app import Cairn
from cairn.index import VaultWatcher
from cairn.vault import list_all_files
from support import pdfgen, watched_vault
from support.http_client import AUTH, api
from support.watched_vault import DEADLINE_S, EMPTY, converge, hit_paths, paths, run, run_with

template, cairn = watched_vault.template, watched_vault.cairn  # the fixtures

pytestmark = pytest.mark.shared_data("vaults/obsidian-help")  # every test runs on a slice of it


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

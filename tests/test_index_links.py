"""cairn.index.links: what links resolve against (the vault's file list, the notes' aliases) kept between saves and
brought up to date by the next save, or the next start, when an attachment, a folder or an alias comes or goes."""

from __future__ import annotations

import os
import shutil

from support import embedders, index_vault
from support.index_vault import indexed_paths

vault, cairn = index_vault.vault, index_vault.cairn  # the fixtures


embedder = embedders.stand_in  # the fixture: the stand-in model, these tests only move data


def _count_walks(monkeypatch) -> list[int]:
    import cairn.index.links as links_module
    import cairn.index.writer as writer_module

    walks = [0]
    real = writer_module.list_all_files

    def counting(*args, **kwargs):
        walks[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(writer_module, "list_all_files", counting)
    monkeypatch.setattr(links_module, "list_all_files", counting)
    return walks


def _append(vault, rel: str, extra: str, *, atomic: bool = False) -> None:
    path = vault / rel
    text = path.read_text(encoding="utf-8") + extra
    if atomic:  # as many editors save: a temporary file renamed over the note
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    else:
        path.write_text(text, encoding="utf-8")


def test_saving_a_note_again_resolves_its_links_without_walking_the_whole_vault(cairn, vault, monkeypatch):
    """The file list links resolve against is kept between file-event batches while no hint can have changed it
    (walking the vault and rebuilding the resolver is most of a save's cost on a large vault)."""
    cairn.indexing.index()
    walks = _count_walks(monkeypatch)
    _append(vault, "Sourdough.md", "\nAlso see [[Flour]] and [[Garden/Tomatoes]].\n")
    cairn.indexer.index_paths({"Sourdough.md"})
    first = walks[0]
    _append(vault, "Sourdough.md", "\nAnd [[Levain bread]] once more.\n", atomic=True)
    cairn.indexer.index_paths({"Sourdough.md", "Sourdough.md.tmp"})
    _append(vault, "Flour.md", "\nGoes into [[Sourdough]].\n")
    cairn.indexer.index_paths({"Flour.md"})
    assert walks[0] == first <= 1  # the edits did not walk the vault again
    targets = [link.target_path for link in cairn.store.links_of_note("Sourdough.md")]
    assert targets == ["Flour.md", "Flour.md", "Garden/Tomatoes.md", "Sourdough.md"]
    assert cairn.store.links_of_note("Flour.md")[0].target_path == "Sourdough.md"


def test_an_attachment_or_folder_that_comes_or_goes_is_seen_by_the_next_save(cairn, vault, monkeypatch):
    cairn.indexing.index()
    _append(vault, "Flour.md", "\n![[crumb.png]] ![[Pantry/jar.jpg]]\n")
    cairn.indexer.index_paths({"Flour.md"})
    assert [link.target_path for link in cairn.store.links_of_note("Flour.md")] == [None, None]
    (vault / "crumb.png").write_bytes(b"\x89PNG")  # an image pasted: its event comes with the note's
    _append(vault, "Flour.md", "\nA crumb shot.\n")
    cairn.indexer.index_paths({"crumb.png", "Flour.md"})
    assert [link.target_path for link in cairn.store.links_of_note("Flour.md")] == ["crumb.png", None]
    (vault / "Pantry").mkdir()
    (vault / "Pantry" / "jar.jpg").write_bytes(b"\xff\xd8")
    cairn.indexer.index_paths({"Pantry"})  # a folder's event (moved in with its files)
    _append(vault, "Flour.md", "\nThe jar.\n")
    cairn.indexer.index_paths({"Flour.md"})
    assert [link.target_path for link in cairn.store.links_of_note("Flour.md")] == ["crumb.png", "Pantry/jar.jpg"]
    shutil.rmtree(vault / "Pantry")
    (vault / "crumb.png").unlink()
    cairn.indexer.index_paths({"Pantry", "crumb.png"})
    _append(vault, "Flour.md", "\nGone again.\n")
    cairn.indexer.index_paths({"Flour.md"})
    assert [link.target_path for link in cairn.store.links_of_note("Flour.md")] == [None, None]


def test_aliases_added_or_dropped_by_a_save_resolve_in_the_next_ones(cairn, vault):
    cairn.indexing.index()
    _append(vault, "Flour.md", "\nSee [[Rye notes]].\n")
    cairn.indexer.index_paths({"Flour.md"})
    assert cairn.store.links_of_note("Flour.md")[0].target_path is None
    (vault / "Garden" / "Tomatoes.md").write_text(
        "---\naliases: [Rye notes]\n---\nTomatoes and rye.\n", encoding="utf-8"
    )
    cairn.indexer.index_paths({"Garden/Tomatoes.md"})
    assert cairn.store.links_of_note("Flour.md")[0].target_path == "Garden/Tomatoes.md"
    _append(vault, "Sourdough.md", "\nLike [[Rye notes]].\n")
    cairn.indexer.index_paths({"Sourdough.md"})
    assert cairn.store.links_of_note("Sourdough.md")[-1].target_path == "Garden/Tomatoes.md"
    (vault / "Garden" / "Tomatoes.md").write_text("No alias now.\n", encoding="utf-8")
    cairn.indexer.index_paths({"Garden/Tomatoes.md"})
    _append(vault, "Sourdough.md", "\nStill [[Rye notes]]?\n")
    cairn.indexer.index_paths({"Sourdough.md"})
    assert [link.target_path for link in cairn.store.links_of_note("Sourdough.md")][-2:] == [None, None]
    assert cairn.indexer.reconcile_diff() == {"added": [], "changed": [], "deleted": []}


def test_links_follow_an_attachment_that_arrives_later_and_a_note_that_becomes_unreadable(cairn, vault):
    """A hinted batch that adds, removes or moves a file re-resolves links elsewhere (an image pasted after the
    note linking to it was saved), and a note skipped as unreadable no longer answers to its aliases — the stored
    links are what a full index of the vault would store."""
    cairn.indexing.index()
    _append(vault, "Flour.md", "\n![[crumb.png]] and [[Levain bread]]\n")
    cairn.indexer.index_paths({"Flour.md"})
    assert [link.target_path for link in cairn.store.links_of_note("Flour.md")] == [None, "Sourdough.md"]
    (vault / "crumb.png").write_bytes(b"\x89PNG")
    cairn.indexer.index_paths({"crumb.png"})  # the image's own, later batch
    assert [link.target_path for link in cairn.store.links_of_note("Flour.md")] == ["crumb.png", "Sourdough.md"]
    (vault / "Pics").mkdir()
    os.replace(vault / "crumb.png", vault / "Pics" / "crumb.png")  # moved into a folder
    cairn.indexer.index_paths({"crumb.png", "Pics"})
    assert cairn.store.links_of_note("Flour.md")[0].target_path == "Pics/crumb.png"
    (vault / "Sourdough.md").write_bytes(b"---\naliases: [Levain bread]\n---\n\xff\xfe not UTF-8\n")
    cairn.indexer.index_paths({"Sourdough.md"})
    assert cairn.store.links_of_note("Flour.md")[1].target_path is None  # the alias went with the note's text
    stored = {p: [link.target_path for link in cairn.store.links_of_note(p)] for p in indexed_paths(cairn)}
    cairn.writer.reresolve_links()  # what the whole vault says now
    assert stored == {p: [link.target_path for link in cairn.store.links_of_note(p)] for p in indexed_paths(cairn)}


def test_an_attachment_added_while_the_daemon_was_not_running_resolves_links_at_the_next_start(cairn, vault):
    cairn.indexing.index()
    _append(vault, "Flour.md", "\n![[crumb.png]]\n")
    cairn.indexing.index()
    assert cairn.store.links_of_note("Flour.md")[0].target_path is None
    (vault / "crumb.png").write_bytes(b"\x89PNG")  # no file event: nothing watched
    report = cairn.indexing.index()  # the start-up run: no note changed
    assert (report.added, report.updated, report.deleted) == (0, 0, 0)
    assert cairn.store.links_of_note("Flour.md")[0].target_path == "crumb.png"
    (vault / "crumb.png").unlink()
    cairn.indexing.index()
    assert cairn.store.links_of_note("Flour.md")[0].target_path is None

"""A save written while a whole-vault run is under way (docs/design.md, "Contract" → Freshness): the run writes the
vault a batch at a time, so the save lane writes a save between two batches; the run then leaves that note as the
save left it, and links to a note the save created resolve once the run ends. The real model and a real SQLite file;
the save is made at the worst moment (the run has read the note's old text and not yet written it)."""

from __future__ import annotations

import pytest

import cairn.index.text_run as text_run
from cairn.index.text_run import TextRun
from support import embedders
from support.cairns import open_cairn
from support.requests import search_request

embedder = embedders.stand_in  # the fixture: the stand-in model, these tests only move data

EMPTY = {"added": [], "changed": [], "deleted": []}


@pytest.fixture
def cairn_and_vault(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr(text_run, "BATCH_NOTES", 2)
    vault = tmp_path / "vault"
    vault.mkdir()
    for i in range(6):
        (vault / f"Note {i}.md").write_text(f"# Note {i}\n\nPlain text number {i} about stones.\n", encoding="utf-8")
    (vault / "Links.md").write_text("# Links\n\nSee [[Created later]] for more.\n", encoding="utf-8")
    cairn = open_cairn(vault, tmp_path / "data", embedder)
    yield cairn, vault
    cairn.close()


def test_a_save_while_the_run_holds_the_notes_older_text_is_kept(cairn_and_vault, monkeypatch):
    cairn, vault = cairn_and_vault
    real_parse = TextRun._parse
    saves = []

    def parse(self, batch):
        parsed = real_parse(self, batch)
        read = {vf.path for vf, _digest, _prepared in parsed[0]}
        if "Note 5.md" in read and not saves and self.superseded is not None:  # the whole-vault run read it
            (vault / "Note 5.md").write_text("# Note 5\n\nRewritten: the zqsavedword is here now.\n", encoding="utf-8")
            (vault / "Created later.md").write_text("# Created later\n\nA new note.\n", encoding="utf-8")
            saves.append(cairn.indexing.save_lane.save({"Note 5.md", "Created later.md"}))
        return parsed

    monkeypatch.setattr(TextRun, "_parse", parse)
    cairn.indexing.index(vectors=False)

    assert saves and saves[0].updated + saves[0].added >= 1
    hits = cairn.query.search(search_request("zqsavedword")).hits
    assert [h.file_path for h in hits] == ["Note 5.md"]  # the run did not write its older reading over the save
    assert cairn.indexer.reconcile_diff() == EMPTY
    (link,) = cairn.store.links_of_note("Links.md")
    assert link.target_path == "Created later.md"  # resolved against the files there after the save

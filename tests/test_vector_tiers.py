"""Vectors in tiers (docs/design.md, "Data"): the first index gives every passage one whole-chunk vector — the most
recently modified notes first — before any sentence vector, then completes them; searches use whatever tier a note
has, and the coverage says which. The real model and a real SQLite file."""

from __future__ import annotations

import os

from support import embedders
from support.cairns import open_cairn
from support.requests import search_request

embedder = embedders.stand_in  # the fixture: the stand-in model, these tests only move data

#: Notes and how many days ago each was last modified.
NOTES = {
    "Old.md": ("# Old\n\nThe granite cairn on the ridge marks the old drove road.\n", 30),
    "Middle.md": ("# Middle\n\nMoss grows on the north face of the standing stones.\n", 10),
    "Recent.md": ("# Recent\n\nThe ferry to the island leaves at nine on Saturdays.\n", 2),
    "Newest.md": ("# Newest\n\nSourdough starter needs feeding twice a day in summer.\n", 0),
}


def _write_vault(root):
    root.mkdir()
    now = 1_700_000_000
    for name, (text, days) in NOTES.items():
        (root / name).write_text(text, encoding="utf-8")
        os.utime(root / name, (now - days * 86400, now - days * 86400))


def _tiers_by_note(cairn) -> dict[str, set[int]]:
    rows = cairn.store.conn.execute("SELECT n.path, c.embedded FROM chunks c JOIN notes n ON n.id = c.note_id")
    out: dict[str, set[int]] = {}
    for path, tier in rows:
        out.setdefault(path, set()).add(int(tier))
    return out


def _sentence_vectors(cairn) -> int:
    return int(cairn.store.conn.execute("SELECT count(*) FROM unit_vectors").fetchone()[0])


def test_every_note_gets_its_first_vector_newest_first_before_any_sentence_vector(tmp_path, embedder):
    _write_vault(tmp_path / "vault")
    cairn = open_cairn(tmp_path / "vault", tmp_path / "data", embedder)
    try:
        cairn.indexer.sync_text()
        before = cairn.query.search(search_request("ferry island", top_k=4)).coverage
        assert (before.notes, before.pending, before.refining) == (4, 4, 0)

        first_vectors: list[str] = []  # notes in the order they got their first vector
        seen_at_refine: list[tuple[dict[str, set[int]], int, object, list[str]]] = []

        def progress(phase: str, done: int, total: int) -> None:
            tiers = _tiers_by_note(cairn)
            for path, held in tiers.items():
                if held == {1} and path not in first_vectors:
                    first_vectors.append(path)
            if phase == "refine" and not seen_at_refine:
                result = cairn.query.search(
                    search_request("when does the boat leave for the isle", top_k=1), mode="dense"
                )
                hits = [h.file_path for h in result.hits]
                seen_at_refine.append((tiers, _sentence_vectors(cairn), result.coverage, hits))

        cairn.vectors.embed_pending(batch_size=1, progress=progress)

        assert first_vectors == ["Newest.md", "Recent.md", "Middle.md", "Old.md"]
        ((tiers, sentences, coverage, hits),) = seen_at_refine
        assert all(held == {1} for held in tiers.values()) and len(tiers) == 4  # every note at tier 1 ...
        assert sentences == 0  # ... before any sentence vector
        assert (coverage.pending, coverage.refining, coverage.embedded) == (0, 4, 4)
        assert hits == ["Recent.md"]  # found by meaning at tier 1

        after = cairn.query.search(search_request("ferry island")).coverage
        assert (after.pending, after.refining, after.embedded) == (0, 0, 4)
        assert all(held == {2} for held in _tiers_by_note(cairn).values())
        assert _sentence_vectors(cairn) > 0
        stats = cairn.indexing.stats()
        assert stats["pending"] == 0 and stats["refining"] == 0 and stats["vectors"] == stats["chunks"]
    finally:
        cairn.close()


def test_a_note_found_by_meaning_at_tier_one_is_found_the_same_once_complete(tmp_path, embedder):
    _write_vault(tmp_path / "vault")
    cairn = open_cairn(tmp_path / "vault", tmp_path / "data", embedder)
    try:
        cairn.indexer.sync_text()
        while cairn.vectors.embed_batch(8, tier=1)[2]:
            pass
        question = "when does the boat leave for the isle"  # no word of the note: found by meaning only
        at_tier_one = [h.file_path for h in cairn.query.search(search_request(question, top_k=1), mode="dense").hits]
        cairn.vectors.embed_pending()
        complete = [h.file_path for h in cairn.query.search(search_request(question, top_k=1), mode="dense").hits]
        assert at_tier_one == complete == ["Recent.md"]
    finally:
        cairn.close()

"""The in-memory BM25 (cairn.bm25): FTS5's bm25() values to the last bit, kept up to date as notes change, and
FTS5 answering whenever it cannot (same ranked results either way)."""

from __future__ import annotations

import json

import numpy as np

from cairn.bm25 import Bm25Index
from cairn.ranking import fts_phrase, query_terms

from conftest import SHARED


def _dev_terms(vault: str) -> list[str]:
    rows = [json.loads(line) for line in (SHARED / "eval" / "dev.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return sorted({t for r in rows if r["vault"] == vault for t in query_terms(r["question"])})


def assert_same_as_fts5(index: Bm25Index, terms, *, expect_from_memory: bool = True) -> int:
    """Every term's (ids, bm25) from memory equals FTS5's own, bit for bit; returns how many came from memory."""
    from_memory = 0
    for term in terms:
        got = index.scores(term)
        ids, values = index.store.fts_phrase_scores(fts_phrase(term))
        if got is None:
            assert not expect_from_memory or len(index.store.fts_tokens(term)) != 1, term
            continue
        from_memory += 1
        assert np.array_equal(got[0], ids), term
        assert np.array_equal(got[1], values), (term, np.abs(got[1] - values).max() if len(values) else None)
    return from_memory


def test_every_dev_question_term_scores_exactly_as_fts5_on_the_help_vault(help_cairn):
    index = Bm25Index(help_cairn.store)
    assert index.build()
    terms = _dev_terms("obsidian-help") + ["obsidian", "note", "the", "Café", "naïve", "PLUGINS"]
    assert len(terms) > 100
    assert assert_same_as_fts5(index, terms) == len(terms)  # all single tokens: none left to FTS5
    ids, values = index.scores("obsidian")
    assert len(ids) > 50 and (values < 0).all()


def test_a_term_that_is_several_tokens_is_left_to_fts5(help_cairn):
    index = Bm25Index(help_cairn.store)
    assert index.build()
    assert index.scores("e-mail") is None  # the phrase "e mail": positions, which the index does not hold
    assert index.scores("don't") is None
    assert index.scores("zzqx-nothing") is None


def test_an_unbuilt_index_leaves_every_term_to_fts5(help_cairn):
    index = Bm25Index(help_cairn.store)
    assert not index.ready and index.wants_rebuild
    assert index.scores("obsidian") is None


def test_edits_deletes_and_new_notes_are_followed_exactly(fresh_cairn, vault_copy):
    fresh_cairn.index()
    store = fresh_cairn.store
    index = Bm25Index(store)
    assert index.build()
    marker = 0
    notes = sorted(p for p in vault_copy.rglob("*.md"))
    gone, edited = notes[0], notes[1]
    gone_terms = query_terms(gone.read_text(encoding="utf-8"))[:40]
    gone.unlink()
    edited.write_text(edited.read_text(encoding="utf-8") + "\n\nA zorbleflux paragraph about zorbleflux tuning.\n",
                      encoding="utf-8")
    (vault_copy / "Brand new.md").write_text("# Brand new\n\nThe quixotic zorbleflux note, written just now.\n",
                                             encoding="utf-8")
    fresh_cairn.index()
    marker += 1
    index.refresh(marker)
    assert index.ready
    ids, _ = index.scores("zorbleflux")
    assert len(ids) == 2  # the edited note's new chunk and the new note, from memory
    terms = sorted(set(gone_terms + query_terms(edited.read_text(encoding="utf-8"))[:40]
                       + ["zorbleflux", "quixotic", "brand", "new"]))
    assert assert_same_as_fts5(index, terms) > 20
    # The same marker again: nothing re-read, still exact.
    index.refresh(marker)
    assert assert_same_as_fts5(index, ["zorbleflux"]) == 1


def test_too_many_new_rows_drop_the_index_until_it_is_built_again(fresh_cairn, vault_copy):
    fresh_cairn.index()
    index = Bm25Index(fresh_cairn.store)
    assert index.build()
    for i in range(6):
        (vault_copy / f"Bulk {i}.md").write_text(f"# Bulk {i}\n\nA wibblequark line.\n", encoding="utf-8")
    fresh_cairn.index()
    index.MAX_NEW_ROWS = 3  # bulk indexing: tokenizing every new row on a query's thread would stall it
    index.refresh(1)
    assert not index.ready and index.wants_rebuild
    assert index.scores("wibblequark") is None  # FTS5 answers meanwhile
    assert index.build()
    assert assert_same_as_fts5(index, ["wibblequark", "bulk"]) == 2
    assert len(index.scores("wibblequark")[0]) == 6


def test_a_full_text_index_that_no_longer_matches_the_rows_read_is_dropped(fresh_cairn, vault_copy):
    fresh_cairn.index()
    index = Bm25Index(fresh_cairn.store)
    assert index.build()
    index.refresh(1)  # nothing changed: still ready
    assert index.ready
    index._length[:] = index._length + 1  # as if rows had been read wrong: the token counts no longer add up
    (vault_copy / "One more.md").write_text("# One more\n\nA note that changes the full-text index.\n", encoding="utf-8")
    fresh_cairn.index()
    index.refresh(2)
    assert not index.ready
    assert index.scores("note") is None


def test_the_keyword_ranking_is_the_same_from_memory_as_from_fts5(help_cairn):
    query = help_cairn.query
    questions = [json.loads(line)["question"] for line in
                 (SHARED / "eval" / "dev.jsonl").read_text(encoding="utf-8").splitlines()
                 if line.strip() and json.loads(line)["vault"] == "obsidian-help"]
    assert not query.terms.ready
    from_fts5 = {q: query.keyword_ranking(q) for q in questions}
    thread = query.start_keyword_index()
    thread.join(timeout=60)
    try:
        assert query.terms.ready
        for q in questions:
            assert query.keyword_ranking(q) == from_fts5[q], q
    finally:
        query._terms_auto = False
        query.terms = Bm25Index(query.store)  # the session fixture goes back to FTS5 for the other tests


def test_a_dropped_index_is_rebuilt_only_once_the_store_is_quiet(fresh_cairn, vault_copy):
    fresh_cairn.index()
    query = fresh_cairn.query
    query.start_keyword_index().join(timeout=60)
    assert query.terms.ready
    query.terms.MAX_NEW_ROWS = 1  # the next change counts as bulk: the index is dropped
    query.TERMS_REBUILD_S, query.TERMS_QUIET_S = 0.0, 3600.0
    for i in range(3):
        (vault_copy / f"Bulk {i}.md").write_text(f"# Bulk {i}\n\nA frobnicated line.\n", encoding="utf-8")
    fresh_cairn.index()
    from_fts5 = query.keyword_ranking("frobnicated")
    assert len(from_fts5) == 3 and not query.terms.ready  # FTS5 answered; the store just changed: no rebuild
    assert query._terms_building is None or not query._terms_building.is_alive()
    query.TERMS_QUIET_S = 0.0  # the store has been quiet long enough
    query.keyword_ranking("frobnicated")
    query._terms_building.join(timeout=60)
    assert query.terms.ready and query.keyword_ranking("frobnicated") == from_fts5

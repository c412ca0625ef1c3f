"""The in-memory BM25 (cairn.search.keyword): FTS5's bm25() values to the last bit, kept up to date as notes change, and
FTS5 answering whenever it cannot (same ranked results either way)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from cairn.search.keyword import Bm25Index
from cairn.search.query import query_terms
from support.keyword_checks import assert_same_as_fts5
from support.vaults import SHARED

pytestmark = pytest.mark.slow  # the help vault and fresh indexes rebuilt per test


def _dev_terms(vault: str) -> list[str]:
    rows = [
        json.loads(line)
        for line in (SHARED / "eval" / "dev.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    return sorted({t for r in rows if r["vault"] == vault for t in query_terms(r["question"])})


@pytest.mark.shared_data("eval/dev.jsonl")
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
    fresh_cairn.indexing.index()
    store = fresh_cairn.store
    index = Bm25Index(store)
    assert index.build()
    marker = 0
    notes = sorted(p for p in vault_copy.rglob("*.md"))
    gone, edited = notes[0], notes[1]
    gone_terms = query_terms(gone.read_text(encoding="utf-8"))[:40]
    gone.unlink()
    edited.write_text(
        edited.read_text(encoding="utf-8") + "\n\nA zorbleflux paragraph about zorbleflux tuning.\n", encoding="utf-8"
    )
    (vault_copy / "Brand new.md").write_text(
        "# Brand new\n\nThe quixotic zorbleflux note, written just now.\n", encoding="utf-8"
    )
    fresh_cairn.indexing.index()
    marker += 1
    index.refresh(marker)
    assert index.ready
    ids, _ = index.scores("zorbleflux")
    assert len(ids) == 2  # the edited note's new chunk and the new note, from memory
    terms = sorted(
        set(
            gone_terms
            + query_terms(edited.read_text(encoding="utf-8"))[:40]
            + ["zorbleflux", "quixotic", "brand", "new"]
        )
    )
    assert assert_same_as_fts5(index, terms) > 20
    # The same marker again: nothing re-read, still exact.
    index.refresh(marker)
    assert assert_same_as_fts5(index, ["zorbleflux"]) == 1


def test_too_many_new_rows_drop_the_index_until_it_is_built_again(fresh_cairn, vault_copy):
    fresh_cairn.indexing.index()
    index = Bm25Index(fresh_cairn.store)
    assert index.build()
    for i in range(6):
        (vault_copy / f"Bulk {i}.md").write_text(f"# Bulk {i}\n\nA wibblequark line.\n", encoding="utf-8")
    fresh_cairn.indexing.index()
    index.MAX_NEW_ROWS = 3  # bulk indexing: tokenizing every new row on a query's thread would stall it
    index.refresh(1)
    assert not index.ready and index.wants_rebuild
    assert index.scores("wibblequark") is None  # FTS5 answers meanwhile
    assert index.build()
    assert assert_same_as_fts5(index, ["wibblequark", "bulk"]) == 2
    assert len(index.scores("wibblequark")[0]) == 6


def test_a_full_text_index_that_no_longer_matches_the_rows_read_is_dropped(fresh_cairn, vault_copy, monkeypatch):
    fresh_cairn.indexing.index()
    index = Bm25Index(fresh_cairn.store)
    assert index.build()
    index.refresh(1)  # nothing changed: still ready
    assert index.ready
    real = fresh_cairn.store.fts_snapshot

    def miscounted(*args, **kw):  # FTS5's token count no longer adds up to the rows read
        snap = real(*args, **kw)
        return snap and dataclasses.replace(snap, n_tokens=snap.n_tokens + 1)

    monkeypatch.setattr(fresh_cairn.store, "fts_snapshot", miscounted)
    (vault_copy / "One more.md").write_text(
        "# One more\n\nA note that changes the full-text index.\n", encoding="utf-8"
    )
    fresh_cairn.indexing.index()
    index.refresh(2)
    assert not index.ready
    assert index.scores("note") is None


@pytest.mark.shared_data("eval/dev.jsonl")
def test_the_keyword_ranking_is_the_same_from_memory_as_from_fts5(help_cairn):
    query = help_cairn.query
    questions = [
        json.loads(line)["question"]
        for line in (SHARED / "eval" / "dev.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line)["vault"] == "obsidian-help"
    ]
    assert not query.keyword.terms.ready
    from_fts5 = {q: query.keyword_ranking(q) for q in questions}
    thread = query.start_keyword_index()
    thread.join(timeout=60)
    try:
        assert query.keyword.terms.ready
        for q in questions:
            assert query.keyword_ranking(q) == from_fts5[q], q
    finally:
        query.keyword.reset()  # the session fixture goes back to FTS5 for the other tests


def test_a_dropped_index_is_rebuilt_only_once_the_store_is_quiet(fresh_cairn, vault_copy):
    fresh_cairn.indexing.index()
    query = fresh_cairn.query
    query.start_keyword_index().join(timeout=60)
    assert query.keyword.terms.ready
    query.keyword.terms.MAX_NEW_ROWS = 1  # the next change counts as bulk: the index is dropped
    query.keyword.REBUILD_S, query.keyword.QUIET_S = 0.0, 3600.0
    for i in range(3):
        (vault_copy / f"Bulk {i}.md").write_text(f"# Bulk {i}\n\nA frobnicated line.\n", encoding="utf-8")
    fresh_cairn.indexing.index()
    from_fts5 = query.keyword_ranking("frobnicated")
    assert len(from_fts5) == 3 and not query.keyword.terms.ready  # FTS5 answered; the store just changed: no rebuild
    assert not query.keyword.building()
    query.keyword.QUIET_S = 0.0  # the store has been quiet long enough
    query.keyword_ranking("frobnicated")
    assert query.keyword.wait(timeout=60)
    assert query.keyword.terms.ready and query.keyword_ranking("frobnicated") == from_fts5


def test_after_a_run_the_index_kept_up_with_is_not_read_again_and_a_dropped_one_is(fresh_cairn, vault_copy):
    """The daemon builds the in-memory BM25 at start, before its start-up run; after the run it builds it again only
    when the run changed more than the index could follow."""
    fresh_cairn.indexing.index()
    keyword = fresh_cairn.query.keyword
    keyword.start().join(timeout=60)
    built = keyword.terms._base
    (vault_copy / "One more.md").write_text("# One more\n\nA quibbleflax line.\n", encoding="utf-8")
    fresh_cairn.indexing.index()
    assert fresh_cairn.query.start_keyword_index(when_needed=True) is None  # followed: nothing read again
    assert keyword.terms._base is built and len(keyword.terms.scores("quibbleflax")[0]) == 1
    keyword.terms.MAX_NEW_ROWS = 1  # the next change counts as bulk: the index is dropped
    for i in range(3):
        (vault_copy / f"Bulk {i}.md").write_text(f"# Bulk {i}\n\nA frobnicated line.\n", encoding="utf-8")
    fresh_cairn.indexing.index()
    thread = fresh_cairn.query.start_keyword_index(when_needed=True)
    assert thread is not None
    thread.join(timeout=60)
    assert keyword.terms.ready and len(keyword.terms.scores("frobnicated")[0]) == 3


def _chunk_ids(store, path: str) -> list[int]:
    return [
        r[0]
        for r in store.conn.execute(
            "SELECT c.id FROM chunks c JOIN notes n ON n.id = c.note_id WHERE n.path = ? ORDER BY c.id", (path,)
        )
    ]


def test_the_store_logs_deleted_chunks_so_a_refresh_reads_them_instead_of_scanning(fresh_cairn, vault_copy):
    fresh_cairn.indexing.index()
    store = fresh_cairn.store
    index = Bm25Index(store)
    assert index.build()
    notes = sorted(vault_copy.rglob("*.md"))
    edited, gone = notes[2], notes[3]
    rel = [p.relative_to(vault_copy).as_posix() for p in (edited, gone)]
    before = {p: _chunk_ids(store, p) for p in rel}
    seq = store.fts_snapshot(10**9).deletion_seq
    edited.write_text(edited.read_text(encoding="utf-8") + "\n\nThe snorkelwump paragraph.\n", encoding="utf-8")
    gone.unlink()
    fresh_cairn.indexing.index()
    snap = store.fts_snapshot(10**9, after_seq=seq)
    assert snap.live is None  # no scan of FTS5's row ids
    assert sorted(snap.deleted.tolist()) == sorted(before[rel[0]] + before[rel[1]])
    assert snap.deletion_seq == seq + len(snap.deleted)
    index.refresh(1)
    assert index.ready and len(index.scores("snorkelwump")[0]) == 1
    assert assert_same_as_fts5(index, query_terms(edited.read_text(encoding="utf-8"))[:40] + ["snorkelwump"]) > 10


def test_a_note_changed_twice_between_refreshes_and_a_trimmed_log_are_followed_exactly(
    fresh_cairn, vault_copy, monkeypatch
):
    fresh_cairn.indexing.index()
    store = fresh_cairn.store
    index = Bm25Index(store)
    assert index.build()
    note = sorted(vault_copy.rglob("*.md"))[4]
    text = note.read_text(encoding="utf-8")
    for word in ("flumperdash", "quorvantine"):  # rows added, then deleted again, before the index looks
        note.write_text(text + f"\n\nA {word} line.\n", encoding="utf-8")
        fresh_cairn.indexing.index()
    index.refresh(1)
    assert index.ready and len(index.scores("flumperdash")[0]) == 0 and len(index.scores("quorvantine")[0]) == 1
    assert assert_same_as_fts5(index, query_terms(text)[:30] + ["flumperdash", "quorvantine"]) > 10
    # A reader further behind than the log keeps: it cannot learn from the log what was deleted, so it scans.
    monkeypatch.setattr(type(store), "DELETION_LOG_KEEP", 1)
    held = index.deletion_seq
    note.write_text(text + "\n\nA brindlewhisk line.\n", encoding="utf-8")
    fresh_cairn.indexing.index()
    snap = store.fts_snapshot(10**9, after_seq=held)
    assert snap.deleted is None and snap.live is not None
    index.refresh(2)
    assert index.ready and len(index.scores("quorvantine")[0]) == 0 and len(index.scores("brindlewhisk")[0]) == 1
    assert assert_same_as_fts5(index, query_terms(text)[:30] + ["quorvantine", "brindlewhisk"]) > 10


def test_an_index_without_the_deletion_log_opened_read_only_is_still_followed(fresh_cairn, vault_copy, tmp_path):
    import apsw

    from cairn.store import Store

    fresh_cairn.indexing.index()
    path = fresh_cairn.store.path
    conn = apsw.Connection(str(path))  # what Cairn wrote before schema version 3
    conn.execute("DROP TRIGGER chunks_deleted; DROP TABLE chunk_deletions; PRAGMA user_version=2")
    conn.close()
    reader = Store(path, readonly=True)  # an MCP server of this version on the index of an older daemon
    try:
        index = Bm25Index(reader)
        assert index.build() and index.deletion_seq is None
        note = sorted(vault_copy.rglob("*.md"))[5]
        rel = note.relative_to(vault_copy).as_posix()
        old_ids = _chunk_ids(reader, rel)
        with fresh_cairn.store.conn as c:  # the older daemon deletes the note's rows (no log to write)
            c.executemany("DELETE FROM chunks_fts WHERE rowid = ?", [(i,) for i in old_ids])
            c.executemany("DELETE FROM chunk_vectors WHERE chunk_id = ?", [(i,) for i in old_ids])
            c.execute("DELETE FROM chunk_units WHERE chunk_id IN (SELECT value FROM json_each(?))", (str(old_ids),))
            c.execute("DELETE FROM chunks WHERE id IN (SELECT value FROM json_each(?))", (str(old_ids),))
        assert reader.schema_version == 2
        index.refresh(1)
        assert index.ready and not np.isin(old_ids, index.live_ids()).any()
        assert assert_same_as_fts5(index, query_terms(note.read_text(encoding="utf-8"))[:30]) > 5
    finally:
        reader.close()


def test_postings_built_a_page_at_a_time_equal_those_built_at_once(monkeypatch):
    """A whole-index build folds its rows into arrays a page at a time (so it never holds every row's tokens): the
    postings and row sizes equal those of one page holding every row."""
    from cairn.search.postings import PostingsBuilder

    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(60)]
    docs = [
        (cid, list(rng.choice(words, size=int(rng.integers(0, 30))))) for cid in sorted(rng.choice(5000, 400, False))
    ]

    def build(page: int):
        monkeypatch.setattr(PostingsBuilder, "PAGE", page)
        builder = PostingsBuilder()
        for cid, tokens in docs:
            builder.add(int(cid), tokens)
        return builder.finish(), builder.sizes, builder.last_id

    (paged, paged_sizes, paged_last), (whole, whole_sizes, whole_last) = build(7), build(10**9)
    assert sorted(paged.terms) == sorted(whole.terms) and len(whole.terms) > 50
    for term, (ids, tf) in whole.terms.items():
        assert np.array_equal(paged.terms[term][0], ids) and np.array_equal(paged.terms[term][1], tf)
        assert np.all(np.diff(ids) > 0)
    assert all(np.array_equal(a, b) for a, b in zip(paged_sizes, whole_sizes)) and paged_last == whole_last
    held = {int(cid): len(tokens) for cid, tokens in docs}
    assert dict(zip(whole_sizes[0].tolist(), whole_sizes[1].tolist())) == held
    assert int(whole.terms["w3"][1].sum()) == sum(tokens.count("w3") for _, tokens in docs)

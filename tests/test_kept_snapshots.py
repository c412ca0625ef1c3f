"""A daemon started on an existing index reads its vector snapshot and its in-memory BM25 back from the private files
kept beside the index (cairn.search.vector_file, cairn.search.bm25_file) instead of rebuilding them from every row;
the answers are those of a fresh build, also after notes changed since the files were written, and a file that
does not match the index (damaged, of another index file, of a later state) is rebuilt, never used. Real store,
real model, real indexer over writable copies of the sample vault."""

from __future__ import annotations

import os
import shutil
import stat

import numpy as np
import pytest

from cairn.search import SearchService, bm25_file, vector_file
from cairn.search.keyword import Bm25Index
from cairn.search.query import query_terms
from cairn.store import Store
from support import embedders
from support.cairns import open_cairn
from support.keyword_checks import assert_same_as_fts5
from support.requests import search_request

embedder = embedders.stand_in  # the fixture: the stand-in model, these tests only move data

QUESTIONS = ["daily notes template", "how do I link two notes", "tags and folders", "weekly review checklist"]


def _results(service: SearchService) -> list[list[tuple]]:
    return [
        [(h.file_path, h.symbol, h.score, h.cosine) for h in service.search(search_request(q, top_k=8)).hits]
        for q in QUESTIONS
    ]


def _no_full_load(monkeypatch) -> None:
    """Reading every vector from the store fails from here on: a snapshot must come from the kept file."""

    def refused(self):
        raise AssertionError("every vector read from the store, though a kept snapshot was there")

    monkeypatch.setattr(Store, "load_vector_matrices_and_recipe", refused)


@pytest.fixture
def indexed(fresh_cairn):
    fresh_cairn.indexing.index()
    return fresh_cairn


def test_a_restart_reads_the_vectors_kept_beside_the_index_and_answers_as_a_fresh_load(indexed, embedder, monkeypatch):
    store = indexed.store
    fresh = _results(SearchService(store, embedder))
    kept = vector_file.path_of(store)
    assert kept.exists() and stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert not [p for p in store.path.parent.iterdir() if p.name.endswith(".tmp")]  # written atomically
    with monkeypatch.context() as m:
        _no_full_load(m)
        restarted = SearchService(store, embedder)
        assert _results(restarted) == fresh
        assert restarted.vectors.current().generation == store.vectors_generation()


def test_vectors_kept_before_notes_changed_are_brought_up_to_date(indexed, embedder, monkeypatch, vault_copy):
    store = indexed.store
    SearchService(store, embedder).vectors.current()  # the file kept at this state
    notes = sorted(vault_copy.rglob("*.md"))
    notes[0].unlink()
    notes[1].write_text(notes[1].read_text(encoding="utf-8") + "\n\nA weekly review of quokka habits.\n", "utf-8")
    (vault_copy / "New note.md").write_text("# New note\n\nA daily notes template for quokkas.\n", encoding="utf-8")
    indexed.indexing.index()
    with monkeypatch.context() as m:
        _no_full_load(m)
        restarted = _results(SearchService(store, embedder))
    vector_file.path_of(store).unlink()
    assert restarted == _results(SearchService(store, embedder))  # a full load from the store


def test_chunks_whose_vectors_were_completed_since_the_kept_file_are_read_again(fresh_cairn, embedder, monkeypatch):
    """A chunk's vector changes under its id when its tier rises (whole chunk alone → complete): a file kept at
    tier 1 is brought up to date, and the answers are those of a full load."""
    store = fresh_cairn.store
    fresh_cairn.indexer.sync_text()
    while fresh_cairn.vectors.embed_batch(64, tier=1)[2]:
        pass
    SearchService(store, embedder).vectors.current()  # kept at tier 1
    fresh_cairn.vectors.embed_batch(3, tier=2)  # a few chunks completed: new vectors under the same ids
    assert store.tier_counts()[2] >= 1
    with monkeypatch.context() as m:
        _no_full_load(m)
        restarted = _results(SearchService(store, embedder))
    vector_file.path_of(store).unlink()
    assert restarted == _results(SearchService(store, embedder))


@pytest.mark.parametrize("damage", ["truncated", "flipped", "garbage", "other index file", "later state"])
def test_kept_vectors_that_do_not_match_the_index_are_not_used(indexed, embedder, tmp_path, damage):
    store = indexed.store
    fresh = _results(SearchService(store, embedder))
    path = vector_file.path_of(store)
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":  # a byte of the int8 copies
        found = vector_file.read(store)
        assert found is not None
        found.rows[0].close()
        data[len(data) // 2 - found.rows[2] * 384 * 4 // 2 - 100] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "garbage":
        path.write_bytes(os.urandom(4096))
    elif damage == "other index file":  # the index copied: another file, though its generation is the same
        store.wal_checkpoint()
        other = tmp_path / "copy" / store.path.name
        other.parent.mkdir()
        shutil.copyfile(store.path, other)
        shutil.copyfile(path, vector_file.path_of(Store(other)))
        copy = Store(other)
        try:
            assert vector_file.read(copy) is None
        finally:
            copy.close()
        return
    else:  # a file kept at a state the index has not reached (an older copy of the index put back)
        assert vector_file.read(store) is not None
        with store._write_lock, store.conn as c:
            c.execute("UPDATE meta SET value = value - 1 WHERE key = 'vectors_generation'")
    assert vector_file.read(store) is None
    assert _results(SearchService(store, embedder)) == fresh
    assert vector_file.read(store) is not None  # written again by the full load


def test_a_read_only_index_uses_the_kept_vectors_and_writes_none(indexed, embedder, monkeypatch):
    store = indexed.store
    fresh = _results(SearchService(store, embedder))
    store.wal_checkpoint()
    reader = Store(store.path, readonly=True)
    try:
        with monkeypatch.context() as m:
            _no_full_load(m)
            assert _results(SearchService(reader, embedder)) == fresh
        vector_file.path_of(store).unlink()
        assert _results(SearchService(reader, embedder)) == fresh
        assert not vector_file.path_of(store).exists()
    finally:
        reader.close()


def _all_terms(vault) -> list[str]:
    return sorted({t for p in vault.rglob("*.md") for t in query_terms(p.read_text(encoding="utf-8"))})[:400]


def test_the_keyword_statistics_kept_beside_the_index_score_exactly_as_fts5(indexed, vault_copy, monkeypatch):
    store = indexed.store
    assert Bm25Index(store).build()
    kept = bm25_file.path_of(store)
    assert kept.exists() and stat.S_IMODE(kept.stat().st_mode) == 0o600
    notes = sorted(vault_copy.rglob("*.md"))
    notes[2].unlink()
    notes[3].write_text(notes[3].read_text(encoding="utf-8") + "\n\nZorbleflux tuning for quokkas.\n", "utf-8")
    indexed.indexing.index()
    read_all = store.fts_snapshot

    def only_changes(after_id, *args, **kwargs):
        assert after_id > 0, "every row tokenized again, though a kept build was there"
        return read_all(after_id, *args, **kwargs)

    monkeypatch.setattr(store, "fts_snapshot", only_changes)
    restarted = Bm25Index(store)
    assert restarted.build()
    terms = _all_terms(vault_copy) + ["zorbleflux", "quokkas"]
    assert assert_same_as_fts5(restarted, terms) > 100
    assert restarted.corpus() is not None and restarted.corpus().n_rows == store.fts_counts()[0]


def test_damaged_keyword_statistics_are_built_again(indexed, vault_copy):
    store = indexed.store
    assert Bm25Index(store).build()
    path = bm25_file.path_of(store)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x55  # inside the last array (the row sizes)
    path.write_bytes(bytes(data))
    assert bm25_file.read(store) is None
    index = Bm25Index(store)
    assert index.build()
    assert assert_same_as_fts5(index, _all_terms(vault_copy)) > 100
    assert bm25_file.read(store) is not None


def test_keyword_statistics_of_another_index_file_are_not_used(indexed, tmp_path, embedder, vault_copy):
    store = indexed.store
    assert Bm25Index(store).build()
    other = open_cairn(vault_copy, tmp_path / "other-data", embedder)
    try:
        other.indexing.index()
        shutil.copyfile(bm25_file.path_of(store), bm25_file.path_of(other.store))
        assert bm25_file.read(other.store) is None
        index = Bm25Index(other.store)
        assert index.build()
        assert assert_same_as_fts5(index, _all_terms(vault_copy)) > 100
    finally:
        other.close()


def test_rows_kept_in_the_file_read_back_bit_for_bit(indexed):
    store = indexed.store
    from cairn.search.vectors import VectorSnapshot

    loaded = VectorSnapshot.load(store)
    kept = VectorSnapshot.from_file(store)
    assert kept is not None
    assert np.array_equal(kept.chunk_ids, loaded.chunk_ids)
    assert np.array_equal(kept.chunks.matrix(), loaded.chunks.matrix())
    assert np.array_equal(kept.sentences.matrix(), loaded.sentences.matrix())
    assert kept.dense.nbytes() == loaded.dense.nbytes()


def test_full_reloads_keep_their_vectors_at_most_every_keep_every_s(indexed, monkeypatch):
    from cairn.search.vectors import Vectors, VectorSnapshot

    store = indexed.store
    vectors = Vectors(store)
    vectors.current()
    path = vector_file.path_of(store)
    first = path.stat().st_ino
    monkeypatch.setattr(VectorSnapshot, "refresh", classmethod(lambda cls, old, store, max_changed: None))
    vectors.reload(wait=True)  # a full load right after the kept one: not kept again
    assert path.stat().st_ino == first
    assert vectors.current().generation == store.vectors_generation()
    monkeypatch.setattr(Vectors, "KEEP_EVERY_S", 0.0)
    vectors.reload(wait=True)
    assert path.stat().st_ino != first  # kept again: a new file renamed over the old one
    assert vector_file.read(store) is not None


def test_vectors_refreshed_during_a_long_embedding_are_kept_for_the_next_start(fresh_cairn, embedder, monkeypatch):
    """A first index's reloads mostly read only the changed chunks; those are kept too, so a restart after an hour of
    embedding refreshes from a recent file instead of reading every vector again."""
    from cairn.search.vectors import Vectors

    store = fresh_cairn.store
    fresh_cairn.indexer.sync_text()
    fresh_cairn.vectors.embed_batch(8, tier=1)
    service = SearchService(store, embedder)
    service.vectors.current()  # a full load, kept: 8 chunks
    monkeypatch.setattr(Vectors, "INCREMENTAL_MAX", 10.0)  # every reload below refreshes, however much changed
    monkeypatch.setattr(Vectors, "KEEP_EVERY_S", 0.0)
    while fresh_cairn.vectors.embed_batch(16, tier=1)[2]:
        service.vectors.reload(wait=True)
    service.vectors.reload(wait=True)
    assert service.vectors.current().generation == store.vectors_generation()
    monkeypatch.setattr(Vectors, "INCREMENTAL_MAX", 0.25)  # the next start refreshes only from a file this close
    with monkeypatch.context() as m:
        _no_full_load(m)
        restarted = _results(SearchService(store, embedder))
    vector_file.path_of(store).unlink()
    assert restarted == _results(SearchService(store, embedder))

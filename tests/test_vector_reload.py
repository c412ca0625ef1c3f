"""Reloading the query service's in-memory vectors reads only what changed since the snapshot it replaces
(cairn.search.vectors.VectorSnapshot.refresh), and gives the same scores, dense top chunks and search results as loading
everything again. Real store, real model, real indexer over writable vault copies."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from cairn.search import SearchService
from cairn.search.vectors import Vectors, VectorSnapshot
from cairn.store import Store
from support.cairns import make_config, open_cairn
from support.requests import search_request
from support.vaults import HELP_VAULT

pytestmark = pytest.mark.slow  # copies of the help vault indexed and re-indexed

QUESTIONS = [
    "How do I embed a note in another note?",
    "keyboard shortcut for the command palette",
    "sync between devices with end-to-end encryption",
    "when should I water tomatoes",
    "how to feed a sourdough starter",
]


@pytest.fixture
def help_copy(tmp_path, help_cairn, embedder):
    """A Cairn over a writable copy of the help vault, with a copy of help_cairn's index (nothing re-embedded)."""

    vault = tmp_path / "help"
    shutil.copytree(HELP_VAULT, vault)
    config = make_config(vault, tmp_path / "data")
    help_cairn.store.wal_checkpoint()
    config.db_path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(help_cairn.store.path, config.db_path)
    cairn = open_cairn(vault, tmp_path / "data", embedder)
    cairn.indexing.index()
    yield cairn
    cairn.close()


def _notes(vault):
    return sorted(p for p in vault.rglob("*.md") if ".obsidian" not in p.parts)


def _edit_some_notes(vault, *, rewrite: int = 2) -> None:
    """Rewrite ``rewrite`` notes (a new paragraph, and one sentence repeated from another note), delete one, rename
    one, and add a new note holding new text and a sentence that other notes have too."""
    notes = _notes(vault)
    borrowed = next(
        line
        for line in notes[0].read_text(encoding="utf-8").splitlines()
        if len(line.split()) > 6 and not line.startswith(("#", "-", "|", ">", "!"))
    )
    for i, path in enumerate(notes[1 : 1 + rewrite]):
        path.write_text(
            path.read_text(encoding="utf-8") + f"\n\n## Added {i}\n\nA fresh paragraph about quokka "
            f"migrations number {i}, written during the test.\n\n{borrowed}\n",
            encoding="utf-8",
        )
    notes[rewrite + 1].unlink()
    notes[rewrite + 2].rename(notes[rewrite + 2].with_name("Renamed during the test.md"))
    (vault / "A new note.md").write_text(
        f"# A new note\n\nSourdough starters like rye flour and warm water.\n\n{borrowed}\n", encoding="utf-8"
    )


def _row(rows, i: int) -> np.ndarray:
    """Row ``i`` of a snapshot's float32 rows."""
    return rows.read(np.asarray([i]))[0]


def _by_id(snap: VectorSnapshot, values: np.ndarray) -> dict[int, float]:
    return {int(c): float(v) for c, v in zip(snap.chunk_ids, values)}


def _assert_same_as_full_load(inc: VectorSnapshot, full: VectorSnapshot, embedder) -> None:
    assert inc.generation == full.generation
    assert sorted(inc.chunk_ids.tolist()) == sorted(full.chunk_ids.tolist())
    assert all(inc.row_of[int(c)] == i for i, c in enumerate(inc.chunk_ids))
    # Each chunk's sentences: the same multiset of vectors as the full load's (by chunk id).
    for snap in (inc, full):
        d = snap.dense
        assert np.array_equal(d.sentence_start[snap.group_rows], snap.group_starts)
        assert (
            np.diff(np.repeat(snap.group_rows, np.diff(np.r_[snap.group_starts, len(snap.sentence_order)]))) >= 0
        ).all()
    for cid in full.chunk_ids.tolist()[:: max(1, len(full.chunk_ids) // 200)]:
        a, b = inc.row_of[cid], full.row_of[cid]
        assert np.array_equal(_row(inc.chunks, a), _row(full.chunks, b))
        ua = inc.sentences.read(inc.sentence_order[inc.dense.sentence_start[a] : inc.dense.sentence_end[a]])
        ub = full.sentences.read(full.sentence_order[full.dense.sentence_start[b] : full.dense.sentence_end[b]])
        assert sorted(map(bytes, ua)) == sorted(map(bytes, ub))
    for question in QUESTIONS:
        qvec = embedder.embed_query(question)
        (ci, bi), (cf, bf) = inc.scores(qvec), full.scores(qvec)
        assert _by_id(inc, ci) == _by_id(full, cf)
        assert _by_id(inc, bi) == _by_id(full, bf)
        for k in (1, 10, 60):
            w = SearchService.SENTENCE_WEIGHT
            top_inc = inc.chunk_ids[inc.dense.query(qvec).top(k, w, inc.chunk_ids)].tolist()
            top_full = full.chunk_ids[full.dense.query(qvec).top(k, w, full.chunk_ids)].tolist()
            assert top_inc == top_full
        # The int8 bounds too: the kept rows' quantisation is the one a fresh quantisation gives.
        qi, qf = inc.dense.query(qvec), full.dense.query(qvec)
        assert _by_id(inc, qi.cos_lo) == _by_id(full, qf.cos_lo)
        assert _by_id(inc, qi.sentence_hi) == _by_id(full, qf.sentence_hi)


def test_a_reload_after_edits_deletes_renames_and_new_notes_scores_every_chunk_as_a_full_load_does(
    help_copy, embedder, monkeypatch
):
    store = help_copy.store
    old = VectorSnapshot.load(store)
    _edit_some_notes(help_copy.config.vault)
    help_copy.indexing.index()

    asked: list[list[int]] = []
    real = Store.vector_matrices_of

    def spy(self, chunk_ids):
        asked.append([int(c) for c in chunk_ids])
        return real(self, chunk_ids)

    monkeypatch.setattr(Store, "vector_matrices_of", spy)
    inc = VectorSnapshot.refresh(old, store, max_changed=Vectors.INCREMENTAL_MAX)
    assert inc is not None
    full = VectorSnapshot.load(store)
    added = set(full.chunk_ids.tolist()) - set(old.chunk_ids.tolist())
    assert added and len(asked) == 1 and set(asked[0]) == added  # only the new chunks' vectors were read
    assert len(added) < len(full.chunk_ids) / 20
    assert set(old.chunk_ids.tolist()) - set(full.chunk_ids.tolist())  # some were removed
    _assert_same_as_full_load(inc, full, embedder)
    # Sentences repeated in the new notes reuse a sentence row already held.
    assert len(inc.sentences) < len(old.sentences) + sum(
        int(inc.dense.sentence_end[inc.row_of[c]] - inc.dense.sentence_start[inc.row_of[c]]) for c in added
    )


def test_search_results_after_an_incremental_reload_are_those_of_a_full_load(help_copy, embedder, monkeypatch):
    service = SearchService(help_copy.store, embedder)
    before = service.vectors.current()
    _edit_some_notes(help_copy.config.vault, rewrite=3)
    help_copy.indexing.index()
    loads = []
    real_load = VectorSnapshot.load

    def counting_load(store):
        loads.append(store)
        return real_load(store)

    monkeypatch.setattr(VectorSnapshot, "load", staticmethod(counting_load))
    service.vectors.reload()
    assert service.vectors.current() is not before and not loads  # reloaded from the snapshot held
    assert service.vectors.current().generation == help_copy.store.vectors_generation()
    monkeypatch.setattr(VectorSnapshot, "load", staticmethod(real_load))
    fresh = SearchService(help_copy.store, embedder)
    for question in QUESTIONS + ["quokka migrations written during the test", "rye flour and warm water"]:
        for mode in ("hybrid", "dense"):
            got = service.search(search_request(question, top_k=10), mode=mode).hits
            want = fresh.search(search_request(question, top_k=10), mode=mode).hits
            assert [(h.chunk_id, h.score, h.cosine) for h in got] == [(h.chunk_id, h.score, h.cosine) for h in want]
    assert any(
        h.file_path == "A new note.md" for h in service.search(search_request("rye flour and warm water", top_k=5)).hits
    )


def test_a_reload_after_a_bulk_change_loads_every_vector_again(help_copy, embedder, monkeypatch):
    service = SearchService(help_copy.store, embedder)
    service.vectors.current()
    notes = _notes(help_copy.config.vault)
    for path in notes[: len(notes) // 3]:  # a third of the notes rewritten: well over a quarter of the chunks
        path.write_text(path.read_text(encoding="utf-8").replace(" ", "  ", 1) + "\n\nBulk edit.\n", encoding="utf-8")
    help_copy.indexing.index()
    partial = []
    monkeypatch.setattr(Store, "vector_matrices_of", lambda self, ids: partial.append(ids))
    service.vectors.reload()
    assert not partial  # declined before reading any vector
    full = VectorSnapshot.load(help_copy.store)
    assert service.vectors.current().generation == full.generation
    assert np.array_equal(service.vectors.current().chunk_ids, full.chunk_ids)  # the full load's own order
    assert len(service.vectors.current().sentences) == len(full.sentences)


def test_a_reload_after_the_vector_recipe_changed_loads_every_vector_again(fresh_cairn, embedder):
    # A new recipe re-embeds every chunk under the ids it had: the ids alone show no change.
    fresh_cairn.indexing.index()
    store = fresh_cairn.store
    service = SearchService(store, embedder)
    old = service.vectors.current()
    from cairn.index import ChunkVectors

    ChunkVectors(store, embedder, title_weight=0.2).embed_pending()  # resets, then embeds all again
    assert store.embedded_chunk_ids()[2].tolist() == sorted(old.chunk_ids.tolist())
    assert VectorSnapshot.refresh(old, store, max_changed=1.0) is None
    service.vectors.reload()
    full = VectorSnapshot.load(store)
    cid = int(old.chunk_ids[0])
    assert not np.array_equal(_row(old.chunks, old.row_of[cid]), _row(full.chunks, full.row_of[cid]))
    snap = service.vectors.current()
    assert all(
        np.array_equal(_row(snap.chunks, snap.row_of[c]), _row(full.chunks, full.row_of[c])) for c in full.row_of
    )


def test_a_reload_with_nothing_changed_keeps_the_vectors_and_takes_the_new_generation(fresh_cairn, monkeypatch):
    fresh_cairn.indexing.index()
    store = fresh_cairn.store
    old = VectorSnapshot.load(store)
    cid = int(old.chunk_ids[0])
    row = store.chunk_rows([cid])[cid]
    vec = store.vectors([cid])[cid]
    assert store.set_vectors([(cid, row.content_hash, vec, [])]) == 1  # written again: a new generation
    monkeypatch.setattr(Store, "vector_matrices_of", lambda self, ids: pytest.fail("nothing to read"))
    same = VectorSnapshot.refresh(old, store, max_changed=0.25)
    assert same is not None and same.generation == store.vectors_generation() > old.generation
    assert same.dense is old.dense and same.chunks is old.chunks


def test_a_snapshot_of_an_empty_index_is_loaded_in_full_next_time(fresh_cairn):
    empty = VectorSnapshot.load(fresh_cairn.store)
    assert len(empty.chunk_ids) == 0
    fresh_cairn.indexing.index()
    assert VectorSnapshot.refresh(empty, fresh_cairn.store, max_changed=1.0) is None


def test_a_reload_after_only_deletions_drops_their_rows_and_sentences(fresh_cairn, embedder):
    fresh_cairn.indexing.index()
    store = fresh_cairn.store
    old = VectorSnapshot.load(store)
    (fresh_cairn.config.vault / "Garden" / "Compost.md").unlink()
    fresh_cairn.indexing.index()
    inc = VectorSnapshot.refresh(old, store, max_changed=Vectors.INCREMENTAL_MAX)
    assert inc is not None and 0 < len(old.chunk_ids) - len(inc.chunk_ids)
    _assert_same_as_full_load(inc, VectorSnapshot.load(store), embedder)


def test_a_failed_incremental_read_falls_back_to_loading_everything(fresh_cairn, embedder, monkeypatch):
    from cairn.errors import StoreError

    fresh_cairn.indexing.index()
    service = SearchService(fresh_cairn.store, embedder)
    old = service.vectors.current()
    (fresh_cairn.config.vault / "Garden" / "A bed of leeks.md").write_text(
        "# Leeks\n\nLeeks like deep holes.\n", encoding="utf-8"
    )
    fresh_cairn.indexing.index()

    def failing(self, ids):
        raise StoreError("disk I/O error (test)")

    monkeypatch.setattr(Store, "vector_matrices_of", failing)
    service.vectors.reload()
    snap = service.vectors.current()
    assert snap is not old and snap.generation == fresh_cairn.store.vectors_generation()
    assert any(fresh_cairn.store.chunk_rows([c])[c].path == "Garden/A bed of leeks.md" for c in snap.row_of)


def test_a_replaced_index_file_is_loaded_in_full(fresh_cairn, tmp_path):
    fresh_cairn.indexing.index()
    store = fresh_cairn.store
    old = VectorSnapshot.load(store)
    store.wal_checkpoint()
    shutil.copyfile(store.path, tmp_path / "other.sqlite3")
    (tmp_path / "other.sqlite3").replace(store.path)  # a new file at the same path (a rebuilt index reuses ids)
    assert VectorSnapshot.refresh(old, store, max_changed=1.0) is None


def test_refreshes_that_leave_most_of_the_vectors_file_unused_end_in_a_full_load(fresh_cairn):
    """Each refresh appends the edited chunks' rows to the float32 rows' file and leaves their old rows unused; once
    the unused rows pass the refresh limit, the next reload loads everything into a new file."""
    fresh_cairn.indexing.index()
    store = fresh_cairn.store
    snap = VectorSnapshot.load(store)
    note = sorted(fresh_cairn.config.vault.rglob("*.md"))[0]
    text = note.read_text(encoding="utf-8")
    refreshes = 0
    for i in range(200):
        note.write_text(text + f"\n\nEdit number {i} of this note.\n", encoding="utf-8")
        fresh_cairn.indexing.index()
        new = VectorSnapshot.refresh(snap, store, max_changed=Vectors.INCREMENTAL_MAX)
        if new is None:
            break
        snap, refreshes = new, refreshes + 1
    assert new is None and refreshes > 0
    live = len(snap.chunk_ids) + len(snap.sentences)
    assert snap.chunks.stored_rows > (1 + Vectors.INCREMENTAL_MAX) * live
    full = VectorSnapshot.load(store)  # a new file, holding only the rows in use
    assert full.chunks.stored_rows == len(full.chunk_ids) + len(full.sentences)

"""The vectors of the store for exact dense scoring: every chunk vector and every distinct sentence vector, as
int8 copies in memory and float32 rows in a temporary file (:class:`VectorSnapshot`, :mod:`cairn.search.float_rows`),
and :class:`Vectors`, which holds the snapshot in force and reloads it on a background thread as the store changes.

Sentence vectors with the same text (boilerplate sentences repeated across notes) have the same vector, held and
scored once: the scores are bound by memory bandwidth.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from cairn.memory import trim_heap
from cairn.search import vector_file
from cairn.search.cache import EpochLRU
from cairn.search.dense import DenseIndex, DenseQuery, quantize_rows
from cairn.search.float_rows import RowSource, file_sources, row_sources
from cairn.search.sentence_rows import compact_rows, distinct_sentences, row_keys, sentence_runs
from cairn.store import EmbeddedChunks, Store, tiers_of

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Added:
    """The sentence vectors of the chunks added since a snapshot, matched with the rows it holds."""

    rows: np.ndarray  # (a,) int64: the new chunk row owning each added sentence, ascending
    index: np.ndarray  # (a,) int64: each added sentence's row in the new ``sentences``
    new_rows: list[int]  # positions in the added sentences of the rows appended to ``sentences``
    keys: np.ndarray  # (a,) uint64: row_keys of the added sentences
    vectors: np.ndarray  # (a, 384) float32: the added sentence vectors, in ``rows`` order


@dataclass(frozen=True, slots=True)
class VectorSnapshot:
    """Every chunk vector and sentence vector of the store, for exact dense scoring: int8 copies in memory
    (:attr:`dense`), float32 rows read back for the chunks that can rank (:attr:`chunks`, :attr:`sentences`: a
    private temporary file beside the index, or memory where none can be written). Sentence vectors with the same
    text have the same vector, held and scored once. ``generation`` is the store's vectors generation when the chunk
    ids were read.

    Made by :meth:`load` (everything) or by :meth:`refresh` from the previous snapshot (only the chunks added or
    removed since are read, and only the new rows quantised). Both give the same scores, dense top chunks and search
    results for the same store state; a refreshed one may hold distinct sentence rows no chunk refers to any more
    (until the next full load) and its chunk rows are in another order."""

    generation: int
    loaded_at: float
    chunk_ids: np.ndarray  # (n,) int64
    chunks: RowSource  # (n, 384) float32
    row_of: dict[int, int]  # chunk id → row
    sentence_order: np.ndarray  # (m,) row in ``sentences`` of each sentence, sorted by owning chunk row
    group_starts: np.ndarray  # (g,) start of each owning chunk's run in sentence_order
    group_rows: np.ndarray  # (g,) the owning chunk row of each run
    sentences: RowSource  # (d, 384) float32: the distinct sentence vectors (and, after refresh(), unreferenced ones)
    dense: DenseIndex  # the same vectors with their int8 copies, for a question's exact top chunks
    sentence_keys: np.ndarray  # (d,) uint64: row_keys(sentences), to match a new sentence with a row held
    recipe: str | None  # the store's vector recipe the vectors were made with (Store.embedded_chunk_ids)
    file_id: tuple[int, int]  # Store.file_identity() at load: a replaced file is loaded in full
    tiers: np.ndarray  # (n,) int8: the vector tier of each chunk row when read (a tier change re-reads the chunk)

    @classmethod
    def load(cls, store: Store, *, keep: bool = True) -> VectorSnapshot:
        """Everything, read in one transaction (:meth:`Store.load_vector_matrices_and_recipe`). ``keep``: the float32
        rows and the int8 copies are kept in a file beside the index (:mod:`cairn.search.vector_file`), read back by
        :meth:`from_file` at the next start; else, or where that file cannot be written, the float32 rows go to a
        new temporary file in the index's folder (:func:`~cairn.search.float_rows.row_sources`)."""
        file_id = store.file_identity()
        (gen, chunk_ids, chunks, sentence_owner, sentences), recipe, tiers = store.load_vector_matrices_and_recipe()
        row_of = {int(c): i for i, c in enumerate(chunk_ids)}
        owners = (row_of.get(int(c), -1) for c in sentence_owner)
        owner_rows = np.fromiter(owners, dtype=np.int64, count=len(sentence_owner))
        owned = np.nonzero(owner_rows >= 0)[0]
        order = owned[np.argsort(owner_rows[owned], kind="stable")]
        firsts, index, keys = distinct_sentences(sentences)
        sentence_order = index[order]
        distinct = compact_rows(sentences, firsts)
        del sentences
        starts, group_rows, sentence_start, sentence_end = sentence_runs(owner_rows[order], len(chunk_ids))
        quantized = quantize_rows(chunks, distinct)
        kept = None if not keep else vector_file.save(
            store,
            (gen, recipe, file_id),
            {"chunk_ids": chunk_ids, "sentence_order": sentence_order, "group_starts": starts,
             "group_rows": group_rows, "sentence_keys": keys, "tiers": tiers},
            (sentence_start, sentence_end),
            quantized,
            (chunks, distinct),
        )  # fmt: skip
        chunk_rows, sentence_rows = _rows_of(store.path.parent, kept, chunks, distinct)
        del chunks, distinct
        dense = DenseIndex(chunk_rows, sentence_rows, sentence_order, sentence_start, sentence_end, quantized=quantized)
        return cls(
            generation=gen,
            loaded_at=time.monotonic(),
            chunk_ids=chunk_ids,
            chunks=chunk_rows,
            row_of=row_of,
            sentence_order=sentence_order,
            group_starts=starts,
            group_rows=group_rows,
            sentences=sentence_rows,
            dense=dense,
            sentence_keys=keys,
            recipe=recipe,
            file_id=file_id,
            tiers=tiers,
        )

    def keep(self, store: Store) -> bool:
        """Write this snapshot beside the index as :meth:`load` does (a refreshed one too), so that the next start
        refreshes from it instead of loading every vector. False when nothing was written: the float32-only path
        (no int8 copies), a read-only store, or the file could not be written (logged)."""
        quantized = self.dense.quantized
        if quantized is None:
            return False
        kept = vector_file.save(
            store,
            (self.generation, self.recipe, self.file_id),
            {"chunk_ids": self.chunk_ids, "sentence_order": self.sentence_order, "group_starts": self.group_starts,
             "group_rows": self.group_rows, "sentence_keys": self.sentence_keys, "tiers": self.tiers},
            (self.dense.sentence_start, self.dense.sentence_end),
            quantized,
            (self.chunks, self.sentences),
        )  # fmt: skip
        if kept is None:
            return False
        kept[0].close()
        return True

    @classmethod
    def from_file(cls, store: Store) -> VectorSnapshot | None:
        """The snapshot kept beside the index by the last :meth:`load` (:mod:`cairn.search.vector_file`), as it was
        then: the caller brings it up to date with :meth:`refresh`. None when there is none for this database file
        and a generation it has reached, or it is damaged."""
        kept = vector_file.read(store)
        if kept is None:
            return None
        index = kept.index
        try:
            chunk_rows, sentence_rows = file_sources(store.path.parent, kept.rows, kept.n, kept.d)
        except (OSError, ValueError):
            kept.rows[0].close()
            return None
        dense = DenseIndex(
            chunk_rows,
            sentence_rows,
            index["sentence_order"],
            kept.sentence_start,
            kept.sentence_end,
            quantized=kept.quantized,
        )
        chunk_ids = index["chunk_ids"]
        return cls(
            generation=kept.generation,
            loaded_at=time.monotonic(),
            chunk_ids=chunk_ids,
            chunks=chunk_rows,
            row_of=dict(zip(chunk_ids.tolist(), range(len(chunk_ids)))),
            sentence_order=index["sentence_order"],
            group_starts=index["group_starts"],
            group_rows=index["group_rows"],
            sentences=sentence_rows,
            dense=dense,
            sentence_keys=index["sentence_keys"],
            recipe=kept.recipe,
            file_id=kept.file_id,
            tiers=index["tiers"],
        )

    @classmethod
    def refresh(cls, old: VectorSnapshot, store: Store, *, max_changed: float) -> VectorSnapshot | None:
        """A snapshot of the store now, made from ``old`` by reading only what changed: the ids of every chunk with a
        vector (:meth:`Store.embedded_chunk_ids`), then the vectors of the chunks added since ``old``
        (:meth:`Store.vector_matrices_of`); a chunk id keeps its vector while its tier and the vector recipe stay (see
        there): a chunk whose tier rose is read again, as one removed and added.
        Removed chunks' rows and sentences are dropped, the others' arrays (and int8 copies:
        :meth:`DenseIndex.derived`) kept; a new sentence equal to a row held reuses it.

        Returns None when a full :meth:`load` is the right thing: ``old`` is empty, the store's file was replaced,
        the vector recipe changed, more than ``max_changed`` (a fraction) of ``old``'s chunk rows changed, more
        than that fraction of the sentence rows would be unreferenced, or the float32 rows' file holds more than
        that fraction of rows no longer used (earlier refreshes' removed rows). Store and file errors propagate."""
        n_old = len(old.chunk_ids)
        if not n_old or store.file_identity() != old.file_id:
            return None
        if old.chunks.stored_rows > (1 + max_changed) * (n_old + len(old.sentences)):
            return None
        embedded = store.embedded_chunk_ids()
        gen, recipe, ids = embedded.generation, embedded.recipe, embedded.chunk_ids
        if recipe != old.recipe:
            return None
        keep_rows, added = _kept_and_added(old.chunk_ids, ids)
        raised = tiers_of(embedded, old.chunk_ids[keep_rows]) != old.tiers[keep_rows]
        if raised.any():  # their vectors changed under the same ids: read again
            added = np.sort(np.concatenate([added, old.chunk_ids[keep_rows[raised]]]))
            keep_rows = keep_rows[~raised]
        changed = n_old - len(keep_rows) + len(added)
        if changed > max_changed * n_old:
            return None
        if not changed:
            return dataclasses.replace(old, generation=gen, loaded_at=time.monotonic(), recipe=recipe)
        return cls._with_changes(old, store, embedded, keep_rows, added, max_changed)

    @classmethod
    def _with_changes(
        cls,
        old: VectorSnapshot,
        store: Store,
        embedded: EmbeddedChunks,
        keep_rows: np.ndarray,
        added: np.ndarray,
        max_changed: float,
    ) -> VectorSnapshot | None:
        """:meth:`refresh` once the changes are known: ``old``'s rows ``keep_rows`` kept, the chunks ``added`` read."""
        now = time.monotonic()
        _, a_ids, a_chunks, a_owner, a_sentences = store.vector_matrices_of(added)
        n_keep = len(keep_rows)
        owner_kept, kept_pos = old._kept_sentences(keep_rows)
        new = old._match_added(a_ids, a_owner, a_sentences, n_keep)
        d_old = len(old.sentences)
        sentences = (
            old.sentences.extended(np.arange(d_old), new.vectors[new.new_rows]) if new.new_rows else old.sentences
        )
        sentence_keys = (
            np.concatenate([old.sentence_keys, new.keys[new.new_rows]]) if new.new_rows else old.sentence_keys
        )
        sentence_order = np.concatenate([old.sentence_order[kept_pos], new.index])
        unreferenced = len(sentences) - np.count_nonzero(np.bincount(sentence_order, minlength=len(sentences)))
        if unreferenced > max_changed * len(sentences):
            return None  # too many sentence rows nothing refers to: a full load compacts them
        chunk_ids = np.concatenate([old.chunk_ids[keep_rows], a_ids])
        chunks = old.chunks.extended(keep_rows, a_chunks)
        owners = np.concatenate([owner_kept[kept_pos], new.rows])
        starts, group_rows, sentence_start, sentence_end = sentence_runs(owners, len(chunk_ids))
        dense = old.dense.derived(
            chunks,
            sentences,
            sentence_order,
            sentence_start,
            sentence_end,
            chunk_from=np.r_[keep_rows, np.full(len(a_ids), -1, dtype=np.int64)],
            sentence_from=np.r_[np.arange(d_old), np.full(len(new.new_rows), -1, dtype=np.int64)],
        )
        return cls(
            generation=embedded.generation,
            loaded_at=now,
            chunk_ids=chunk_ids,
            chunks=chunks,
            row_of=dict(zip(chunk_ids.tolist(), range(len(chunk_ids)))),
            sentence_order=sentence_order,
            group_starts=starts,
            group_rows=group_rows,
            sentences=sentences,
            dense=dense,
            sentence_keys=sentence_keys,
            recipe=embedded.recipe,
            file_id=old.file_id,
            tiers=np.concatenate([old.tiers[keep_rows], tiers_of(embedded, a_ids)]),
        )

    def _kept_sentences(self, keep_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the new chunk row of each sentence position's owner (m,), -1 for a removed chunk; the positions in
        ``sentence_order`` of the kept chunks' sentences, order kept)."""
        n_old, m_old = len(self.chunk_ids), len(self.sentence_order)
        owner_old = np.repeat(self.group_rows, np.diff(np.r_[self.group_starts, m_old]).astype(np.int64))
        remap = np.full(n_old, -1, dtype=np.int64)
        remap[keep_rows] = np.arange(len(keep_rows))
        owner_kept = remap[owner_old] if m_old else np.zeros(0, np.int64)
        return owner_kept, np.flatnonzero(owner_kept >= 0)

    def _match_added(self, a_ids: np.ndarray, a_owner: np.ndarray, a_sentences: np.ndarray, n_keep: int) -> _Added:
        """The added chunks' sentences by new row (chunk rows from ``n_keep`` on), each matched with a row held (same
        key, same values), or with an earlier added one, or appended."""
        a_row = {int(c): n_keep + i for i, c in enumerate(a_ids)}
        a_rows = np.fromiter((a_row.get(int(c), -1) for c in a_owner), dtype=np.int64, count=len(a_owner))
        order = np.flatnonzero(a_rows >= 0)
        order = order[np.argsort(a_rows[order], kind="stable")]
        a_rows, a_sentences = a_rows[order], a_sentences[order]
        a_keys = row_keys(a_sentences)
        a_index = np.full(len(a_sentences), -1, dtype=np.int64)
        d_old = len(self.sentences)
        if d_old and len(a_sentences):
            sorter = np.argsort(self.sentence_keys, kind="stable")
            sorted_keys = self.sentence_keys[sorter]
            p = np.minimum(np.searchsorted(sorted_keys, a_keys), d_old - 1)
            hit = np.flatnonzero(sorted_keys[p] == a_keys)
            cand = sorter[p[hit]]
            equal = (self.sentences.read(cand) == a_sentences[hit]).all(axis=1)
            a_index[hit[equal]] = cand[equal]
        new_rows: list[int] = []
        first_new: dict[int, int] = {}
        for i in np.flatnonzero(a_index < 0).tolist():
            j = first_new.get(int(a_keys[i]))
            if j is not None and np.array_equal(a_sentences[new_rows[j - d_old]], a_sentences[i]):
                a_index[i] = j
                continue
            first_new.setdefault(int(a_keys[i]), d_old + len(new_rows))
            a_index[i] = d_old + len(new_rows)
            new_rows.append(i)
        return _Added(a_rows, a_index, new_rows, a_keys, a_sentences)

    def scores(self, qvec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(cosine of every chunk vector to ``qvec``, best cosine among each chunk's sentence vectors (-1 for a chunk
        without sentences)), both (n,) float32. Queries use :attr:`dense` instead (the same top chunks, cheaper);
        this is the reference. Computed row by row (``np.einsum``, as the exact values of
        :mod:`cairn.search.dense`): a BLAS matrix-vector product's last bit can depend on a row's position in the
        matrix, and a refreshed snapshot holds the same vectors in another order."""
        return self.dense.exact_scores(qvec)


def _rows_of(
    folder: Path, kept: tuple[BinaryIO, int, int] | None, chunks: np.ndarray, distinct: np.ndarray
) -> tuple[RowSource, RowSource]:
    """The float32 rows of a full load: read from the file they were just kept in (``kept``:
    :func:`~cairn.search.vector_file.save`), else written to a temporary file (or held: :func:`row_sources`)."""
    if kept is not None:
        try:
            in_file = file_sources(folder, kept, len(chunks), len(distinct))
            return in_file[0], in_file[1]
        except OSError:
            kept[0].close()
    chunk_rows, sentence_rows = row_sources(folder, chunks, distinct)
    return chunk_rows, sentence_rows


def _kept_and_added(old_ids: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows of ``old_ids`` still in ``ids``, ids in ``ids`` not in ``old_ids``); both id arrays ascending."""
    if len(ids):
        pos = np.minimum(np.searchsorted(ids, old_ids), len(ids) - 1)
        same = ids[pos] == old_ids
    else:
        pos, same = np.zeros(len(old_ids), dtype=np.int64), np.zeros(len(old_ids), dtype=bool)
    keep_rows = np.flatnonzero(same)
    known = np.zeros(len(ids), dtype=bool)
    known[pos[keep_rows]] = True
    return keep_rows, ids[~known]


class Vectors:
    """The snapshot of the store's vectors that searches score against, and its reloads (thread-safe).

    The first :meth:`current` loads it; after that, when the store's vectors changed, :meth:`for_query` starts a
    reload on a background thread (at most every :attr:`REFRESH_S` seconds) and queries go on with the snapshot they
    have: chunks embedded since are scored from the store (:meth:`embedded_since`, at most :attr:`MAX_NEWER` of
    them; the others join when the reload lands), and deleted ones are dropped by the caller. A reload reads only the
    chunks added or removed since (:meth:`VectorSnapshot.refresh`) unless more than :attr:`INCREMENTAL_MAX` of the
    rows changed; a reload that needs a full load waits until :attr:`FULL_REFRESH_S` after the last one, unless more
    chunks wait than a query scores (a bulk change: then at once). A full load overlaps the indexing of the next
    saves, hence the wait.

    :attr:`scores` keeps the dense scores of the last questions (:meth:`query_scores`), for the snapshot last asked
    about only: each entry holds its snapshot's vectors, so entries of replaced snapshots would keep those in
    memory."""

    REFRESH_S = 3.0
    FULL_REFRESH_S = 30.0
    #: A reload keeps its vectors beside the index (:meth:`VectorSnapshot.load`, :meth:`VectorSnapshot.keep`) at most
    #: this often: during a bulk change (a first index) reloads follow one another, and the next start refreshes
    #: from the last kept.
    KEEP_EVERY_S = 120.0
    MAX_NEWER = 256
    INCREMENTAL_MAX = 0.25
    #: Bytes of dense scores kept, all questions together (each holds (n,) float32 × 6: its bounds and exact cosines,
    #: and (d,) float32 for its sentences: :attr:`DenseQuery.nbytes`), so that the cache does not grow with the vault
    #: nor with the questions asked; at least the last question's.
    SCORES_CACHE_BYTES = 16 << 20
    #: Questions kept, whatever their size (a bound on the entries even for a vault of a few chunks).
    SCORES_CACHE_ITEMS = 1024

    def __init__(self, store: Store) -> None:
        self.store = store
        self.scores: EpochLRU[str, DenseQuery] = EpochLRU(
            self.SCORES_CACHE_ITEMS, max_bytes=self.SCORES_CACHE_BYTES, nbytes=lambda q: q.nbytes, exclusive=True
        )
        self._snapshot: VectorSnapshot | None = None
        self._lock = threading.Lock()
        self._full_loaded_at = 0.0  # time.monotonic() of the last full load of the vectors
        self._kept_at = -math.inf  # of the last full load that kept its vectors beside the index
        self._reload_tried_at = 0.0  # of the last reload started (one that waited for a full load included)
        self._bulk_waiting = False  # a query found more new chunks than it scores: the next load may be full
        self._loading: threading.Thread | None = None

    def current(self) -> VectorSnapshot:
        """The snapshot in force (loaded here, in full, when there is none yet)."""
        snap = self._snapshot
        if snap is not None:
            return snap
        with self._lock:
            if self._snapshot is None:
                self._snapshot = self._first_load()
                trim_heap()  # the load's temporaries (the matrices as read, float64 blocks) back to the system
            return self._snapshot

    def _first_load(self) -> VectorSnapshot:
        """The snapshot kept beside the index brought up to date (:meth:`VectorSnapshot.from_file`, then
        :meth:`VectorSnapshot.refresh`: only the chunks changed since are read), else a full load."""
        try:
            kept = VectorSnapshot.from_file(self.store)
            if kept is not None:
                snap = VectorSnapshot.refresh(kept, self.store, max_changed=self.INCREMENTAL_MAX)
                if snap is not None:
                    self._kept_at = time.monotonic()
                    return snap
        except Exception:  # a damaged file that passed its checks, or a read failed: a full load is always right
            log.warning("the vectors kept beside the index cannot be used; loading them all", exc_info=True)
        snap = VectorSnapshot.load(self.store)
        self._full_loaded_at = self._kept_at = time.monotonic()
        return snap

    def for_query(self) -> VectorSnapshot:
        """:meth:`current`, and a background reload started when the store's vectors changed and the last reload
        is at least :attr:`REFRESH_S` old."""
        had = self._snapshot is not None
        snap = self.current()
        if (
            had
            and snap.generation != self.store.vectors_generation()
            and time.monotonic() - max(snap.loaded_at, self._reload_tried_at) >= self.REFRESH_S
        ):
            self.reload(wait=False)
        return snap

    def reload(self, *, wait: bool = True, bulk: bool = False) -> None:
        """Replace the snapshot held by one of the store now. ``wait``: here, on the calling thread, as a bulk
        reload (a full load does not wait for :attr:`FULL_REFRESH_S`); else on a background thread, unless a reload
        is running. ``bulk``: more chunks wait than a query scores one by one, so a full load need not wait."""
        if wait:
            self._load(bulk=True)
            return
        with self._lock:
            if bulk:
                self._bulk_waiting = True  # seen by a load already running, before it decides to wait
            if self._loading is not None and self._loading.is_alive():
                return
            self._loading = threading.Thread(
                target=self._load, kwargs={"bulk": bulk}, name="cairn-vectors", daemon=True
            )
            self._loading.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the last background reload started to end. True when there was one (and it had not decided to
        wait for a full load)."""
        thread = self._loading
        if thread is None:
            return False
        thread.join(timeout)
        return True

    def _load(self, *, bulk: bool) -> None:
        own_thread = threading.current_thread() is self._loading
        try:
            self._load_here(bulk=bulk)
        finally:
            if own_thread:
                self.store.close_thread_connection()  # the loading thread ends (one per reload, every few seconds)

    def _load_here(self, *, bulk: bool) -> None:
        """From the snapshot held, reading only the changed chunks, or in full when that declines or fails — unless
        ``bulk`` is false and the last full load is less than FULL_REFRESH_S old."""
        self._reload_tried_at = started = time.monotonic()
        old = self._snapshot
        snap: VectorSnapshot | None = None
        if old is not None:
            try:
                snap = VectorSnapshot.refresh(old, self.store, max_changed=self.INCREMENTAL_MAX)
            except Exception:  # a read failed, or a bug: a full load is always right
                log.warning("reloading the changed in-memory vectors failed; loading them all", exc_info=True)
        if snap is None and old is not None and started - self._full_loaded_at < self.FULL_REFRESH_S:
            with self._lock:  # decided with reload() locked out: a bulk request is never lost
                if not (bulk or self._bulk_waiting):
                    if self._loading is threading.current_thread():
                        self._loading = None  # not loading: a bulk request starts a load of its own
                    return  # a full load waits: the snapshot held goes on serving
        try:
            if snap is None:
                self._bulk_waiting = False
                keep = started - self._kept_at >= self.KEEP_EVERY_S
                snap = VectorSnapshot.load(self.store, keep=keep)
                self._full_loaded_at = started
                if keep:
                    self._kept_at = started
            elif started - self._kept_at >= self.KEEP_EVERY_S and snap.keep(self.store):
                self._kept_at = started  # refreshed: kept too, or the next start would load in full after a long run
        except Exception:  # the store closed meanwhile, or a read failed: the snapshot held goes on serving
            log.warning("reloading the in-memory vectors failed; the next change tries again", exc_info=True)
            return
        with self._lock:
            self._snapshot = snap
        del old, snap
        trim_heap()  # the replaced snapshot and the load's temporaries back to the system

    def memory(self) -> dict[str, int]:
        """``{vectors, int8, caches}``: bytes of the snapshot in force (float32 rows held in memory, none when they
        are in their file, and the row maps; int8 copies and the integer kernel) and of the dense scores kept per
        question. A reload under way holds a second
        snapshot for a moment (not counted)."""
        snap = self._snapshot
        floats = ints = 0
        if snap is not None:
            floats, ints = snap.dense.nbytes()
            floats += sum(a.nbytes for a in (snap.chunk_ids, snap.group_starts, snap.group_rows, snap.sentence_keys))
            floats += sys.getsizeof(snap.row_of) + 64 * len(snap.row_of)  # the dict's slots and its int objects
        return {"vectors": floats, "int8": ints, "caches": self.scores.nbytes()}

    def embedded_since(self, snap: VectorSnapshot) -> list[int]:
        """Chunks that got vectors after ``snap`` was loaded (ids only grow), newest first, at most MAX_NEWER + 1.
        Newest first: when more were embedded than a query scores one by one, the ones left out must not be the
        note just saved."""
        if snap.generation == self.store.vectors_generation():
            return []
        last = int(snap.chunk_ids.max()) if len(snap.chunk_ids) else 0
        return self.store.embedded_chunks_after(last, self.MAX_NEWER + 1)

    def query_scores(self, snap: VectorSnapshot, query: str, qvec: np.ndarray) -> DenseQuery:
        """``query``'s dense scores against ``snap`` (:meth:`DenseIndex.query`), kept per snapshot and query text
        (with the exact cosines found so far)."""
        snap_key = (id(snap), snap.loaded_at)
        found = self.scores.get(query, snap_key)
        if found is not None:
            return found
        found = snap.dense.query(qvec)
        self.scores.put(query, found, snap_key)
        return found

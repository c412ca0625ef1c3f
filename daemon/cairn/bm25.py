"""In-memory BM25 over the chunks' full-text index: the same values as FTS5's ``bm25()``, to the last bit.

Why: FTS5 computes ``bm25()`` row by row (a row-size read and a position-list walk per matching row, ~2 µs).
On obsidian-hub a common term costs a query 32 ms ("obsidian": 15,818 of 19,573 chunks), and the terms of a
question asked for the first time 2-70 ms, 9.5 ms on average over the dev and bench questions: the largest part of
a new question's CPU. Here every term's postings (chunk ids, term frequency) and every chunk's length are numpy
arrays (obsidian-hub: 15,389 terms, 676,253 postings, 11 MB + 9 bytes per chunk id, built in 0.7-1.1 s off the
request path), and one term's
values are one vectorised expression: 0.3 ms for "obsidian".

Exactness: the documents are the FTS5 rows as inserted (text, symbol, title), tokenized by the table's own
tokenizer (:meth:`~cairn.store.Store.fts_snapshot`); the row and token counts are FTS5's own (its averages
record), so idf and the average row length are the numbers ``bm25()`` uses; and each value is computed with the
same double operations in the same order as ``fts5Bm25Function`` in SQLite's ``fts5_aux.c`` (k1 = 1.2,
b = 0.75, idf = log((N - n + 0.5) / (n + 0.5)), 1e-6 when ≤ 0; column weights 1). Tests compare the values with
FTS5's for every term of the dev questions, before and after notes change.

Freshness: :meth:`Bm25Index.refresh` after a commit reads, in one read transaction, the chunks deleted since
(the store's deletion log; a scan of FTS5's row ids when the log cannot say), the rows added since (chunk ids only
grow), and FTS5's counts. When our counts do not add up to FTS5's (an index file rebuilt, anything this cannot
follow) or too many rows changed, the index is dropped and :meth:`scores` returns None until a rebuild — the caller
then asks FTS5, which gives the same values, slower. A refresh after one saved note costs ~1 ms plus ~60 µs a
chunk (obsidian-hub; 12 ms at p50 when it scanned the row ids and re-merged every row added since the build).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np

from cairn.store import FtsSnapshot, Store

#: BM25 parameters of FTS5's bm25() (fts5_aux.c: ``const double k1 = 1.2; const double b = 0.75;``).
K1 = 1.2
B = 0.75


def fts5_bm25(tf: np.ndarray, length: np.ndarray, n_hit: int, n_rows: int, avgdl: float) -> np.ndarray:
    """FTS5's ``bm25()`` of a one-phrase query for the rows holding the phrase: ``tf`` (k,) instances in each row,
    ``length`` (k,) the rows' sizes in tokens (all columns), ``n_hit`` rows holding it, ``n_rows`` rows in all,
    ``avgdl`` = tokens in all rows / ``n_rows``. Returns (k,) float64, each < 0 (lower is better, as FTS5), equal to
    FTS5's doubles: the operations of ``fts5Bm25Function``, in its order (module docstring)."""
    idf = math.log((n_rows - n_hit + 0.5) / (n_hit + 0.5))  # libm's log, as the C code (not numpy's SIMD one)
    if idf <= 0.0:
        idf = 1e-6
    return -(idf * ((tf * (K1 + 1.0)) / (tf + K1 * ((1 - B) + (B * length) / avgdl))))


@dataclass(frozen=True)
class _Postings:
    """Term → (chunk ids (k,) int64 ascending, frequencies (k,) float64) of the rows read at one snapshot."""

    terms: dict[str, tuple[np.ndarray, np.ndarray]]

    @classmethod
    def of(cls, docs: list[tuple[int, list[str]]]) -> _Postings:
        vocab: dict[str, int] = {}
        term_ids: list[int] = []
        doc_ids: list[np.ndarray] = []
        for cid, tokens in docs:
            term_ids.extend([vocab.setdefault(t, len(vocab)) for t in tokens])
            doc_ids.append(np.full(len(tokens), cid, dtype=np.int64))
        if not term_ids:
            return cls({})
        span = int(max(cid for cid, _ in docs)) + 1
        keys, counts = np.unique(
            np.asarray(term_ids, dtype=np.int64) * span + np.concatenate(doc_ids), return_counts=True
        )  # sorted by term, then chunk id
        term_of, ids = np.divmod(keys, span)
        starts = np.flatnonzero(np.r_[True, term_of[1:] != term_of[:-1]])
        ends = np.r_[starts[1:], len(keys)]
        names = list(vocab)
        tf = counts.astype(np.float64)
        return cls({names[int(term_of[s])]: (ids[s:e], tf[s:e]) for s, e in zip(starts, ends)})


class Bm25Index:
    """FTS5's BM25 of single-token phrases, from memory (module docstring). Thread-safe.

    Use: :meth:`build` once (seconds: off the request path), :meth:`refresh` when the store may have changed, then
    :meth:`scores` per query term. Memory: 16 bytes per (term, chunk) pair plus 9 per chunk id.
    """

    #: Rows added since the last build that a refresh tokenizes on the spot (~60 µs each); beyond it the index is
    #: dropped until the next :meth:`build` (a bulk re-index: FTS5 serves meanwhile).
    MAX_NEW_ROWS = 2000
    #: Rows added since the last build at which :attr:`wants_rebuild` turns true (their postings are held in a
    #: second, smaller map that every lookup also reads).
    REBUILD_AFTER_ROWS = 5000

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._base: _Postings | None = None
        self._extra: _Postings = _Postings({})
        self._extra_rows = 0
        self._last_id = 0
        self._deletion_seq: int | None = None  # the store's deletion log entry applied last (None: scan)
        self._alive = np.zeros(0, dtype=bool)  # by chunk id: the row is in FTS5
        self._length = np.zeros(0, dtype=np.int64)  # by chunk id: the row's size in tokens, -1 when not read
        self._n_rows = 0
        self._n_tokens = 0
        self._marker: object = None

    @property
    def ready(self) -> bool:
        return self._base is not None

    @property
    def wants_rebuild(self) -> bool:
        """True when the index is not built, was dropped, or holds many rows outside its main postings."""
        return self._base is None or self._extra_rows >= self.REBUILD_AFTER_ROWS

    def build(self) -> bool:
        """Read and tokenize every FTS5 row (obsidian-hub: 0.7-1.1 s of CPU). False when FTS5's counts and the rows
        read do not agree (the index stays unbuilt: FTS5 serves)."""
        snap = self.store.fts_snapshot(0)
        if snap is None:
            return False
        postings = _Postings.of(snap.docs)
        top = int(snap.live[-1]) + 1 if len(snap.live) else 1
        length = np.full(top, -1, dtype=np.int64)
        for cid, tokens in snap.docs:
            length[cid] = len(tokens)
        alive = np.zeros(top, dtype=bool)
        alive[snap.live] = True
        with self._lock:
            if not self._consistent(snap, alive, length):
                self._drop()
                return False
            self._base, self._extra, self._extra_rows = postings, _Postings({}), 0
            self._alive, self._length = alive, length
            self._last_id = max((cid for cid, _ in snap.docs), default=0)
            self._deletion_seq = snap.deletion_seq
            self._n_rows, self._n_tokens = snap.n_rows, snap.n_tokens
            # Commits made while the rows were read (a refresh may already have followed them): followed now,
            # before anyone reads this state, so what is installed is never older than what it replaces.
            self._follow()
            self._marker = None
            return self._base is not None

    def refresh(self, marker: object) -> None:
        """Follow the store's changes since the last call (nothing to do when ``marker``, any value that changes
        whenever the store may have, is the last call's). Drops the index when it cannot follow (class docstring)."""
        with self._lock:
            if self._base is None or marker == self._marker:
                return
            if self._follow():
                self._marker = marker

    def _follow(self) -> bool:
        """Apply the rows added and removed since the state held (the lock held); False when it dropped the index."""
        live_top = int(np.flatnonzero(self._alive)[-1]) if self._alive.any() else 0
        if self.store.fts_counts() == (self._n_rows, self._n_tokens, live_top):
            return True  # the full-text index did not change (a commit of vectors only): no scan of its rows
        snap = self.store.fts_snapshot(self._last_id, self.MAX_NEW_ROWS, self._deletion_seq)
        if snap is None:
            self._drop()
            return False
        top = max(len(self._alive), int(snap.docs[-1][0]) + 1 if snap.docs else 0)
        if snap.live is not None:  # a scan of FTS5's row ids
            top = max(top, int(snap.live[-1]) + 1 if len(snap.live) else 0)
            alive = np.zeros(top, dtype=bool)
            alive[snap.live] = True
        else:  # the deletion log: the rows held, minus the deleted, plus the added
            alive = np.zeros(top, dtype=bool)
            alive[: len(self._alive)] = self._alive
            alive[[cid for cid, _ in snap.docs]] = True
            gone = snap.deleted[snap.deleted < top]  # ids above: added and deleted again since the last refresh
            alive[gone] = False
        length = np.full(top, -1, dtype=np.int64)
        length[: len(self._length)] = self._length
        for cid, tokens in snap.docs:
            length[cid] = len(tokens)
        extra = self._extra
        if snap.docs:
            # Only the added rows' terms are touched (the others keep their arrays): a refresh costs what was
            # added, not everything added since the build.
            merged = dict(extra.terms)
            for term, (new_ids, new_tf) in _Postings.of(snap.docs).terms.items():
                held = merged.get(term)
                merged[term] = (
                    (new_ids, new_tf)
                    if held is None
                    else (np.concatenate([held[0], new_ids]), np.concatenate([held[1], new_tf]))
                )
            extra = _Postings(merged)
        if not self._consistent(snap, alive, length):
            self._drop()
            return False
        self._extra, self._extra_rows = extra, self._extra_rows + len(snap.docs)
        self._alive, self._length = alive, length
        if snap.docs:
            self._last_id = max(self._last_id, int(snap.docs[-1][0]))
        self._deletion_seq = snap.deletion_seq
        self._n_rows, self._n_tokens = snap.n_rows, snap.n_tokens
        return True

    def _consistent(self, snap: FtsSnapshot, alive: np.ndarray, length: np.ndarray) -> bool:
        """We have read every live row, and FTS5's row and token counts are those of these rows."""
        live_lengths = length[alive]
        return (
            bool(np.all(live_lengths >= 0))
            and len(live_lengths) == snap.n_rows
            and int(live_lengths.sum()) == snap.n_tokens
        )

    def _drop(self) -> None:
        self._base, self._extra, self._extra_rows, self._marker = None, _Postings({}), 0, None
        self._deletion_seq = None

    def scores(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(chunk ids (k,) int64 ascending, bm25 (k,) float64 < 0) of every row holding ``term``'s phrase: exactly
        :meth:`Store.fts_phrase_scores` of the quoted term. None when the index is not ready, or when the term is
        not one token (``e-mail`` is the phrase "e mail": FTS5 matches positions, which this does not hold)."""
        tokens = self.store.fts_tokens(term)
        if len(tokens) != 1:
            return None
        token = tokens[0]
        with self._lock:
            base = self._base
            if base is None:
                return None
            alive, length, extra = self._alive, self._length, self._extra
            n_rows, n_tokens = self._n_rows, self._n_tokens
        parts = [p for p in (base.terms.get(token), extra.terms.get(token)) if p is not None]
        if not parts or n_rows == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        ids = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
        tf = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
        keep = alive[ids]
        ids, tf = ids[keep], tf[keep]
        avgdl = float(n_tokens) / float(n_rows)
        return ids, fts5_bm25(tf, length[ids].astype(np.float64), len(ids), n_rows, avgdl)

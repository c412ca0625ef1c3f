"""Keyword (BM25) ranking: FTS5's ``bm25()`` of the OR of a query's terms, from memory when it can be.

:class:`Bm25Index` holds every term's postings (chunk ids, term frequency) and every chunk's length as numpy
arrays, so one term's values are one vectorised expression instead of FTS5's row-by-row walk.

Exactness: the documents are the FTS5 rows as inserted (text, symbol, title), tokenized by the table's own
tokenizer (:meth:`~cairn.store.Store.fts_snapshot`); the row and token counts are FTS5's own (its averages
record), so idf and the average row length are the numbers ``bm25()`` uses; and each value is computed with the
same double operations in the same order as ``fts5Bm25Function`` in SQLite's ``fts5_aux.c`` (k1 = 1.2,
b = 0.75, idf = log((N - n + 0.5) / (n + 0.5)), 1e-6 when ≤ 0; column weights 1). Tests compare the values with
FTS5's for every term of the dev questions, before and after notes change.

Freshness: :meth:`Bm25Index.refresh` after a commit reads, in one read transaction, the chunks deleted since
(the store's deletion log; a scan of FTS5's row ids when the log cannot say), the rows added since (chunk ids only
grow), and FTS5's counts. When our counts do not add up to FTS5's (an index file rebuilt, anything this cannot
follow) or too many rows changed, the index is dropped and :meth:`Bm25Index.scores` returns None until a rebuild.

:class:`KeywordIndex` is what the search service uses: the in-memory BM25 when it holds a term, else FTS5's
values of the term (kept while the notes are unchanged), the same numbers either way; and the schedule that builds
the in-memory index on a background thread and rebuilds it once a bulk change is over.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from cairn.memory import trim_heap
from cairn.ranking import fts_phrase
from cairn.search import bm25_file
from cairn.search.bm25_file import KeptBm25
from cairn.search.cache import EpochLRU, NotesSnapshot, StoreEpoch
from cairn.search.postings import Postings, PostingsBuilder
from cairn.search.vocabulary import Vocabularies, Vocabulary
from cairn.store import Store
from cairn.store.reads import fts_row_sizes

log = logging.getLogger(__name__)

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
class Corpus:
    """The collection statistics of BM25 values: ``n_rows`` rows, ``n_tokens`` tokens in all of them, and
    ``sizes(ids)`` (k,) int64 the rows' sizes in tokens (all columns; -1 for an id that is not a row)."""

    n_rows: int
    n_tokens: int
    sizes: Callable[[np.ndarray], np.ndarray]


class KeywordLookup(Protocol):
    """What the lexical matcher reads from a keyword index (:class:`KeywordIndex`, or a caller's view of it)."""

    def term_matches(self, term: str) -> tuple[np.ndarray, np.ndarray]: ...

    def phrase_matches(self, text: str) -> tuple[np.ndarray, np.ndarray]: ...

    def vocabularies(self) -> Sequence[Vocabularies]: ...

    def ranking(
        self, terms: Sequence[str], limit: int, *, within: Sequence[int] | None = None, excluding: Sequence[int] = ()
    ) -> list[int]: ...


def top_chunks(
    parts: Sequence[tuple[np.ndarray, np.ndarray]],
    limit: int,
    within: Sequence[int] | None = None,
    excluding: Sequence[int] = (),
) -> list[int]:
    """The ``limit`` chunk ids with the best (lowest) sum of the per-term BM25 ``parts`` ((chunk ids, bm25) each,
    summed in their order, as FTS5 sums an OR query's phrases), best first, ties by chunk id; ``within`` restricts to
    chunk ids, ``excluding`` leaves chunk ids out before the top is taken."""
    top = max((int(ids.max()) for ids, _ in parts if len(ids)), default=-1)
    acc = np.zeros(top + 1)
    for ids, scores in parts:
        acc[ids] += scores
    ids = np.flatnonzero(acc < 0)
    if within is not None:
        ids = ids[np.isin(ids, np.asarray(within, dtype=np.int64))]
    if excluding:
        ids = ids[~np.isin(ids, np.asarray(excluding, dtype=np.int64))]
    if len(ids) > limit:  # keep the best `limit` values, with every tie of the last one
        kth = np.partition(acc[ids], limit - 1)[limit - 1]
        ids = ids[acc[ids] <= kth]
    order = np.lexsort((ids, acc[ids]))[:limit]
    return ids[order].tolist()


class Bm25Index:
    """FTS5's BM25 of single-token phrases, from memory (module docstring). Thread-safe.

    Use: :meth:`build` once (seconds: off the request path), :meth:`refresh` when the store may have changed, then
    :meth:`scores` per query term. Memory: 16 bytes per (term, chunk) pair plus 9 per chunk id.
    """

    #: Rows added since the last build that a refresh tokenizes on the spot; beyond it the index is
    #: dropped until the next :meth:`build` (a bulk re-index: FTS5 serves meanwhile).
    MAX_NEW_ROWS = 2000
    #: Rows added since the last build at which :attr:`wants_rebuild` turns true (their postings are held in a
    #: second, smaller map that every lookup also reads).
    REBUILD_AFTER_ROWS = 5000

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._base: Postings | None = None
        self._extra: Postings = Postings({})
        self._extra_rows = 0
        self._last_id = 0
        self._deletion_seq: int | None = None  # the store's deletion log entry applied last (None: scan)
        self._alive = np.zeros(0, dtype=bool)  # by chunk id: the row is in FTS5
        self._length = np.zeros(0, dtype=np.int64)  # by chunk id: the row's size in tokens, -1 when not read
        self._n_rows = 0
        self._n_tokens = 0
        self._marker: object = None
        self._tried_file = False  # the first build reads the file kept beside the index, if any

    @property
    def ready(self) -> bool:
        return self._base is not None

    def nbytes(self) -> int:
        """Bytes held by the postings (main and added since), the row lengths and live flags."""
        with self._lock:
            base, extra = self._base, self._extra
            held = self._alive.nbytes + self._length.nbytes
        return held + (base.nbytes if base is not None else 0) + extra.nbytes

    @property
    def deletion_seq(self) -> int | None:
        """The store's deletion-log entry applied last (None: the next refresh scans FTS5's row ids)."""
        return self._deletion_seq

    def live_ids(self) -> np.ndarray:
        """(k,) int64: the chunk ids whose FTS5 rows the index holds, ascending."""
        with self._lock:
            return np.flatnonzero(self._alive)

    @property
    def wants_rebuild(self) -> bool:
        """True when the index is not built, was dropped, or holds many rows outside its main postings."""
        return self._base is None or self._extra_rows >= self.REBUILD_AFTER_ROWS

    def build(self) -> bool:
        """Read and tokenize every FTS5 row (seconds on a large vault: off the request path), and keep what was read
        in a file beside the index (:mod:`cairn.search.bm25_file`); the first build of a process reads that file
        instead when it is of this database file and can be brought up to date. False when FTS5's counts and the
        rows read do not agree (the index stays unbuilt: FTS5 serves)."""
        if not self._tried_file:
            self._tried_file = True
            try:
                if self._install_kept():
                    return True
            except Exception:  # a damaged file that passed its checks: a build from FTS5 is always right
                log.warning("the keyword statistics kept beside the index cannot be used", exc_info=True)
        builder = PostingsBuilder()
        snap = self.store.fts_snapshot(0, sink=builder.add)
        if snap is None or snap.live is None:  # a snapshot from 0 always scans the row ids
            return False
        postings = builder.finish()
        top = int(snap.live[-1]) + 1 if len(snap.live) else 1
        length = np.full(top, -1, dtype=np.int64)
        read_ids, sizes = builder.sizes
        length[read_ids] = sizes
        alive = np.zeros(top, dtype=bool)
        alive[snap.live] = True
        last_id = builder.last_id
        counts, seq = (snap.n_rows, snap.n_tokens), snap.deletion_seq
        # Every token read was a Python string: the postings made among them are made again once they are freed,
        # so that the heap they fragmented goes back to the system (the term strings and array views that stay
        # would otherwise each keep a page of it).
        del snap, builder
        flat = bm25_file.flatten(postings.terms)
        del postings
        postings = Postings(bm25_file.unflatten(flat))
        kept = KeptBm25(postings.terms, alive, length, *counts, last_id, seq)
        if not self._install(kept, postings):
            return False
        bm25_file.save(self.store, kept, flat)
        return True

    def _install_kept(self) -> bool:
        """Install the build kept beside the index, brought up to date (:meth:`_install`); False when there is none
        usable (then nothing is installed)."""
        kept = bm25_file.read(self.store)
        if kept is None:
            return False
        if self._install(kept, Postings(kept.terms)):
            return True
        log.info("the keyword statistics kept beside the index are out of date; reading them again")
        return False

    def _install(self, kept: KeptBm25, postings: Postings) -> bool:
        """Install ``kept`` (with ``postings``, its terms) as the main postings, then follow the commits made since it
        was read. False (nothing installed) when FTS5's counts and the rows do not agree."""
        with self._lock:
            if not self._consistent(kept.n_rows, kept.n_tokens, kept.alive, kept.length):
                self._drop()
                return False
            self._base, self._extra, self._extra_rows = postings, Postings({}), 0
            self._alive, self._length = kept.alive, kept.length
            self._last_id = kept.last_id
            self._deletion_seq = kept.deletion_seq
            self._n_rows, self._n_tokens = kept.n_rows, kept.n_tokens
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
            assert snap.deleted is not None  # the store gives one or the other
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
            for term, (new_ids, new_tf) in Postings.of(snap.docs).terms.items():
                held = merged.get(term)
                merged[term] = (
                    (new_ids, new_tf)
                    if held is None
                    else (np.concatenate([held[0], new_ids]), np.concatenate([held[1], new_tf]))
                )
            extra = Postings(merged)
        if not self._consistent(snap.n_rows, snap.n_tokens, alive, length):
            self._drop()
            return False
        self._extra, self._extra_rows = extra, self._extra_rows + len(snap.docs)
        self._alive, self._length = alive, length
        if snap.docs:
            self._last_id = max(self._last_id, int(snap.docs[-1][0]))
        self._deletion_seq = snap.deletion_seq
        self._n_rows, self._n_tokens = snap.n_rows, snap.n_tokens
        return True

    @staticmethod
    def _consistent(n_rows: int, n_tokens: int, alive: np.ndarray, length: np.ndarray) -> bool:
        """We have read every live row, and FTS5's row and token counts (``n_rows``, ``n_tokens``) are those of these
        rows."""
        if len(alive) != len(length):
            return False
        live_lengths = length[alive]
        return bool(np.all(live_lengths >= 0)) and len(live_lengths) == n_rows and int(live_lengths.sum()) == n_tokens

    def _drop(self) -> None:
        self._base, self._extra, self._extra_rows, self._marker = None, Postings({}), 0, None
        self._deletion_seq = None

    def vocabularies(self) -> list[Vocabulary] | None:
        """The vocabularies of the postings held (the main ones and those added since), or None when the index is
        not ready. Each is built on first use and kept with its postings."""
        with self._lock:
            base, extra = self._base, self._extra
        if base is None:
            return None
        return [base.vocabulary, extra.vocabulary] if extra.terms else [base.vocabulary]

    def corpus(self) -> Corpus | None:
        """The row count, token count and row sizes its values are computed with now; None when not ready."""
        with self._lock:
            if self._base is None:
                return None
            length, n_rows, n_tokens = self._length, self._n_rows, self._n_tokens

        def sizes(ids: np.ndarray) -> np.ndarray:
            inside = ids < len(length)
            out = np.full(len(ids), -1, dtype=np.int64)
            out[inside] = length[ids[inside]]
            return out

        return Corpus(n_rows, n_tokens, sizes)

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


class KeywordIndex:
    """The keyword leg of a search: :meth:`ranking` gives the chunks with the best BM25 for a query's terms, from the
    in-memory :class:`Bm25Index` (:attr:`terms`) when it holds a term, else from FTS5 (each term's matches and values
    kept while the notes are unchanged, at most :attr:`TERM_CACHE_BYTES` per term and again per phrase). A query is
    ranked by summing its terms' values, exactly as FTS5's bm25() of the OR query (same order, same doubles).

    After :meth:`start` (long-lived processes: the daemon, the MCP server) the in-memory index is built on a
    background thread, and built again whenever it was dropped (a bulk re-index) or holds many rows outside its
    main postings: at most once per :attr:`REBUILD_S` seconds, and only once the store has been unchanged for
    :attr:`QUIET_S` (a build holds the GIL for a while, and during a bulk change it would be out of date before it
    is done); FTS5 serves meanwhile."""

    #: Bytes of FTS5 values kept per term, and again per phrase (each entry: its (chunk, value) pairs, 16 bytes each,
    #: its key and arrays, so that terms matching nothing count too), and the entries of each at most.
    TERM_CACHE_BYTES = 8 << 20
    TERM_CACHE_ITEMS = 16_384
    REBUILD_S = 30.0
    QUIET_S = 5.0

    def __init__(self, store: Store, epoch: StoreEpoch) -> None:
        self.store = store
        self.epoch = epoch
        #: FTS5's BM25 from memory, once built; FTS5 until then.
        self.terms = Bm25Index(store)
        self._phrases: EpochLRU[str, tuple[np.ndarray, np.ndarray]] = EpochLRU(
            self.TERM_CACHE_ITEMS, max_bytes=self.TERM_CACHE_BYTES
        )
        self._terms_held: EpochLRU[tuple[str, bool], tuple[np.ndarray, np.ndarray]] = EpochLRU(
            self.TERM_CACHE_ITEMS, max_bytes=self.TERM_CACHE_BYTES
        )
        self._fts_vocabulary = NotesSnapshot(store, lambda: Vocabulary(*store.fts_vocabulary()))
        self._auto = False
        self._building: threading.Thread | None = None
        self._started_at = -math.inf
        self._lock = threading.Lock()

    def memory(self) -> dict[str, int]:
        """``{bm25, caches}``: bytes of the in-memory BM25 (:meth:`Bm25Index.nbytes`) and of the FTS5 values kept
        per term and phrase."""
        return {"bm25": self.terms.nbytes(), "caches": self._phrases.nbytes() + self._terms_held.nbytes()}

    def cache_usage(self) -> dict[str, dict[str, int | None]]:
        """``{termValues, phraseValues}``: each cache's :meth:`~cairn.search.cache.EpochLRU.usage`."""
        return {"termValues": self._terms_held.usage(), "phraseValues": self._phrases.usage()}

    def start(self) -> threading.Thread | None:
        """Build the in-memory BM25 on a background thread, and keep rebuilding it when needed (class docstring).
        Queries use FTS5 until it is ready, with the same results. Returns the thread started, or None when one
        is already building."""
        self._auto = True
        with self._lock:
            if self._building is not None and self._building.is_alive():
                return None
            thread = threading.Thread(target=self._build, name="cairn-bm25", daemon=True)
            self._building = thread
            self._started_at = time.monotonic()
        thread.start()
        return thread

    def start_when_needed(self) -> threading.Thread | None:
        """:meth:`start` unless the in-memory index, brought up to the store's epoch, is built and needs no rebuild
        (or a build runs): after a bulk change that the index kept up with, nothing is read again."""
        self._auto = True
        if self.building():
            return None
        self.terms.refresh(self.epoch.now())
        return self.start() if self.terms.wants_rebuild else None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the last build started, if any, to end. True when there was one."""
        thread = self._building
        if thread is None:
            return False
        thread.join(timeout)
        return True

    def building(self) -> bool:
        """True while a build runs."""
        thread = self._building
        return thread is not None and thread.is_alive()

    def reset(self) -> None:
        """Back to FTS5 alone, as before :meth:`start`: the in-memory index dropped and no longer rebuilt."""
        self._auto = False
        self.terms = Bm25Index(self.store)

    def _build(self) -> None:
        try:
            started = time.perf_counter()
            if self.terms.build():
                log.info("in-memory BM25 ready in %.1f s", time.perf_counter() - started)
            else:
                log.info("in-memory BM25 not built: the full-text index changed while it was read; FTS5 serves")
        except Exception:  # never fatal: FTS5 answers every query meanwhile
            log.exception("building the in-memory BM25 failed; keyword search uses FTS5")
        finally:
            self.store.close_thread_connection()  # this thread ends
            trim_heap()  # the tokens read and the build's temporaries back to the system

    def _text_generation(self) -> int:
        """What the full-text rows' values are kept for: the store's ``notes_generation``, which every write of a
        note's rows moves and a commit of vectors does not (the epoch moves with both: while vectors are written a
        batch every few seconds, the values of a question's common terms would be read again each time)."""
        return self.store.notes_generations()[0]

    def _phrase_scores(self, phrase: str) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, bm25) of every chunk matching the FTS5 ``phrase``: kept while the notes are unchanged."""
        generation = self._text_generation()
        cached = self._phrases.get(phrase, generation)
        if cached is not None:
            return cached
        ids, scores = self.store.fts_phrase_scores(phrase)
        if self._text_generation() == generation:
            self._phrases.put(phrase, (ids, scores), generation)
        return ids, scores

    def _term_scores(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, bm25) of every chunk matching ``term`` as an FTS5 phrase: from memory when the in-memory
        BM25 holds it (same values), else from FTS5; kept while the notes are unchanged (a question reads its terms'
        values for the keyword leg, for fusion and for the hits' term matches)."""
        generation = self._text_generation()
        key = (term, self.terms.ready)  # the in-memory values are never served from FTS5's, nor back
        held = self._terms_held.get(key, generation)
        if held is not None:
            return held
        found = self.terms.scores(term)
        out = found if found is not None else self._phrase_scores(fts_phrase(term))
        if self._text_generation() == generation:
            self._terms_held.put(key, out, generation)
        return out

    def vocabularies(self) -> list[Vocabulary]:
        """The vocabularies of the index as it is now (tokens and row counts, for prefix and typo expansion): the
        in-memory BM25's when it is built, else FTS5's own (read with ``fts5vocab``, kept while the notes are
        unchanged)."""
        self._follow()
        held = self.terms.vocabularies()
        if held is not None:
            return held
        return [self._fts_vocabulary.get()]

    def phrase_matches(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, bm25) of every chunk holding ``text`` as an exact phrase (its tokens in order), quoted by us
        (:func:`cairn.ranking.fts_phrase`): user text is never read as FTS5 syntax."""
        return self._phrase_scores(fts_phrase(text))

    def term_matches(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids (k,) int64, bm25 (k,) float64 < 0) of every chunk holding ``term`` (one query term, tokenized
        as FTS5 does: a term of several tokens is their phrase), as the store is now."""
        self._follow()
        return self._term_scores(term)

    def _follow(self) -> None:
        """Bring the in-memory index up to the epoch, and start a rebuild when one is due (class docstring)."""
        if not self._auto:
            return
        self.terms.refresh(self.epoch.value)
        now = time.monotonic()
        if (
            self.terms.wants_rebuild
            and now - self._started_at >= self.REBUILD_S
            and now - self.epoch.changed_at >= self.QUIET_S
        ):
            self.start()

    def ranking(
        self, terms: Sequence[str], limit: int, *, within: Sequence[int] | None = None, excluding: Sequence[int] = ()
    ) -> list[int]:
        """The ``limit`` chunks with the best FTS5 BM25 for the OR of ``terms`` (a :class:`~cairn.search.query.Query`'s
        keyword terms: what FTS5 ranks for :func:`cairn.search.query.fts_match_expression`), best first, ties by
        chunk id; ``within`` restricts to chunk ids, ``excluding`` leaves chunk ids out before the top is taken."""
        if not terms:
            return []
        self._follow()
        return top_chunks([self._term_scores(t) for t in terms], limit, within, excluding)

    def corpus(self) -> Corpus:
        """The statistics :meth:`term_matches` and :meth:`phrase_matches` values are computed with now: the
        in-memory index's when it is built, else FTS5's own (its averages record and row-size table)."""
        self._follow()
        held = self.terms.corpus()
        if held is not None:
            return held
        counts = self.store.fts_counts()
        n_rows, n_tokens = (counts[0], counts[1]) if counts is not None else (0, 0)
        return Corpus(n_rows, n_tokens, lambda ids: fts_row_sizes(self.store, ids))

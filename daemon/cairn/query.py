"""The one query service: search and answer, for the CLI, HTTP and (later) MCP.

Flow (DESIGN.md): classify → scope filter → FTS5 BM25 top-N and vector top-N →
fusion → cosine floor (0.35, every candidate) → per-note de-duplication → top_k.

Withholding (issue 5): every entry point takes ``withhold`` (a :class:`~cairn.policy.Withhold`; ``None``
or empty for the owner). The chunks of withheld notes are removed from both ranked lists *before* the
top-N is taken, so ``top_k`` is still filled with allowed notes; links in returned text and snippets
that point to a withheld note become ``[withheld link]``, and so do the withheld notes' names in heading
paths (``symbol``: stored without link brackets, see ``LinkRedactor.redact_symbol``). When tags are withheld, notes whose
front-matter cannot be read (tags unknown) are withheld too (fail closed). ``tally`` (a
:class:`~cairn.policy.WithheldTally`) receives the withheld notes the unfiltered top-N lists held.
"""

from __future__ import annotations

import bisect
import functools
import logging
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from cairn.bm25 import Bm25Index
from cairn.config import CONTEXT_TOKEN_BUDGET, COSINE_FLOOR, DEFAULT_TOP_K, NOT_FOUND_ANSWER
from cairn.dense import DenseIndex, DenseQuery
from cairn.embedder import Embedder
from cairn.errors import BadRequestError
from cairn.indexer import TITLE_WEIGHT, chunk_vector, content_hash, embedding_units, title_hash
from cairn.notes import normalise_tag
from cairn.policy import LinkRedactor, WithheldTally, Withhold
from cairn.prompt import (
    Sentence,
    candidate_sentences,
    compose_extractive_answer,
    pick_sentences,
    select_within_budget,
    source_line,
    token_overlap,
)
from cairn.ranking import FusionWeights, QueryClassifier, fts_phrase, limit_per_group, query_terms, rrf_fuse
from cairn.store import ChunkRow, Store
from cairn.store.reads import chunk_notes, withheld_notes

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved chunk. ``score`` is the fused ranking score (higher is better);
    ``cosine`` the cosine similarity of the chunk to the query (the floor is applied to it)."""

    chunk_id: int
    file_path: str
    title: str
    symbol: str
    score: float
    cosine: float
    snippet: str
    text: str
    tags: tuple[str, ...] = ()
    lines: tuple[int, int] | None = None
    page: int | None = None
    kind: str = "prose"
    indexed_at: float = 0.0
    #: An upper bound on the tokens of ``text`` (the chunk's indexed ``token_count``: title, heading path and text),
    #: 0 when unknown (text masked for a caller); not part of the JSON.
    token_bound: int = 0

    def to_json(self) -> dict[str, Any]:
        """camelCase JSON as in DESIGN.md (`search` results)."""
        out: dict[str, Any] = {
            "filePath": self.file_path,
            "symbol": self.symbol,
            "score": round(self.score, 4),
            "cosine": round(self.cosine, 4),
            "snippet": self.snippet,
            "tags": list(self.tags),
            "kind": self.kind,
            "indexedAt": self.indexed_at,
        }
        if self.page is not None:
            out["page"] = self.page
        elif self.lines is not None:
            out["lines"] = list(self.lines)
        return out


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Ranked hits (at most top_k) and the time taken in ms. ``withheld``: how many withheld notes
    were removed from the candidates (for the audit log; not part of :meth:`to_json`)."""

    hits: list[Hit]
    elapsed_ms: float
    preference: str | None = None
    withheld: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"results": [h.to_json() for h in self.hits], "elapsedMs": round(self.elapsed_ms, 1)}


@dataclass(frozen=True, slots=True)
class Source:
    """A numbered source: ``n`` is the citation number used as ``[n]`` in the answer."""

    n: int
    hit: Hit

    def to_json(self) -> dict[str, Any]:
        """``{n, filePath, symbol, score, lines|page, snippet}`` (DESIGN.md `sources` event)."""
        out = {"n": self.n, **self.hit.to_json()}
        out.pop("tags", None)
        return out


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer with its sources. ``grounded`` is true only when a model wrote it from the context;
    the extractive answer (no model) is ``grounded: false``. ``not_found`` → the fixed not-found text."""

    text: str
    grounded: bool
    not_found: bool
    sources: list[Source] = field(default_factory=list)
    elapsed_ms: float = 0.0
    #: withheld notes removed from the candidates (for the audit log; not part of to_json)
    withheld: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "answer": self.text,
            "grounded": self.grounded,
            "notFound": self.not_found,
            "sources": [s.to_json() for s in self.sources],
            "elapsedMs": round(self.elapsed_ms, 1),
        }


# ---------------------------------------------------------------------------------------------
# Withheld notes
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WithheldSet:
    """The notes ``withhold`` hides in this store right now: ``notes`` {note id: path}, ``chunks``
    {chunk id: note id} of their chunks, and a :class:`~cairn.policy.LinkRedactor` for links to them.
    Built per call (one indexed query for the tags, one path scan when folders are withheld)."""

    withhold: Withhold
    notes: dict[int, str]
    chunks: dict[int, int]
    redactor: LinkRedactor

    @classmethod
    def load(cls, store: Store, withhold: Withhold | None) -> WithheldSet:
        if not withhold:
            return cls(Withhold(), {}, {}, LinkRedactor(()))
        found = withheld_notes(store, withhold.tags, withhold.path_withheld if withhold.folders else None)
        return cls(
            withhold,
            {nid: path for nid, (path, _) in found.items()},
            chunk_notes(store, found),
            LinkRedactor(found.values()),
        )

    def __bool__(self) -> bool:
        return bool(self.withhold)

    def hides(self, note_id: int, path: str) -> bool:
        """True for a withheld note (by id, or by path for a note indexed after this set was built)."""
        return note_id in self.notes or self.withhold.path_withheld(path)

    def hides_path(self, path: str) -> bool:
        return path in self.paths or self.withhold.path_withheld(path)

    @cached_property
    def paths(self) -> frozenset[str]:
        """The withheld notes' paths."""
        return frozenset(self.notes.values())

    def redact(self, text: str) -> str:
        return self.redactor.redact(text) if self.redactor else text

    def symbol_masker(self, store: Store) -> Callable[[str, str], str]:
        """``mask(path, symbol)``: the heading path ``symbol`` of a chunk of the note at ``path`` with the
        withheld notes' names masked (:meth:`~cairn.policy.LinkRedactor.redact_symbol`), including the
        shown text of that note's links to withheld notes (read once per note, from its stored links)."""
        displays: dict[str, tuple[str, ...]] = {}

        def mask(path: str, symbol: str) -> str:
            if not symbol or not self.redactor:
                return symbol
            if path not in displays:  # how a heading shows those links: "alias", or "target > heading"
                shown: list[str] = []
                for link in store.links_of_note(path):
                    if (link.target_path and self.hides_path(link.target_path)) or self.redactor.matches(
                        link.raw_target or ""
                    ):
                        sub = link.heading or link.block_id
                        shown += [link.alias or "", f"{link.raw_target or ''} > {sub}" if sub else ""]
                displays[path] = tuple(d for d in shown if d.strip())
            return self.redactor.redact_symbol(symbol, displays[path])

        return mask


# ---------------------------------------------------------------------------------------------
# The query service
# ---------------------------------------------------------------------------------------------
MAX_QUESTION_CHARS = 2000


#: Odd 64-bit multipliers of the unit vectors' compact keys (:func:`_unit_keys`); fixed, so keys agree across loads.
_KEY_MULT = (
    np.random.default_rng(0x5EED_CA1E).integers(0, 2**63, size=192, dtype=np.uint64) << np.uint64(1)
) | np.uint64(1)


def _unit_keys(mat: np.ndarray) -> np.ndarray:
    """(m,) uint64 keys of the rows of ``mat`` (m, 384) float32: a random linear hash of each row's 192 64-bit words
    (modulo 2**64), to find identical unit vectors without a dict of 1.5 KB byte strings. Equal rows (bytes) have
    equal keys; callers compare the rows of equal keys before treating them as one (a collision is not trusted).
    ~10 ms for 40k rows."""
    out = np.empty(len(mat), dtype=np.uint64)
    words = np.ascontiguousarray(mat, dtype=np.float32).view(np.uint64)
    for start in range(0, len(mat), 4096):
        out[start : start + 4096] = (words[start : start + 4096] * _KEY_MULT).sum(axis=1, dtype=np.uint64)
    return out


def _distinct_units(units: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of ``units`` (m, 384) in order of first occurrence: (row of ``units`` of each distinct one
    (d,) int64, index of each unit's distinct row (m,) int64, keys of the distinct rows (d,) uint64). Same result as
    keying a dict by each row's bytes (identical rows are found by key, then compared)."""
    keys = _unit_keys(units)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    rank = np.empty(len(first), dtype=np.int64)
    rank[by_first] = np.arange(len(first))
    firsts, index = first[by_first], rank[inverse.reshape(-1)]
    same = all(
        np.array_equal(units[s : s + 4096], units[firsts[index[s : s + 4096]]]) for s in range(0, len(units), 4096)
    )
    if not same:  # two different vectors with one key (never seen): by bytes, as before
        distinct: dict[bytes, int] = {}
        first_list: list[int] = []
        index = np.empty(len(units), dtype=np.int64)
        for i, row in enumerate(units):
            j = distinct.setdefault(row.tobytes(), len(first_list))
            if j == len(first_list):
                first_list.append(i)
            index[i] = j
        firsts = np.asarray(first_list, dtype=np.int64)
    return firsts, index, keys[firsts]


def _unit_runs(owner_rows: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """From the owning chunk row of each unit position, sorted (m,) int64, and the number of chunk rows ``n``:
    (group_starts (g,), group_rows (g,), unit_start (n,), unit_end (n,)) as _VectorSnapshot and DenseIndex hold them."""
    m = len(owner_rows)
    starts = np.flatnonzero(np.r_[True, owner_rows[1:] != owner_rows[:-1]]) if m else np.zeros(0, np.int64)
    group_rows = owner_rows[starts] if m else starts
    unit_start = np.zeros(n, dtype=np.int64)
    unit_end = np.zeros(n, dtype=np.int64)
    unit_start[group_rows] = starts
    unit_end[group_rows] = np.r_[starts[1:], m] if len(starts) else starts
    return starts, group_rows, unit_start, unit_end


@dataclass(frozen=True, slots=True)
class _VectorSnapshot:
    """Every chunk and unit vector of the store in memory, for exact dense scoring
    (obsidian-hub: 19,573 chunks + 40,074 units, of which 25,899 distinct = 70 MB; all cosines in ~7 ms
    against ~70 ms for sqlite-vec's brute-force KNN here). Units with the same text (boilerplate sentences
    repeated across notes: 35 % of the hub's) have the same vector, held and scored once: the scores are
    bound by memory bandwidth, so this took ~2 ms off each query. ``generation`` is the store's vectors
    generation when the chunk ids were read.

    Made by :meth:`load` (everything; obsidian-hub ~1.2-1.8 s of CPU) or by :meth:`refresh` from the previous
    snapshot (only the chunks added or removed since are read, and only the new rows quantised). Both give the same scores,
    dense top chunks and search results for the same store state; a refreshed one may hold distinct unit rows
    no chunk refers to any more (until the next full load) and its chunk rows are in another order."""

    generation: int
    loaded_at: float
    chunk_ids: np.ndarray  # (n,) int64
    chunks: np.ndarray  # (n, 384) float32
    row_of: dict[int, int]  # chunk id → row
    unit_order: np.ndarray  # (m,) row in ``units`` of each unit, units sorted by owning chunk row
    group_starts: np.ndarray  # (g,) start of each owning chunk's run in unit_order
    group_rows: np.ndarray  # (g,) the owning chunk row of each run
    units: np.ndarray  # (d, 384) float32: the distinct unit vectors (and, after refresh(), unreferenced ones)
    dense: DenseIndex  # the same vectors with their int8 copies, for a question's exact top chunks
    unit_keys: np.ndarray  # (d,) uint64: _unit_keys(units), to match a new unit with a row held
    recipe: str | None  # the store's vector recipe the vectors were made with (Store.embedded_chunk_ids)
    file_id: tuple[int, int]  # Store.file_identity() at load: a replaced file is loaded in full

    @classmethod
    def load(cls, store: Store) -> _VectorSnapshot:
        """Everything, read in one transaction (:meth:`Store.load_vector_matrices_and_recipe`)."""
        file_id = store.file_identity()
        (gen, chunk_ids, chunks, unit_owner, units), recipe = store.load_vector_matrices_and_recipe()
        row_of = {int(c): i for i, c in enumerate(chunk_ids)}
        owner_rows = np.fromiter((row_of.get(int(c), -1) for c in unit_owner), dtype=np.int64, count=len(unit_owner))
        keep = np.nonzero(owner_rows >= 0)[0]
        order = keep[np.argsort(owner_rows[keep], kind="stable")]
        firsts, index, keys = _distinct_units(units)
        unit_order = index[order]
        distinct_units = units[firsts]
        starts, group_rows, unit_start, unit_end = _unit_runs(owner_rows[order], len(chunk_ids))
        return cls(
            generation=gen,
            loaded_at=time.monotonic(),
            chunk_ids=chunk_ids,
            chunks=chunks,
            row_of=row_of,
            unit_order=unit_order,
            group_starts=starts,
            group_rows=group_rows,
            units=distinct_units,
            dense=DenseIndex(chunks, distinct_units, unit_order, unit_start, unit_end),
            unit_keys=keys,
            recipe=recipe,
            file_id=file_id,
        )

    @classmethod
    def refresh(cls, old: _VectorSnapshot, store: Store, *, max_changed: float) -> _VectorSnapshot | None:
        """A snapshot of the store now, made from ``old`` by reading only what changed: the ids of every chunk with a
        vector (:meth:`Store.embedded_chunk_ids`), then the vectors of the chunks added since ``old``
        (:meth:`Store.vector_matrices_of`); a chunk id keeps its vector while the vector recipe stays (see there). Removed chunks' rows and units are dropped, the others'
        arrays (and int8 copies: :meth:`DenseIndex.derived`) kept; a new unit equal to a row held reuses it.

        Returns None when a full :meth:`load` is the right thing: ``old`` is empty, the store's file was replaced,
        the vector recipe changed, more than ``max_changed`` (a fraction) of ``old``'s chunk rows changed, or more than
        that fraction of the unit rows would be unreferenced. Store errors propagate."""
        n_old = len(old.chunk_ids)
        if not n_old or store.file_identity() != old.file_id:
            return None
        gen, recipe, ids = store.embedded_chunk_ids()
        if recipe != old.recipe:
            return None
        if len(ids):
            pos = np.minimum(np.searchsorted(ids, old.chunk_ids), len(ids) - 1)
            same = ids[pos] == old.chunk_ids
        else:
            pos, same = np.zeros(n_old, dtype=np.int64), np.zeros(n_old, dtype=bool)
        keep_rows = np.flatnonzero(same)
        known = np.zeros(len(ids), dtype=bool)
        known[pos[keep_rows]] = True
        added = ids[~known]
        changed = n_old - len(keep_rows) + len(added)
        if changed > max_changed * n_old:
            return None
        now = time.monotonic()
        if not changed:
            return cls(
                generation=gen,
                loaded_at=now,
                chunk_ids=old.chunk_ids,
                chunks=old.chunks,
                row_of=old.row_of,
                unit_order=old.unit_order,
                group_starts=old.group_starts,
                group_rows=old.group_rows,
                units=old.units,
                dense=old.dense,
                unit_keys=old.unit_keys,
                recipe=recipe,
                file_id=old.file_id,
            )
        _, a_ids, a_chunks, a_owner, a_units = store.vector_matrices_of(added)
        n_keep = len(keep_rows)

        # Units of the kept chunks: their positions in old.unit_order, with the chunks' new rows (order kept).
        m_old = len(old.unit_order)
        owner_old = np.repeat(old.group_rows, np.diff(np.r_[old.group_starts, m_old]).astype(np.int64))
        remap = np.full(n_old, -1, dtype=np.int64)
        remap[keep_rows] = np.arange(n_keep)
        owner_kept = remap[owner_old] if m_old else np.zeros(0, np.int64)
        kept_pos = np.flatnonzero(owner_kept >= 0)
        # Units of the added chunks, by new row, each matched with a row held (same key, same values) or appended.
        a_row = {int(c): n_keep + i for i, c in enumerate(a_ids)}
        a_rows = np.fromiter((a_row.get(int(c), -1) for c in a_owner), dtype=np.int64, count=len(a_owner))
        order = np.flatnonzero(a_rows >= 0)
        order = order[np.argsort(a_rows[order], kind="stable")]
        a_rows, a_units = a_rows[order], a_units[order]
        a_keys = _unit_keys(a_units)
        a_index = np.full(len(a_units), -1, dtype=np.int64)
        d_old = len(old.units)
        if d_old and len(a_units):
            sorter = np.argsort(old.unit_keys, kind="stable")
            sorted_keys = old.unit_keys[sorter]
            p = np.minimum(np.searchsorted(sorted_keys, a_keys), d_old - 1)
            hit = np.flatnonzero(sorted_keys[p] == a_keys)
            cand = sorter[p[hit]]
            equal = (old.units[cand] == a_units[hit]).all(axis=1)
            a_index[hit[equal]] = cand[equal]
        new_rows: list[int] = []
        first_new: dict[int, int] = {}
        for i in np.flatnonzero(a_index < 0).tolist():
            j = first_new.get(int(a_keys[i]))
            if j is not None and np.array_equal(a_units[new_rows[j - d_old]], a_units[i]):
                a_index[i] = j
                continue
            first_new.setdefault(int(a_keys[i]), d_old + len(new_rows))
            a_index[i] = d_old + len(new_rows)
            new_rows.append(i)
        units = np.concatenate([old.units, a_units[new_rows]]) if new_rows else old.units
        unit_keys = np.concatenate([old.unit_keys, a_keys[new_rows]]) if new_rows else old.unit_keys
        unit_order = np.concatenate([old.unit_order[kept_pos], a_index])
        if len(units) - np.count_nonzero(np.bincount(unit_order, minlength=len(units))) > max_changed * len(units):
            return None  # too many unit rows nothing refers to: a full load compacts them
        chunk_ids = np.concatenate([old.chunk_ids[keep_rows], a_ids])
        chunks = np.concatenate([old.chunks[keep_rows], a_chunks])
        starts, group_rows, unit_start, unit_end = _unit_runs(
            np.concatenate([owner_kept[kept_pos], a_rows]), len(chunk_ids)
        )
        dense = old.dense.derived(
            chunks,
            units,
            unit_order,
            unit_start,
            unit_end,
            chunk_from=np.r_[keep_rows, np.full(len(a_ids), -1, dtype=np.int64)],
            unit_from=np.r_[np.arange(d_old), np.full(len(new_rows), -1, dtype=np.int64)],
        )
        return cls(
            generation=gen,
            loaded_at=now,
            chunk_ids=chunk_ids,
            chunks=chunks,
            row_of=dict(zip(chunk_ids.tolist(), range(len(chunk_ids)))),
            unit_order=unit_order,
            group_starts=starts,
            group_rows=group_rows,
            units=units,
            dense=dense,
            unit_keys=unit_keys,
            recipe=recipe,
            file_id=old.file_id,
        )

    def scores(self, qvec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(cosine of every chunk vector to ``qvec``, best cosine among each chunk's unit vectors
        (-1 for a chunk without units)), both (n,) float32, all in float32 (3-7 ms on obsidian-hub). Queries use
        :attr:`dense` instead (the same top chunks for ~2 ms; cairn.dense); this is the reference. Computed row by
        row (``np.einsum``, as cairn.dense's exact values): a BLAS matrix-vector product's last bit can depend on a
        row's position in the matrix, and a refreshed snapshot holds the same vectors in another order."""
        return self.dense.exact_scores(qvec)


MODES = ("hybrid", "bm25", "dense")

_blas_limited: set[int] = set()


def _limit_blas_threads(threads: int) -> None:
    """Limit numpy's BLAS to ``threads`` threads in this process (once per value; see QueryService.BLAS_THREADS)."""
    if threads not in _blas_limited:
        from threadpoolctl import threadpool_limits  # noqa: PLC0415  (inspects the loaded libraries: not at import)

        threadpool_limits(limits=threads, user_api="blas")
        _blas_limited.add(threads)


class QueryService:
    """Search and answer over one vault's index. The one query path for CLI, HTTP and MCP:
    every result passes the scope filter and the cosine floor (DESIGN.md contract).

    Blocking (SQLite + ONNX); call it from a worker thread in async code. Thread-safe
    (the store gives each thread its own connection; onnxruntime sessions are thread-safe).
    """

    #: Candidates taken from each ranked list before fusion.
    CANDIDATES = 60
    #: A changed store is reloaded into memory (on a background thread) at most this often (s); in between,
    #: chunks embedded meanwhile are scored from the store one by one (so nothing new is missed), at most
    #: SNAPSHOT_MAX_NEWER of them (a bulk re-index: the others join when the reload lands, ~1-2 s on
    #: obsidian-hub; the keyword leg has them already), and deleted ones are dropped (never returned).
    #: Scoring one from the store costs ~0.25 ms (obsidian-hub, during a full re-index: 2,000 took searches
    #: ~0.5 s), so a few hundred: a saved note's chunks, not a bulk change's. A reload after an editing session's
    #: saves reads only the changed chunks (SNAPSHOT_INCREMENTAL_MAX): 0.09-0.22 s of CPU after 1 or 50 rewritten
    #: notes (tests/bench/bench_vector_reload.py), so reloads run every 3 s while notes change (the chunks scored
    #: one by one stay few: 30 s of edits made up to 256 of them). A full load costs 1.1-2.1 s of CPU on
    #: obsidian-hub (reading 45k vectors out of sqlite-vec) and overlapped the next saves' indexing when it ran every
    #: 3 s (bench_freshness p95: keyword 414 ms, dense 1,375 ms), so a reload that needs one (more than
    #: SNAPSHOT_INCREMENTAL_MAX changed) waits until SNAPSHOT_FULL_REFRESH_S after the last, unless more chunks wait
    #: than a query scores (a bulk change: then at once).
    SNAPSHOT_REFRESH_S = 3.0
    SNAPSHOT_FULL_REFRESH_S = 30.0
    SNAPSHOT_MAX_NEWER = 256
    #: A reload reads only the chunks added or removed since the snapshot it replaces
    #: (:meth:`_VectorSnapshot.refresh`) unless more than this fraction of its rows changed (then everything is
    #: read again: a bulk change costs about as much either way, and a full load drops unreferenced unit rows).
    SNAPSHOT_INCREMENTAL_MAX = 0.25
    #: Weight of the best unit (sentence) cosine in the dense ranking score (tuned on the dev set).
    UNIT_WEIGHT = 0.9
    #: Weight of the best unit cosine against the floor. Measured on the dev set: at full weight 4 of
    #: 5 off-corpus help-vault questions got through; at 0.8 one does, as with the chunk vector
    #: alone, while relevant chunks whose one matching sentence sits in a long chunk now pass
    #: (hybrid Recall@5 help 0.767 → 0.787, hub 0.765 → 0.794) and a note's own sentence is found.
    FLOOR_UNIT_WEIGHT = 0.8
    #: At most this many chunks of one note in search results / in an answer's sources.
    PER_NOTE_SEARCH = 2
    PER_NOTE_ASK = 3

    #: BLAS (OpenBLAS in numpy's wheels) threads for the dense scores, set process-wide when a query
    #: service is built. The scores are a matrix-vector product over ~60k vectors, bound by memory
    #: bandwidth, and requests already run on parallel worker threads: measured on obsidian-hub (2 cores,
    #: 2 threads scoring at once) ~9 ms of CPU per query with 1 BLAS thread, 21 ms with numpy's default of
    #: one per core (37 ms with 4 threads scoring), and no slower alone (9.7 ms against 18 ms wall).
    BLAS_THREADS = 1

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        *,
        floor: float = COSINE_FLOOR,
        weights: FusionWeights = FusionWeights(),
        title_weight: float = TITLE_WEIGHT,
        classifier: QueryClassifier | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.floor = floor
        self.weights = weights
        self.title_weight = title_weight
        self.unit_weight = self.UNIT_WEIGHT
        self._snapshot: _VectorSnapshot | None = None
        self._snapshot_lock = threading.Lock()
        self._full_loaded_at = 0.0  # time.monotonic() of the last full load of the vectors
        self._reload_tried_at = 0.0  # of the last reload started (one that waited for a full load included)
        self._bulk_waiting = False  # a query found more new chunks than it scores: the next load may be full
        self._snapshot_loading: threading.Thread | None = None
        self._vec_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._vec_cache_lock = threading.Lock()
        self._results: OrderedDict[tuple, tuple[int, tuple[Hit, ...], str | None, frozenset[str]]] = OrderedDict()
        self._results_lock = threading.Lock()
        self._seen_markers: dict[int, tuple[int, int]] = {}
        self._phrases: OrderedDict[str, tuple[int, np.ndarray, np.ndarray]] = OrderedDict()
        self._phrase_rows = 0
        self._answers: OrderedDict[tuple, str] = OrderedDict()
        self._scores: OrderedDict[tuple, DenseQuery] = OrderedDict()
        # Context blocks' token counts (same text, same count): ~4 % of the daemon's CPU under /ask load before.
        self._count_tokens = functools.lru_cache(maxsize=4096)(embedder.count_tokens)
        self._epoch = 0
        self._epoch_changed_at = -math.inf
        #: FTS5's BM25 from memory, once :meth:`start_keyword_index` has built it (cairn.bm25); FTS5 until then.
        self.terms = Bm25Index(store)
        self._terms_auto = False
        self._terms_building: threading.Thread | None = None
        self._terms_started_at = -math.inf
        self.classifier = classifier or QueryClassifier()
        _limit_blas_threads(self.BLAS_THREADS)

    # ------------------------------------------------------------------ validation
    @staticmethod
    def _check(text: str, top_k: int, what: str = "query") -> str:
        if not isinstance(text, str) or not text.strip():
            raise BadRequestError(f"The {what} is empty; expected some words to search for.")
        if len(text) > MAX_QUESTION_CHARS:
            raise BadRequestError(f"The {what} is {len(text)} characters long; the limit is {MAX_QUESTION_CHARS}.")
        if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= 50:
            raise BadRequestError(f"top_k must be an integer from 1 to 50, got {top_k!r}.")
        check_chars(text, f"The {what}")
        return text.strip()

    @staticmethod
    def _scope_tags(tags: Sequence[str]) -> list[str]:
        out = []
        for t in tags or ():
            check_chars(str(t), f"The tag {t!r}")
            norm = normalise_tag(str(t))
            if norm is None:
                raise BadRequestError(f"{t!r} is not a valid tag; expected e.g. 'project' or 'project/alpha'.")
            out.append(norm)
        return out

    # ------------------------------------------------------------------ retrieval
    def retrieve(
        self,
        query: str,
        *,
        top_k: int = DEFAULT_TOP_K,
        tags: Sequence[str] = (),
        folders: Sequence[str] = (),
        mode: str = "hybrid",
        per_note: int | None = None,
        withhold: Withhold | None = None,
        tally: WithheldTally | None = None,
    ) -> tuple[list[Hit], str | None]:
        """Ranked hits for ``query`` (at most ``top_k``, at most ``per_note`` chunks per note),
        each with cosine similarity ≥ the floor. ``mode`` picks the ranked lists fused:
        ``hybrid`` (BM25 + dense), ``bm25`` or ``dense`` (for evaluation). Returns (hits, preference).
        ``withhold``: notes never returned, removed before ranking (module docstring); ``tally``
        receives the withheld notes that the unfiltered candidate lists held."""
        query = self._check(query, top_k)
        if mode not in MODES:
            raise BadRequestError(f"mode must be one of {', '.join(MODES)}, got {mode!r}.")
        per_note = per_note or self.PER_NOTE_SEARCH
        scope_tags = self._scope_tags(tags)
        for f in folders or ():
            check_chars(str(f), f"The folder {f!r}")
        scope_folders = [str(f).strip().strip("/") for f in folders or () if str(f).strip().strip("/")]
        key = (
            query,
            top_k,
            tuple(scope_tags),
            tuple(scope_folders),
            mode,
            per_note,
            (withhold.tags, withhold.folders) if withhold else None,
        )
        epoch = self._store_epoch()
        with self._results_lock:
            cached = self._results.get(key)
            if cached is not None and cached[0] == epoch:
                self._results.move_to_end(key)
        if cached is not None and cached[0] == epoch:
            _, hits, preference, withheld_paths = cached
            if tally is not None:
                tally.add(withheld_paths)
            return list(hits), preference
        own_tally = WithheldTally()
        hits, preference = self._rank(query, top_k, scope_tags, scope_folders, mode, per_note, withhold, own_tally)
        if tally is not None:
            tally.add(own_tally.paths)
        with self._results_lock:
            if self._epoch == epoch:  # nothing committed meanwhile (else the result may mix both states)
                self._results[key] = (epoch, tuple(hits), preference, frozenset(own_tally.paths))
                self._results.move_to_end(key)
                while len(self._results) > self.RESULT_CACHE_MAX:
                    self._results.popitem(last=False)
        return hits, preference

    #: Ranked results kept in memory (LRU), by query text and every parameter, while the store is unchanged
    #: (any commit, by any connection or process, empties it: :meth:`_store_epoch`). Measured (bench_http, hub,
    #: 8 clients on 2 cores): an uncached /search costs ~17 ms of CPU (embedding the question ~7 ms, dense scores
    #: of 45k distinct vectors ~5 ms, BM25 from memory ~0.7 ms; ~25-40 ms while FTS5 ranks: before the in-memory
    #: BM25 is built), a repeated one ~1 ms plus HTTP. As many extractive
    #: answer texts are kept, by question and sources (~3 ms of CPU each to compose).
    RESULT_CACHE_MAX = 256

    def _store_epoch(self) -> int:
        """A number that grows whenever the store may have changed since the last call from any thread:
        this thread's connection reports a commit (:meth:`Store.change_marker`), or it is a connection not
        seen before (it cannot tell what happened before it was opened)."""
        conn, version, changes = self.store.change_marker()
        with self._results_lock:
            if self._seen_markers.get(conn) != (version, changes):
                self._seen_markers[conn] = (version, changes)
                self._epoch += 1
                self._epoch_changed_at = time.monotonic()
            return self._epoch

    #: When FTS5 ranks (the in-memory BM25 not built yet, or a term of several tokens): FTS5 phrases (query terms)
    #: whose matching chunks and BM25 values are kept in memory while the store is unchanged, at most this many
    #: (chunk, value) pairs in all (16 bytes each: ≤ 32 MB). A query is ranked by summing its terms' values, exactly as FTS5's bm25() of the OR query (same order, same doubles: the same
    #: top 60 ids and scores for the 102 dev/bench questions on both vaults). Measured on obsidian-hub, where
    #: common terms match ~10,000 of 19,573 chunks: ~8 ms per query with SQL, 0.65 ms with every term cached.
    TERM_CACHE_MAX_ROWS = 2_000_000

    def _phrase_scores(self, phrase: str) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, bm25) of every chunk matching ``phrase``: cached while the store is unchanged."""
        epoch = self._epoch
        with self._results_lock:
            cached = self._phrases.get(phrase)
            if cached is not None and cached[0] == epoch:
                self._phrases.move_to_end(phrase)
                return cached[1], cached[2]
        ids, scores = self.store.fts_phrase_scores(phrase)
        with self._results_lock:
            if self._epoch == epoch:
                old = self._phrases.pop(phrase, None)
                self._phrase_rows -= len(old[1]) if old is not None else 0
                self._phrases[phrase] = (epoch, ids, scores)
                self._phrase_rows += len(ids)
                while self._phrase_rows > self.TERM_CACHE_MAX_ROWS and len(self._phrases) > 1:
                    _, (_, dropped, _) = self._phrases.popitem(last=False)
                    self._phrase_rows -= len(dropped)
        return ids, scores

    def start_keyword_index(self) -> threading.Thread | None:
        """Build the in-memory BM25 (:class:`~cairn.bm25.Bm25Index`) on a background thread, and again whenever it
        was dropped (a bulk re-index) or holds many rows outside its main postings. For long-lived processes (the
        daemon, the MCP server): 0.7-1.1 s of CPU and 12 MB on obsidian-hub. Queries use FTS5 until it is ready, with
        the same results. Returns the thread started, or None when one is already building."""
        self._terms_auto = True
        with self._results_lock:
            if self._terms_building is not None and self._terms_building.is_alive():
                return None
            thread = threading.Thread(target=self._build_terms, name="cairn-bm25", daemon=True)
            self._terms_building = thread
            self._terms_started_at = time.monotonic()
        thread.start()
        return thread

    #: A rebuild of the in-memory BM25 (after it was dropped by a bulk change) starts at most once per
    #: TERMS_REBUILD_S seconds, and only once the store has been unchanged for TERMS_QUIET_S: a build is ~1 s of
    #: Python holding the GIL (searches meanwhile measured up to 0.7 s on obsidian-hub during a full re-index),
    #: and while notes are indexed in bulk it would be out of date before it is done; FTS5 serves meanwhile.
    TERMS_REBUILD_S = 30.0
    TERMS_QUIET_S = 5.0

    def _build_terms(self) -> None:
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

    def _term_scores(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, bm25) of every chunk matching ``term`` as an FTS5 phrase: from memory when the in-memory
        BM25 holds it (same values), else from FTS5 (:meth:`_phrase_scores`)."""
        found = self.terms.scores(term)
        return found if found is not None else self._phrase_scores(fts_phrase(term))

    def keyword_ranking(self, query: str, limit: int = CANDIDATES) -> list[int]:
        """The keyword (BM25) leg of :meth:`retrieve` on its own: the ids of the ``limit`` chunks with the best BM25
        for ``query``'s terms, best first, as the store is now (no cosine floor, no withholding: for benchmarks and
        checks, not for serving)."""
        self._store_epoch()
        return self._bm25(query, limit)

    def _bm25(
        self, query: str, limit: int, *, within: Sequence[int] | None = None, excluding: Sequence[int] = ()
    ) -> list[int]:
        """The ``limit`` chunks with the best FTS5 BM25 for the OR of ``query``'s terms (what FTS5 ranks for
        :func:`cairn.ranking.fts_match_expression`), best first, ties by chunk id;
        ``within`` restricts to chunk ids, ``excluding`` leaves chunk ids out before the top is taken."""
        terms = query_terms(query)
        if not terms:
            return []
        if self._terms_auto:
            self.terms.refresh(self._epoch)
            now = time.monotonic()
            if (
                self.terms.wants_rebuild
                and now - self._terms_started_at >= self.TERMS_REBUILD_S
                and now - self._epoch_changed_at >= self.TERMS_QUIET_S
            ):
                self.start_keyword_index()
        parts = [self._term_scores(t) for t in terms]
        top = max((int(ids.max()) for ids, _ in parts if len(ids)), default=-1)
        acc = np.zeros(top + 1)
        for ids, scores in parts:  # in query order, as FTS5 sums them
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

    #: Dense scores of the last questions kept in memory (LRU) for the in-memory vectors they were computed on:
    #: bounds (n,) float32 × 4 and the exact cosines found, ~330 KB on obsidian-hub, so ≤ 21 MB. A question
    #: searched, then asked (other parameters: ranked again) is scored once.
    SCORES_CACHE_MAX = 64

    def _dense_query(self, snap: _VectorSnapshot, query: str, qvec: np.ndarray) -> DenseQuery:
        """``query``'s dense scores against ``snap`` (:meth:`cairn.dense.DenseIndex.query`), cached per snapshot and
        query text (with the exact cosines found so far). Only the snapshot last asked about has entries: each one
        holds its snapshot's vectors (70 MB of float32, their int8 copies and an onnxruntime session on
        obsidian-hub), so entries of replaced snapshots would keep those in memory (measured before: the daemon's
        RSS grew ~100 MB a reload, 569 → 1,166 MB in 5)."""
        snap_key = (id(snap), snap.loaded_at)
        key = (*snap_key, query)
        with self._results_lock:
            hit = self._scores.get(key)
            if hit is not None:
                self._scores.move_to_end(key)
                return hit
        scores = snap.dense.query(qvec)
        with self._results_lock:
            if self._scores and next(reversed(self._scores))[:2] != snap_key:
                self._scores.clear()  # a newer (or, in a request that began before a reload, older) snapshot
            self._scores[key] = scores
            while len(self._scores) > self.SCORES_CACHE_MAX:
                self._scores.popitem(last=False)
        return scores

    def _rank(
        self,
        query: str,
        top_k: int,
        scope_tags: list[str],
        scope_folders: list[str],
        mode: str,
        per_note: int,
        withhold: Withhold | None,
        tally: WithheldTally,
    ) -> tuple[list[Hit], str | None]:
        """:meth:`retrieve` on validated arguments, without the result cache."""
        within = self.store.scoped_chunk_ids(scope_tags, scope_folders) if (scope_tags or scope_folders) else None
        if within is not None and not within:
            return [], None
        hidden = WithheldSet.load(self.store, withhold)
        excluded = list(hidden.chunks)
        touched: set[int] = set()  # withheld chunks among the unfiltered candidates (for the tally)
        qvec = self._embed_cached([query])[0]
        preference = self.classifier.classify(query)

        rankings: dict[str, list[int]] = {}
        bm25: list[int] = []
        if mode in ("hybrid", "bm25"):
            bm25 = self._bm25(query, self.CANDIDATES, within=within, excluding=excluded)
            if excluded and tally is not None:
                touched.update(c for c in self._bm25(query, self.CANDIDATES, within=within) if c in hidden.chunks)
            rankings["bm25"] = bm25
        snap = self._vectors()
        newer = self._embedded_since(snap)
        if len(newer) > self.SNAPSHOT_MAX_NEWER:  # a bulk (re-)index: the rest join when the reload lands
            self._reload_vectors(bulk=True)
            newer = newer[: self.SNAPSHOT_MAX_NEWER]
        if within is not None and newer:
            scope = set(within)
            newer = [c for c in newer if c in scope]
        if excluded and newer:
            newer = [c for c in newer if c not in hidden.chunks]
        dq = self._dense_query(snap, query, qvec)
        pool: list[int] = []
        if mode in ("hybrid", "dense"):
            allowed = None if within is None else np.isin(snap.chunk_ids, np.asarray(within, dtype=np.int64))
            if excluded:
                hide = np.isin(snap.chunk_ids, np.asarray(excluded, dtype=np.int64))
                if tally is not None and hide.any():
                    top_all = dq.top(self.CANDIDATES, self.unit_weight, snap.chunk_ids, allowed)
                    touched.update(int(snap.chunk_ids[i]) for i in top_all if hide[i])
                allowed = ~hide if allowed is None else allowed & ~hide
            top = dq.top(self.CANDIDATES, self.unit_weight, snap.chunk_ids, allowed)
            pool = [int(snap.chunk_ids[i]) for i in top] + newer
        candidates = list(dict.fromkeys(bm25 + pool))
        rows = self.store.chunk_rows(candidates)  # chunks deleted since the snapshot are absent here
        chunk_cos: dict[int, float] = {}
        unit_cos: dict[int, float] = {}
        held = [(cid, snap.row_of[cid]) for cid in candidates if cid in snap.row_of]
        if held:
            exact_cos, exact_unit = dq.exact(np.asarray([r for _, r in held], dtype=np.int64))
            for (cid, _), c, u in zip(held, exact_cos.tolist(), exact_unit.tolist()):
                chunk_cos[cid], unit_cos[cid] = c, u
        missing = [cid for cid in candidates if cid not in chunk_cos]
        if missing:  # embedded after the snapshot, or not embedded yet (keyword-ready index)
            more_cos, more_units = self._similarities(qvec, missing, rows, compute_missing=set(bm25))
            chunk_cos.update(more_cos)
            unit_cos.update(more_units)
        # Ranking: the better of the chunk's cosine and UNIT_WEIGHT × its best sentence's.
        dense = {c: max(cos, self.unit_weight * unit_cos[c]) for c, cos in chunk_cos.items()}
        # The hit's cosine similarity is that of its best vector (chunk or sentence); the floor
        # counts a sentence at FLOOR_UNIT_WEIGHT of its cosine, which is stricter than the contract.
        cosines = {c: max(cos, unit_cos[c]) for c, cos in chunk_cos.items()}
        floor_score = {c: max(cos, self.FLOOR_UNIT_WEIGHT * unit_cos[c]) for c, cos in chunk_cos.items()}
        if mode in ("hybrid", "dense"):
            rankings["dense"] = sorted((c for c in pool if c in dense), key=lambda c: (-dense[c], c))[: self.CANDIDATES]
        passing = {
            cid
            for cid in candidates
            if cid in rows
            and floor_score.get(cid, -1.0) >= self.floor
            and not (hidden and hidden.hides(rows[cid].note_id, rows[cid].path))
        }
        fused = rrf_fuse(
            {name: [c for c in ranked if c in passing] for name, ranked in rankings.items()},
            {"dense": self.weights.dense, "bm25": self.weights.bm25},
        )
        for cid in fused:
            fused[cid] *= self.classifier.boost(preference, rows[cid].kind)
        order = sorted(fused, key=lambda c: (-fused[c], -cosines[c], c))
        chosen = limit_per_group(order, {c: rows[c].path for c in order}, per_note, top_k)
        tags_by_note = self.store.tags_of_notes(rows[c].note_id for c in chosen)
        terms = query_terms(query)
        if hidden:  # defence in depth: a note tagged since the withheld set was read
            chosen = [c for c in chosen if not hidden.withhold.tag_withheld(tags_by_note.get(rows[c].note_id, []))]
            if tally is not None and touched:
                # The withheld notes with a candidate chunk that would have passed the floor (a chunk not
                # in the in-memory vectors counts, to err on the side of reporting).
                def would_pass(cid: int) -> bool:
                    r = snap.row_of.get(cid)
                    if r is None:
                        return True
                    c, u = dq.exact(np.asarray([r], dtype=np.int64))
                    return max(float(c[0]), self.FLOOR_UNIT_WEIGHT * float(u[0])) >= self.floor

                tally.add(hidden.notes[hidden.chunks[c]] for c in touched if would_pass(c))
        mask = hidden.symbol_masker(self.store) if hidden.redactor else None
        hits = [
            self._hit(
                rows[c],
                fused[c],
                cosines[c],
                tags_by_note.get(rows[c].note_id, []),
                terms,
                hidden.redact if hidden.redactor else None,
                mask,
            )
            for c in chosen
        ]
        return hits, preference

    #: Texts whose embeddings are kept in memory (LRU): questions, and the sentences and titles the
    #: extractive answer scores (read from the store's embedding cache, embedded only when absent there).
    #: (384,) float32 each, so at most ~31 MB.
    VECTOR_CACHE_MAX = 20_000

    def _embed_cached(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), 384)`` float32, L2-normalised: cached vectors, the rest embedded in one batch
        and cached. Same vectors as ``embedder.embed`` (the model is deterministic)."""
        out: list[np.ndarray | None] = []
        missing: list[str] = []
        with self._vec_cache_lock:
            for t in texts:
                v = self._vec_cache.get(t)
                if v is not None:
                    self._vec_cache.move_to_end(t)
                else:
                    missing.append(t)
                out.append(v)
        if missing:
            unique = list(dict.fromkeys(missing))
            fresh = dict(zip(unique, self.embedder.embed(unique)))
            with self._vec_cache_lock:
                for t, v in fresh.items():
                    self._vec_cache[t] = v
                    self._vec_cache.move_to_end(t)
            out = [v if v is not None else fresh[t] for t, v in zip(texts, out)]
        self._trim_vec_cache()
        if not out:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return np.stack(out)  # type: ignore[arg-type]

    def _vectors(self) -> _VectorSnapshot:
        """The in-memory vectors. The first load is done here; after that, when the store's vectors changed, a reload
        runs on a background thread (at most every SNAPSHOT_REFRESH_S seconds) and queries go on with the snapshot
        they have (chunks embedded since are scored from the store: :meth:`_embedded_since`). Measured on
        obsidian-hub during a full re-index: a full reload takes 1-2 s, and the query that did it in its own thread
        waited that long (p95 of new questions 368 ms with it, against ~70 ms without); after a few saved notes a
        reload reads only their chunks (:meth:`_load_vectors`: ~0.1-0.15 s of CPU)."""
        snap = self._snapshot
        if snap is None:
            with self._snapshot_lock:
                if self._snapshot is None:
                    self._snapshot = _VectorSnapshot.load(self.store)
                    self._full_loaded_at = time.monotonic()
                return self._snapshot
        if (
            snap.generation != self.store.vectors_generation()
            and time.monotonic() - max(snap.loaded_at, self._reload_tried_at) >= self.SNAPSHOT_REFRESH_S
        ):
            self._reload_vectors()
        return snap

    def _reload_vectors(self, *, bulk: bool = False) -> None:
        """Start loading the vectors again on a background thread, unless a load is running. ``bulk``: more chunks
        wait than a query scores one by one, so a full load may not wait for SNAPSHOT_FULL_REFRESH_S."""
        with self._snapshot_lock:
            if bulk:
                self._bulk_waiting = True  # seen by a load already running, before it decides to wait
            if self._snapshot_loading is not None and self._snapshot_loading.is_alive():
                return
            self._snapshot_loading = threading.Thread(
                target=self._load_vectors, kwargs={"bulk": bulk}, name="cairn-vectors", daemon=True
            )
            self._snapshot_loading.start()

    def _load_vectors(self, *, bulk: bool = True) -> None:
        """Replace the snapshot held: from it, reading only the changed chunks (:meth:`_VectorSnapshot.refresh`),
        or in full when that declines or fails (:meth:`_VectorSnapshot.load`) — unless ``bulk`` is false and the
        last full load is less than SNAPSHOT_FULL_REFRESH_S old. Runs on the loading thread."""
        own_thread = threading.current_thread() is self._snapshot_loading
        try:
            self._load_vectors_here(bulk=bulk)
        finally:
            if own_thread:
                self.store.close_thread_connection()  # the loading thread ends (one per reload, every few seconds)

    def _load_vectors_here(self, *, bulk: bool) -> None:
        self._reload_tried_at = started = time.monotonic()
        old = self._snapshot
        snap: _VectorSnapshot | None = None
        if old is not None:
            try:
                snap = _VectorSnapshot.refresh(old, self.store, max_changed=self.SNAPSHOT_INCREMENTAL_MAX)
            except Exception:  # a read failed, or a bug: a full load is always right
                log.warning("reloading the changed in-memory vectors failed; loading them all", exc_info=True)
        if snap is None and old is not None and started - self._full_loaded_at < self.SNAPSHOT_FULL_REFRESH_S:
            with self._snapshot_lock:  # decided with _reload_vectors locked out: a bulk request is never lost
                if not (bulk or self._bulk_waiting):
                    if self._snapshot_loading is threading.current_thread():
                        self._snapshot_loading = None  # not loading: a bulk request starts a load of its own
                    return  # a full load (1-2 s of CPU on obsidian-hub) waits: the snapshot held goes on serving
        try:
            if snap is None:
                self._bulk_waiting = False
                snap = _VectorSnapshot.load(self.store)
                self._full_loaded_at = started
        except Exception:  # the store closed meanwhile, or a read failed: the snapshot held goes on serving
            log.warning("reloading the in-memory vectors failed; the next change tries again", exc_info=True)
            return
        with self._snapshot_lock:
            self._snapshot = snap

    def _embedded_since(self, snap: _VectorSnapshot) -> list[int]:
        """Chunks that got vectors after ``snap`` was loaded (ids only grow), newest first, at most
        SNAPSHOT_MAX_NEWER + 1. Newest first: when more were embedded than a query scores one by one, the ones left
        out must not be the note just saved (oldest first, bench_freshness's edited note was missing from the
        results in 1 of 50 edits of some runs: the edits since the last reload had made more than 256 chunks)."""
        if snap.generation == self.store.vectors_generation():
            return []
        last = int(snap.chunk_ids.max()) if len(snap.chunk_ids) else 0
        return self.store.embedded_chunks_after(last, self.SNAPSHOT_MAX_NEWER + 1)

    #: At most this many texts (sentences, titles) embedded by one query for keyword candidates that have no vectors
    #: yet (~0.1-0.2 s of CPU); texts the embedding cache holds cost nothing.
    SIMILARITY_EMBED_TEXTS = 64

    def _similarities(
        self, qvec: np.ndarray, ids: Sequence[int], rows: dict[int, ChunkRow], *, compute_missing: set[int]
    ) -> tuple[dict[int, float], dict[int, float]]:
        """For every candidate read from the store: (cosine of its chunk vector, best cosine among its
        unit vectors or -1). Chunks not
        embedded yet (keyword-ready index, or rewritten by a re-index) get vectors computed now, the same way the
        indexer will, if they are in ``compute_missing`` (the keyword candidates): from the embedding cache, and
        from the model for at most :attr:`SIMILARITY_EMBED_TEXTS` texts; the others are left out this time."""
        ids = [c for c in ids if c in rows]
        chunk_vecs = self.store.vectors(ids)
        unit_vecs = self.store.unit_vectors(ids)
        missing = [c for c in ids if c not in chunk_vecs and c in compute_missing]
        if missing:
            # The texts' vectors from the embedding cache when it has them (a note re-indexed unchanged, moved,
            # or embedded by another run: all of them during a full re-index), the model for the rest, at most
            # SIMILARITY_EMBED_TEXTS per query: a candidate beyond it is left out this time (it is embedded
            # seconds later). Measured on obsidian-hub during a full re-index: embedding every keyword
            # candidate's sentences took searches to p95 1.9-2.2 s.
            units = {c: embedding_units(rows[c].symbol, rows[c].text, rows[c].kind) for c in missing}
            wanted = {content_hash(u): u for c in missing for u in units[c]}
            wanted.update({title_hash(rows[c].title): rows[c].title for c in missing})
            found = self.store.cached_vectors(wanted, self.embedder.model_id)
            budget = self.SIMILARITY_EMBED_TEXTS
            for c in missing:  # in the caller's order: the best keyword candidates first
                need = [
                    h
                    for h in dict.fromkeys([*map(content_hash, units[c]), title_hash(rows[c].title)])
                    if h not in found
                ]
                if len(need) > budget:
                    continue
                if need:
                    found.update(zip(need, self.embedder.embed([wanted[h] for h in need])))
                    budget -= len(need)
                unit_vecs[c] = np.stack([found[content_hash(u)] for u in units[c]])
                chunk_vecs[c] = chunk_vector(unit_vecs[c], found[title_hash(rows[c].title)], self.title_weight)
        cosines = {c: float(chunk_vecs[c] @ qvec) for c in ids if c in chunk_vecs}
        best_unit = {}
        for c in cosines:
            uv = unit_vecs.get(c)
            best_unit[c] = float(np.max(uv @ qvec)) if uv is not None and len(uv) else -1.0
        return cosines, best_unit

    @staticmethod
    def _hit(
        row: ChunkRow,
        score: float,
        cosine: float,
        tags: Sequence[str],
        terms: Sequence[str],
        redact: Callable[[str], str] | None = None,
        mask_symbol: Callable[[str, str], str] | None = None,
    ) -> Hit:
        text, symbol = (redact(row.text), redact(row.symbol)) if redact else (row.text, row.symbol)
        if mask_symbol is not None and row.kind != "pdf":  # a PDF's symbol is "page N"
            symbol = mask_symbol(row.path, row.symbol)
        return Hit(
            chunk_id=row.chunk_id,
            file_path=row.path,
            title=row.title,
            symbol=symbol,
            score=score,
            cosine=cosine,
            snippet=make_snippet(text, terms),
            text=text,
            tags=tuple(tags),
            lines=(row.line_start, row.line_end) if row.line_start is not None else None,
            page=row.page,
            kind=row.kind,
            indexed_at=row.indexed_at,
            token_bound=row.token_count if text == row.text else 0,
        )

    def search(
        self,
        query: str,
        *,
        top_k: int = DEFAULT_TOP_K,
        tags: Sequence[str] = (),
        folders: Sequence[str] = (),
        mode: str = "hybrid",
        withhold: Withhold | None = None,
        tally: WithheldTally | None = None,
    ) -> SearchResult:
        """Ranked chunks for a query. Raises :class:`BadRequestError` for an empty or over-long query,
        a bad top_k or tag. ``withhold``/``tally``: see :meth:`retrieve`; ``SearchResult.withheld``
        is the number of withheld notes removed from the candidates."""
        started = time.perf_counter()
        tally = tally if tally is not None else WithheldTally()
        hits, preference = self.retrieve(
            query, top_k=top_k, tags=tags, folders=folders, mode=mode, withhold=withhold, tally=tally
        )
        return SearchResult(
            hits=hits, elapsed_ms=(time.perf_counter() - started) * 1000, preference=preference, withheld=tally.count
        )

    # ------------------------------------------------------------------ answers
    def context(
        self,
        question: str,
        *,
        top_k: int = DEFAULT_TOP_K,
        tags: Sequence[str] = (),
        folders: Sequence[str] = (),
        withhold: Withhold | None = None,
        tally: WithheldTally | None = None,
    ) -> list[Source]:
        """The numbered sources of an answer: retrieved chunks that fit the 6,000-token context
        budget (lowest-scored dropped first), numbered 1..n in rank order. [] → not found.
        ``withhold``/``tally``: see :meth:`retrieve` (withheld notes never become sources)."""
        hits, _ = self.retrieve(
            question,
            top_k=top_k,
            tags=tags,
            folders=folders,
            per_note=self.PER_NOTE_ASK,
            withhold=withhold,
            tally=tally,
        )
        if not hits:
            return []
        # Upper bounds first: a block's tokens are its header's plus its text's (WordPiece never joins across the
        # newline), and the text has at most the chunk's indexed token_count. When the bounds fit, every block
        # does, and nothing is counted: tokenizing the sources' text was ~5.5 ms of a new question's ~14 ms of
        # /ask CPU on obsidian-hub. Otherwise each block is counted exactly.
        bounds = [
            self._count_tokens(f"[{i}] {h.file_path} › {h.symbol}\n") + h.token_bound for i, h in enumerate(hits, 1)
        ]
        if all(h.token_bound for h in hits) and sum(bounds) <= CONTEXT_TOKEN_BUDGET:
            tokens = bounds
        else:
            tokens = [self._count_tokens(f"[{i}] {h.file_path} › {h.symbol}\n{h.text}") for i, h in enumerate(hits, 1)]
        kept = select_within_budget([h.score for h in hits], tokens, CONTEXT_TOKEN_BUDGET)
        return [Source(n=i, hit=hits[k]) for i, k in enumerate(kept, start=1)]

    def ask(
        self,
        question: str,
        *,
        top_k: int = DEFAULT_TOP_K,
        tags: Sequence[str] = (),
        folders: Sequence[str] = (),
        withhold: Withhold | None = None,
        tally: WithheldTally | None = None,
    ) -> Answer:
        """An attributable answer. Nothing above the floor → the fixed not-found answer. Otherwise
        (no model yet) the extractive answer: the sentences of the sources that best answer the
        question, each followed by its ``[n]``, then a ``Sources:`` list; ``grounded: false``."""
        started = time.perf_counter()
        question = self._check(question, top_k, "question")
        tally = tally if tally is not None else WithheldTally()
        sources = self.context(question, top_k=top_k, tags=tags, folders=folders, withhold=withhold, tally=tally)
        if not sources:
            return Answer(
                text=NOT_FOUND_ANSWER,
                grounded=False,
                not_found=True,
                sources=[],
                elapsed_ms=(time.perf_counter() - started) * 1000,
                withheld=tally.count,
            )
        text = self.extractive_answer(question, sources)
        return Answer(
            text=text,
            grounded=False,
            not_found=False,
            sources=sources,
            elapsed_ms=(time.perf_counter() - started) * 1000,
            withheld=tally.count,
        )

    #: Weight of the source note's title cosine added to each sentence's own cosine in the extractive
    #: answer: the title carries the subject a sentence often leaves out ("Garlic" for "Plant cloves in
    #: October, 5 cm deep"). Measured on the dev set's in-corpus questions (both vaults, 42 with evidence):
    #: the answer held all of the evidence's words for 22 of 42 (the same as embedding each sentence in its
    #: context, "title › heading: sentence", which it replaces), mean evidence-word coverage 0.741 against
    #: 0.751; weights 0.1 / 0.2 gave 20 / 21 of 42, the sentence alone 20.
    TITLE_PRIOR = 0.3

    def extractive_answer(self, question: str, sources: Sequence[Source]) -> str:
        """Pick the sentences that best answer ``question``: each candidate sentence's cosine similarity to
        the question plus TITLE_PRIOR × its note title's, plus a keyword-overlap bonus (sentence read with
        its title and heading) and a small prior for better-ranked sources.

        The sentences and titles of indexed chunks were embedded by the indexer, with these very texts
        (``embedding_units`` uses the same :func:`~cairn.prompt.candidate_sentences`): their vectors are
        read from the store's embedding cache, so an answer over indexed notes embeds nothing but the
        question. Only a sentence changed since (a redacted link, a chunk not embedded yet) is embedded.
        The text is kept in memory (LRU) by question and sources: it depends on nothing else."""
        key = (
            question,
            tuple(
                (s.n, s.hit.title, s.hit.file_path, s.hit.symbol, s.hit.text, s.hit.lines, s.hit.page) for s in sources
            ),
        )
        with self._results_lock:
            text = self._answers.get(key)
            if text is not None:
                self._answers.move_to_end(key)
                return text
        text = self._extractive_answer(question, sources)
        with self._results_lock:
            self._answers[key] = text
            while len(self._answers) > self.RESULT_CACHE_MAX:
                self._answers.popitem(last=False)
        return text

    def _extractive_answer(self, question: str, sources: Sequence[Source]) -> str:
        cands: list[tuple[int, int, str, str, str, str]] = []
        for s in sources:
            context = " › ".join(p for p in (s.hit.title, s.hit.symbol) if p)
            quoted = candidate_sentences(s.hit.text, attach_code=True)[:40]
            # The same sentences without a code block appended to "…:" — the texts the indexer embedded.
            plain = candidate_sentences(s.hit.text)[:40]
            if len(plain) != len(quoted):
                plain = quoted
            for pos, (sent, unit) in enumerate(zip(quoted, plain)):
                cands.append((s.n, pos, sent, f"{context}: {sent}", unit, s.hit.title))
        picked: list[Sentence] = []
        if cands:
            qvec = self._embed_cached([question])[0]
            units = list(dict.fromkeys(c[4] for c in cands))
            titles = list(dict.fromkeys(c[5] for c in cands))
            vecs = self._stored_or_embedded([*units, *titles], [*map(content_hash, units), *map(title_hash, titles)])
            sim = dict(zip([*units, *(("\x1ftitle", t) for t in titles)], (vecs @ qvec).tolist()))
            terms = query_terms(question)
            scored = [
                Sentence(
                    n=n,
                    position=pos,
                    text=text,
                    score=sim[unit]
                    + self.TITLE_PRIOR * sim[("\x1ftitle", title)]
                    + 0.15 * token_overlap(terms, in_context)
                    - 0.01 * (n - 1),
                )
                for n, pos, text, in_context, unit, title in cands
            ]
            picked = pick_sentences(scored)
        lines = [source_line(s.n, s.hit.file_path, s.hit.symbol, s.hit.lines, s.hit.page) for s in sources]
        return compose_extractive_answer(picked, lines)

    def _stored_or_embedded(self, texts: Sequence[str], hashes: Sequence[str]) -> np.ndarray:
        """``(len(texts), 384)`` float32 vectors of ``texts``: from the in-memory LRU, else from the store's
        embedding cache (``hashes[i]`` is ``texts[i]``'s key there, written by the indexer with this
        embedder's model id), else embedded now. All of them are kept in the LRU."""
        found: dict[str, np.ndarray] = {}
        with self._vec_cache_lock:
            for t in texts:
                v = self._vec_cache.get(t)
                if v is not None:
                    self._vec_cache.move_to_end(t)
                    found[t] = v
        wanted = {h: t for t, h in zip(texts, hashes) if t not in found}
        if wanted:
            stored = self.store.cached_vectors(wanted, self.embedder.model_id)
            fresh = {wanted[h]: v.astype(np.float32, copy=False) for h, v in stored.items()}
            found.update(fresh)
            with self._vec_cache_lock:
                for t, v in fresh.items():
                    self._vec_cache[t] = v
        rest = [t for t in texts if t not in found]
        if rest:
            found.update(zip(rest, self._embed_cached(rest)))
        else:
            self._trim_vec_cache()
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return np.stack([found[t] for t in texts])

    def _trim_vec_cache(self) -> None:
        with self._vec_cache_lock:
            while len(self._vec_cache) > self.VECTOR_CACHE_MAX:
                self._vec_cache.popitem(last=False)


_SNIP_WORD = re.compile(r"\w+", re.UNICODE)


def check_chars(text: str, what: str) -> None:
    """:class:`BadRequestError` when ``text`` holds a surrogate code point (U+D800–U+DFFF),
    named ``what`` ("The query").

    A surrogate is not a character: it cannot be encoded as UTF-8 for the tokenizer or SQLite (a TypeError or
    UnicodeEncodeError deep inside, i.e. an ``internal`` error, before this check). U+DC80–U+DCFF is a byte that
    was not UTF-8 (Python's surrogateescape: a command-line argument typed in a Latin-1 terminal); the others
    come from a lone ``\\uD800``-style JSON escape."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        ch = text[exc.start]
        if "\udc80" <= ch <= "\udcff":
            why = f"the byte 0x{ord(ch) - 0xDC00:02X}, which is not UTF-8 text (is the terminal set to UTF-8?)"
        else:
            why = f"U+{ord(ch):04X}, half of a UTF-16 surrogate pair, which is not a character"
        raise BadRequestError(f"{what} holds {why} at character {exc.start + 1}; send the text as UTF-8.") from None


def make_snippet(text: str, terms: Sequence[str], width: int = 220) -> str:
    """A one-line excerpt of ``text`` (≤ ``width`` chars) around the densest run of query terms."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    if terms:
        prefixes = tuple(t[:5] for t in terms)
        positions = [m.start() for m in _SNIP_WORD.finditer(flat.lower()) if m.group(0).startswith(prefixes)]
    else:
        positions = []
    if not positions:
        return flat[: width - 1].rsplit(" ", 1)[0] + "…"
    best, best_count = positions[0], 0
    for i, p in enumerate(positions):  # ascending: the terms in [p, p + width) are positions[i:j]
        count = bisect.bisect_left(positions, p + width, i) - i
        if count > best_count:
            best, best_count = p, count
    start = max(0, best - width // 4)
    if start:
        start = flat.find(" ", start) + 1 or start
    piece = flat[start : start + width]
    if start + width < len(flat):
        piece = piece.rsplit(" ", 1)[0] + "…"
    return ("…" if start else "") + piece

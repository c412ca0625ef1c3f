"""Lexical evidence for search: which notes hold a query's clauses, and the tiers that put them first.

Obsidian matches at file level (a note matches ``meeting work`` when it holds both words anywhere), so coverage is
counted per note: a note holds a clause when any of its chunks does. The tiers (:class:`Coverage`): notes holding
every clause rank above notes holding some, and those above purely semantic matches; a note holding a rare clause
(held by at most :data:`RARE_NOTES` notes: a name, a code, a tool) ranks above all of them. Tiers apply to
queries of at most :data:`TIERED_CLAUSES` clauses. A chunk that holds a clause is lexical evidence: search never
drops it for its cosine (the floor applies to purely semantic hits only); within a tier the chunks that pass the
floor come first, in the fused order of the floor-passing candidates (the order an ask ranks them in), then the
others.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from cairn.search.cache import StoreEpoch
from cairn.store import Store

#: A clause held by at most this many notes is rare: its notes rank first.
RARE_NOTES = 5
#: Queries of at most this many clauses are ranked by tier (what one types into a search box: ``banneton``,
#: ``garden -tomato``, a title); longer ones are questions in words, whose terms are mostly common words: tiers by
#: which of them a note holds, or by one odd word of the question, would put notes holding them above the
#: semantically closest ones, so those keep the fused order.
TIERED_CLAUSES = 3


@dataclass(frozen=True)
class NoteMap:
    """Chunk → note of every indexed note at one store epoch. ``note_of`` (max chunk id + 1,) int64: the note id of
    each chunk id, -1 for ids that are not chunks of an indexed note; ``paths``: note id → vault-relative path."""

    note_of: np.ndarray
    paths: dict[int, str]

    @classmethod
    def read(cls, store: Store) -> NoteMap:
        chunk_ids, note_ids, paths = store.chunk_note_map()
        note_of = np.full(int(chunk_ids.max()) + 1 if len(chunk_ids) else 0, -1, dtype=np.int64)
        note_of[chunk_ids] = note_ids
        return cls(note_of, paths)

    def notes(self, chunk_ids: np.ndarray) -> np.ndarray:
        """The note ids (k,) of ``chunk_ids`` (k,), -1 for a chunk not in the map (added since it was read)."""
        ids = np.asarray(chunk_ids, dtype=np.int64)
        inside = ids < len(self.note_of)
        out = np.full(len(ids), -1, dtype=np.int64)
        out[inside] = self.note_of[ids[inside]]
        return out

    def chunks_of(self, note_ids: Sequence[int]) -> np.ndarray:
        """Chunk ids (ascending) of the notes ``note_ids``."""
        if not len(note_ids):
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(np.isin(self.note_of, np.asarray(list(note_ids), dtype=np.int64)))


class NoteMaps:
    """The :class:`NoteMap` of the store's current epoch, read again after a commit (one query of two columns)."""

    def __init__(self, store: Store, epoch: StoreEpoch) -> None:
        self.store = store
        self.epoch = epoch
        self._held: tuple[int, NoteMap] | None = None
        self._lock = threading.Lock()

    def get(self) -> NoteMap:
        epoch = self.epoch.value
        held = self._held
        if held is not None and held[0] == epoch:
            return held[1]
        note_map = NoteMap.read(self.store)
        with self._lock:
            if self.epoch.value == epoch:
                self._held = (epoch, note_map)
        return note_map


@dataclass(frozen=True)
class Coverage:
    """The lexical evidence of one query. ``lexical`` (k,) int64 ascending: chunk ids holding at least one clause
    (never dropped for their cosine in search); ``tier``: note id → 2 when the note holds every clause, 1 when some
    (absent: none); ``rare``: note id → how many rare clauses it holds; ``extra``: chunk ids to add to the keyword
    candidates, best BM25 first: the best chunk of each note holding every clause or a rare one that the keyword
    top lacks."""

    lexical: np.ndarray
    tier: dict[int, int]
    rare: dict[int, int]
    extra: list[int]
    clauses: int = 0

    def lexical_among(self, chunk_ids: Collection[int]) -> set[int]:
        """The chunks of ``chunk_ids`` that hold a clause."""
        ids = np.asarray(list(chunk_ids), dtype=np.int64)
        return set(ids[np.isin(ids, self.lexical, assume_unique=False)].tolist())

    def rank_key(self, note_id: int) -> tuple[int, int]:
        """Sort key (descending) of a chunk of note ``note_id``: (rare clauses held, tier); (0, 0) for every note of
        a query of more than :data:`TIERED_CLAUSES` clauses (a question in words: ranked by the fused order)."""
        if self.clauses > TIERED_CLAUSES:
            return 0, 0
        return self.rare.get(note_id, 0), self.tier.get(note_id, 0)


_EMPTY = np.zeros(0, dtype=np.int64)


def coverage(
    clauses: Sequence[tuple[np.ndarray, np.ndarray]],
    notes: NoteMap,
    keyword_top: Sequence[int],
    *,
    within: Sequence[int] | None,
    excluding: Sequence[int],
    max_extra: int,
) -> Coverage:
    """The :class:`Coverage` of ``clauses``: per clause, (chunk ids (k,) int64, BM25 (k,) float64 < 0) of the chunks
    holding it. Only chunks in ``within`` (None: all) and not in ``excluding`` count. ``keyword_top``: the keyword
    candidates already held; at most ``max_extra`` chunks are added."""
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    for ids, scores in clauses:
        mask = np.ones(len(ids), dtype=bool)
        if within is not None:
            mask &= np.isin(ids, np.asarray(within, dtype=np.int64))
        if len(excluding):
            mask &= ~np.isin(ids, np.asarray(excluding, dtype=np.int64))
        kept.append((ids[mask], scores[mask]))
    if not kept:
        return Coverage(_EMPTY, {}, {}, [])
    held_by = [np.unique(notes.notes(ids)) for ids, _ in kept]
    held_by = [h[h >= 0] for h in held_by]
    note_ids, counts = np.unique(np.concatenate(held_by), return_counts=True)
    tier = {int(n): 2 if k == len(kept) else 1 for n, k in zip(note_ids.tolist(), counts.tolist())}
    rare: dict[int, int] = {}
    for held in held_by:
        if len(held) <= RARE_NOTES:
            for n in held.tolist():
                rare[n] = rare.get(n, 0) + 1
    lexical = np.unique(np.concatenate([ids for ids, _ in kept]))
    wanted = {n for n, t in tier.items() if t == 2} | set(rare)
    return Coverage(lexical, tier, rare, _best_chunks(kept, notes, wanted, keyword_top, max_extra), len(kept))


def _best_chunks(
    kept: Sequence[tuple[np.ndarray, np.ndarray]], notes: NoteMap, wanted: set[int], held: Sequence[int], limit: int
) -> list[int]:
    """The chunk with the best summed BM25 of each note in ``wanted`` that has no chunk in ``held``, best first (ties
    by chunk id), at most ``limit``."""
    have = set(notes.notes(np.asarray(list(held), dtype=np.int64)).tolist())
    missing = np.asarray(sorted(wanted - have), dtype=np.int64)
    if not len(missing) or limit <= 0:
        return []
    chunk_ids, inverse = np.unique(np.concatenate([ids for ids, _ in kept]), return_inverse=True)
    acc = np.bincount(inverse, weights=np.concatenate([s for _, s in kept]), minlength=len(chunk_ids))
    owner = notes.notes(chunk_ids)
    inside = np.isin(owner, missing)
    chunk_ids, acc, owner = chunk_ids[inside], acc[inside], owner[inside]
    order = np.lexsort((chunk_ids, acc, owner))  # per note, best BM25 first
    firsts = order[np.r_[True, owner[order][1:] != owner[order][:-1]]] if len(order) else order
    best = firsts[np.lexsort((chunk_ids[firsts], acc[firsts]))][:limit]
    return chunk_ids[best].tolist()

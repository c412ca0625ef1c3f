"""One caller's view of the index (:class:`CallerView`), made once per request by :class:`Views`.

For the owner and the clients declared local it is a pass-through: every note, the keyword index as it is. For a
client not declared local it holds the notes withheld from it (:class:`~cairn.search.withheld.WithheldSet`), the
keyword index as it sees it (:class:`~cairn.search.visible.VisibleKeyword`: the BM25 statistics and the vocabulary
of its visible rows, rows linking to a withheld note by their redacted text) and the redacted rows' vectors. Every
step of a search, the answers, the library views and the coverage counts reach the withheld set, terms' matches,
scopes and expansions through it, so a signal is written once and is right for both kinds of caller; and a scope
is resolved inside the view, so one that matches only withheld notes costs what one matching nothing costs.

This module is the one place the withheld set is read from the store.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from cairn.policy import LinkRedactor, WithheldTally, Withhold
from cairn.search.cache import StoreEpoch
from cairn.search.keyword import KeywordIndex, KeywordLookup
from cairn.search.visible import Visible, VisibleKeyword, VisibleViews
from cairn.search.withheld import WithheldSet
from cairn.store import Store
from cairn.store.reads import chunk_notes, withheld_notes

_NOTHING = WithheldSet(Withhold(), {}, {}, LinkRedactor(()))


def load_withheld(store: Store, withhold: Withhold | None) -> WithheldSet:
    """The notes ``withhold`` hides in ``store`` now (one indexed query for the tags, one path scan when folders are
    withheld); the empty set for the owner."""
    if not withhold:
        return _NOTHING
    found = withheld_notes(store, withhold.tags, withhold.path_withheld if withhold.folders else None)
    return WithheldSet(
        withhold,
        {nid: path for nid, (path, _) in found.items()},
        chunk_notes(store, found),
        LinkRedactor(found.values()),
    )


@dataclass(frozen=True)
class Scope:
    """A request's scope in a caller's view: ``chunks`` the visible chunk ids it allows (None: no scope given);
    ``withheld`` the paths of the withheld notes it matched (for the audit log only)."""

    chunks: list[int] | None
    withheld: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return self.chunks is not None and not self.chunks


@dataclass(frozen=True)
class CallerView:
    """What one caller may see (module docstring): the caller every use case is handed with its request (a search,
    an answer, a library view). ``withheld``: the notes withheld from it (empty for the owner); :attr:`keyword`: the
    keyword index as it sees it; :attr:`visible`: its redacted rows and names (None when nothing is withheld in this
    store); ``tally``: the withheld notes the request touched, added by the services as they meet them (for the audit
    log only, never shown to the caller). Made by :meth:`Views.of`, one per request; the keyword view and the
    redacted rows are read on first use (a note or a listing needs only the withheld set)."""

    withheld: WithheldSet
    source: Views
    tally: WithheldTally = field(default_factory=WithheldTally, compare=False)

    @property
    def store(self) -> Store:
        return self.source.store

    @property
    def views(self) -> VisibleViews:
        return self.source.visible

    @cached_property
    def visible(self) -> Visible | None:
        return self.views.get(self.withheld) if self.withheld else None

    @cached_property
    def keyword(self) -> KeywordLookup:
        visible = self.visible
        return visible.keyword(self.source.keyword, self.store) if visible is not None else self.source.keyword

    @property
    def withhold(self) -> Withhold | None:
        """The caller's withholding rule (None for the owner)."""
        return self.withheld.withhold if self.withheld else None

    @property
    def key(self) -> tuple | None:
        """What results may be cached by: the rule (None for the owner)."""
        rule = self.withhold
        return (rule.tags, rule.folders) if rule else None

    @property
    def hidden(self) -> Mapping[int, int]:
        """{chunk id: note id} of the withheld notes' chunks."""
        return self.withheld.chunks

    @property
    def redactor(self) -> LinkRedactor:
        return self.withheld.redactor

    def hides(self, note_id: int, path: str) -> bool:
        """True for a withheld note (by id, or by path for a note indexed after the view was made)."""
        return bool(self.withheld) and self.withheld.hides(note_id, path)

    def hides_path(self, path: str) -> bool:
        return bool(self.withheld) and self.withheld.hides_path(path)

    def rows(self) -> int:
        """The rows of the keyword index the caller sees (the FTS5 row count for the owner)."""
        if isinstance(self.keyword, VisibleKeyword):
            return self.keyword.n_rows
        counts = self.store.fts_counts()
        return counts.rows if counts is not None else 0

    def scope(self, tags: Sequence[str], folders: Sequence[str]) -> Scope:
        """The chunks of the notes carrying any of ``tags`` and under any of ``folders`` that the caller may see
        (no scope without either); the withheld notes they hold are counted apart."""
        if not (tags or folders):
            return Scope(None)
        ids = self.store.scoped_chunk_ids(tags, folders)
        hidden = self.withheld.chunks
        if not hidden:
            return Scope(ids)
        notes = self.withheld.notes
        matched = frozenset(notes[hidden[c]] for c in ids if c in hidden)
        return Scope([c for c in ids if c not in hidden] if matched else ids, matched)

    def visible_chunks(self, chunk_ids: Sequence[int]) -> list[int]:
        """``chunk_ids`` without the withheld notes' chunks."""
        hidden = self.withheld.chunks
        return [c for c in chunk_ids if c not in hidden] if hidden else list(chunk_ids)

    def withheld_paths(self, note_ids: Collection[int]) -> frozenset[str]:
        """The paths of the withheld notes among ``note_ids``."""
        notes = self.withheld.notes
        return frozenset(notes[n] for n in note_ids if n in notes)

    def names(self) -> Mapping[int, list[frozenset[str]]] | None:
        """Note id → its names' tokens as the caller sees them, for the notes whose aliases link to a withheld note
        (None: every name as stored)."""
        return self.visible.names if self.visible is not None else None

    def redact(self, text: str) -> str:
        return self.withheld.redact(text)

    def symbol_masker(self) -> Callable[[str, str], str] | None:
        """``mask(path, symbol)`` for heading paths naming a withheld note (None when no link needs it)."""
        return self.withheld.symbol_masker(self.store) if self.withheld.redactor else None

    def dense(
        self, qvec: np.ndarray, ids: np.ndarray, allowed: np.ndarray | None, sentence_weight: float
    ) -> tuple[np.ndarray | None, list[int], dict[int, tuple[float, float]]]:
        """:meth:`VisibleViews.dense <cairn.search.visible.VisibleViews.dense>` for this caller."""
        return self.views.dense(self.visible, qvec, ids, allowed, sentence_weight)

    def redacted_cosines(
        self, qvec: np.ndarray, candidates: Sequence[int], known: Mapping[int, tuple[float, float]]
    ) -> dict[int, tuple[float, float]]:
        """:meth:`VisibleViews.redacted_cosines <cairn.search.visible.VisibleViews.redacted_cosines>`."""
        return self.views.redacted_cosines(self.visible, qvec, candidates, known)

    def redacted_vectors(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """{chunk id: (chunk vector, sentence vectors)} of the redacted rows, by their redacted text (within the
        per-call embedding budget)."""
        if self.visible is None:
            return {}
        return self.views.vectors(self.visible, self.visible.redacted)


class Views:
    """Makes each request's :class:`CallerView`: the withheld set is read per call (a note tagged a moment ago is
    withheld at once); the caller's keyword statistics and redacted rows are kept per rule while the store is
    unchanged (:class:`~cairn.search.visible.VisibleViews`)."""

    def __init__(self, store: Store, epoch: StoreEpoch, keyword: KeywordIndex, visible: VisibleViews) -> None:
        self.store = store
        self.epoch = epoch
        self.keyword = keyword
        self.visible = visible

    def of(self, withhold: Withhold | None) -> CallerView:
        """The view of a caller withheld ``withhold`` (None or empty: the owner's)."""
        return CallerView(load_withheld(self.store, withhold), self)

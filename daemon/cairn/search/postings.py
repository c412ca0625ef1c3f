"""Postings of the in-memory BM25 (:mod:`cairn.search.keyword`): term → the chunks holding it, with its frequency in
each, made from tokenized full-text rows a page at a time."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from cairn.search.vocabulary import Vocabulary


@dataclass(frozen=True)
class Postings:
    """Term → (chunk ids (k,) int64 ascending, frequencies (k,) float64) of the rows read at one snapshot."""

    terms: dict[str, tuple[np.ndarray, np.ndarray]]

    @classmethod
    def of(cls, docs: Iterable[tuple[int, list[str]]]) -> Postings:
        """The postings of ``docs`` [(chunk id, tokens)], chunk ids ascending."""
        builder = PostingsBuilder()
        for cid, tokens in docs:
            builder.add(cid, tokens)
        return builder.finish()

    @cached_property
    def nbytes(self) -> int:
        """Bytes held: the arrays, the term strings and the map's own entries."""
        arrays = sum(ids.nbytes + tf.nbytes + 2 * 112 + 56 for ids, tf in self.terms.values())
        return arrays + sum(map(sys.getsizeof, self.terms)) + sys.getsizeof(self.terms)

    @cached_property
    def vocabulary(self) -> Vocabulary:
        """The tokens held, with their row counts (rows deleted since the build included: a bound, for ranking
        expansions)."""
        terms = list(self.terms)
        return Vocabulary(terms, np.fromiter((len(self.terms[t][0]) for t in terms), dtype=np.int64, count=len(terms)))


class PostingsBuilder:
    """:class:`Postings` made from rows given one at a time (:meth:`add`, chunk ids ascending), folded into arrays
    every :attr:`PAGE` rows: a build over a whole index holds one page's tokens as Python objects, not every row's
    (tens of millions of strings and ints at 40,000 notes). Also keeps each row's size in tokens (:attr:`sizes`)."""

    PAGE = 2048

    def __init__(self) -> None:
        self._vocab: dict[str, int] = {}
        self._term_ids: list[int] = []
        self._rows: list[tuple[int, int]] = []  # (chunk id, tokens) of the page being read
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (term ids, chunk ids, counts) by page
        self._sized: list[np.ndarray] = []  # (2, n) chunk ids and sizes by page
        self.last_id = 0

    def add(self, cid: int, tokens: list[str]) -> None:
        vocab = self._vocab
        self._term_ids.extend([vocab.setdefault(t, len(vocab)) for t in tokens])
        self._rows.append((cid, len(tokens)))
        self.last_id = max(self.last_id, cid)
        if len(self._rows) >= self.PAGE:
            self._fold()

    def _fold(self) -> None:
        """The page read so far as (term id, chunk id, count) sorted by term then chunk id."""
        if not self._rows:
            return
        rows = np.asarray(self._rows, dtype=np.int64)
        self._sized.append(rows.T.copy())
        if self._term_ids:
            span = int(rows[-1, 0]) + 1
            keys, counts = np.unique(
                np.asarray(self._term_ids, dtype=np.int64) * span + np.repeat(rows[:, 0], rows[:, 1]),
                return_counts=True,
            )
            term_of, ids = np.divmod(keys, span)
            self._parts.append((term_of.astype(np.int32), ids, counts.astype(np.float64)))
        self._term_ids, self._rows = [], []

    @property
    def sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, sizes in tokens) of every row added, both (n,) int64 (after :meth:`finish`)."""
        if not self._sized:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        both = np.concatenate(self._sized, axis=1)
        return both[0], both[1]

    def finish(self) -> Postings:
        self._fold()
        if not self._parts:
            return Postings({})
        term_of = np.concatenate([p[0] for p in self._parts])
        order = np.argsort(term_of, kind="stable")  # pages come in chunk id order: stable keeps it per term
        term_of = term_of[order]
        ids = np.concatenate([p[1] for p in self._parts])[order]
        tf = np.concatenate([p[2] for p in self._parts])[order]
        self._parts = []
        starts = np.flatnonzero(np.r_[True, term_of[1:] != term_of[:-1]])
        ends = np.r_[starts[1:], len(term_of)]
        names = list(self._vocab)
        return Postings({names[int(term_of[s])]: (ids[s:e], tf[s:e]) for s, e in zip(starts, ends)})

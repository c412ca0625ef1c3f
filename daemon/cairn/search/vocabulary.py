"""The tokens of the keyword index with the rows holding each (:class:`Vocabulary`), for prefix and typo expansion,
and the vocabulary as one caller sees it (:class:`VisibleVocabulary`: rows withheld from it not counted, rows shown
to it redacted counted by their redacted tokens), so what a word expands to never depends on a withheld note.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np


class Vocabularies(Protocol):
    """What prefix and typo expansion read: :class:`Vocabulary` or a caller's :class:`VisibleVocabulary`."""

    def with_prefix(self, prefix: str, limit: int) -> list[tuple[str, int]]: ...

    def near(self, token: str, edits: int, limit: int) -> list[tuple[str, int, int]]: ...


def edit_distance(a: str, b: str, limit: int) -> int:
    """Optimal string alignment distance of ``a`` and ``b`` (insertions, deletions, substitutions and swaps of two
    adjacent characters, each one edit), or ``limit + 1`` as soon as it must exceed ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1]


class Vocabulary:
    """The tokens of a set of FTS5 rows, sorted, with the number of rows holding each: prefix lookups by bisection,
    typo candidates by a character-count bound (:meth:`near`), so neither walks the vocabulary in Python."""

    #: Character classes of the count bound (code point modulo this).
    BUCKETS = 32

    def __init__(self, terms: Sequence[str], rows: np.ndarray) -> None:
        order = sorted(range(len(terms)), key=terms.__getitem__)
        self.terms = [terms[i] for i in order]
        self.rows = np.asarray(rows, dtype=np.int64)[order] if len(order) else np.zeros(0, dtype=np.int64)
        self.lengths = np.fromiter(map(len, self.terms), dtype=np.int64, count=len(self.terms))
        self._counts: np.ndarray | None = None

    def with_prefix(self, prefix: str, limit: int) -> list[tuple[str, int]]:
        """(token, rows) of at most ``limit`` tokens starting with ``prefix``, the most frequent first."""
        lo = bisect.bisect_left(self.terms, prefix)
        hi = bisect.bisect_left(self.terms, prefix + "\U0010ffff", lo)
        if hi <= lo:
            return []
        best = lo + np.argsort(-self.rows[lo:hi], kind="stable")[:limit]
        return [(self.terms[i], int(self.rows[i])) for i in best.tolist()]

    def near(self, token: str, edits: int, limit: int) -> list[tuple[str, int, int]]:
        """(token, rows, distance) of at most ``limit`` tokens within ``edits`` edits of ``token``
        (:func:`edit_distance`), nearest then most frequent first. Candidates are the tokens whose length and
        character counts allow it (an edit changes the counts by at most 2 in all), computed on arrays; only those
        are compared."""
        counts = self._char_counts()
        rows_near = np.flatnonzero(np.abs(self.lengths - len(token)) <= edits)
        if not len(rows_near):
            return []
        want = np.zeros(self.BUCKETS, dtype=np.int64)
        np.add.at(want, np.frombuffer(token.encode("utf-32-le"), dtype=np.uint32) % self.BUCKETS, 1)
        bound = np.abs(counts[rows_near].astype(np.int64) - want).sum(axis=1)
        found = []
        for i in rows_near[bound <= 2 * edits].tolist():
            d = edit_distance(token, self.terms[i], edits)
            if d <= edits:
                found.append((self.terms[i], int(self.rows[i]), d))
        found.sort(key=lambda f: (f[2], -f[1], f[0]))
        return found[:limit]

    def _char_counts(self) -> np.ndarray:
        """(tokens, BUCKETS) uint16: each token's characters counted by class (built on first use)."""
        if self._counts is None:
            counts = np.zeros((len(self.terms), self.BUCKETS), dtype=np.uint16)
            if self.terms:
                codes = np.frombuffer("".join(self.terms).encode("utf-32-le"), dtype=np.uint32) % self.BUCKETS
                owner = np.repeat(np.arange(len(self.terms)), self.lengths)
                np.add.at(counts, (owner, codes), 1)
            self._counts = counts
        return self._counts


class VisibleVocabulary:
    """The vocabularies ``parts`` as one caller sees them: each token's rows less ``minus`` (the rows withheld from
    the caller, and the rows it is shown redacted, by their stored tokens) plus ``plus`` (those redacted rows by the
    tokens it is shown); tokens left with no row are not in it. The same interface and order as
    :class:`Vocabulary`, so a caller with withheld notes draws the expansions a vault without them would give."""

    def __init__(self, parts: Sequence[Vocabulary], minus: Mapping[str, int], plus: Mapping[str, int]) -> None:
        self.parts = parts
        self.minus = minus
        self.plus = plus
        self._plus_terms = sorted(plus)

    def _visible(self, found: dict[str, int]) -> dict[str, int]:
        out = {}
        for t, n in found.items():
            rows = n - self.minus.get(t, 0) + self.plus.get(t, 0)
            if rows > 0:
                out[t] = rows
        return out

    def _summed(self, pairs: Sequence[tuple[str, int]]) -> dict[str, int]:
        found: dict[str, int] = {}
        for t, n in pairs:
            found[t] = found.get(t, 0) + n
        return found

    def with_prefix(self, prefix: str, limit: int) -> list[tuple[str, int]]:
        """As :meth:`Vocabulary.with_prefix`: the most frequent first, ties in token order."""
        pairs = [p for v in self.parts for p in v.with_prefix(prefix, len(v.terms))]
        at = bisect.bisect_left(self._plus_terms, prefix)
        while at < len(self._plus_terms) and self._plus_terms[at].startswith(prefix):
            pairs.append((self._plus_terms[at], 0))
            at += 1
        rows = self._visible(self._summed(pairs))
        return sorted(rows.items(), key=lambda p: (-p[1], p[0]))[:limit]

    def near(self, token: str, edits: int, limit: int) -> list[tuple[str, int, int]]:
        """As :meth:`Vocabulary.near`: nearest, then most frequent, then in token order."""
        found = [f for v in self.parts for f in v.near(token, edits, len(v.terms))]
        distance = {t: d for t, _, d in found}
        for t in self._plus_terms:
            if t not in distance and (d := edit_distance(token, t, edits)) <= edits:
                distance[t] = d
        rows = self._visible(self._summed([(t, n) for t, n, _ in found] + [(t, 0) for t in self._plus_terms]))
        near = [(t, n, distance[t]) for t, n in rows.items() if t in distance]
        near.sort(key=lambda f: (f[2], -f[1], f[0]))
        return near[:limit]

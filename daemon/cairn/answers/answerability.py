"""Whether the retrieved chunks answer a question at all: the not-found decision after the cosine floor.

The 0.35 cosine floor (:mod:`cairn.search.service`) only says that a chunk is about the question's topic. A question
about something the notes never mention still finds chunks on the topic ("sync my tasks with <an app the vault never
names>" finds the sync plugins), so :class:`Answerability` also asks whether the evidence holds the question's words:

- **coverage**: the idf-weighted share of the question's terms (:func:`cairn.ranking.query_terms`, matched as FTS5
  phrases, so stemmed as the keyword index is) that occur in at least one retrieved chunk. A term in many chunks
  weighs little, a rare one much;
- **unknown terms**: the question's terms that occur in no chunk of the vault *and* that the embedding model splits
  into two or more WordPieces. A word the model's vocabulary lacks is mostly a name (a product, a service, a
  technical term); one the notes lack too is what the question is about and the notes are not. Common words the
  notes happen not to use are single WordPieces and do not count.

The rule is linear: answerable when ``coverage - UNKNOWN_PENALTY * unknown >= COVERAGE_MIN``. The constants are
calibrated by k-fold cross-validation on questions with known answers and off-corpus questions
(``tests/bench/calibrate_answerability.py``), at the operating point that keeps answerable questions wrongly
refused rare.

Withholding: a chunk the caller may not see does not count, neither as evidence nor for a term's document
frequency, so the decision says nothing about withheld notes.

Cost: one keyword lookup per question term (:meth:`~cairn.search.keyword.KeywordIndex.term_matches`: the in-memory
BM25's postings, or FTS5's matches the keyword leg of the retrieval has just read and kept) and one WordPiece count
per term absent from the vault.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from cairn.ranking import query_terms
from cairn.search.hits import Hit
from cairn.search.service import SearchService


@dataclass(frozen=True, slots=True)
class Evidence:
    """What :class:`Answerability` decides on. ``coverage`` in [0, 1] (1 when the question has no term with
    positive idf); ``unknown``: the number of unknown terms (module docstring); ``terms``: the question's terms."""

    coverage: float
    unknown: int
    terms: tuple[str, ...] = ()


class Answerability:
    """The not-found rule on retrieved evidence (module docstring). Thread-safe (no state but the search service's).

    ``search``: the service the hits came from (its keyword index gives the terms' chunks, its embedder the
    WordPiece counts)."""

    #: Least ``coverage - UNKNOWN_PENALTY * unknown`` of an answerable question. Below zero: coverage alone never
    #: refuses (questions in the user's own words share few terms with the notes), it only outweighs unknown terms.
    COVERAGE_MIN = -0.04
    #: What one unknown term costs, in coverage.
    UNKNOWN_PENALTY = 0.40
    #: WordPieces from which a term absent from the vault counts as unknown.
    UNKNOWN_PIECES = 2

    def __init__(self, search: SearchService) -> None:
        self.search = search

    def evidence(self, question: str, hits: Sequence[Hit], *, hidden: Collection[int] = ()) -> Evidence:
        """The :class:`Evidence` of ``hits`` (the retrieved chunks) for ``question``. ``hidden``: chunk ids the
        caller may not see (left out of every count). Raises :class:`~cairn.errors.StoreError` when the index
        cannot be read."""
        terms = query_terms(question)
        if not terms:
            return Evidence(1.0, 0, ())
        counts = self.search.store.fts_counts()
        n_rows = counts.rows if counts is not None else 0
        hit_ids = np.asarray([h.chunk_id for h in hits], dtype=np.int64)
        hidden_ids = np.asarray(sorted(hidden), dtype=np.int64) if hidden else None
        weight_all = weight_found = 0.0
        unknown = 0
        for term in terms:
            ids = self._chunks_of(term)
            if hidden_ids is not None and len(ids):
                ids = ids[~np.isin(ids, hidden_ids)]
            df = len(ids)
            if df == 0 and self.search.embedder.count_tokens(term) >= self.UNKNOWN_PIECES:
                unknown += 1
            idf = max(math.log((n_rows - df + 0.5) / (df + 0.5)), 0.0) if n_rows else 0.0
            weight_all += idf
            if df and np.isin(ids, hit_ids).any():
                weight_found += idf
        coverage = weight_found / weight_all if weight_all > 0 else 1.0
        return Evidence(coverage, unknown, tuple(terms))

    @classmethod
    def answers(cls, evidence: Evidence) -> bool:
        """True when ``evidence`` is enough to answer (the linear rule of the module docstring)."""
        return evidence.coverage - cls.UNKNOWN_PENALTY * evidence.unknown >= cls.COVERAGE_MIN

    def answerable(self, question: str, hits: Sequence[Hit], *, hidden: Collection[int] = ()) -> bool:
        """:meth:`answers` of :meth:`evidence`; False without hits."""
        return bool(hits) and self.answers(self.evidence(question, hits, hidden=hidden))

    def _chunks_of(self, term: str) -> np.ndarray:
        """(k,) int64: the ids of the chunks holding ``term`` as an FTS5 phrase (the keyword leg's matches)."""
        return np.asarray(self.search.keyword.term_matches(term)[0], dtype=np.int64)

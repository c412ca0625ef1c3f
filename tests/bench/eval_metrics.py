"""Ranking metrics and bootstrap intervals for the retrieval evaluation (pure Python + numpy).

A ranking is a list of vault-relative note paths, best first (rank 1 = index 0); ``relevant`` is the set of the
question's relevant notes. Each metric scores one question; a table row is the mean over questions, with a 95 %
percentile-bootstrap interval from resampling the questions (:func:`bootstrap`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
SEED = 20261201
CONFIDENCE = 0.95


def first_occurrence(paths: Iterable[str]) -> list[str]:
    """``paths`` with repeats removed, each note at its first (best) position: chunk ranks → note ranks."""
    return list(dict.fromkeys(paths))


def hit_at(ranked: Sequence[str], relevant: Collection[str], k: int = 5) -> float:
    """1.0 when any relevant note is among the first ``k`` of ``ranked``, else 0.0."""
    return 1.0 if any(p in relevant for p in ranked[:k]) else 0.0


def recall_at(ranked: Sequence[str], relevant: Collection[str], k: int = 5) -> float:
    """Share of the relevant notes found among the first ``k`` (0.0 for an empty ``relevant``)."""
    if not relevant:
        return 0.0
    return len(set(ranked[:k]) & set(relevant)) / len(set(relevant))


def reciprocal_rank(ranked: Sequence[str], relevant: Collection[str], k: int = 10) -> float:
    """1 / rank (1-based) of the first relevant note within the first ``k``; 0.0 when none is there."""
    for rank, path in enumerate(ranked[:k], start=1):
        if path in relevant:
            return 1.0 / rank
    return 0.0


@dataclass(frozen=True)
class Estimate:
    """A mean over ``n`` questions and its bootstrap interval [``lo``, ``hi``] (NaN for ``n == 0``)."""

    mean: float
    lo: float
    hi: float
    n: int

    def cell(self, digits: int = 3) -> str:
        """``0.879 [0.810–0.931]``, or ``n/a`` with no questions."""
        if self.n == 0:
            return "n/a"
        return f"{self.mean:.{digits}f} [{self.lo:.{digits}f}–{self.hi:.{digits}f}]"

    def percent(self) -> str:
        """``92 % [85–97]``, or ``n/a`` with no questions."""
        if self.n == 0:
            return "n/a"
        return f"{self.mean:.0%} [{self.lo * 100:.0f}–{self.hi * 100:.0f}]".replace("%", " %")


def bootstrap(
    values: Sequence[float], *, resamples: int = RESAMPLES, seed: int = SEED, confidence: float = CONFIDENCE
) -> Estimate:
    """The mean of ``values`` (one per question) and its percentile-bootstrap interval: ``resamples`` samples of
    ``len(values)`` questions drawn with replacement (``numpy.random.default_rng(seed)``, so the same values
    always give the same interval); the interval holds the central ``confidence`` share of the resampled means.
    Raises ``ValueError`` for ``resamples < 1`` or ``confidence`` outside (0, 1)."""
    if resamples < 1 or not 0.0 < confidence < 1.0:
        raise ValueError(f"need resamples >= 1 and 0 < confidence < 1, got {resamples}, {confidence}")
    data = np.asarray(values, dtype=np.float64)
    n = len(data)
    if n == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [tail, 1.0 - tail])
    return Estimate(float(data.mean()), float(lo), float(hi), n)

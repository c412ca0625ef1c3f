"""Fusion of the search's ranked lists into one score per candidate chunk, and the note aggregation after it.

Two methods (:class:`cairn.ranking.FusionWeights`):

- ``"convex"``: ``Σ_legs w · norm(score)`` over every candidate of any list, each leg's score normalised per query
  (Bruch, Gai & Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval", TOIS 2023): min-max, with the top of
  each leg's ranked list as 1 and as 0 its lower end — the dense list's last cosine, and 0 for BM25 (its theoretical
  minimum: a chunk holding none of the terms), clipped at 0 below. Unlike RRF it sees how far apart the scores are:
  a BM25 hit far above the rest, or a cosine far above the next, keeps its lead, and a chunk both legs rank gets
  both scores, wherever it stands in either list. The dense weight is ``alpha``, BM25's ``1 - alpha``.
- ``"rrf"``: weighted reciprocal rank fusion (:func:`cairn.ranking.rrf_fuse`).

Note aggregation (:func:`add_second_best`): every chunk of a note gains ``second`` × the fused score of that note's
second best chunk, so a note that two passages support ranks above one with a single passage of the same score,
while the order of the chunks within a note is unchanged.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from cairn.ranking import FusionWeights, rrf_fuse
from cairn.search.keyword import KeywordLookup

K = TypeVar("K", bound=Hashable)

#: Legs whose scores have a theoretical minimum, used as the lower end of their min-max normalisation.
_THEORETICAL_MIN = {"bm25": 0.0}


def _normalised(values: np.ndarray, top: np.ndarray, lower: float | None) -> np.ndarray:
    """``values`` min-max normalised against the leg's ranked scores ``top``: the best of ``top`` is 1, ``lower``
    (or the last of ``top`` when None) is 0; below it, 0. A list of equal scores: 1 for those, 0 below."""
    if not len(top):
        return np.zeros(len(values))
    hi = float(top.max())
    lo = float(top.min()) if lower is None else lower
    if hi - lo <= 0:
        return (values >= hi).astype(np.float64)
    return np.clip((values - lo) / (hi - lo), 0.0, None)


def convex_fuse(
    rankings: Mapping[str, Sequence[K]], scores: Mapping[str, Mapping[K, float]], weights: Mapping[str, float]
) -> dict[K, float]:
    """``Σ_legs weights[leg] · norm_leg(scores[leg][item])`` for every item of any list of ``rankings`` (module
    docstring). ``scores[leg]``: the leg's raw score of each item (higher is better; an item absent scores the leg's
    lower end, hence 0). Returns {item: fused score ≥ 0}."""
    items = list(dict.fromkeys(item for ranked in rankings.values() for item in ranked))
    fused = np.zeros(len(items))
    for name, ranked in rankings.items():
        w = weights.get(name, 0.0)
        if not w:
            continue
        leg = scores[name]
        lower = _THEORETICAL_MIN.get(name)
        floor = -np.inf if lower is None else lower
        top = np.asarray([leg.get(i, floor) for i in ranked], dtype=np.float64)
        values = np.asarray([leg.get(i, -np.inf) for i in items], dtype=np.float64)
        fused += w * _normalised(values, top[np.isfinite(top)], lower)
    return dict(zip(items, fused.tolist()))


def fuse(
    rankings: Mapping[str, Sequence[K]], scores: Mapping[str, Mapping[K, float]], weights: FusionWeights
) -> dict[K, float]:
    """The fused score of every item of ``rankings`` ({leg: items best first}) by ``weights.method``; ``scores``
    (the legs' raw scores, for ``"convex"``) may lack a leg only for ``"rrf"``."""
    if weights.method == "convex":
        return convex_fuse(rankings, scores, {"dense": weights.alpha, "bm25": 1.0 - weights.alpha})
    return rrf_fuse(rankings, {"dense": weights.dense, "bm25": weights.bm25}, weights.k)


def add_second_best(fused: Mapping[K, float], group_of: Mapping[K, Hashable], weight: float) -> dict[K, float]:
    """``fused`` with each item raised by ``weight`` × the second best score of its group (note); unchanged for
    ``weight`` 0 or a group of one."""
    if not weight:
        return dict(fused)
    first: dict[Hashable, float] = {}
    second: dict[Hashable, float] = {}
    for item, score in fused.items():
        g = group_of[item]
        top = first.get(g)
        if top is None:
            first[g] = score
        elif score > top:
            first[g], second[g] = score, top
        elif score > second.get(g, -np.inf):
            second[g] = score
    return {item: score + weight * second.get(group_of[item], 0.0) for item, score in fused.items()}


def bm25_scores(keyword: KeywordLookup, terms: Sequence[str], chunk_ids: Sequence[int]) -> dict[int, float]:
    """{chunk id: BM25 of the OR of ``terms``, positive (0: none held)} for ``chunk_ids``: the sum
    :meth:`KeywordIndex.ranking` orders by, negated, read from each term's matches (ascending chunk ids) by binary
    search."""
    ids = np.asarray(list(chunk_ids), dtype=np.int64)
    total = np.zeros(len(ids))
    for t in terms:
        holding, values = keyword.term_matches(t)
        if len(holding) and len(ids):
            at = np.minimum(np.searchsorted(holding, ids), len(holding) - 1)
            hit = holding[at] == ids
            total[hit] -= values[at[hit]]
    return dict(zip(ids.tolist(), total.tolist()))

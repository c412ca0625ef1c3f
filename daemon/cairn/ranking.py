"""Ranking: FTS5 query building, fusion settings and RRF, the query classifier, per-note de-duplication. Pure.

Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009: ``score = Σ w_i / (k + rank_i)``, k = 60 as in the
docs/design.md contract) with per-list weights is one of the search's two fusion methods (:class:`FusionWeights`; the
other, a convex combination of normalised scores, is in :mod:`cairn.search.fusion`), chosen by cross-validation on
the dev questions.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from cairn.config import RRF_K

K = TypeVar("K", bound=Hashable)

#: Function words dropped from keyword queries: they carry no topic and only add BM25 noise.
STOPWORDS = frozenset(
    """
a about above after again against all am an and any are aren't as at be because been before being below between
both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each few for from
further had hadn't has hasn't have haven't having he her here hers herself him himself his how i i'm if in into is
isn't it it's its itself just let's me more most my myself no nor not of off on once only or other ought our ours
ourselves out over own same she should shouldn't so some such than that that's the their theirs them themselves then
there there's these they they're this those through to too under until up very was wasn't we we're were weren't what
what's when where which while who whom why will with won't would wouldn't you you're your yours yourself yourselves
get got use using want way ways make makes thing things something anything also whether possible able
""".split()
)


def fts_phrase(term: str) -> str:
    """``term`` as an FTS5 phrase: double-quoted, inner quotes doubled, so it is never read as FTS5 syntax."""
    return '"' + term.replace('"', '""') + '"'


def rrf_fuse(rankings: Mapping[str, Sequence[K]], weights: Mapping[str, float], k: int = RRF_K) -> dict[K, float]:
    """Weighted reciprocal rank fusion: ``Σ_lists weight / (k + rank)`` with 1-based ranks.
    An item absent from a list gets nothing from it. Returns {item: fused score}."""
    scores: dict[K, float] = {}
    for name, ranked in rankings.items():
        w = weights.get(name, 1.0)
        if not w:
            continue
        for rank, item in enumerate(ranked, start=1):
            scores[item] = scores.get(item, 0.0) + w / (k + rank)
    return scores


@dataclass(frozen=True, slots=True)
class FusionWeights:
    """How the search fuses its ranked lists (:mod:`cairn.search.fusion`), chosen by k-fold cross-validation over
    the dev questions. ``method``: ``"convex"`` (``alpha`` · min-max normalised dense score + (1 − ``alpha``) ·
    min-max normalised BM25) or ``"rrf"`` (``Σ weight / (k + rank)`` with the ``dense`` and ``bm25`` weights: a
    smaller ``k`` gives the top ranks of each list more say). ``second``: weight of a note's second best chunk
    added to each of its chunks' fused scores (note aggregation; 0: a note ranks by its best chunk alone)."""

    dense: float = 1.0
    bm25: float = 0.3
    k: int = RRF_K
    method: str = "convex"
    alpha: float = 0.45
    second: float = 0.2

    def __post_init__(self) -> None:
        if self.method not in ("convex", "rrf"):
            raise ValueError(f"fusion method must be 'convex' or 'rrf', got {self.method!r}")


class QueryClassifier:
    """Infers a chunk-kind preference from the question (docs/design.md, "Contract" → Query classifier: "pdf",
    "page" → PDF chunks; "code", "snippet", "script" → code blocks; "table" → tables). Returns None when the
    question shows no preference. Preferences boost matching chunks; they never exclude others."""

    PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
        ("pdf", re.compile(r"\b(pdfs?|page \d+|on page|in the (paper|manual|pdf|document)|pages?)\b", re.I)),
        (
            "code",
            re.compile(
                r"\b(code|snippets?|scripts?|commands?|functions?|regex|syntax example|"
                r"python|javascript|js|css|bash|shell|sql|json|yaml|dataviewjs)\b",
                re.I,
            ),
        ),
        ("table", re.compile(r"\b(tables?|columns?|rows?)\b", re.I)),
    )
    #: Multiplier applied to the fused score of a chunk of the preferred kind.
    BOOST = 1.25

    def classify(self, question: str) -> str | None:
        for kind, pattern in self.PATTERNS:
            if pattern.search(question):
                return kind
        return None

    def boost(self, preference: str | None, chunk_kind: str) -> float:
        return self.BOOST if preference is not None and chunk_kind == preference else 1.0


def limit_per_group(items: Iterable[K], group_of: Mapping[K, str], per_group: int, limit: int) -> list[K]:
    """Keep items in order, at most ``per_group`` per group (note), at most ``limit`` overall."""
    counts: dict[str, int] = {}
    out: list[K] = []
    for item in items:
        g = group_of[item]
        if counts.get(g, 0) >= per_group:
            continue
        counts[g] = counts.get(g, 0) + 1
        out.append(item)
        if len(out) >= limit:
            break
    return out

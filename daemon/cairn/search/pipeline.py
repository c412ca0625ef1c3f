"""The values that pass between the steps of one ranking (:meth:`cairn.search.service.SearchService._rank`), and its
pure steps: candidates (:class:`Candidates`) → similarities (:class:`Similarities`) → fused (:class:`Fused`) →
ordered (:func:`order`) → hits (:func:`make_hit`). Each step reads the values before it and returns its own; none
writes into another's, so the order of the calls is the data flow and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from cairn.search.dense import DenseQuery
from cairn.search.hits import Hit, make_snippet
from cairn.search.lexical import TIERED_CLAUSES, Coverage, Plan
from cairn.search.literal import Literals, query_literals
from cairn.search.query import Query
from cairn.search.syntax import Phrase, Word
from cairn.search.vectors import VectorSnapshot
from cairn.store import ChunkKey, ChunkRow


@dataclass(frozen=True)
class Ranked:
    """What one ranking gives: ``hits`` best first, the query classifier's ``preference``, and ``withheld``: the
    paths of the withheld notes the request touched (its scope or operators matched them, or a candidate list held
    them above the floor) — for the audit log only, never shown to the caller."""

    hits: tuple[Hit, ...]
    preference: str | None = None
    withheld: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Terms:
    """A ranking's words: ``query`` as parsed; ``plan`` its search plan (None for an ask); ``keyword`` the terms of
    the keyword leg (with the plan's expansions); ``dense`` the text the dense leg embeds."""

    query: Query
    plan: Plan | None

    @property
    def keyword(self) -> tuple[str, ...]:
        return self.plan.keyword_terms if self.plan is not None else self.query.terms

    @property
    def dense(self) -> str:
        return self.plan.dense_text if self.plan is not None else self.query.text

    @property
    def question(self) -> bool:
        """A question in words (more than :data:`~cairn.search.lexical.TIERED_CLAUSES` words with terms), not the
        few words one types into a search box."""
        return sum(bool(self.query.terms_of(w)) for w, _ in self.literals) > TIERED_CLAUSES

    @property
    def literals(self) -> tuple[tuple[Word | Phrase, str], ...]:
        """The query's words and phrases as typed, with their literals (:func:`cairn.search.literal.query_literals`)."""
        return query_literals(self.query.parsed.root)


@dataclass(frozen=True)
class DenseContext:
    """The question's unit vector ``qvec`` (384,), the vector snapshot ``snap`` it is scored against and its scores
    there (``scores``)."""

    qvec: np.ndarray
    snap: VectorSnapshot
    scores: DenseQuery


@dataclass(frozen=True)
class Candidates:
    """The candidate chunks of both legs. ``keyword``: the BM25 top, then the chunks coverage adds, best first;
    ``dense``: the dense top (allowed redacted rows by their redacted vectors after it), then the chunks embedded
    since the snapshot; ``coverage``: the query's lexical evidence (search only); ``touched``: withheld chunks the
    legs' unfiltered tops held; ``redacted``: the (chunk, best sentence) cosines of redacted rows found so far."""

    keyword: list[int]
    dense: list[int]
    coverage: Coverage | None = None
    touched: frozenset[int] = frozenset()
    redacted: Mapping[int, tuple[float, float]] = field(default_factory=dict)
    #: the chunks holding the query's words as typed (tiered searches only)
    literal: Literals | None = None

    @property
    def ids(self) -> list[int]:
        return list(dict.fromkeys(self.keyword + self.dense))


@dataclass(frozen=True)
class Similarities:
    """Per candidate chunk: its chunk cosine, best sentence cosine (-1 without one), and the scores derived."""

    chunk: dict[int, float]
    sentence: dict[int, float]
    dense: dict[int, float]  # the dense ranking score: max(chunk, sentence weight × sentence)
    cosine: dict[int, float]  # the hit's cosine: that of its best vector
    floor: dict[int, float]  # what the floor is applied to: max(chunk, floor sentence weight × sentence)

    @classmethod
    def of(
        cls, chunk: dict[int, float], sentence: dict[int, float], weight: float, floor_weight: float
    ) -> Similarities:
        return cls(
            chunk=chunk,
            sentence=sentence,
            dense={c: max(cos, weight * sentence[c]) for c, cos in chunk.items()},
            cosine={c: max(cos, sentence[c]) for c, cos in chunk.items()},
            floor={c: max(cos, floor_weight * sentence[c]) for c, cos in chunk.items()},
        )


@dataclass(frozen=True)
class Fused:
    """The fused score of every candidate kept; ``below_floor``: those kept as lexical evidence only (below the
    cosine floor)."""

    scores: dict[int, float]
    below_floor: frozenset[int] = frozenset()


def order(
    fused: Fused,
    coverage: Coverage | None,
    sims: Similarities,
    keys: Mapping[int, ChunkKey],
    literal: Mapping[int, int] | None = None,
) -> list[int]:
    """The fused candidates best first: by fused score (then cosine, then chunk id); in search (``coverage`` set),
    by how many of the query's words as typed the chunk's note holds (``literal``: note id → that count) first,
    then the tier of the note (:meth:`Coverage.rank_key`), then the chunks that pass the floor before the others."""
    cos, scores = sims.cosine, fused.scores
    if coverage is None:
        return sorted(scores, key=lambda c: (-scores[c], -cos.get(c, 0.0), c))
    key, below, literal = coverage.rank_key, fused.below_floor, literal or {}
    by_note = {n: (-literal.get(n, 0), *(-x for x in key(n))) for n in {keys[c].note_id for c in scores}}
    tiers = {c: by_note[keys[c].note_id] for c in scores}
    return sorted(scores, key=lambda c: (tiers[c], c in below, -scores[c], -cos.get(c, 0.0), c))


def matched_shares(
    term_matches: Callable[[str], tuple[np.ndarray, np.ndarray]],
    terms: Sequence[str],
    chosen: list[int],
    coverage: Coverage | None,
    keys: Mapping[int, ChunkKey],
) -> dict[int, float]:
    """Per chosen chunk, the share (0..1) of the query's ``terms`` it holds as the caller's keyword index matches
    them, or 1 when its note holds every term (the search's coverage): what the hit's relevance label reads
    (:func:`cairn.relevance.relevance`)."""
    if not terms or not chosen:
        return dict.fromkeys(chosen, 0.0)
    ids = np.asarray(chosen, dtype=np.int64)
    held = np.zeros(len(ids))
    for t in terms:
        holding = term_matches(t)[0]  # ascending chunk ids (rowid order, in memory and in FTS5)
        if len(holding):
            at = np.minimum(np.searchsorted(holding, ids), len(holding) - 1)
            held += holding[at] == ids
    out = dict(zip(chosen, (held / len(terms)).tolist()))
    if coverage is None:
        return out
    return {c: 1.0 if coverage.tier_of(keys[c].note_id) == 2 else share for c, share in out.items()}


def make_hit(
    row: ChunkRow,
    score: float,
    cosine: float,
    tags: Sequence[str],
    terms: Sequence[str],
    matched: float,
    redact: Callable[[str], str] | None = None,
    mask_symbol: Callable[[str, str], str] | None = None,
) -> Hit:
    """The :class:`Hit` of one chosen chunk, its text and heading path as the caller is shown them."""
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
        lines=cast("tuple[int, int]", (row.line_start, row.line_end)) if row.line_start is not None else None,
        page=row.page,
        kind=row.kind,
        indexed_at=row.indexed_at,
        token_bound=row.token_count if text == row.text else 0,
        matched=matched,
    )

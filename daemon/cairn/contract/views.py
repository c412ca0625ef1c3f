"""The JSON views at the edge: search hits, numbered sources and answers as each edge sends them.

HTTP and the CLI's ``search --json`` get everything; MCP results and the CLI's ``ask --json`` get the same without
the ranking internals ``cosine`` and ``kind`` (:data:`INTERNAL_KEYS`). See :mod:`cairn.contract`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cairn.relevance import relevance


class HitView(Protocol):
    """What the views read of a search hit (:class:`cairn.search.hits.Hit`)."""

    @property
    def file_path(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def symbol(self) -> str: ...
    @property
    def score(self) -> float: ...
    @property
    def cosine(self) -> float: ...
    @property
    def snippet(self) -> str: ...
    @property
    def tags(self) -> tuple[str, ...]: ...
    @property
    def lines(self) -> tuple[int, int] | None: ...
    @property
    def page(self) -> int | None: ...
    @property
    def kind(self) -> str: ...
    @property
    def indexed_at(self) -> float: ...
    @property
    def matched(self) -> float: ...
    @property
    def exact(self) -> float: ...
    @property
    def first(self) -> bool: ...
    @property
    def modified_at(self) -> float: ...


def hit_relevance(hit: HitView) -> str:
    """The ``relevance`` label of a hit (:func:`cairn.relevance.relevance`), the same over HTTP, MCP and the CLI."""
    return relevance(hit.cosine, hit.matched, hit.exact, first=hit.first)


@dataclass(frozen=True)
class IndexCoverage:
    """How much of the index a result was drawn from, in notes the caller may see: ``notes`` indexed (their words
    are searchable), of which ``pending`` still have a passage without a vector (found by their words only, not yet
    by meaning) and ``refining`` have every passage's first vector (the whole passage) but not yet all its sentence
    vectors (found by meaning, ranked a little less finely). A caller's withheld notes are in no count, so the
    counts cannot reveal them."""

    notes: int
    pending: int
    refining: int = 0

    @property
    def embedded(self) -> int:
        """The notes every passage of which has its vector."""
        return self.notes - self.pending


def coverage_json(coverage: IndexCoverage) -> dict[str, int]:
    """``{notes, embedded, pending, refining}`` (counts of notes; :class:`IndexCoverage`): in every search and ask
    result."""
    return {
        "notes": coverage.notes,
        "embedded": coverage.embedded,
        "pending": coverage.pending,
        "refining": coverage.refining,
    }


def coverage_notice(coverage: IndexCoverage | None) -> str | None:
    """The sentence every edge shows beside results drawn from an index still being embedded, else None."""
    if coverage is None or not coverage.pending:
        return None
    verb = "is" if coverage.pending == 1 else "are"
    return (
        f"Still indexing: {coverage.pending} of {coverage.notes} notes {verb} not yet searchable by meaning "
        "(only by their words), so results may be incomplete."
    )


class SearchResultView(Protocol):
    @property
    def hits(self) -> Sequence[HitView]: ...
    @property
    def elapsed_ms(self) -> float: ...
    @property
    def coverage(self) -> IndexCoverage | None: ...
    @property
    def recent(self) -> bool: ...


class SourceView(Protocol):
    """A numbered source: ``n`` is the ``[n]`` of the answer."""

    @property
    def n(self) -> int: ...
    @property
    def hit(self) -> HitView: ...
    @property
    def cited(self) -> bool: ...


class AnswerView(Protocol):
    @property
    def text(self) -> str: ...
    @property
    def grounded(self) -> bool: ...
    @property
    def not_found(self) -> bool: ...
    @property
    def sources(self) -> Sequence[SourceView]: ...
    @property
    def elapsed_ms(self) -> float: ...
    @property
    def coverage(self) -> IndexCoverage | None: ...
    @property
    def fallback(self) -> str | None: ...
    @property
    def weak(self) -> bool: ...
    @property
    def unsupported(self) -> Sequence[Mapping[str, Any]]: ...


#: Ranking internals that MCP results and the CLI's ``ask --json`` leave out.
INTERNAL_KEYS = ("cosine", "kind")


def hit_symbol(hit: HitView) -> str:
    """The ``symbol`` a hit is shown with: its heading path (``A › B``, or ``page N`` for a PDF), else its note's
    title (a chunk above the first heading). Only the view falls back: the stored symbol stays ``""``, so the text
    indexed and embedded for the chunk (and its cached vectors) does not change."""
    return hit.symbol or hit.title


def _where(hit: HitView, out: dict[str, Any]) -> dict[str, Any]:
    if hit.page is not None:
        out["page"] = hit.page
    elif hit.lines is not None:
        out["lines"] = list(hit.lines)
    return out


def hit_json(hit: HitView) -> dict[str, Any]:
    """``{filePath, symbol, score, relevance, cosine, snippet, tags, kind, indexedAt, lines|page}`` (scores to 4
    places). ``score`` orders the hits (the fused ranking score); ``relevance`` says how good a hit is in words
    (:func:`hit_relevance`: ``strong``, ``good``, ``keyword``, ``similar``, ``weak``)."""
    return _where(
        hit,
        {
            "filePath": hit.file_path,
            "symbol": hit_symbol(hit),
            "score": round(hit.score, 4),
            "relevance": hit_relevance(hit),
            "cosine": round(hit.cosine, 4),
            "snippet": hit.snippet,
            "tags": list(hit.tags),
            "kind": hit.kind,
            "indexedAt": hit.indexed_at,
        },
    )


def agent_hit_json(hit: HitView) -> dict[str, Any]:
    """An MCP ``search_notes`` result: ``{filePath, symbol, score, relevance, snippet, tags, indexedAt, lines|page}``
    (``indexedAt``: unix seconds when the note was last indexed, as over HTTP)."""
    return _where(
        hit,
        {
            "filePath": hit.file_path,
            "symbol": hit_symbol(hit),
            "score": round(hit.score, 4),
            "relevance": hit_relevance(hit),
            "snippet": hit.snippet,
            "tags": list(hit.tags),
            "indexedAt": hit.indexed_at,
        },
    )


def recent_hit_json(hit: HitView) -> dict[str, Any]:
    """A note of the recent-notes listing (an empty query): ``{filePath, title, symbol, snippet, tags, kind,
    modifiedAt, indexedAt, lines|page}``, its first passage; ``modifiedAt``: unix seconds when its file was last
    modified. Nothing was ranked, so there is no ``score``, ``relevance`` or ``cosine``."""
    return _where(
        hit,
        {
            "filePath": hit.file_path,
            "title": hit.title,
            "symbol": hit_symbol(hit),
            "snippet": hit.snippet,
            "tags": list(hit.tags),
            "kind": hit.kind,
            "modifiedAt": round(hit.modified_at, 3),
            "indexedAt": hit.indexed_at,
        },
    )


def agent_recent_hit_json(hit: HitView) -> dict[str, Any]:
    """An MCP ``search_notes`` recent note: :func:`recent_hit_json` without ``kind``."""
    out = recent_hit_json(hit)
    del out["kind"]
    return out


def _with_coverage(out: dict[str, Any], coverage: IndexCoverage | None) -> dict[str, Any]:
    if coverage is not None:
        out["coverage"] = coverage_json(coverage)
    return out


def search_json(result: SearchResultView) -> dict[str, Any]:
    """``GET /search`` and ``cairn search --json``: ``{results: [hit_json...], elapsedMs, coverage}``; for an empty
    query ``{results: [recent_hit_json...], recent: true, elapsedMs, coverage}``."""
    if result.recent:
        out: dict[str, Any] = {"results": [recent_hit_json(h) for h in result.hits], "recent": True}
    else:
        out = {"results": [hit_json(h) for h in result.hits]}
    out["elapsedMs"] = round(result.elapsed_ms, 1)
    return _with_coverage(out, result.coverage)


def agent_search_json(result: SearchResultView) -> dict[str, Any]:
    """The MCP ``search_notes`` result's data: ``{results: [agent_hit_json...], coverage}``; for an empty query
    ``{results: [agent_recent_hit_json...], recent: true, coverage}``."""
    if result.recent:
        return _with_coverage(
            {"results": [agent_recent_hit_json(h) for h in result.hits], "recent": True}, result.coverage
        )
    return _with_coverage({"results": [agent_hit_json(h) for h in result.hits]}, result.coverage)


def source_json(source: SourceView) -> dict[str, Any]:
    """The ``sources`` event's items: ``{n, cited, filePath, symbol, score, relevance, cosine, snippet, kind,
    indexedAt, lines|page}``. ``cited``: the answer's text cites ``[n]``; the others were in the context (the
    prompt, or the passages an extractive answer chose from) but not cited: clients list them apart, under "Also
    retrieved"."""
    out = {"n": source.n, "cited": source.cited, **hit_json(source.hit)}
    out.pop("tags", None)
    return out


def answer_json(answer: AnswerView) -> dict[str, Any]:
    """``{answer, grounded, notFound, sources: [source_json...], elapsedMs, coverage, fallback, weak, unsupported}``
    (``grounded``: a model wrote it and every sentence stating something is supported by a passage it cites;
    ``fallback``: why the model's answer was replaced by the extractive one, only when it was; ``weak``: true only
    when the evidence was weak and the answer gives the closest passages; ``unsupported``: ``[{text, cites}]``, the
    model's sentences no passage they cite supports, in order, only when there are some)."""
    out: dict[str, Any] = {
        "answer": answer.text,
        "grounded": answer.grounded,
        "notFound": answer.not_found,
        "sources": [source_json(s) for s in answer.sources],
        "elapsedMs": round(answer.elapsed_ms, 1),
    }
    if answer.fallback is not None:
        out["fallback"] = answer.fallback
    if answer.weak:
        out["weak"] = True
    if answer.unsupported:
        out["unsupported"] = [{"text": u["text"], "cites": list(u["cites"])} for u in answer.unsupported]
    return _with_coverage(out, answer.coverage)


def agent_answer_json(answer: AnswerView) -> dict[str, Any]:
    """The MCP ``ask`` result and ``cairn ask --json``: :func:`answer_json` without ``elapsedMs`` and
    without the sources' :data:`INTERNAL_KEYS`."""
    out = answer_json(answer)
    del out["elapsedMs"]
    for source in out["sources"]:
        for key in INTERNAL_KEYS:
            source.pop(key, None)
    return out

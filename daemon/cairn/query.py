"""The one query service: search and answer, for the CLI, HTTP and (later) MCP.

Flow (DESIGN.md): classify → scope filter → FTS5 BM25 top-N and vector top-N →
fusion → cosine floor (0.35, every candidate) → per-note de-duplication → top_k.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved chunk. ``score`` is the fused ranking score (higher is better);
    ``cosine`` the cosine similarity of the chunk to the query (the floor is applied to it)."""

    chunk_id: int
    file_path: str
    title: str
    symbol: str
    score: float
    cosine: float
    snippet: str
    text: str
    tags: tuple[str, ...] = ()
    lines: tuple[int, int] | None = None
    page: int | None = None
    kind: str = "prose"
    indexed_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """camelCase JSON as in DESIGN.md (`search` results)."""
        out: dict[str, Any] = {
            "filePath": self.file_path,
            "symbol": self.symbol,
            "score": round(self.score, 4),
            "cosine": round(self.cosine, 4),
            "snippet": self.snippet,
            "tags": list(self.tags),
            "kind": self.kind,
            "indexedAt": self.indexed_at,
        }
        if self.page is not None:
            out["page"] = self.page
        elif self.lines is not None:
            out["lines"] = list(self.lines)
        return out


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Ranked hits (at most top_k) and the time taken in ms."""

    hits: list[Hit]
    elapsed_ms: float
    preference: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"results": [h.to_json() for h in self.hits], "elapsedMs": round(self.elapsed_ms, 1)}


@dataclass(frozen=True, slots=True)
class Source:
    """A numbered source: ``n`` is the citation number used as ``[n]`` in the answer."""

    n: int
    hit: Hit

    def to_json(self) -> dict[str, Any]:
        """``{n, filePath, symbol, score, lines|page, snippet}`` (DESIGN.md `sources` event)."""
        out = {"n": self.n, **self.hit.to_json()}
        out.pop("tags", None)
        return out


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer with its sources. ``grounded`` is true only when a model wrote it from the context;
    the extractive answer (no model) is ``grounded: false``. ``not_found`` → the fixed not-found text."""

    text: str
    grounded: bool
    not_found: bool
    sources: list[Source] = field(default_factory=list)
    elapsed_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "answer": self.text,
            "grounded": self.grounded,
            "notFound": self.not_found,
            "sources": [s.to_json() for s in self.sources],
            "elapsedMs": round(self.elapsed_ms, 1),
        }

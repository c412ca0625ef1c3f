"""The search side's share of the daemon's memory (:func:`cairn.memory.daemon_memory`): the vectors in force, their
int8 copies, the in-memory BM25 postings and the query side's caches, in bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cairn.search.service import SearchService


def search_parts(query: SearchService) -> dict[str, int]:
    """``{vectors, int8, bm25, caches}`` bytes held by ``query`` (approximate: :mod:`cairn.memory`). Caches: ranked
    results, dense scores per question, FTS5 values per term, text vectors, the withheld views and their redacted
    rows' vectors."""
    dense = query.vectors.memory()
    keyword = query.keyword.memory()
    caches = (
        dense["caches"]
        + keyword["caches"]
        + query.results.nbytes()
        + query.vector_cache.nbytes()
        + query.visible.nbytes()
    )
    return {"vectors": dense["vectors"], "int8": dense["int8"], "bm25": keyword["bm25"], "caches": caches}


def search_caches(query: SearchService) -> dict[str, dict[str, int | None]]:
    """Each cache of ``query`` against its bounds: ``{name: {entries, maxEntries, bytes, maxBytes}}`` (bytes as
    accounted when each entry was put; :meth:`cairn.search.cache.EpochLRU.usage`). Names: ``results`` (ranked
    results), ``denseScores`` (per question), ``termValues`` and ``phraseValues`` (FTS5's), ``textVectors``,
    ``withheldViews`` and ``withheldVectors`` (their redacted rows')."""
    return {
        "results": query.results.usage(),
        "denseScores": query.vectors.scores.usage(),
        **query.keyword.cache_usage(),
        "textVectors": query.vector_cache.usage(),
        **query.visible.cache_usage(),
    }

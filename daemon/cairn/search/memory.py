"""The search side's share of the daemon's memory (:mod:`cairn.memory`): the vectors in force, their int8 copies,
the in-memory BM25 postings and the query side's caches, in bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cairn.memory import breakdown, process_memory

if TYPE_CHECKING:
    from cairn.embedder import Embedder
    from cairn.index import PdfIndexer
    from cairn.search.service import SearchService


def daemon_memory(query: SearchService, embedder: Embedder, pdfs: PdfIndexer, mcp_http_bytes: int) -> dict[str, Any]:
    """The daemon's memory breakdown (:func:`cairn.memory.breakdown`): the search side's parts, the embedding
    model's session, the MCP HTTP server's share (``mcp_http_bytes``, measured when it started), and the PDF
    reader's worker process beside it."""
    parts = search_parts(query)
    parts.update(onnx=embedder.session_bytes, mcpHttp=mcp_http_bytes)
    pid = pdfs.worker_pid
    return breakdown(parts, {"pdfWorker": process_memory(pid)["rss"] if pid is not None else None})


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

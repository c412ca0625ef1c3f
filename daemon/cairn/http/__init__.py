"""The localhost HTTP API the Obsidian plugin calls (aiohttp; JSON in camelCase; layer 3 adapter).

Routes (docs/design.md, "Interfaces" → HTTP; ``openapi.json`` documents each):

=====================  ==========================================================
``POST /ask``          body ``{question, topK?, tags?, folders?}`` →
                       ``text/event-stream``: ``token`` ``{text}`` …, then one
                       ``sources`` ``[{n, filePath, symbol, score, ...}]``, then
                       ``done`` ``{grounded, notFound, elapsedMs}``. A failure after
                       the stream started: ``error`` ``{code, message}``, ``sources``
                       (``[]``), ``done``.
``GET /search``        ``q``, ``topK``, ``tag`` (repeatable), ``folder`` (repeatable)
                       → ``{results: [...], elapsedMs}``
``GET /health``        no token → ``{status, version, vaultId, store, embedder,
                       llm: {configured, reachable}}`` (``vaultId``: whose daemon)
``GET /index/stats``   → ``{notes, chunks, vectors, pending, lastIngestedAt, ...}``
=====================  ==========================================================

Modules: :mod:`~cairn.http.app` (``make_app(services)``, ``serve``), :mod:`~cairn.http.security`
(Host/Origin allowlists, bearer token, bad-token throttle), :mod:`~cairn.http.errors` (the one JSON
error shape), :mod:`~cairn.http.sse` (frames and the stream pump), :mod:`~cairn.http.routes` (handlers).
"""

from cairn.http.app import HEARTBEAT_S, RunningServer, default_workers, make_app, serve
from cairn.http.errors import MAX_BODY_BYTES
from cairn.http.security import BadTokenThrottle
from cairn.http.sse import PUMP_BACKLOG, split_pieces, sse_event
from cairn.http.state import TokenSource

__all__ = [
    "HEARTBEAT_S",
    "MAX_BODY_BYTES",
    "PUMP_BACKLOG",
    "BadTokenThrottle",
    "RunningServer",
    "TokenSource",
    "default_workers",
    "make_app",
    "serve",
    "split_pieces",
    "sse_event",
]

"""Composition root (layer 4): builds one vault's services (:class:`Cairn`) and runs them: ``cairn serve``
(:func:`serve`, :func:`run_daemon`), ``cairn mcp`` over stdio or HTTP (:func:`run_mcp_stdio`,
:func:`run_mcp_http`). The work itself lives in the services; here are their threads and start/stop order.

Start order for ``cairn serve``: open the store and the model, start the HTTP API on
127.0.0.1 (``/health`` answers while indexing), write ``service.json`` (URL, pid — never
the token), then index the vault in a worker thread (keyword-ready first, vectors after).
Stop order: HTTP server closed (open streams cut), indexing asked to stop between batches,
store closed, ``service.json`` removed.
"""

from __future__ import annotations

from cairn.app.core import Cairn, MeasuredBytes, build_services, remote_model_withhold, setup_logging
from cairn.app.daemon import run_daemon, serve
from cairn.app.mcp import mcp_service, run_mcp_http, run_mcp_stdio, start_mcp_http

__all__ = [
    "Cairn",
    "MeasuredBytes",
    "build_services",
    "mcp_service",
    "remote_model_withhold",
    "run_daemon",
    "run_mcp_http",
    "run_mcp_stdio",
    "serve",
    "setup_logging",
    "start_mcp_http",
]

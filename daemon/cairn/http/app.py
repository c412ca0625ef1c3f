"""The aiohttp application of the HTTP API, and the loopback server that runs it."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from cairn.connections import (
    ACCEPT_BACKLOG,
    ConnectionGuard,
    ListenerLimits,
    quiet_accept_errors,
    raise_descriptor_limit,
)
from cairn.contract import LIMITS
from cairn.errors import ConfigError
from cairn.http import routes
from cairn.http.errors import MAX_BODY_BYTES, JsonErrorHandler, errors_middleware
from cairn.http.security import (
    CONNECTIONS,
    BadTokenThrottle,
    add_common_headers,
    auth_middleware,
    body_deadline_middleware,
    connection_middleware,
    host_middleware,
    origin_middleware,
)
from cairn.http.state import HEARTBEAT, SERVICES, STATE, TOKEN, State, StaticToken, TokenSource
from cairn.logsafe import printable
from cairn.loopback import require_loopback_host
from cairn.services import Services

log = logging.getLogger("cairn.http")
access_log = logging.getLogger("cairn.http.access")

#: Seconds between SSE comment heartbeats (``: ping``) on an open stream.
HEARTBEAT_S = 15.0


def make_app(
    services: Services,
    *,
    token: str | TokenSource,
    heartbeat_s: float = HEARTBEAT_S,
    throttle: BadTokenThrottle | None = None,
) -> web.Application:
    """The aiohttp application serving ``services``.

    ``token`` is the API token clients must send as ``Authorization: Bearer <token>``, or a
    :class:`~cairn.http.state.TokenSource` asked on every request (so a rotation takes effect at once).
    Raises :class:`ConfigError` for an empty or short token (an empty token would let an empty ``Bearer``
    header through).
    """
    source: TokenSource = StaticToken(token) if isinstance(token, str) else token
    current = source.current()
    if not isinstance(current, str) or len(current) < 16:
        raise ConfigError(
            "The API token is missing or shorter than 16 characters; run `cairn token --vault PATH --rotate`."
        )
    app = web.Application(
        middlewares=[
            errors_middleware,
            connection_middleware,
            host_middleware,
            origin_middleware,
            auth_middleware,
            body_deadline_middleware,
        ],
        client_max_size=MAX_BODY_BYTES,
    )
    app[SERVICES] = services
    app[TOKEN] = source
    app[STATE] = State(throttle or BadTokenThrottle())
    app[HEARTBEAT] = float(heartbeat_s)
    app.router.add_post("/ask", routes.ask)
    app.router.add_get("/search", routes.search)
    app.router.add_get("/health", routes.health)
    app.router.add_get("/index/stats", routes.index_stats)
    app.router.add_post("/index/reindex", routes.index_reindex)
    app.router.add_post("/index/pause", routes.index_pause)
    app.router.add_post("/index/resume", routes.index_resume)
    app.router.add_get("/notes/{path:.+}", routes.note)
    app.router.add_get("/related", routes.related)
    app.router.add_get("/tags", routes.tags)
    app.router.add_get("/events", routes.events)
    app.router.add_get("/openapi.json", routes.openapi)
    app.on_response_prepare.append(add_common_headers)
    app.on_shutdown.append(_on_shutdown)
    return app


async def _on_shutdown(app: web.Application) -> None:
    """Ask every open SSE stream to finish now (they end with a last event, then EOF)."""
    app[STATE].closing.set()


#: Longest request line (bytes): a query or question of ``LIMITS.text_chars`` characters percent-encoded (up to
#: 12 bytes each: 4 UTF-8 bytes as ``%XX``) plus the path and other parameters fits; aiohttp's default (8190) cut
#: non-ASCII queries far below the limit.
MAX_REQUEST_LINE = 12 * LIMITS.text_chars + 8192


@dataclass
class RunningServer:
    """A started server: ``url`` is ``http://127.0.0.1:<port>`` (``port`` is the bound port,
    useful when started with port 0). ``await close()`` stops it (open streams are cut)."""

    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        await self.runner.cleanup()


#: Loops whose default executor :func:`serve` has already bounded (once per loop).
_BOUNDED_LOOPS: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def default_workers() -> int:
    """Worker threads for blocking work: the number of cores, at least 2 (so one held call never stalls the rest)."""
    return max(2, os.cpu_count() or 1)


def _bound_default_executor(workers: int) -> None:
    """Make the running loop's default executor (``asyncio.to_thread``: the query service, the answer
    service, the library, stats, health) a pool of ``workers`` threads, once per loop.

    Why: every search embeds the query (ONNX, already on every core) and scores all vectors (BLAS); more
    threads than cores make each request cost more CPU, so everyone waits longer. Requests beyond
    ``workers`` queue in arrival order instead."""
    loop = asyncio.get_running_loop()
    if loop in _BOUNDED_LOOPS:
        return
    loop.set_default_executor(ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cairn-worker"))
    _BOUNDED_LOOPS.add(loop)


async def serve(
    app: web.Application,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    workers: int | None = None,
    move_if_taken: Callable[[int], bool] | None = None,
) -> RunningServer:
    """Start ``app`` on ``host:port`` (loopback only; port 0 picks a free port). When ``port`` is in use and
    ``move_if_taken(port)`` (blocking, run on a worker thread; it logs why) says so, a free port is taken instead.

    Blocking work then runs on at most ``workers`` threads (default :func:`default_workers`): the
    running loop's default executor is replaced by a pool of that size the first time a server starts
    on it; ``asyncio.run`` shuts it down with the loop. The soft open-file limit is raised where allowed,
    connections are held to a :class:`~cairn.connections.ConnectionGuard` (cap, header deadline: the app's
    ``config`` limits), and a failing ``accept()`` is one rate-limited log line.

    Raises :class:`ConfigError` for a non-loopback host (the API is local-only by design)
    and for a port that cannot be bound.
    """
    require_loopback_host(host, "the HTTP API")
    _bound_default_executor(workers or default_workers())
    quiet_accept_errors(asyncio.get_running_loop())
    raise_descriptor_limit()
    guard = app[CONNECTIONS] = ConnectionGuard("HTTP API", ListenerLimits.of(app[SERVICES].config))
    handler_args: dict[str, Any] = {
        "access_log_class": _AccessLogger,
        "access_log": access_log,
        "max_line_size": MAX_REQUEST_LINE,
        # an idle connection (no complete request yet, or between two) is closed after this; the guard does
        # the same for the connections it holds, this is aiohttp's own copy of the rule
        "keepalive_timeout": guard.limits.header_timeout_s,
    }
    runner = web.AppRunner(
        app,
        handle_signals=False,
        shutdown_timeout=2.0,
        handler_cancellation=True,  # a client that leaves cancels its handler, and so its LLM request
        **handler_args,
    )
    await runner.setup()
    site = _GuardedSite(runner, host, port, guard, handler_args)
    try:
        try:
            await site.start()
        except OSError as exc:
            if not (port and exc.errno == errno.EADDRINUSE and move_if_taken):
                raise
            if not await asyncio.to_thread(move_if_taken, port):
                raise
            await site.stop()
            site = _GuardedSite(runner, host, 0, guard, handler_args)
            await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(
            f"Cannot listen on {host}:{port}: {exc.strerror}; pick another port with --port or CAIRN_PORT "
            "(0 picks a free one)."
        ) from None
    log.info("HTTP API listening on %s:%s (at most %d connections)", host, site.port, guard.cap)
    return RunningServer(runner=runner, host=host, port=site.port)


class _GuardedSite(web.TCPSite):
    """A TCP site whose connections are :class:`JsonErrorHandler`s wrapped by ``guard``."""

    def __init__(
        self, runner: web.AppRunner, host: str, port: int, guard: ConnectionGuard, handler_args: dict[str, Any]
    ) -> None:
        super().__init__(runner, host, port, backlog=ACCEPT_BACKLOG)
        self.guard = guard
        self.handler_args = handler_args

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None

        def factory() -> asyncio.Protocol:
            return self.guard.protocol(JsonErrorHandler(server, loop=loop, **self.handler_args))

        self._server = await loop.create_server(factory, self._host, self._port, backlog=self._backlog)
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


class _AccessLogger(AbstractAccessLogger):
    """Method, path without query string, status, bytes, milliseconds. No headers, no query (which may
    hold search text), so never the token. Method and path are client text: control characters escaped."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info(
            "%s %s %s %s %.1fms",
            printable(request.method, 20),
            printable(request.path, 300),
            response.status,
            response.body_length,
            time * 1000,
        )

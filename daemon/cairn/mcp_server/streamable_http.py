"""MCP over streamable HTTP on a second loopback port (the SDK's ASGI transport under uvicorn, at ``/mcp``).

The daemon's API is aiohttp, which cannot host ASGI apps without a hand-written bridge for streaming
bodies, SSE and disconnects, so MCP gets its own port (``mcp_port``, default the API port + 1; 0 picks a
free one; advertised as ``mcpUrl`` in ``service.json``). The SDK's transport security is on (Host and
Origin allowlists: this loopback host and port only) and every request must carry
``Authorization: Bearer <client token>`` (compared with :func:`hmac.compare_digest`; missing or unknown →
401). Extra tools are asked for in the URL the owner writes into the agent's config, the analogue of
``--tool``: ``/mcp?tool=search_notes&tool=ask``.

Sessions are bounded per client (:class:`SessionLimits`): a client at its cap (default 16) gets a new session
by closing its own least recently used one, and when all sessions together reach ``total`` the client holding
the most (a client not declared local first) gives one up — so one token holder opening sessions in a loop
never locks another client out, and the owner's local clients never lose a session to a non-local one.
A session without a request for ``idle_s`` is closed. Connections are held to a
:class:`~cairn.connections.ConnectionGuard` (cap, header deadline) like the plugin API's, each request body
to one deadline, and a client not declared local to a quarter of the connection cap in requests at once
(:class:`_ClientShare`): requests in progress are never closed for room, so without that one token holder's
slow bodies could take every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import socket
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qs

import anyio
import h11
import uvicorn
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from cairn.connections import (
    ACCEPT_BACKLOG,
    ConnectionGuard,
    ListenerLimits,
    quiet_accept_errors,
    quiet_repeated_records,
    raise_descriptor_limit,
)
from cairn.errors import CairnError, status_code
from cairn.mcp_server.listener import listen
from cairn.mcp_server.sessions import FairSessionManager, SessionLimits
from cairn.mcp_server.tools import MAX_MESSAGE_BYTES, McpService, build_server
from cairn.policy import ALL_TOOLS

log = logging.getLogger("cairn.mcp_server")

_SCOPE_KEY = "cairn.mcp.identity"
#: uvicorn's per-request log records that any peer can trigger: one line a minute each.
_UVICORN_REPEATED = ("Invalid HTTP request received.", "Exception in ASGI application\n")


async def _json_error(
    scope: dict, receive: Any, send: Any, status: int, code: str, message: str, headers: dict | None = None
) -> None:
    """Answer with the API's error shape, ``{"error": {"code", "message"}}`` (application/json)."""
    response = JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)
    await response(scope, receive, send)


class _ClientShare:
    """Requests in progress per MCP client (each holds one connection): at most ``limit`` for a client not
    declared local (``is_local(client)``, read per request; an error counts as not local). Local clients are
    never refused, so one token holder's slow requests cannot take every connection of the cap from them."""

    def __init__(self, limit: int, is_local: Callable[[str], bool]) -> None:
        self.limit = max(1, limit)
        self.is_local = is_local
        self._held: dict[str, int] = {}

    def _local(self, client: str) -> bool:
        try:
            return bool(self.is_local(client))
        except Exception:  # a broken policy: not local (fail closed)
            return False

    @contextlib.contextmanager
    def hold(self, client: str) -> Iterator[bool]:
        """Count one request of ``client`` for the block; yields False (nothing counted) when it is at its limit."""
        held = self._held.get(client, 0)
        if held >= self.limit and not self._local(client):
            yield False
            return
        self._held[client] = held + 1
        try:
            yield True
        finally:
            self._held[client] -= 1
            if not self._held[client]:
                del self._held[client]


class _BearerGate:
    """ASGI middleware in front of the SDK transport: ``Authorization: Bearer <token>`` must be one of the
    per-client MCP tokens (→ the client's name); ``?tool=NAME`` (repeatable, or comma-separated) asks for
    extra tools. Missing/unknown token → 401; unknown tool name → 400; a client not declared local with
    ``share.limit`` requests in progress → 503 (connection closed). Tokens are never logged."""

    def __init__(self, app: Any, tokens: Callable[[], Mapping[str, str]], share: _ClientShare | None = None) -> None:
        self.app = app
        self.tokens = tokens
        self.share = share

    def _client(self, header: str | None) -> str | None:
        if not header or not header[:7].lower() == "bearer ":
            return None
        given = header[7:].strip().encode("utf-8", "replace")
        found = None
        for name, token in self.tokens().items():
            if token and hmac.compare_digest(given, token.encode("utf-8")):
                found = name
        return found

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            client = await asyncio.to_thread(self._client, headers.get("authorization"))
        except CairnError as exc:
            log.warning("MCP HTTP: cannot read the client tokens: %s", exc.message)
            client = None
        if client is None:
            message = (
                "Missing or unknown bearer token. Send 'Authorization: Bearer <token>' with the token "
                "printed by `cairn mcp token NAME` for this client."
            )
            auth = {"WWW-Authenticate": 'Bearer realm="cairn-mcp"'}
            await _json_error(scope, receive, send, 401, "unauthorized", message, auth)
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        requested = tuple(dict.fromkeys(t.strip() for v in query.get("tool", []) for t in v.split(",") if t.strip()))
        unknown = [t for t in requested if t not in ALL_TOOLS]
        if unknown:
            message = f"Unknown tool {unknown[0][:100]!r} in ?tool=; the tools are {', '.join(ALL_TOOLS)}."
            await _json_error(scope, receive, send, 400, "bad_request", message)
            return
        access = AccessToken(token="-", client_id=client, scopes=[])  # never the token itself
        scope = {
            **scope,
            "user": AuthenticatedUser(access),
            "auth": AuthCredentials([]),
            _SCOPE_KEY: (client, requested),
        }
        share = self.share.hold(client) if self.share is not None else contextlib.nullcontext(True)
        with share as admitted:
            if admitted:
                await self.app(scope, receive, send)
                return
        message = "This client has too many requests in progress; finish or close some, then retry."
        busy = {"Retry-After": "1", "Connection": "close"}
        await _json_error(scope, receive, send, 503, "too_many_requests", message, busy)


def _http_identity(ctx: Any) -> tuple[str | None, tuple[str, ...]]:
    request = getattr(ctx, "request", None)
    scope = getattr(request, "scope", None) or {}
    ident = scope.get(_SCOPE_KEY)
    if ident is None:  # cannot happen behind the gate; fail closed
        return None, ()
    return ident


def build_http_app(
    service: McpService,
    tokens: Callable[[], Mapping[str, str]],
    *,
    host: str,
    port: int,
    sessions: SessionLimits | None = None,
    guard: ConnectionGuard | None = None,
) -> Starlette:
    """The ASGI app serving ``/mcp`` (streamable HTTP) for ``host:port``: connection marks for ``guard``, the
    bearer gate, then the session manager (:class:`~cairn.mcp_server.sessions.FairSessionManager` with
    ``sessions``) with DNS-rebinding protection (Host must be this loopback host:port; an Origin, when sent,
    must be this same origin) and a :data:`MAX_MESSAGE_BYTES` body limit; every non-2xx answer is JSON."""
    names = {host, "127.0.0.1", "localhost"} if host in ("127.0.0.1", "localhost") else {host}
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{h}:{port}" for h in sorted(names)],
        allowed_origins=[f"http://{h}:{port}" for h in sorted(names)],
    )
    manager = FairSessionManager(
        app=build_server(service, _http_identity),
        security_settings=security,
        max_request_body_size=MAX_MESSAGE_BYTES,
        limits=sessions or SessionLimits(),
        is_local=lambda client: service.policy().is_local(client),
    )
    share = None
    if guard is not None:  # a quarter of the connection cap per client not declared local
        share = _ClientShare(guard.cap // 4, lambda client: service.policy().is_local(client))
    endpoint: Any = _BearerGate(StreamableHTTPASGIApp(manager), tokens, share)
    if guard is not None:
        endpoint = _ConnectionMarks(endpoint, guard)
    app = Starlette(
        routes=[Route("/mcp", endpoint=endpoint)],
        middleware=[Middleware(_JsonErrors)],
        exception_handlers={Exception: _internal_error},
        lifespan=lambda app: manager.run(),
    )
    app.state.sessions = manager
    return app


#: The message of a non-2xx answer that came without a JSON body; its ``code`` is the API's
#: (:func:`cairn.errors.status_code`).
_STATUS_MESSAGES = {
    400: "Malformed request.",
    401: "Missing or unknown bearer token.",
    403: "This origin may not use the MCP endpoint.",
    404: "Not found; the MCP endpoint is /mcp.",
    405: "Method not allowed on this path.",
    413: "Request body too large.",
    421: "Wrong Host header; use the host and port the daemon advertises.",
    500: "Internal error; see the daemon's log.",
}


def _error_body(status: int) -> dict[str, dict[str, str]]:
    """``{"error": {"code", "message"}}`` of a non-2xx answer with HTTP ``status`` that came without a body."""
    message = _STATUS_MESSAGES.get(status, f"HTTP {status}.")
    return {"error": {"code": status_code(status), "message": message}}


class _JsonErrors:
    """ASGI middleware: a non-2xx answer whose body is not JSON (Starlette's plain 404/405, the SDK's Host,
    Origin, Content-Type and body-size refusals) is replaced by the API's error shape,
    ``{"error": {"code", "message"}}``; the SDK's JSON-RPC errors and every 2xx pass through unchanged."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replacing: dict | None = None

        async def checked_send(message: dict) -> None:
            nonlocal replacing
            if message["type"] == "http.response.start":
                status = int(message["status"])
                types = [v for k, v in message.get("headers", []) if k.lower() == b"content-type"]
                if status >= 400 and not any(t.startswith(b"application/json") for t in types):
                    replacing = message
                    return
            elif replacing is not None and message["type"] == "http.response.body":
                if not message.get("more_body", False):
                    await self._replace(replacing, send)
                return
            await send(message)

        await self.app(scope, receive, checked_send)

    @staticmethod
    async def _replace(start: dict, send: Any) -> None:
        status = int(start["status"])
        body = json.dumps(_error_body(status)).encode()
        keep = [(k, v) for k, v in start.get("headers", []) if k.lower() not in (b"content-type", b"content-length")]
        headers = [*keep, (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _internal_error(request: Any, exc: Exception) -> JSONResponse:
    return JSONResponse(_error_body(500), status_code=500)


class _ConnectionMarks:
    """ASGI middleware: the request's connection is busy for ``guard`` while it is handled, and its whole body
    must arrive within ``guard.limits.body_timeout_s`` of the app's first ``receive()`` (one deadline, so a body
    sent a byte at a time cannot hold the connection; else the connection is closed and the app sees a
    disconnect)."""

    def __init__(self, app: Any, guard: ConnectionGuard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        peer = scope.get("client")
        body_done = False
        deadline: float | None = None

        async def timed_receive() -> dict:
            nonlocal body_done, deadline
            if body_done:
                return await receive()
            now = anyio.current_time()
            if deadline is None:  # one deadline for the whole body, not one per chunk
                deadline = now + self.guard.limits.body_timeout_s
            with anyio.move_on_after(max(0.0, deadline - now)) as waited:
                message = await receive()
            if waited.cancelled_caught:
                log.info("MCP HTTP: a request body did not arrive within %g s", self.guard.limits.body_timeout_s)
                self.guard.close(peer)
                body_done = True
                return {"type": "http.disconnect"}
            if message.get("type") != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        with self.guard.busy(peer):
            await self.app(scope, timed_receive, send)


class _JsonErrorsH11(H11Protocol):
    """uvicorn's h11 protocol answering a request h11 refuses (malformed, a header block over the size limit,
    a bad chunk in a body) with the JSON error shape the bearer gate uses, instead of a ``text/plain`` line.

    When the refusal comes after the headers (a bad body), the app already handles the request: its cycle is
    marked disconnected first, so its own answer is dropped instead of failing in h11 (which logged a
    traceback per request: a log amplifier for anyone who can connect)."""

    def send_400_response(self, msg: str) -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
            if cycle.response_started:  # too late for a 400: just close
                self.transport.close()
                return
        body = json.dumps(
            {
                "error": {
                    "code": "bad_request",
                    "message": "Malformed HTTP request; send a well-formed HTTP/1.1 request.",
                }
            }
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        for event in (h11.Response(status_code=400, headers=headers), h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()


class _GuardedH11:
    """uvicorn's ``http`` protocol factory: its h11 protocol for each connection, wrapped by ``guard``."""

    def __init__(self, guard: ConnectionGuard) -> None:
        self.guard = guard

    def __call__(self, **kwargs: Any) -> asyncio.Protocol:
        return self.guard.protocol(_JsonErrorsH11(**kwargs))


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: the daemon's loop owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class McpHttpServer:
    """The streamable-HTTP MCP endpoint on a loopback port. ``await start()`` binds (port 0 picks a free one)
    and returns once serving; ``url`` is ``http://HOST:PORT/mcp``; ``await close()`` stops it (open streams
    get up to 3 s). ``listener`` bounds its connections, ``sessions`` its MCP sessions (defaults when not
    given); ``guard`` and ``manager`` (the session manager) exist once started."""

    def __init__(
        self,
        service: McpService,
        tokens: Callable[[], Mapping[str, str]],
        host: str,
        port: int,
        *,
        listener: ListenerLimits | None = None,
        sessions: SessionLimits | None = None,
    ) -> None:
        self.service = service
        self.tokens = tokens
        self.host = host
        self.requested_port = port
        self.port = port
        self.listener = listener or ListenerLimits()
        self.sessions = sessions or SessionLimits()
        self.guard: ConnectionGuard | None = None
        self.manager: FairSessionManager | None = None
        self._server: _Uvicorn | None = None
        self._task: asyncio.Task | None = None

    @classmethod
    def for_config(cls, service: McpService, tokens: Callable[[], Mapping[str, str]], config: Any) -> McpHttpServer:
        """The server on ``config.host``:``config.mcp_http_port`` with the connection and session limits of
        ``config`` (a :class:`~cairn.config.Config`)."""
        return cls(
            service,
            tokens,
            config.host,
            config.mcp_http_port,
            listener=ListenerLimits.of(config),
            sessions=SessionLimits.of(config),
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/mcp"

    async def start(self, timeout_s: float = 15.0, sock: socket.socket | None = None) -> McpHttpServer:
        """Serve on ``sock`` (a listening socket bound by :func:`listen`, on this server's host) or on a socket
        bound here. Raises CairnError when the port cannot be bound or the server does not start."""
        if sock is None:
            sock = listen(self.host, self.requested_port)
        self.port = sock.getsockname()[1]
        quiet_accept_errors(asyncio.get_running_loop())
        quiet_repeated_records(logging.getLogger("uvicorn.error"), _UVICORN_REPEATED)
        raise_descriptor_limit()
        self.guard = ConnectionGuard("MCP HTTP", self.listener)
        app = build_http_app(
            self.service, self.tokens, host=self.host, port=self.port, sessions=self.sessions, guard=self.guard
        )
        self.manager = app.state.sessions
        config = uvicorn.Config(
            app,
            http=_GuardedH11(self.guard),  # type: ignore[arg-type]  # a protocol factory, as uvicorn calls it
            ws="none",
            backlog=ACCEPT_BACKLOG,
            log_config=None,
            access_log=False,
            lifespan="on",
            server_header=False,
            timeout_graceful_shutdown=3,
            h11_max_incomplete_event_size=64 * 1024,
        )
        self._server = _Uvicorn(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="cairn-mcp-http")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self._server.started:  # uvicorn offers no start event
            if self._task.done() or loop.time() > deadline:
                await self.close()
                raise CairnError(f"The MCP HTTP server on {self.host}:{self.port} did not start; see the log.")
            await asyncio.sleep(0.02)
        log.info("MCP (streamable HTTP) at %s (at most %d connections)", self.url, self.guard.cap)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._task, timeout=10)
        self._server = self._task = None

"""The localhost HTTP API the Obsidian plugin calls (aiohttp; JSON in camelCase).

Routes (DESIGN.md, HTTP):

=====================  ==========================================================
``POST /ask``          body ``{question, topK?, tags?, folders?}`` →
                       ``text/event-stream``: ``token`` ``{text}`` …, then one
                       ``sources`` ``[{n, filePath, symbol, score, ...}]``, then
                       ``done`` ``{grounded, notFound, elapsedMs}``. A failure after
                       the stream started: ``error`` ``{code, message}``, ``sources``
                       (``[]``), ``done``.
``GET /search``        ``q``, ``topK``, ``tag`` (repeatable), ``folder`` (repeatable)
                       → ``{results: [...], elapsedMs}``
``GET /health``        no token → ``{status, store, embedder, llm: {configured, reachable}}``
``GET /index/stats``   → ``{notes, chunks, vectors, pending, lastIngestedAt, ...}``
=====================  ==========================================================

Security, on every route, in this order (one middleware each):

1. **Host allowlist** — ``127.0.0.1``, ``localhost`` or ``[::1]``, optionally with the
   port the server listens on; anything else is 403 (DNS-rebinding defence).
2. **Origin allowlist** — a request carrying ``Origin`` not in ``config.cors_origins``
   (default ``app://obsidian.md`` only) is 403. CORS preflights (``OPTIONS`` with
   ``Origin`` and ``Access-Control-Request-Method``) are answered for allowed origins
   only; ``Access-Control-Allow-Origin`` echoes the origin, never ``*``.
3. **Bearer token** — ``Authorization: Bearer <token>`` on every route except
   ``GET /health``, compared with :func:`hmac.compare_digest`. A token in the URL
   query is never accepted (a request carrying one is 401).

Every failure has one JSON shape, ``{"error": {"code", "message"}}``, with the HTTP
status: 400 ``bad_request``, 401 ``unauthorized``, 403 ``forbidden``, 404
``not_found``, 405 ``method_not_allowed``, 413 ``payload_too_large``,
:class:`~cairn.errors.CairnError` subclasses with their own ``code``/``http_status``,
and anything unexpected as 500 ``internal`` with a generic message (the traceback
goes to the log only).

The access log records method, path (without the query string, which may hold
search text), status, size and time — never headers, so never the token.

Blocking work (the query service: SQLite + ONNX; ``stats()``; ``health()``) runs in
worker threads via :func:`asyncio.to_thread`, never on the event loop.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from cairn.config import Config
from cairn.errors import BadRequest, CairnError, ConfigError, Forbidden, Unauthorized

if TYPE_CHECKING:  # result types only; the query service itself is injected
    from cairn.query import Answer, SearchResult

log = logging.getLogger(__name__)
access_log = logging.getLogger(__name__ + ".access")

#: Largest accepted request body (bytes); bigger → 413.
MAX_BODY_BYTES = 64 * 1024
#: Longest accepted question / search query (characters).
MAX_QUESTION_CHARS = 2000
#: Accepted ``topK`` range (inclusive).
TOP_K_MIN, TOP_K_MAX = 1, 50
#: Most tags / folders accepted in one request, and the longest one (characters).
MAX_SCOPE_ITEMS, MAX_SCOPE_CHARS = 64, 512
#: Query parameters that look like a credential: refused, a token must never be in a URL.
_TOKEN_QUERY_PARAMS = frozenset({"token", "access_token", "accesstoken", "api_key", "apikey", "bearer", "auth"})
#: Host names accepted in the Host header (DNS-rebinding defence).
_ALLOWED_HOSTNAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
_HOST_RE = re.compile(r"^(?P<name>\[[0-9a-fA-F:.]+\]|[^:\[\]]+)(?::(?P<port>[0-9]{1,5}))?$")
#: Routes open without a token: (method, path).
_OPEN_ROUTES = frozenset({("GET", "/health"), ("HEAD", "/health")})
_SEARCH_PARAMS = ("q", "topK", "tag", "folder")
_ASK_FIELDS = ("question", "topK", "tags", "folders")
_PIECE_RE = re.compile(r"\S+\s*|\s+")

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    503: "unavailable",
}

_CONFIG_KEY = web.AppKey("cairn_config", Config)
_TOKEN_KEY = web.AppKey("cairn_token", bytes)
_QUERY_KEY = web.AppKey("cairn_query", object)
_STATS_KEY = web.AppKey("cairn_stats", object)
_HEALTH_KEY = web.AppKey("cairn_health", object)


class QueryServiceLike(Protocol):
    """What the HTTP edge needs of the one query service (:mod:`cairn.query`).

    Both methods block (SQLite, ONNX); they are called from worker threads.
    """

    def search(self, q: str, *, top_k: int, tags: Sequence[str], folders: Sequence[str]) -> SearchResult:
        """Ranked hits for ``q``; raises :class:`~cairn.errors.BadRequest` for bad input."""
        ...

    def ask(self, question: str, *, top_k: int, tags: Sequence[str], folders: Sequence[str]) -> Answer:
        """An attributable answer with its numbered sources; raises BadRequest for empty input."""
        ...


# -- application -----------------------------------------------------------------------


def create_app(
    *,
    config: Config,
    query: QueryServiceLike,
    token: str,
    stats: Callable[[], Mapping[str, Any]],
    health: Callable[[], Mapping[str, Any]],
) -> web.Application:
    """Build the aiohttp application.

    ``token`` is the API token clients must send as ``Authorization: Bearer <token>``
    (see :mod:`cairn.secrets`); ``stats()`` returns the ``/index/stats`` dict and
    ``health()`` the ``/health`` dict — both may block and run in a worker thread.
    Raises :class:`ConfigError` for an empty or short token (an empty token would
    let an empty ``Bearer`` header through).
    """
    if not isinstance(token, str) or len(token) < 16:
        raise ConfigError("The API token is missing or shorter than 16 characters; run `cairn token --rotate`.")
    app = web.Application(
        middlewares=[_errors_middleware, _host_middleware, _origin_middleware, _auth_middleware],
        client_max_size=MAX_BODY_BYTES,
    )
    app[_CONFIG_KEY] = config
    app[_TOKEN_KEY] = token.encode("utf-8")
    app[_QUERY_KEY] = query
    app[_STATS_KEY] = stats
    app[_HEALTH_KEY] = health
    app.router.add_post("/ask", _ask)
    app.router.add_get("/search", _search)
    app.router.add_get("/health", _health)
    app.router.add_get("/index/stats", _index_stats)
    app.on_response_prepare.append(_add_common_headers)
    return app


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


async def serve(app: web.Application, host: str = "127.0.0.1", port: int = 0) -> RunningServer:
    """Start ``app`` on ``host:port`` (loopback only; port 0 picks a free port).

    Raises :class:`ConfigError` for a non-loopback host (the API is local-only by design)
    and for a port that cannot be bound.
    """
    if not _is_loopback(host):
        raise ConfigError(f"HTTP host {host!r} is not a loopback address; Cairn serves on 127.0.0.1, ::1 or localhost only.")
    runner = web.AppRunner(
        app, access_log_class=_AccessLogger, access_log=access_log, handle_signals=False, shutdown_timeout=2.0
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(f"Cannot listen on {host}:{port}: {exc.strerror}; pick another port with --port or CAIRN_PORT.") from None
    bound = port
    for address in runner.addresses:
        bound = address[1]
        break
    log.info("HTTP API listening on %s:%s", host, bound)
    return RunningServer(runner=runner, host=host, port=bound)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _AccessLogger(AbstractAccessLogger):
    """Method, path without query string, status, bytes, milliseconds. No headers, no query."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info(
            "%s %s %s %s %.1fms", request.method, request.path, response.status, response.body_length, time * 1000
        )


# -- middlewares -----------------------------------------------------------------------


def _error_response(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status, headers=headers)


@web.middleware
async def _errors_middleware(request: web.Request, handler) -> web.StreamResponse:
    """Translate every failure into ``{"error": {"code", "message"}}`` (never a traceback)."""
    try:
        return await handler(request)
    except CairnError as exc:
        headers = {"WWW-Authenticate": 'Bearer realm="cairn"'} if exc.http_status == 401 else None
        if exc.http_status >= 500:
            log.error("%s %s failed: %s", request.method, request.path, exc.message)
        return _error_response(exc.http_status, exc.code, exc.message, headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _http_exception_response(request, exc)
    except Exception:
        log.exception("Unexpected error answering %s %s", request.method, request.path)
        return _error_response(500, "internal", "Internal error in the Cairn daemon; see its log for details.")


def _http_exception_response(request: web.Request, exc: web.HTTPException) -> web.Response:
    headers: dict[str, str] = {}
    if exc.status == 404:
        message = f"No route {request.method} {request.path}; see the HTTP table in DESIGN.md for the routes."
    elif exc.status == 405:
        allowed = exc.headers.get("Allow", "")
        headers["Allow"] = allowed
        message = f"Method {request.method} is not allowed on {request.path}; allowed: {allowed or 'none'}."
    elif exc.status == 413:
        message = f"Request body is larger than {MAX_BODY_BYTES} bytes; send a shorter request."
    else:
        message = exc.reason or "Request failed."
    code = _STATUS_CODES.get(exc.status, f"http_{exc.status}")
    return _error_response(exc.status, code, message, headers or None)


@web.middleware
async def _host_middleware(request: web.Request, handler) -> web.StreamResponse:
    """403 unless Host is 127.0.0.1, localhost or [::1], with no port or the port we listen on."""
    raw = request.headers.get("Host")
    match = _HOST_RE.match(raw.strip().lower()) if raw else None
    ok = match is not None and match.group("name") in _ALLOWED_HOSTNAMES
    if ok and match.group("port") is not None:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        if isinstance(sockname, tuple) and len(sockname) >= 2:
            ok = int(match.group("port")) == sockname[1]
    if not ok:
        shown = (raw or "")[:100]
        raise Forbidden(
            f"Host header {shown!r} is not allowed; Cairn answers only requests addressed to "
            "127.0.0.1, localhost or [::1] (DNS-rebinding defence)."
        )
    return await handler(request)


@web.middleware
async def _origin_middleware(request: web.Request, handler) -> web.StreamResponse:
    """403 for a disallowed ``Origin``; answers CORS preflights for allowed origins."""
    origin = request.headers.get("Origin")
    if origin is None:
        return await handler(request)
    allowed = request.app[_CONFIG_KEY].cors_origins
    if origin not in allowed:
        raise Forbidden(
            f"Origin {origin[:100]!r} is not allowed; allowed origins: {', '.join(allowed) or 'none'} "
            "(set cors_origins in config.toml)."
        )
    wanted = request.headers.get("Access-Control-Request-Method")
    if request.method == "OPTIONS" and wanted is not None:
        if isinstance(request.match_info.http_exception, web.HTTPNotFound):
            raise request.match_info.http_exception
        if wanted.upper() not in ("GET", "POST"):
            raise Forbidden(f"Method {wanted[:20]!r} is not allowed by CORS; allowed: GET, POST.")
        return web.Response(
            status=204,
            headers={
                "Access-Control-Allow-Methods": "GET, POST",
                "Access-Control-Allow-Headers": "Authorization, Content-Type",
                "Access-Control-Max-Age": "600",
            },
        )
    return await handler(request)


@web.middleware
async def _auth_middleware(request: web.Request, handler) -> web.StreamResponse:
    """401 unless ``Authorization: Bearer <token>`` matches (constant-time); never from the URL."""
    if (request.method, request.path) in _OPEN_ROUTES:
        return await handler(request)
    if any(name.lower() in _TOKEN_QUERY_PARAMS for name in request.query):
        raise Unauthorized(
            "A token in the URL is never accepted (URLs end up in logs and history); "
            "send it as the header 'Authorization: Bearer <token>' instead, and rotate it with `cairn token --rotate`."
        )
    header = request.headers.get("Authorization", "")
    scheme, _, presented = header.strip().partition(" ")
    expected: bytes = request.app[_TOKEN_KEY]
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        presented.strip().encode("utf-8", "replace"), expected
    ):
        raise Unauthorized(
            "Missing or wrong API token: send the header 'Authorization: Bearer <token>'; "
            "print the token with `cairn token`."
        )
    return await handler(request)


async def _add_common_headers(request: web.Request, response: web.StreamResponse) -> None:
    """CORS for allowed origins (echoed, never ``*``), ``Vary: Origin``, no sniffing, no caching."""
    origin = request.headers.get("Origin")
    if origin is not None and origin in request.app[_CONFIG_KEY].cors_origins:
        response.headers["Access-Control-Allow-Origin"] = origin
    vary = response.headers.get("Vary")
    if not vary:
        response.headers["Vary"] = "Origin"
    elif "origin" not in vary.lower():
        response.headers["Vary"] = f"{vary}, Origin"
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Cache-Control", "no-store")


# -- validation ------------------------------------------------------------------------


def _top_k(value: Any, default: int, *, from_query: bool = False) -> int:
    """``topK``: an integer 1..50 — a JSON number, or digits when ``from_query``; ``None`` → ``default``."""
    if value is None:
        return max(TOP_K_MIN, min(TOP_K_MAX, default))
    if from_query and isinstance(value, str):
        text = value.strip()
        if not re.fullmatch(r"[0-9]{1,4}", text):
            raise BadRequest(f"topK must be an integer from {TOP_K_MIN} to {TOP_K_MAX}, got {value[:20]!r}.")
        value = int(text)
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"topK must be an integer from {TOP_K_MIN} to {TOP_K_MAX}, got {json.dumps(value)[:20]}.")
    if not TOP_K_MIN <= value <= TOP_K_MAX:
        raise BadRequest(f"topK must be an integer from {TOP_K_MIN} to {TOP_K_MAX}, got {value}.")
    return value


def _text(value: Any, name: str) -> str:
    """A non-empty string of at most 2,000 characters (``question`` / ``q``)."""
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string, got {type(value).__name__ if value is not None else 'nothing'}.")
    if not value.strip():
        raise BadRequest(f"{name} is empty; send the text to look for.")
    if len(value) > MAX_QUESTION_CHARS:
        raise BadRequest(f"{name} is {len(value)} characters long; the limit is {MAX_QUESTION_CHARS}.")
    return value


def _scope(value: Any, name: str) -> tuple[str, ...]:
    """``tags`` / ``folders``: a list of non-empty strings (at most 64, each ≤ 512 characters)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f"{name} must be a list of strings, e.g. [\"project\"].")
    if len(value) > MAX_SCOPE_ITEMS:
        raise BadRequest(f"{name} has {len(value)} entries; the limit is {MAX_SCOPE_ITEMS}.")
    out = []
    for item in value:
        if not item.strip() or len(item) > MAX_SCOPE_CHARS:
            raise BadRequest(f"{name} entries must be non-empty strings of at most {MAX_SCOPE_CHARS} characters, got {item[:40]!r}.")
        out.append(item)
    return tuple(out)


async def _json_body(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object; 413 past :data:`MAX_BODY_BYTES`, 400 if not a JSON object."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY_BYTES, actual_size=request.content_length)
    raw = await request.read()  # raises 413 past client_max_size, also for chunked bodies
    try:
        body = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("The request body is not valid UTF-8 JSON; send a JSON object like {\"question\": \"...\"}.") from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object like {\"question\": \"...\"}.")
    return body


# -- handlers --------------------------------------------------------------------------


async def _search(request: web.Request) -> web.Response:
    """``GET /search?q=&topK=&tag=&folder=`` → ``SearchResult.to_json()``."""
    unknown = sorted({name for name in request.query if name not in _SEARCH_PARAMS})
    if unknown:
        raise BadRequest(f"Unknown query parameter {unknown[0]!r}; expected: {', '.join(_SEARCH_PARAMS)}.")
    for single in ("q", "topK"):
        if len(request.query.getall(single, [])) > 1:
            raise BadRequest(f"Query parameter {single!r} was given more than once.")
    q = _text(request.query.get("q"), "q")
    top_k = _top_k(request.query.get("topK"), request.app[_CONFIG_KEY].top_k, from_query=True)
    tags = _scope(request.query.getall("tag", []), "tag")
    folders = _scope(request.query.getall("folder", []), "folder")
    query: QueryServiceLike = request.app[_QUERY_KEY]
    result = await asyncio.to_thread(query.search, q, top_k=top_k, tags=tags, folders=folders)
    return web.json_response(result.to_json())


async def _health(request: web.Request) -> web.Response:
    """``GET /health`` (no token) → ``health()``."""
    return web.json_response(dict(await asyncio.to_thread(request.app[_HEALTH_KEY])))


async def _index_stats(request: web.Request) -> web.Response:
    """``GET /index/stats`` → ``stats()``."""
    return web.json_response(dict(await asyncio.to_thread(request.app[_STATS_KEY])))


def split_pieces(text: str) -> list[str]:
    """Split an answer into word pieces for ``token`` events; ``"".join(pieces) == text`` exactly.

    Each piece is a word with its trailing whitespace (leading whitespace is its own piece).
    """
    return _PIECE_RE.findall(text)


def sse_event(name: str, data: Any) -> bytes:
    """One SSE frame: ``event: NAME\\ndata: <json on one line>\\n\\n`` (UTF-8)."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"event: {name}\ndata: {payload}\n\n".encode("utf-8")


async def _ask(request: web.Request) -> web.StreamResponse:
    """``POST /ask`` → SSE ``token``… ``sources`` ``done`` (or ``error`` ``sources`` ``done``).

    The body is validated before the stream starts (400/413 JSON errors); the stream
    starts before the query service runs, so a client sees the headers at once.
    ``done.elapsedMs`` is the wall time from the request arriving to ``done`` (ms).
    """
    started = time.monotonic()
    body = await _json_body(request)
    question = _text(body.get("question"), "question")
    top_k = _top_k(body.get("topK"), request.app[_CONFIG_KEY].top_k)
    tags = _scope(body.get("tags"), "tags")
    folders = _scope(body.get("folders"), "folders")
    query: QueryServiceLike = request.app[_QUERY_KEY]

    response = web.StreamResponse(
        status=200,
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        },
    )
    await response.prepare(request)

    def elapsed_ms() -> float:
        return round((time.monotonic() - started) * 1000, 1)

    try:
        try:
            answer = await asyncio.to_thread(query.ask, question, top_k=top_k, tags=tags, folders=folders)
        except CairnError as exc:
            if exc.http_status >= 500:
                log.error("POST /ask failed: %s", exc.message)
            await _stream_failure(response, exc.code, exc.message, elapsed_ms)
            return response
        except Exception:
            log.exception("Unexpected error answering POST /ask")
            await _stream_failure(
                response, "internal", "Internal error in the Cairn daemon; see its log for details.", elapsed_ms
            )
            return response
        for piece in split_pieces(answer.text):
            await response.write(sse_event("token", {"text": piece}))
        await response.write(sse_event("sources", [s.to_json() for s in answer.sources]))
        await response.write(
            sse_event("done", {"grounded": answer.grounded, "notFound": answer.not_found, "elapsedMs": elapsed_ms()})
        )
        await response.write_eof()
    except ConnectionResetError:
        log.info("POST /ask: the client went away before the answer was complete.")
    return response


async def _stream_failure(response: web.StreamResponse, code: str, message: str, elapsed_ms: Callable[[], float]) -> None:
    await response.write(sse_event("error", {"code": code, "message": message}))
    await response.write(sse_event("sources", []))
    await response.write(sse_event("done", {"grounded": False, "notFound": False, "elapsedMs": elapsed_ms()}))
    await response.write_eof()

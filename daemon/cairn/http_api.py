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
import os
import re
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from cairn.config import Config
from cairn.errors import (
    BadRequestError,
    BusyError,
    CairnError,
    ConfigError,
    ForbiddenError,
    MisdirectedRequestError,
    TooManyRequestsError,
    UnauthorizedError,
)

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
    421: "misdirected_request",
    429: "too_many_requests",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    503: "unavailable",
}

_CONFIG_KEY = web.AppKey("cairn_config", Config)
_TOKEN_KEY = web.AppKey("cairn_token", object)
_HEARTBEAT_KEY = web.AppKey("cairn_heartbeat_s", float)
_QUERY_KEY = web.AppKey("cairn_query", object)
_STATS_KEY = web.AppKey("cairn_stats", object)
_HEALTH_KEY = web.AppKey("cairn_health", object)
_ANSWERS_KEY = web.AppKey("cairn_answers", object)
_LIBRARY_KEY = web.AppKey("cairn_library", object)
_REINDEX_KEY = web.AppKey("cairn_reindex", object)
_PAUSE_KEY = web.AppKey("cairn_pause", object)
_EVENTS_KEY = web.AppKey("cairn_events", object)
_STATE_KEY = web.AppKey("cairn_state", object)

#: Seconds between SSE comment heartbeats (``: ping``) on an open stream.
HEARTBEAT_S = 15.0
#: Concurrent ``GET /events`` streams; one more is 503 with ``Retry-After``.
MAX_EVENT_STREAMS = 8
#: Bad-token throttle: this many wrong tokens in a burst, then one more allowed per REFILL seconds.
BAD_TOKEN_BURST, BAD_TOKEN_REFILL_S = 10, 2.0
_RELATED_PARAMS = ("path", "limit")


class TokenSource(Protocol):
    """Where the current API token comes from (``cairn.secrets.TokenWatch``); called on every request."""

    def current(self) -> str: ...


class _StaticToken:
    def __init__(self, token: str) -> None:
        self._token = token

    def current(self) -> str:
        return self._token


class BadTokenThrottle:
    """A token bucket of wrong-token attempts: ``burst`` in a row, then one per ``refill_s`` seconds.
    While the bucket is empty a wrong token gets 429 with ``Retry-After`` instead of 401. The right token
    is always served: a stale script polling with an old token after ``cairn token --rotate`` (or any
    local program sending wrong tokens) must not lock the plugin out, and the throttle is not what stops
    guessing — the token has 256 bits of entropy. Only requests that present an ``Authorization`` header
    count; a browser cannot send one cross-origin without a preflight, which the Origin check refuses."""

    def __init__(
        self,
        burst: int = BAD_TOKEN_BURST,
        refill_s: float = BAD_TOKEN_REFILL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst, self.refill_s, self.clock = burst, refill_s, clock
        self._level = float(burst)
        self._at = clock()

    def _refill(self) -> None:
        now = self.clock()
        self._level = min(float(self.burst), self._level + (now - self._at) / self.refill_s)
        self._at = now

    def retry_after(self) -> float:
        """0 when a token may be checked now, else the seconds until one may."""
        self._refill()
        return 0.0 if self._level >= 1.0 else (1.0 - self._level) * self.refill_s

    def failed(self) -> None:
        self._refill()
        self._level = max(0.0, self._level - 1.0)


class _State:
    """Per-app mutable state: open streams, the shutdown signal, the bad-token throttle."""

    def __init__(self, throttle: BadTokenThrottle) -> None:
        self.ask_streams = 0
        self.event_streams = 0
        self.closing = asyncio.Event()
        self.throttle = throttle


class QueryServiceLike(Protocol):
    """What the HTTP edge needs of the one query service (:mod:`cairn.query`).

    Both methods block (SQLite, ONNX); they are called from worker threads.
    """

    def search(self, q: str, *, top_k: int, tags: Sequence[str], folders: Sequence[str]) -> SearchResult:
        """Ranked hits for ``q``; raises :class:`~cairn.errors.BadRequestError` for bad input."""
        ...

    def ask(self, question: str, *, top_k: int, tags: Sequence[str], folders: Sequence[str]) -> Answer:
        """An attributable answer with its numbered sources; raises BadRequestError for empty input."""
        ...


# -- application -----------------------------------------------------------------------


class AnswersLike(Protocol):
    """The answer service (:class:`cairn.answer.AnswerService`): an async stream of ``(event, data)``."""

    def stream(self, question: str, *, top_k: int, tags: Sequence[str], folders: Sequence[str]) -> Any: ...


class LibraryLike(Protocol):
    """Read views (:class:`cairn.library.NoteViews`); blocking, called from worker threads."""

    def note(self, path: str) -> Mapping[str, Any]: ...

    def related(self, path: str, limit: int) -> Mapping[str, Any]: ...

    def tags(self) -> Mapping[str, Any]: ...


class EventsLike(Protocol):
    """Index progress broadcaster (:class:`cairn.events.EventBus`)."""

    def subscribe(self) -> Any: ...


def create_app(
    *,
    config: Config,
    query: QueryServiceLike,
    token: str | TokenSource,
    stats: Callable[[], Mapping[str, Any]],
    health: Callable[[], Any],
    answers: AnswersLike | None = None,
    library: LibraryLike | None = None,
    reindex: Callable[[str | None], Mapping[str, Any]] | None = None,
    events: EventsLike | None = None,
    set_paused: Callable[[bool], Mapping[str, Any]] | None = None,
    heartbeat_s: float = HEARTBEAT_S,
    throttle: BadTokenThrottle | None = None,
) -> web.Application:
    """Build the aiohttp application.

    ``token`` is the API token clients must send as ``Authorization: Bearer <token>``, or a
    :class:`TokenSource` asked on every request (so a rotation takes effect at once);
    ``stats()`` returns the ``/index/stats`` dict and ``health()`` the ``/health`` dict — both may
    block and run in a worker thread (``health`` may also be a coroutine function).
    ``answers`` streams ``/ask`` (without it, ``query.ask`` is streamed as word pieces);
    ``library`` serves ``/notes``, ``/related`` and ``/tags``; ``reindex(path)`` queues a
    re-index (blocking, returns ``{queued, ...}``); ``events`` feeds ``/events``; ``set_paused(flag)``
    pauses or resumes watching the vault (``POST /index/pause`` / ``/index/resume``; returns ``{paused, watching}``). A route whose
    dependency is missing answers 503 ``unavailable``.
    Raises :class:`ConfigError` for an empty or short token (an empty token would
    let an empty ``Bearer`` header through).
    """
    source: TokenSource = _StaticToken(token) if isinstance(token, str) else token
    current = source.current()
    if not isinstance(current, str) or len(current) < 16:
        raise ConfigError("The API token is missing or shorter than 16 characters; run `cairn token --rotate`.")
    app = web.Application(
        middlewares=[_errors_middleware, _host_middleware, _origin_middleware, _auth_middleware],
        client_max_size=MAX_BODY_BYTES,
    )
    app[_CONFIG_KEY] = config
    app[_TOKEN_KEY] = source
    app[_QUERY_KEY] = query
    app[_STATS_KEY] = stats
    app[_HEALTH_KEY] = health
    app[_ANSWERS_KEY] = answers
    app[_LIBRARY_KEY] = library
    app[_REINDEX_KEY] = reindex
    app[_PAUSE_KEY] = set_paused
    app[_EVENTS_KEY] = events
    app[_STATE_KEY] = _State(throttle or BadTokenThrottle())
    app[_HEARTBEAT_KEY] = float(heartbeat_s)
    app.router.add_post("/ask", _ask)
    app.router.add_get("/search", _search)
    app.router.add_get("/health", _health)
    app.router.add_get("/index/stats", _index_stats)
    app.router.add_post("/index/reindex", _index_reindex)
    app.router.add_post("/index/pause", _index_pause)
    app.router.add_post("/index/resume", _index_resume)
    app.router.add_get("/notes/{path:.+}", _note)
    app.router.add_get("/related", _related)
    app.router.add_get("/tags", _tags)
    app.router.add_get("/events", _events)
    app.router.add_get("/openapi.json", _openapi)
    app.on_response_prepare.append(_add_common_headers)
    app.on_shutdown.append(_on_shutdown)
    return app


async def _on_shutdown(app: web.Application) -> None:
    """Ask every open SSE stream to finish now (they end with a last event, then EOF)."""
    app[_STATE_KEY].closing.set()


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

    Why: every search embeds the query (ONNX, already on every core) and scores all vectors (BLAS); with
    asyncio's default of cores + 4 threads, 8 concurrent clients run 6 of those at once and each costs
    more CPU (obsidian-hub, 2 cores, 8 clients: 67 ms of daemon CPU per /search against 53 ms with one
    client), so everyone waits longer. Requests beyond ``workers`` queue in arrival order instead."""
    loop = asyncio.get_running_loop()
    if loop in _BOUNDED_LOOPS:
        return
    loop.set_default_executor(ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cairn-worker"))
    _BOUNDED_LOOPS.add(loop)


async def serve(
    app: web.Application, host: str = "127.0.0.1", port: int = 0, *, workers: int | None = None
) -> RunningServer:
    """Start ``app`` on ``host:port`` (loopback only; port 0 picks a free port).

    Blocking work then runs on at most ``workers`` threads (default :func:`default_workers`): the
    running loop's default executor is replaced by a pool of that size the first time a server starts
    on it (see :func:`_bound_default_executor`); ``asyncio.run`` shuts it down with the loop.

    Raises :class:`ConfigError` for a non-loopback host (the API is local-only by design)
    and for a port that cannot be bound.
    """
    if not _is_loopback(host):
        raise ConfigError(
            f"HTTP host {host!r} is not a loopback address; Cairn serves on 127.0.0.1, ::1 or localhost only."
        )
    _bound_default_executor(workers or default_workers())
    runner = web.AppRunner(
        app,
        access_log_class=_AccessLogger,
        access_log=access_log,
        handle_signals=False,
        shutdown_timeout=2.0,
        handler_cancellation=True,  # a client that leaves cancels its handler, and so its LLM request
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(
            f"Cannot listen on {host}:{port}: {exc.strerror}; pick another port with --port or CAIRN_PORT."
        ) from None
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
        if isinstance(exc, TooManyRequestsError):
            headers = {"Retry-After": str(exc.retry_after)}
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
        message = (
            f"No route {request.method} {request.path}; GET /openapi.json (with the token) lists every route, "
            "and the README has the HTTP table."
        )
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
    """421 unless Host is 127.0.0.1, localhost or [::1], with no port or the port we listen on."""
    raw = request.headers.get("Host")
    match = _HOST_RE.match(raw.strip().lower()) if raw else None
    ok = match is not None and match.group("name") in _ALLOWED_HOSTNAMES
    if ok and match.group("port") is not None:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        if isinstance(sockname, tuple) and len(sockname) >= 2:
            ok = int(match.group("port")) == sockname[1]
    if not ok:
        shown = (raw or "")[:100]
        raise MisdirectedRequestError(
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
        raise ForbiddenError(
            f"Origin {origin[:100]!r} is not allowed; allowed origins: {', '.join(allowed) or 'none'} "
            "(set cors_origins in config.toml)."
        )
    wanted = request.headers.get("Access-Control-Request-Method")
    if request.method == "OPTIONS" and wanted is not None:
        if isinstance(request.match_info.http_exception, web.HTTPNotFound):
            raise request.match_info.http_exception
        if wanted.upper() not in ("GET", "POST"):
            raise ForbiddenError(f"Method {wanted[:20]!r} is not allowed by CORS; allowed: GET, POST.")
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
        raise UnauthorizedError(
            "A token in the URL is never accepted (URLs end up in logs and history); "
            "send it as the header 'Authorization: Bearer <token>' instead, and rotate it with `cairn token --rotate`."
        )
    header = request.headers.get("Authorization")
    scheme, _, presented = (header or "").strip().partition(" ")
    expected = request.app[_TOKEN_KEY].current().encode("utf-8")
    if scheme.lower() != "bearer" or not hmac.compare_digest(presented.strip().encode("utf-8", "replace"), expected):
        if header is not None:
            throttle: BadTokenThrottle = request.app[_STATE_KEY].throttle
            wait = throttle.retry_after()
            if wait > 0:
                raise TooManyRequestsError(
                    f"Too many wrong API tokens; try again in {wait:.0f} s. Print the right one with `cairn token`.",
                    retry_after=int(wait) + 1,
                )
            throttle.failed()
        raise UnauthorizedError(
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
            raise BadRequestError(f"topK must be an integer from {TOP_K_MIN} to {TOP_K_MAX}, got {value[:20]!r}.")
        value = int(text)
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequestError(f"topK must be an integer from {TOP_K_MIN} to {TOP_K_MAX}, got {json.dumps(value)[:20]}.")
    if not TOP_K_MIN <= value <= TOP_K_MAX:
        raise BadRequestError(f"topK must be an integer from {TOP_K_MIN} to {TOP_K_MAX}, got {value}.")
    return value


def _text(value: Any, name: str) -> str:
    """A non-empty string of at most 2,000 characters (``question`` / ``q``)."""
    if not isinstance(value, str):
        raise BadRequestError(
            f"{name} must be a string, got {type(value).__name__ if value is not None else 'nothing'}."
        )
    if not value.strip():
        raise BadRequestError(f"{name} is empty; send the text to look for.")
    if len(value) > MAX_QUESTION_CHARS:
        raise BadRequestError(f"{name} is {len(value)} characters long; the limit is {MAX_QUESTION_CHARS}.")
    return value


def _scope(value: Any, name: str) -> tuple[str, ...]:
    """``tags`` / ``folders``: a list of non-empty strings (at most 64, each ≤ 512 characters)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequestError(f'{name} must be a list of strings, e.g. ["project"].')
    if len(value) > MAX_SCOPE_ITEMS:
        raise BadRequestError(f"{name} has {len(value)} entries; the limit is {MAX_SCOPE_ITEMS}.")
    out = []
    for item in value:
        if not item.strip() or len(item) > MAX_SCOPE_CHARS:
            raise BadRequestError(
                f"{name} entries must be non-empty strings of at most {MAX_SCOPE_CHARS} characters, got {item[:40]!r}."
            )
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
        raise BadRequestError(
            'The request body is not valid UTF-8 JSON; send a JSON object like {"question": "..."}.'
        ) from None
    except RecursionError:  # e.g. 20,000 nested '[': the parser recurses once per level
        raise BadRequestError(
            'The request body nests arrays or objects too deeply; send a flat JSON object like {"question": "..."}.'
        ) from None
    if not isinstance(body, dict):
        raise BadRequestError('The request body must be a JSON object like {"question": "..."}.')
    try:  # a lone "\ud800" escape is valid JSON but not a character: nothing past here could encode it
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequestError(
            f"The request body holds a lone UTF-16 surrogate escape (U+{ord(exc.object[exc.start]):04X}), "
            "which is not a character; send the text as UTF-8."
        ) from None
    except RecursionError:
        raise BadRequestError("The request body nests arrays or objects too deeply; send a flat JSON object.") from None
    return body


# -- handlers --------------------------------------------------------------------------


async def _search(request: web.Request) -> web.Response:
    """``GET /search?q=&topK=&tag=&folder=`` → ``SearchResult.to_json()``."""
    unknown = sorted({name for name in request.query if name not in _SEARCH_PARAMS})
    if unknown:
        raise BadRequestError(f"Unknown query parameter {unknown[0]!r}; expected: {', '.join(_SEARCH_PARAMS)}.")
    for single in ("q", "topK"):
        if len(request.query.getall(single, [])) > 1:
            raise BadRequestError(f"Query parameter {single!r} was given more than once.")
    q = _text(request.query.get("q"), "q")
    top_k = _top_k(request.query.get("topK"), request.app[_CONFIG_KEY].top_k, from_query=True)
    tags = _scope(request.query.getall("tag", []), "tag")
    folders = _scope(request.query.getall("folder", []), "folder")
    query: QueryServiceLike = request.app[_QUERY_KEY]
    result = await asyncio.to_thread(query.search, q, top_k=top_k, tags=tags, folders=folders)
    return web.json_response(result.to_json())


async def _health(request: web.Request) -> web.Response:
    """``GET /health`` (no token) → ``health()`` (a coroutine function, or blocking → worker thread)."""
    fn = request.app[_HEALTH_KEY]
    if asyncio.iscoroutinefunction(fn):
        result = await fn()
    else:
        result = await asyncio.to_thread(fn)
    return web.json_response(dict(result))


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
    return f"event: {name}\ndata: {payload}\n\n".encode()


def _need(request: web.Request, key: web.AppKey, what: str) -> Any:
    value = request.app[key]
    if value is None:
        raise BusyError(f"{what} is not available in this daemon.", retry_after=60)
    return value


def _sse_response() -> web.StreamResponse:
    return web.StreamResponse(
        status=200,
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        },
    )


async def _legacy_events(
    query: QueryServiceLike, question: str, top_k: int, tags: Sequence[str], folders: Sequence[str]
):
    """``/ask`` events from a query service alone (``query.ask`` in a worker thread, streamed as word pieces)."""
    answer = await asyncio.to_thread(query.ask, question, top_k=top_k, tags=tags, folders=folders)
    for piece in split_pieces(answer.text):
        yield "token", {"text": piece}
    yield "sources", [s.to_json() for s in answer.sources]
    yield "done", {"grounded": answer.grounded, "notFound": answer.not_found, "elapsedMs": 0.0, "removedCitations": 0}


#: Items a stream's producer may hold that were not written yet (about one extractive answer's word
#: pieces, so one is written at once; the same bound as an ``/events`` subscription's own queue). Beyond
#: it the producer waits for the client, so a slow client holds at most this much more in memory.
_PUMP_BACKLOG = 256
#: Ends a producer's items: its async generator ended.
_END = object()


@dataclass(frozen=True)
class _Raised:
    """Ends a producer's items: its async generator raised ``exc``."""

    exc: BaseException


async def _produce(agen, queue: asyncio.Queue) -> None:
    """Put ``agen``'s items in ``queue``, then :data:`_END` or :class:`_Raised` (the pump's producer Task)."""
    try:
        async for item in agen:
            await queue.put(item)
    except BaseException as exc:
        if asyncio.current_task().cancelling():
            raise  # the pump cancelled it (shutdown, the client left): nobody reads the queue any more
        end: object = _Raised(exc)
    else:
        end = _END
    await queue.put(end)


async def _pump(
    request: web.Request, response: web.StreamResponse, agen, on_failure, on_closing, *, backlog: int = _PUMP_BACKLOG
) -> None:
    """Write ``agen``'s ``(event, data)`` items as SSE frames, a ``: ping`` comment every heartbeat while
    waiting, until it ends. Server shutdown → ``on_closing()`` then EOF. ``agen`` raising →
    what was ready is written, then ``on_failure(exc)``, then EOF. If the handler is cancelled (the client
    left), ``agen`` is cancelled, which cancels whatever it awaits (the LLM request). ``agen`` is closed
    in every case.

    One producer Task per stream iterates ``agen`` into a queue (:func:`_produce`). The pump writes all
    items that are ready in one ``response.write`` and only then waits (a Task per wait, not per item):
    an extractive answer's ~200 word pieces come without waiting and cost one write, while a model's
    token, which comes after a wait, is written as soon as it arrives. A step per item with a Task and
    ``asyncio.wait`` each made a cached ``/ask`` cost 6-8 ms of daemon CPU, now 3-4 ms (bench_http,
    obsidian-hub, 8 clients)."""
    state: _State = request.app[_STATE_KEY]
    heartbeat = request.app[_HEARTBEAT_KEY]
    queue: asyncio.Queue = asyncio.Queue(maxsize=backlog)
    producer = asyncio.ensure_future(_produce(agen, queue))
    closing = asyncio.ensure_future(state.closing.wait())
    unsent = bytearray()

    async def flush() -> None:
        if unsent:
            await response.write(bytes(unsent))
            unsent.clear()

    async def waited() -> object:
        """The next item once one comes (``: ping`` every heartbeat meanwhile); ``closing`` on shutdown."""
        getter = asyncio.ensure_future(queue.get())
        try:
            while True:
                done, _ = await asyncio.wait({getter, closing}, timeout=heartbeat, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    return getter.result()
                if closing in done:
                    return closing
                await response.write(b": ping\n\n")
        finally:
            getter.cancel()  # no-op once it is done; a cancelled get() takes no item

    try:
        while True:
            if queue.empty():
                await flush()  # everything that came without waiting, in one write
                item = await waited()
            else:
                item = queue.get_nowait()
            if item is closing:
                producer.cancel()
                await asyncio.gather(producer, return_exceptions=True)
                await on_closing()
                break
            if item is _END:
                await flush()
                break
            if isinstance(item, _Raised):
                await flush()
                if not isinstance(item.exc, Exception):
                    raise item.exc
                await on_failure(item.exc)
                break
            name, data = item
            unsent += sse_event(name, data)
        await response.write_eof()
    finally:
        closing.cancel()
        if not producer.done():
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)
        try:
            await agen.aclose()
        except Exception:  # already finished or failed
            pass


async def _ask(request: web.Request) -> web.StreamResponse:
    """``POST /ask`` → SSE ``token``… ``sources`` ``done`` (or ``error`` ``sources`` ``done``).

    The body is validated before the stream starts (400/413 JSON errors); beyond
    ``config.max_ask_streams`` open streams → 503 with ``Retry-After``. The stream starts before
    the answer is computed, so a client sees the headers at once.
    ``done.elapsedMs`` is the wall time from the request arriving to ``done`` (ms).
    """
    started = time.monotonic()
    body = await _json_body(request)
    question = _text(body.get("question"), "question")
    top_k = _top_k(body.get("topK"), request.app[_CONFIG_KEY].top_k)
    tags = _scope(body.get("tags"), "tags")
    folders = _scope(body.get("folders"), "folders")
    state: _State = request.app[_STATE_KEY]
    limit = request.app[_CONFIG_KEY].max_ask_streams
    if state.ask_streams >= limit:
        raise BusyError(f"{limit} answers are already streaming; try again in a few seconds.", retry_after=5)
    answers = request.app[_ANSWERS_KEY]
    if answers is not None:
        agen = answers.stream(question, top_k=top_k, tags=tags, folders=folders)
    else:
        agen = _legacy_events(request.app[_QUERY_KEY], question, top_k, tags, folders)

    def elapsed_ms() -> float:
        return round((time.monotonic() - started) * 1000, 1)

    async def failure(exc: BaseException) -> None:
        if isinstance(exc, CairnError):
            if exc.http_status >= 500:
                log.error("POST /ask failed: %s", exc.message)
            code, message = exc.code, exc.message
        else:
            log.error("Unexpected error answering POST /ask", exc_info=exc)
            code, message = "internal", "Internal error in the Cairn daemon; see its log for details."
        await _stream_failure(response, code, message, elapsed_ms)

    async def closing() -> None:
        await response.write(sse_event("error", {"code": "shutting_down", "message": "The Cairn daemon is stopping."}))
        await response.write(sse_event("sources", []))
        await response.write(
            sse_event("done", {"grounded": False, "notFound": False, "elapsedMs": elapsed_ms(), "removedCitations": 0})
        )

    state.ask_streams += 1
    try:
        response = _sse_response()
        await response.prepare(request)

        async def timed():
            async for name, data in agen:
                if name == "done":
                    data = {**data, "elapsedMs": elapsed_ms()}
                yield name, data

        await _pump(request, response, timed(), failure, closing)
    except ConnectionResetError:
        log.info("POST /ask: the client went away before the answer was complete.")
    finally:
        state.ask_streams -= 1
        await agen.aclose()
    return response


async def _stream_failure(
    response: web.StreamResponse, code: str, message: str, elapsed_ms: Callable[[], float]
) -> None:
    await response.write(sse_event("error", {"code": code, "message": message}))
    await response.write(sse_event("sources", []))
    await response.write(
        sse_event("done", {"grounded": False, "notFound": False, "elapsedMs": elapsed_ms(), "removedCitations": 0})
    )


def _only_params(request: web.Request, allowed: Sequence[str]) -> None:
    unknown = sorted({name for name in request.query if name not in allowed})
    if unknown:
        raise BadRequestError(f"Unknown query parameter {unknown[0]!r}; expected: {', '.join(allowed) or 'none'}.")
    for name in allowed:
        if len(request.query.getall(name, [])) > 1:
            raise BadRequestError(f"Query parameter {name!r} was given more than once.")


async def _note(request: web.Request) -> web.Response:
    """``GET /notes/{path}`` → ``{filePath, title, tags, aliases, frontmatter, content, links, backlinks}``.
    The path is confined to the vault before anything is read (400 ``path_outside_vault``, 404)."""
    _only_params(request, ())
    library = _need(request, _LIBRARY_KEY, "Reading notes")
    return web.json_response(dict(await asyncio.to_thread(library.note, request.match_info["path"])))


async def _related(request: web.Request) -> web.Response:
    """``GET /related?path=&limit=`` → ``{filePath, links, backlinks, similar}``."""
    _only_params(request, _RELATED_PARAMS)
    path = request.query.get("path")
    if path is None:
        raise BadRequestError("Query parameter 'path' is required: the vault-relative path of a note.")
    raw_limit = request.query.get("limit")
    limit = 10
    if raw_limit is not None:
        if not re.fullmatch(r"[0-9]{1,3}", raw_limit.strip()) or not 1 <= int(raw_limit) <= 50:
            raise BadRequestError(f"limit must be an integer from 1 to 50, got {raw_limit[:20]!r}.")
        limit = int(raw_limit)
    library = _need(request, _LIBRARY_KEY, "Related notes")
    return web.json_response(dict(await asyncio.to_thread(library.related, path, limit)))


async def _tags(request: web.Request) -> web.Response:
    """``GET /tags`` → ``{tags: [{tag, count}]}``."""
    _only_params(request, ())
    library = _need(request, _LIBRARY_KEY, "The tag list")
    return web.json_response(dict(await asyncio.to_thread(library.tags)))


async def _index_reindex(request: web.Request) -> web.Response:
    """``POST /index/reindex`` ``{path?}`` → 202 ``{queued: true, path}`` (the run happens in the background)."""
    _only_params(request, ())
    body: dict[str, Any] = {}
    if request.can_read_body and (request.content_length or 0) != 0:
        body = await _json_body(request)
    unknown = sorted(set(body) - {"path"})
    if unknown:
        raise BadRequestError(f"Unknown field {unknown[0]!r}; expected: path.")
    path = body.get("path")
    if path is not None and (not isinstance(path, str) or not path.strip()):
        raise BadRequestError("path must be a non-empty vault-relative path, e.g. 'folder/note.md'.")
    reindex = _need(request, _REINDEX_KEY, "Re-indexing")
    result = await asyncio.to_thread(reindex, path)
    return web.json_response(dict(result), status=202)


async def _set_paused(request: web.Request, paused: bool) -> web.Response:
    _only_params(request, ())
    if request.can_read_body and (request.content_length or 0) != 0:
        body = await _json_body(request)
        if body:
            raise BadRequestError(f"Unknown field {sorted(body)[0]!r}; this route takes no body.")
    set_paused = _need(request, _PAUSE_KEY, "Pausing and resuming")
    return web.json_response(dict(await asyncio.to_thread(set_paused, paused)))


async def _index_pause(request: web.Request) -> web.Response:
    """``POST /index/pause`` → ``{paused: true, watching: false}``: file changes are no longer followed."""
    return await _set_paused(request, True)


async def _index_resume(request: web.Request) -> web.Response:
    """``POST /index/resume`` → ``{paused: false, watching}``; a reconcile picks up what changed meanwhile."""
    return await _set_paused(request, False)


async def _events(request: web.Request) -> web.StreamResponse:
    """``GET /events`` → SSE of index progress: ``progress`` ``{phase, done, total}``, ``indexed``,
    ``removed`` ``{filePath}`` (a note's file is gone; a rename is ``removed`` for the old path), ``error``. Beyond :data:`MAX_EVENT_STREAMS` open streams → 503 with ``Retry-After``."""
    _only_params(request, ())
    bus = _need(request, _EVENTS_KEY, "Index events")
    state: _State = request.app[_STATE_KEY]
    if state.event_streams >= MAX_EVENT_STREAMS:
        raise BusyError(f"{MAX_EVENT_STREAMS} event streams are already open; close one and retry.", retry_after=5)
    state.event_streams += 1
    sub = bus.subscribe()
    tokens: TokenSource = request.app[_TOKEN_KEY]
    opened_with = tokens.current().encode("utf-8")  # the request passed the token check with this one

    async def forever():
        while True:
            item = await sub.get()
            if not hmac.compare_digest(tokens.current().encode("utf-8"), opened_with):
                # `cairn token --rotate`: a stream opened with the old token gets nothing more (README).
                yield (
                    "error",
                    {
                        "code": "unauthorized",
                        "message": "The API token was rotated; reconnect with the new one (`cairn token`).",
                    },
                )
                return
            yield item

    async def failure(exc: BaseException) -> None:
        log.error("GET /events failed", exc_info=exc)

    async def closing() -> None:  # the same last event as an /ask stream gets, so a client knows why it ended
        await response.write(sse_event("error", {"code": "shutting_down", "message": "The Cairn daemon is stopping."}))

    try:
        response = _sse_response()
        await response.prepare(request)
        await response.write(b": connected\n\n")
        # Backlog 1: events are read (and the token checked) at most two ahead of the one being written, so after
        # `cairn token --rotate` a slow client gets at most two events read before it (not a 256-event backlog).
        await _pump(request, response, forever(), failure, closing, backlog=1)
    except ConnectionResetError:
        pass
    finally:
        sub.close()
        state.event_streams -= 1
    return response


async def _openapi(request: web.Request) -> web.Response:
    """``GET /openapi.json`` → the OpenAPI 3.1 document of this API (shipped in the package)."""
    from importlib import resources

    text = await asyncio.to_thread(lambda: resources.files("cairn").joinpath("openapi.json").read_text("utf-8"))
    return web.Response(text=text, content_type="application/json")

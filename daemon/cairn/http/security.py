"""The HTTP API's security middlewares, applied to every route in this order after the error middleware:

0. **Connection marks** — the request's connection counts as busy (not idle: neither timed out nor closed
   for room by the :class:`~cairn.connections.ConnectionGuard`) while it is handled.
1. **Host allowlist** — ``127.0.0.1``, ``localhost`` or ``[::1]``, optionally with the port the server
   listens on; anything else is 421 (DNS-rebinding defence).
2. **Origin allowlist** — a request carrying ``Origin`` not in ``config.cors_origins`` (default
   ``app://obsidian.md`` only) is 403. CORS preflights (``OPTIONS`` with ``Origin`` and
   ``Access-Control-Request-Method``) are answered for allowed origins only; ``Access-Control-Allow-Origin``
   echoes the origin, never ``*``.
3. **Bearer token** — ``Authorization: Bearer <token>`` on every route except ``GET /health``, compared
   with :func:`hmac.compare_digest`. A token in the URL query is never accepted (a request carrying one
   is 401). Wrong tokens are throttled (:class:`BadTokenThrottle`).
4. **Body deadline** — a request body must arrive within ``http_body_timeout_s`` (else 408 and the
   connection closes).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from cairn.connections import ConnectionGuard
from cairn.errors import ForbiddenError, MisdirectedRequestError, TooManyRequestsError, UnauthorizedError
from cairn.http.state import SERVICES, STATE, TOKEN

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The app's connection guard (made by ``make_app``; ``serve`` puts its connections behind it).
CONNECTIONS = web.AppKey("connections", ConnectionGuard)

#: Bad-token throttle: this many wrong tokens in a burst, then one more allowed per REFILL seconds.
BAD_TOKEN_BURST, BAD_TOKEN_REFILL_S = 10, 2.0
#: Query parameters that look like a credential: refused, a token must never be in a URL.
_TOKEN_QUERY_PARAMS = frozenset({"token", "access_token", "accesstoken", "api_key", "apikey", "bearer", "auth"})
#: Host names accepted in the Host header (DNS-rebinding defence).
_ALLOWED_HOSTNAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
_HOST_RE = re.compile(r"^(?P<name>\[[0-9a-fA-F:.]+\]|[^:\[\]]+)(?::(?P<port>[0-9]{1,5}))?$")
#: Routes open without a token: (method, path).
_OPEN_ROUTES = frozenset({("GET", "/health"), ("HEAD", "/health")})


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


@web.middleware
async def connection_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Mark the request's connection busy while the request is handled (see :data:`CONNECTIONS`)."""
    guard = request.app.get(CONNECTIONS)
    if guard is None:
        return await handler(request)
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    with guard.busy(peer):
        return await handler(request)


@web.middleware
async def body_deadline_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Read a request body within the body timeout: 408 and the connection closes otherwise. Runs after the
    token check, so a client without the token cannot hold a connection busy by sending a body slowly.
    Larger than the body limit → 413 from the error middleware."""
    guard = request.app.get(CONNECTIONS)
    if guard is None or not request.body_exists:
        return await handler(request)
    try:
        async with asyncio.timeout(guard.limits.body_timeout_s):
            await request.read()  # kept by aiohttp: the route's request.read()/json() get it from memory
    except TimeoutError:
        message = f"The request body did not arrive within {guard.limits.body_timeout_s:g} s; send it at once."
        response = web.Response(
            status=408,
            text=json.dumps({"error": {"code": "request_timeout", "message": message}}),
            content_type="application/json",
        )
        response.force_close()
        return response
    return await handler(request)


@web.middleware
async def host_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """421 unless Host is 127.0.0.1, localhost or [::1], with no port or the port we listen on."""
    raw = request.headers.get("Host")
    match = _HOST_RE.match(raw.strip().lower()) if raw else None
    ok = match is not None and match.group("name") in _ALLOWED_HOSTNAMES
    if ok and match is not None and match.group("port") is not None:
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
async def origin_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """403 for a disallowed ``Origin``; answers CORS preflights for allowed origins."""
    origin = request.headers.get("Origin")
    if origin is None:
        return await handler(request)
    allowed = request.app[SERVICES].config.cors_origins
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
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """401 unless ``Authorization: Bearer <token>`` matches (constant-time); never from the URL."""
    if (request.method, request.path) in _OPEN_ROUTES:
        return await handler(request)
    if any(name.lower() in _TOKEN_QUERY_PARAMS for name in request.query):
        raise UnauthorizedError(
            "A token in the URL is never accepted (URLs end up in logs and history); "
            "send it as the header 'Authorization: Bearer <token>' instead, and rotate it with "
            "`cairn token --vault PATH --rotate`."
        )
    header = request.headers.get("Authorization")
    scheme, _, presented = (header or "").strip().partition(" ")
    expected = request.app[TOKEN].current().encode("utf-8")
    if scheme.lower() != "bearer" or not hmac.compare_digest(presented.strip().encode("utf-8", "replace"), expected):
        if header is not None:
            throttle = request.app[STATE].throttle
            wait = throttle.retry_after()
            if wait > 0:
                raise TooManyRequestsError(
                    f"Too many wrong API tokens; try again in {wait:.0f} s. "
                    "Print this vault's with `cairn token --vault PATH`.",
                    retry_after=int(wait) + 1,
                )
            throttle.failed()
        raise UnauthorizedError(
            "Missing or wrong API token: send the header 'Authorization: Bearer <token>'; "
            "print this vault's token with `cairn token --vault PATH` (each vault has its own)."
        )
    return await handler(request)


async def add_common_headers(request: web.Request, response: web.StreamResponse) -> None:
    """CORS for allowed origins (echoed, never ``*``), ``Vary: Origin``, no sniffing, no caching."""
    origin = request.headers.get("Origin")
    if origin is not None and origin in request.app[SERVICES].config.cors_origins:
        response.headers["Access-Control-Allow-Origin"] = origin
    vary = response.headers.get("Vary")
    if not vary:
        response.headers["Vary"] = "Origin"
    elif "origin" not in vary.lower():
        response.headers["Vary"] = f"{vary}, Origin"
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Cache-Control", "no-store")

"""One JSON error shape for every HTTP failure: ``{"error": {"code", "message"}}`` with the HTTP status.

400 ``bad_request``, 401 ``unauthorized``, 403 ``forbidden``, 404 ``not_found``, 405
``method_not_allowed``, 413 ``payload_too_large``, :class:`~cairn.errors.CairnError` subclasses with their
own ``code``/``http_status``, and anything unexpected as 500 ``internal`` with a generic message (the
traceback goes to the log only, never to the client).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiohttp import web

from cairn.errors import CairnError, TooManyRequestsError
from cairn.http.security import Handler

log = logging.getLogger("cairn.http")

#: Largest accepted request body (bytes); bigger → 413.
MAX_BODY_BYTES = 64 * 1024

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


def error_response(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status, headers=headers)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Translate every failure into ``{"error": {"code", "message"}}`` (never a traceback)."""
    try:
        return await handler(request)
    except CairnError as exc:
        headers = {"WWW-Authenticate": 'Bearer realm="cairn"'} if exc.http_status == 401 else None
        if isinstance(exc, TooManyRequestsError):
            headers = {"Retry-After": str(exc.retry_after)}
        if exc.http_status >= 500:
            log.error("%s %s failed: %s", request.method, request.path, exc.message)
        return error_response(exc.http_status, exc.code, exc.message, headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _http_exception_response(request, exc)
    except Exception:
        log.exception("Unexpected error answering %s %s", request.method, request.path)
        return error_response(500, "internal", "Internal error in the Cairn daemon; see its log for details.")


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
    return error_response(exc.status, code, message, headers or None)

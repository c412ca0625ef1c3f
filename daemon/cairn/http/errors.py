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
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler

from cairn.errors import CairnError, TooManyRequestsError, status_code
from cairn.http.security import Handler
from cairn.logsafe import printable

log = logging.getLogger("cairn.http")

#: Largest accepted request body (bytes); bigger → 413.
MAX_BODY_BYTES = 64 * 1024


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
            log.error("%s %s failed: %s", printable(request.method, 20), printable(request.path, 300), exc.message)
        return error_response(exc.http_status, exc.code, exc.message, headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _http_exception_response(request, exc)
    except Exception:
        log.exception("Unexpected error answering %s %s", printable(request.method, 20), printable(request.path, 300))
        return error_response(500, CairnError.code, "Internal error in the Cairn daemon; see its log for details.")


def _http_exception_response(request: web.Request, exc: web.HTTPException) -> web.Response:
    headers: dict[str, str] = {}
    if exc.status == 404:
        message = (
            f"No route {request.method} {request.path}; GET /openapi.json (with the token) lists every route, "
            "and docs/http-api.md has the table of routes."
        )
    elif exc.status == 405:
        allowed = exc.headers.get("Allow", "")
        headers["Allow"] = allowed
        message = f"Method {request.method} is not allowed on {request.path}; allowed: {allowed or 'none'}."
    elif exc.status == 413:
        message = f"Request body is larger than {MAX_BODY_BYTES} bytes; send a shorter request."
    else:
        message = exc.reason or "Request failed."
    return error_response(exc.status, status_code(exc.status), message, headers or None)


class JsonErrorHandler(RequestHandler):
    """aiohttp's per-connection request handler, with Cairn's JSON error shape for what its HTTP parser refuses
    before any route or middleware runs (an over-long request line or header, a malformed request line,
    a bad header): ``{"error": {"code": "bad_request", "message"}}`` instead of aiohttp's ``text/plain`` page
    quoting the request. The log gets one line naming the kind of error and the peer, never the request
    line (it may hold search text, or forged lines)."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            log.error("Unexpected error in the HTTP layer for a request from %s", request.remote, exc_info=exc)
            text = "Internal error in the Cairn daemon; see its log for details."
        else:
            kind = type(exc).__name__ if exc is not None else "malformed request"
            log.info("refused a malformed HTTP request from %s: %s (HTTP %d)", request.remote, kind, status)
            text = _parser_message(exc)
        if request.writer.output_size > 0:  # a response is already under way: only closing is left
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
        response = error_response(status, status_code(status) if status < 500 else CairnError.code, text)
        response.force_close()
        return response


def _parser_message(exc: BaseException | None) -> str:
    """What the client is told about a request aiohttp's parser refused (never the request text itself)."""
    if isinstance(exc, LineTooLong):
        limit = exc.args[1] if len(exc.args) > 1 else "the limit of"
        return (
            f"The request line or a header is longer than {limit} bytes; send a shorter request "
            "(a long question goes in the JSON body of POST /ask)."
        )
    kind = type(exc).__name__ if exc is not None else "request"
    return f"Malformed HTTP request ({kind}); send a well-formed HTTP/1.1 request."

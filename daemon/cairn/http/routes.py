"""The HTTP API's handlers (docs/design.md, "Interfaces" → HTTP). Requests are parsed with :mod:`cairn.contract`
before any work starts (400/413 JSON errors); blocking work (the query service: SQLite + ONNX; the
library; stats; health) runs in worker threads via :func:`asyncio.to_thread`, never on the event loop.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from aiohttp import web

from cairn import contract
from cairn.answers.events import failure_tail
from cairn.errors import BadRequestError, BusyError, CairnError
from cairn.events import NamedEvent
from cairn.http.errors import MAX_BODY_BYTES
from cairn.http.sse import pump, sse_event, sse_response
from cairn.http.state import SERVICES, STATE, TOKEN

log = logging.getLogger(__name__)

#: Concurrent ``GET /events`` streams; one more is 503 with ``Retry-After``.
MAX_EVENT_STREAMS = 8
_SEARCH_PARAMS = ("q", "topK", "tag", "folder")
_RELATED_PARAMS = ("path", "limit")
_SHUTTING_DOWN = {"code": "shutting_down", "message": "The Cairn daemon is stopping."}
_INTERNAL = "Internal error in the Cairn daemon; see its log for details."


# -- request reading -------------------------------------------------------------------------------


def _only_params(request: web.Request, allowed: Sequence[str], repeatable: Sequence[str] = ()) -> None:
    unknown = sorted({name for name in request.query if name not in allowed})
    if unknown:
        raise BadRequestError(f"Unknown query parameter {unknown[0]!r}; expected: {', '.join(allowed) or 'none'}.")
    for name in allowed:
        if name not in repeatable and len(request.query.getall(name, [])) > 1:
            raise BadRequestError(f"Query parameter {name!r} was given more than once.")


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError):
        raise BadRequestError(
            'The request body is not valid UTF-8 JSON; send a JSON object like {"question": "..."}.'
        ) from None
    except RecursionError:  # e.g. 20,000 nested '[': the parser recurses once per level
        raise BadRequestError(
            'The request body nests arrays or objects too deeply; send a flat JSON object like {"question": "..."}.'
        ) from None


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object; 413 past :data:`MAX_BODY_BYTES`, 400 if not a JSON object."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY_BYTES, actual_size=request.content_length)
    body = _decode(await request.read())  # read() raises 413 past client_max_size, also for chunked bodies
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


async def _optional_body(request: web.Request) -> dict[str, Any]:
    if request.body_exists and (request.content_length or 0) != 0:  # may be read already (body deadline)
        return await json_body(request)
    return {}


# -- search and ask -----------------------------------------------------------------------------------


async def search(request: web.Request) -> web.Response:
    """``GET /search?q=&topK=&tag=&folder=`` → ``{results: [...], elapsedMs, coverage: {notes, embedded, pending}}``."""
    _only_params(request, _SEARCH_PARAMS, repeatable=("tag", "folder"))
    services = request.app[SERVICES]
    wanted = contract.SearchRequest.parse(
        {
            "query": request.query.get("q"),
            "top_k": request.query.get("topK"),
            "tags": request.query.getall("tag", []),
            "folders": request.query.getall("folder", []),
        },
        default_top_k=services.config.top_k,
        text=True,
    )
    result = await asyncio.to_thread(services.search.search, wanted, services.caller(None))
    return web.json_response(contract.search_json(result))


def _failure_tail(error: dict[str, str], elapsed_ms: float) -> bytes:
    """``error`` then ``sources`` ``[]`` then ``done``: how a stream that already started ends in failure
    (:func:`cairn.answers.events.failure_tail`)."""
    return b"".join(event.sse() for event in failure_tail(error["code"], error["message"], elapsed_ms))


def _failure_of(exc: BaseException) -> dict[str, str]:
    if isinstance(exc, CairnError):
        if exc.http_status >= 500:
            log.error("POST /ask failed: %s", exc.message)
        return {"code": exc.code, "message": exc.message}
    log.error("Unexpected error answering POST /ask", exc_info=exc)
    return {"code": "internal", "message": _INTERNAL}


async def _timed(agen: AsyncIterator[NamedEvent], elapsed_ms: Callable[[], float]) -> AsyncIterator[NamedEvent]:
    """``agen``'s events, ``done.elapsedMs`` replaced by the time since the request arrived."""
    async for name, data in agen:
        if name == "done":
            data = {**data, "elapsedMs": elapsed_ms()}
        yield name, data


async def ask(request: web.Request) -> web.StreamResponse:
    """``POST /ask`` ``{question, topK?, tags?, folders?, history?}`` → SSE ``token``… ``sources`` ``done`` (or
    ``error`` ``sources`` ``done``). ``history``: the conversation's earlier turns ``[{question, answer}]``.

    The body is parsed before the stream starts (400/413 JSON errors); beyond
    ``config.max_ask_streams`` open streams → 503 with ``Retry-After``. The stream starts before
    the answer is computed, so a client sees the headers at once.
    ``done.elapsedMs`` is the wall time from the request arriving to ``done`` (ms).
    """
    started = time.monotonic()
    body = await json_body(request)
    services, state = request.app[SERVICES], request.app[STATE]
    wanted = contract.AskRequest.parse(
        {
            "question": body.get("question"),
            "top_k": body.get("topK"),
            "tags": body.get("tags"),
            "folders": body.get("folders"),
            "history": body.get("history"),
        },
        default_top_k=services.config.top_k,
    )
    limit = services.config.max_ask_streams
    if state.ask_streams >= limit:
        raise BusyError(f"{limit} answers are already streaming; try again in a few seconds.", retry_after=5)
    agen = services.answers.stream(wanted, services.caller(None))

    def elapsed_ms() -> float:
        return round((time.monotonic() - started) * 1000, 1)

    response = sse_response()

    async def failure(exc: BaseException) -> None:
        await response.write(_failure_tail(_failure_of(exc), elapsed_ms()))

    async def closing() -> None:
        await response.write(_failure_tail(_SHUTTING_DOWN, elapsed_ms()))

    state.ask_streams += 1
    try:
        await response.prepare(request)
        await pump(request, response, _timed(agen, elapsed_ms), failure, closing)
    except ConnectionResetError:
        log.info("POST /ask: the client went away before the answer was complete.")
    finally:
        state.ask_streams -= 1
        aclose = getattr(agen, "aclose", None)
        if aclose is not None:
            await aclose()
    return response


# -- notes ----------------------------------------------------------------------------------------------


async def note(request: web.Request) -> web.Response:
    """``GET /notes/{path}`` → ``{filePath, title, tags, aliases, frontmatter, content, links, backlinks}``.
    The path is confined to the vault before anything is read (400 ``path_outside_vault``, 404)."""
    _only_params(request, ())
    library = request.app[SERVICES].library
    return web.json_response(dict(await asyncio.to_thread(library.note, request.match_info["path"])))


async def related(request: web.Request) -> web.Response:
    """``GET /related?path=&limit=`` → ``{filePath, links, backlinks, similar}``."""
    _only_params(request, _RELATED_PARAMS)
    wanted = contract.RelatedRequest.parse(
        {"path": request.query.get("path"), "limit": request.query.get("limit")}, text=True
    )
    library = request.app[SERVICES].library
    return web.json_response(dict(await asyncio.to_thread(library.related, wanted.path, wanted.limit)))


async def tags(request: web.Request) -> web.Response:
    """``GET /tags`` → ``{tags: [{tag, count}]}``."""
    _only_params(request, ())
    return web.json_response(dict(await asyncio.to_thread(request.app[SERVICES].library.tags)))


# -- the index ------------------------------------------------------------------------------------------


def _from_the_owner(request: web.Request) -> bool:
    """Whether ``request`` carries the API token (compared in constant time; a wrong one is just not the owner)."""
    scheme, _, presented = (request.headers.get("Authorization") or "").strip().partition(" ")
    expected = request.app[TOKEN].current().encode("utf-8")
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode("utf-8", "replace"), expected)


async def health(request: web.Request) -> web.Response:
    """``GET /health`` (no token) → ``health()`` (a coroutine function, or blocking → worker thread); with the API
    token, ``health_detail()`` when there is one (the owner's view)."""
    services = request.app[SERVICES]
    check = services.health_detail if services.health_detail and _from_the_owner(request) else services.health
    if asyncio.iscoroutinefunction(check):
        result = await check()
    else:
        result = await asyncio.to_thread(check)
    return web.json_response(dict(result))


async def index_stats(request: web.Request) -> web.Response:
    """``GET /index/stats`` → ``{notes, chunks, vectors, pending, lastIngestedAt, watching, paused, errors}``."""
    return web.json_response(dict(await asyncio.to_thread(request.app[SERVICES].indexing.stats)))


async def index_reindex(request: web.Request) -> web.Response:
    """``POST /index/reindex`` ``{path?}`` → 202 ``{queued: true, path}`` (the run happens in the background)."""
    _only_params(request, ())
    body = await _optional_body(request)
    unknown = sorted(set(body) - {"path"})
    if unknown:
        raise BadRequestError(f"Unknown field {unknown[0]!r}; expected: path.")
    path = None if body.get("path") is None else contract.parse_path(body["path"])
    result = await asyncio.to_thread(request.app[SERVICES].indexing.request_reindex, path)
    return web.json_response(dict(result), status=202)


async def _set_paused(request: web.Request, paused: bool) -> web.Response:
    _only_params(request, ())
    body = await _optional_body(request)
    if body:
        raise BadRequestError(f"Unknown field {sorted(body)[0]!r}; this route takes no body.")
    indexing = request.app[SERVICES].indexing
    return web.json_response(dict(await asyncio.to_thread(indexing.set_paused, paused)))


async def index_pause(request: web.Request) -> web.Response:
    """``POST /index/pause`` → ``{paused: true, watching: false}``: file changes are no longer followed."""
    return await _set_paused(request, True)


async def index_resume(request: web.Request) -> web.Response:
    """``POST /index/resume`` → ``{paused: false, watching}``; a reconcile picks up what changed meanwhile."""
    return await _set_paused(request, False)


async def events(request: web.Request) -> web.StreamResponse:
    """``GET /events`` → SSE of index progress: ``progress`` ``{phase, done, total}``, ``indexed``,
    ``removed`` ``{filePath}`` (a note's file is gone; a rename is ``removed`` for the old path), ``error``.
    Beyond :data:`MAX_EVENT_STREAMS` open streams → 503 with ``Retry-After``. A stream opened with a token
    that is then rotated gets one ``unauthorized`` error and ends."""
    _only_params(request, ())
    state = request.app[STATE]
    if state.event_streams >= MAX_EVENT_STREAMS:
        raise BusyError(f"{MAX_EVENT_STREAMS} event streams are already open; close one and retry.", retry_after=5)
    state.event_streams += 1
    sub = request.app[SERVICES].events.subscribe()
    tokens = request.app[TOKEN]
    opened_with = tokens.current().encode("utf-8")  # the request passed the token check with this one

    async def forever() -> AsyncIterator[NamedEvent]:
        while True:
            item = await sub.get()
            if not hmac.compare_digest(tokens.current().encode("utf-8"), opened_with):
                message = "The API token was rotated; reconnect with the new one (`cairn token --vault PATH`)."
                yield "error", {"code": "unauthorized", "message": message}
                return
            yield item

    async def failure(exc: BaseException) -> None:
        log.error("GET /events failed", exc_info=exc)

    response = sse_response()

    async def closing() -> None:  # the same last event as an /ask stream gets, so a client knows why it ended
        await response.write(sse_event("error", _SHUTTING_DOWN))

    try:
        await response.prepare(request)
        await response.write(b": connected\n\n")
        # Backlog 1: events are read (and the token checked) at most two ahead of the one being written, so
        # after `cairn token --rotate` a slow client gets at most two events read before it.
        await pump(request, response, forever(), failure, closing, backlog=1)
    except ConnectionResetError:
        pass
    finally:
        sub.close()
        state.event_streams -= 1
    return response


async def openapi(request: web.Request) -> web.Response:
    """``GET /openapi.json`` → the OpenAPI 3.1 document of this API (shipped in the package)."""
    from importlib import resources

    text = await asyncio.to_thread(lambda: resources.files("cairn").joinpath("openapi.json").read_text("utf-8"))
    return web.Response(text=text, content_type="application/json")

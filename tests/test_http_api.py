"""cairn.http: a real aiohttp server on 127.0.0.1 (random port), a real HTTP client.

Security and error-shape tests exercise the HTTP edge with small real objects that
implement ``search``/``ask`` (empty results, or raising); retrieval and streaming of
real answers use the real query service over an index of ``examples/vault``
(``indexed_sample`` from ``tests/conftest.py``).

Async scenarios run with :func:`asyncio.run` under a timeout; nothing sleeps — waits
are on events with timeouts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cairn.answers import AnswerService
from cairn.answers.events import split_pieces
from cairn.config import NOT_FOUND_ANSWER, Config
from cairn.errors import BadRequestError, ConfigError, NotFoundError, StoreError
from cairn.http import MAX_BODY_BYTES, make_app, serve
from cairn.relevance import RELEVANCE_LABELS
from cairn.search import Ranked, SearchResult
from cairn.services import Services

TOKEN = "test-token-" + "x" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}
OBSIDIAN = "app://obsidian.md"
SCENARIO_TIMEOUT_S = 60


def run(coro) -> Any:
    """Run one async scenario to completion (bounded, so a hang fails instead of blocking CI)."""
    return asyncio.run(asyncio.wait_for(coro, SCENARIO_TIMEOUT_S))


# -- small real stand-ins for the HTTP-edge tests ---------------------------------------


class EmptyQuery:
    """Finds nothing: search → no hits; retrieve → no hits, so the answer service answers the fixed not-found
    text (as the real service does). ``vector_cache``/``embedder``: what an AnswerService holds on to."""

    PER_NOTE_ASK = 3
    vector_cache = None
    embedder = None

    def search(self, q, *, top_k, tags, folders) -> SearchResult:
        return SearchResult(hits=[], elapsed_ms=0.1)

    def retrieve(self, question, *, top_k, tags, folders, **kw):
        return [], None

    def view(self, withhold=None):
        return None

    def ranked(self, query, view, *, top_k, tags, folders, **kw):
        return Ranked(())

    def coverage(self, view):
        return None


class RaisingQuery(EmptyQuery):
    """Every call raises ``error`` (to test the error edge)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def search(self, q, *, top_k, tags, folders):
        raise self.error

    def retrieve(self, question, *, top_k, tags, folders, **kw):
        raise self.error

    def ranked(self, query, view, *, top_k, tags, folders, **kw):
        raise self.error


class RecordingQuery(EmptyQuery):
    """Empty results, remembering the arguments it was called with (and on which thread)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any], str]] = []

    def search(self, q, *, top_k, tags, folders):
        self.calls.append(
            (
                "search",
                q,
                {"top_k": top_k, "tags": tuple(tags), "folders": tuple(folders)},
                threading.current_thread().name,
            )
        )
        return super().search(q, top_k=top_k, tags=tags, folders=folders)

    def ranked(self, query, view, *, top_k, tags, folders, **kw):
        self.calls.append(
            (
                "ask",
                query.text,
                {"top_k": top_k, "tags": tuple(tags), "folders": tuple(folders)},
                threading.current_thread().name,
            )
        )
        return super().ranked(query, view, top_k=top_k, tags=tags, folders=folders, **kw)


class GatedQuery:
    """Delegates to ``inner`` but holds ``ranked`` (the answer's retrieval) until ``release`` is set (proves the
    stream starts first)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()
        self.PER_NOTE_ASK = inner.PER_NOTE_ASK
        self.vector_cache, self.embedder, self.store = inner.vector_cache, inner.embedder, inner.store
        self.view, self.coverage = inner.view, inner.coverage

    def search(self, q, **kw):
        return self.inner.search(q, **kw)

    def ranked(self, query, view, **kw):
        self.entered.set()
        if not self.release.wait(timeout=30):
            raise RuntimeError("test gate never released")
        return self.inner.ranked(query, view, **kw)


HEALTH = {"status": "ok", "store": "ok", "embedder": "ok", "llm": {"configured": False, "reachable": False}}
STATS = {
    "notes": 0,
    "chunks": 0,
    "vectors": 0,
    "pending": 0,
    "lastIngestedAt": None,
    "watching": False,
    "paused": False,
    "errors": [],
}


@dataclass
class Client:
    url: str
    port: int
    session: aiohttp.ClientSession

    def get(self, path: str, **kw):
        return self.session.get(self.url + path, **kw)

    def post(self, path: str, **kw):
        return self.session.post(self.url + path, **kw)

    def options(self, path: str, **kw):
        return self.session.options(self.url + path, **kw)

    def request(self, method: str, path: str, **kw):
        return self.session.request(method, self.url + path, **kw)


class NoLibrary:
    """A library without notes: every read is ``not_found``."""

    def note(self, raw, withhold=None, tally=None):
        raise NotFoundError(f"No note {raw!r} in the index.")

    def related(self, raw, limit=10, withhold=None, tally=None):
        raise NotFoundError(f"No note {raw!r} in the index.")

    def tags(self):
        return {"tags": []}

    def list_notes(self, tag=None, folder=None, limit=50, withhold=None, tally=None):
        return {"notes": [], "total": 0}


class StandInIndexing:
    """Index controls answering from ``stats()``; re-index requests are queued nowhere."""

    def __init__(self, stats: Callable[[], dict] = lambda: dict(STATS)) -> None:
        self.stats = stats

    def request_reindex(self, path=None):
        return {"queued": True, "path": path}

    def set_paused(self, paused):
        return {"paused": paused, "watching": not paused}


class NoEvents:
    """An event source whose subscriptions never yield."""

    def subscribe(self):
        from cairn.events import EventBus

        return EventBus().subscribe()


def stand_in_services(
    query,
    *,
    config: Config | None = None,
    stats: Callable[[], dict] = lambda: dict(STATS),
    health: Callable[[], Any] = lambda: dict(HEALTH),
    answers=None,
    library=None,
    indexing=None,
    events=None,
) -> Services:
    """Services over a stand-in query service (``search``/``retrieve``), answers from the real answer service over
    it; what is not given is a stand-in too."""
    return Services(
        config=config or Config(),
        search=query,
        answers=answers or AnswerService(query),
        library=library or NoLibrary(),
        indexing=indexing or StandInIndexing(stats),
        events=events or NoEvents(),
        health=health,
    )


@asynccontextmanager
async def running(
    query,
    *,
    config: Config | None = None,
    stats: Callable[[], dict] = lambda: dict(STATS),
    health: Callable[[], dict] = lambda: dict(HEALTH),
    answers=None,
) -> AsyncIterator[Client]:
    """The real app on 127.0.0.1:<random port> and a real client session; ``/ask`` answers through ``answers``,
    by default the real answer service over ``query``."""
    services = stand_in_services(query, config=config, stats=stats, health=health, answers=answers)
    app = make_app(services, token=TOKEN)
    server = await serve(app, "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            yield Client(server.url, server.port, session)
    finally:
        await server.close()


async def read_events(response: aiohttp.ClientResponse) -> list[tuple[str, Any]]:
    """Parse an SSE body into ``[(event name, decoded JSON data)]``, checking the framing."""
    events: list[tuple[str, Any]] = []
    name: str | None = None
    data: str | None = None
    async for raw in response.content:
        line = raw.decode("utf-8").rstrip("\n")
        if line.startswith(":"):  # SSE comment (heartbeat)
            continue
        if line == "":
            if name is None and data is None:
                continue  # the blank line after a comment
            assert name is not None and data is not None, "blank line without a complete event"
            events.append((name, json.loads(data)))
            name = data = None
        elif line.startswith("event: "):
            assert name is None
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            assert data is None, "data must fit on one line"
            data = line[len("data: ") :]
        else:
            raise AssertionError(f"unexpected SSE line {line!r}")
    assert name is None and data is None, "stream ended mid-event"
    return events


def assert_error(body: dict, code: str) -> None:
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]


def assert_stream_order(events: list[tuple[str, Any]]) -> None:
    """``token``… then exactly one ``sources`` then ``done`` last."""
    names = [n for n, _ in events]
    assert names.count("sources") == 1 and names.count("done") == 1
    assert names[-1] == "done" and names[-2] == "sources"
    assert set(names[:-2]) <= {"token"}


# -- authentication ---------------------------------------------------------------------


def test_every_route_but_health_needs_the_bearer_token():
    async def scenario():
        async with running(EmptyQuery()) as client:
            for method, path, kw in [
                ("GET", "/search?q=x", {}),
                ("GET", "/index/stats", {}),
                ("POST", "/ask", {"json": {"question": "x"}}),
            ]:
                async with client.request(method, path, **kw) as resp:
                    assert resp.status == 401, path
                    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
                    assert_error(await resp.json(), "unauthorized")

    run(scenario())


def test_a_wrong_token_or_scheme_is_401():
    async def scenario():
        async with running(EmptyQuery()) as client:
            for header in [
                f"Bearer {TOKEN}x",
                f"Bearer {TOKEN[:-1]}",
                "Bearer ",
                f"Basic {TOKEN}",
                TOKEN,
                "Bearer ünïcode",
            ]:
                async with client.get("/index/stats", headers={"Authorization": header}) as resp:
                    assert resp.status == 401, header
                    assert_error(await resp.json(), "unauthorized")
            async with client.get("/index/stats", headers=AUTH) as resp:
                assert resp.status == 200
                assert await resp.json() == STATS

    run(scenario())


def test_a_token_in_the_url_query_is_never_accepted():
    async def scenario():
        async with running(EmptyQuery()) as client:
            for path in [f"/index/stats?token={TOKEN}", f"/search?q=x&access_token={TOKEN}"]:
                async with client.get(path) as resp:
                    assert resp.status == 401, path
                    assert_error(await resp.json(), "unauthorized")
                # even together with a good header: the URL already leaked the token
                async with client.get(path, headers=AUTH) as resp:
                    assert resp.status == 401, path

    run(scenario())


def test_health_is_open_without_a_token():
    async def scenario():
        async with running(EmptyQuery()) as client:
            async with client.get("/health") as resp:
                assert resp.status == 200
                assert await resp.json() == HEALTH

    run(scenario())


def test_the_token_never_reaches_the_logs(caplog):
    caplog.set_level(logging.DEBUG)

    async def scenario():
        async with running(EmptyQuery()) as client:
            async with client.get("/search?q=secret+search+text", headers=AUTH) as resp:
                assert resp.status == 200
            async with client.get("/index/stats", headers={"Authorization": f"Bearer {TOKEN}wrong"}) as resp:
                assert resp.status == 401
            async with client.get(f"/index/stats?token={TOKEN}") as resp:
                assert resp.status == 401

    run(scenario())
    access = [r.getMessage() for r in caplog.records if r.name == "cairn.http.access"]
    assert any(m.startswith("GET /search 200") for m in access), access
    assert TOKEN not in caplog.text
    assert "secret search text" not in caplog.text and "secret+search" not in caplog.text


# -- Host and Origin allowlists, CORS ---------------------------------------------------


def test_a_foreign_host_header_is_421_on_every_route():
    async def scenario():
        async with running(EmptyQuery()) as client:
            for host in [
                "evil.com",
                f"evil.com:{client.port}",
                f"127.0.0.1.evil.com:{client.port}",
                f"127.0.0.1:{client.port + 1 if client.port < 65535 else 1}",
            ]:
                for path in ["/health", "/index/stats"]:
                    async with client.get(path, headers={**AUTH, "Host": host}) as resp:
                        assert resp.status == 421, (host, path)
                        assert_error(await resp.json(), "misdirected_request")

    run(scenario())


def test_loopback_host_names_are_accepted():
    async def scenario():
        async with running(EmptyQuery()) as client:
            for host in [
                f"127.0.0.1:{client.port}",
                f"localhost:{client.port}",
                f"[::1]:{client.port}",
                "localhost",
                "LOCALHOST",
            ]:
                async with client.get("/index/stats", headers={**AUTH, "Host": host}) as resp:
                    assert resp.status == 200, host

    run(scenario())


def test_a_foreign_origin_is_403_and_gets_no_cors_headers():
    async def scenario():
        async with running(EmptyQuery()) as client:
            for origin in ["https://evil.com", "null", "app://obsidian.md.evil.com"]:
                async with client.get("/index/stats", headers={**AUTH, "Origin": origin}) as resp:
                    assert resp.status == 403, origin
                    assert "Access-Control-Allow-Origin" not in resp.headers
                    assert_error(await resp.json(), "forbidden")
                async with client.options(
                    "/search", headers={"Origin": origin, "Access-Control-Request-Method": "GET"}
                ) as resp:
                    assert resp.status == 403
                    assert "Access-Control-Allow-Origin" not in resp.headers

    run(scenario())


def test_obsidian_preflight_is_answered_with_exact_cors_headers():
    async def scenario():
        async with running(EmptyQuery()) as client:
            for path, method in [("/ask", "POST"), ("/search", "GET")]:
                async with client.options(
                    path,
                    headers={
                        "Origin": OBSIDIAN,
                        "Access-Control-Request-Method": method,
                        "Access-Control-Request-Headers": "authorization, content-type",
                    },
                ) as resp:
                    assert resp.status == 204
                    assert resp.headers["Access-Control-Allow-Origin"] == OBSIDIAN
                    assert resp.headers["Access-Control-Allow-Methods"] == "GET, POST"
                    assert resp.headers["Access-Control-Allow-Headers"] == "Authorization, Content-Type"
                    assert resp.headers["Vary"] == "Origin"
            # the actual request from Obsidian gets the echoed origin too, never '*'
            async with client.get("/search?q=x", headers={**AUTH, "Origin": OBSIDIAN}) as resp:
                assert resp.status == 200
                assert resp.headers["Access-Control-Allow-Origin"] == OBSIDIAN
                assert "Origin" in resp.headers["Vary"]
            # and so does an error, so the plugin can read it
            async with client.get("/search?q=x", headers={"Origin": OBSIDIAN}) as resp:
                assert resp.status == 401
                assert resp.headers["Access-Control-Allow-Origin"] == OBSIDIAN

    run(scenario())


def test_configured_cors_origins_replace_the_default():
    async def scenario():
        config = Config(cors_origins=("http://localhost:5173",))
        async with running(EmptyQuery(), config=config) as client:
            async with client.get("/health", headers={"Origin": "http://localhost:5173"}) as resp:
                assert resp.status == 200
                assert resp.headers["Access-Control-Allow-Origin"] == "http://localhost:5173"
            async with client.get("/health", headers={"Origin": OBSIDIAN}) as resp:
                assert resp.status == 403

    run(scenario())


# -- one error shape --------------------------------------------------------------------


def test_unknown_route_is_a_404_json_error():
    async def scenario():
        async with running(EmptyQuery()) as client:
            async with client.get("/nope", headers=AUTH) as resp:
                assert resp.status == 404
                assert resp.content_type == "application/json"
                body = await resp.json()
                assert_error(body, "not_found")
                assert "/openapi.json" in body["error"]["message"]  # a pointer to a file the user has

    run(scenario())


def test_wrong_method_is_a_405_json_error_with_allow():
    async def scenario():
        async with running(EmptyQuery()) as client:
            async with client.get("/ask", headers=AUTH) as resp:
                assert resp.status == 405
                assert resp.headers["Allow"] == "POST"
                assert_error(await resp.json(), "method_not_allowed")
            async with client.post("/search", headers=AUTH) as resp:
                assert resp.status == 405
                assert_error(await resp.json(), "method_not_allowed")

    run(scenario())


@pytest.mark.parametrize(
    "body",
    [
        {"question": ""},
        {"question": "   "},
        {"question": 42},
        {},
        {"question": "q" * 2001},
        {"question": "ok", "topK": 0},
        {"question": "ok", "topK": 51},
        {"question": "ok", "topK": "5"},
        {"question": "ok", "topK": 2.5},
        {"question": "ok", "topK": True},
        {"question": "ok", "tags": "project"},
        {"question": "ok", "tags": [1]},
        {"question": "ok", "folders": [""]},
        ["question"],
    ],
)
def test_invalid_ask_bodies_are_400_before_any_stream(body):
    async def scenario():
        query = RecordingQuery()
        async with running(query) as client:
            async with client.post("/ask", json=body, headers=AUTH) as resp:
                assert resp.status == 400
                assert resp.content_type == "application/json"
                assert_error(await resp.json(), "bad_request")
        assert query.calls == []

    run(scenario())


def test_a_body_that_is_not_json_is_400():
    async def scenario():
        async with running(EmptyQuery()) as client:
            for data in [b"question=hi", b"\xff\xfe", b""]:
                async with client.post("/ask", data=data, headers={**AUTH, "Content-Type": "application/json"}) as resp:
                    assert resp.status == 400
                    assert_error(await resp.json(), "bad_request")

    run(scenario())


@pytest.mark.parametrize(
    "path",
    [
        "/search?topK=0",  # no words (the recent notes: docs/design.md, "Contract" → Recent notes) is no excuse
        "/search?q=&tag=",
        "/search?q=x&topK=0",
        "/search?q=x&topK=51",
        "/search?q=x&topK=abc",
        "/search?q=x&top_k=5",
        "/search?q=x&q=y",
        "/search?q=x&tag=",
    ],
)
def test_invalid_search_parameters_are_400(path):
    async def scenario():
        async with running(EmptyQuery()) as client:
            async with client.get(path, headers=AUTH) as resp:
                assert resp.status == 400, path
                assert_error(await resp.json(), "bad_request")

    run(scenario())


def test_a_body_over_64_kib_is_413():
    async def scenario():
        async with running(RecordingQuery()) as client:
            big = json.dumps({"question": "x", "padding": "p" * MAX_BODY_BYTES}).encode()
            async with client.post("/ask", data=big, headers={**AUTH, "Content-Type": "application/json"}) as resp:
                assert resp.status == 413
                assert_error(await resp.json(), "payload_too_large")

            async def chunked():  # no Content-Length: the limit still holds while reading
                for _ in range(5):
                    yield b"p" * (MAX_BODY_BYTES // 4)

            async with client.post(
                "/ask", data=chunked(), headers={**AUTH, "Content-Type": "application/json"}
            ) as resp:
                assert resp.status == 413
                assert_error(await resp.json(), "payload_too_large")

    run(scenario())


def test_unexpected_errors_are_a_generic_500_without_traceback(caplog):
    caplog.set_level(logging.ERROR)

    async def scenario():
        async with running(RaisingQuery(RuntimeError("kaboom /home/owner/secret-note.md"))) as client:
            async with client.get("/search?q=x", headers=AUTH) as resp:
                assert resp.status == 500
                text = await resp.text()
        body = json.loads(text)
        assert_error(body, "internal")
        assert "kaboom" not in text and "Traceback" not in text and "secret-note" not in text

    run(scenario())
    assert "Traceback" in caplog.text and "kaboom" in caplog.text  # the log has it


def test_cairn_errors_map_to_their_code_and_status():
    async def scenario():
        async with running(RaisingQuery(StoreError("Index database is locked; retry."))) as client:
            async with client.get("/search?q=x", headers=AUTH) as resp:
                assert resp.status == 503
                body = await resp.json()
        assert body == {"error": {"code": "store_error", "message": "Index database is locked; retry."}}

    run(scenario())


def test_failing_stats_or_health_callables_become_json_errors():
    def broken() -> dict:
        raise RuntimeError("boom")

    async def scenario():
        async with running(EmptyQuery(), stats=broken, health=broken) as client:
            for path in ["/index/stats", "/health"]:
                async with client.get(path, headers=AUTH) as resp:
                    assert resp.status == 500
                    assert_error(await resp.json(), "internal")

    run(scenario())


# -- query plumbing ---------------------------------------------------------------------


def test_search_passes_validated_arguments_and_runs_off_the_event_loop():
    async def scenario():
        query = RecordingQuery()
        async with running(query) as client:
            async with client.get(
                "/search",
                params=[
                    ("q", "garden plan"),
                    ("topK", "5"),
                    ("tag", "project"),
                    ("tag", "area/home"),
                    ("folder", "Notes"),
                ],
                headers=AUTH,
            ) as resp:
                assert resp.status == 200
                assert await resp.json() == {"results": [], "elapsedMs": 0.1}
            async with client.post("/ask", json={"question": "why?", "tags": ["x"]}, headers=AUTH) as resp:
                await read_events(resp)
        return query.calls, threading.current_thread().name

    calls, loop_thread = run(scenario())
    assert calls[0][:3] == (
        "search",
        "garden plan",
        {"top_k": 5, "tags": ("project", "area/home"), "folders": ("Notes",)},
    )
    assert calls[1][:3] == ("ask", "why?", {"top_k": Config().top_k, "tags": ("x",), "folders": ()})
    assert all(thread != loop_thread for *_, thread in calls)


def test_split_pieces_join_back_to_the_exact_text():
    for text in ["", "one", "  lead and trail  ", "Line one.\nLine two [1].\n\n- item", "tabs\tand\u00a0nbsp é"]:
        pieces = split_pieces(text)
        assert "".join(pieces) == text
        assert all(pieces)
    assert len(split_pieces("a b c d")) == 4


def test_serve_refuses_a_non_loopback_host():
    async def scenario():
        app = make_app(stand_in_services(EmptyQuery()), token=TOKEN)
        with pytest.raises(ConfigError, match="loopback"):
            await serve(app, "0.0.0.0", 0)

    run(scenario())


def test_an_empty_token_is_refused_at_startup():
    with pytest.raises(ConfigError):
        make_app(stand_in_services(EmptyQuery()), token="")


# -- SSE /ask ---------------------------------------------------------------------------


def test_ask_errors_after_the_stream_started_are_error_then_sources_then_done():
    async def scenario():
        for error, code in [
            (BadRequestError("question is empty"), "bad_request"),
            (RuntimeError("kaboom"), "internal"),
        ]:
            async with running(RaisingQuery(error)) as client:
                async with client.post("/ask", json={"question": "hello"}, headers=AUTH) as resp:
                    assert resp.status == 200
                    assert resp.headers["Content-Type"].startswith("text/event-stream")
                    events = await read_events(resp)
            assert [n for n, _ in events] == ["error", "sources", "done"]
            assert events[0][1]["code"] == code and "kaboom" not in events[0][1]["message"]
            assert events[1][1] == []
            assert events[2][1]["grounded"] is False and isinstance(events[2][1]["elapsedMs"], float)

    run(scenario())


def test_a_not_found_answer_streams_the_fixed_text():
    async def scenario():
        async with running(EmptyQuery()) as client:
            async with client.post("/ask", json={"question": "anything"}, headers=AUTH) as resp:
                events = await read_events(resp)
        assert_stream_order(events)
        assert "".join(d["text"] for n, d in events if n == "token") == NOT_FOUND_ANSWER
        assert events[-2] == ("sources", [])
        assert events[-1][1]["notFound"] is True and events[-1][1]["grounded"] is False

    run(scenario())


def _sample(request):
    """The real query service over an index of examples/vault (from tests/conftest.py)."""
    return request.getfixturevalue("indexed_sample")


SAMPLE_VAULT = Path(__file__).resolve().parents[1] / "examples" / "vault"


def _sample_question() -> tuple[str, bool]:
    """A question about the first titled note of examples/vault, and whether an answer must be found
    (False only while the sample vault has no titled note)."""
    for path in sorted(SAMPLE_VAULT.rglob("*.md")):
        if any(part.startswith(".") for part in path.relative_to(SAMPLE_VAULT).parts):
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("# ") and line[2:].strip():
                return f"What do my notes say about {line[2:].strip()}?", True
    return "How do I set up the project?", False


SAMPLE_QUESTION, SAMPLE_MUST_BE_FOUND = _sample_question()


def test_ask_streams_tokens_then_sources_then_done_from_the_real_service(request):
    config, query_service, stats_fn, health_fn = _sample(request)
    expected = asyncio.run(AnswerService(query_service).answer(SAMPLE_QUESTION, top_k=8, tags=(), folders=()))

    async def scenario():
        async with running(query_service, config=config, stats=stats_fn, health=health_fn) as client:
            async with client.post("/ask", json={"question": SAMPLE_QUESTION, "topK": 8}, headers=AUTH) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
                assert resp.headers["Cache-Control"] == "no-cache"
                assert resp.headers["X-Accel-Buffering"] == "no"
                return await read_events(resp)

    events = run(scenario())
    assert_stream_order(events)
    if SAMPLE_MUST_BE_FOUND:
        assert not expected.not_found and expected.sources, SAMPLE_QUESTION
    tokens = [d["text"] for n, d in events if n == "token"]
    assert "".join(tokens) == expected.text
    if len(expected.text.split()) > 1:
        assert len(tokens) > 1  # incremental, not one blob
    assert events[-2][1] == [s.to_json() for s in expected.sources]
    assert {k: events[-1][1][k] for k in ("grounded", "notFound")} == {
        "grounded": expected.grounded,
        "notFound": expected.not_found,
    }
    assert events[-1][1]["elapsedMs"] >= 0


def test_ask_scoped_to_an_unknown_tag_streams_not_found_from_the_real_service(request):
    config, query_service, stats_fn, health_fn = _sample(request)

    async def scenario():
        async with running(query_service, config=config, stats=stats_fn, health=health_fn) as client:
            body = {"question": SAMPLE_QUESTION, "tags": ["no-such-tag-anywhere"], "folders": []}
            async with client.post("/ask", json=body, headers=AUTH) as resp:
                return await read_events(resp)

    events = run(scenario())
    assert_stream_order(events)
    assert "".join(d["text"] for n, d in events if n == "token") == NOT_FOUND_ANSWER
    assert events[-2] == ("sources", [])
    assert events[-1][1]["notFound"] is True


def test_search_returns_the_real_services_results(request):
    config, query_service, stats_fn, health_fn = _sample(request)
    expected = query_service.search(SAMPLE_QUESTION, top_k=5, tags=(), folders=()).to_json()

    async def scenario():
        async with running(query_service, config=config, stats=stats_fn, health=health_fn) as client:
            async with client.get("/search", params={"q": SAMPLE_QUESTION, "topK": "5"}, headers=AUTH) as resp:
                assert resp.status == 200
                body = await resp.json()
            async with client.get("/index/stats", headers=AUTH) as resp:
                stats = await resp.json()
            async with client.get("/health") as resp:
                health = await resp.json()
        return body, stats, health

    body, stats, health = run(scenario())
    assert body["results"] == expected["results"]
    assert isinstance(body["elapsedMs"], (int, float))
    # memory is a live reading (RSS moves by a fraction of a MB between two reads): same parts, not same figures
    now = json.loads(json.dumps(stats_fn()))
    memory, now_memory = stats.pop("memory"), now.pop("memory")
    assert stats == now
    assert set(memory) == set(now_memory) and set(memory["parts"]) == set(now_memory["parts"])
    assert set(health) >= {"status", "store", "embedder", "llm"}


FEED_STARTER = "How do I feed my sourdough starter?"


def test_search_results_say_in_a_word_how_relevant_each_hit_is(request):
    """``relevance`` next to the raw ``score``: a passage about the query is ``strong``; one that holds the query's
    rare word without being close in meaning is ``keyword`` ("exact words"), and only a passage holding the word is
    (examples/vault: "hooch" is in Kitchen/Sourdough starter.md alone, "banneton" in Kitchen/Sourdough.md)."""
    config, query_service, stats_fn, health_fn = _sample(request)

    async def scenario():
        async with running(query_service, config=config, stats=stats_fn, health=health_fn) as client:
            found = {}
            for q in (FEED_STARTER, "hooch", "banneton"):
                async with client.get("/search", params={"q": q, "topK": "5"}, headers=AUTH) as resp:
                    assert resp.status == 200
                    found[q] = (await resp.json())["results"]
            return found

    found = run(scenario())
    for results in found.values():
        assert results and all(r["relevance"] in RELEVANCE_LABELS and isinstance(r["score"], float) for r in results)
    assert found[FEED_STARTER][0]["relevance"] == "strong", found[FEED_STARTER][0]
    holding = {r["filePath"] for r in found["hooch"] if "hooch" in (SAMPLE_VAULT / r["filePath"]).read_text().lower()}
    assert holding == {"Kitchen/Sourdough starter.md"}
    assert {r["filePath"] for r in found["hooch"] if r["relevance"] == "keyword"} == holding, found["hooch"]
    # A word the embedding model does not know: found by its words alone, and said so rather than "weak".
    assert (found["banneton"][0]["filePath"], found["banneton"][0]["relevance"]) == ("Kitchen/Sourdough.md", "keyword")


def test_ask_stream_starts_before_the_answer_is_ready(request):
    config, query_service, stats_fn, health_fn = _sample(request)
    gated = GatedQuery(query_service)

    async def scenario():
        async with running(gated, config=config, stats=stats_fn, health=health_fn) as client:
            async with client.post("/ask", json={"question": SAMPLE_QUESTION}, headers=AUTH) as resp:
                # headers arrived while the query service is still held
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                assert await asyncio.to_thread(gated.entered.wait, 10)
                # the event loop is not blocked by the held query: other requests are served meanwhile
                async with client.get("/health") as health:
                    assert health.status == 200
                assert not gated.release.is_set()
                gated.release.set()
                return await read_events(resp)

    try:
        events = run(scenario())
    finally:
        gated.release.set()
    assert_stream_order(events)


def test_a_client_leaving_mid_answer_does_not_break_the_server(request):
    config, query_service, stats_fn, health_fn = _sample(request)
    gated = GatedQuery(query_service)

    async def scenario():
        async with running(gated, config=config, stats=stats_fn, health=health_fn) as client:
            resp = await client.post("/ask", json={"question": SAMPLE_QUESTION}, headers=AUTH)
            assert resp.status == 200
            assert await asyncio.to_thread(gated.entered.wait, 10)
            resp.close()  # the client goes away before any token
            gated.release.set()
            for _ in range(3):  # the server keeps answering, streams included
                async with client.post("/ask", json={"question": SAMPLE_QUESTION}, headers=AUTH) as again:
                    assert_stream_order(await read_events(again))

    try:
        run(scenario())
    finally:
        gated.release.set()


def test_concurrent_requests_against_the_real_service_all_succeed(request):
    config, query_service, stats_fn, health_fn = _sample(request)

    async def one_ask(client):
        async with client.post("/ask", json={"question": SAMPLE_QUESTION, "topK": 4}, headers=AUTH) as resp:
            return await read_events(resp)

    async def one_search(client):
        async with client.get("/search", params={"q": SAMPLE_QUESTION}, headers=AUTH) as resp:
            assert resp.status == 200
            return await resp.json()

    async def scenario():
        async with running(query_service, config=config, stats=stats_fn, health=health_fn) as client:
            return await asyncio.gather(*[one_ask(client) for _ in range(4)], *[one_search(client) for _ in range(4)])

    results = run(scenario())
    for events in results[:4]:
        assert_stream_order(events)
        assert events[-2] == results[0][-2]  # same sources every time
    assert all(r["results"] == results[4]["results"] for r in results[4:])


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_curl_n_streams_the_ask_events(request):
    config, query_service, stats_fn, health_fn = _sample(request)

    async def scenario():
        async with running(query_service, config=config, stats=stats_fn, health=health_fn) as client:
            proc = await asyncio.create_subprocess_exec(
                "curl",
                "-N",
                "-sS",
                "--fail-with-body",
                "--noproxy",
                "*",
                "--max-time",
                "30",
                "-H",
                f"Authorization: Bearer {TOKEN}",
                "-H",
                "Content-Type: application/json",
                "-d",
                json.dumps({"question": SAMPLE_QUESTION}),
                client.url + "/ask",
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={k: v for k, v in os.environ.items() if "proxy" not in k.lower()},
            )
            out, err = await proc.communicate()
            assert proc.returncode == 0, err.decode()
            return out.decode("utf-8")

    text = run(scenario())
    frames = [f for f in text.split("\n\n") if f]
    names = [f.split("\n")[0].removeprefix("event: ") for f in frames]
    assert names[-2:] == ["sources", "done"] and set(names[:-2]) <= {"token"}
    for frame in frames:
        event, data = frame.split("\n")
        assert event.startswith("event: ") and data.startswith("data: ")
        json.loads(data.removeprefix("data: "))

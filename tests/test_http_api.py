"""cairn.http: a real aiohttp server on 127.0.0.1 (random port), a real HTTP client (its security:
tests/test_http_security.py).

Error-shape and plumbing tests exercise the HTTP edge with small real objects that
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
from pathlib import Path

import pytest

from cairn.answers import AnswerService
from cairn.answers.events import split_pieces
from cairn.config import NOT_FOUND_ANSWER, Config
from cairn.errors import BadRequestError, StoreError
from cairn.http import MAX_BODY_BYTES
from cairn.relevance import RELEVANCE_LABELS
from support.http_client import AUTH, TOKEN, assert_error, assert_stream_order, read_events, running
from support.requests import ask_request, search_request
from support.stand_ins import EmptyQuery, GatedQuery, RaisingQuery, RecordingQuery
from support.waits import run

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
    expected = asyncio.run(
        AnswerService(query_service).answer(ask_request(SAMPLE_QUESTION, top_k=8, tags=(), folders=()))
    )

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
    expected = query_service.search(search_request(SAMPLE_QUESTION, top_k=5, tags=(), folders=())).to_json()

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

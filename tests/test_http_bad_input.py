"""Input that is valid JSON (or a valid argv) but not text Cairn can use is a 400 / a clear message, never an
``internal`` error: a lone UTF-16 surrogate escape (``"\\ud800"``), a byte that is not UTF-8 on the command line
(Python's surrogateescape: ``caf\\udce9``), and a deeply nested JSON body. And ``/events`` streams end with the
same ``shutting_down`` event as ``/ask`` streams when the daemon stops.

Real server on 127.0.0.1, real index of the sample vault, real ``cairn`` process for the CLI.
"""

from __future__ import annotations

import asyncio
import json
import subprocess

import aiohttp
import pytest

from cairn.answers import AnswerService
from cairn.errors import BadRequestError
from cairn.http import make_app, serve
from support.cairns import services_of
from support.cli import TIMEOUT_S, cairn_env, cairn_executable
from support.http_client import AUTH, TOKEN, assert_error, read_events
from support.requests import ask_request, search_request
from support.stand_ins import StandInIndexing
from support.waits import run

JSON = {**AUTH, "Content-Type": "application/json"}


async def _post(url: str, path: str, raw: str) -> tuple[int, str, dict | None]:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + path, data=raw.encode("utf-8"), headers=JSON) as resp:
            text = await resp.text()
            return (
                resp.status,
                resp.content_type,
                (json.loads(text) if resp.content_type == "application/json" else None),
            )


def _app(cairn):
    return make_app(services_of(cairn, indexing=StandInIndexing(cairn.indexing.stats)), token=TOKEN)


def post_to_daemon(cairn, path: str, raw: str) -> tuple[int, str, dict | None]:
    """POST ``raw`` (JSON text, sent as is) to ``path`` of a real daemon over ``cairn``: (status, type, body)."""

    async def scenario():
        server = await serve(_app(cairn), "127.0.0.1", 0)
        try:
            return await _post(server.url, path, raw)
        finally:
            await server.close()

    return run(scenario())


@pytest.mark.parametrize(
    "raw",
    [
        '{"question": "garlic \\ud800"}',  # a lone high surrogate in the question
        '{"question": "garlic \\udce9"}',  # a lone low surrogate
        '{"question": "garlic", "tags": ["a\\ud800"]}',  # ... in a scope
        '{"question": "garlic", "folders": ["\\udfff"]}',
        '{"question": "garlic", "\\ud800": 1}',  # ... in a key
    ],
)
def test_a_lone_surrogate_in_an_ask_body_is_400_with_the_one_error_shape(sample_cairn, raw):
    status, ctype, body = post_to_daemon(sample_cairn, "/ask", raw)
    assert (status, ctype) == (400, "application/json")
    assert_error(body, "bad_request")
    assert "surrogate" in body["error"]["message"]


def test_a_lone_surrogate_in_a_reindex_path_is_400(sample_cairn):
    status, _, body = post_to_daemon(sample_cairn, "/index/reindex", '{"path": "Garden/\\ud800.md"}')
    assert status == 400
    assert_error(body, "bad_request")


@pytest.mark.parametrize("depth", [20_000, 3_000])
def test_a_deeply_nested_json_body_is_400_not_a_500(sample_cairn, depth):
    raw = '{"question": ' + "[" * depth + "]" * depth + "}"
    status, _, body = post_to_daemon(sample_cairn, "/ask", raw)
    assert status == 400
    assert_error(body, "bad_request")


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.search(search_request("garlic \ud800")),
        lambda q: asyncio.run(AnswerService(q).answer(ask_request("garlic \ud800"))),
        lambda q: q.search(search_request("garlic", tags=["\ud800"])),
        lambda q: q.search(search_request("garlic", folders=["Garden\udce9"])),
        lambda q: q.retrieve("caf\udce9"),
    ],
)
def test_the_query_service_refuses_surrogates_with_bad_request(sample_cairn, call):
    """The one check every adapter (HTTP, MCP tools, CLI) goes through, before the tokenizer or SQLite."""
    with pytest.raises(BadRequestError) as err:
        call(sample_cairn.query)
    assert "U+D" in err.value.message or "0xE9" in err.value.message


def test_the_query_service_names_a_non_utf8_byte_from_the_command_line(sample_cairn):
    with pytest.raises(BadRequestError) as err:
        sample_cairn.query.search(search_request("caf\udce9"))
    assert "0xE9" in err.value.message and "UTF-8" in err.value.message and "character 4" in err.value.message


def test_a_script_in_the_same_process_may_search_with_a_plain_string_checked_as_the_edges_check_it(sample_cairn):
    """``search("words")`` is the request the edge contract parses from those words: the same hits, and the same
    clear error for what the edges refuse."""
    query = sample_cairn.query
    plain, parsed = query.search("garlic cloves"), query.search(search_request("garlic cloves"))
    assert plain.hits and [h.chunk_id for h in plain.hits] == [h.chunk_id for h in parsed.hits]
    with pytest.raises(BadRequestError) as err:
        query.search("caf\udce9")
    assert "0xE9" in err.value.message


def test_cairn_search_with_a_non_utf8_argument_says_so_clearly(tmp_path):
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "garden.md").write_text("# Garden\nGarlic is planted 5 cm deep in autumn.\n", encoding="utf-8")
    proc = subprocess.run(
        [cairn_executable(), "search", b"caf\xe9", "--vault", str(vault), "--json"],
        env=cairn_env(tmp_path / "home"),
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode != 0 and proc.stdout == b""
    assert "0xE9" in err and "UTF-8" in err, err
    assert "TypeError" not in err and "unexpected" not in err, err


def test_event_streams_end_with_shutting_down_when_the_daemon_stops(sample_cairn):
    async def scenario():
        server = await serve(_app(sample_cairn), "127.0.0.1", 0)
        async with aiohttp.ClientSession() as session:
            async with session.get(server.url + "/events", headers=AUTH) as resp:
                assert resp.status == 200
                assert await asyncio.wait_for(resp.content.readline(), 10) == b": connected\n"
                closing = asyncio.ensure_future(server.close())
                events = await asyncio.wait_for(read_events(resp), 10)
                await closing
                return events

    events = run(scenario())
    assert events and events[-1][0] == "error"
    assert events[-1][1] == {"code": "shutting_down", "message": "The Cairn daemon is stopping."}


@pytest.mark.parametrize(
    "path",
    [
        "/notes/Garden/%ED%A0%80.md",
        "/related?path=Garden/%ED%A0%80.md",
        "/search?q=garlic%ED%A0%80",
        "/search?q=garlic&tag=%ED%A0%80",
        "/search?q=caf%E9",
        "/notes/caf%E9.md",
    ],
)
def test_percent_escapes_that_are_not_utf8_in_get_routes_are_never_internal(sample_cairn, path):
    """URLs cannot carry a surrogate: invalid UTF-8 in a percent-escape decodes to U+FFFD, so these are plain
    not-found (or empty) answers, never a 500."""

    async def scenario():
        server = await serve(_app(sample_cairn), "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(server.url + path, headers=AUTH) as resp:
                    return resp.status, await resp.json()
        finally:
            await server.close()

    status, body = run(scenario())
    assert status in (200, 400, 404), (status, body)
    if status != 200:
        assert body["error"]["code"] != "internal"

"""Hostile bytes on the plugin API's wire: control characters in a request path (forged log lines), requests
aiohttp's own parser refuses (an over-long request line or header), connections that never finish their
headers or body, more connections than the cap; and the MCP server's header and body deadlines.

Real servers on 127.0.0.1 over the real indexes of the sample and canary vaults, spoken to through raw
sockets. Each wait is bounded by a read timeout (a bound on a hang, not a timing assertion); the daemon's
timeouts are lowered through its config.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging

import pytest

from cairn.http import make_app, serve
from cairn.http.app import MAX_REQUEST_LINE
from support.cairns import services_of
from support.http_client import TOKEN
from support.stand_ins import StandInIndexing
from support.waits import run

#: Longest wait for the server's answer or for it to close a connection.
READ_TIMEOUT_S = 30.0


async def exchange(port: int, data: bytes, *, timeout_s: float = READ_TIMEOUT_S) -> bytes:
    """Send ``data`` on a fresh connection and return all the server sends until it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout_s)
    finally:
        writer.close()


def parse(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, body) of one HTTP/1.1 response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def with_daemon(cairn, scenario, **config):
    """Run ``scenario(port)`` against a real server over ``cairn`` with ``config`` changes; return its result."""
    services = services_of(cairn, indexing=StandInIndexing(cairn.indexing.stats))
    services = dataclasses.replace(services, config=cairn.config.replace(**config))

    async def go():
        server = await serve(make_app(services, token=TOKEN), "127.0.0.1", 0)
        try:
            return await scenario(server.port)
        finally:
            await server.close()

    return run(go())


# -- item 11: log forging ----------------------------------------------------------------------------------------
FORGING_PATHS = [
    b"/health%0aFORGED-one",
    b"/health%0d%0aFORGED-two",
    b"/nope%0d%0a2026-12-01%2000:00:00,000%20ERROR%20cairn.http:%20FORGED-three",
    b"/notes/x%E2%80%A8FORGED-four",  # U+2028 LINE SEPARATOR
    b"/notes/y%C2%85FORGED-five",  # U+0085 NEXT LINE
    b"/search%0bFORGED-six%0c%1b[2J",
]


def test_control_characters_in_a_request_path_never_start_a_log_line(sample_cairn, caplog):
    caplog.set_level(logging.DEBUG)

    async def scenario(port):
        out = []
        for path in FORGING_PATHS:
            out.append(
                await exchange(port, b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            )
        return out

    answers = with_daemon(sample_cairn, scenario)
    assert all(parse(raw)[0] in (200, 401, 404) for raw in answers)
    messages = [r.getMessage() for r in caplog.records if "FORGED" in r.getMessage()]
    assert len(messages) >= len(FORGING_PATHS)  # every request was logged (its access line) ...
    for message in messages:
        assert message.splitlines() == [message], message  # ... each as one line
    assert any("\\x0a" in m for m in messages) and any("\\u2028" in m for m in messages)


# -- item 13: what aiohttp's parser refuses ----------------------------------------------------------------------
MARKER = "QUERYTEXT"


@pytest.mark.parametrize(
    "request_bytes",
    [
        f"GET /search?q={MARKER * (MAX_REQUEST_LINE // len(MARKER) + 10)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        f"GET /search?q=bees HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: {MARKER * 1000}\r\n\r\n",
        f"GET /search?q={MARKER}\x01 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    ],
    ids=["request line too long", "header too long", "control byte in the request line"],
)
def test_a_request_the_http_parser_refuses_is_a_json_400_that_stays_out_of_the_log(sample_cairn, caplog, request_bytes):
    caplog.set_level(logging.DEBUG)

    async def scenario(port):
        return await exchange(port, request_bytes.encode("latin-1"))

    status, headers, body = parse(with_daemon(sample_cairn, scenario))
    assert status == 400
    assert headers["content-type"].startswith("application/json")
    error = json.loads(body)["error"]
    assert error["code"] == "bad_request" and MARKER not in error["message"]
    assert MARKER not in caplog.text
    assert any("refused a malformed HTTP request" in r.getMessage() for r in caplog.records)


# -- item 7: header and body deadlines ---------------------------------------------------------------------------
def test_a_connection_that_never_finishes_its_headers_is_closed_after_the_header_timeout(sample_cairn):
    async def scenario(port):
        partial = await exchange(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        silent = await exchange(port, b"")
        healthy = await exchange(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        return partial, silent, healthy

    partial, silent, healthy = with_daemon(sample_cairn, scenario, http_header_timeout_s=0.5)
    assert partial == b"" and silent == b""  # closed by the server, not by the read timeout
    assert parse(healthy)[0] == 200


def test_a_body_that_never_arrives_is_a_json_408_and_the_connection_closes(sample_cairn):
    head = (
        "POST /ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Length: 200\r\n\r\n"
    )

    async def scenario(port):
        return await exchange(port, head.encode() + b'{"question": "bees')

    status, headers, body = parse(with_daemon(sample_cairn, scenario, http_body_timeout_s=0.5))
    assert status == 408 and headers["content-type"].startswith("application/json")
    assert json.loads(body)["error"]["code"] == "request_timeout"


def test_a_request_in_progress_is_never_cut_to_make_room_for_new_connections(sample_cairn):
    """At the connection cap, a new connection closes the longest idle one; an open SSE stream stays."""

    async def scenario(port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b": connected\n"), READ_TIMEOUT_S)
        idle = []
        for _ in range(30):  # well past the cap of 8
            idle.append(await asyncio.open_connection("127.0.0.1", port))
            idle[-1][1].write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        closed = 0
        for r, _ in idle[:20]:  # the oldest idle ones were closed for room
            closed += await asyncio.wait_for(r.read(), READ_TIMEOUT_S) == b""
        healthy = await exchange(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        stream_open = not reader.at_eof()
        for _, w in idle:
            w.close()
        writer.close()
        return head, closed, healthy, stream_open

    head, closed, healthy, stream_open = with_daemon(sample_cairn, scenario, http_max_connections=8)
    assert b"200" in head.split(b"\r\n", 1)[0] and stream_open
    assert closed == 20 and parse(healthy)[0] == 200


# -- the MCP server's deadlines (item 7) -------------------------------------------------------------------------
def test_the_mcp_server_closes_connections_that_never_finish_their_headers_or_body(canary_cairn, tmp_path):
    from cairn.connections import ListenerLimits
    from support.mcp_client import TOKENS, mcp_server

    head = (
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nAuthorization: Bearer {TOKENS['reader']}\r\n"
        "Content-Length: 300\r\n\r\n"
    )

    async def scenario():
        limits = ListenerLimits(header_timeout_s=0.5, body_timeout_s=0.5)
        async with mcp_server(canary_cairn, tmp_path, listener=limits) as server:
            partial = await exchange(server.port, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            body = await exchange(server.port, head.encode() + b'{"jsonrpc": "2.0", ')
            return partial, body

    partial, body = run(scenario())
    assert partial == b""  # closed by the server, not by the read timeout
    assert body == b""  # the half-sent body: closed, never answered as a request


def test_a_request_the_mcp_servers_parser_refuses_is_a_json_400(canary_cairn, tmp_path):
    from support.mcp_client import mcp_server

    async def scenario():
        async with mcp_server(canary_cairn, tmp_path) as server:
            bad_header = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{MARKER} without a colon\r\n\r\n".encode()
            garbage = b"NOT HTTP AT ALL\x00\r\n\r\n"
            return [await exchange(server.port, data) for data in (bad_header, garbage)]

    for raw in run(scenario()):
        status, headers, body = parse(raw)
        assert status == 400 and headers["content-type"].startswith("application/json")
        assert json.loads(body)["error"]["code"] == "bad_request"


def _slow_mcp_post(port: int, token: str, length: int = 300) -> bytes:
    """The headers of an authenticated ``POST /mcp`` announcing a ``length``-byte body, and the body's first byte."""
    return (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Length: {length}\r\n\r\n{{"
    ).encode()


def test_a_body_sent_a_byte_at_a_time_is_cut_at_one_deadline_for_the_whole_body(canary_cairn, tmp_path):
    """The body deadline counts from the first chunk: a byte more often than the deadline does not extend it."""
    from cairn.connections import ListenerLimits
    from support.mcp_client import TOKENS, mcp_server

    async def scenario():
        limits = ListenerLimits(body_timeout_s=1.0)
        async with mcp_server(canary_cairn, tmp_path, listener=limits) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(_slow_mcp_post(server.port, TOKENS["reader"]))
            try:
                for _ in range(150):  # up to 45 s of drip when the deadline never comes
                    writer.write(b" ")
                    await writer.drain()
                    try:  # a byte every 0.3 s, until the server closes the connection (unanswered)
                        return await asyncio.wait_for(reader.read(), 0.3) == b""
                    except TimeoutError:
                        continue
                return False
            except ConnectionError:
                return True
            finally:
                writer.close()

    assert run(scenario())


def test_one_token_holders_slow_bodies_at_the_connection_cap_lock_no_other_client_out(canary_cairn, tmp_path):
    """8 slow authenticated requests of one client at a cap of 8 connections: the client keeps a quarter of the
    cap, the rest are refused with a JSON 503, and a local and another non-local client are served."""
    from cairn.connections import ListenerLimits
    from support.mcp_client import TOKENS, http_session, mcp_server

    async def scenario():
        limits = ListenerLimits(max_connections=8, body_timeout_s=120.0)
        async with mcp_server(canary_cairn, tmp_path, listener=limits) as server:
            slow = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(8)]
            for _, writer in slow:
                writer.write(_slow_mcp_post(server.port, TOKENS["claude-desktop"]))
            reads = [asyncio.ensure_future(reader.read()) for reader, _ in slow]
            try:
                done: set[asyncio.Future] = set()
                pending = set(reads)
                while len(done) < 6:  # the refusals; the admitted two stay unanswered
                    finished, pending = await asyncio.wait(
                        pending, timeout=READ_TIMEOUT_S, return_when="FIRST_COMPLETED"
                    )
                    if not finished:
                        break
                    done |= finished
                refused = [parse(task.result()) for task in done if task.result()]
                answers = []
                for client in ("my-local-agent", "reader"):
                    async with http_session(server.url, TOKENS[client]) as session:
                        answers.append(await asyncio.wait_for(session.call_tool("list_notes", {}), READ_TIMEOUT_S))
                return refused, answers
            finally:
                for task in reads:
                    task.cancel()
                for _, writer in slow:
                    writer.close()

    refused, answers = run(scenario())
    assert len(refused) == 6
    assert all(
        status == 503 and json.loads(body)["error"]["code"] == "too_many_requests" for status, _, body in refused
    )
    assert all(not answer.is_error for answer in answers)


def test_broken_chunked_bodies_on_the_mcp_port_grow_the_log_by_a_bounded_amount(canary_cairn, tmp_path, caplog):
    """A bad chunk size after the headers is a JSON 400; the app's own late answer never becomes a traceback."""
    from support.mcp_client import mcp_server

    caplog.set_level(logging.DEBUG)
    attempts = 50

    async def scenario():
        async with mcp_server(canary_cairn, tmp_path) as server:
            request = f"POST /x HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
            return [await exchange(server.port, request.encode()) for _ in range(attempts)]

    answers = run(scenario())
    assert all(parse(raw)[0] == 400 for raw in answers)
    assert "Traceback" not in caplog.text and "Exception in ASGI application" not in caplog.text
    assert len(caplog.text) < 100 * attempts  # at most a short line per request ...
    assert sum("Invalid HTTP request" in r.getMessage() for r in caplog.records) <= 1  # ... one a minute


def test_every_refusal_on_the_mcp_port_is_a_json_error(canary_cairn, tmp_path):
    """Unknown paths, a wrong Host or Origin, a wrong Content-Type: the API's error shape, never text/plain."""
    from support.mcp_client import TOKENS, mcp_server

    async def scenario():
        async with mcp_server(canary_cairn, tmp_path) as server:
            host = f"127.0.0.1:{server.port}"
            auth = f"Authorization: Bearer {TOKENS['reader']}\r\n"
            body = "Accept: application/json, text/event-stream\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
            requests = [
                f"GET /x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
                f"POST /mcp/x HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\n{body}",
                f"POST /mcp HTTP/1.1\r\nHost: elsewhere:80\r\n{auth}Content-Type: application/json\r\n{body}",
                f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.test\r\n{auth}"
                f"Content-Type: application/json\r\n{body}",
                f"POST /mcp HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: text/plain\r\n{body}",
            ]
            return [parse(await exchange(server.port, r.encode())) for r in requests]

    answers = run(scenario())
    assert [status for status, _, _ in answers] == [404, 404, 421, 403, 400]
    for status, headers, body in answers:
        assert headers["content-type"].startswith("application/json"), (status, body)
        error = json.loads(body)["error"]
        assert isinstance(error["code"], str) and error["message"]

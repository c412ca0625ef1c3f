"""The HTTP edge under test: the real app (:func:`cairn.http.make_app`) on 127.0.0.1 at a random port with a real
aiohttp client, over stand-in services or a real :class:`cairn.app.Cairn`; the API token; the SSE body parsed and the
error shape checked."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp

from cairn.config import Config
from cairn.http import make_app, serve
from support.cairns import services_of
from support.stand_ins import HEALTH, STATS, stand_in_services

TOKEN = "test-token-" + "x" * 32


AUTH = {"Authorization": f"Bearer {TOKEN}"}


OBSIDIAN = "app://obsidian.md"


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


@asynccontextmanager
async def api(cairn, *, token=TOKEN, events=None, throttle=None):
    app = make_app(services_of(cairn, events=events), token=token, throttle=throttle)
    server = await serve(app, "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            yield app, server, session
    finally:
        await server.close()

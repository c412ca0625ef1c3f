"""The rest of the HTTP API on a real server over real indexes: /notes, /related, /tags,
/index/reindex, /events, /openapi.json; and the security rules applied to every registered
route (route-table driven), token throttling and rotation, service.json.

Nothing sleeps: waits are on events or queues with timeouts.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

from cairn.config import Config
from cairn.events import EventBus
from cairn.http import BadTokenThrottle, make_app, serve
from cairn.library import backlink_json, link_json
from cairn.relevance import RELEVANCE_LABELS
from support.http_client import AUTH, OBSIDIAN, api, assert_error, read_events
from support.stand_ins import EmptyQuery, stand_in_services
from support.waits import run

EXAMPLE_NOTE = "Garden/Garlic.md"


def example_request(method: str, canonical: str) -> tuple[str, dict]:
    path = canonical.replace("{path}", EXAMPLE_NOTE)
    if canonical == "/related":
        path += "?path=" + EXAMPLE_NOTE
    if canonical == "/search":
        path += "?q=garlic"
    kw = {"json": {"question": "garlic"}} if canonical == "/ask" else {}
    return path, kw


# -- every route, from the route table -------------------------------------------------------


def test_every_registered_route_but_health_refuses_no_token_a_wrong_host_and_a_foreign_origin(sample_cairn):
    async def scenario():
        async with api(sample_cairn) as (app, server, session):
            routes = sorted(
                {(r.method, r.resource.canonical) for r in app.router.routes() if r.method not in ("HEAD", "OPTIONS")}
            )
            assert len(routes) >= 10, routes
            checked = []
            for method, canonical in routes:
                path, kw = example_request(method, canonical)
                url = server.url + path
                for headers, status, code in [
                    ({}, 401, "unauthorized"),
                    ({**AUTH, "Host": "evil.example"}, 421, "misdirected_request"),
                    ({**AUTH, "Host": f"attacker.test:{server.port}"}, 421, "misdirected_request"),
                    ({**AUTH, "Origin": "https://evil.example"}, 403, "forbidden"),
                ]:
                    if canonical == "/health" and status == 401:
                        continue
                    async with session.request(method, url, headers=headers, **kw) as resp:
                        assert resp.status == status, (method, canonical, headers, resp.status)
                        assert "Access-Control-Allow-Origin" not in resp.headers
                        assert_error(await resp.json(), code)
                checked.append(canonical)
            return checked

    checked = run(scenario())
    assert {
        "/ask",
        "/search",
        "/notes/{path}",
        "/related",
        "/tags",
        "/index/stats",
        "/index/reindex",
        "/events",
        "/openapi.json",
        "/health",
    } <= set(checked)


def test_the_obsidian_origin_gets_its_exact_cors_header_and_vary_origin(sample_cairn):
    async def scenario():
        async with api(sample_cairn) as (app, server, session):
            async with session.get(server.url + "/tags", headers={**AUTH, "Origin": OBSIDIAN}) as resp:
                assert resp.status == 200
                assert resp.headers["Access-Control-Allow-Origin"] == OBSIDIAN
                assert "Origin" in resp.headers["Vary"]
            async with session.options(
                server.url + "/notes/" + EXAMPLE_NOTE,
                headers={
                    "Origin": OBSIDIAN,
                    "Access-Control-Request-Method": "GET",
                    "Access-Control-Request-Headers": "authorization",
                },
            ) as resp:
                assert resp.status == 204
                assert resp.headers["Access-Control-Allow-Origin"] == OBSIDIAN
                assert "Authorization" in resp.headers["Access-Control-Allow-Headers"]
            async with session.get(server.url + "/tags", headers=AUTH) as resp:  # no Origin: no CORS header
                assert "Access-Control-Allow-Origin" not in resp.headers and "Origin" in resp.headers["Vary"]

    run(scenario())


# -- /notes, /related, /tags ---------------------------------------------------------------


def test_a_note_is_served_with_its_content_tags_links_and_backlinks(sample_cairn):
    async def scenario():
        async with api(sample_cairn) as (app, server, session):
            async with session.get(server.url + "/notes/" + EXAMPLE_NOTE, headers=AUTH) as resp:
                assert resp.status == 200
                return await resp.json()

    body = run(scenario())
    assert body["filePath"] == EXAMPLE_NOTE
    assert body["content"] == (Path(sample_cairn.config.vault) / EXAMPLE_NOTE).read_text(encoding="utf-8")
    assert set(body) >= {"filePath", "title", "tags", "aliases", "frontmatter", "content", "links", "backlinks"}
    assert body["tags"] == sample_cairn.store.note_tags(EXAMPLE_NOTE)
    assert body["backlinks"] == [backlink_json(b) for b in sample_cairn.store.backlinks(EXAMPLE_NOTE)]


@pytest.mark.parametrize(
    "raw",
    [
        "..%2F..%2Fetc%2Fpasswd",
        "../../etc/passwd",
        "%2e%2e/%2e%2e/etc/passwd",
        "%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
        "Garden/..%2F..%2F..%2Fetc%2Fpasswd",
        "%2Fetc%2Fpasswd",
        "..%5C..%5Cetc%5Cpasswd",
        "Garden%5CGarlic.md",
        "C:%2Fwindows%2Fwin.ini",
        "Garden%00.md",
        "No%20such%20note.md",
    ],
)
def test_note_paths_are_confined_to_the_vault(sample_cairn, raw):
    async def scenario():
        async with api(sample_cairn) as (app, server, session):
            url = URL(server.url + "/notes/" + raw, encoded=True)
            async with session.get(url, headers=AUTH) as resp:
                return resp.status, await resp.text()

    status, text = run(scenario())
    assert status in (400, 404), (raw, status, text)
    assert "root:" not in text
    body = json.loads(text)
    assert body["error"]["code"] in {"path_outside_vault", "not_found", "bad_request"}


@pytest.mark.slow
def test_a_symlink_out_of_the_vault_is_refused_and_not_read(fresh_cairn, tmp_path):
    secret = tmp_path / "outside-secret.md"
    secret.write_text("# Secret\nTOP-SECRET-CONTENT\n", encoding="utf-8")
    link = fresh_cairn.config.vault / "Garden" / "Leak.md"
    link.symlink_to(secret)
    fresh_cairn.indexing.index()

    async def scenario():
        async with api(fresh_cairn) as (app, server, session):
            out = []
            for path in ["/notes/Garden/Leak.md", "/related?path=Garden/Leak.md"]:
                async with session.get(server.url + path, headers=AUTH) as resp:
                    out.append((resp.status, await resp.text()))
            return out

    for status, text in run(scenario()):
        assert status in (400, 404) and "TOP-SECRET" not in text


def test_related_lists_links_backlinks_and_similar_notes(sample_cairn):
    async def scenario():
        async with api(sample_cairn) as (app, server, session):
            async with session.get(
                server.url + "/related", params={"path": EXAMPLE_NOTE, "limit": "3"}, headers=AUTH
            ) as resp:
                assert resp.status == 200
                body = await resp.json()
            bad = []
            for params in [
                {},
                {"path": EXAMPLE_NOTE, "limit": "0"},
                {"path": EXAMPLE_NOTE, "limit": "x"},
                {"path": "../x.md"},
                {"path": EXAMPLE_NOTE, "other": "1"},
            ]:
                async with session.get(server.url + "/related", params=params, headers=AUTH) as resp:
                    bad.append(resp.status)
            return body, bad

    body, bad = run(scenario())
    assert body["links"] == [link_json(link) for link in sample_cairn.store.links_of_note(EXAMPLE_NOTE)]
    assert body["backlinks"] == [backlink_json(b) for b in sample_cairn.store.backlinks(EXAMPLE_NOTE)]
    assert 1 <= len(body["similar"]) <= 3
    assert all(s["filePath"] != EXAMPLE_NOTE and s["score"] >= 0.35 for s in body["similar"])
    assert all(s["relevance"] in RELEVANCE_LABELS for s in body["similar"]), body["similar"]
    assert [s["score"] for s in body["similar"]] == sorted((s["score"] for s in body["similar"]), reverse=True)
    assert bad == [400, 400, 400, 400, 400]


def test_tags_lists_every_tag_with_its_count(sample_cairn):
    async def scenario():
        async with api(sample_cairn) as (app, server, session):
            async with session.get(server.url + "/tags", headers=AUTH) as resp:
                return await resp.json()

    body = run(scenario())
    assert body == {"tags": [{"tag": t, "count": n} for t, n in sample_cairn.store.tag_counts()]}
    assert {"tag": "personal", "count": 1} in body["tags"] or any(t["tag"] == "personal" for t in body["tags"])


# -- /index/reindex and /events -----------------------------------------------------------


@pytest.mark.slow
def test_reindex_is_202_and_events_stream_its_progress(fresh_cairn):
    fresh_cairn.indexing.index()
    (fresh_cairn.config.vault / "Garden" / "Beans.md").write_text(
        "# Beans\nSow runner beans in May. #garden\n", encoding="utf-8"
    )

    async def scenario():
        async with api(fresh_cairn) as (app, server, session):
            async with session.get(server.url + "/events", headers=AUTH) as stream:
                assert stream.headers["Content-Type"].startswith("text/event-stream")
                assert await asyncio.wait_for(stream.content.readline(), 10) == b": connected\n"
                async with session.post(
                    server.url + "/index/reindex", json={"path": "Garden/Beans.md"}, headers=AUTH
                ) as resp:
                    assert resp.status == 202
                    queued = await resp.json()
                events = []
                while not events or events[-1][0] != "indexed":
                    name = (await asyncio.wait_for(stream.content.readline(), 30)).decode().strip()
                    if not name.startswith("event: "):
                        continue
                    data = (await stream.content.readline()).decode().strip()
                    events.append((name[7:], json.loads(data[6:])))
            async with session.post(server.url + "/index/reindex", json={"path": "../etc/passwd"}, headers=AUTH) as r:
                bad = r.status
            return queued, events, bad

    queued, events, bad = run(scenario())
    assert fresh_cairn.indexing.wait_for_indexing(30)
    assert queued["queued"] is True and queued["path"] == "Garden/Beans.md"
    assert any(n == "progress" and set(d) == {"phase", "done", "total"} for n, d in events)
    assert events[-1][0] == "indexed" and events[-1][1]["added"] == 1
    assert fresh_cairn.store.note_by_path("Garden/Beans.md") is not None
    assert bad == 400


def test_the_event_bus_never_blocks_a_publisher_and_drops_the_oldest():
    async def scenario():
        bus = EventBus(maxsize=3)
        sub = bus.subscribe()
        for i in range(10):
            await asyncio.to_thread(bus.publish, "progress", {"done": i})
        got = [await asyncio.wait_for(sub.get(), 5) for _ in range(3)]
        sub.close()
        bus.publish("progress", {"done": 99})  # no subscriber: nothing happens
        return got, bus.subscribers

    got, subscribers = run(scenario())
    assert [d["done"] for _, d in got] == [7, 8, 9] and subscribers == 0


# -- tokens: throttling and rotation ----------------------------------------------------------


def test_repeated_bad_tokens_are_throttled_with_429_while_the_right_token_still_works(sample_cairn):
    async def scenario():
        async with api(sample_cairn, throttle=BadTokenThrottle(burst=3, refill_s=3600)) as (app, server, session):
            statuses = []
            for _ in range(4):
                async with session.get(server.url + "/tags", headers={"Authorization": "Bearer " + "w" * 43}) as r:
                    statuses.append(r.status)
                    retry = r.headers.get("Retry-After")
            async with session.get(server.url + "/tags", headers={"Authorization": "Bearer " + "x" * 43}) as r:
                locked = (r.status, (await r.json())["error"]["code"])
            async with session.get(server.url + "/tags", headers=AUTH) as r:  # the owner's plugin is not locked out
                owner = r.status
            async with session.get(server.url + "/tags") as r:  # no header at all: still a plain 401
                missing = r.status
            return statuses, retry, locked, owner, missing

    statuses, retry, locked, owner, missing = run(scenario())
    assert statuses == [401, 401, 401, 429] and int(retry) >= 1
    assert locked == (429, "too_many_requests") and owner == 200 and missing == 401


def test_the_bad_token_throttle_refills_over_time():
    now = [0.0]
    t = BadTokenThrottle(burst=2, refill_s=10, clock=lambda: now[0])
    t.failed(), t.failed()
    assert t.retry_after() == pytest.approx(10)
    now[0] = 5
    assert t.retry_after() == pytest.approx(5)
    now[0] = 10
    assert t.retry_after() == 0


def test_cairn_token_rotate_invalidates_the_old_token_at_once(tmp_path, monkeypatch):
    from cairn.config import load_config
    from cairn.secrets import TokenWatch, get_or_create_token, rotate_token

    monkeypatch.setenv("CAIRN_KEYRING", "file")
    config = load_config(
        {"vault": str(tmp_path), "config_dir": str(tmp_path / "config"), "data_dir": str(tmp_path / "data")}, env={}
    )
    old = get_or_create_token(config)
    watch = TokenWatch(config)

    async def scenario():
        app = make_app(stand_in_services(EmptyQuery(), stats=dict, health=dict), token=watch)
        server = await serve(app, "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as session:

                async def status(token):
                    async with session.get(
                        server.url + "/index/stats", headers={"Authorization": f"Bearer {token}"}
                    ) as r:
                        return r.status

                before = await status(old)
                new = await asyncio.to_thread(rotate_token, config)
                return before, await status(old), await status(new)
        finally:
            await server.close()

    assert run(scenario()) == (200, 401, 200)


def test_an_events_stream_opened_with_the_old_token_gets_nothing_after_a_rotate(tmp_path, monkeypatch):
    from cairn.config import load_config
    from cairn.secrets import TokenWatch, get_or_create_token, rotate_token

    monkeypatch.setenv("CAIRN_KEYRING", "file")
    config = load_config(
        {"vault": str(tmp_path), "config_dir": str(tmp_path / "config"), "data_dir": str(tmp_path / "data")}, env={}
    )
    old = get_or_create_token(config)
    bus = EventBus()

    async def scenario():
        app = make_app(stand_in_services(EmptyQuery(), stats=dict, health=dict, events=bus), token=TokenWatch(config))
        server = await serve(app, "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(server.url + "/events", headers={"Authorization": f"Bearer {old}"}) as stream:
                    assert await asyncio.wait_for(stream.content.readline(), 10) == b": connected\n"
                    bus.publish("removed", {"filePath": "before.md"})
                    first = []
                    while not first or not first[-1].startswith(b"data: "):
                        line = await asyncio.wait_for(stream.content.readline(), 10)
                        first += [line] if line.strip() else []
                    await asyncio.to_thread(rotate_token, config)
                    bus.publish("removed", {"filePath": "Private/after-the-rotate.md"})
                    assert await asyncio.wait_for(stream.content.readline(), 10) == b"\n"  # the end of `first`
                    rest = await asyncio.wait_for(read_events(stream), 10)  # the stream ends
                return first, rest
        finally:
            await server.close()

    first, rest = run(scenario())
    assert first[0] == b"event: removed\n" and b"before.md" in first[1]
    assert [name for name, _ in rest] == ["error"] and rest[0][1]["code"] == "unauthorized"


# -- service.json and the OpenAPI document ----------------------------------------------------


def test_service_json_is_0600_with_port_pid_version_started_and_url(tmp_path):
    from cairn import __version__
    from cairn.discovery import remove_service_file, write_service_file

    (tmp_path / "vault").mkdir()
    config = Config(vault=tmp_path / "vault", data_dir=tmp_path / "data")
    write_service_file(config, "http://127.0.0.1:4321", 4321)
    info = json.loads(config.service_file.read_text(encoding="utf-8"))
    assert set(info) == {"port", "pid", "version", "startedAt", "url", "vault", "index"}
    assert info["port"] == 4321 and info["pid"] == os.getpid() and info["version"] == __version__
    assert stat.S_IMODE(config.service_file.stat().st_mode) == 0o600
    remove_service_file(config)
    assert not config.service_file.exists()


def test_the_openapi_document_is_served_with_a_token_and_names_every_route(sample_cairn):
    async def scenario():
        async with api(sample_cairn) as (app, server, session):
            async with session.get(server.url + "/openapi.json") as resp:
                assert resp.status == 401
            async with session.get(server.url + "/openapi.json", headers=AUTH) as resp:
                assert resp.status == 200
                doc = await resp.json()
            routes = {
                (r.method.lower(), r.resource.canonical)
                for r in app.router.routes()
                if r.method not in ("HEAD", "OPTIONS")
            }
            return doc, routes

    doc, routes = run(scenario())
    assert doc["openapi"].startswith("3.1")
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops if m in {"get", "post"}}
    assert documented == routes


def test_health_gives_the_owners_view_only_to_a_request_with_the_api_token():
    import dataclasses

    token = "owner-token-" + "x" * 20
    public = {"status": "ok", "mcp": {"policy": "fail-closed", "failClosedReason": "policy_unusable"}}
    owners = {"status": "ok", "mcp": {**public["mcp"], "failClosedDetail": "/home/ann/p.yaml:2: 'Divorce'"}}
    services = dataclasses.replace(
        stand_in_services(EmptyQuery(), health=lambda: dict(public)), health_detail=lambda: dict(owners)
    )

    async def scenario():
        server = await serve(make_app(services, token=token), "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as session:

                async def health(headers):
                    async with session.get(server.url + "/health", headers=headers) as r:
                        return r.status, await r.json()

                return [
                    await health({}),
                    await health({"Authorization": "Bearer not-the-token"}),
                    await health({"Authorization": f"Bearer {token}"}),
                ]
        finally:
            await server.close()

    anyone, wrong, owner = run(scenario())
    assert anyone == (200, public) and wrong == (200, public)
    assert owner == (200, owners)

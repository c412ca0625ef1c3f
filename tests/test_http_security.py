"""cairn.http's security: the bearer token on every route but /health, never in a URL or a log; the Host and
Origin allowlists and CORS; loopback only. A real aiohttp server on 127.0.0.1 (random port) over small real
stand-ins for the services, a real HTTP client.

Async scenarios run with :func:`asyncio.run` under a timeout; nothing sleeps."""

from __future__ import annotations

import logging

import pytest

from cairn.config import Config
from cairn.errors import ConfigError
from cairn.http import make_app, serve
from support.http_client import AUTH, OBSIDIAN, TOKEN, assert_error, running
from support.stand_ins import HEALTH, STATS, EmptyQuery, stand_in_services
from support.waits import run

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


def test_serve_refuses_a_non_loopback_host():
    async def scenario():
        app = make_app(stand_in_services(EmptyQuery()), token=TOKEN)
        with pytest.raises(ConfigError, match="loopback"):
            await serve(app, "0.0.0.0", 0)

    run(scenario())


def test_an_empty_token_is_refused_at_startup():
    with pytest.raises(ConfigError):
        make_app(stand_in_services(EmptyQuery()), token="")

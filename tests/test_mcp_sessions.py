"""MCP sessions over streamable HTTP are bounded per client: one token holder opening sessions in a loop never
locks another client out, and the owner's local clients never lose a session to a non-local one.

The real MCP HTTP server (uvicorn, the SDK's transport) on 127.0.0.1 over the real index of the canary vault,
driven by the SDK's own client; each client authenticates with its own token.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx2
import pytest
from mcp import Client

from support.mcp_client import TOKENS, http_session, mcp_server
from support.waits import run, wait_until_async

#: Bound on one client call (a hang fails the test instead of blocking the suite).
CALL_S = 60.0


async def open_sessions(stack: AsyncExitStack, url: str, client: str, n: int) -> list[Client]:
    """``n`` initialized sessions of ``client``, held open until ``stack`` closes (oldest first)."""
    sessions = []
    for i in range(n):
        session = await asyncio.wait_for(
            stack.enter_async_context(_lenient(http_session(url, TOKENS[client], client_info=f"{client}-{i}"))), CALL_S
        )
        sessions.append(session)
    return sessions


@asynccontextmanager
async def _lenient(context) -> AsyncIterator[Client]:
    """A client session whose closing may fail (its session may have been closed by the server meanwhile)."""
    entered = await context.__aenter__()
    try:
        yield entered
    finally:
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(context.__aexit__(None, None, None), CALL_S)


async def works(session: Client) -> bool:
    """Whether ``session`` still answers a call (a closed session's id is 404: the client call fails)."""
    try:
        await asyncio.wait_for(session.list_tools(), CALL_S)
        return True
    except Exception:
        return False


def test_one_token_holder_opening_sessions_in_a_loop_locks_no_other_client_out(canary_cairn, tmp_path):
    async def scenario():
        async with mcp_server(canary_cairn, tmp_path) as server, AsyncExitStack() as stack:
            flood = await open_sessions(stack, server.url, "claude-desktop", 20)
            reader = await open_sessions(stack, server.url, "reader", 1)
            local = await open_sessions(stack, server.url, "my-local-agent", 1)
            return [await works(s) for s in flood], await works(reader[0]), await works(local[0])

    flood, reader, local = run(scenario())
    assert reader and local
    # the holder keeps its 16 most recently used sessions; the older ones were closed to make room
    assert flood == [False] * 4 + [True] * 16


def test_at_the_total_cap_the_heaviest_non_local_client_gives_way_and_local_sessions_stay(canary_cairn, tmp_path):
    from cairn.mcp_server.sessions import SessionLimits

    async def scenario():
        limits = SessionLimits(per_client=8, total=12)
        async with mcp_server(canary_cairn, tmp_path, sessions=limits) as server, AsyncExitStack() as stack:
            await open_sessions(stack, server.url, "claude-desktop", 10)
            await open_sessions(stack, server.url, "reader", 6)
            local = await open_sessions(stack, server.url, "my-local-agent", 8)
            late = await open_sessions(stack, server.url, "claude-desktop", 3)
            assert server.manager is not None
            return [await works(s) for s in local], [await works(s) for s in late], server.manager.open_sessions

    local, late, open_count = run(scenario())
    assert local == [True] * 8  # the local client's sessions survived every non-local admission
    assert late == [True] * 3  # a non-local client still gets in (from the non-local share)
    assert open_count <= 12


def test_a_session_without_requests_is_closed_after_the_idle_timeout(canary_cairn, tmp_path):
    from cairn.mcp_server.sessions import SessionLimits

    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}},
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {TOKENS['reader']}",
    }

    async def scenario():
        async with mcp_server(canary_cairn, tmp_path, sessions=SessionLimits(idle_s=0.5)) as server:
            async with httpx2.AsyncClient(timeout=CALL_S) as http:
                opened = await http.post(server.url, json=init, headers=headers)
                sid = opened.headers["mcp-session-id"]
                assert server.manager is not None
                await wait_until_async("the idle session closed", lambda: server.manager.open_sessions == 0, CALL_S)
                ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
                later = await http.post(
                    server.url,
                    json=ping,
                    headers={**headers, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"},
                )
                return opened.status_code, later.status_code

    assert run(scenario()) == (200, 404)


@pytest.fixture(autouse=True)
def _quiet_sdk_logs(caplog):
    caplog.set_level("WARNING", logger="mcp")

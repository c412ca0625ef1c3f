"""MCP over streamable HTTP, served by a live ``cairn serve`` and driven by the SDK's own client.

The daemon runs on port 0 with the MCP endpoint on a second free loopback port (``mcpUrl`` in
service.json); it indexes the canary vault itself. Each client authenticates with its own token
from ``cairn mcp token NAME``; extra tools are asked for in the URL (``/mcp?tool=NAME``).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from mcp import Client

from support.cli import cairn_executable
from support.daemons import running_daemon, wait_for
from support.mcp_client import (
    ALL_TOOLS,
    ALLOWED,
    POLICY,
    VAULT_NOTES,
    WITHHELD_TOPICS,
    assert_allowed_notes_served,
    assert_nothing_withheld_leaks,
    assert_withheld_reads_look_missing,
    blob,
    every_tool_call,
    http_session,
    make_home,
)
from support.vaults import CANARY, CANARY_VAULT, CANARY_WITHHELD
from support.waits import run

pytestmark = pytest.mark.e2e  # `cairn serve` / `cairn mcp --http` subprocesses, spoken to over HTTP

INDEX_DEADLINE_S = 120
CLIENTS = ("claude-desktop", "reader", "my-local-agent", "stranger")


class Mcp:
    """A running daemon, its MCP URL and one token per client name."""

    def __init__(self, daemon: Any, url: str, tokens: dict[str, str]) -> None:
        self.daemon, self.url, self.tokens = daemon, url, tokens
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port

    def health(self, *, owner: bool = False) -> dict:
        status, body = self.daemon.get_json("/health", **({"token": self.daemon.token} if owner else {}))
        assert status == 200
        return body

    def raw(self, method: str, *, headers: dict[str, str], body: Any = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request(method, "/mcp", body=json.dumps(body).encode() if body is not None else None, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()


def mcp_token(env: dict[str, str], name: str, *, rotate: bool = False) -> str:
    proc = subprocess.run(
        [cairn_executable(), "mcp", "token", name, *(["--rotate"] if rotate else [])],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def mcp(tmp_path_factory) -> Iterator[Mcp]:
    home = make_home(tmp_path_factory.mktemp("mcp-http"))
    with running_daemon(home, CANARY_VAULT) as daemon:

        def indexed():
            status, stats = daemon.get_json("/index/stats", token=daemon.token)
            return (
                status == 200
                and stats["notes"] + stats["skipped"] == len(VAULT_NOTES)
                and stats["pending"] == 0
                and not stats["indexing"]
            )

        wait_for("the canary vault indexed", indexed, INDEX_DEADLINE_S, daemon.proc, home / "serve.stderr")
        info = json.loads(daemon.service_file.read_text(encoding="utf-8"))
        yield Mcp(daemon, info["mcpUrl"], {name: mcp_token(daemon.env, name) for name in CLIENTS})


async def tool_names(client: Client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


# ------------------------------------------------------------------------------ transport
def test_the_daemon_serves_mcp_on_a_second_loopback_port_and_says_where(mcp):
    assert mcp.host == "127.0.0.1"
    assert urlsplit(mcp.url).path == "/mcp"
    assert mcp.port != mcp.daemon.port
    health = mcp.health()["mcp"]
    assert health["http"] == mcp.url and health["policy"] == "ok" and health["failClosedReason"] is None
    assert not any(token in mcp.daemon.service_file.read_text() for token in mcp.tokens.values())


def test_a_request_without_a_known_client_token_is_401(mcp):
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "my-local-agent", "version": "1"},
        },
    }
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    for auth in (None, "Bearer not-a-token", f"Bearer {mcp.daemon.token}", f"Basic {mcp.tokens['reader']}"):
        headers = dict(base, **({"Authorization": auth} if auth else {}))
        status, body = mcp.raw("POST", headers=headers, body=init)
        assert status == 401, (auth, body)
        assert json.loads(body)["error"]["code"] == "unauthorized"
    status, _ = mcp.raw("POST", headers=dict(base, Authorization=f"Bearer {mcp.tokens['reader']}"), body=init)
    assert status == 200


def test_the_sdk_transport_security_refuses_a_foreign_host_or_origin(mcp):
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}},
    }
    base = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {mcp.tokens['reader']}",
    }
    assert mcp.raw("POST", headers=dict(base, Host=f"evil.example:{mcp.port}"), body=init)[0] == 421
    assert mcp.raw("POST", headers=dict(base, Origin="http://evil.example"), body=init)[0] == 403
    assert mcp.raw("POST", headers=dict(base, Origin=f"http://127.0.0.1:{mcp.port}"), body=init)[0] == 200


def test_an_oversized_body_is_refused_and_the_server_keeps_serving(mcp):
    from cairn.mcp_server import MAX_MESSAGE_BYTES

    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {mcp.tokens['reader']}",
    }
    big = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x" * (MAX_MESSAGE_BYTES + 1)}}
    assert mcp.raw("POST", headers=headers, body=big)[0] == 413
    status, body = mcp.raw("POST", headers=headers, body=None)
    assert status == 400

    async def go():
        async with http_session(mcp.url, mcp.tokens["reader"]) as client:
            return await tool_names(client)

    assert run(go()) == {"get_note", "list_notes"}


# ------------------------------------------------------------------------------ tools/list
def test_without_tools_in_the_url_only_the_contained_reads_are_listed(mcp):
    async def go():
        async with http_session(mcp.url, mcp.tokens["claude-desktop"]) as client:
            return await tool_names(client)

    assert run(go()) == {"get_note", "list_notes"}


def test_a_tool_in_the_url_adds_search_only_for_a_client_whose_policy_allows_it(mcp):
    async def go():
        async with http_session(mcp.url, mcp.tokens["claude-desktop"], tools=("search_notes",)) as allowed:
            allowed_tools = await tool_names(allowed)
            found = await allowed.call_tool("search_notes", {"query": "sourdough bread starter"})
        async with http_session(mcp.url, mcp.tokens["reader"], tools=("search_notes",)) as refused:
            refused_tools = await tool_names(refused)
            denied = await refused.call_tool("search_notes", {"query": "sourdough bread starter"})
        return allowed_tools, found, refused_tools, denied

    allowed_tools, found, refused_tools, denied = run(go())
    assert allowed_tools == {"search_notes", "get_note", "list_notes"}
    assert found.structured_content["results"][0]["filePath"] == "Recipes/Bread.md"
    assert refused_tools == {"get_note", "list_notes"}
    assert denied.is_error and denied.structured_content["error"]["code"] == "tool_not_served"


# ------------------------------------------------------------------------------ withholding
@pytest.mark.parametrize("client", ["stranger", "claude-desktop"])
def test_no_tool_ever_shows_a_withheld_note_to_a_client_not_declared_local(mcp, client):
    async def go():
        async with http_session(mcp.url, mcp.tokens[client], tools=tuple(ALL_TOOLS), client_info="my-local-agent") as c:
            return await tool_names(c), [(n, a, await c.call_tool(n, a)) for n, a in every_tool_call()]

    served, results = run(go())
    assert served == (set(ALL_TOOLS) if client == "claude-desktop" else {"get_note", "list_notes"})
    assert_nothing_withheld_leaks(results)
    assert_withheld_reads_look_missing(results, served)
    assert_allowed_notes_served(results, served)


def test_a_declared_local_client_finds_the_withheld_notes(mcp):
    async def go():
        async with http_session(mcp.url, mcp.tokens["my-local-agent"], tools=("search_notes", "ask")) as client:
            found = await client.call_tool("search_notes", {"query": WITHHELD_TOPICS["Notes/Allergies.md"]})
            note = await client.call_tool("get_note", {"path": "Journal/Therapy.md"})
            listed = await client.call_tool("list_notes", {"limit": 500})
        return found, note, listed

    found, note, listed = run(go())
    assert found.structured_content["results"][0]["filePath"] == "Notes/Allergies.md"
    assert CANARY in note.structured_content["content"]
    assert set(CANARY_WITHHELD) <= {n["filePath"] for n in listed.structured_content["notes"]}


def test_client_info_naming_a_local_client_does_not_change_who_the_token_belongs_to(mcp):
    async def go():
        async with http_session(
            mcp.url, mcp.tokens["claude-desktop"], tools=("search_notes", "ask"), client_info="my-local-agent"
        ) as client:
            note = await client.call_tool("get_note", {"path": "Journal/Therapy.md"})
            found = await client.call_tool("search_notes", {"query": WITHHELD_TOPICS["Journal/Therapy.md"]})
            tools = await tool_names(client)
        return note, found, tools

    note, found, tools = run(go())
    assert note.is_error and note.structured_content["error"]["code"] == "not_found"
    assert CANARY not in blob(found)
    assert "Journal/Therapy.md" not in blob(found)
    assert tools == {"search_notes", "ask", "get_note", "list_notes"}


# ------------------------------------------------------------------------------ audit, tokens, policy
def test_the_audit_log_records_each_http_call_under_the_token_owner(mcp):
    audit = mcp.daemon.home / "data" / "mcp-audit.jsonl"
    before = len(audit.read_text(encoding="utf-8").splitlines()) if audit.exists() else 0

    async def go():
        async with http_session(mcp.url, mcp.tokens["reader"], client_info="my-local-agent") as client:
            await client.call_tool("list_notes", {"folder": "Recipes"})
            await client.call_tool("get_related_notes", {"path": "Recipes/Bread.md"})

    run(go())
    lines = [json.loads(line) for line in audit.read_text(encoding="utf-8").splitlines()[before:]]
    assert [(e["client"], e["transport"], e["tool"], e["decision"]) for e in lines] == [
        ("reader", "http", "list_notes", "allowed"),
        ("reader", "http", "get_related_notes", "denied"),
    ]
    assert sorted(lines[0]["paths"]) == ["Recipes/Bread.md", "Recipes/Lentil soup.md"]
    assert all(e["argsDigest"].startswith("sha256:") and "time" in e and "withheld" in e for e in lines)


def test_a_rotated_token_stops_working_at_once_and_the_new_one_works(mcp):
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}},
    }
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    old = mcp.tokens["stranger"]
    new = mcp_token(mcp.daemon.env, "stranger", rotate=True)
    mcp.tokens["stranger"] = new
    assert new != old
    assert mcp.raw("POST", headers=dict(headers, Authorization=f"Bearer {old}"), body=init)[0] == 401
    assert mcp.raw("POST", headers=dict(headers, Authorization=f"Bearer {new}"), body=init)[0] == 200


def test_an_invalid_policy_edit_fails_closed_and_a_fix_is_picked_up(mcp):
    policy = mcp.daemon.home / "config" / "mcp-serve.yaml"
    good = policy.read_text(encoding="utf-8")

    async def local_view():
        async with http_session(mcp.url, mcp.tokens["my-local-agent"], tools=("search_notes",)) as client:
            note = await client.call_tool("get_note", {"path": "Health/Sleep.md"})
            return await tool_names(client), note

    def health_policy(expected: str):
        end = time.monotonic() + 30
        while time.monotonic() < end:
            state = mcp.health(owner=True)["mcp"]
            if state["policy"] == expected:
                return state
            time.sleep(0.2)
        pytest.fail(f"/health never said the MCP policy is {expected!r}: {mcp.health()['mcp']}")

    try:
        policy.write_text(
            good.replace(
                "my-local-agent: {local: true, tools: all}", "my-local-agent: {local: yes please, tools: all}"
            ),
            encoding="utf-8",
        )
        state = health_policy("fail-closed")
        assert f"{policy}:7: " in state["failClosedDetail"] and state["failClosedReason"] == "policy_unusable"
        tools, note = run(local_view())
        assert tools == {"get_note", "list_notes"}
        assert note.is_error and CANARY not in blob(note)  # not local while the policy is broken
        assert "fail" in mcp.daemon.stderr().lower() and f"{policy}:7" in mcp.daemon.stderr()
    finally:
        policy.write_text(good, encoding="utf-8")
    health_policy("ok")
    tools, note = run(local_view())
    assert tools == {"search_notes", "get_note", "list_notes"}
    assert CANARY in note.structured_content["content"]


def test_a_daemon_started_with_an_invalid_policy_serves_mcp_fail_closed_and_tells_only_the_owner_why(tmp_path):
    secret = "Divorce lawyer Hartmann"  # a withheld folder's name, quoted by the broken line
    home = make_home(tmp_path, POLICY.replace("folders: [Private]", f"folders: [Private, ../{secret}]"))
    with running_daemon(home, CANARY_VAULT) as daemon:
        info = json.loads(daemon.service_file.read_text(encoding="utf-8"))
        status, health = daemon.get_json("/health")  # no token: anyone on this machine, any web page
        assert status == 200 and health["mcp"]["policy"] == "fail-closed"
        assert health["mcp"]["failClosedReason"] == "policy_unusable"
        assert secret not in json.dumps(health) and str(home) not in json.dumps(health)
        status, owners = daemon.get_json("/health", token=daemon.token)  # the owner's view says why
        assert f"{home / 'config' / 'mcp-serve.yaml'}:2: " in owners["mcp"]["failClosedDetail"]
        assert secret in owners["mcp"]["failClosedDetail"] and secret in daemon.stderr()  # and so does the log
        token = mcp_token(daemon.env, "my-local-agent")

        def indexed():
            status, stats = daemon.get_json("/index/stats", token=daemon.token)
            return status == 200 and stats["notes"] + stats["skipped"] == len(VAULT_NOTES) and not stats["indexing"]

        wait_for("the canary vault indexed", indexed, INDEX_DEADLINE_S, daemon.proc, home / "serve.stderr")

        async def go():
            async with http_session(info["mcpUrl"], token, tools=tuple(ALL_TOOLS)) as client:
                return await tool_names(client), await client.call_tool("list_notes", {"limit": 500})

        tools, listed = run(go())
        assert tools == {"get_note", "list_notes"}
        # fail closed: no note at all, since the broken file's folder rule (Private/) cannot be known
        assert listed.is_error and listed.structured_content["error"]["code"] == "policy_unusable"
        assert "policy cannot be used" in blob(listed) and "cairn policy check" in blob(listed)
        assert secret not in blob(listed) and str(home) not in blob(listed) and "mcp-serve.yaml" not in blob(listed)
        assert "Salary" not in blob(listed) and not any(p.split("/")[-1][:-3] in blob(listed) for p in ALLOWED)


def test_cairn_mcp_http_serves_the_endpoint_alone_from_the_existing_index(mcp):
    import re
    import signal

    env = dict(mcp.daemon.env, CAIRN_MCP_PORT="0")
    err_file = mcp.daemon.home / "mcp-http.stderr"
    with open(err_file, "wb") as err:
        proc = subprocess.Popen(
            [cairn_executable(), "mcp", "--http", "--vault", str(CANARY_VAULT)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    try:

        def url():
            found = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", err_file.read_text(errors="replace"))
            return found.group(1) if found else None

        endpoint = wait_for("cairn mcp --http to listen", url, 90, proc, err_file)
        assert endpoint != mcp.url

        async def go():
            async with http_session(endpoint, mcp.tokens["claude-desktop"], tools=("search_notes",)) as client:
                return await tool_names(client), await client.call_tool("search_notes", {"query": CANARY})

        tools, found = run(go())
        assert tools == {"search_notes", "get_note", "list_notes"}
        assert CANARY not in blob(found)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert proc.stdout.read() == b""  # nothing on stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_the_mcp_server_is_loaded_when_the_first_client_connects(tmp_path):
    """A daemon no MCP client has talked to holds none of the MCP server's memory, its port is bound and
    advertised all the same, and the first client is served on it."""
    home = make_home(tmp_path / "home")
    with running_daemon(home, CANARY_VAULT) as daemon:
        info = json.loads(daemon.service_file.read_text(encoding="utf-8"))
        status, stats = daemon.get_json("/index/stats", token=daemon.token)
        assert status == 200 and stats["memory"]["parts"]["mcpHttp"] == 0
        status, health = daemon.get_json("/health")
        assert status == 200 and health["mcp"]["http"] == info["mcpUrl"] and health["mcp"]["policy"] == "ok"
        token = mcp_token(daemon.env, "claude-desktop")

        async def first_client():
            async with http_session(info["mcpUrl"], token) as client:
                return await tool_names(client)

        assert run(first_client()) == {"get_note", "list_notes"}


def test_the_mcp_port_words_its_errors_in_the_apis_vocabulary_an_unexpected_failure_included():
    from cairn.mcp_server import McpHttpServer, McpService
    from cairn.policy import parse_policy
    from support.stand_ins import RecordingQuery, stand_in_services

    def failing_tokens() -> dict[str, str]:
        raise RuntimeError("the token file vanished")  # not a CairnError: an unexpected failure

    policy = parse_policy(POLICY, "test-policy")
    service = McpService(stand_in_services(RecordingQuery()), policy=lambda: policy, audit=None, transport="http")

    def ask(port: int, method: str, path: str) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request(method, path, headers={"Authorization": "Bearer t", "Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()

    async def go():
        server = await McpHttpServer(service, failing_tokens, "127.0.0.1", 0).start()
        try:
            return [await asyncio.to_thread(ask, server.port, m, p) for m, p in (("POST", "/mcp"), ("GET", "/nope"))]
        finally:
            await server.close()

    (status, body), (missing, missing_body) = run(go())
    assert (status, body["error"]["code"]) == (500, "internal")  # the plugin API's code for the same failure
    assert (missing, missing_body["error"]["code"]) == (404, "not_found")

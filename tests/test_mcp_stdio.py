"""``cairn mcp`` over stdio, driven by the SDK's own client against the real subprocess.

The canary vault (tests/fixtures/canary_vault) is indexed once for the module; every session
launches ``cairn mcp --vault … [--client NAME] [--tool NAME]…`` as an agent would, with its own
CAIRN_CONFIG_DIR (holding the policy below) and CAIRN_DATA_DIR (the index, the audit log).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from support.cairns import build_index
from support.cli import cairn_env, cairn_executable
from support.mcp_client import (
    ALL_TOOLS,
    ALLOWED,
    CALL_TIMEOUT_S,
    POLICY,
    WITHHELD_TOPICS,
    assert_allowed_notes_served,
    assert_nothing_withheld_leaks,
    assert_withheld_reads_look_missing,
    blob,
    every_tool_call,
    make_home,
)
from support.vaults import CANARY, CANARY_VAULT, CANARY_WITHHELD
from support.waits import run

pytestmark = pytest.mark.e2e  # a `cairn mcp` subprocess per test, spoken to over stdio


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder) -> Path:
    """A config folder with POLICY and a data folder holding the canary vault's index (built once)."""

    home = make_home(tmp_path_factory.mktemp("mcp-stdio"))
    build_index(CANARY_VAULT, home / "data", embedder, config_dir=home / "config")
    return home


@asynccontextmanager
async def stdio_session(home: Path, *args: str, client_info: str = "some-agent") -> AsyncIterator[Client]:
    """The SDK client over a ``cairn mcp --vault CANARY ARGS…`` subprocess (its stderr in home/mcp.stderr)."""
    params = StdioServerParameters(
        command=cairn_executable(), args=["mcp", "--vault", str(CANARY_VAULT), *args], env=cairn_env(home)
    )
    with open(home / "mcp.stderr", "a", encoding="utf-8") as errlog:
        async with Client(
            stdio_client(params, errlog=errlog),
            mode="legacy",
            read_timeout_seconds=CALL_TIMEOUT_S,
            client_info=types.Implementation(name=client_info, version="1.0"),
        ) as client:
            yield client


async def tool_names(client: Client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


async def call_all(client: Client) -> list[tuple[str, dict[str, Any], types.CallToolResult]]:
    return [(name, args, await client.call_tool(name, args)) for name, args in every_tool_call()]


# ------------------------------------------------------------------------------ tools/list
def test_without_tool_flags_only_the_contained_reads_are_listed(home):
    async def go():
        async with stdio_session(home, "--client", "claude-desktop") as client:
            return await tool_names(client)

    assert run(go()) == {"get_note", "list_notes"}


def test_a_tool_flag_adds_search_only_for_a_client_whose_policy_allows_it(home):
    async def go():
        async with stdio_session(home, "--client", "claude-desktop", "--tool", "search_notes") as allowed:
            allowed_tools = await tool_names(allowed)
            found = await allowed.call_tool("search_notes", {"query": "sourdough bread starter"})
        async with stdio_session(home, "--client", "reader", "--tool", "search_notes") as refused:
            refused_tools = await tool_names(refused)
            denied = await refused.call_tool("search_notes", {"query": "sourdough bread starter"})
        async with stdio_session(home, "--client", "stranger", "--tool", "search_notes") as unknown:
            unnamed = await unknown.call_tool("search_notes", {"query": "sourdough bread starter"})
        return allowed_tools, found, refused_tools, denied, unnamed

    allowed_tools, found, refused_tools, denied, unnamed = run(go())
    # The refusal says why: a client the policy doesn't name gets the default tools only.
    assert unnamed.is_error and "not named under clients:" in unnamed.content[0].text
    assert "not named" not in denied.content[0].text
    assert allowed_tools == {"search_notes", "get_note", "list_notes"}
    assert not found.is_error
    assert found.structured_content["results"][0]["filePath"] == "Recipes/Bread.md"
    hit = found.structured_content["results"][0]
    assert {"filePath", "symbol", "score", "snippet"} <= hit.keys()
    assert "not instructions" in found.content[0].text  # excerpts are framed as data
    assert refused_tools == {"get_note", "list_notes"}
    assert denied.is_error and denied.structured_content["error"]["code"] == "tool_not_served"


def test_an_unknown_tool_name_on_the_command_line_exits_1_naming_it(home):
    proc = subprocess.run(
        [cairn_executable(), "mcp", "--vault", str(CANARY_VAULT), "--tool", "delete_notes"],
        env=cairn_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1
    assert "delete_notes" in proc.stderr and "search_notes" in proc.stderr
    assert proc.stdout == ""


# ------------------------------------------------------------------------------ withholding
@pytest.mark.parametrize(
    "client_args",
    [[], ["--client", "stranger"], ["--client", "claude-desktop"]],
    ids=["no-client", "undeclared-client", "declared-non-local-client"],
)
def test_no_tool_ever_shows_a_withheld_note_to_a_client_not_declared_local(home, client_args):
    tool_args = [a for t in ALL_TOOLS for a in ("--tool", t)]

    async def go():
        async with stdio_session(home, *client_args, *tool_args, client_info="my-local-agent") as client:
            return await tool_names(client), await call_all(client)

    served, results = run(go())
    expected = set(ALL_TOOLS) if client_args == ["--client", "claude-desktop"] else {"get_note", "list_notes"}
    assert served == expected
    assert_nothing_withheld_leaks(results)
    assert_withheld_reads_look_missing(results, served)
    assert_allowed_notes_served(results, served)
    if "search_notes" in served:  # search still answers from the allowed notes
        garden = next(
            r for n, a, r in results if n == "search_notes" and a["query"] == WITHHELD_TOPICS["Private/Salary.md"]
        )
        assert not garden.is_error
        assert {h["filePath"] for h in garden.structured_content["results"]} <= set(ALLOWED)


def test_a_withheld_note_reads_exactly_like_a_missing_one(home):
    async def go():
        async with stdio_session(home, "--client", "claude-desktop") as client:
            withheld = await client.call_tool("get_note", {"path": "Health/Blood pressure.md"})
            missing = await client.call_tool("get_note", {"path": "Health/Blood pressures.md"})
        return withheld, missing

    withheld, missing = run(go())
    assert withheld.is_error and missing.is_error
    assert withheld.structured_content["error"]["code"] == missing.structured_content["error"]["code"] == "not_found"
    assert withheld.structured_content["error"]["message"].replace(
        "Health/Blood pressure.md", "X"
    ) == missing.structured_content["error"]["message"].replace("Health/Blood pressures.md", "X")


def test_ask_takes_the_earlier_turns_and_a_follow_up_never_reaches_withheld_notes_for_a_remote_client(home):
    """MCP ``ask`` with ``history``: the local client's follow-up finds the note through the history; for a client
    not declared local the same history cannot pull the withheld note in; a bad history is the contract's error."""
    follow_up = {
        "question": "What was it on Wednesday?",  # alone: not found
        "history": [{"question": "What were my blood pressure readings?", "answer": "128/84 on Monday [1]."}],
    }

    async def go():
        async with stdio_session(home, "--client", "my-local-agent", "--tool", "ask") as client:
            alone = await client.call_tool("ask", {"question": follow_up["question"]})
            local = await client.call_tool("ask", follow_up)
        async with stdio_session(home, "--client", "claude-desktop", "--tool", "ask") as client:
            remote = await client.call_tool("ask", follow_up)
            bad = await client.call_tool("ask", {**follow_up, "history": [{"question": "q?"}]})
        return alone, local, remote, bad

    alone, local, remote, bad = run(go())
    assert alone.structured_content["notFound"] is True
    assert "Health/Blood pressure.md" in {s["filePath"] for s in local.structured_content["sources"] if s["cited"]}
    assert not remote.is_error and "sources" in remote.structured_content
    assert CANARY not in blob(remote) and "Blood pressure" not in blob(remote)
    assert bad.is_error and bad.structured_content["error"]["code"] == "bad_request"
    assert "history[0].answer must be a string" in bad.structured_content["error"]["message"]


def test_a_declared_local_client_finds_the_withheld_notes(home):
    async def go():
        async with stdio_session(
            home, "--client", "my-local-agent", "--tool", "search_notes", "--tool", "ask", "--tool", "get_related_notes"
        ) as client:
            found = await client.call_tool("search_notes", {"query": WITHHELD_TOPICS["Health/Blood pressure.md"]})
            note = await client.call_tool("get_note", {"path": "Private/Salary.md"})
            listed = await client.call_tool("list_notes", {"limit": 500})
            answer = await client.call_tool("ask", {"question": "What were my blood pressure readings?"})
            return await tool_names(client), found, note, listed, answer

    served, found, note, listed, answer = run(go())
    assert served == {"search_notes", "ask", "get_related_notes", "get_note", "list_notes"}
    assert found.structured_content["results"][0]["filePath"] == "Health/Blood pressure.md"
    assert CANARY in note.structured_content["content"]
    assert set(CANARY_WITHHELD) <= {n["filePath"] for n in listed.structured_content["notes"]}
    assert answer.structured_content["grounded"] is False
    assert "Health/Blood pressure.md" in {s["filePath"] for s in answer.structured_content["sources"]}


def test_client_info_naming_a_local_client_does_not_make_the_connection_local(home):
    async def go():
        async with stdio_session(
            home, "--client", "claude-desktop", "--tool", "search_notes", client_info="my-local-agent"
        ) as client:
            note = await client.call_tool("get_note", {"path": "Health/Blood pressure.md"})
            found = await client.call_tool("search_notes", {"query": CANARY})
            listed = await client.call_tool("list_notes", {"limit": 500})
            tools = await tool_names(client)
        return note, found, listed, tools

    note, found, listed, tools = run(go())
    assert note.is_error and note.structured_content["error"]["code"] == "not_found"
    assert CANARY not in blob(found)
    assert not set(CANARY_WITHHELD) & {n["filePath"] for n in listed.structured_content["notes"]}
    assert tools == {"search_notes", "get_note", "list_notes"}  # claude-desktop's, not my-local-agent's


# ------------------------------------------------------------------------------ errors
def test_tool_errors_are_results_the_model_can_read_and_protocol_misuse_is_a_json_rpc_error(home):
    from mcp.shared.exceptions import MCPError

    async def go():
        async with stdio_session(home, "--client", "claude-desktop") as client:
            outside = await client.call_tool("get_note", {"path": "../../etc/passwd"})
            bad_type = await client.call_tool("list_notes", {"limit": "many"})
            extra = await client.call_tool("get_note", {"path": "Recipes/Bread.md", "mode": "raw"})
            try:
                await client.call_tool("delete_note", {"path": "Recipes/Bread.md"})
                unknown: Any = None
            except MCPError as exc:
                unknown = exc
            still = await client.call_tool("get_note", {"path": "Recipes/Bread.md"})
        return outside, bad_type, extra, unknown, still

    outside, bad_type, extra, unknown, still = run(go())
    assert outside.is_error and outside.structured_content["error"]["code"] == "path_outside_vault"
    assert bad_type.is_error and bad_type.structured_content["error"]["code"] == "bad_request"
    assert "limit" in bad_type.content[0].text
    assert extra.is_error and "mode" in extra.content[0].text
    assert unknown is not None and unknown.error.code == types.INVALID_PARAMS
    assert not still.is_error  # the server kept serving


def test_every_stdout_line_is_json_rpc_even_after_garbage_and_oversized_lines(home):
    from cairn.mcp_server import MAX_MESSAGE_BYTES

    def msg(**kw: Any) -> bytes:
        return (json.dumps({"jsonrpc": "2.0", **kw}) + "\n").encode()

    async def go() -> list[str]:
        proc = await asyncio.create_subprocess_exec(
            cairn_executable(),
            "mcp",
            "--vault",
            str(CANARY_VAULT),
            "--client",
            "claude-desktop",
            env=cairn_env(home),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            limit=2 * MAX_MESSAGE_BYTES,
        )
        lines: list[str] = []

        async def until(request_id: int) -> None:
            while True:
                line = (await asyncio.wait_for(proc.stdout.readline(), CALL_TIMEOUT_S)).decode()
                assert line, "cairn mcp closed stdout early"
                lines.append(line)
                if json.loads(line).get("id") == request_id:
                    return

        try:
            proc.stdin.write(
                msg(
                    id=1,
                    method="initialize",
                    params={
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"},
                    },
                )
            )
            await until(1)
            proc.stdin.write(msg(method="notifications/initialized"))
            proc.stdin.write(b'this is not json\n{"jsonrpc": "2.0", "id":\n[1, 2, 3]\n{"hello": 1}\n\x00\xff\xfe\n')
            proc.stdin.write(b"x" * (MAX_MESSAGE_BYTES + 10) + b"\n")
            proc.stdin.write(msg(id=2, method="tools/list"))
            await until(2)
            proc.stdin.write(msg(id=3, method="no/such/method"))
            await until(3)
            proc.stdin.write(
                msg(id=4, method="tools/call", params={"name": "get_note", "arguments": {"path": "Recipes/Bread.md"}})
            )
            await until(4)
        finally:
            proc.stdin.close()
            rest = await asyncio.wait_for(proc.stdout.read(), CALL_TIMEOUT_S)
            lines += rest.decode().splitlines(keepends=True)
            await asyncio.wait_for(proc.wait(), CALL_TIMEOUT_S)
        return lines

    lines = run(go())
    parsed = [json.loads(line) for line in lines]  # every line is JSON …
    assert all(m.get("jsonrpc") == "2.0" and ("result" in m or "error" in m) for m in parsed)  # … and JSON-RPC
    by_id = {m["id"]: m for m in parsed if m.get("id") is not None}
    assert {t["name"] for t in by_id[2]["result"]["tools"]} == {"get_note", "list_notes"}
    assert by_id[3]["error"]["code"] == types.METHOD_NOT_FOUND
    assert "500 g flour" in by_id[4]["result"]["structuredContent"]["content"]
    garbage_answers = [m for m in parsed if m.get("id") is None]
    assert len(garbage_answers) == 6  # five bad lines and the oversized one, each answered, none fatal
    assert {m["error"]["code"] for m in garbage_answers} <= {types.PARSE_ERROR, types.INVALID_REQUEST}


def test_an_invalid_policy_exits_1_with_file_line_and_reason(tmp_path):
    home = make_home(
        tmp_path, POLICY.replace("default_tools: [get_note, list_notes]", "default_tools: [get_note, rm_rf]")
    )
    proc = subprocess.run(
        [cairn_executable(), "mcp", "--vault", str(CANARY_VAULT), "--client", "claude-desktop"],
        env=cairn_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    policy = home / "config" / "mcp-serve.yaml"
    assert proc.returncode == 1
    assert f"{policy}:3: " in proc.stderr, proc.stderr
    assert "rm_rf" in proc.stderr
    assert proc.stdout == ""


def test_a_missing_policy_file_exits_1_naming_it(tmp_path):
    home = make_home(tmp_path)
    config_file = tmp_path / "cairn.toml"
    config_file.write_text(f'mcp_policy = "{tmp_path / "nowhere.yaml"}"\n', encoding="utf-8")
    proc = subprocess.run(
        [cairn_executable(), "mcp", "--config", str(config_file), "--vault", str(CANARY_VAULT)],
        env=cairn_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1
    assert str(tmp_path / "nowhere.yaml") in proc.stderr
    assert proc.stdout == ""


def test_a_vault_without_an_index_exits_1_with_a_clear_message(tmp_path):
    home = make_home(tmp_path)
    proc = subprocess.run(
        [cairn_executable(), "mcp", "--vault", str(CANARY_VAULT), "--client", "claude-desktop"],
        env=cairn_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1
    assert "no index yet" in proc.stderr and "cairn index" in proc.stderr
    assert proc.stdout == ""
    assert not (home / "data" / "indexes").exists() or not any((home / "data" / "indexes").iterdir())


# ------------------------------------------------------------------------------ audit
def read_audit_lines(home: Path) -> list[dict]:
    path = home / "data" / "mcp-audit.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_audit_log_has_one_line_per_call_with_the_fields(home):
    before = len(read_audit_lines(home))

    async def go():
        async with stdio_session(home, "--client", "claude-desktop", "--tool", "search_notes") as client:
            await client.list_tools()  # not a tool call: not audited
            await client.call_tool("search_notes", {"query": WITHHELD_TOPICS["Health/Blood pressure.md"]})
            await client.call_tool("get_note", {"path": "Recipes/Bread.md"})
            await client.call_tool("get_note", {"path": "Health/Blood pressure.md"})
            await client.call_tool("ask", {"question": "bread"})  # not served

    run(go())
    lines = read_audit_lines(home)[before:]
    assert [(e["tool"], e["decision"]) for e in lines] == [
        ("search_notes", "allowed"),
        ("get_note", "allowed"),
        ("get_note", "error"),
        ("ask", "denied"),
    ]
    for e in lines:
        assert {"time", "client", "transport", "tool", "argsDigest", "paths", "withheld", "decision"} <= e.keys()
        assert e["client"] == "claude-desktop" and e["transport"] == "stdio"
        assert e["argsDigest"].startswith("sha256:")
    assert lines[0]["withheld"] >= 1  # the blood-pressure note was filtered out of the candidates
    assert "Health/Blood pressure.md" not in lines[0]["paths"]
    assert lines[1]["paths"] == ["Recipes/Bread.md"]
    raw = (home / "data" / "mcp-audit.jsonl").read_text(encoding="utf-8")
    assert "readings taken each morning" not in raw and "500 g flour" not in raw  # no argument or note text

    printed = subprocess.run(
        [cairn_executable(), "mcp", "audit", "--client", "claude-desktop", "--json"],
        env=cairn_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0
    assert [json.loads(line) for line in printed.stdout.splitlines()][-4:] == lines


# ------------------------------------------------------------------ in process (the SDK client, no subprocess)
def test_audit_lines_follow_the_policy_switch_and_policy_edits_apply_without_a_restart(canary_cairn, tmp_path):
    from cairn.audit import AuditLog
    from cairn.mcp_server import McpService, build_server
    from cairn.policy_live import PolicyHolder

    policy_file = tmp_path / "mcp-serve.yaml"
    policy_file.write_text(POLICY.replace("audit: {enabled: true}", "audit: {enabled: false}"), encoding="utf-8")
    holder = PolicyHolder(policy_file, strict=True, check_interval_s=0)
    audit_file = tmp_path / "audit.jsonl"
    from support.cairns import services_of

    service = McpService(
        services_of(canary_cairn),
        policy=holder.current,
        audit=AuditLog(audit_file),
        transport="stdio",
    )
    server = build_server(service, lambda ctx: ("reader", ("search_notes",)))

    async def go():
        async with Client(server) as client:
            quiet = await client.call_tool("list_notes", {"folder": "Recipes"})
            before = await tool_names(client)
            policy_file.write_text(
                POLICY.replace(
                    "reader: {local: false, tools: [get_note, list_notes]}",
                    "reader: {local: false, tools: [search_notes]}",
                ),
                encoding="utf-8",
            )
            holder.reload()
            after = await tool_names(client)
            loud = await client.call_tool("search_notes", {"query": "lentil soup"})
        return quiet, before, after, loud

    quiet, before, after, loud = run(go())
    assert not quiet.is_error and loud.structured_content["results"][0]["filePath"] == "Recipes/Lentil soup.md"
    assert before == {"get_note", "list_notes"} and after == {"search_notes", "get_note", "list_notes"}
    lines = [json.loads(line) for line in audit_file.read_text(encoding="utf-8").splitlines()]
    assert [(e["tool"], e["client"]) for e in lines] == [("search_notes", "reader")]  # only while audit was on

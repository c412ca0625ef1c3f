"""MCP clients of the governed server: the policy of the MCP tests, a home holding it, the SDK's client over
streamable HTTP, an in-process MCP HTTP server over a Cairn, and the checks that nothing withheld leaks through any
tool (the canary vault, tests/fixtures/canary_vault)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from cairn.mcp_server import McpHttpServer, McpService
from cairn.policy_live import PolicyHolder
from support.cairns import services_of
from support.vaults import CANARY, CANARY_VAULT, CANARY_WITHHELD

#: The policy of these tests: the shipped default plus the Private folder and two more declared clients.
POLICY = """\
version: 1
withhold: {tags: [personal], folders: [Private]}
default_tools: [get_note, list_notes]
clients:
  claude-desktop: {local: false, tools: [search_notes, get_note, get_related_notes, list_notes, ask]}
  reader: {local: false, tools: [get_note, list_notes]}
  my-local-agent: {local: true, tools: all}
audit: {enabled: true}
"""


ALL_TOOLS = ["search_notes", "get_note", "get_related_notes", "list_notes", "ask"]


#: A query that matches each withheld note's own topic (so a leak would surface).
WITHHELD_TOPICS = {
    "Health/Blood pressure.md": "blood pressure readings taken each morning",
    "Health/Sleep.md": "sleep diary insomnia melatonin",
    "Journal/2024-03-01.md": "argument with my sister about the inheritance",
    "Journal/Therapy.md": "therapy session breathing exercise grounding technique",
    "Notes/Allergies.md": "allergic to penicillin and peanuts",
    "Notes/Dream log.md": "recurring dream flooded city lighthouse keeper",
    "Notes/Passwords hint.md": "password hints for the router and the bank",
    "Private/Salary.md": "salary negotiation raise counter-offer",
    "Notes/Mood tracker.md": "mood tracker low energy in the winter",
}


#: Every note of the canary vault and the ones no client may be refused (Recipes/Bread.md, Projects/Budget.md, ...).
VAULT_NOTES = tuple(sorted(p.relative_to(CANARY_VAULT).as_posix() for p in CANARY_VAULT.rglob("*.md")))


ALLOWED = tuple(p for p in VAULT_NOTES if p not in CANARY_WITHHELD)


CALL_TIMEOUT_S = 120


def make_home(base: Path, policy: str = POLICY) -> Path:
    (base / "config").mkdir(parents=True, exist_ok=True)
    (base / "config" / "mcp-serve.yaml").write_text(policy, encoding="utf-8")
    return base


def blob(result: types.CallToolResult) -> str:
    """Everything a client receives from one call: the structured content and every text block."""
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    return json.dumps(result.structured_content, ensure_ascii=False) + "\n" + "\n".join(texts)


def every_tool_call() -> list[tuple[str, dict[str, Any]]]:
    """Calls of every tool that would reach the withheld notes if anything leaked."""
    calls: list[tuple[str, dict[str, Any]]] = []
    for query in [*WITHHELD_TOPICS.values(), CANARY, "personal"]:
        calls.append(("search_notes", {"query": query, "limit": 50}))
        calls.append(("ask", {"question": query, "top_k": 50}))
    calls += [
        ("search_notes", {"query": "notes", "tags": ["personal"]}),
        ("search_notes", {"query": "salary", "folder": "Private"}),
        ("ask", {"question": "what is my health status?", "tags": ["personal"]}),
    ]
    for path in [*CANARY_WITHHELD, *ALLOWED]:
        calls.append(("get_note", {"path": path}))
        calls.append(("get_related_notes", {"path": path, "limit": 50}))
    calls += [
        ("list_notes", {"limit": 500}),
        ("list_notes", {"tag": "personal"}),
        ("list_notes", {"folder": "Private"}),
        ("list_notes", {"folder": "Health"}),
        ("list_notes", {"folder": "Journal"}),
        ("list_notes", {"tag": "work"}),
    ]
    return calls


def assert_nothing_withheld_leaks(results: list[tuple[str, dict[str, Any], types.CallToolResult]]) -> None:
    for name, args, result in results:
        text = blob(result)
        assert CANARY not in text, f"{name}({args}) returned the canary:\n{text[:2000]}"
        for path in CANARY_WITHHELD:
            assert path not in text or (
                name in ("get_note", "get_related_notes") and args.get("path") == path and result.is_error
            ), f"{name}({args}) named withheld {path!r}:\n{text[:2000]}"


def assert_withheld_reads_look_missing(
    results: list[tuple[str, dict[str, Any], types.CallToolResult]], served: set[str]
) -> None:
    """A withheld note answers get_note/get_related_notes exactly like a note that does not exist."""
    for name, args, result in results:
        if name in ("get_note", "get_related_notes") and name in served and args["path"] in CANARY_WITHHELD:
            assert result.is_error, f"{name}({args}) was answered"
            err = result.structured_content["error"]
            assert err["code"] == "not_found"
            assert args["path"] in err["message"]


def assert_allowed_notes_served(
    results: list[tuple[str, dict[str, Any], types.CallToolResult]], served: set[str]
) -> None:
    """The tools do work for this client (so the leak check above is not vacuous)."""
    listed = next(r for n, a, r in results if n == "list_notes" and a == {"limit": 500})
    assert not listed.is_error
    assert {n["filePath"] for n in listed.structured_content["notes"]} == set(ALLOWED)
    assert listed.structured_content["total"] == len(ALLOWED)
    note = next(r for n, a, r in results if n == "get_note" and a["path"] == "Recipes/Bread.md")
    assert not note.is_error and "500 g flour" in note.structured_content["content"]
    for name, args, result in results:
        if name not in served:
            assert result.is_error and result.structured_content["error"]["code"] == "tool_not_served", (name, args)


@asynccontextmanager
async def http_session(
    url: str, token: str, *, tools: tuple[str, ...] = (), client_info: str = "some-agent"
) -> AsyncIterator[Client]:
    """The SDK client over streamable HTTP with ``Authorization: Bearer TOKEN`` and ``?tool=…`` for ``tools``."""
    if tools:
        url += "?" + urlencode([("tool", t) for t in tools])
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(CALL_TIMEOUT_S)
    ) as http:
        async with Client(
            streamable_http_client(url, http_client=http),
            mode="legacy",
            read_timeout_seconds=CALL_TIMEOUT_S,
            client_info=types.Implementation(name=client_info, version="1.0"),
        ) as client:
            yield client


TOKENS = {
    "claude-desktop": "t-claude-" + "a" * 40,  # not local: the token holder opening sessions in a loop
    "reader": "t-reader-" + "b" * 40,  # not local
    "my-local-agent": "t-local-" + "c" * 40,  # declared local in POLICY
}


@asynccontextmanager
async def mcp_server(cairn, tmp_path, **limits) -> AsyncIterator[McpHttpServer]:
    policy_file = tmp_path / "mcp-serve.yaml"
    policy_file.write_text(POLICY, encoding="utf-8")
    holder = PolicyHolder(policy_file, strict=True)
    service = McpService(
        services_of(cairn),
        policy=holder.current,
        audit=None,
        transport="http",
    )
    server = McpHttpServer(service, lambda: TOKENS, "127.0.0.1", 0, **limits)
    await server.start()
    try:
        yield server
    finally:
        await server.close()

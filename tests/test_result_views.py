"""What a new user sees in results: a hit of a note without headings names the note's title as
its ``symbol`` (never ``""``); ``/related`` and MCP ``get_related_notes`` list each other note once and never the
note itself; MCP results carry ``indexedAt`` as HTTP results do.

A small vault written here, indexed with the real model; the real aiohttp server on 127.0.0.1 and the real
``cairn mcp`` subprocess over stdio, driven by the SDK's own client. Nothing sleeps.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from cairn.app import Cairn
from support.cairns import build_index, open_cairn
from support.cli import cairn_env, cairn_executable
from support.http_client import AUTH, api
from support.mcp_client import CALL_TIMEOUT_S, make_home
from support.waits import run

NOTES = {
    # no heading at all: every chunk's heading path is empty
    "Compost plain.md": "The zqplainword compost heap is turned every second week with a fork.\n",
    "Hub.md": (
        "# Hub\n\nSee [[#Part]] below, [[Hub]] itself and [[Hub#^b1]].\n\n## Part\n\n"
        "The hub links to [[Compost plain]] and again to [[Compost plain|the heap]], to [[Missing note]] "
        "and to [[missing note]]. ^b1\n"
    ),
    "Fan.md": "Fan links to [[Hub]] here.\n\nAnd to [[Hub#Part]] there, and [[Hub|the hub]] again.\n",
    "Other.md": "Another reader of [[Hub#Part]].\n",
}
HEADINGLESS = "Compost plain.md"
QUERY = "zqplainword compost heap"
TOOLS = ["--tool", "search_notes", "--tool", "get_related_notes", "--tool", "ask"]


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder) -> tuple[Path, Path]:
    """(home with the test policy and the index of :data:`NOTES`, the vault); no Cairn left open."""
    base = tmp_path_factory.mktemp("result-views")
    vault = base / "vault"
    vault.mkdir()
    for rel, text in NOTES.items():
        (vault / rel).write_text(text, encoding="utf-8")
    home = make_home(base / "home")
    build_index(vault, home / "data", embedder, config_dir=home / "config")
    return home, vault


@pytest.fixture
def cairn(home, embedder):
    home_dir, vault = home
    opened = open_cairn(vault, home_dir / "data", embedder, config_dir=home_dir / "config")
    yield opened
    opened.close()


def http_get(cairn: Cairn, *paths: str) -> list[dict]:
    async def scenario():
        async with api(cairn) as (_app, server, session):
            out = []
            for path in paths:
                async with session.get(server.url + path, headers=AUTH) as resp:
                    assert resp.status == 200, await resp.text()
                    out.append(await resp.json())
            return out

    return run(scenario())


def mcp_calls(home: Path, vault: Path, calls: list[tuple[str, dict]]) -> list[types.CallToolResult]:
    params = StdioServerParameters(
        command=cairn_executable(),
        args=["mcp", "--vault", str(vault), "--client", "claude-desktop", *TOOLS],
        env=cairn_env(home),
    )

    async def go():
        with open(home / "mcp.stderr", "a", encoding="utf-8") as errlog:
            async with Client(
                stdio_client(params, errlog=errlog),
                mode="legacy",
                read_timeout_seconds=CALL_TIMEOUT_S,
                client_info=types.Implementation(name="test", version="1.0"),
            ) as client:
                return [await client.call_tool(name, args) for name, args in calls]

    return run(go())


def assert_related_lists_each_other_note_once(related: dict) -> None:
    links = [(link["targetPath"], link["target"]) for link in related["links"]]
    assert links == [("Compost plain.md", "Compost plain"), (None, "Missing note")], links
    assert related["backlinks"] == [{"filePath": "Fan.md", "line": 1}, {"filePath": "Other.md", "line": 1}]


def test_a_hit_of_a_note_without_headings_names_the_note_title_over_http(cairn):
    (search,) = http_get(cairn, "/search?q=" + quote(QUERY))
    hit = next(h for h in search["results"] if h["filePath"] == HEADINGLESS)
    assert hit["symbol"] == "Compost plain"
    hub = next(
        h for h in http_get(cairn, "/search?q=" + quote("hub links part"))[0]["results"] if h["filePath"] == "Hub.md"
    )
    assert hub["symbol"].startswith("Hub")  # a heading path is still the heading path


def test_related_lists_each_other_note_once_and_never_the_note_itself(cairn):
    related, note = http_get(cairn, "/related?path=Hub.md", "/notes/Hub.md")
    assert_related_lists_each_other_note_once(related)
    # the note view keeps every link and every linking line (it is the note's own record)
    assert sum(link["targetPath"] == "Hub.md" for link in note["links"]) == 3
    assert [b["filePath"] for b in note["backlinks"]] == ["Fan.md", "Fan.md", "Other.md"]


@pytest.mark.slow  # a `cairn mcp` subprocess
def test_mcp_results_carry_indexed_at_and_the_title_symbol_and_related_lists_each_note_once(home, cairn):
    (search,) = http_get(cairn, "/search?q=" + quote(QUERY))
    http_hit = next(h for h in search["results"] if h["filePath"] == HEADINGLESS)
    cairn.close()  # the MCP server opens the index itself
    found, answer, related = mcp_calls(
        *home,
        [
            ("search_notes", {"query": QUERY}),
            ("ask", {"question": "How often is the zqplainword compost heap turned?"}),
            ("get_related_notes", {"path": "Hub.md"}),
        ],
    )
    assert not found.is_error, found.structured_content
    hit = next(h for h in found.structured_content["results"] if h["filePath"] == HEADINGLESS)
    assert hit["indexedAt"] == http_hit["indexedAt"] > 0
    assert hit["symbol"] == "Compost plain"
    assert "Compost plain.md › Compost plain" in next(c.text for c in found.content if isinstance(c, types.TextContent))
    sources = answer.structured_content["sources"]
    assert sources and all(s["indexedAt"] > 0 for s in sources), sources
    assert "cosine" not in sources[0]  # the ranking internals stay out
    assert_related_lists_each_other_note_once(related.structured_content)

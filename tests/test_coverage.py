"""Every search and ask result says how much of the index it was drawn from: ``coverage`` ``{notes, embedded,
pending}`` (counts of notes), over HTTP (``GET /search``, the ``done`` event of ``POST /ask``), the CLI's ``--json``
and MCP results, so a client can say "still indexing: results may be incomplete" during the first index.

The index is caught half-embedded the way a first index leaves it: three notes indexed and embedded, then two more
written with their text (keyword-searchable) but no vectors yet. Real SQLite, the real model, a real aiohttp server
on 127.0.0.1, the real ``cairn`` CLI and a real MCP client session over ``cairn mcp`` (stdio). A client not declared
local is counted without its withheld notes, so the counts cannot reveal them.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from cairn.app import Cairn
from cairn.http import make_app, serve
from support.cairns import open_cairn, services_of
from support.cli import cairn_env, cairn_executable
from support.half_embedded import half_embedded
from support.http_client import TOKEN, read_events
from support.mcp_client import CALL_TIMEOUT_S
from support.waits import run

AUTH = {"Authorization": f"Bearer {TOKEN}"}
OWNER = {"notes": 5, "embedded": 3, "pending": 2, "refining": 0}
#: What a client not declared local is told: the two withheld notes are in no count.
NOT_LOCAL = {"notes": 3, "embedded": 2, "pending": 1, "refining": 0}
DONE = {"notes": 5, "embedded": 5, "pending": 0, "refining": 0}


@pytest.fixture
def indexed(tmp_path: Path, embedder: Any) -> Iterator[tuple[Path, Path, Cairn]]:
    """(home, vault, a Cairn over the half-embedded index) — the Cairn embeds only when a test says so."""
    home, vault = half_embedded(tmp_path, embedder)
    cairn = open_cairn(vault, home / "data", embedder, config_dir=home / "config")
    yield home, vault, cairn
    cairn.close()


# -- HTTP ------------------------------------------------------------------------------------------


def test_http_search_and_ask_say_what_is_still_pending_then_that_nothing_is(indexed):
    _, _, cairn = indexed

    async def scenario() -> list[Any]:
        server = await serve(make_app(services_of(cairn), token=TOKEN), "127.0.0.1", 0)
        seen: list[Any] = []
        try:
            async with aiohttp.ClientSession() as session:
                for _ in range(2):
                    async with session.get(server.url + "/search", params={"q": "quillwort"}, headers=AUTH) as resp:
                        assert resp.status == 200
                        seen.append(await resp.json())
                    body = {"question": "Where does the quillwort grow?"}
                    async with session.post(server.url + "/ask", json=body, headers=AUTH) as resp:
                        seen.append(await read_events(resp))
                    if len(seen) == 2:
                        cairn.indexing.index()  # the vectors are written: the same requests now see everything
        finally:
            await server.close()
        return seen

    search_before, ask_before, search_after, ask_after = run(scenario())
    assert search_before["coverage"] == OWNER
    assert [r["filePath"] for r in search_before["results"]][:1] == ["Lake.md"]  # found by its words already
    assert ask_before[-1][0] == "done" and ask_before[-1][1]["coverage"] == OWNER
    assert search_after["coverage"] == DONE
    assert ask_after[-1][1]["coverage"] == DONE


# -- CLI --------------------------------------------------------------------------------------------


def cli(home: Path, vault: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [cairn_executable(), *args, "--vault", str(vault)],
        env=cairn_env(home),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow  # two cairn subprocesses (search, ask), each loading the model
def test_cli_search_json_answers_a_half_embedded_index_as_it_is_and_says_so(tmp_path, embedder):
    home, vault = half_embedded(tmp_path, embedder)
    proc = cli(home, vault, "search", "quillwort", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["coverage"] == OWNER  # answered from what is indexed now, not after embedding the rest
    assert [r["filePath"] for r in out["results"]][:1] == ["Lake.md"]
    assert "Still indexing: 2 of 5 notes" in proc.stderr and "results may be incomplete" in proc.stderr

    asked = cli(home, vault, "ask", "Where does the quillwort grow?", "--json")
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout)["coverage"] == OWNER

    assert cli(home, vault, "index").returncode == 0
    done = cli(home, vault, "search", "quillwort", "--json")
    assert json.loads(done.stdout)["coverage"] == DONE
    assert "Still indexing" not in done.stderr


# -- MCP --------------------------------------------------------------------------------------------


def mcp_calls(home: Path, vault: Path, client: str, then: Any = None) -> list[types.CallToolResult]:
    """``search_notes`` and ``ask`` for ``client`` over ``cairn mcp`` (stdio); ``then()`` runs between two rounds."""
    params = StdioServerParameters(
        command=cairn_executable(),
        args=["mcp", "--vault", str(vault), "--client", client, "--tool", "search_notes", "--tool", "ask"],
        env=cairn_env(home),
    )

    async def go() -> list[types.CallToolResult]:
        out: list[types.CallToolResult] = []
        with open(home / "mcp.stderr", "a", encoding="utf-8") as errlog:
            async with Client(
                stdio_client(params, errlog=errlog),
                mode="legacy",
                read_timeout_seconds=CALL_TIMEOUT_S,
                client_info=types.Implementation(name="test", version="1.0"),
            ) as c:
                for round_ in range(2 if then else 1):
                    if round_:
                        then()
                    out.append(await c.call_tool("search_notes", {"query": "zqcover quillwort"}))
                    out.append(await c.call_tool("ask", {"question": "Where does the quillwort grow?"}))
        return out

    return run(go())


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def test_mcp_results_carry_coverage_and_the_notice_then_nothing_pending(indexed):
    home, vault, cairn = indexed
    search, ask, search_after, ask_after = mcp_calls(home, vault, "my-local-agent", then=cairn.indexing.index)
    assert not search.is_error and not ask.is_error
    assert search.structured_content["coverage"] == OWNER
    assert ask.structured_content["coverage"] == OWNER
    for result in (search, ask):
        assert "Still indexing: 2 of 5 notes" in text_of(result)
    assert search_after.structured_content["coverage"] == DONE
    assert ask_after.structured_content["coverage"] == DONE
    assert "Still indexing" not in text_of(search_after) + text_of(ask_after)


def test_a_client_not_declared_local_is_counted_without_its_withheld_notes(indexed):
    home, vault, _ = indexed
    search, ask = mcp_calls(home, vault, "claude-desktop")
    assert search.structured_content["coverage"] == NOT_LOCAL
    assert ask.structured_content["coverage"] == NOT_LOCAL
    assert "Still indexing: 1 of 3 notes" in text_of(search)
    assert {r["filePath"] for r in search.structured_content["results"]} <= {"Garden.md", "Lake.md", "Bread.md"}

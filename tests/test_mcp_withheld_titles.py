"""The names of withheld notes never reach an MCP client not declared local through the notes it IS served
(break report defects 4 and 8): a public note's heading that links to a withheld note (its ``symbol``), its
aliases and front-matter naming one, its links list, and a note whose front-matter repeats ``tags`` so that
``personal`` was silently lost.

The real ``cairn mcp`` subprocess over stdio, driven by the SDK's own client, over a small vault written here
and indexed with the real model. The owner's own (declared local) client still sees every name: the masking is
not a blanket change.
"""

from __future__ import annotations

import re
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
from support.mcp_client import CALL_TIMEOUT_S, blob, make_home
from support.waits import run

pytestmark = pytest.mark.slow  # a `cairn mcp` subprocess per test

NOTES = {
    "People/Dr Smith psychiatrist.md": "---\ntags: [personal]\naliases: [The Shrink]\n---\n"
    "# Dr Smith psychiatrist\nAppointments and prescriptions.\n## Viral load\nx\n",
    "HIV diagnosis 2026.md": "---\ntags: [personal]\naliases: [Chemo Schedule]\n---\n# HIV diagnosis 2026\n"
    "Results from the clinic.\n",
    "log.md": "# Weekly log\n## Meeting with [[Dr Smith psychiatrist]]\n"
    "We talked about the weekly gardening schedule and zqsymbolword.\n",
    "followup.md": "# Weekly log\n## Follow-up on [[HIV diagnosis 2026#Viral load]]\n"
    "The zqsymbolword compost plan for the garden beds, turned every week.\n",
    "call.md": "# Weekly log\n## Call [[Dr Smith psychiatrist|my doctor]] again\n"
    "The zqsymbolword seed order for the spring garden: beans and peas, weekly.\n",
    "rota.md": "# Weekly log\n## Ask about the [[Chemo Schedule]] and [[the shrink]]\n"
    "The zqsymbolword watering rota for the garden in the summer, weekly.\n",
    "other.md": '---\naliases: ["[[Dr Smith psychiatrist]]", Other page]\nup: "[[HIV diagnosis 2026]]"\n---\n'
    "# Other\nzqaliasword: see [[Chemo Schedule]], [[Elsewhere/HIV diagnosis 2026]] and [[log]].\n",
    "therapy.md": "---\ntags: [personal]\ntags: [work]\n---\n# Therapy\nzqfmdupword session notes about my anxiety.\n",
    "public.md": "# Public\nzqfmdupword session notes about my garden and its anxiety-free weeds.\n",
}
#: Words only the withheld notes' names and headings hold (case-insensitive).
NAMES = re.compile(r"dr\.? smith|psychiatrist|hiv|diagnosis|chemo|shrink|viral load|my doctor", re.IGNORECASE)
TOOLS = ["--tool", "search_notes", "--tool", "get_related_notes", "--tool", "ask"]


@pytest.fixture(scope="module")
def titles_home(tmp_path_factory, embedder) -> tuple[Path, Path]:
    """(home with the test policy and the index, the vault)."""

    base = tmp_path_factory.mktemp("mcp-titles")
    vault = base / "vault"
    for rel, text in NOTES.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(text, encoding="utf-8")
    home = make_home(base / "home")
    build_index(vault, home / "data", embedder, config_dir=home / "config")
    return home, vault


@asynccontextmanager
async def session(home: Path, vault: Path, client: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=cairn_executable(), args=["mcp", "--vault", str(vault), "--client", client, *TOOLS], env=cairn_env(home)
    )
    with open(home / "mcp.stderr", "a", encoding="utf-8") as errlog:
        async with Client(
            stdio_client(params, errlog=errlog),
            mode="legacy",
            read_timeout_seconds=CALL_TIMEOUT_S,
            client_info=types.Implementation(name="test", version="1.0"),
        ) as c:
            yield c


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("search_notes", {"query": "zqsymbolword garden weekly", "limit": 20}),
    ("search_notes", {"query": "zqaliasword"}),
    ("search_notes", {"query": "zqfmdupword session notes anxiety", "limit": 20}),
    ("ask", {"question": "What is the zqsymbolword plan for the garden?"}),
    ("get_note", {"path": "log.md"}),
    ("get_note", {"path": "other.md"}),
    ("get_note", {"path": "therapy.md"}),
    ("get_related_notes", {"path": "log.md"}),
    ("get_related_notes", {"path": "other.md"}),
    ("list_notes", {"limit": 500}),
]


def call_everything(home: Path, vault: Path, client: str) -> dict[tuple[str, str], types.CallToolResult]:
    async def go():
        async with session(home, vault, client) as c:
            return {(name, repr(args)): await c.call_tool(name, args) for name, args in CALLS}

    return run(go())


def result(results: dict, name: str, **args: Any) -> types.CallToolResult:
    return next(r for (n, a), r in results.items() if n == name and all(repr(v) in a for v in args.values()))


def test_no_tool_output_names_a_withheld_note_through_headings_aliases_or_links(titles_home):
    results = call_everything(*titles_home, "claude-desktop")
    for (name, args), res in results.items():
        leaked = NAMES.findall(blob(res))
        assert not leaked, f"{name}({args}) named a withheld note {leaked}:\n{blob(res)[:3000]}"
    # the tools did serve the public notes (the check above is not vacuous)
    hits = result(results, "search_notes", query="zqsymbolword garden weekly").structured_content["results"]
    symbols = {h["filePath"]: h["symbol"] for h in hits if h["filePath"] != "public.md"}
    assert symbols == {
        "log.md": "Weekly log › Meeting with [withheld link]",
        "followup.md": "Weekly log › Follow-up on [withheld link]",
        "call.md": "Weekly log › Call [withheld link] again",
        "rota.md": "Weekly log › Ask about the [withheld link] and [withheld link]",
    }, symbols
    other = result(results, "get_note", path="other.md").structured_content
    assert other["aliases"] == ["[withheld link]", "Other page"]
    assert other["frontmatter"]["aliases"] == ["[withheld link]", "Other page"]
    assert [link["target"] for link in other["links"]] == ["log"]
    answer = result(results, "ask", question="What is the zqsymbolword plan for the garden?").structured_content
    assert "log.md" in {s["filePath"] for s in answer["sources"]}


def test_a_note_repeating_its_tags_key_with_personal_first_is_withheld(titles_home):
    results = call_everything(*titles_home, "claude-desktop")
    got = result(results, "get_note", path="therapy.md")
    assert got.is_error and got.structured_content["error"]["code"] == "not_found"
    found = result(results, "search_notes", query="zqfmdupword session notes anxiety").structured_content["results"]
    assert "public.md" in {h["filePath"] for h in found} and "therapy.md" not in {h["filePath"] for h in found}
    listed = {n["filePath"] for n in result(results, "list_notes").structured_content["notes"]}
    assert listed == {"log.md", "followup.md", "call.md", "rota.md", "other.md", "public.md"}


def test_the_owners_local_client_still_sees_the_names_and_the_note(titles_home):
    results = call_everything(*titles_home, "my-local-agent")
    hits = result(results, "search_notes", query="zqsymbolword garden weekly").structured_content["results"]
    assert "Weekly log › Meeting with Dr Smith psychiatrist" in {h["symbol"] for h in hits}
    assert result(results, "get_note", path="other.md").structured_content["aliases"][0] == "[[Dr Smith psychiatrist]]"
    therapy = result(results, "get_note", path="therapy.md").structured_content
    assert therapy["tags"] == ["personal", "work"]

"""An empty query lists the most recently modified notes (docs/design.md, "Contract" → Recent notes): over HTTP (the
real app on 127.0.0.1 over a real index), MCP (the SDK's client in a session with the server, in process) and the
CLI, newest first, only what the caller may see.

The vault is written here with set modification times, so the order is known, and indexed with the real model:
the withheld note (tagged personal) is the newest of all, and a public note links to it.
"""

from __future__ import annotations

import json
import os

import aiohttp
import pytest
from mcp import Client

from cairn import cli
from cairn.audit import AuditLog, audit_path, read_audit
from cairn.http import make_app, serve
from cairn.mcp_server import McpService, build_server
from cairn.policy import parse_policy
from support.cairns import open_cairn, opened_cairn, services_of
from support.http_client import AUTH, TOKEN
from support.requests import search_request
from support.waits import run

#: path → (text, modification time in seconds since the epoch): newest first in this order.
NOTES = {
    "Private/Diary.md": ("---\ntags: [personal]\n---\n# Diary\n\nDIARY-CANARY-recent secret text.\n", 1_700_000_900),
    "Garden/Compost.md": ("# Compost\n\nTurn the heap every two weeks; see [[Diary]] for the dates.\n", 1_700_000_800),
    "Kitchen/Bread.md": ("---\ntags: [kitchen]\n---\n# Bread\n\nA sourdough loaf at 75% hydration.\n", 1_700_000_700),
    "Garden/Garlic.md": ("# Garlic\n\nPlant the cloves 5 cm deep in October.\n", 1_700_000_600),
    "Kitchen/Soup.md": ("---\ntags: [kitchen]\n---\n# Soup\n\nLentil soup with cumin.\n", 1_700_000_500),
    "Inbox.md": ("", 1_700_000_400),  # a note with no text: listed by its title alone
}
NEWEST_FIRST = list(NOTES)
VISIBLE = [p for p in NEWEST_FIRST if p != "Private/Diary.md"]
POLICY = """\
version: 1
withhold: {tags: [personal], folders: []}
default_tools: [get_note, list_notes]
clients:
  remote-agent: {local: false, tools: all}
  home-agent: {local: true, tools: all}
audit: {enabled: true}
"""


@pytest.fixture(scope="module")
def recent_cairn(tmp_path_factory, hash_embedder):
    """A Cairn over the vault of :data:`NOTES`, each file's modification time set, fully indexed (with the stand-in
    model: a listing by modification time moves data, it ranks nothing)."""
    base = tmp_path_factory.mktemp("recent")
    vault = base / "vault"
    for rel, (text, mtime) in NOTES.items():
        path = vault / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        os.utime(path, (mtime, mtime))
    cairn = open_cairn(vault, base / "data", hash_embedder)
    cairn.indexing.index()
    yield cairn
    cairn.close()


def _get(cairn, params: list[tuple[str, str]]) -> tuple[int, dict]:
    async def go():
        server = await serve(make_app(services_of(cairn), token=TOKEN), "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{server.url}/search", params=params, headers=AUTH) as resp:
                    return resp.status, await resp.json()
        finally:
            await server.close()

    return run(go())


# -- HTTP ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("params", [[], [("q", "")], [("q", "   ")]], ids=["no q", "empty q", "blank q"])
def test_get_search_without_words_lists_the_most_recently_modified_notes_newest_first(recent_cairn, params):
    status, body = _get(recent_cairn, params)
    assert status == 200, body
    assert body["recent"] is True
    assert [r["filePath"] for r in body["results"]] == NEWEST_FIRST
    first = body["results"][0]
    assert first["modifiedAt"] == NOTES[NEWEST_FIRST[0]][1]
    assert first["title"] == "Diary" and "DIARY-CANARY-recent" in first["snippet"]  # the owner sees every note
    assert not {"score", "relevance", "cosine"} & {key for r in body["results"] for key in r}  # nothing was ranked
    empty = body["results"][-1]
    assert (empty["filePath"], empty["title"], empty["snippet"]) == ("Inbox.md", "Inbox", "")
    assert body["coverage"]["notes"] == len(NOTES)


def test_recent_notes_keep_top_k_and_the_tag_and_folder_scope(recent_cairn):
    status, body = _get(recent_cairn, [("topK", "2")])
    assert status == 200 and [r["filePath"] for r in body["results"]] == NEWEST_FIRST[:2]
    status, body = _get(recent_cairn, [("tag", "kitchen")])
    assert [r["filePath"] for r in body["results"]] == ["Kitchen/Bread.md", "Kitchen/Soup.md"]
    status, body = _get(recent_cairn, [("folder", "garden/")])  # folder case aside, as a search's scope
    assert [r["filePath"] for r in body["results"]] == ["Garden/Compost.md", "Garden/Garlic.md"]
    status, body = _get(recent_cairn, [("q", "garlic")])  # words: a ranked search, as before
    assert "recent" not in body and body["results"][0]["filePath"] == "Garden/Garlic.md"
    assert {"score", "relevance"} <= set(body["results"][0])


def test_a_bad_top_k_is_still_refused_without_words(recent_cairn):
    status, body = _get(recent_cairn, [("topK", "0")])
    assert status == 400 and body["error"]["code"] == "bad_request"


# -- the CLI --------------------------------------------------------------------------------------------


def _cli(cairn, capsys, *args: str) -> tuple[int, str, str]:
    config = cairn.config
    code = cli.main(["search", *args, "--vault", str(config.vault), "--data-dir", str(config.data_dir)])
    out, err = capsys.readouterr()
    return code, out, err


def test_cairn_search_with_an_empty_query_prints_the_recent_notes(recent_cairn, capsys):
    code, out, _ = _cli(recent_cairn, capsys, "")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"The {len(NOTES)} most recently modified notes:"
    listed = [line.split(". ", 1)[1].split("  (modified ")[0] for line in lines if line[:1].isdigit()]
    assert listed == NEWEST_FIRST
    assert "\n   # Compost Turn the heap every two weeks" in out
    code, out, _ = _cli(recent_cairn, capsys, "--json", "--top-k", "3")  # no QUERY at all: the same listing
    data = json.loads(out)
    assert code == 0 and data["recent"] is True
    assert [r["filePath"] for r in data["results"]] == NEWEST_FIRST[:3]


def test_cairn_search_says_so_when_the_scope_holds_no_recent_note(recent_cairn, capsys):
    code, out, _ = _cli(recent_cairn, capsys, "", "--tag", "nosuchtag")
    assert (code, out) == (0, "No indexed note carries these tags or lies in these folders.\n")


# -- MCP: only what the caller may see ------------------------------------------------------------------


def _mcp_recent(cairn, client: str, arguments: dict, folder) -> tuple[object, list[dict]]:
    """``search_notes(arguments)`` as ``client`` under :data:`POLICY`, with its audit lines (kept in ``folder``)."""
    policy = parse_policy(POLICY, "test-policy")
    log = AuditLog(audit_path(folder))
    service = McpService(services_of(cairn), policy=lambda: policy, audit=log, transport="stdio")
    server = build_server(service, lambda ctx: (client, ("search_notes",)))

    async def go():
        async with Client(server) as session:
            return await session.call_tool("search_notes", arguments)

    return run(go()), list(read_audit(log.path))


@pytest.mark.parametrize("arguments", [{}, {"query": ""}], ids=["no query", "empty query"])
def test_a_client_not_declared_local_never_sees_the_withheld_note_among_recent_notes(recent_cairn, arguments, tmp_path):
    result, audit = _mcp_recent(recent_cairn, "remote-agent", {**arguments, "limit": 3}, tmp_path)
    assert not result.is_error
    data = result.structured_content
    assert data["recent"] is True
    assert [r["filePath"] for r in data["results"]] == VISIBLE[:3]  # the limit is still filled with visible notes
    text = json.dumps(data) + "".join(block.text for block in result.content)
    assert "Diary" not in text.replace("[withheld link]", "") and "DIARY-CANARY" not in text
    assert "[withheld link]" in data["results"][0]["snippet"]  # Compost links to the diary by its name
    assert "most recently modified note(s), newest first" in result.content[0].text
    assert data["coverage"]["notes"] == len(NOTES) - 1  # the withheld note is in no count
    assert [(line["tool"], line["decision"], line["withheld"]) for line in audit] == [("search_notes", "allowed", 1)]


def test_a_local_client_sees_every_recent_note(recent_cairn, tmp_path):
    result, _ = _mcp_recent(recent_cairn, "home-agent", {"limit": 3}, tmp_path)
    data = result.structured_content
    assert [r["filePath"] for r in data["results"]] == NEWEST_FIRST[:3]
    assert "[[Diary]]" in data["results"][1]["snippet"]


def test_the_search_notes_schema_says_a_query_may_be_left_out():
    from cairn.tool_schemas import MCP_TOOL_SCHEMAS

    schema = MCP_TOOL_SCHEMAS["search_notes"]
    assert "query" not in schema.get("required", [])
    assert "most recently modified" in schema["properties"]["query"]["description"]


def test_the_sample_vaults_recent_notes_follow_a_touched_note(tmp_path, vault_copy, hash_embedder):
    """A note saved a moment ago goes to the top of the listing once indexed (its content unchanged: a touch)."""
    with opened_cairn(vault_copy, tmp_path / "data", hash_embedder) as cairn:
        cairn.indexing.index()
        services = services_of(cairn)
        before = [h.file_path for h in services.search.search(search_request("", top_k=50)).hits]
        last = before[-1]
        newest = max(os.stat(vault_copy / p).st_mtime for p in before) + 60
        os.utime(vault_copy / last, (newest, newest))
        cairn.indexing.index()
        after = [h.file_path for h in services.search.search(search_request("", top_k=50)).hits]
    assert after[0] == last and sorted(after) == sorted(before)

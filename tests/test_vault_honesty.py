"""What sync tools and hand-edited notes leave in a vault, seen through the real HTTP API over a real index: a
tab-indented front-matter item is reported, not guessed into tags; a note's links to its own
headings make it no backlink of its own; Obsidian block ids (``^d1``) stay out of answers and snippets.

Real files in a temp vault, the real model, a real aiohttp server on 127.0.0.1. Nothing sleeps.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from support.cairns import open_cairn
from support.http_client import AUTH, api, read_events
from support.requests import search_request
from support.waits import run

NOTES = {
    "Tabbed.md": "---\ntags:\n- one\n\t- two\n---\nA note whose front-matter has one tab-indented list item.\n",
    "Tabbed list.md": "---\ntags:\n\t- alpha\n\t- beta\n---\nEvery list item of this one is indented with a tab.\n",
    "Decisions.md": (
        "# Decisions\n\nSee [[#Why]] below and [[#^d1]].\n\n## Why\n\n"
        "We compared the three storage options for a week. ^d0\n\n"
        "We chose option B for the archive storage. ^d1\n\n"
        "The archive storage moves next spring.\n^d2\n"
    ),
    "Reader.md": "A reader links to [[Decisions#Why]] and [[Decisions#^d1]].\n",
    "Plans/Trip.md": "The zqtripword plan: the train on Friday at nine.\n",
    # Syncthing's copy of the other side of a conflicting edit, and one of a note without an extension's kind
    "Plans/Trip.sync-conflict-20240315-101112-ABCDEF7.md": "The zqtripword plan: the bus on Saturday.\n",
    # iCloud's placeholder of a note that was never downloaded here
    "Plans/.Packing.md.icloud": "bplist00 placeholder\n",
}
CONFLICT = "Plans/Trip.sync-conflict-20240315-101112-ABCDEF7.md"


@pytest.fixture(scope="module")
def honesty_cairn(tmp_path_factory, embedder):
    base = tmp_path_factory.mktemp("honesty")
    vault = base / "vault"
    vault.mkdir()
    for name, text in NOTES.items():
        (vault / name).parent.mkdir(parents=True, exist_ok=True)
        (vault / name).write_text(text, encoding="utf-8")
    cairn = open_cairn(vault, base / "data", embedder)
    cairn.indexing.index()
    yield cairn
    cairn.close()


async def get_json(session, url: str) -> dict:
    async with session.get(url, headers=AUTH) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


def test_a_tab_indented_front_matter_item_is_reported_as_broken_not_guessed_into_tags(honesty_cairn):
    async def scenario():
        async with api(honesty_cairn) as (_app, server, session):
            notes = {
                p: await get_json(session, f"{server.url}/notes/{quote(p)}") for p in ("Tabbed.md", "Tabbed list.md")
            }
            stats = await get_json(session, f"{server.url}/index/stats")
            tags = await get_json(session, f"{server.url}/tags")
        return notes, stats, tags

    notes, stats, tags = run(scenario())
    for note in notes.values():
        assert note["tags"] == [] and note["frontmatter"] == {}, note
    errors = {e["filePath"]: e["reason"] for e in stats["errors"]}
    for path in notes:
        assert "indented with a tab" in errors[path], errors
    listed = {t["tag"] if isinstance(t, dict) else t for t in tags.get("tags", tags)}
    assert not listed & {"-", "one", "two", "alpha", "beta"}, listed


def test_links_to_a_notes_own_headings_and_blocks_make_it_no_backlink_of_itself(honesty_cairn):
    async def scenario():
        async with api(honesty_cairn) as (_app, server, session):
            note = await get_json(session, f"{server.url}/notes/{quote('Decisions.md')}")
            related = await get_json(session, f"{server.url}/related?path={quote('Decisions.md')}")
        return note, related

    note, related = run(scenario())
    assert note["backlinks"] == [{"filePath": "Reader.md", "line": 1}]
    assert {b["filePath"] for b in related["backlinks"]} == {"Reader.md"}
    assert any(link["targetPath"] == "Decisions.md" for link in note["links"])  # the links themselves are kept


def test_block_ids_stay_out_of_the_extractive_answer_and_the_snippets(honesty_cairn):
    async def scenario():
        async with api(honesty_cairn) as (_app, server, session):
            async with session.post(
                f"{server.url}/ask",
                json={"question": "which option did we choose for the archive storage"},
                headers=AUTH,
            ) as resp:
                assert resp.status == 200
                events = await read_events(resp)
            search = await get_json(session, f"{server.url}/search?q=archive+storage+option")
            note = await get_json(session, f"{server.url}/notes/{quote('Decisions.md')}")
        return events, search, note

    events, search, note = run(scenario())
    answer = "".join(d["text"] for n, d in events if n == "token")
    assert "We chose option B for the archive storage." in answer, answer
    assert "^d" not in answer, answer
    sources = [d for n, d in events if n == "sources"][0]
    snippets = [h["snippet"] for h in [*search["results"], *sources] if h["filePath"] == "Decisions.md"]
    assert snippets and all("^d" not in s for s in snippets), snippets
    assert "^d1" in note["content"]  # the note's own text keeps them: they are link targets
    assert any(link.get("blockId") == "d1" for link in note["links"]), note["links"]


def test_a_syncthing_conflict_copy_is_not_indexed_as_the_note_and_is_listed_in_stats(honesty_cairn):
    async def scenario():
        async with api(honesty_cairn) as (_app, server, session):
            search = await get_json(session, f"{server.url}/search?q=zqtripword")
            stats = await get_json(session, f"{server.url}/index/stats")
            async with session.get(f"{server.url}/notes/{quote(CONFLICT)}", headers=AUTH) as resp:
                status = resp.status
        return search, stats, status

    search, stats, status = run(scenario())
    assert {h["filePath"] for h in search["results"]} == {"Plans/Trip.md"}
    listed = {e["filePath"]: e for e in stats["errors"]}
    assert listed[CONFLICT]["skipped"] is True
    assert "Syncthing conflict copy of 'Plans/Trip.md'" in listed[CONFLICT]["reason"]
    assert status == 404


def test_conflict_copies_are_indexed_when_the_config_says_so(tmp_path, embedder):
    vault = tmp_path / "vault"
    (vault / "Plans").mkdir(parents=True)
    for name in ("Plans/Trip.md", CONFLICT):
        (vault / name).write_text(NOTES[name], encoding="utf-8")
    cairn = open_cairn(vault, tmp_path / "data", embedder, sync_conflicts="index")
    try:
        cairn.indexing.index()
        hits = {h.file_path for h in cairn.query.search(search_request("zqtripword", top_k=5)).hits}
    finally:
        cairn.close()
    assert hits == {"Plans/Trip.md", CONFLICT}


def test_an_icloud_placeholder_of_a_note_never_indexed_is_listed_as_not_downloaded(honesty_cairn):
    async def scenario():
        async with api(honesty_cairn) as (_app, server, session):
            return await get_json(session, f"{server.url}/index/stats")

    stats = run(scenario())
    listed = {e["filePath"]: e["reason"] for e in stats["notDownloaded"]}
    assert set(listed) == {"Plans/Packing.md"}
    assert (
        listed["Plans/Packing.md"].startswith("not downloaded") and ".Packing.md.icloud" in listed["Plans/Packing.md"]
    )

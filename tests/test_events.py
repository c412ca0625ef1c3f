"""``GET /events`` over a real HTTP server on loopback, fed by the real file watcher and indexer: a deleted or
renamed note is announced as ``removed`` {filePath} while an edited one is not; and the event bus itself.

Nothing sleeps: the stream is read with a deadline until the expected events have arrived.
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from cairn.http import make_app, serve
from cairn.index import VaultWatcher
from support.cairns import services_of
from support.http_client import AUTH, TOKEN
from support.requests import search_request
from support.waits import run

DEADLINE_S = 45.0


async def next_event(stream: aiohttp.ClientResponse, deadline: float) -> tuple[str, dict]:
    """The next ``(name, data)`` of an SSE stream (comments skipped); fails once ``deadline`` (monotonic) passes."""
    name = None
    while True:
        left = deadline - time.monotonic()
        assert left > 0, "the expected events did not arrive in time"
        line = (await asyncio.wait_for(stream.content.readline(), left)).decode("utf-8").rstrip("\n")
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            assert name is not None, f"data without an event name: {line!r}"
            return name, json.loads(line[len("data: ") :])


@pytest.mark.slow
def test_a_deleted_and_a_renamed_note_stream_removed_events_and_an_edited_one_does_not(fresh_cairn):
    cairn = fresh_cairn
    cairn.indexing.index()
    vault = cairn.config.vault
    deleted, renamed, edited = "Garden/Garlic.md", "Garden/Compost.md", "Kitchen/Sourdough.md"
    for rel in (deleted, renamed, edited):
        assert cairn.store.note_by_path(rel) is not None, rel
    new_name = "Garden/Three-bay compost.md"

    async def scenario():
        watcher = VaultWatcher(
            vault,
            apply_hints=cairn.indexing.save_lane.save,
            reconcile=cairn.indexing.index,
            hints=cairn.indexing.hints,
            executor=cairn.indexing.save_lane.executor,
            ignore=cairn.config.ignore,
        )
        app = make_app(services_of(cairn), token=TOKEN)
        await watcher.start()
        server = await serve(app, "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(server.url + "/events", headers=AUTH) as stream:
                    assert stream.status == 200
                    assert await asyncio.wait_for(stream.content.readline(), 10) == b": connected\n"
                    (vault / deleted).unlink()
                    (vault / renamed).rename(vault / new_name)
                    with open(vault / edited, "a", encoding="utf-8") as fh:
                        fh.write("\nFeed the starter twice a day in summer.\n")
                    events: list[tuple[str, dict]] = []
                    deadline = time.monotonic() + DEADLINE_S
                    removed: set[str] = set()
                    # Until both removals and the edit are indexed (the edit may come in a batch of its own).
                    while not ({deleted, renamed} <= removed and _edit_indexed(cairn, edited)):
                        name, data = await next_event(stream, deadline)
                        events.append((name, data))
                        if name == "removed":
                            removed.add(data["filePath"])
                    return events
        finally:
            await server.close()
            await watcher.stop()

    events = run(scenario())
    removed = [d for n, d in events if n == "removed"]
    assert sorted(d["filePath"] for d in removed) == sorted([deleted, renamed])  # each once; never the edited note
    assert all(set(d) == {"filePath"} for d in removed)
    assert cairn.store.note_by_path(deleted) is None and cairn.store.note_by_path(renamed) is None
    assert cairn.store.note_by_path(new_name) is not None
    paths = [h.file_path for h in cairn.query.search(search_request("compost bays from pallets", top_k=10)).hits]
    assert paths and paths[0] == new_name and renamed not in paths and deleted not in paths


def _edit_indexed(cairn, rel: str) -> bool:
    return any("starter twice a day" in c.text for c in cairn.store.chunks_of_note(rel))

"""When the query service loads its in-memory vectors: a bulk change reloads them in the background while questions
go on with what they have (the note saved last still ranked), saved notes join by cheap reloads while a full load
waits, replaced vectors are freed, no connection is left open. The real model over a writable copy of the sample
vault."""

from __future__ import annotations

import pytest

from support.requests import search_request


def snap_now(search):
    """The in-memory vectors in force."""
    return search.vectors.current()


@pytest.mark.slow
def test_a_bulk_change_reloads_the_vectors_in_the_background_and_then_serves_every_new_note(fresh_cairn, vault_copy):
    """More chunks embedded since the in-memory vectors were loaded than are scored one by one: the query goes on
    with what it has (no full reload in a request's thread) while a reload runs; once it lands, the dense leg
    ranks every new note."""
    cairn = fresh_cairn
    cairn.indexing.index()
    query = cairn.query
    query.search(search_request("anything at all"))  # the first load
    query.vectors.MAX_NEWER, query.vectors.REFRESH_S = 1, 3600.0
    topics = {
        "Volcano.md": "Basaltic lava flows from the shield volcano erupted for weeks.",
        "Glacier.md": "The glacier calved huge icebergs into the fjord every summer.",
        "Desert.md": "Sand dunes in the desert migrate several metres with each storm.",
    }
    for name, text in topics.items():
        (vault_copy / name).write_text(f"# {name[:-3]}\n\n{text}\n", encoding="utf-8")
    cairn.indexing.index()
    held = query.vectors.current()
    query.search(search_request("icebergs breaking off a glacier into the fjord"), mode="dense")
    assert query.vectors.wait(timeout=60)  # a reload was started, not done in this request
    assert query.vectors.current() is not held and not query.vectors.embedded_since(snap_now(query))
    for name, text in topics.items():
        hits = query.search(search_request(text), mode="dense").hits
        assert hits and hits[0].file_path == name, (name, [h.file_path for h in hits])


@pytest.mark.slow
def test_while_the_vectors_wait_for_a_reload_the_note_saved_last_is_still_ranked(fresh_cairn, vault_copy, monkeypatch):
    """More chunks embedded since the in-memory vectors were loaded than a query scores one by one: those it leaves
    out must be the older ones, not the note just saved."""
    cairn = fresh_cairn
    cairn.indexing.index()
    query = cairn.query
    query.search(search_request("anything at all"))  # the first load
    monkeypatch.setattr(query.vectors, "reload", lambda **_: None)  # the reload has not landed yet
    query.vectors.MAX_NEWER, query.vectors.REFRESH_S = 2, 3600.0
    for i in range(4):
        (vault_copy / f"Older {i}.md").write_text(
            f"# Older {i}\n\nA note about tidal pools number {i}.\n", encoding="utf-8"
        )
    cairn.indexing.index()
    (vault_copy / "Latest.md").write_text(
        "# Latest\n\nThe glacier calved huge icebergs into the fjord.\n", encoding="utf-8"
    )
    cairn.indexing.index()
    assert len(query.vectors.embedded_since(snap_now(query))) > query.vectors.MAX_NEWER
    hits = query.search(search_request("icebergs breaking off a glacier into the fjord"), mode="dense").hits
    assert hits and hits[0].file_path == "Latest.md", [h.file_path for h in hits]


@pytest.mark.slow
def test_replaced_in_memory_vectors_are_freed_once_questions_are_asked_on_the_new_ones(fresh_cairn, vault_copy):
    """The per-question dense scores hold their snapshot's vectors (int8 copies, an onnxruntime session): a cache
    entry of a replaced snapshot must not keep it in memory."""
    import gc
    import weakref

    cairn = fresh_cairn
    cairn.indexing.index()
    query = cairn.query
    query.search(search_request("How do I proof sourdough?"))
    held = []
    for i in range(3):
        held.append(weakref.ref(query.vectors.current().dense))
        (vault_copy / f"New {i}.md").write_text(
            f"# New {i}\n\nA note about lighthouses number {i}.\n", encoding="utf-8"
        )
        cairn.indexing.index()
        query.vectors.reload()  # the reload (a background thread in the daemon)
        query.search(search_request(f"lighthouse keepers, question {i}"))
    gc.collect()
    assert [r() is None for r in held] == [True, True, True]
    assert query.vectors.current().dense is not None and len(query.vectors.scores) == 1


@pytest.mark.slow
def test_saved_notes_join_the_in_memory_vectors_by_cheap_reloads_and_a_full_load_waits(fresh_cairn, vault_copy):
    """While notes change, the vectors reload every Vectors.REFRESH_S reading only the changed chunks; a change
    that needs a full load waits for Vectors.FULL_REFRESH_S after the last one."""
    cairn = fresh_cairn
    cairn.indexing.index()
    query = cairn.query
    query.search(search_request("anything at all"))  # the first (full) load
    query.vectors.REFRESH_S = 0.0
    (vault_copy / "Lighthouse.md").write_text(
        "# Lighthouse\n\nThe keeper trimmed the lamp's wick at dusk.\n", encoding="utf-8"
    )
    cairn.indexing.index()
    first = query.vectors.current()
    query.search(search_request("who trims the lamp in a lighthouse"), mode="dense")
    query.vectors.wait(timeout=60)
    assert query.vectors.current() is not first and not query.vectors.embedded_since(
        snap_now(query)
    )  # an incremental reload
    query.vectors.INCREMENTAL_MAX = 0.0  # from now on every change needs a full load
    (vault_copy / "Harbour.md").write_text(
        "# Harbour\n\nFishing boats moor in the harbour at night.\n", encoding="utf-8"
    )
    cairn.indexing.index()
    held = query.vectors.current()
    hits = query.search(search_request("where do fishing boats moor"), mode="dense").hits
    assert hits and hits[0].file_path == "Harbour.md"  # scored from the store meanwhile
    query.vectors.wait(timeout=60)  # the load decides to wait
    assert query.vectors.current() is held  # the full load waits
    query.vectors.FULL_REFRESH_S = 0.0
    query.search(search_request("boats in a harbour at night"), mode="dense")
    query.vectors.wait(timeout=60)
    assert query.vectors.current() is not held and not query.vectors.embedded_since(snap_now(query))


@pytest.mark.slow
def test_vector_reloads_and_keyword_index_builds_leave_no_connection_open(fresh_cairn, vault_copy):
    """Each reload runs on a thread of its own (every few seconds while notes change): its SQLite connection must
    be closed when it ends, or an editing session runs the daemon out of file descriptors."""
    cairn = fresh_cairn
    cairn.indexing.index()
    query, store = cairn.query, cairn.store
    query.search(search_request("anything at all"))
    query.start_keyword_index().join(timeout=60)
    query.vectors.REFRESH_S = 0.0
    before = len(store._all)
    for i in range(5):
        (vault_copy / f"Reload {i}.md").write_text(
            f"# Reload {i}\n\nWindmills grind grain, note {i}.\n", encoding="utf-8"
        )
        cairn.indexing.index()
        held = query.vectors.current()
        query.search(search_request(f"windmills grinding grain {i}"))
        query.vectors.wait(timeout=60)
        assert query.vectors.current() is not held
    query.keyword.reset()  # dropped: built again from scratch
    query.start_keyword_index().join(timeout=60)
    assert len(store._all) == before


@pytest.mark.slow
def test_a_bulk_change_is_loaded_at_once_even_while_full_loads_wait(fresh_cairn, vault_copy):
    """A reload that would need a full load waits (Vectors.FULL_REFRESH_S), unless more chunks were embedded than a
    query scores one by one: then the first question after the bulk change starts the full load (a waiting
    reload must not swallow that request)."""
    cairn = fresh_cairn
    cairn.indexing.index()
    query = cairn.query
    query.search(search_request("anything at all"))
    query.vectors.REFRESH_S, query.vectors.FULL_REFRESH_S = 0.0, 3600.0
    query.vectors.INCREMENTAL_MAX, query.vectors.MAX_NEWER = 0.0, 1
    for i in range(3):
        (vault_copy / f"Bulk {i}.md").write_text(
            f"# Bulk {i}\n\nGlassblowers shape molten glass, {i}.\n", encoding="utf-8"
        )
    cairn.indexing.index()
    held = query.vectors.current()
    query.search(search_request("how is molten glass shaped"))
    for _ in range(3):  # the waiting reload, then the bulk one (or one load that saw both)
        query.vectors.wait(timeout=60)
    assert query.vectors.current() is not held and not query.vectors.embedded_since(snap_now(query))

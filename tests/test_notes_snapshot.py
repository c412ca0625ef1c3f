"""What search holds from the notes' rows (the note map) while a whole-vault run writes: a moment behind its batches,
never behind a change made outside one, and up to date once the run ends."""

from __future__ import annotations

import threading

from cairn.search.cache import NotesSnapshot
from cairn.search.lexical import NoteMap
from cairn.store import Store
from support import embedders
from support.requests import search_request
from support.store_rows import _chunks, _note

embedder = embedders.stand_in  # the fixture: the stand-in model, these tests only move data


def _write(store: Store, path: str) -> None:
    store.write_note(_note(path, path, path), _chunks(f"text of {path}"), [], [])


def _paths(snapshot: NotesSnapshot[NoteMap]) -> set[str]:
    return set(snapshot.get().paths.values())


def test_the_note_map_lags_a_whole_vault_runs_batches_only_while_it_writes(tmp_path):
    store = Store(tmp_path / "i.db")
    snapshot = NotesSnapshot(store, lambda: NoteMap.read(store))
    snapshot.MIN_LAG_S = 3600.0  # no read falls due by the clock in this test
    _write(store, "a.md")
    assert _paths(snapshot) == {"a.md"}  # a change outside a run: seen at once
    with store.bulk_batches():
        _write(store, "b.md")
        assert _paths(snapshot) == {"a.md"}  # a batch of the run: not read again yet
        _write(store, "c.md")
        assert _paths(snapshot) == {"a.md"}
    assert _paths(snapshot) == {"a.md", "b.md", "c.md"}  # the run ended: read again
    _write(store, "d.md")
    assert "d.md" in _paths(snapshot)
    store.close()


def test_the_note_map_is_read_again_during_a_run_once_its_lag_is_over(tmp_path):
    store = Store(tmp_path / "i.db")
    snapshot = NotesSnapshot(store, lambda: NoteMap.read(store))
    snapshot.MIN_LAG_S = snapshot.LAG_FACTOR = 0.0  # every read falls due at once
    _write(store, "a.md")
    assert _paths(snapshot) == {"a.md"}
    with store.bulk_batches():
        _write(store, "b.md")
        assert _paths(snapshot) == {"a.md", "b.md"}
    store.close()


def test_a_slow_read_after_a_save_is_made_on_its_own_thread_while_searches_use_the_last_one(tmp_path):
    # In a vault of tens of thousands of notes a read takes a second or more: a search right after a save must not
    # wait for it (Obsidian saves every few seconds as one types).
    store = Store(tmp_path / "i.db")
    release = threading.Event()
    reads: list[str] = []

    def read() -> NoteMap:
        if reads:  # every read after the first stands for a slow one: it goes on once the test says so
            assert release.wait(10)
        reads.append(threading.current_thread().name)
        return NoteMap.read(store)

    snapshot = NotesSnapshot(store, read)
    snapshot.SLOW_READ_S = 0.0  # every read counts as slow
    snapshot.LAG_FACTOR = 0.0  # and is due again at once
    _write(store, "a.md")
    assert _paths(snapshot) == {"a.md"}
    _write(store, "b.md")  # a save
    assert _paths(snapshot) == {"a.md"}  # answered at once with the last read, while the new one waits
    assert _paths(snapshot) == {"a.md"}  # one read under way at a time: this search starts none
    release.set()
    for thread in threading.enumerate():
        if thread.name == "cairn-notes-read":
            thread.join(10)
    assert _paths(snapshot) == {"a.md", "b.md"}
    assert reads == ["MainThread", "cairn-notes-read"]
    store.close()


def test_a_note_saved_while_the_note_map_lags_is_found_by_its_new_words(fresh_cairn, vault_copy, monkeypatch):
    # A large vault's search data lags a save by up to ten reads' time: the saved note must be found meanwhile.
    def search_paths(cairn, query: str) -> list[str]:
        return [h.file_path for h in cairn.query.search(search_request(query, top_k=5)).hits]

    fresh_cairn.indexing.index()
    assert search_paths(fresh_cairn, "zqlagmarker") == []  # the note map, names and vocabulary are read now
    monkeypatch.setattr(NotesSnapshot, "SLOW_READ_S", 0.0)  # every read counts as slow…
    monkeypatch.setattr(NotesSnapshot, "LAG_FACTOR", 1e9)  # …and is never due again in this test
    (vault_copy / "Saved now.md").write_text("# Saved now\n\nThe zqlagmarker went into this note.\n", encoding="utf-8")
    fresh_cairn.indexing.save_lane.save({"Saved now.md"})
    assert search_paths(fresh_cairn, "zqlagmarker")[:1] == ["Saved now.md"]
    assert "Saved now.md" not in set(fresh_cairn.query.note_maps.get().paths.values())  # the map did lag


def test_a_question_during_the_start_up_read_waits_for_it_rather_than_reading_too(tmp_path):
    """The daemon reads the note map on a thread at start-up; the first question, arriving meanwhile, shares it."""
    store = Store(tmp_path / "i.db")
    _write(store, "a.md")
    reading, release = threading.Event(), threading.Event()
    reads: list[str] = []

    def read() -> NoteMap:
        reads.append(threading.current_thread().name)
        reading.set()
        assert release.wait(timeout=30)
        return NoteMap.read(store)

    snapshot = NotesSnapshot(store, read)
    warm = threading.Thread(target=snapshot.get, name="warm-up")
    warm.start()
    assert reading.wait(timeout=30)
    got: list[NoteMap] = []
    question = threading.Thread(target=lambda: got.append(snapshot.get()), name="question")
    question.start()
    question.join(timeout=0.2)  # it waits for the read under way (a bound on the check, not a timing)
    release.set()
    warm.join(timeout=30)
    question.join(timeout=30)
    assert reads == ["warm-up"] and set(got[0].paths.values()) == {"a.md"}
    store.close()

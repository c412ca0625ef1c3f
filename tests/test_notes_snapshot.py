"""What search holds from the notes' rows (the note map) while a whole-vault run writes: a moment behind its batches,
never behind a change made outside one, and up to date once the run ends."""

from __future__ import annotations

from cairn.search.cache import NotesSnapshot
from cairn.search.lexical import NoteMap
from cairn.store import Store
from test_store import _chunks, _note


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

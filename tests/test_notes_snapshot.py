"""What search holds from the notes' rows (the note map) while a whole-vault run writes: a moment behind its batches,
never behind a change made outside one, and up to date once the run ends."""

from __future__ import annotations

from cairn.search.cache import NotesSnapshot
from cairn.search.lexical import NoteMap
from cairn.store import ChunkRecord, NoteRecord, Store


def _write(store: Store, path: str) -> None:
    note = NoteRecord(
        path=path, kind="markdown", title=path, aliases=[], frontmatter={}, mtime_ns=1, size=1, content_hash=path
    )
    text = f"text of {path}"
    chunk = ChunkRecord(
        ordinal=0,
        symbol="",
        text=text,
        line_start=1,
        line_end=1,
        page=None,
        token_count=3,
        kind="prose",
        content_hash=path,
        units=((text, path),),
    )
    store.write_note(note, [chunk], [], [])


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

"""cairn.store: schema versions, one transaction per note, no leftover rows."""

from __future__ import annotations

import apsw
import numpy as np
import pytest

from cairn.errors import SchemaTooNewError, StoreError
from cairn.store import EMBED_DIM, SCHEMA_VERSION, ChunkRecord, LinkRecord, Store
from cairn.store.reads import fts_row_sizes
from support import embedders
from support.cairns import open_cairn
from support.store_rows import _chunks, _note

embedder = embedders.stand_in  # the fixture: the stand-in model, these tests only move data


def _counts(store):
    c = store.conn
    return {
        t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in ("notes", "chunks", "note_tags", "links", "chunk_vectors", "chunk_units", "unit_vectors")
    } | {"fts": c.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'alpha OR beta'").fetchone()[0]}


def test_new_store_is_at_the_current_schema_version(tmp_path):
    store = Store(tmp_path / "i.db")
    assert store.schema_version == SCHEMA_VERSION
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_an_index_of_schema_version_1_is_migrated_and_keeps_its_cached_vectors(tmp_path):
    path = tmp_path / "i.db"
    store = Store(path)
    store.put_cached_vectors({"h1": np.ones(EMBED_DIM, dtype=np.float32) / np.sqrt(EMBED_DIM)}, "m")
    store.close()
    conn = apsw.Connection(str(path))  # what Cairn 0.1 wrote: no cache age index, no deletion log, no error codes
    _cache_as_written_before_schema_7(conn, age_index=False)
    conn.execute("DROP TRIGGER chunks_deleted")
    conn.execute("DROP TABLE chunk_deletions")
    conn.execute("ALTER TABLE notes DROP COLUMN error_code")
    conn.execute("DROP INDEX chunks_unrefined")
    conn.execute("DROP INDEX chunks_pending_notes")
    conn.execute("DROP INDEX chunks_unrefined_notes")
    conn.execute("PRAGMA user_version=1")
    conn.close()
    store = Store(path)
    assert store.schema_version == SCHEMA_VERSION == 7
    assert list(store.cached_vectors(["h1"], "m")) == ["h1"]
    plan = store.conn.execute(
        "EXPLAIN QUERY PLAN SELECT content_hash FROM embedding_cache WHERE model_id = 'm' AND created_at < 1"
    ).fetchall()
    assert any("embedding_cache_by_model_age" in str(row) for row in plan)


def _cache_as_written_before_schema_7(conn: apsw.Connection, *, age_index: bool = True) -> None:
    """Rewrite the embedding cache of ``conn`` in its layout of schema versions 1-6 (WITHOUT ROWID), rows kept."""
    conn.execute(
        "CREATE TABLE old_cache (content_hash TEXT NOT NULL, model_id TEXT NOT NULL, vector BLOB NOT NULL, "
        "created_at REAL NOT NULL, PRIMARY KEY (content_hash, model_id)) WITHOUT ROWID;"
        "INSERT INTO old_cache SELECT content_hash, model_id, vector, created_at FROM embedding_cache;"
        "DROP TABLE embedding_cache; ALTER TABLE old_cache RENAME TO embedding_cache;"
    )
    if age_index:
        conn.execute("CREATE INDEX embedding_cache_by_age ON embedding_cache(created_at)")


def _cache_bytes(path) -> int:
    conn = apsw.Connection(str(path))
    try:
        return int(conn.execute("SELECT SUM(pgsize) FROM dbstat WHERE name LIKE 'embedding_cache%'").fetchone()[0])
    finally:
        conn.close()


def _pages(path) -> tuple[int, int]:
    """(pages, free pages) of the database file ``path``."""
    conn = apsw.Connection(str(path))
    try:
        return (
            int(conn.execute("PRAGMA page_count").fetchone()[0]),
            int(conn.execute("PRAGMA freelist_count").fetchone()[0]),
        )
    finally:
        conn.close()


def test_the_schema_7_embedding_cache_keeps_every_vector_in_less_than_half_the_file(tmp_path):
    path = tmp_path / "i.db"
    store = Store(path)
    rng = np.random.default_rng(7)
    vectors = {f"{i:064x}": rng.standard_normal(EMBED_DIM).astype(np.float32) for i in range(400)}
    store.put_cached_vectors(vectors, "all-MiniLM-L6-v2/int8@6f9a278fc294")
    store.close()
    conn = apsw.Connection(str(path))
    _cache_as_written_before_schema_7(conn)
    conn.execute("PRAGMA user_version=6")
    conn.execute("VACUUM")
    conn.close()
    before = _cache_bytes(path)
    pages_before = _pages(path)
    store = Store(path)
    assert store.schema_version == 7
    cached = store.cached_vectors(list(vectors), "all-MiniLM-L6-v2/int8@6f9a278fc294")
    assert cached.keys() == vectors.keys()
    assert all(np.array_equal(cached[h], v) for h, v in vectors.items())
    store.close()
    after = _cache_bytes(path)
    assert after < before / 2, (before, after)
    assert after < 2200 * len(vectors)  # 1,536 bytes of vector, its hash and model id: about two rows a page
    pages, free = _pages(path)
    assert free == 0 and pages < pages_before[0] * 0.6  # the migration's open compacted the file


def test_pruning_drops_another_models_rows_at_once_and_this_models_unused_rows_after_the_grace(tmp_path):
    store = Store(tmp_path / "i.db")
    store.write_note(_note(), _chunks("Some text here."), [], [])
    vec = np.ones(EMBED_DIM, dtype=np.float32) / np.sqrt(EMBED_DIM)
    used = "u0-Some text here."  # the one sentence's hash (_chunks)
    store.put_cached_vectors({used: vec, "title": vec, "gone": vec}, "new")
    store.put_cached_vectors({used: vec, "gone": vec}, "old")
    assert store.prune_embedding_cache("new", ["title"], older_than=0.0) == 2  # the old model's two rows
    assert store.prune_embedding_cache("new", ["title"], older_than=2e9) == 1  # "gone", past the grace
    left = store.conn.execute("SELECT content_hash, model_id FROM embedding_cache ORDER BY 1").fetchall()
    assert left == [("title", "new"), (used, "new")]


def test_notes_waiting_for_vectors_are_counted_alike_before_and_after_the_schema_6_indexes(tmp_path):
    from cairn.store.reads import coverage_counts

    path = tmp_path / "i.db"
    store = Store(path)
    store.write_note(_note("a.md", "a", "h1"), _chunks("One.", "Two."), [], [])
    store.write_note(_note("b.md", "b", "h2"), _chunks("Three."), [], [])
    store.write_note(_note("c.md", "c", "h3"), _chunks("Four."), [], [])
    vec = np.ones(EMBED_DIM, dtype=np.float32) / np.sqrt(EMBED_DIM)
    by_note = {store.chunk_keys([p.chunk_id])[p.chunk_id].path: p for p in store.pending_chunks(10)}
    b, c = by_note["b.md"], by_note["c.md"]
    store.set_vectors([(b.chunk_id, b.content_hash, vec, [(b.sentences[0].unit_id, vec)])])  # b complete
    store.set_vectors([(c.chunk_id, c.content_hash, vec, [])], tier=1)  # c at tier 1
    now = coverage_counts(store), coverage_counts(store, [store.note_ids(["a.md"])[0]])
    store.close()
    assert now == ((3, 1, 1), (2, 0, 1))
    conn = apsw.Connection(str(path))  # an index of schema 5, opened read-only (the old statement)
    conn.execute("DROP INDEX chunks_pending_notes; DROP INDEX chunks_unrefined_notes; PRAGMA user_version=5")
    conn.close()
    reader = Store(path, readonly=True)
    assert reader.schema_version == 5
    assert (coverage_counts(reader), coverage_counts(reader, [reader.note_ids(["a.md"])[0]])) == now
    reader.close()


def test_vectors_written_before_tiers_existed_count_as_complete_after_the_migration(tmp_path):
    path = tmp_path / "i.db"
    store = Store(path)
    store.write_note(_note(), _chunks("Some text here."), [], [])
    (pending,) = store.pending_chunks(1)
    vec = np.ones(EMBED_DIM, dtype=np.float32) / np.sqrt(EMBED_DIM)
    store.set_vectors([(pending.chunk_id, pending.content_hash, vec, [(pending.sentences[0].unit_id, vec)])])
    store.close()
    conn = apsw.Connection(str(path))  # what Cairn wrote at schema version 4: embedded 1 meant complete
    conn.execute("UPDATE chunks SET embedded = 1")
    conn.execute("DROP INDEX chunks_unrefined; DROP INDEX chunks_pending_notes; DROP INDEX chunks_unrefined_notes")
    conn.execute("PRAGMA user_version=4")
    conn.close()
    store = Store(path)
    assert store.tier_counts() == (0, 0, 1)
    assert store.pending_chunks(5, below=2) == []  # nothing left to refine: no sentence vector is made again


def test_a_database_from_a_newer_cairn_is_refused_with_a_clear_message(tmp_path):
    path = tmp_path / "i.db"
    Store(path).close()
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaTooNewError, match="newer Cairn"):
        Store(path)


def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path):
    path = tmp_path / "i.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError):
        Store(path)


def test_deleting_a_note_leaves_no_rows(tmp_path):
    store = Store(tmp_path / "i.db")
    store.write_note(
        _note(),
        _chunks("alpha text", "beta text"),
        ["t1", "t2/sub"],
        [LinkRecord("b", "b.md", None, None, None, False, 3)],
    )
    vec = np.ones(384, np.float32) / np.sqrt(384)
    pending = store.pending_chunks(10)
    store.set_vectors([(p.chunk_id, p.content_hash, vec, [(u.unit_id, vec) for u in p.sentences]) for p in pending])
    assert _counts(store) == {
        "notes": 1,
        "chunks": 2,
        "note_tags": 2,
        "links": 1,
        "chunk_vectors": 2,
        "chunk_units": 2,
        "unit_vectors": 2,
        "fts": 2,
    }
    assert store.delete_note("a.md")
    assert set(_counts(store).values()) == {0}


def test_fts5_statistics_count_the_tokens_the_table_indexes_through_writes_and_deletes(tmp_path):
    store = Store(tmp_path / "i.db")
    assert store.fts_counts() == (0, 0, 0)
    assert fts_row_sizes(store, np.array([1], dtype=np.int64)).tolist() == [-1]
    store.write_note(_note(), _chunks("alpha beta gamma", "delta"), [], [])
    store.write_note(_note("b.md", "Bee note", "h2"), _chunks("epsilon zeta, eta: theta iota"), [], [])
    store.delete_note("a.md")
    snap = store.fts_snapshot(0)
    assert snap is not None
    sizes = {cid: len(tokens) for cid, tokens in snap.docs}  # text, symbol and title as the tokenizer splits them
    assert list(sizes.values()) == [5 + 1 + 2]
    assert store.fts_counts()[:2] == (snap.n_rows, snap.n_tokens) == (1, 8)
    ids = np.array([*sizes, 1, 10**9], dtype=np.int64)  # 1: a row deleted with its note
    assert fts_row_sizes(store, ids).tolist() == [*sizes.values(), -1, -1]


def test_rewriting_a_note_replaces_its_rows_and_keeps_its_id(tmp_path):
    store = Store(tmp_path / "i.db")
    first = store.write_note(_note(), _chunks("alpha", "beta"), ["x"], [])
    second = store.write_note(_note(hash_="h2"), _chunks("alpha only"), ["y"], [])
    assert first == second
    assert _counts(store)["chunks"] == 1 and _counts(store)["fts"] == 1
    assert store.note_tags("a.md") == ["y"]


def test_a_failed_write_leaves_the_previous_version_intact(tmp_path):
    store = Store(tmp_path / "i.db")
    store.write_note(_note(), _chunks("alpha"), ["x"], [])
    bad = _chunks("beta") + [
        ChunkRecord(
            ordinal=1,
            symbol="H",
            text=None,
            line_start=1,
            line_end=1,
            page=None,  # type: ignore[arg-type]
            token_count=1,
            kind="prose",
            content_hash="z",
        )
    ]
    with pytest.raises(apsw.ConstraintError):
        store.write_note(_note(hash_="h2"), bad, ["y"], [])
    assert store.chunks_of_note("a.md")[0].text == "alpha"
    assert store.note_tags("a.md") == ["x"]
    assert store.note_states()["a.md"].content_hash == "h1"


def test_vectors_are_not_written_for_a_chunk_that_changed_meanwhile(tmp_path):
    store = Store(tmp_path / "i.db")
    store.write_note(_note(), _chunks("alpha"), [], [])
    (cid,) = [r[0] for r in store.conn.execute("SELECT id FROM chunks")]
    assert store.set_vectors([(cid, "stale-hash", np.ones(384, np.float32), [])]) == 0
    assert store.count_pending() == 1


def test_tag_scope_matches_nested_tags_but_not_prefixes(tmp_path):
    store = Store(tmp_path / "i.db")
    store.write_note(_note("a.md"), _chunks("alpha"), ["garden/vegetables"], [])
    store.write_note(_note("b.md", "b"), _chunks("beta"), ["gardening"], [])
    store.write_note(_note("sub/c.md", "c"), _chunks("gamma"), ["garden"], [])
    paths = lambda ids: sorted(r.path for r in store.chunk_rows(ids).values())  # noqa: E731
    assert paths(store.scoped_chunk_ids(["garden"], [])) == ["a.md", "sub/c.md"]
    assert paths(store.scoped_chunk_ids([], ["sub"])) == ["sub/c.md"]
    assert paths(store.scoped_chunk_ids(["garden"], ["sub/"])) == ["sub/c.md"]


def test_an_index_this_process_cannot_open_now_is_reported_as_such_and_never_moved_aside(tmp_path):
    """At the open-files limit SQLite says only "unable to open database file": the error must say why (not advise
    deleting a good index), and start-up recovery must not quarantine and rebuild it."""
    import subprocess
    import sys
    import textwrap

    path = tmp_path / "i.db"
    Store(path).close()
    script = textwrap.dedent(f"""
        import os, resource
        from cairn.errors import StoreUnavailableError
        from cairn.store.recovery import open_verified
        n = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 64
        resource.setrlimit(resource.RLIMIT_NOFILE, (n + 2, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        held = []
        try:
            while True:
                held.append(open(os.devnull))
        except OSError:
            pass
        try:
            open_verified({str(path)!r})
        except StoreUnavailableError as exc:
            print("unavailable:", exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "unavailable:" in out.stdout, out.stdout + out.stderr
    assert "open files" in out.stdout.lower() and "Delete it" not in out.stdout
    assert path.exists() and not list(tmp_path.glob("i.db.*damaged*")) and len(list(tmp_path.iterdir())) <= 3
    Store(path).close()  # still a good index


def test_an_existing_index_records_its_vault_in_place_and_one_of_another_vault_is_refused_or_moved(tmp_path):
    from cairn.errors import IndexOfAnotherVaultError
    from cairn.store.recovery import open_verified

    db = tmp_path / "index.sqlite3"
    old = Store(db)  # as an index written before the vault was recorded
    old.write_note(_note(), _chunks("alpha"), [], [])
    old.close()
    store, recovered = open_verified(db, vault=tmp_path / "vault A")
    assert recovered is None and store.stats().notes == 1  # upgraded in place, nothing rebuilt
    store.close()
    with pytest.raises(IndexOfAnotherVaultError, match="vault A"):
        Store(db, readonly=True, vault=tmp_path / "vault B")  # cairn mcp: refused, with both vaults named
    store, recovered = open_verified(db, vault=tmp_path / "vault B")  # the daemon: moved aside, rebuilt
    assert recovered is not None and ".other-vault-" in recovered["movedTo"]
    assert store.stats().notes == 0
    store.close()
    kept = Store(recovered["movedTo"])
    assert kept.stats().notes == 1  # kept as it was
    kept.close()


def test_a_store_whose_file_is_deleted_or_replaced_refuses_every_use(tmp_path):
    from cairn.errors import IndexFileChangedError

    for change in ("delete", "replace"):
        db = tmp_path / f"{change}.sqlite3"
        store = Store(db)
        store.write_note(_note(), _chunks("alpha"), [], [])
        if change == "delete":
            db.unlink()
        else:
            Store(tmp_path / "other.sqlite3").close()
            (tmp_path / "other.sqlite3").replace(db)
        store.IDENTITY_CHECK_S = 0.0  # checked at the next use
        with pytest.raises(IndexFileChangedError, match="deleted" if change == "delete" else "replaced"):
            store.stats()
        with pytest.raises(IndexFileChangedError):
            store.write_note(_note("b.md"), _chunks("beta"), [], [])
        store.close()
        assert not db.with_name(db.name + "-wal").exists()  # never replayed into the next file at that path


def test_a_connection_opened_on_a_replaced_file_before_the_next_check_writes_nothing_into_it(tmp_path):
    """A thread's first connection opened between two identity checks (a query thread reloading its vectors):
    it must not read the replaced file through this store's WAL nor, when closed, checkpoint into it."""
    import threading

    from cairn.errors import IndexFileChangedError
    from cairn.store.base import VAULT_META

    db = tmp_path / "index.sqlite3"
    store = Store(db, vault=tmp_path / "vault A")
    store.write_note(_note(), _chunks("alpha"), [], [])  # frames in this store's -wal, not yet checkpointed
    other = Store(tmp_path / "other.sqlite3", vault=tmp_path / "vault B")
    other.write_note(_note("b.md"), _chunks("beta"), [], [])
    other.close()
    other_bytes = (tmp_path / "other.sqlite3").read_bytes()
    (tmp_path / "copy.sqlite3").write_bytes(other_bytes)
    (tmp_path / "copy.sqlite3").replace(db)  # e.g. a backup of another vault's index restored here
    store.IDENTITY_CHECK_S = 3600.0  # the last check is recent: the window between two checks
    seen: list[object] = []

    def reader() -> None:
        try:
            seen.append(store.get_meta(VAULT_META))
        except IndexFileChangedError as exc:
            seen.append(exc)
        finally:
            store.close_thread_connection()

    thread = threading.Thread(target=reader)
    thread.start()
    thread.join(timeout=30)
    store.close()
    assert len(seen) == 1 and isinstance(seen[0], IndexFileChangedError), seen
    assert db.read_bytes() == other_bytes  # the other vault's file is as it was restored
    assert not db.with_name(db.name + "-wal").exists()
    reopened = Store(db, readonly=True)
    assert reopened.get_meta(VAULT_META) == str(tmp_path / "vault B") and reopened.stats().notes == 1
    reopened.close()


def test_a_connection_opened_after_the_file_was_deleted_reports_it_deleted_and_makes_no_new_file(tmp_path):
    """A thread's first connection opened between two identity checks, after the index file was deleted: the
    open must not create an empty file at that path (which would read as "replaced by another file")."""
    import threading

    from cairn.errors import IndexFileChangedError

    db = tmp_path / "index.sqlite3"
    store = Store(db)
    store.write_note(_note(), _chunks("alpha"), [], [])
    db.unlink()
    store.IDENTITY_CHECK_S = 3600.0  # the last check is recent: the window between two checks
    seen: list[object] = []

    def reader() -> None:
        try:
            seen.append(store.stats())
        except IndexFileChangedError as exc:
            seen.append(exc)
        finally:
            store.close_thread_connection()

    thread = threading.Thread(target=reader)
    thread.start()
    thread.join(timeout=30)
    store.close()
    assert len(seen) == 1 and isinstance(seen[0], IndexFileChangedError), seen
    assert "was deleted" in str(seen[0])
    assert not db.exists()


def test_an_index_closed_cleanly_opens_without_the_checks_unless_a_byte_changed_since(tmp_path, monkeypatch):
    """The page checks at start take seconds on a large index: they are skipped when the file is byte for byte what
    a clean close left (the invariants are still checked), and run (finding the damage) when anything changed it
    since, or after a run that did not close cleanly."""
    import os
    import stat

    from cairn.store.recovery import CLEAN_SUFFIX, mark_closed_cleanly, open_verified

    db = tmp_path / "index.sqlite3"
    store, _ = open_verified(db, vault=tmp_path / "vault")
    store.write_note(_note(), _chunks("alpha " * 2000), [], [])
    store.close()
    mark_closed_cleanly(db)
    marker = db.with_name(db.name + CLEAN_SUFFIX)
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    checked: list[str] = []
    real_check = Store.integrity_problems
    monkeypatch.setattr(
        Store,
        "integrity_problems",
        lambda self, **kw: (checked.append("x") if kw.get("pages", True) else None) or real_check(self, **kw),
    )

    store, recovered = open_verified(db, vault=tmp_path / "vault")
    assert recovered is None and checked == [] and store.stats().notes == 1
    assert not marker.exists()  # taken: a run that then ends without a clean close leaves none
    store.close()
    store, recovered = open_verified(db, vault=tmp_path / "vault")  # not marked at the last close: checked
    assert recovered is None and checked == ["x"]
    store.close()

    mark_closed_cleanly(db)
    size, mtime = db.stat().st_size, db.stat().st_mtime_ns
    with open(db, "r+b") as fh:  # damaged after the clean close, size and mtime as they were
        fh.seek(size // 2)
        fh.write(os.urandom(4096))
    os.utime(db, ns=(mtime, mtime))
    store, recovered = open_verified(db, vault=tmp_path / "vault")
    assert checked == ["x", "x"] and recovered is not None and ".corrupt-" in recovered["movedTo"]
    store.close()


def test_the_daemons_close_marks_its_index_closed_cleanly(tmp_path, embedder):
    from cairn.store.recovery import CLEAN_SUFFIX
    from support.cairns import make_config

    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "a.md").write_text("Alpha.\n", encoding="utf-8")
    config = make_config(vault, tmp_path / "data")
    open_cairn(vault, tmp_path / "data", embedder).close()  # the CLI: no mark (its next open is not checked anyway)
    assert not config.db_path.with_name(config.db_path.name + CLEAN_SUFFIX).exists()
    open_cairn(vault, tmp_path / "data", embedder, verify=True).close()
    assert config.db_path.with_name(config.db_path.name + CLEAN_SUFFIX).exists()


def test_the_notes_generation_moves_with_the_notes_rows_and_not_with_vectors(tmp_path):
    """What depends on the notes' names and chunks alone (the note map, the names index) is rebuilt after a note is
    written, skipped or deleted, and not after each commit of vectors (many a second while a large vault embeds)."""
    store = Store(tmp_path / "index.sqlite3")
    start = store.notes_generation()
    store.write_note(_note(), _chunks("alpha", "beta"), [], [])
    written = store.notes_generation()
    assert written > start
    pending = store.pending_chunks(10)
    vec = np.ones(384, np.float32) / np.sqrt(384)
    store.set_vectors([(p.chunk_id, p.content_hash, vec, [(u.unit_id, vec) for u in p.sentences]) for p in pending])
    store.touch_note("a.md", 123, 4)
    assert store.notes_generation() == written
    store.write_skipped("b.md", kind="md", title="b", mtime_ns=1, size=1, content_hash="x", reason="too big")
    skipped = store.notes_generation()
    assert skipped > written
    assert store.delete_note("a.md") and store.notes_generation() > skipped
    store.close()


def test_an_index_closed_cleanly_with_a_broken_invariant_is_still_moved_aside(tmp_path):
    """The clean-close mark says the bytes did not change since, not that they were sound: the store's invariants
    are checked at every start."""
    import apsw as _apsw

    from cairn.store.recovery import mark_closed_cleanly, open_verified

    db = tmp_path / "index.sqlite3"
    store, _ = open_verified(db, vault=tmp_path / "vault")
    store.write_note(_note(), _chunks("alpha"), [], [])
    store.close()
    conn = _apsw.Connection(str(db))  # a full-text row with no chunk, as a bug of an earlier run could leave
    conn.execute("INSERT INTO chunks_fts(rowid, text, symbol, title) VALUES (999, 'orphan', '', 'x')")
    conn.close()
    mark_closed_cleanly(db)
    store, recovered = open_verified(db, vault=tmp_path / "vault")
    assert recovered is not None and "full-text rows" in recovered["reason"]
    store.close()

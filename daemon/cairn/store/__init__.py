"""The index store: one SQLite file per vault (apsw, WAL, one writer). All SQL lives here.

Tables are described in :mod:`cairn.store.schema`. Connections are per thread
(readers never block the writer in WAL mode); writes are serialised by a lock
and each note is written in one short transaction, so a crash at any moment
leaves a consistent store (DESIGN.md, Data; "one transaction per note").
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import apsw
import numpy as np
import sqlite_vec

from cairn.errors import SchemaTooNewError, StoreError, StoreUnavailableError
from cairn.store.schema import EMBED_DIM, FTS_TOKENIZER, MIGRATIONS, SCHEMA_VERSION

log = logging.getLogger(__name__)

__all__ = [
    "Store",
    "NoteState",
    "NoteRecord",
    "ChunkRecord",
    "LinkRecord",
    "ChunkRow",
    "StoredNote",
    "Backlink",
    "IndexStats",
    "NoteProblem",
    "SCHEMA_VERSION",
    "EMBED_DIM",
]


class NoteState(NamedTuple):
    """What the store knows of a file, to decide whether it changed: (mtime, size, hash). A named tuple: the
    indexer reads every note's state before each file-event batch (obsidian-hub, best of 5: 3,879 made in 1.6 ms,
    against 4.9 ms as a frozen dataclass; the query itself ~6 ms)."""

    id: int
    path: str
    mtime_ns: int
    size: int
    content_hash: str
    status: str
    kind: str = "markdown"


@dataclass(frozen=True, slots=True)
class NoteRecord:
    path: str
    kind: str
    title: str
    aliases: Sequence[str]
    frontmatter: dict
    mtime_ns: int
    size: int
    content_hash: str
    error: str | None = None
    #: the stable code of ``error`` (e.g. :data:`cairn.notes.FRONTMATTER_INVALID`): what withholding keys on
    error_code: str | None = None


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    ordinal: int
    symbol: str
    text: str
    line_start: int | None
    line_end: int | None
    page: int | None
    token_count: int
    kind: str
    content_hash: str
    #: embedding units: (text, sha256 of text); at least one per chunk
    units: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class LinkRecord:
    raw_target: str
    target_path: str | None
    heading: str | None
    block_id: str | None
    alias: str | None
    is_embed: bool
    line: int


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """A chunk joined with its note, as the query service needs it."""

    chunk_id: int
    note_id: int
    path: str
    title: str
    symbol: str
    text: str
    line_start: int | None
    line_end: int | None
    page: int | None
    kind: str
    indexed_at: float
    content_hash: str
    embedded: bool
    #: tokens of the chunk's embedded text (title, heading path and text): an upper bound on its text's
    token_count: int = 0


_CHUNK_ROW_COLUMNS = (
    "c.id, c.note_id, n.path, n.title, c.symbol, c.text, c.line_start, c.line_end, c.page, c.kind, "
    "n.indexed_at, c.content_hash, c.embedded, c.token_count"
)


def _chunk_row(r: Sequence) -> ChunkRow:
    """A :class:`ChunkRow` from a row of :data:`_CHUNK_ROW_COLUMNS`."""
    return ChunkRow(
        chunk_id=r[0],
        note_id=r[1],
        path=r[2],
        title=r[3],
        symbol=r[4],
        text=r[5],
        line_start=r[6],
        line_end=r[7],
        page=r[8],
        kind=r[9],
        indexed_at=r[10],
        content_hash=r[11],
        embedded=bool(r[12]),
        token_count=r[13],
    )


@dataclass(frozen=True, slots=True)
class StoredNote:
    """A file the index knows: an indexed note or PDF (``status`` ``"ok"``), or one skipped (``"skipped"``) with
    the reason in ``error`` (for an indexed note, ``error`` is a warning, e.g. invalid front-matter)."""

    id: int
    path: str
    kind: str
    title: str
    aliases: tuple[str, ...]
    frontmatter: dict
    indexed_at: float  # unix seconds
    status: str
    error: str | None


@dataclass(frozen=True, slots=True)
class Backlink:
    """A note (``path``) with a link to another at file line ``line``."""

    path: str
    line: int


@dataclass(frozen=True, slots=True)
class NoteProblem:
    """A file with an error: skipped (``skipped``), or indexed with a warning (e.g. invalid front-matter)."""

    path: str
    reason: str
    skipped: bool


@dataclass(frozen=True, slots=True)
class IndexStats:
    """Counts of the index: ``notes`` indexed (PDFs included), of which ``pdfs``; files ``skipped``; ``chunks``,
    of which ``vectors`` have a vector and ``pending`` not yet; ``last_ingested_at`` (unix seconds, None when
    empty); ``errors``, by path. All zero for an empty index."""

    notes: int = 0
    pdfs: int = 0
    skipped: int = 0
    chunks: int = 0
    vectors: int = 0
    pending: int = 0
    last_ingested_at: float | None = None
    errors: tuple[NoteProblem, ...] = ()


def _vec_bytes(vec: np.ndarray) -> bytes:
    return np.ascontiguousarray(vec, dtype="<f4").tobytes()


@dataclass(frozen=True)
class FtsSnapshot:
    """See :meth:`Store.fts_snapshot`."""

    live: np.ndarray | None
    docs: list[tuple[int, list[str]]]
    n_rows: int
    n_tokens: int
    deleted: np.ndarray | None = None
    deletion_seq: int | None = None


def _fts_averages(block: bytes) -> tuple[int, int] | None:
    """(rows, tokens in all columns) from FTS5's averages record (``%_data`` id 1: a varint row count, then one
    varint token total per column; SQLite's varint format), or None when it does not parse as that."""
    values: list[int] = []
    i = 0
    try:
        while i < len(block):
            v = 0
            for k in range(9):
                byte = block[i]
                i += 1
                if k == 8:
                    v = (v << 8) | byte
                    break
                v = (v << 7) | (byte & 0x7F)
                if not byte & 0x80:
                    break
            values.append(v)
    except IndexError:
        return None
    if len(values) != 4:  # rows + 3 columns (text, symbol, title)
        return None
    return values[0], sum(values[1:])


def _fts_totals(c: apsw.Connection) -> tuple[int, int] | None:
    """``chunks_fts``'s (rows, tokens) from its averages record ((0, 0) before any row; None: unreadable)."""
    totals = c.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()
    return _fts_averages(totals[0]) if totals else (0, 0)


def _open_error(path: Path, exc: apsw.Error) -> StoreError:
    """The error for an index that SQLite could not open: :class:`StoreUnavailableError` when the operating system
    refuses the file itself (SQLite's "unable to open database file" says no more: the file is opened again here to
    learn why, e.g. too many open files in this process), else :class:`StoreError` advising a rebuild."""
    if isinstance(exc, apsw.CantOpenError) and path.exists():
        try:
            os.close(os.open(path, os.O_RDONLY))
        except OSError as os_exc:
            hint = (
                " This process has too many files open: raise its limit (ulimit -n) and restart Cairn."
                if os_exc.errno == errno.EMFILE
                else ""
            )
            return StoreUnavailableError(f"Cannot open the index database {str(path)!r}: {os_exc.strerror}.{hint}")
    return StoreError(
        f"Cannot open the index database {str(path)!r}: {exc}. Delete it to rebuild the index from the vault."
    )


class Store:
    """An open index database.

    ``Store(path)`` creates the file and folders if needed, loads sqlite-vec,
    switches to WAL and applies pending migrations. Raises
    :class:`~cairn.errors.SchemaTooNewError` for a database from a newer Cairn and
    :class:`~cairn.errors.StoreError` when the file cannot be opened or is not a database.
    """

    BUSY_TIMEOUT_MS = 5000
    #: Newest entries kept in the deletion log (table ``chunk_deletions``, schema migration 3; 16 bytes each):
    #: a reader that fell further behind (a re-index of a vault this size while it slept) scans instead.
    DELETION_LOG_KEEP = 50_000
    #: Deletions a reader applies from the log; more, and :meth:`fts_snapshot` scans FTS5's row ids instead.
    DELETION_LOG_MAX_READ = 5_000

    def __init__(self, path: Path | str, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._local = threading.local()
        self._write_lock = threading.RLock()
        self._all: list[apsw.Connection] = []
        self._all_lock = threading.Lock()
        if not readonly:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = self.conn
        if not readonly:
            self._migrate(conn)
        else:
            self._check_version(conn)

    # ------------------------------------------------------------------ connections
    def _open(self) -> apsw.Connection:
        flags = apsw.SQLITE_OPEN_READONLY if self.readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        try:
            conn = apsw.Connection(str(self.path), flags=flags)
            conn.set_busy_timeout(self.BUSY_TIMEOUT_MS)
            conn.enable_load_extension(True)
            conn.load_extension(sqlite_vec.loadable_path())
            conn.enable_load_extension(False)
            if not self.readonly:
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA synchronous=NORMAL")
        except apsw.Error as exc:
            raise _open_error(self.path, exc) from exc
        with self._all_lock:
            self._all.append(conn)
        return conn

    @property
    def conn(self) -> apsw.Connection:
        """This thread's connection (created on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._open()
        return conn

    def close_thread_connection(self) -> None:
        """Close this thread's connection, if it has one (a later use opens a new one). For threads that end: a
        connection is otherwise kept until :meth:`close` (the query service reloads its vectors on a new thread
        every few seconds while notes change: one open connection, two file descriptors, each time)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            return
        self._local.conn = None
        self._local.fts_tokenizer = None
        with self._all_lock:
            self._all = [c for c in self._all if c is not conn]
        try:
            conn.close()
        except apsw.Error:  # pragma: no cover - closing is best effort
            pass

    def close(self) -> None:
        """Close every connection opened by any thread."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            try:
                conn.close()
            except apsw.Error:  # pragma: no cover - closing is best effort
                pass
        self._local = threading.local()

    # ------------------------------------------------------------------ schema
    def _version(self, conn: apsw.Connection) -> int:
        try:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
        except apsw.Error as exc:
            raise StoreError(f"{str(self.path)!r} is not a readable SQLite database: {exc}.") from exc

    def _check_version(self, conn: apsw.Connection) -> int:
        version = self._version(conn)
        if version > SCHEMA_VERSION:
            raise SchemaTooNewError(
                f"The index {str(self.path)!r} has schema version {version}, but this Cairn knows up to "
                f"{SCHEMA_VERSION}: it was written by a newer Cairn. Upgrade Cairn, or use another --data-dir."
            )
        return version

    def _migrate(self, conn: apsw.Connection) -> None:
        version = self._check_version(conn)
        for number in range(version + 1, SCHEMA_VERSION + 1):
            with self._write_lock, conn:
                conn.execute(MIGRATIONS[number - 1])
                conn.execute(f"PRAGMA user_version={number}")
            log.info("index schema migrated to version %d (%s)", number, self.path)

    @property
    def schema_version(self) -> int:
        return self._version(self.conn)

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._write_lock, self.conn as c:
            c.execute(
                "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (key, value),
            )

    # ------------------------------------------------------------------ notes (writes)
    def note_states(self) -> dict[str, NoteState]:
        """Every file the store knows, by vault-relative path."""
        rows = self.conn.execute("SELECT id, path, mtime_ns, size, content_hash, status, kind FROM notes")
        return {r[1]: NoteState(*r) for r in rows}

    def write_note(
        self, note: NoteRecord, chunks: Sequence[ChunkRecord], tags: Iterable[str], links: Sequence[LinkRecord]
    ) -> int:
        """Replace everything stored for ``note.path`` in ONE transaction: the note row, its tags,
        links, chunks and FTS rows. Vectors of the old chunks are removed; new chunks start
        un-embedded (``embedded = 0``) and are filled later by :meth:`set_vectors`.
        Returns the note id (kept stable across updates of the same path)."""
        now = time.time()
        with self._write_lock, self.conn as c:
            row = c.execute("SELECT id FROM notes WHERE path=?", (note.path,)).fetchone()
            values = (
                note.kind,
                note.title,
                json.dumps(list(note.aliases), ensure_ascii=False),
                json.dumps(note.frontmatter, ensure_ascii=False, default=str),
                note.mtime_ns,
                note.size,
                note.content_hash,
                now,
                note.error,
                note.error_code,
            )
            if row:
                note_id = row[0]
                self._delete_note_contents(c, note_id)
                c.execute(
                    "UPDATE notes SET kind=?, title=?, aliases=?, frontmatter=?, mtime_ns=?, size=?, "
                    "content_hash=?, indexed_at=?, status='ok', error=?, error_code=? WHERE id=?",
                    (*values, note_id),
                )
            else:
                c.execute(
                    "INSERT INTO notes(kind, title, aliases, frontmatter, mtime_ns, size, content_hash, "
                    "indexed_at, status, error, error_code, path) VALUES(?,?,?,?,?,?,?,?,'ok',?,?,?)",
                    (*values, note.path),
                )
                note_id = c.last_insert_rowid()
            c.executemany(
                "INSERT OR IGNORE INTO note_tags(note_id, tag) VALUES(?, ?)", [(note_id, t) for t in set(tags)]
            )
            c.executemany(
                "INSERT INTO links(note_id, ordinal, raw_target, target_path, heading, block_id, alias, is_embed, line)"
                " VALUES(?,?,?,?,?,?,?,?,?)",
                [
                    (note_id, i, l.raw_target, l.target_path, l.heading, l.block_id, l.alias, int(l.is_embed), l.line)
                    for i, l in enumerate(links)
                ],
            )
            for ch in chunks:
                c.execute(
                    "INSERT INTO chunks(note_id, ordinal, symbol, text, line_start, line_end, page, token_count,"
                    " kind, content_hash) VALUES(?,?,?,?,?,?,?,?,?,?)",
                    (
                        note_id,
                        ch.ordinal,
                        ch.symbol,
                        ch.text,
                        ch.line_start,
                        ch.line_end,
                        ch.page,
                        ch.token_count,
                        ch.kind,
                        ch.content_hash,
                    ),
                )
                chunk_id = c.last_insert_rowid()
                c.execute(
                    "INSERT INTO chunks_fts(rowid, text, symbol, title) VALUES(?,?,?,?)",
                    (chunk_id, ch.text, ch.symbol, note.title),
                )
                c.executemany(
                    "INSERT INTO chunk_units(chunk_id, text, content_hash) VALUES(?,?,?)",
                    [(chunk_id, t, h) for t, h in ch.units],
                )
        return note_id

    def write_skipped(
        self, path: str, *, kind: str, title: str, mtime_ns: int, size: int, content_hash: str, reason: str
    ) -> None:
        """Record a file that could not be indexed, with its reason (shown in ``/index/stats``).
        Any rows from an earlier good version are removed in the same transaction."""
        now = time.time()
        with self._write_lock, self.conn as c:
            row = c.execute("SELECT id FROM notes WHERE path=?", (path,)).fetchone()
            if row:
                self._delete_note_contents(c, row[0])
                c.execute(
                    "UPDATE notes SET kind=?, title=?, aliases='[]', frontmatter='{}', mtime_ns=?, size=?, "
                    "content_hash=?, indexed_at=?, status='skipped', error=?, error_code=NULL WHERE id=?",
                    (kind, title, mtime_ns, size, content_hash, now, reason, row[0]),
                )
            else:
                c.execute(
                    "INSERT INTO notes(path, kind, title, mtime_ns, size, content_hash, indexed_at, status, error)"
                    " VALUES(?,?,?,?,?,?,?,'skipped',?)",
                    (path, kind, title, mtime_ns, size, content_hash, now, reason),
                )

    def touch_note(self, path: str, mtime_ns: int, size: int) -> None:
        """The file's bytes are unchanged (same hash) but its mtime moved: remember the new stat."""
        with self._write_lock, self.conn as c:
            c.execute("UPDATE notes SET mtime_ns=?, size=? WHERE path=?", (mtime_ns, size, path))

    def delete_note(self, path: str) -> bool:
        """Remove a note and every row that belongs to it (chunks, FTS, vectors, tags, links) in one
        transaction. Embedding-cache rows stay (a moved note re-embeds nothing). Returns True if it existed."""
        with self._write_lock, self.conn as c:
            row = c.execute("SELECT id FROM notes WHERE path=?", (path,)).fetchone()
            if not row:
                return False
            self._delete_note_contents(c, row[0])
            c.execute("DELETE FROM notes WHERE id=?", (row[0],))
            return True

    @staticmethod
    def _bump_vectors_generation(c: apsw.Connection) -> None:
        # meta 'vectors_generation': bumped in every transaction that changes vectors, so readers
        # holding vectors in memory (the query service) know to reload.
        c.execute(
            "INSERT INTO meta(key, value) VALUES('vectors_generation', '1') "
            "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1"
        )

    @classmethod
    def _delete_note_contents(cls, c: apsw.Connection, note_id: int) -> None:
        ids = [r[0] for r in c.execute("SELECT id FROM chunks WHERE note_id=?", (note_id,))]
        if ids:
            cls._bump_vectors_generation(c)
            c.executemany("DELETE FROM chunks_fts WHERE rowid=?", [(i,) for i in ids])
            c.executemany("DELETE FROM chunk_vectors WHERE chunk_id=?", [(i,) for i in ids])
            units = [
                (r[0],)
                for r in c.execute(
                    "SELECT id FROM chunk_units WHERE chunk_id IN (SELECT value FROM json_each(?))", (json.dumps(ids),)
                )
            ]
            c.executemany("DELETE FROM unit_vectors WHERE unit_id=?", units)
            c.execute("DELETE FROM chunk_units WHERE chunk_id IN (SELECT value FROM json_each(?))", (json.dumps(ids),))
        c.execute("DELETE FROM chunks WHERE note_id=?", (note_id,))  # trigger chunks_deleted logs the ids
        if ids:
            c.execute(
                "DELETE FROM chunk_deletions WHERE seq <= (SELECT seq FROM sqlite_sequence WHERE "
                "name = 'chunk_deletions') - ?",
                (cls.DELETION_LOG_KEEP,),
            )
        c.execute("DELETE FROM note_tags WHERE note_id=?", (note_id,))
        c.execute("DELETE FROM links WHERE note_id=?", (note_id,))

    # ------------------------------------------------------------------ links
    def note_aliases(self) -> dict[str, list[str]]:
        """Aliases of every indexed note, by path (for link resolution)."""
        return {p: json.loads(a) for p, a in self.conn.execute("SELECT path, aliases FROM notes WHERE status='ok'")}

    def iter_links(self) -> Iterator[tuple[int, int, str, str, str | None]]:
        """(note_id, ordinal, source path, raw_target, target_path) of every stored link, one row at a time from a
        cursor (memory does not grow with the vault). Finish or drop the iterator before writing on this thread's
        connection."""
        yield from self.conn.execute(
            "SELECT l.note_id, l.ordinal, n.path, l.raw_target, l.target_path FROM links l JOIN notes n ON n.id=l.note_id"
        )

    def update_link_targets(self, changes: Sequence[tuple[str | None, int, int]]) -> None:
        """Set ``target_path`` for (target_path, note_id, ordinal) triples, in one transaction."""
        if not changes:
            return
        with self._write_lock, self.conn as c:
            c.executemany("UPDATE links SET target_path=? WHERE note_id=? AND ordinal=?", changes)

    # ------------------------------------------------------------------ vectors
    def pending_chunks(
        self, limit: int, *, pdf: bool | None = None, note_path: str | None = None
    ) -> list[tuple[int, str, str, list[tuple[int, str, str]]]]:
        """Up to ``limit`` chunks without vectors: (chunk_id, content_hash, title, [(unit_id, unit text, unit hash)]).
        ``pdf``: only PDF chunks (True), only the others (False), or all (None); ``note_path``: only that file's."""
        where = "c.embedded=0"
        args: list = []
        if pdf is not None:
            where += " AND c.kind " + ("=" if pdf else "!=") + " 'pdf'"
        if note_path is not None:
            where += " AND n.path=?"
            args.append(note_path)
        chunks = list(
            self.conn.execute(
                "SELECT c.id, c.content_hash, n.title FROM chunks c JOIN notes n ON n.id=c.note_id "
                f"WHERE {where} ORDER BY c.id LIMIT ?",
                (*args, limit),
            )
        )
        units: dict[int, list[tuple[int, str, str]]] = {cid: [] for cid, _, _ in chunks}
        if chunks:
            for uid, cid, text, h in self.conn.execute(
                "SELECT id, chunk_id, text, content_hash FROM chunk_units WHERE chunk_id IN "
                "(SELECT value FROM json_each(?)) ORDER BY id",
                (json.dumps(list(units)),),
            ):
                units[cid].append((uid, text, h))
        return [(cid, h, title, units[cid]) for cid, h, title in chunks]

    def count_pending(self) -> int:
        return self.conn.execute("SELECT count(*) FROM chunks WHERE embedded=0").fetchone()[0]

    def cached_vectors(self, hashes: Iterable[str], model_id: str) -> dict[str, np.ndarray]:
        """Cached embeddings for the given content hashes: {hash: (384,) float32}."""
        out: dict[str, np.ndarray] = {}
        hashes = list(dict.fromkeys(hashes))
        for start in range(0, len(hashes), 500):
            part = hashes[start : start + 500]
            marks = ",".join("?" * len(part))
            for h, blob in self.conn.execute(
                f"SELECT content_hash, vector FROM embedding_cache WHERE model_id=? AND content_hash IN ({marks})",
                (model_id, *part),
            ):
                out[h] = np.frombuffer(blob, dtype="<f4")
        return out

    def put_cached_vectors(self, items: dict[str, np.ndarray], model_id: str) -> None:
        now = time.time()
        with self._write_lock, self.conn as c:
            c.executemany(
                "INSERT OR REPLACE INTO embedding_cache(content_hash, model_id, vector, created_at) VALUES(?,?,?,?)",
                [(h, model_id, _vec_bytes(v), now) for h, v in items.items()],
            )

    def prune_embedding_cache(self, model_id: str, keep: Iterable[str], older_than: float) -> int:
        """Delete embedding-cache rows written before ``older_than`` (Unix time, s) that no current text
        uses: rows of another model id, and rows of ``model_id`` whose hash is neither a unit's
        (``chunk_units.content_hash``) nor in ``keep`` (hashes the caller still needs, e.g. the notes'
        title hashes). Rows written since ``older_than`` stay, so a note moved, renamed or edited back
        within that time re-embeds nothing. One transaction. Returns the number of rows deleted."""
        with self._write_lock, self.conn as c:
            old = c.execute(
                "SELECT content_hash, model_id FROM embedding_cache WHERE created_at < ?", (older_than,)
            ).fetchall()
            if not old:  # the usual case: no unit hashes to read (~0.2-0.6 s on obsidian-hub)
                return 0
            used = set(keep) | {h for (h,) in c.execute("SELECT DISTINCT content_hash FROM chunk_units")}
            doomed = [(h, m) for h, m in old if m != model_id or h not in used]
            c.executemany("DELETE FROM embedding_cache WHERE content_hash=? AND model_id=?", doomed)
        return len(doomed)

    def note_titles(self) -> list[str]:
        """The titles of every note and PDF in the index (status ok), distinct."""
        return [t for (t,) in self.conn.execute("SELECT DISTINCT title FROM notes WHERE status='ok'")]

    def set_vectors(self, items: Sequence[tuple[int, str, np.ndarray, Sequence[tuple[int, np.ndarray]]]]) -> int:
        """Store vectors, given (chunk_id, content_hash they were made for, chunk vector, [(unit_id, unit vector)]),
        vectors (384,) float32. A chunk deleted or changed meanwhile (hash differs) is skipped.
        One transaction. Returns the number of chunks written."""
        written = 0
        with self._write_lock, self.conn as c:
            for chunk_id, content_hash, vec, units in items:
                row = c.execute("SELECT content_hash FROM chunks WHERE id=?", (chunk_id,)).fetchone()
                if not row or row[0] != content_hash:
                    continue
                c.execute("DELETE FROM chunk_vectors WHERE chunk_id=?", (chunk_id,))
                c.execute("INSERT INTO chunk_vectors(chunk_id, embedding) VALUES(?, ?)", (chunk_id, _vec_bytes(vec)))
                for unit_id, uvec in units:
                    c.execute("DELETE FROM unit_vectors WHERE unit_id=?", (unit_id,))
                    c.execute("INSERT INTO unit_vectors(unit_id, embedding) VALUES(?, ?)", (unit_id, _vec_bytes(uvec)))
                c.execute("UPDATE chunks SET embedded=1 WHERE id=?", (chunk_id,))
                written += 1
            if written:
                self._bump_vectors_generation(c)
        return written

    def reset_vectors(self) -> None:
        """Drop every chunk vector (the cache stays): used when the vector recipe changes."""
        with self._write_lock, self.conn as c:
            c.execute("DELETE FROM chunk_vectors")
            c.execute("DELETE FROM unit_vectors")
            c.execute("UPDATE chunks SET embedded=0")
            self._bump_vectors_generation(c)

    def wal_checkpoint(self) -> None:
        """Truncate the WAL so it stays bounded during long indexing."""
        with self._write_lock:
            try:
                self.conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
            except apsw.BusyError:  # readers active; try again next time
                pass

    def integrity_problems(self, *, full: bool = False) -> list[str]:
        """What is wrong with the database, [] when nothing: ``PRAGMA quick_check`` (``integrity_check`` when
        ``full``), the FTS5 integrity check, and the store's own invariants (one FTS row per chunk; a chunk is
        marked embedded exactly when its vector exists). Never raises for a damaged file: the error is a problem."""
        problems: list[str] = []
        c = self.conn
        pragma = "integrity_check" if full else "quick_check"
        try:
            rows = [r[0] for r in c.execute(f"PRAGMA {pragma}")]
            if rows != ["ok"]:
                lines = [ln for r in rows for ln in str(r).splitlines() if ln.strip()]
                problems.append(
                    f"{pragma}: " + "; ".join(lines[:3]) + (f" (+{len(lines) - 3} more)" if len(lines) > 3 else "")
                )
        except apsw.Error as exc:
            return [f"{pragma} failed: {exc}"]
        try:
            with self._write_lock, c:  # a no-op write transaction: the check is an INSERT command
                c.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES('integrity-check', 1)")
        except apsw.ReadOnlyError:
            pass
        except apsw.Error as exc:
            problems.append(f"FTS5 integrity-check: {exc}")
        try:
            chunks = c.execute("SELECT count(*) FROM chunks").fetchone()[0]
            fts = c.execute("SELECT count(*) FROM chunks_fts").fetchone()[0]
            if fts != chunks:
                problems.append(f"{fts} full-text rows for {chunks} chunks")
            embedded = c.execute("SELECT count(*) FROM chunks WHERE embedded=1").fetchone()[0]
            vectors = c.execute("SELECT count(*) FROM chunk_vectors").fetchone()[0]
            if embedded != vectors:
                problems.append(f"{vectors} chunk vectors for {embedded} chunks marked embedded")
        except apsw.Error as exc:
            problems.append(f"consistency check failed: {exc}")
        return problems

    # ------------------------------------------------------------------ reads for the query service
    def knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Nearest ``k`` chunk vectors to ``query`` ((384,) float32, L2-normalised) by cosine distance.
        Returns (chunk_id, cosine_similarity), best first."""
        rows = self.conn.execute(
            "SELECT chunk_id, distance FROM chunk_vectors WHERE embedding MATCH ? AND k = ?",
            (_vec_bytes(query), int(k)),
        )
        return [(r[0], 1.0 - r[1]) for r in rows]

    def vectors_generation(self) -> int:
        """A counter bumped by every committed change to vectors (any connection, any process)."""
        row = self.conn.execute("SELECT value FROM meta WHERE key='vectors_generation'").fetchone()
        return int(row[0]) if row else 0

    def load_vector_matrices(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every chunk and unit vector, read in one snapshot:
        (generation, chunk ids (n,) int64, chunk vectors (n, 384) float32,
        owning chunk id of each unit (m,) int64, unit vectors (m, 384) float32). Memory: 1.5 KiB a vector, held
        once: rows are copied one at a time into arrays sized by a count in the same read transaction (no list of
        every row's bytes and a joined copy beside them, which took twice the vectors' size on top while loading)."""
        c = self.conn

        def matrix(count_sql: str, rows_sql: str) -> tuple[np.ndarray, np.ndarray]:
            n = c.execute(count_sql).fetchone()[0]
            ids = np.empty(n, dtype=np.int64)
            mat = np.empty((n, EMBED_DIM), dtype=np.float32)
            i = 0
            for owner, blob in c.execute(rows_sql):
                ids[i] = owner
                mat[i] = np.frombuffer(blob, dtype="<f4")
                i += 1
            return ids[:i], mat[:i]

        with c:  # one read transaction: generation, counts and vectors agree
            gen = self.vectors_generation()
            chunk_ids, chunk_mat = matrix(
                "SELECT count(*) FROM chunk_vectors", "SELECT chunk_id, embedding FROM chunk_vectors"
            )
            unit_owner, unit_mat = matrix(
                "SELECT count(*) FROM unit_vectors v JOIN chunk_units u ON u.id = v.unit_id",
                "SELECT u.chunk_id, v.embedding FROM unit_vectors v JOIN chunk_units u ON u.id = v.unit_id",
            )
        return gen, chunk_ids, chunk_mat, unit_owner, unit_mat

    def embedded_chunk_ids(self) -> tuple[int, str | None, np.ndarray]:
        """The chunks that have a vector, read in one transaction: (vectors generation, the vector recipe they were
        made with (meta ``vector_recipe``, set by the indexer; None when unset), chunk ids (k,) int64 ascending).
        Ids only (obsidian-hub's 19.6k in a few ms).

        A chunk id's vector changes only with the recipe: :meth:`write_note` gives a note's new chunks new ids
        (never reused: AUTOINCREMENT), and :meth:`set_vectors` writes a chunk's vector only for its content hash, so
        a reader holding the vectors of ids still listed here under the same recipe holds their current vectors
        (a recipe change is :meth:`reset_vectors`, then every chunk embedded again under the same ids)."""
        c = self.conn
        with c:
            gen = self.vectors_generation()
            recipe = self.get_meta("vector_recipe")
            ids = np.fromiter(
                (r[0] for r in c.execute("SELECT id FROM chunks WHERE embedded = 1 ORDER BY id")), dtype=np.int64
            )
        return gen, recipe, ids

    def load_vector_matrices_and_recipe(
        self,
    ) -> tuple[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray], str | None]:
        """:meth:`load_vector_matrices` and the vector recipe (meta ``vector_recipe``) read in one transaction, so
        the recipe is the one the vectors read were made with."""
        with self.conn:
            return self.load_vector_matrices(), self.get_meta("vector_recipe")

    def vector_matrices_of(
        self, chunk_ids: Sequence[int] | np.ndarray
    ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Like :meth:`load_vector_matrices` for just ``chunk_ids`` (chunks without a vector are absent), in one
        read transaction: (generation, chunk ids (n,) int64, chunk vectors (n, 384) float32, owning chunk id of each
        unit (m,) int64, unit vectors (m, 384) float32). Chunks in ascending id order, each one's units after it
        (:meth:`vectors` and :meth:`unit_vectors`: 500 ids per statement; ~0.1 ms a chunk with its units)."""
        ids = sorted({int(c) for c in chunk_ids})
        with self.conn:  # one read transaction: the generation and both reads agree
            gen = self.vectors_generation()
            chunk_vecs, unit_vecs = self.vectors(ids), self.unit_vectors(ids)
        held = [i for i in ids if i in chunk_vecs]
        owners = [i for i in held for _ in range(len(unit_vecs.get(i, ())))]
        units = [unit_vecs[i] for i in held if i in unit_vecs]
        return (
            gen,
            np.asarray(held, dtype=np.int64),
            np.stack([chunk_vecs[i] for i in held]) if held else np.zeros((0, EMBED_DIM), np.float32),
            np.asarray(owners, dtype=np.int64),
            np.concatenate(units) if units else np.zeros((0, EMBED_DIM), np.float32),
        )

    def file_identity(self) -> tuple[int, int]:
        """(device, inode) of the database file now at :attr:`path` ((0, 0) when it is missing): a reader holding
        data read earlier can tell that the file was replaced (a rebuilt index reuses chunk ids)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return (0, 0)
        return (st.st_dev, st.st_ino)

    def embedded_chunks_after(self, chunk_id: int, limit: int) -> list[int]:
        """Ids of chunks with vectors and an id above ``chunk_id`` (ids are never reused), newest first (the notes
        saved last: what a user searching during an editing session looks for), at most ``limit``."""
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT id FROM chunks WHERE id > ? AND embedded = 1 ORDER BY id DESC LIMIT ?", (chunk_id, limit)
            )
        ]

    def unit_vectors(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """Unit vectors of the given chunks: {chunk_id: (m, 384) float32}; chunks without any are absent."""
        out: dict[int, list[np.ndarray]] = {}
        ids = list(chunk_ids)
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            rows = self.conn.execute(
                "SELECT u.chunk_id, v.embedding FROM chunk_units u JOIN unit_vectors v ON v.unit_id = u.id "
                "WHERE u.chunk_id IN (SELECT value FROM json_each(?))",
                (json.dumps(part),),
            )
            for cid, blob in rows:
                out.setdefault(cid, []).append(np.frombuffer(blob, dtype="<f4"))
        return {cid: np.stack(v) for cid, v in out.items()}

    def vectors(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """Stored vectors of the given chunks: {chunk_id: (384,) float32}; chunks without one are absent."""
        out: dict[int, np.ndarray] = {}
        ids = list(chunk_ids)
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            rows = self.conn.execute(
                "SELECT chunk_id, embedding FROM chunk_vectors WHERE chunk_id IN (SELECT value FROM json_each(?))",
                (json.dumps(part),),
            )
            for cid, blob in rows:
                out[cid] = np.frombuffer(blob, dtype="<f4")
        return out

    def chunk_rows(self, chunk_ids: Sequence[int]) -> dict[int, ChunkRow]:
        """Chunks with their note's path, title and indexing time, by id."""
        out: dict[int, ChunkRow] = {}
        ids = list(chunk_ids)
        if not ids:
            return out
        rows = self.conn.execute(
            f"SELECT {_CHUNK_ROW_COLUMNS} FROM chunks c JOIN notes n ON n.id=c.note_id "
            "WHERE c.id IN (SELECT value FROM json_each(?))",
            (json.dumps(ids),),
        )
        for r in rows:
            out[r[0]] = _chunk_row(r)
        return out

    def tags_of_notes(self, note_ids: Iterable[int]) -> dict[int, list[str]]:
        ids = list(set(note_ids))
        out: dict[int, list[str]] = {i: [] for i in ids}
        if ids:
            for nid, tag in self.conn.execute(
                "SELECT note_id, tag FROM note_tags WHERE note_id IN (SELECT value FROM json_each(?)) ORDER BY tag",
                (json.dumps(ids),),
            ):
                out[nid].append(tag)
        return out

    def scoped_chunk_ids(self, tags: Sequence[str], folders: Sequence[str]) -> list[int]:
        """Chunk ids of notes carrying ANY of ``tags`` (nested ``a/b`` matches ``a``) and lying under
        ANY of ``folders`` (vault-relative folder prefixes, ASCII letter case ignored). Empty sequences mean no
        restriction on that axis."""
        where, args = ["n.status='ok'"], []
        if tags:
            ors = []
            for t in tags:
                ors.append("(t.tag = ? OR substr(t.tag, 1, ?) = ?)")
                args += [t, len(t) + 1, t + "/"]
            where.append(f"n.id IN (SELECT t.note_id FROM note_tags t WHERE {' OR '.join(ors)})")
        if folders:
            ors = []
            for f in folders:
                f = f.strip("/")
                ors.append("substr(n.path, 1, ?) = ? COLLATE NOCASE")  # ASCII letters: as Obsidian's path: search
                args += [len(f) + 1, f + "/"]
            where.append("(" + " OR ".join(ors) + ")")
        sql = f"SELECT c.id FROM chunks c JOIN notes n ON n.id=c.note_id WHERE {' AND '.join(where)}"
        return [r[0] for r in self.conn.execute(sql, args)]

    # ------------------------------------------------------------------ notes (reads)
    def note_by_path(self, path: str) -> StoredNote | None:
        """What the index holds for the file at vault-relative ``path`` (any status), or None."""
        row = self.conn.execute(
            "SELECT id, path, kind, title, aliases, frontmatter, indexed_at, status, error FROM notes WHERE path=?",
            (path,),
        ).fetchone()
        if not row:
            return None
        return StoredNote(
            id=row[0],
            path=row[1],
            kind=row[2],
            title=row[3],
            aliases=tuple(json.loads(row[4])),
            frontmatter=json.loads(row[5]),
            indexed_at=row[6],
            status=row[7],
            error=row[8],
        )

    def chunks_of_note(self, path: str) -> list[ChunkRow]:
        """The chunks of the note at vault-relative ``path``, in order ([] when none)."""
        rows = self.conn.execute(
            f"SELECT {_CHUNK_ROW_COLUMNS} FROM chunks c JOIN notes n ON n.id=c.note_id WHERE n.path=? ORDER BY c.ordinal",
            (path,),
        )
        return [_chunk_row(r) for r in rows]

    def links_of_note(self, path: str) -> list[LinkRecord]:
        """The links of the note at vault-relative ``path``, in document order."""
        rows = self.conn.execute(
            "SELECT l.raw_target, l.target_path, l.heading, l.block_id, l.alias, l.is_embed, l.line FROM links l "
            "JOIN notes n ON n.id=l.note_id WHERE n.path=? ORDER BY l.ordinal",
            (path,),
        )
        return [
            LinkRecord(
                raw_target=r[0],
                target_path=r[1],
                heading=r[2],
                block_id=r[3],
                alias=r[4],
                is_embed=bool(r[5]),
                line=r[6],
            )
            for r in rows
        ]

    def backlinks(self, path: str) -> list[Backlink]:
        """The notes linking to vault-relative ``path`` (one entry per source line), by path then line."""
        rows = self.conn.execute(
            "SELECT DISTINCT n.path, l.line FROM links l JOIN notes n ON n.id=l.note_id WHERE l.target_path=? "
            "ORDER BY n.path, l.line",
            (path,),
        )
        return [Backlink(path=r[0], line=r[1]) for r in rows]

    def tag_counts(self) -> list[tuple[str, int]]:
        return list(self.conn.execute("SELECT tag, count(*) FROM note_tags GROUP BY tag ORDER BY tag"))

    def note_tags(self, path: str) -> list[str]:
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT t.tag FROM note_tags t JOIN notes n ON n.id=t.note_id WHERE n.path=? ORDER BY t.tag", (path,)
            )
        ]

    def stats(self) -> IndexStats:
        """Counts and freshness of the index, and every file with an error or warning (by path)."""
        c = self.conn
        notes = c.execute("SELECT count(*) FROM notes WHERE status='ok'").fetchone()[0]
        pdfs = c.execute("SELECT count(*) FROM notes WHERE status='ok' AND kind='pdf'").fetchone()[0]
        skipped = c.execute("SELECT count(*) FROM notes WHERE status='skipped'").fetchone()[0]
        chunks = c.execute("SELECT count(*) FROM chunks").fetchone()[0]
        pending = self.count_pending()
        last = c.execute("SELECT max(indexed_at) FROM notes").fetchone()[0]
        problems = tuple(
            NoteProblem(path=p, reason=e, skipped=s == "skipped")
            for p, e, s in c.execute("SELECT path, error, status FROM notes WHERE error IS NOT NULL ORDER BY path")
        )
        return IndexStats(
            notes=notes,
            pdfs=pdfs,
            skipped=skipped,
            chunks=chunks,
            vectors=chunks - pending,
            pending=pending,
            last_ingested_at=last,
            errors=problems,
        )

    def check_readable(self) -> None:
        """Read the notes table once (the health check). Raises :class:`apsw.Error` when the index cannot be read."""
        self.conn.execute("SELECT count(*) FROM notes").fetchone()

    def change_marker(self) -> tuple[int, int, int]:
        """``(connection key, data_version, total_changes)`` of this thread's connection: while the key stays
        the same, the other two change whenever any connection (this one: ``total_changes``; any other, in
        this process or another: SQLite's ``PRAGMA data_version``) has committed a change since the last call.
        Cheap (no table read); for caches of query results."""
        c = self.conn
        return id(c), c.execute("PRAGMA data_version").fetchone()[0], c.total_changes()

    def fts_tokens(self, text: str) -> list[str]:
        """``text`` as ``chunks_fts`` tokenizes a query phrase (its own tokenizer, :data:`FTS_TOKENIZER`): e.g.
        ``"Plugins"`` → ``["plugin"]``, ``"e-mail"`` → ``["e", "mail"]``."""
        return self._fts_tokenizer()(
            text.encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None, include_offsets=False, include_colocated=False
        )

    def _fts_tokenizer(self) -> apsw.FTS5Tokenizer:
        """This thread's connection's instance of the ``chunks_fts`` tokenizer."""
        c = self.conn
        held = getattr(self._local, "fts_tokenizer", None)
        if held is None or held[0] is not c:
            held = self._local.fts_tokenizer = (c, c.fts5_tokenizer(FTS_TOKENIZER[0], list(FTS_TOKENIZER[1:])))
        return held[1]

    def fts_counts(self) -> tuple[int, int, int] | None:
        """(rows, tokens in all columns, highest row id) of ``chunks_fts``, read in one transaction from FTS5's averages
        record and its row-size table's last id (two lookups, no scan). Every change to the table changes one of
        them (rows are only added with a new, higher id). None when the averages record cannot be read."""
        c = self.conn
        with c:
            counts = _fts_totals(c)
            top = c.execute("SELECT max(id) FROM chunks_fts_docsize").fetchone()[0]
        return None if counts is None else (counts[0], counts[1], int(top or 0))

    def fts_snapshot(
        self, after_id: int, max_rows: int | None = None, after_seq: int | None = None
    ) -> FtsSnapshot | None:
        """What ``chunks_fts`` holds, read in one transaction, for an in-memory BM25 (cairn.bm25).

        ``docs`` [(chunk id, tokens)]: the rows with an id above ``after_id`` (ids are never reused:
        AUTOINCREMENT), each row's columns (text, symbol, title) tokenized by the table's own tokenizer as one token
        list; ``n_rows``, ``n_tokens``: FTS5's own counts from its averages record (what bm25() computes idf and the
        average row length from); ``deletion_seq``: the deletion log's last entry (None: no log, an index of
        schema version 2 opened read-only). Then either ``deleted`` (k,) int64, the ids deleted after log entry
        ``after_seq`` in order (``live`` None), when ``after_seq`` is given and the log holds every entry since; or
        else ``live`` (n,) int64 ascending, the ids of every row, from a scan of FTS5's row-size table.
        None when more than ``max_rows`` rows are newer than ``after_id``, or when FTS5's averages record cannot be
        read (an unexpected format). Cost on obsidian-hub (19,573 rows): under 1 ms plus ~60 µs a new row with
        ``after_seq``; ~8 ms more with the scan; ~1.2 s to tokenize every row."""
        c = self.conn
        with c:
            counts = _fts_totals(c)
            if counts is None:
                return None
            seq = self._deletion_seq(c)
            deleted = None
            if after_seq is not None and seq is not None and 0 <= seq - after_seq <= self.DELETION_LOG_MAX_READ:
                rows = c.execute("SELECT chunk_id FROM chunk_deletions WHERE seq > ? ORDER BY seq", (after_seq,))
                deleted = np.fromiter((r[0] for r in rows), dtype=np.int64)
                if len(deleted) != seq - after_seq:  # entries trimmed away: the log cannot say what was deleted
                    deleted = None
            live = None
            if deleted is None:
                # FTS5's own list of its rows (a small table: ~4-8 ms here, against ~20-45 ms for the ids of `chunks`).
                live = np.fromiter(
                    (r[0] for r in c.execute("SELECT id FROM chunks_fts_docsize ORDER BY id")), dtype=np.int64
                )
            if max_rows is not None:
                newer = c.execute("SELECT count(*) FROM chunks WHERE id > ?", (after_id,)).fetchone()[0]
                if newer > max_rows:
                    return None
            tok = self._fts_tokenizer()
            flag = apsw.FTS5_TOKENIZE_DOCUMENT
            # The three columns joined by a newline, which unicode61 never makes part of a token: the same
            # tokens, in the same number, as the three columns FTS5 tokenized one by one.
            docs = [
                (cid, tok(text.encode("utf-8"), flag, None, include_offsets=False, include_colocated=False))
                for cid, text in c.execute(
                    "SELECT c.id, c.text || char(10) || c.symbol || char(10) || n.title FROM chunks c "
                    "JOIN notes n ON n.id = c.note_id WHERE c.id > ? ORDER BY c.id",
                    (after_id,),
                )
            ]
        return FtsSnapshot(
            live=live, docs=docs, n_rows=counts[0], n_tokens=counts[1], deleted=deleted, deletion_seq=seq
        )

    @staticmethod
    def _deletion_seq(c: apsw.Connection) -> int | None:
        """The deletion log's last ``seq`` (0 before any deletion), or None when the index has no log (schema
        version 2, opened read-only: not migrated)."""
        if not c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'chunk_deletions'").fetchone():
            return None
        row = c.execute("SELECT seq FROM sqlite_sequence WHERE name = 'chunk_deletions'").fetchone()
        return int(row[0]) if row else 0

    def fts_phrase_scores(self, phrase: str) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk matching one FTS5 phrase (a double-quoted term, as :func:`cairn.ranking.fts_match_expression`
        builds them) with its BM25: (chunk ids (k,) int64, bm25 (k,) float64, each < 0). FTS5's bm25 of an OR of
        phrases is the sum, in query order, of these per-phrase values (``fts5_aux.c``: one idf-weighted term per
        phrase), so a query can be ranked from cached phrases. Raises :class:`StoreError` for a bad phrase."""
        try:
            rows = self.conn.execute(
                "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?", (phrase,)
            ).fetchall()
        except apsw.SQLError as exc:  # a MATCH expression the caller should never build
            raise StoreError(f"full-text query failed: {exc}") from exc
        pairs = np.array(rows, dtype=np.float64).reshape(-1, 2)  # chunk ids < 2**53: exact as doubles
        return pairs[:, 0].astype(np.int64), pairs[:, 1].copy()

"""The index database's connections (one per thread), schema migrations, the ``meta`` table and the checks of the
file itself; the tables' reads and writes are in :mod:`cairn.store.notes`, :mod:`cairn.store.chunks` and
:mod:`cairn.store.vectors`."""

from __future__ import annotations

import errno
import logging
import math
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import sqlite_vec

from cairn.errors import (
    IndexFileChangedError,
    IndexOfAnotherVaultError,
    SchemaTooNewError,
    StoreError,
    StoreUnavailableError,
)
from cairn.private_files import make_private, private_dir, private_file
from cairn.store.fts import register as register_fts_functions
from cairn.store.schema import MIGRATIONS, SCHEMA_VERSION, VACUUM_AFTER

log = logging.getLogger(__name__)


def scalar(conn: apsw.Connection, sql: str, args: Sequence[Any] = ()) -> Any:
    """The first column of the first row ``sql`` gives (an aggregate: ``count(*)``, ``max(...)``, a pragma)."""
    row = conn.execute(sql, args).fetchone()
    if row is None:
        raise StoreError(f"no row for {sql!r}")
    return row[0]


def vec_bytes(vec: np.ndarray) -> bytes:
    return np.ascontiguousarray(vec, dtype="<f4").tobytes()


#: The ``meta`` key holding the vault path the index was built for (:func:`vault_key`).
VAULT_META = "vault"


def vault_key(vault: Path | str) -> str:
    """How a vault's path is recorded in its index: the path's bytes as UTF-8, undecodable bytes as ``\\xNN``."""
    return os.fsencode(vault).decode("utf-8", "backslashreplace")


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it was raised from or while handling, says the index could not be written for
    lack of space (SQLite's ``SQLITE_FULL``, or the operating system's ``ENOSPC`` / ``EDQUOT``): not the note's
    fault, and over once space is freed. The chain matters: SQLite rolls a transaction back by itself on
    ``SQLITE_FULL``, so leaving a ``with connection:`` block raises "cannot rollback" from the ``FullError``."""
    full = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, apsw.FullError) or (isinstance(cur, OSError) and cur.errno in full):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


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


class StoreBase:
    """An open index database.

    ``Store(path)`` creates the file (0600) and folders (0700) if needed, loads sqlite-vec,
    switches to WAL and applies pending migrations. Raises
    :class:`~cairn.errors.SchemaTooNewError` for a database from a newer Cairn and
    :class:`~cairn.errors.StoreError` when the file cannot be opened or is not a database.

    ``vault``: the vault the index is for. Its path is recorded in the index (``meta``, :data:`VAULT_META`) at the
    first writable open, and an index recording another vault raises
    :class:`~cairn.errors.IndexOfAnotherVaultError`. Whatever ``vault``, the file's identity (device, inode) is
    taken at open and compared with the file at :attr:`path` at most every :data:`IDENTITY_CHECK_S` seconds
    when a connection is used: once the file was deleted or replaced, every use raises
    :class:`~cairn.errors.IndexFileChangedError` (a 503 at the HTTP edge), so nothing is served from another
    vault's index and no edit is written into an unlinked file.
    """

    BUSY_TIMEOUT_MS = 5000
    #: Seconds between two checks that the file at :attr:`path` is still the one opened (one ``stat``).
    IDENTITY_CHECK_S = 0.05
    #: Newest entries kept in the deletion log (table ``chunk_deletions``, schema migration 3; 16 bytes each):
    #: a reader that fell further behind (a re-index of a vault this size while it slept) scans instead.
    DELETION_LOG_KEEP = 50_000
    #: Deletions a reader applies from the log; more, and :meth:`fts_snapshot` scans FTS5's row ids instead.
    DELETION_LOG_MAX_READ = 5_000

    def __init__(self, path: Path | str, *, readonly: bool = False, vault: Path | str | None = None) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._local = threading.local()
        self._bulk_runs = 0  # whole-vault runs writing now (bulk_batches), any thread
        self._write_lock = threading.RLock()
        self._all: list[apsw.Connection] = []
        self._all_lock = threading.Lock()
        self._identity: tuple[int, int] | None = None  # the opened file's, set by the first _open
        self._identity_checked = -math.inf  # -inf: due now (time.monotonic() starts near 0 at boot)
        self._changed: str | None = None  # why the file is no longer used, once it was deleted or replaced
        if not readonly:
            self._private_files()
        conn = self.conn
        if not readonly:
            self._migrate(conn)
        else:
            self._check_version(conn)
        if vault is not None:
            self.check_vault(vault)

    def _private_files(self) -> None:
        """The index's folder (0700) and file (0600) made or left private before SQLite opens it: SQLite gives the
        ``-wal`` and ``-shm`` it creates the index file's mode, and an index of an older install (0644, with its
        ``-wal`` / ``-shm``) is narrowed, each change logged."""
        private_dir(self.path.parent)
        private_file(self.path)
        for extra in ("-wal", "-shm"):
            change = make_private(self.path.with_name(self.path.name + extra))
            if change is not None:
                log.warning("made private to you: %s%s: mode %o → %o", self.path, extra, *change)

    def _open(self) -> apsw.Connection:
        flags = apsw.SQLITE_OPEN_READONLY if self.readonly else apsw.SQLITE_OPEN_READWRITE
        if not self.readonly and self._identity is None:
            flags |= apsw.SQLITE_OPEN_CREATE  # later opens never create: a deleted file is reported, not remade
        try:
            try:
                conn = apsw.Connection(str(self.path), flags=flags)
            except apsw.CantOpenError:
                if self._identity is not None:
                    self._identity_checked = -math.inf
                    self._check_identity()
                raise
            self._refuse_if_replaced(conn)
            conn.set_busy_timeout(self.BUSY_TIMEOUT_MS)
            conn.enable_load_extension(True)
            conn.load_extension(sqlite_vec.loadable_path())
            conn.enable_load_extension(False)
            register_fts_functions(conn)
            if not self.readonly:
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA synchronous=NORMAL")
        except apsw.Error as exc:
            raise _open_error(self.path, exc) from exc
        if self._identity is None:
            self._identity = self.file_identity()
        with self._all_lock:
            self._all.append(conn)
        return conn

    def _refuse_if_replaced(self, conn: apsw.Connection) -> None:
        """Close ``conn`` (just opened, nothing read yet) and raise :class:`~cairn.errors.IndexFileChangedError`
        when the file at :attr:`path` is no longer the one first opened. Checked before the first statement: a
        connection to the new file would see this store's ``-wal`` over it, and closing it would checkpoint this
        vault's pages into that file. A stat after the open cannot miss that case: a file replaced after the stat
        leaves the connection on the original one, which later checks catch."""
        if self._identity is None or self.file_identity() == self._identity:
            return
        conn.close()
        self._identity_checked = -math.inf
        self._check_identity()

    @property
    def conn(self) -> apsw.Connection:
        """This thread's connection (created on first use). Raises :class:`~cairn.errors.IndexFileChangedError`
        once the file at :attr:`path` is no longer the one opened."""
        self._check_identity()
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._open()
        return conn

    def _check_identity(self) -> None:
        if self._changed is None and self._identity is not None:
            now = time.monotonic()
            if now - self._identity_checked < self.IDENTITY_CHECK_S:
                return
            self._identity_checked = now
            current = self.file_identity()
            if current == self._identity:
                return
            what = "deleted" if current == (0, 0) else "replaced by another file"
            self._changed = (
                f"The index file {str(self.path)!r} was {what} while Cairn was using it: nothing more is read from "
                "or written to it. Restart Cairn to rebuild the index from the vault."
            )
            log.error("%s", self._changed)
            if not self.readonly:
                self._drop_own_wal()
        if self._changed is not None:
            raise IndexFileChangedError(self._changed)

    def _drop_own_wal(self) -> None:
        """Delete the ``-wal`` / ``-shm`` at :attr:`path`: this writer's, left beside a file that is no longer its
        database (SQLite keeps them when the file went), where the next open would replay them into the new file.
        Only a writable store does it: it holds the index's instance lock, so no other Cairn writes those files."""
        for extra in ("-wal", "-shm"):
            try:
                self.path.with_name(self.path.name + extra).unlink(missing_ok=True)
            except OSError as exc:
                log.warning("cannot delete the stale %s of %s: %s", extra, self.path, exc)

    def check_vault(self, vault: Path | str) -> None:
        """Record ``vault`` (as :func:`vault_key`) as the index's vault when none is recorded (and the store is
        writable); raise :class:`~cairn.errors.IndexOfAnotherVaultError` when another vault is recorded."""
        key = vault_key(vault)
        recorded = self.get_meta(VAULT_META)
        if recorded is None:
            if not self.readonly:
                self.set_meta(VAULT_META, key)
            return
        if recorded != key:
            raise IndexOfAnotherVaultError(
                f"The index file {str(self.path)!r} was built for the vault {recorded!r}, not {key!r} (copied or "
                "restored from elsewhere?)."
            )

    @property
    def file_changed(self) -> bool:
        """True once the file at :attr:`path` was found deleted or replaced (nothing more is read from it)."""
        return self._changed is not None

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
        self._close_connections([conn])

    def close(self) -> None:
        """Close every connection opened by any thread."""
        with self._all_lock:
            conns, self._all = self._all, []
        self._close_connections(conns)
        self._local = threading.local()

    def _close_connections(self, conns: list[apsw.Connection]) -> None:
        """Close ``conns``; once the file at :attr:`path` was deleted or replaced (checked now), without the
        checkpoint SQLite runs at the last close: its ``-wal`` holds this store's pages, which must reach neither the
        file now at the path nor, through a leftover ``-wal``, the next open."""
        if self._changed is None and self._identity is not None:
            self._identity_checked = -math.inf
            try:
                self._check_identity()
            except IndexFileChangedError:
                pass
        for conn in conns:
            try:
                if self._changed is not None:
                    conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
                conn.close()
            except apsw.Error:  # pragma: no cover - closing is best effort
                pass

    def _version(self, conn: apsw.Connection) -> int:
        try:
            return int(scalar(conn, "PRAGMA user_version"))
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
        """Apply the migrations after the database's version (:mod:`cairn.store.schema`), each in one transaction
        with its new ``user_version``."""
        version = self._check_version(conn)
        for number in range(version + 1, SCHEMA_VERSION + 1):
            migrate = MIGRATIONS[number - 1]
            with self._write_lock, conn:
                migrate(conn)
                conn.execute(f"PRAGMA user_version={number}")
            log.info("index schema migrated to version %d, %s (%s)", number, migrate.__name__, self.path)
        if VACUUM_AFTER.intersection(range(version + 1, SCHEMA_VERSION + 1)) and version > 0:
            self._vacuum(conn)

    def _vacuum(self, conn: apsw.Connection) -> None:
        """Give the pages a migration freed back to the file system (once, at the open that migrated; seconds on a
        large index). Best effort: without the room for a copy of the file it stays as it is, its free pages reused
        by later writes."""
        started = time.monotonic()
        try:
            with self._write_lock:
                conn.execute("VACUUM")
        except apsw.Error as exc:
            log.warning(
                "index %s not compacted after its migration (its free pages will be reused): %s", self.path, exc
            )
            return
        log.info("index %s compacted after its migration in %.1f s", self.path, time.monotonic() - started)

    @property
    def schema_version(self) -> int:
        return self._version(self.conn)

    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._write_lock, self.conn as c:
            c.execute(
                "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (key, value),
            )

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction around the block, on this thread's connection: the writes made inside it (each in
        its own savepoint, so one that raises is undone alone) are committed together when the block ends, or all
        rolled back when it raises. :class:`~cairn.errors.StoreError` when SQLite itself rolled the transaction back
        inside the block (e.g. an I/O error): none of its writes were kept."""
        with self._write_lock, self.conn as c:
            yield
            if not c.in_transaction:
                raise StoreError(f"the write transaction on {str(self.path)!r} was rolled back by SQLite")

    @staticmethod
    def _bump_vectors_generation(c: apsw.Connection) -> None:
        # meta 'vectors_generation': bumped in every transaction that changes vectors, so readers
        # holding vectors in memory (the query service) know to reload.
        c.execute(
            "INSERT INTO meta(key, value) VALUES('vectors_generation', '1') "
            "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1"
        )

    def _bump_notes_generation(self, c: apsw.Connection) -> None:
        # meta 'notes_generation': bumped in every transaction that adds, rewrites or removes a note's row (its
        # name, aliases, chunks), so readers holding what depends on those alone (the note map, the names index)
        # rebuild it then, and not after a commit of vectors. 'settled_generation' too unless a whole-vault run
        # writes now (bulk_batches): see notes_generations.
        self._bump(c, "notes_generation")
        if not self._bulk_runs:
            self._bump(c, "settled_generation")

    @staticmethod
    def _bump(c: apsw.Connection, key: str) -> None:
        c.execute(
            "INSERT INTO meta(key, value) VALUES(?, '1') "
            "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
            (key,),
        )

    @contextmanager
    def bulk_batches(self) -> Iterator[None]:
        """A whole-vault run writes inside the block: changes to the notes (its batches, and a save meanwhile) bump
        ``notes_generation`` alone (:meth:`notes_generations`); at the end ``settled_generation`` is bumped once when
        the notes changed, so no reader lags behind a finished run."""
        started = self.notes_generation() if not self.readonly else 0
        with self._write_lock:
            self._bulk_runs += 1
        try:
            yield
        finally:
            with self._write_lock:
                self._bulk_runs -= 1
                last = not self._bulk_runs
            if last and not self.readonly:
                self._settle(started)

    def _settle(self, since: int) -> None:
        """Bump ``settled_generation`` when ``notes_generation`` moved past ``since``. A write that fails here (disk
        full, the file gone) is the run's own error to report: readers catch up by the clock meanwhile."""
        try:
            with self._write_lock, self.conn as c:
                row = c.execute("SELECT value FROM meta WHERE key='notes_generation'").fetchone()
                if row is not None and int(row[0]) != since:
                    self._bump(c, "settled_generation")
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.debug("the end of a whole-vault run was not marked: %s", exc)

    def notes_generation(self) -> int:
        """A counter bumped by every committed change to the notes' rows and chunks (any connection, any process);
        not by vectors, links or a note's new mtime."""
        return self.notes_generations()[0]

    def notes_generations(self) -> tuple[int, int]:
        """(``notes_generation``, ``settled_generation``) in one read. The second is bumped by the same changes as the
        first, except while a whole-vault run writes (:meth:`bulk_batches`: a first index's batches, and saves made
        meanwhile), and once when such a run ends. A reader may serve what it read a moment ago while only the first
        moved (:class:`~cairn.search.cache.NotesSnapshot`): the notes are still coming in by the batch."""
        rows = dict(
            self.conn.execute("SELECT key, value FROM meta WHERE key IN ('notes_generation', 'settled_generation')")
        )
        return int(rows.get("notes_generation", 0)), int(rows.get("settled_generation", 0))

    def wal_checkpoint(self) -> None:
        """Truncate the WAL so it stays bounded during long indexing."""
        with self._write_lock:
            try:
                self.conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
            except apsw.BusyError:  # readers active; try again next time
                pass

    def integrity_problems(self, *, full: bool = False, pages: bool = True) -> list[str]:
        """What is wrong with the database, [] when nothing: ``PRAGMA quick_check`` (``integrity_check`` when
        ``full``) and the FTS5 integrity check (both only when ``pages``: they read every page), and the store's own
        invariants (one FTS row per chunk; a chunk is marked embedded exactly when its vector exists). Never raises
        for a damaged file: the error is a problem."""
        problems: list[str] = []
        c = self.conn
        if pages:
            pragma = "integrity_check" if full else "quick_check"
            try:
                problems = self._page_problems(c, pragma)
            except apsw.Error as exc:
                return [f"{pragma} failed: {exc}"]
        return problems + self._invariant_problems(c)

    def _page_problems(self, c: apsw.Connection, pragma: str) -> list[str]:
        """``pragma`` (quick_check / integrity_check) and the FTS5 integrity check. Raises :class:`apsw.Error` when
        the pragma cannot run."""
        problems: list[str] = []
        rows = [r[0] for r in c.execute(f"PRAGMA {pragma}")]
        if rows != ["ok"]:
            lines = [ln for r in rows for ln in str(r).splitlines() if ln.strip()]
            problems.append(
                f"{pragma}: " + "; ".join(lines[:3]) + (f" (+{len(lines) - 3} more)" if len(lines) > 3 else "")
            )
        try:
            with self._write_lock, c:  # a no-op write transaction: the check is an INSERT command
                c.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES('integrity-check', 1)")
        except apsw.ReadOnlyError:
            pass
        except apsw.Error as exc:
            problems.append(f"FTS5 integrity-check: {exc}")
        return problems

    @staticmethod
    def _invariant_problems(c: apsw.Connection) -> list[str]:
        """The store's own invariants: one FTS row per chunk; a chunk marked embedded exactly when its vector exists."""
        problems: list[str] = []
        try:
            chunks = scalar(c, "SELECT count(*) FROM chunks")
            fts = scalar(c, "SELECT count(*) FROM chunks_fts")
            if fts != chunks:
                problems.append(f"{fts} full-text rows for {chunks} chunks")
            embedded = scalar(c, "SELECT count(*) FROM chunks WHERE embedded > 0")
            vectors = scalar(c, "SELECT count(*) FROM chunk_vectors")
            if embedded != vectors:
                problems.append(f"{vectors} chunk vectors for {embedded} chunks marked embedded")
        except apsw.Error as exc:
            problems.append(f"consistency check failed: {exc}")
        return problems

    def check_readable(self) -> None:
        """Read the notes table once (the health check). Raises :class:`apsw.Error` when the index cannot be read."""
        self.conn.execute("SELECT count(*) FROM notes").fetchone()

    def change_marker(self) -> tuple[int, int, int]:
        """``(connection key, data_version, total_changes)`` of this thread's connection: while the key stays
        the same, the other two change whenever any connection (this one: ``total_changes``; any other, in
        this process or another: SQLite's ``PRAGMA data_version``) has committed a change since the last call.
        Cheap (no table read); for caches of query results."""
        c = self.conn
        return id(c), scalar(c, "PRAGMA data_version"), c.total_changes()

    def file_identity(self) -> tuple[int, int]:
        """(device, inode) of the database file now at :attr:`path` ((0, 0) when it is missing): a reader holding
        data read earlier can tell that the file was replaced (a rebuilt index reuses chunk ids)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return (0, 0)
        return (st.st_dev, st.st_ino)

"""Crash safety around the index file: a single-instance lock, and opening with a health check that
moves a corrupt database aside (kept, never deleted) so the index is rebuilt from the vault.

The index itself survives ``kill -9`` by construction (WAL, one short transaction per note); what
these guard against is two daemons writing one index, and a file damaged by a disk or a copy.
"""

from __future__ import annotations

import json
import logging
import os
import time
import zlib
from pathlib import Path

import apsw

from cairn.errors import IndexOfAnotherVaultError, SchemaTooNewError, StoreError, StoreUnavailableError
from cairn.private_files import private_dir

log = logging.getLogger(__name__)

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class AlreadyRunning(StoreError):
    """Another Cairn process (``cairn serve``, or a ``cairn index`` run) holds the lock of this data folder
    and vault: it is the one writer of that index. ``pid`` and ``role`` (``"serve"``/``"index"``) name it
    when known."""

    code = "already_running"
    http_status = 409

    def __init__(self, message: str, *, pid: int | None = None, role: str | None = None) -> None:
        super().__init__(message)
        self.pid = pid
        self.role = role


#: What a lock holder is doing, for the message another process gets (see :class:`InstanceLock`).
ROLES = ("serve", "index")


def instance_lock_path(db_path: Path | str) -> Path:
    """The lock file of the index at ``db_path``: ``<index file>.lock`` beside it. Every process that writes
    the index (``cairn serve``, ``cairn index``, a search that brings the index up to date) takes it."""
    db_path = Path(db_path)
    return db_path.with_name(db_path.name + ".lock")


class InstanceLock:
    """An exclusive lock on ``path`` (e.g. ``<index>.lock``) held while the daemon runs.

    POSIX: ``fcntl.flock`` on an open file (released by the kernel when the process dies, even by
    ``kill -9``, so a stale lock can never block a restart). Elsewhere: an ``O_EXCL`` lock file whose
    pid is checked for liveness. The file holds the owner's pid and ``role`` (``"<pid> <role>"``), for the
    message another process prints: a daemon (``serve``) is named with its URL from ``service_file``
    (``service.json``) when that names the same pid, and an ``index`` caller is told to ask the daemon to
    re-index (``POST /index/reindex`` or the tray) or to stop it.
    """

    def __init__(
        self, path: Path | str, *, what: str = "this index", role: str = "serve", service_file: Path | str | None = None
    ) -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        self.path = Path(path)
        self.what = what
        self.role = role
        self.service_file = Path(service_file) if service_file is not None else None
        self._fd: int | None = None

    def acquire(self) -> InstanceLock:
        """Take the lock or raise :class:`AlreadyRunning` naming the running pid."""
        private_dir(self.path.parent)
        if fcntl is not None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                pid, role = _read_owner(fd)
                os.close(fd)
                raise self._busy(pid, role) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {self.role}\n".encode(), 0)
            self._fd = fd
            return self
        while True:  # pragma: no cover - non-POSIX fallback
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                try:
                    pid, role = _parse_owner(self.path.read_text())
                except OSError:
                    pid, role = None, None
                if pid and _alive(pid):
                    raise self._busy(pid, role) from None
                self.path.unlink(missing_ok=True)  # stale: its owner is gone
                continue
            os.write(fd, f"{os.getpid()} {self.role}\n".encode())
            self._fd = fd
            return self

    def _busy(self, pid: int | None, role: str | None) -> AlreadyRunning:
        """The error for a lock held by ``pid`` doing ``role`` (None: a lock from before roles were written,
        i.e. a daemon). Says who holds it and what to do instead, for the role of the caller."""
        role = role or "serve"
        who = f"pid {pid}" if pid else "another process"
        lock = f"(lock {str(self.path)!r})"
        if role == "index":
            return AlreadyRunning(
                f"A `cairn index` run ({who}) is indexing {self.what} {lock}. Only one process writes an index: "
                f"wait for it to finish, then run `cairn {self.role}` again.",
                pid=pid,
                role=role,
            )
        url = self._daemon_url(pid)
        daemon = f"Another Cairn daemon ({who}{', ' + url if url else ''}) is already serving {self.what} {lock}."
        if self.role == "index":
            return AlreadyRunning(
                f"{daemon} It keeps that index up to date itself, and only one process writes an index. Ask it to "
                "re-index instead (`POST /index/reindex`, or 'Reindex now' in the tray menu), or stop it first "
                f"(Ctrl-C where it runs{', or `kill ' + str(pid) + '`' if pid else ''}) and run `cairn index` again.",
                pid=pid,
                role=role,
            )
        return AlreadyRunning(f"{daemon} Stop it first, or use another --data-dir.", pid=pid, role=role)

    def _daemon_url(self, pid: int | None) -> str | None:
        """The daemon's URL from ``service.json`` when that file names the lock holder's pid."""
        if self.service_file is None or not pid:
            return None
        try:
            info = json.loads(self.service_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if isinstance(info, dict) and info.get("pid") == pid and isinstance(info.get("url"), str):
            return info["url"]
        return None

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        if fcntl is None:  # pragma: no cover
            os.close(fd)
            self.path.unlink(missing_ok=True)
            return
        os.ftruncate(fd, 0)
        os.close(fd)  # closing releases the flock; the file stays (unlinking it would race a new owner)

    def __enter__(self) -> InstanceLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_owner(fd: int) -> tuple[int | None, str | None]:
    try:
        return _parse_owner(os.pread(fd, 64, 0).decode("utf-8", "replace"))
    except OSError:
        return None, None


def _parse_owner(text: str) -> tuple[int | None, str | None]:
    """``"<pid> <role>"`` (or ``"<pid>"`` from an older Cairn) → (pid, role); (None, None) when unreadable."""
    parts = text.split()
    try:
        pid = int(parts[0]) if parts else 0
    except ValueError:
        return None, None
    role = parts[1] if len(parts) > 1 and parts[1] in ROLES else None
    return (pid or None), role


def _alive(pid: int) -> bool:  # pragma: no cover - non-POSIX fallback
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def quarantine(db_path: Path | str, reason: str, *, label: str = "corrupt", what: str = "was damaged") -> dict:
    """Move a damaged database (and its ``-wal`` / ``-shm``) aside with a timestamp suffix (``.<label>-<time>``);
    nothing is deleted. ``what`` says what was wrong with it in the log line. Returns ``{"movedTo", "reason",
    "at"}`` (``at``: unix seconds)."""
    db_path = Path(db_path)
    at = time.time()
    suffix = f".{label}-" + time.strftime("%Y%m%d-%H%M%S", time.localtime(at))
    target = db_path.with_name(db_path.name + suffix)
    n = 1
    while target.exists():
        target = db_path.with_name(f"{db_path.name}{suffix}-{n}")
        n += 1
    for extra in ("-wal", "-shm", ""):  # the main file last: a new database never meets an old WAL
        src = db_path.with_name(db_path.name + extra)
        if src.exists():
            os.replace(src, target.with_name(target.name + extra))
    log.error(
        "the index database %s %s (%s); moved it to %s and rebuilding the index from the vault",
        db_path,
        what,
        reason,
        target,
    )
    return {"movedTo": str(target), "reason": reason, "at": at}


def _drop_wal_without_database(db_path: Path) -> None:
    """Delete a ``-wal`` / ``-shm`` left beside no database (the index file was deleted while a process had it
    open, and that process was killed): SQLite would replay that WAL into the new, empty file."""
    if db_path.exists():
        return
    for extra in ("-wal", "-shm"):
        leftover = db_path.with_name(db_path.name + extra)
        if leftover.exists():
            leftover.unlink()
            log.warning("deleted %s: its index file is gone (a new index is built)", leftover)


#: Beside the index: what a clean close left (the file's size, inode and CRC-32), so that the next start can tell
#: the file is byte for byte the one closed and skip the checks (seconds on a large index).
CLEAN_SUFFIX = ".closed"
_CRC_BLOCK = 8 << 20


def _crc32(path: Path) -> int:
    crc = 0
    block = bytearray(_CRC_BLOCK)
    view = memoryview(block)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(block):
            crc = zlib.crc32(view[:n], crc)
    return crc


def _fingerprint(db_path: Path) -> dict[str, int] | None:
    """(size, inode, CRC-32) of the database file when it stands alone (no ``-wal``: every commit is in it), else
    None."""
    if db_path.with_name(db_path.name + "-wal").exists():
        return None
    st = os.stat(db_path)
    return {"size": st.st_size, "ino": st.st_ino, "crc32": _crc32(db_path)}


def mark_closed_cleanly(db_path: Path | str) -> None:
    """Record, beside the index at ``db_path`` (closed by this process: every connection, no other writer), that it
    was closed cleanly as it is now (:data:`CLEAN_SUFFIX`, 0600). Nothing when its ``-wal`` remains (a reader of
    another process still has it open) or on an error (the next start then checks the file)."""
    db_path = Path(db_path)
    marker = db_path.with_name(db_path.name + CLEAN_SUFFIX)
    try:
        found = _fingerprint(db_path)
        if found is None:
            return
        tmp = marker.with_name(marker.name + ".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(found, fh)
        os.replace(tmp, marker)
    except OSError as exc:
        log.debug("no clean-close mark beside %s: %s", db_path, exc)


def _closed_cleanly(db_path: Path) -> bool:
    """Whether the index at ``db_path`` is byte for byte what a clean close left (:func:`mark_closed_cleanly`). The
    mark is removed either way: a run that ends without a clean close leaves none, so the next start checks."""
    marker = db_path.with_name(db_path.name + CLEAN_SUFFIX)
    try:
        recorded = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    finally:
        try:
            marker.unlink(missing_ok=True)
        except OSError as exc:  # held by another program (Windows): the file is checked at the next start too
            log.warning("cannot delete %s: %s", marker, exc)
    try:
        st = os.stat(db_path)
        if not isinstance(recorded, dict) or (recorded.get("size"), recorded.get("ino")) != (st.st_size, st.st_ino):
            return False
        return recorded == _fingerprint(db_path)
    except OSError:
        return False


def open_verified(db_path: Path | str, *, vault: Path | str | None = None):
    """Open the index at ``db_path`` (for ``vault``: see :class:`~cairn.store.Store`) after checking it
    (quick_check, FTS5 integrity, invariants; the invariants alone when it is byte for byte what a clean close left:
    :func:`mark_closed_cleanly`). A file that cannot be opened or fails a check is quarantined and a fresh, empty
    index is made; so is an index built for another vault (moved to ``.other-vault-<time>``).
    Returns ``(store, recovered)`` with ``recovered`` None or as :func:`quarantine` returns.
    A database from a newer Cairn is refused (:class:`~cairn.errors.SchemaTooNewError`), never moved."""
    from cairn.store import Store

    db_path = Path(db_path)
    _drop_wal_without_database(db_path)
    unchanged = _closed_cleanly(db_path)
    try:
        store = Store(db_path)  # the vault is checked (and recorded) once the file is known to be sound
    except (SchemaTooNewError, StoreUnavailableError):
        raise  # a newer Cairn's file, or one this process cannot open now: kept
    except (StoreError, apsw.Error) as exc:
        if not db_path.exists():
            raise
        recovered = quarantine(db_path, f"cannot open: {getattr(exc, 'message', None) or exc}")
        return Store(db_path, vault=vault), recovered
    try:
        problems = store.integrity_problems(pages=not unchanged)
    except apsw.Error as exc:
        problems = [f"check failed: {exc}"]
    if not problems:
        try:
            if vault is not None:
                store.check_vault(vault)
            return store, None
        except IndexOfAnotherVaultError as exc:
            store.close()
            recovered = quarantine(db_path, exc.message, label="other-vault", what="belongs to another vault")
            return Store(db_path, vault=vault), recovered
    store.close()
    recovered = quarantine(db_path, "; ".join(problems))
    return Store(db_path, vault=vault), recovered

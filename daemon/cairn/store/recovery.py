"""Crash safety around the index file: a single-instance lock, and opening with a health check that
moves a corrupt database aside (kept, never deleted) so the index is rebuilt from the vault.

The index itself survives ``kill -9`` by construction (WAL, one short transaction per note); what
these guard against is two daemons writing one index, and a file damaged by a disk or a copy.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import apsw

from cairn.errors import SchemaTooNew, StoreError

log = logging.getLogger(__name__)

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class AlreadyRunning(StoreError):
    """Another Cairn daemon holds the lock of this data folder and vault."""

    code = "already_running"
    http_status = 409


class InstanceLock:
    """An exclusive lock on ``path`` (e.g. ``<index>.lock``) held while the daemon runs.

    POSIX: ``fcntl.flock`` on an open file (released by the kernel when the process dies, even by
    ``kill -9``, so a stale lock can never block a restart). Elsewhere: an ``O_EXCL`` lock file whose
    pid is checked for liveness. The file holds the owner's pid, for the message a second instance prints.
    """

    def __init__(self, path: Path | str, *, what: str = "this index") -> None:
        self.path = Path(path)
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> "InstanceLock":
        """Take the lock or raise :class:`AlreadyRunning` naming the running pid."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fcntl is not None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                pid = _read_pid(fd)
                os.close(fd)
                raise self._busy(pid) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            self._fd = fd
            return self
        while True:  # pragma: no cover - non-POSIX fallback
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                try:
                    pid = int(self.path.read_text().strip() or 0)
                except (OSError, ValueError):
                    pid = 0
                if pid and _alive(pid):
                    raise self._busy(pid) from None
                self.path.unlink(missing_ok=True)  # stale: its owner is gone
                continue
            os.write(fd, f"{os.getpid()}\n".encode())
            self._fd = fd
            return self

    def _busy(self, pid: int | None) -> AlreadyRunning:
        who = f"pid {pid}" if pid else "another process"
        return AlreadyRunning(f"Another Cairn daemon ({who}) is already serving {self.what} (lock {str(self.path)!r}). "
                              "Stop it first, or use another --data-dir.")

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

    def __enter__(self) -> "InstanceLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or 0) or None
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:  # pragma: no cover - non-POSIX fallback
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def quarantine(db_path: Path | str, reason: str) -> dict:
    """Move a damaged database (and its ``-wal`` / ``-shm``) aside with a timestamp suffix; nothing is
    deleted. Returns ``{"movedTo", "reason", "at"}`` (``at``: unix seconds)."""
    db_path = Path(db_path)
    at = time.time()
    suffix = ".corrupt-" + time.strftime("%Y%m%d-%H%M%S", time.localtime(at))
    target = db_path.with_name(db_path.name + suffix)
    n = 1
    while target.exists():
        target = db_path.with_name(f"{db_path.name}{suffix}-{n}")
        n += 1
    for extra in ("-wal", "-shm", ""):  # the main file last: a new database never meets an old WAL
        src = db_path.with_name(db_path.name + extra)
        if src.exists():
            os.replace(src, target.with_name(target.name + extra))
    log.error("the index database %s was damaged (%s); moved it to %s and rebuilding the index from the vault",
              db_path, reason, target)
    return {"movedTo": str(target), "reason": reason, "at": at}


def open_verified(db_path: Path | str):
    """Open the index at ``db_path`` after checking it (quick_check, FTS5 integrity, invariants).
    A file that cannot be opened or fails a check is quarantined and a fresh, empty index is made.
    Returns ``(store, recovered)`` with ``recovered`` None or as :func:`quarantine` returns.
    A database from a newer Cairn is refused (:class:`~cairn.errors.SchemaTooNew`), never moved."""
    from cairn.store import Store

    db_path = Path(db_path)
    try:
        store = Store(db_path)
    except SchemaTooNew:
        raise
    except (StoreError, apsw.Error) as exc:
        if not db_path.exists():
            raise
        recovered = quarantine(db_path, f"cannot open: {getattr(exc, 'message', None) or exc}")
        return Store(db_path), recovered
    try:
        problems = store.integrity_problems()
    except apsw.Error as exc:
        problems = [f"check failed: {exc}"]
    if not problems:
        return store, None
    store.close()
    recovered = quarantine(db_path, "; ".join(problems))
    return Store(db_path), recovered

"""The MCP audit log (layer 1 resource): one JSON line per tool call, in the data folder, rotated.

A line::

    {"time": "2026-11-30T14:03:12.345Z", "client": "claude-desktop", "transport": "stdio",
     "tool": "search_notes", "argsDigest": "sha256:<64 hex>", "paths": ["Recipes/Bread.md"],
     "withheld": 2, "decision": "allowed"}

Never note text and never argument text: arguments are recorded only as the SHA-256 of their canonical
JSON (sorted keys, no spaces, UTF-8), so the owner can tell identical calls apart without the log
holding a query. ``paths`` are the vault-relative ``filePath`` values the call returned.

Several processes may write one log (the daemon's HTTP endpoint and each ``cairn mcp`` stdio server):
each line is written with a single ``O_APPEND`` write, and writes and rotation are serialised by an
advisory lock (``fcntl.flock`` on ``<log>.lock``, where available). Rotation: when a line would take
the file past ``max_bytes``, ``log.jsonl`` → ``log.jsonl.1`` → … → ``log.jsonl.<backups>`` (the oldest
is dropped). Files are created 0600.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

try:  # POSIX; on Windows the in-process lock alone serialises writes
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms tested here
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

__all__ = ["AuditLog", "read_audit", "audit_path", "args_digest", "AUDIT_FILE_NAME", "DECISIONS", "TRANSPORTS"]

AUDIT_FILE_NAME = "mcp-audit.jsonl"
DECISIONS = ("allowed", "denied", "error")
TRANSPORTS = ("stdio", "http")


def audit_path(data_dir: Path) -> Path:
    """Where the audit log lives: ``data_dir / "mcp-audit.jsonl"``."""
    return Path(data_dir) / AUDIT_FILE_NAME


def args_digest(arguments: Mapping[str, Any]) -> str:
    """``"sha256:<hex>"`` of the canonical JSON of ``arguments`` (sorted keys, compact, UTF-8;
    values JSON cannot hold are written with ``str``)."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AuditLog:
    """Appends audit lines to ``path``. ``enabled=False`` makes :meth:`record` a no-op. ``max_bytes``:
    size (bytes) past which the file is rotated; ``backups``: rotated files kept (``path.1`` newest).
    Thread-safe and safe across processes (see the module docstring)."""

    def __init__(self, path: Path, *, enabled: bool = True, max_bytes: int = 5_000_000, backups: int = 3) -> None:
        if max_bytes < 1024:
            raise ValueError(f"max_bytes must be at least 1024, got {max_bytes}")
        if backups < 0:
            raise ValueError(f"backups must be 0 or more, got {backups}")
        self.path = Path(path)
        self.enabled = enabled
        self.max_bytes = max_bytes
        self.backups = backups
        self._lock = threading.Lock()

    def record(
        self,
        *,
        client: str,
        transport: str,
        tool: str,
        arguments: Mapping[str, Any],
        paths: Sequence[str],
        withheld: int,
        decision: str,
    ) -> None:
        """Append one line for a tool call. ``transport``: ``"stdio"`` | ``"http"``; ``decision``:
        ``"allowed"`` | ``"denied"`` | ``"error"``; ``withheld``: withheld notes the call would otherwise
        have touched (a :class:`~cairn.policy.WithheldTally` count). Raises :class:`ValueError` for another
        transport/decision or a negative count, and :class:`OSError` when the file cannot be written."""
        if not self.enabled:
            return
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
        if decision not in DECISIONS:
            raise ValueError(f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}")
        if not isinstance(withheld, int) or isinstance(withheld, bool) or withheld < 0:
            raise ValueError(f"withheld must be a count (an integer ≥ 0), got {withheld!r}")
        entry = {
            "time": _now(),
            "client": str(client),
            "transport": transport,
            "tool": str(tool),
            "argsDigest": args_digest(arguments),
            "paths": list(dict.fromkeys(str(p) for p in paths)),
            "withheld": withheld,
            "decision": decision,
        }
        line = (json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        with self._lock, self._file_lock():
            self._rotate_if_needed(len(line))
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            yield
            return
        fd = os.open(str(self.path) + ".lock", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _rotate_if_needed(self, incoming: int) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size == 0 or size + incoming <= self.max_bytes:
            return
        if self.backups == 0:
            os.truncate(self.path, 0)
            return
        for i in range(self.backups - 1, 0, -1):
            older = Path(f"{self.path}.{i}")
            if older.exists():
                os.replace(older, f"{self.path}.{i + 1}")
        os.replace(self.path, f"{self.path}.1")
        log.info("MCP audit log rotated (%d bytes): %s", size, self.path)


def _files_oldest_first(path: Path) -> list[Path]:
    path = Path(path)
    rotated = []
    for candidate in path.parent.glob(path.name + ".*"):
        suffix = candidate.name[len(path.name) + 1 :]
        if suffix.isdigit():
            rotated.append((int(suffix), candidate))
    return [p for _, p in sorted(rotated, reverse=True)] + ([path] if path.exists() else [])


def read_audit(path: Path, client: str | None = None) -> Iterator[dict]:
    """The audit lines of ``path`` and its rotated files as dicts, oldest first; only ``client``'s when
    given (exact name). A line that is not a JSON object (e.g. torn by a crash mid-write) is skipped
    with a warning. A missing log yields nothing."""
    for file in _files_oldest_first(path):
        try:
            fh = open(file, "rb")
        except FileNotFoundError:  # rotated away meanwhile
            continue
        with fh:
            for number, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                try:
                    entry = json.loads(raw)
                except (UnicodeDecodeError, json.JSONDecodeError):
                    log.warning("skipping unreadable audit line %s:%d", file, number)
                    continue
                if not isinstance(entry, dict):
                    log.warning("skipping unreadable audit line %s:%d", file, number)
                    continue
                if client is None or entry.get("client") == client:
                    yield entry

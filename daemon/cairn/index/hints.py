"""The changed paths waiting to be indexed (:class:`Hints`): what the file watcher found, debounced, and what the save
lane looks at. File events are hints, never the truth (docs/design.md, "Flows" → Watch): each is a vault-relative
path to look at again, and a reconcile (the disk against the store) covers them all.

The watcher (:class:`cairn.index.watch.VaultWatcher`) follows one :class:`Hints` and takes from it what is due: a
reconcile, or a batch of paths once they have been quiet ``debounce_s`` (at most ``max_wait_s`` after the first).
The index side adds to the same object (a re-index request for a path, a reconcile, a place to look at again after
it could not be read) and asks it whether changes wait (a save's vectors give way to them). Thread-safe; no thread
of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

#: A place that could not be read is looked at again after 1, 2, 4, 8, 16 s (:meth:`Hints.retry_later`); then one
#: full reconcile, then only the periodic one.
DEFAULT_RETRY_BASE_S = 1.0
DEFAULT_MAX_RETRIES = 5


class Follower(Protocol):
    """What follows the hints (the file watcher): woken when there is something to take, and saying whether it
    watches and how."""

    @property
    def watching(self) -> bool: ...
    def wake(self) -> None: ...
    def mode_stats(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Due:
    """What :meth:`Hints.due` found: a ``reconcile`` to run, or a ``batch`` of paths to apply, or neither; then
    ``quiet_at`` is when the pending paths will be due (monotonic s; None: none pending) and ``retry_at`` when the
    next place that could not be read is to be looked at again (None: none), or ``paused``."""

    paused: bool = False
    reconcile: bool = False
    batch: set[str] | None = None
    quiet_at: float | None = None
    retry_at: float | None = None


class Hints:
    """The vault-relative paths to look at again, a reconcile wanted, the places that could not be read waiting to
    be looked at again (``retry_base_s`` × 2^(n-1) s after the n-th failed look, up to ``max_retries``), and whether
    following changes is paused (the tray, ``POST /index/pause``)."""

    def __init__(self, *, retry_base_s: float = DEFAULT_RETRY_BASE_S, max_retries: int = DEFAULT_MAX_RETRIES) -> None:
        self.retry_base_s = retry_base_s
        self.max_retries = max_retries
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._first_hint_at = 0.0
        self._last_hint_at = 0.0
        self._reconcile_wanted = False
        self._retries: dict[str, int] = {}  # place → looks so far that found it unreadable
        self._retry_at: dict[str, float] = {}  # place → when to look again (monotonic s)
        self._paused = False
        self._follower: Follower | None = None

    # ------------------------------------------------------------------ the watcher's side
    def follow(self, follower: Follower | None) -> None:
        """``follower`` (the watcher, when it starts; None when it stops) takes what is due from now on."""
        with self._lock:
            self._follower = follower
        self._wake()

    @property
    def followed(self) -> bool:
        """Whether a watcher takes these hints now (else nothing applies them: a re-index runs by itself)."""
        return self._follower is not None

    def events(self, paths: Iterable[str]) -> None:
        """Paths that file events named: hints, and a place among them that could not be read starts its count of
        failed looks over."""
        paths = list(paths)
        if self._retries:
            with self._lock:
                for path in paths:
                    self._retries.pop(path, None)
        self.add(paths)

    def due(self, now: float, *, debounce_s: float, max_wait_s: float, periodic: bool) -> Due:
        """Take what is due by ``now`` (monotonic s): a reconcile (wanted, or ``periodic``: the watcher's interval is
        up), which covers every pending path; else the pending paths once quiet for ``debounce_s`` (or ``max_wait_s``
        after the first). Places due to be looked at again join the pending paths (the vault folder: a reconcile).
        Nothing while paused."""
        with self._lock:
            paused = self._paused
            retry_at = None if paused else self._due_retries(now, debounce_s)
            pending = bool(self._pending)
            quiet_at = min(self._last_hint_at + debounce_s, self._first_hint_at + max_wait_s)
            if paused:
                return Due(paused=True)
            if self._reconcile_wanted or periodic:
                self._reconcile_wanted = False
                self._pending.clear()  # a reconcile covers every hint
                return Due(reconcile=True)
            if pending and now >= quiet_at:
                batch, self._pending = self._pending, set()
                return Due(batch=batch)
            return Due(quiet_at=quiet_at if pending else None, retry_at=retry_at)

    def _due_retries(self, now: float, debounce_s: float) -> float | None:
        """Move the retries due by ``now`` into the pending hints (``""`` into a reconcile); returns when the next
        one is due, or None. Call with :attr:`_lock` held."""
        due = [p for p, at in self._retry_at.items() if at <= now]
        for path in due:
            del self._retry_at[path]
            if not path:
                self._reconcile_wanted = True
                continue
            if not self._pending:
                self._first_hint_at = self._last_hint_at = now - debounce_s
            self._pending.add(path)
        return min(self._retry_at.values(), default=None)

    def idle(self) -> bool:
        """No hint pending, no reconcile wanted, no place waiting to be looked at again."""
        with self._lock:
            return not self._pending and not self._reconcile_wanted and not self._retry_at

    # ------------------------------------------------------------------ the index side's (any thread)
    def add(self, paths: Iterable[str]) -> None:
        """Queue vault-relative paths as hints (what the file events do; also ``POST /index/reindex``); dropped
        while paused."""
        now = time.monotonic()
        with self._lock:
            if self._paused:
                return
            before = len(self._pending)
            self._pending.update(paths)
            if len(self._pending) != before:
                if not before:
                    self._first_hint_at = now
                self._last_hint_at = now
        self._wake()

    def request_reconcile(self) -> None:
        """Ask for a full reconcile (run once not paused)."""
        with self._lock:
            self._reconcile_wanted = True
        self._wake()

    def retry_later(self, paths: Iterable[str], *, settled: Iterable[str] = ()) -> None:
        """Look again at vault-relative ``paths`` that could not be read (``""``: the vault folder), while a watcher
        follows: hinted after ``retry_base_s`` × 2^(n-1) s for the n-th failed look, up to ``max_retries``; the next
        failure asks for one full reconcile, later ones wait for the periodic reconcile. ``settled``: places read
        fine again (their count starts over). A file event for a place also starts its count over."""
        if self._follower is None:
            return  # no watcher: nothing would look again
        now = time.monotonic()
        with self._lock:
            for path in settled:
                self._retries.pop(path, None)
                self._retry_at.pop(path, None)
            for path in paths:
                n = self._retries.get(path, 0) + 1
                self._retries[path] = n
                if n <= self.max_retries:
                    self._retry_at[path] = now + self.retry_base_s * 2 ** (n - 1)
                elif n == self.max_retries + 1:
                    log.info("%r still cannot be read; reconciling the whole vault", path or ".")
                    self._reconcile_wanted = True
        self._wake()

    def pause(self) -> None:
        """Stop applying changes (hints are dropped); :meth:`resume` reconciles to catch up."""
        with self._lock:
            self._paused = True
            self._pending.clear()
        log.info("watching paused")

    def resume(self) -> None:
        with self._lock:
            was = self._paused
            self._paused = False
            if was:
                self._reconcile_wanted = True
        if was:
            log.info("watching resumed; reconciling changes made while paused")
        self._wake()

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def watching(self) -> bool:
        """A watcher follows the vault's changes now (and is not paused)."""
        follower = self._follower
        return follower is not None and follower.watching and not self._paused

    def pending_count(self) -> int:
        with self._lock:
            return len(self._pending)

    def stats(self) -> dict[str, Any]:
        """``{watching, paused, pendingPaths, retrying, watcher}``: ``watcher`` is how the vault is watched and what it
        costs (:meth:`VaultWatcher.mode_stats <cairn.index.watch.VaultWatcher.mode_stats>`), None without one."""
        follower = self._follower
        return {
            "watching": self.watching,
            "paused": self._paused,
            "pendingPaths": self.pending_count(),
            "retrying": len(self._retry_at),
            "watcher": follower.mode_stats() if follower is not None else None,
        }

    def _wake(self) -> None:
        follower = self._follower
        if follower is not None:
            follower.wake()

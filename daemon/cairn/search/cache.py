"""The store's epoch (has the index changed?) and the one LRU cache of the query side, whose entries hold for one
epoch.

An *epoch* is a number that grows whenever the store may have changed: a cached value is served only for the
epoch it was computed in, so a commit by any connection or process drops every cached result at once.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from cairn.memory import deep_nbytes
from cairn.store import Store

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class StoreEpoch:
    """The store's epoch as seen by this process (thread-safe).

    :meth:`now` reads the calling thread's connection's change marker (:meth:`Store.change_marker`) and advances the
    epoch when that connection reports a commit, or when it is a connection not seen before (it cannot tell what
    happened before it was opened). :attr:`value` is the last epoch known, without reading the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.value = 0
        #: time.monotonic() of the last advance (-inf before the first).
        self.changed_at = -math.inf
        self._seen: dict[int, tuple[int, int]] = {}
        self._lock = threading.Lock()

    def now(self) -> int:
        conn, version, changes = self.store.change_marker()
        with self._lock:
            if self._seen.get(conn) != (version, changes):
                self._seen[conn] = (version, changes)
                self.value += 1
                self.changed_at = time.monotonic()
            return self.value


class EpochLRU(Generic[K, V]):
    """A thread-safe LRU of ``key → value``, each entry valid for the epoch it was put with.

    ``max_size`` bounds the sum of ``size(value)`` over the entries (1 each by default: a count); the least
    recently used entries are dropped beyond it, but never the last one. ``exclusive``: entries of one epoch at a
    time (putting one of another epoch drops the rest), for values that hold large objects of their epoch."""

    def __init__(self, max_size: int, *, size: Callable[[V], int] | None = None, exclusive: bool = False) -> None:
        self.max_size = max_size
        self.exclusive = exclusive
        self._size = size
        self._entries: OrderedDict[K, tuple[Hashable, V]] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _measure(self, value: V) -> int:
        return self._size(value) if self._size is not None else 1

    def get(self, key: K, epoch: Hashable = 0) -> V | None:
        """The value put for ``key`` in ``epoch`` (now the most recently used), else None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != epoch:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: K, value: V, epoch: Hashable = 0) -> None:
        with self._lock:
            if self.exclusive and self._entries and next(reversed(self._entries.values()))[0] != epoch:
                self._entries.clear()
                self._total = 0
            old = self._entries.pop(key, None)
            if old is not None:
                self._total -= self._measure(old[1])
            self._entries[key] = (epoch, value)
            self._total += self._measure(value)
            while self._total > self.max_size and len(self._entries) > 1:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._total -= self._measure(dropped)

    def nbytes(self) -> int:
        """Approximate bytes held by the entries' keys and values (:func:`cairn.memory.deep_nbytes`)."""
        with self._lock:
            entries = list(self._entries.items())
        return sum(deep_nbytes(k) + deep_nbytes(v) for k, (_, v) in entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._total = 0


class NotesSnapshot(Generic[V]):
    """A value read from the notes' rows (``read()``: the note map, the names index, FTS5's vocabulary), read again
    when they changed (:meth:`Store.notes_generations`): at once after a change while no whole-vault run writes;
    while one writes batch after batch (a first index), at most every ``max(MIN_LAG_S, LAG_FACTOR × the last read's
    seconds)``, so a search then does not pay a whole read per batch committed. What the value lacks meanwhile is
    still found (FTS5 and the vectors are read live); it only ranks without the note-level evidence for a moment.
    Thread-safe; two threads may both read, the later one kept."""

    MIN_LAG_S = 5.0
    LAG_FACTOR = 10.0

    def __init__(self, store: Store, read: Callable[[], V]) -> None:
        self.store = store
        self.read = read
        self._held: tuple[tuple[int, int], float, float, V] | None = None  # generations, read at, lag (s), value
        self._lock = threading.Lock()

    def get(self) -> V:
        generations = self.store.notes_generations()
        held = self._held
        if held is not None:
            (notes, settled), at, lag, value = held
            if (notes, settled) == generations or (settled == generations[1] and time.monotonic() - at < lag):
                return value
        started = time.monotonic()
        value = self.read()  # at or after ``generations``: a commit meanwhile is read at a later call
        lag = max(self.MIN_LAG_S, self.LAG_FACTOR * (time.monotonic() - started))
        with self._lock:
            self._held = (generations, started, lag, value)
        return value

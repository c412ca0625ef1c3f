"""The store's epoch (has the index changed?) and the one LRU cache of the query side, whose entries hold for one
epoch.

An *epoch* is a number that grows whenever the store may have changed: a cached value is served only for the
epoch it was computed in, so a commit by any connection or process drops every cached result at once.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from cairn.memory import deep_nbytes
from cairn.store import Store

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class StoreEpoch:
    """The store's epoch as seen by this process (thread-safe).

    :meth:`now` reads the calling thread's connection's change marker (:meth:`Store.change_marker`) and advances the
    epoch when that connection reports a commit, or when it is a connection not seen before (it cannot tell what
    happened before it was opened). :attr:`value` is the last epoch known, without reading the store. The markers of
    at most :attr:`MAX_CONNECTIONS` connections are kept (threads come and go with their connections); one
    forgotten and seen again only advances the epoch once more."""

    MAX_CONNECTIONS = 256

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
                if conn not in self._seen and len(self._seen) >= self.MAX_CONNECTIONS:
                    self._seen.pop(next(iter(self._seen)))  # the one seen first
                self._seen[conn] = (version, changes)
                self.value += 1
                self.changed_at = time.monotonic()
            return self.value


#: Bytes of one cache entry beyond its key and value: its slot and node in the ordered dict, the tuple holding it
#: and its size (CPython 3.11: ~190 measured with tracemalloc).
ENTRY_BYTES = 200


class EpochLRU(Generic[K, V]):
    """A thread-safe LRU of ``key → value``, each entry valid for the epoch it was put with.

    At most ``max_items`` entries and, given ``max_bytes``, at most that many bytes: an entry's bytes are measured
    once, when it is put (``nbytes(value)``, default :func:`cairn.memory.deep_nbytes`, plus its key's and
    :data:`ENTRY_BYTES`), and the same figure is taken off when it leaves, so the sum held (:attr:`held_bytes`)
    is exact. A value must therefore not grow once put (a :class:`~cairn.search.dense.DenseQuery` does not). The
    least recently used entries are dropped beyond either bound, but never the last one put. ``exclusive``:
    entries of one epoch at a time (putting one of another epoch drops the rest), for values that hold large
    objects of their epoch."""

    def __init__(
        self,
        max_items: int,
        *,
        max_bytes: int | None = None,
        nbytes: Callable[[V], int] | None = None,
        exclusive: bool = False,
    ) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.exclusive = exclusive
        self._nbytes = nbytes
        self._entries: OrderedDict[K, tuple[Hashable, V, int]] = OrderedDict()  # key → (epoch, value, bytes)
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def held_bytes(self) -> int:
        """The bytes of the entries held, as measured when each was put (0 without ``max_bytes``)."""
        with self._lock:
            return self._bytes

    def _measure(self, key: K, value: V) -> int:
        if self.max_bytes is None:
            return 0
        own = self._nbytes(value) if self._nbytes is not None else deep_nbytes(value)
        return own + deep_nbytes(key) + ENTRY_BYTES

    def get(self, key: K, epoch: Hashable = 0) -> V | None:
        """The value put for ``key`` in ``epoch`` (now the most recently used), else None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != epoch:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: K, value: V, epoch: Hashable = 0) -> None:
        size = self._measure(key, value)  # outside the lock: a deep measure walks the value
        with self._lock:
            if self.exclusive and self._entries and next(reversed(self._entries.values()))[0] != epoch:
                self._entries.clear()
                self._bytes = 0
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[2]
            self._entries[key] = (epoch, value, size)
            self._bytes += size
            while len(self._entries) > 1 and (
                len(self._entries) > self.max_items or (self.max_bytes is not None and self._bytes > self.max_bytes)
            ):
                _, (_, _, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def nbytes(self) -> int:
        """Bytes held by the entries, measured now (keys and values by :func:`cairn.memory.deep_nbytes`, values by
        ``nbytes`` when given, and :data:`ENTRY_BYTES` each), for the memory breakdown; equal to :attr:`held_bytes`
        while no value grew after it was put."""
        with self._lock:
            entries = [(k, v) for k, (_, v, _) in self._entries.items()]
        measure = self._nbytes or deep_nbytes
        return sum(deep_nbytes(k) + measure(v) + ENTRY_BYTES for k, v in entries)

    def usage(self) -> dict[str, int | None]:
        """``{entries, maxEntries, bytes, maxBytes}``: what is held against the bounds. ``bytes`` is the sum
        accounted when the entries were put (:attr:`held_bytes`); without ``max_bytes`` (a bound by count alone) it
        is measured now (:meth:`nbytes`) and ``maxBytes`` is None."""
        held = self.held_bytes if self.max_bytes is not None else self.nbytes()
        return {"entries": len(self), "maxEntries": self.max_items, "bytes": held, "maxBytes": self.max_bytes}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


class NotesSnapshot(Generic[V]):
    """A value read from the notes' rows (``read()``: the note map, the names index, FTS5's vocabulary), read again
    when they changed (:meth:`Store.notes_generations`).

    - While a whole-vault run writes batch after batch (a first index), at most every ``max(MIN_LAG_S, LAG_FACTOR ×
      the last read's seconds)``, so a search then does not pay a whole read per batch committed.
    - After any other change (a save), at once when the last read took less than ``SLOW_READ_S``. A slower read (a
      vault of tens of thousands of notes) is made on a thread of its own, at most every ``LAG_FACTOR ×`` its
      seconds, and searches meanwhile use the value held: a save every few seconds (Obsidian saves as you type)
      does not put a whole read in front of the next search.

    What the value lacks meanwhile is still found (FTS5 and the vectors are read live, and so is what is withheld);
    it only ranks without the note-level evidence for a moment. Thread-safe; two threads may both read again, the
    later one kept, but the first read is made once (a warm-up at start-up and the first question share it)."""

    MIN_LAG_S = 5.0
    LAG_FACTOR = 10.0
    SLOW_READ_S = 0.1

    def __init__(self, store: Store, read: Callable[[], V]) -> None:
        self.store = store
        self.read = read
        self._held: tuple[tuple[int, int], float, float, V] | None = None  # generations, read at, read s, value
        self._lock = threading.Lock()
        self._reading = False  # a read on its own thread is under way
        self._first = threading.Lock()  # held by the first read: a second caller waits for it rather than reading too

    def get(self) -> V:
        generations = self.store.notes_generations()
        held = self._held
        if held is None:
            with self._first:
                if self._held is None:
                    return self._read_now(generations)
            return self.get()
        if held is not None:
            (notes, settled), at, took, value = held
            age = time.monotonic() - at
            if (notes, settled) == generations:
                return value
            if settled == generations[1] and age < max(self.MIN_LAG_S, self.LAG_FACTOR * took):
                return value
            if took >= self.SLOW_READ_S:
                if age >= self.LAG_FACTOR * took:
                    self._read_later()
                return value
        return self._read_now(generations)

    def _read_now(self, generations: tuple[int, int]) -> V:
        started = time.monotonic()
        value = self.read()  # at or after ``generations``: a commit meanwhile is read at a later call
        with self._lock:
            self._held = (generations, started, time.monotonic() - started, value)
        return value

    def _read_later(self) -> None:
        with self._lock:
            if self._reading:
                return
            self._reading = True

        def run() -> None:
            try:
                self._read_now(self.store.notes_generations())
            except Exception:  # the value held stays; the next search tries again
                log.warning("reading the notes' search data again failed; the last read is kept", exc_info=True)
            finally:
                self.store.close_thread_connection()
                with self._lock:
                    self._reading = False

        threading.Thread(target=run, name="cairn-notes-read", daemon=True).start()

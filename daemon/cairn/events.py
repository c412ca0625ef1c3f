"""Index progress events (layer 2): a small thread-safe broadcaster.

The index's runs report ``progress(phase, done, total)`` from worker threads; its lanes
(:mod:`cairn.index.lanes`) hand them :meth:`EventBus.progress_callback` and publish ``indexed`` / ``error`` when a
run ends, and the composition root hands the index's writer :meth:`EventBus.removed` (``removed`` for each note
deleted from the index). ``GET /events``
subscribes from the event loop and streams what arrives as SSE.

A slow subscriber never blocks the indexer: each subscriber has a bounded queue, and when it is
full the oldest event is dropped (progress events supersede each other anyway).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

#: An event as ``(name, data)``: what the bus publishes and a subscription yields, and what an SSE stream
#: writes as one frame.
NamedEvent = tuple[str, Any]


class Subscription:
    """One subscriber's queue. ``await get()`` → the next ``(name, data)``. Close with :meth:`close`."""

    def __init__(self, bus: EventBus, loop: asyncio.AbstractEventLoop, maxsize: int) -> None:
        self._bus = bus
        self._loop = loop
        self.queue: asyncio.Queue[NamedEvent] = asyncio.Queue(maxsize=maxsize)

    def _put(self, event: NamedEvent) -> None:  # runs on the subscriber's loop
        if self.queue.full():
            self.queue.get_nowait()
        self.queue.put_nowait(event)

    async def get(self) -> NamedEvent:
        return await self.queue.get()

    def close(self) -> None:
        self._bus._remove(self)


class EventBus:
    """Publish from any thread; subscribe on an event loop."""

    def __init__(self, maxsize: int = 256) -> None:
        self._maxsize = maxsize
        self._subs: set[Subscription] = set()
        self._lock = threading.Lock()

    def subscribe(self) -> Subscription:
        """A new subscription on the running loop (call from async code)."""
        sub = Subscription(self, asyncio.get_running_loop(), self._maxsize)
        with self._lock:
            self._subs.add(sub)
        return sub

    def _remove(self, sub: Subscription) -> None:
        with self._lock:
            self._subs.discard(sub)

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._subs)

    def publish(self, name: str, data: Any) -> None:
        """Send ``(name, data)`` to every subscriber (thread-safe, never blocks)."""
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            try:
                sub._loop.call_soon_threadsafe(sub._put, (name, data))
            except RuntimeError:  # that loop is closed
                self._remove(sub)

    def removed(self, file_path: str) -> None:
        """Publish ``removed`` ``{filePath}``: a note's rows were deleted because its file is gone (deleted, or
        renamed or moved away; the new path arrives as an added note in the ``indexed`` that ends the run). The
        index's writer calls this right after the delete commits, so a client can drop the path from what it shows."""
        self.publish("removed", {"filePath": file_path})

    def progress_callback(self, min_interval_s: float = 0.25) -> Callable[[str, int, int], None]:
        """An indexer ``progress(phase, done, total)`` that publishes ``progress`` events
        ``{phase, done, total}`` at most every ``min_interval_s`` per phase (and always the last one)."""
        last: dict[str, float] = {}

        def progress(phase: str, done: int, total: int) -> None:
            now = time.monotonic()
            if done < total and now - last.get(phase, 0.0) < min_interval_s:
                return
            last[phase] = now
            self.publish("progress", {"phase": phase, "done": done, "total": total})

        return progress

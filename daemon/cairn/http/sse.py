"""Server-sent events: frames, and the pump that writes an async generator's events to a response.

A frame is ``event: NAME\\ndata: <JSON on one line>\\n\\n`` (UTF-8). While the pump waits for the next
event it writes a ``: ping`` comment every heartbeat. Server shutdown ends a stream with a last event
(``on_closing``) then EOF; a generator that raises ends it with ``on_failure(exc)`` then EOF.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import cast

from aiohttp import web

from cairn.answers.events import split_pieces as split_pieces  # re-exported by cairn.http
from cairn.answers.events import sse_frame as sse_event
from cairn.events import NamedEvent
from cairn.http.state import HEARTBEAT, STATE

#: Items a stream's producer may hold that were not written yet (about one extractive answer's word
#: pieces, so one is written at once; the same bound as an ``/events`` subscription's own queue). Beyond
#: it the producer waits for the client, so a slow client holds at most this much more in memory.
PUMP_BACKLOG = 256
#: Ends a producer's items: its async generator ended.
_END = object()


def sse_response() -> web.StreamResponse:
    return web.StreamResponse(
        status=200,
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        },
    )


@dataclass(frozen=True)
class _Raised:
    """Ends a producer's items: its async generator raised ``exc``."""

    exc: BaseException


async def _produce(agen: AsyncIterator[NamedEvent], queue: asyncio.Queue[object]) -> None:
    """Put ``agen``'s items in ``queue``, then :data:`_END` or :class:`_Raised` (the pump's producer Task)."""
    try:
        async for item in agen:
            await queue.put(item)
    except BaseException as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the pump cancelled it (shutdown, the client left): nobody reads the queue any more
        end: object = _Raised(exc)
    else:
        end = _END
    await queue.put(end)


class _Pump:
    """One stream's producer Task, its queue and the bytes not yet written.

    The pump writes all items that are ready in one ``response.write`` and only then waits (a Task per
    wait, not per item): an extractive answer's word pieces come without waiting and cost one write,
    while a model's token, which comes after a wait, is written as soon as it arrives."""

    def __init__(
        self, request: web.Request, response: web.StreamResponse, agen: AsyncIterator[NamedEvent], backlog: int
    ) -> None:
        self.response = response
        self.heartbeat = request.app[HEARTBEAT]
        self.queue: asyncio.Queue[object] = asyncio.Queue(maxsize=backlog)
        self.producer = asyncio.ensure_future(_produce(agen, self.queue))
        self.closing = asyncio.ensure_future(request.app[STATE].closing.wait())
        self.unsent = bytearray()

    async def flush(self) -> None:
        if self.unsent:
            await self.response.write(bytes(self.unsent))
            self.unsent.clear()

    async def next_item(self) -> object:
        """The next item: at once when one is ready, else after writing what is unsent and waiting for one
        (``: ping`` every heartbeat meanwhile); :attr:`closing` on shutdown."""
        if not self.queue.empty():
            return self.queue.get_nowait()
        await self.flush()
        getter = asyncio.ensure_future(self.queue.get())
        try:
            while True:
                done, _ = await asyncio.wait(
                    {getter, self.closing}, timeout=self.heartbeat, return_when=asyncio.FIRST_COMPLETED
                )
                if getter in done:
                    return getter.result()
                if self.closing in done:
                    return self.closing
                await self.response.write(b": ping\n\n")
        finally:
            getter.cancel()  # no-op once it is done; a cancelled get() takes no item

    async def stop_producer(self) -> None:
        if not self.producer.done():
            self.producer.cancel()
            await asyncio.gather(self.producer, return_exceptions=True)

    async def run(
        self,
        on_failure: Callable[[BaseException], Awaitable[None]],
        on_closing: Callable[[], Awaitable[None]],
    ) -> None:
        while True:
            item = await self.next_item()
            if item is self.closing:
                await self.stop_producer()
                await on_closing()
                break
            if item is _END or isinstance(item, _Raised):
                await self.flush()
                if isinstance(item, _Raised):
                    if not isinstance(item.exc, Exception):
                        raise item.exc
                    await on_failure(item.exc)
                break
            name, data = cast(NamedEvent, item)
            self.unsent += sse_event(name, data)
        await self.response.write_eof()


async def pump(
    request: web.Request,
    response: web.StreamResponse,
    agen: AsyncIterator[NamedEvent],
    on_failure: Callable[[BaseException], Awaitable[None]],
    on_closing: Callable[[], Awaitable[None]],
    *,
    backlog: int = PUMP_BACKLOG,
) -> None:
    """Write ``agen``'s ``(event, data)`` items as SSE frames, a ``: ping`` comment every heartbeat while
    waiting, until it ends. Server shutdown → ``on_closing()`` then EOF. ``agen`` raising → what was
    ready is written, then ``on_failure(exc)``, then EOF. If the handler is cancelled (the client left),
    ``agen`` is cancelled, which cancels whatever it awaits (the LLM request). ``agen`` is closed in
    every case (when it has an ``aclose``)."""
    stream = _Pump(request, response, agen, backlog)
    try:
        await stream.run(on_failure, on_closing)
    finally:
        stream.closing.cancel()
        await stream.stop_producer()
        aclose = getattr(agen, "aclose", None)
        if aclose is not None:
            try:
                await aclose()
            except Exception:  # already finished or failed
                pass

"""The TCP connections of the daemon's two loopback servers (the plugin API on aiohttp, MCP over HTTP on
uvicorn): a cap on open connections below the descriptor limit, a deadline for each request's headers, and
one rate-limited log line when ``accept()`` fails.

Why: neither server times out a connection that never finishes its headers, and neither caps connections;
held open past the process's descriptor limit they make every ``accept()`` fail (asyncio then logs a
traceback per retry, many per second), so ``/health`` and every other route stop answering, and files the
indexer opens fail too.

How: each accepted connection's protocol is wrapped (:meth:`ConnectionGuard.protocol`); the server marks the
time a request is being handled (:meth:`ConnectionGuard.busy`, keyed by the peer address). A connection
that is not handling a request — it has not sent complete headers yet, or it is a keep-alive connection
between requests — is *idle*: it is closed after ``header_timeout_s``, and when a new connection would
exceed the cap the oldest idle one is closed to make room (none idle: the new one is closed). A request in
progress (an SSE stream included) is never cut for room.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from cairn.config import Config, setting_default

log = logging.getLogger("cairn.connections")

#: A peer address as both servers see it: ``(host, port)``.
Peer = tuple[str, int]

#: The soft descriptor limit the daemon raises itself to at start (never above the hard limit).
DESCRIPTOR_TARGET = 4096
#: The listen backlog of both servers, which is also how many connections asyncio accepts in one go (before
#: any is closed for room): part of the descriptor reserve.
ACCEPT_BACKLOG = 64
#: Seconds between two log lines about failing ``accept()`` calls or a full connection cap.
NOTICE_INTERVAL_S = 60.0
#: The ``accept()`` errors asyncio reports through the loop's exception handler (out of descriptors or memory).
_ACCEPT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


@dataclass(frozen=True)
class ListenerLimits:
    """Per-server connection limits (config keys ``http_header_timeout_s``, ``http_body_timeout_s``,
    ``http_max_connections``).

    ``header_timeout_s``: seconds a connection may go without a request being handled — to send a request's
    headers after connecting, or the next request on a keep-alive connection. ``body_timeout_s``: seconds to
    send a request body once the headers are in. ``max_connections``: open connections per server, lowered
    to fit the descriptor limit (:func:`connection_cap`)."""

    header_timeout_s: float = setting_default("http_header_timeout_s")
    body_timeout_s: float = setting_default("http_body_timeout_s")
    max_connections: int = setting_default("http_max_connections")

    @classmethod
    def of(cls, config: Config) -> ListenerLimits:
        """The limits ``config`` sets."""
        return cls(
            header_timeout_s=config.http_header_timeout_s,
            body_timeout_s=config.http_body_timeout_s,
            max_connections=config.http_max_connections,
        )


def _nofile() -> tuple[int, int] | None:
    try:
        import resource
    except ImportError:  # Windows: no POSIX descriptor limit
        return None
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def raise_descriptor_limit(target: int = DESCRIPTOR_TARGET) -> int | None:
    """Raise the soft ``RLIMIT_NOFILE`` to ``target`` (at most the hard limit) when it is lower; returns the
    soft limit now in force (``None`` where there is none, e.g. Windows). Never raises: a refusal is logged."""
    limits = _nofile()
    if limits is None:
        return None
    import resource

    soft, hard = limits
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    wanted = target if hard == resource.RLIM_INFINITY else min(target, hard)
    if wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as exc:
            log.info("cannot raise the open-file limit from %d to %d: %s", soft, wanted, exc)
    return soft


def connection_cap(configured: int, servers: int = 2) -> int:
    """Open connections one server may hold: ``configured``, lowered so that ``servers`` servers at their cap
    leave room under the soft descriptor limit for everything else (the index, the model, logs, the watcher,
    worker pipes: an eighth of the limit, at least 64; and one accept batch, :data:`ACCEPT_BACKLOG`). At least 8."""
    limits = _nofile()
    if limits is None:
        return configured
    soft = limits[0]
    if soft < 0:  # RLIM_INFINITY
        return configured
    reserve = max(64, soft // 8) + ACCEPT_BACKLOG
    return max(8, min(configured, (soft - reserve) // servers))


@dataclass(eq=False)
class _Conn:
    peer: Peer
    transport: asyncio.Transport
    busy: int = 0
    timer: asyncio.TimerHandle | None = None


class _Notice:
    """At most one log line per :data:`NOTICE_INTERVAL_S` for a repeated condition, counting the rest."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._last: float | None = None
        self._missed = 0

    def __call__(self, message: str, *args: object) -> None:
        now = self.clock()
        if self._last is not None and now - self._last < NOTICE_INTERVAL_S:
            self._missed += 1
            return
        more = f" ({self._missed} more since the last such line)" if self._missed else ""
        log.warning(message + more, *args)
        self._last, self._missed = now, 0


class ConnectionGuard:
    """The open connections of one server (``name`` for the log): at most ``cap`` (default
    :func:`connection_cap` of ``limits.max_connections``), idle ones closed after ``limits.header_timeout_s``.
    Runs on the server's event loop; not thread-safe."""

    def __init__(self, name: str, limits: ListenerLimits, *, cap: int | None = None) -> None:
        self.name = name
        self.limits = limits
        self.cap = cap if cap is not None else connection_cap(limits.max_connections)
        self._conns: dict[Peer, _Conn] = {}
        self._idle: OrderedDict[Peer, _Conn] = OrderedDict()  # oldest idle first
        self._full = _Notice()
        #: Connections closed because their headers (or next request) did not come in time, or for room.
        self.timed_out = 0
        self.shed = 0

    @property
    def open(self) -> int:
        return len(self._conns)

    def protocol(self, inner: asyncio.Protocol) -> asyncio.Protocol:
        """``inner`` (the server's own protocol for one connection) wrapped so this guard sees it open and close."""
        return _Guarded(self, inner)

    @contextlib.contextmanager
    def busy(self, peer: Any) -> Iterator[None]:
        """Mark the connection from ``peer`` (``(host, port)``) as handling a request for the block: it is then
        neither timed out nor closed for room. Unknown peers (a server not behind this guard) are ignored."""
        key = _peer(peer)
        conn = self._conns.get(key) if key is not None else None
        if conn is None:
            yield
            return
        conn.busy += 1
        self._idle.pop(conn.peer, None)
        self._cancel_timer(conn)
        try:
            yield
        finally:
            conn.busy -= 1
            if conn.busy == 0 and self._conns.get(conn.peer) is conn:
                self._set_idle(conn)

    def close(self, peer: Any) -> None:
        """Close the connection from ``peer`` now (e.g. a body that did not arrive in time)."""
        key = _peer(peer)
        conn = self._conns.get(key) if key is not None else None
        if conn is not None:
            self._idle.pop(conn.peer, None)
            self._drop(conn)

    # -- called by _Guarded ---------------------------------------------------------------------------
    def _opened(self, transport: asyncio.Transport) -> bool:
        """Register a new connection; False when it must be closed at once (the cap is full of busy ones)."""
        peer = _peer(transport.get_extra_info("peername")) or ("?", id(transport))
        conn = _Conn(peer, transport)
        if len(self._conns) >= self.cap:
            if not self._idle:
                self._full(
                    "%s: %d connections open, all handling requests (the cap); closing a new one",
                    self.name,
                    len(self._conns),
                )
                return False
            _, oldest = self._idle.popitem(last=False)
            self.shed += 1
            self._drop(oldest)
            self._full(
                "%s: %d connections open (the cap); closing the longest idle ones to make room",
                self.name,
                len(self._conns),
            )
        self._conns[peer] = conn
        self._set_idle(conn)
        return True

    def _closed(self, transport: asyncio.Transport) -> None:
        peer = _peer(transport.get_extra_info("peername")) or ("?", id(transport))
        conn = self._conns.get(peer)
        if conn is not None and conn.transport is transport:
            del self._conns[peer]
            self._idle.pop(peer, None)
            self._cancel_timer(conn)

    def _set_idle(self, conn: _Conn) -> None:
        self._idle[conn.peer] = conn
        self._idle.move_to_end(conn.peer)
        self._cancel_timer(conn)
        loop = asyncio.get_running_loop()
        conn.timer = loop.call_later(self.limits.header_timeout_s, self._expire, conn)

    def _expire(self, conn: _Conn) -> None:
        conn.timer = None
        if conn.busy == 0 and self._conns.get(conn.peer) is conn:
            self.timed_out += 1
            log.debug(
                "%s: closing %s:%s, no request within %.1f s", self.name, *conn.peer, self.limits.header_timeout_s
            )
            self._idle.pop(conn.peer, None)
            self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        """Forget ``conn`` now (so it no longer counts against the cap) and abort it."""
        del self._conns[conn.peer]
        self._cancel_timer(conn)
        conn.transport.abort()

    @staticmethod
    def _cancel_timer(conn: _Conn) -> None:
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None


def _peer(address: Any) -> Peer | None:
    if isinstance(address, (tuple, list)) and len(address) >= 2:
        return (str(address[0]), int(address[1]))
    return None


class _Guarded(asyncio.Protocol):
    """Forwards every protocol callback to the server's own protocol, telling the guard of open and close."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        admitted = self.guard._opened(transport)
        self.inner.connection_made(transport)
        if not admitted:
            transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.guard._closed(self.transport)
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class RepeatedRecords(logging.Filter):
    """A logger filter letting through at most one record per :data:`NOTICE_INTERVAL_S` of each message in
    ``messages`` (exact format strings, e.g. uvicorn's per-request warnings that anyone who can connect can
    trigger), the next one let through saying how many were dropped. Other records pass unchanged."""

    def __init__(self, messages: tuple[str, ...], clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.messages = frozenset(messages)
        self.clock = clock
        self._last: dict[str, float] = {}
        self._missed: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = record.msg if isinstance(record.msg, str) else ""
        if key not in self.messages:
            return True
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < NOTICE_INTERVAL_S:
            self._missed[key] = self._missed.get(key, 0) + 1
            return False
        missed = self._missed.pop(key, 0)
        if missed:
            record.msg = f"{key.rstrip()} ({missed} more since the last such line)"
        self._last[key] = now
        return True


def quiet_repeated_records(logger: logging.Logger, messages: tuple[str, ...]) -> None:
    """Install :class:`RepeatedRecords` for ``messages`` on ``logger`` once (idempotent)."""
    if not any(isinstance(f, RepeatedRecords) for f in logger.filters):
        logger.addFilter(RepeatedRecords(messages))


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Make ``loop`` report a failing ``accept()`` (out of descriptors or memory) as one warning line per
    :data:`NOTICE_INTERVAL_S` instead of a traceback per attempt; everything else goes to the handler that
    was there before. Idempotent."""
    previous = loop.get_exception_handler()
    if getattr(previous, "_cairn_accept", False):
        return
    notice = _Notice()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _ACCEPT_ERRNOS and "socket" in context:
            limits = _nofile()
            notice(
                "accept() failed: %s (open-file limit %s); new connections wait until descriptors free up",
                exc.strerror or exc,
                limits[0] if limits else "none",
            )
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    handler._cairn_accept = True  # type: ignore[attr-defined]
    loop.set_exception_handler(handler)

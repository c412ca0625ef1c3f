"""The daemon's MCP endpoint (:class:`McpHttp`), started on its first connection (:class:`LazyListener`), and the
bound socket it serves on (:func:`listen`).

Why: the MCP SDK, its HTTP server and their dependencies are tens of MB of resident memory once imported, and
many daemons never see an MCP client. The port is bound when the daemon starts (its URL is in ``service.json`` at
once, and a port in use is an error then, as before); the server is imported and started when the listening socket
first has a connection waiting, which stays in the socket's backlog until the server accepts it. This module
imports no part of the SDK.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from cairn.connections import ACCEPT_BACKLOG
from cairn.errors import CairnError
from cairn.loopback import require_loopback_host

log = logging.getLogger("cairn.mcp_server")


def listen(host: str, port: int) -> socket.socket:
    """A non-blocking socket listening on ``host``:``port`` (0: a free port). Raises ConfigError, before any socket
    is made, for a host that is not loopback; CairnError when it cannot be bound (the port in use, an address not
    on this machine)."""
    require_loopback_host(host, "MCP over HTTP")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(ACCEPT_BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise CairnError(
            f"Cannot serve MCP over HTTP on {host}:{port}: {exc.strerror}; "
            "set mcp_port in the config (0 picks a free port)."
        ) from None
    return sock


class LazyListener:
    """A socket bound on ``host``:``port`` at :meth:`listen`, handed to ``start`` (an async callable that serves
    on it and returns the server, which has ``close()``) when the first connection arrives. Where the event loop
    cannot watch a socket (no ``add_reader``), ``start`` runs at once. :attr:`server` is the started server (None
    before), :attr:`error` why it could not start (then the socket is closed: connections are refused)."""

    def __init__(self, host: str, port: int, start: Callable[[socket.socket], Awaitable[Any]]) -> None:
        self.host = host
        self.port = port
        self._start = start
        self._sock: socket.socket | None = None
        self._watching = False
        self._task: asyncio.Task | None = None
        self.server: Any = None
        self.error: str | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/mcp"

    async def listen(self) -> LazyListener:
        """Bind the port (CairnError when it cannot be) and wait for the first connection."""
        self._sock = listen(self.host, self.port)
        self.port = self._sock.getsockname()[1]
        loop = asyncio.get_running_loop()
        try:
            loop.add_reader(self._sock.fileno(), self._first_connection)
            self._watching = True
        except NotImplementedError:
            self._first_connection()
            await self.started()
        return self

    def _first_connection(self) -> None:
        """A connection waits (or the loop cannot tell): start the server once."""
        if self._watching and self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._watching = False
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._serve(), name="cairn-mcp-http-start")

    async def _serve(self) -> None:
        sock = self._sock
        assert sock is not None
        try:
            self.server = await self._start(sock)
        except Exception as exc:  # logged and said in /health; the daemon's own API goes on
            self.error = exc.message if isinstance(exc, CairnError) else f"{type(exc).__name__}: {exc}"
            log.error("MCP over HTTP could not start: %s", self.error, exc_info=not isinstance(exc, CairnError))
            sock.close()

    async def started(self) -> Any:
        """Wait for a start under way (none: return at once); the server, or None when there is none."""
        if self._task is not None:
            await asyncio.shield(self._task)
        return self.server

    async def close(self) -> None:
        """Stop serving: the server when started (a start under way is waited for first), else the socket."""
        if self._watching and self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._watching = False
        await self.started()
        if self.server is not None:
            await self.server.close()
            self.server = None
        if self._sock is not None:
            self._sock.close()


class McpHttp:
    """The daemon's MCP endpoint: the policy (fail-closed holder) and the listener (:class:`LazyListener`: the
    HTTP server, once a client connected)."""

    def __init__(self, policy: Any, server: Any) -> None:
        self.policy = policy
        self.server = server

    @property
    def url(self) -> str:
        return self.server.url

    def health(self, detail: bool = False) -> dict[str, Any]:
        """``/health``'s ``mcp`` entry: ``{http, policy: "ok"|"fail-closed", failClosedReason}``, plus
        ``failClosedDetail`` for the owner (``detail``): :meth:`~cairn.policy_live.PolicyHolder.status`;
        ``{http: None, off}`` when the server could not start."""
        error = getattr(self.server, "error", None)
        if error:
            return {"http": None, "off": error}
        return {"http": self.url, **self.policy.status(detail=detail)}

    async def close(self) -> None:
        await self.server.close()

"""Streamable-HTTP MCP sessions bounded per client: the SDK's session manager with fair admission.

The SDK's :class:`~mcp.server.streamable_http_manager.StreamableHTTPSessionManager` caps sessions only in
all (its default: 10,000, reaped after 30 idle minutes), so one token holder opening sessions in a loop
fills the cap and every other client's ``initialize`` gets 503 until they expire. Here admission is decided
per client, under the SDK's session-creation lock (so the check and the registration are one step):

- a client at ``per_client`` open sessions gets its new one by giving up its own least recently used
  session (an idle one first: no request in flight, no open GET stream);
- at ``total`` open sessions, the client holding the most sessions among those not declared local gives one
  up the same way; only when every open session is a local client's does a local client's new session
  take one from the local client holding the most, and a non-local client is then refused (503);
- a session without a request for ``idle_s`` seconds is closed by the SDK.

A closed session's id answers 404 at once; its client starts a new session (as the MCP spec says). Memory
is bounded by ``total`` sessions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from cairn.config import Config, setting_default

log = logging.getLogger("cairn.mcp_server")

_SESSION_HEADER = MCP_SESSION_ID_HEADER.lower().encode("latin-1")


@dataclass(frozen=True)
class SessionLimits:
    """Open MCP sessions per client and in all, and the seconds without a request after which one is closed
    (config keys ``mcp_sessions_per_client``, ``mcp_sessions_max``, ``mcp_session_idle_s``)."""

    per_client: int = setting_default("mcp_sessions_per_client")
    total: int = setting_default("mcp_sessions_max")
    idle_s: float = setting_default("mcp_session_idle_s")

    @classmethod
    def of(cls, config: Config) -> SessionLimits:
        """The limits ``config`` sets."""
        return cls(
            per_client=config.mcp_sessions_per_client,
            total=config.mcp_sessions_max,
            idle_s=config.mcp_session_idle_s,
        )


class FairSessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager with the admission rules of this module. ``is_local(client)`` says whether a
    client is declared local (read at each admission, so policy edits apply); ``clock`` gives seconds.
    Other keyword arguments go to the SDK (``app``, ``security_settings``, ``max_request_body_size``)."""

    def __init__(
        self,
        *,
        limits: SessionLimits,
        is_local: Callable[[str], bool],
        clock: Callable[[], float] = time.monotonic,
        **kwargs: Any,
    ) -> None:
        super().__init__(max_sessions=None, session_idle_timeout=limits.idle_s, **kwargs)
        self.limits = limits
        self.is_local = is_local
        self.clock = clock
        self._used: dict[str, float] = {}  # session id → when a request last started or ended
        self._busy: dict[str, int] = {}  # session id → requests in flight (an open GET stream included)
        self.evicted = 0
        inner = self.asgi_app

        async def tracked(scope: Any, receive: Any, send: Any) -> None:
            sid = _session_id(scope)
            if sid is None or sid not in self._used:
                await inner(scope, receive, send)
                return
            self._busy[sid] = self._busy.get(sid, 0) + 1
            self._used[sid] = self.clock()
            try:
                await inner(scope, receive, send)
            finally:
                left = self._busy.get(sid, 1) - 1
                if left > 0:
                    self._busy[sid] = left
                else:
                    self._busy.pop(sid, None)
                if sid in self._used:
                    self._used[sid] = self.clock()

        self.asgi_app = tracked  # type: ignore[assignment]  # an ASGI app in front of the SDK's

    @property
    def open_sessions(self) -> int:
        return len(self._server_instances)

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        """The SDK's admission hook (called under its session-creation lock): make room by the rules above,
        then register the session; ``None`` (the SDK answers 503) when a non-local client finds every open
        session held by local clients."""
        self._forget_ended()
        client = _client_of(requestor)
        mine = self._sessions_of(client)
        if len(mine) >= self.limits.per_client:
            self._evict(self._least_recent(mine), client, "its own cap")
        if len(self._server_instances) >= self.limits.total:
            victim = self._heaviest(local_too=self._local(client))
            if victim is None:
                log.warning(
                    "MCP: refusing a new session for %s: all %d sessions are local clients'", client, self.limits.total
                )
                return None
            self._evict(self._least_recent(self._sessions_of(victim)), victim, "the total cap")
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            self._used[transport.mcp_session_id] = self.clock()
        return transport

    # -- helpers ----------------------------------------------------------------------------------------
    def _local(self, client: str) -> bool:
        try:
            return bool(self.is_local(client))
        except Exception:  # a broken policy: not local (fail closed)
            return False

    def _sessions_of(self, client: str) -> list[str]:
        return [sid for sid, owner in self._session_owners.items() if _client_of(owner) == client]

    def _least_recent(self, sids: list[str]) -> str:
        """The session to give up: idle ones before busy ones, then the least recently used."""
        return min(sids, key=lambda sid: (self._busy.get(sid, 0) > 0, self._used.get(sid, 0.0)))

    def _heaviest(self, *, local_too: bool) -> str | None:
        """The client holding the most open sessions, among clients not declared local; among local ones too
        when ``local_too`` and no non-local client holds any. ``None`` when there is none to ask."""
        counts: dict[str, int] = {}
        oldest: dict[str, float] = {}  # per client, its least recent use (ties go to the longest unused)
        for sid, owner in self._session_owners.items():
            name = _client_of(owner)
            counts[name] = counts.get(name, 0) + 1
            oldest[name] = min(oldest.get(name, float("inf")), self._used.get(sid, 0.0))
        remote = {name: n for name, n in counts.items() if not self._local(name)}
        pool = remote or (counts if local_too else {})
        return max(pool, key=lambda name: (pool[name], -oldest[name])) if pool else None

    def _evict(self, sid: str, client: str, why: str) -> None:
        """Forget session ``sid`` now (its id answers 404 from here on) and terminate it in the background."""
        transport = self._server_instances.pop(sid, None)
        self._session_owners.pop(sid, None)
        self._used.pop(sid, None)
        self._busy.pop(sid, None)
        if transport is None:
            return
        self.evicted += 1
        log.info("MCP: closed a session of client %s to make room (%s)", client, why)
        if self._task_group is not None:
            self._task_group.start_soon(transport.terminate)

    def _forget_ended(self) -> None:
        """Drop the bookkeeping of sessions the SDK has ended (client DELETE, idle timeout)."""
        for sid in [sid for sid in self._used if sid not in self._server_instances]:
            self._used.pop(sid, None)
            self._busy.pop(sid, None)


def _session_id(scope: Any) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == _SESSION_HEADER:
            return value.decode("latin-1")
    return None


def _client_of(owner: Any) -> str:
    """The client name of an SDK session owner (an ``AuthorizationContext``: its ``client_id``)."""
    if isinstance(owner, dict):
        return str(owner.get("client_id"))
    return str(getattr(owner, "client_id", owner))

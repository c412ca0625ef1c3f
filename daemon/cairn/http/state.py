"""The HTTP app's typed keys and per-app state (shared by the middlewares, the stream pump and the routes)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from cairn.services import Services

if TYPE_CHECKING:
    from cairn.http.security import BadTokenThrottle


class TokenSource(Protocol):
    """Where the current API token comes from (``cairn.secrets.TokenWatch``); asked on every request."""

    def current(self) -> str: ...


class StaticToken:
    """A fixed API token."""

    def __init__(self, token: str) -> None:
        self._token = token

    def current(self) -> str:
        return self._token


class State:
    """Per-app mutable state: open streams, the shutdown signal, the bad-token throttle."""

    def __init__(self, throttle: BadTokenThrottle) -> None:
        self.ask_streams = 0
        self.event_streams = 0
        self.closing = asyncio.Event()
        self.throttle = throttle


SERVICES = web.AppKey("cairn_services", Services)
TOKEN = web.AppKey[TokenSource]("cairn_token")
STATE = web.AppKey("cairn_state", State)
#: Seconds between SSE comment heartbeats on an open stream.
HEARTBEAT = web.AppKey("cairn_heartbeat_s", float)

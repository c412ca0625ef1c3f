"""The use cases the edges call, as one typed object (layer 2).

The composition root (:mod:`cairn.app`) builds one :class:`Services`; the HTTP app
(:func:`cairn.http.make_app`) and the MCP service (:class:`cairn.mcp_server.McpService`) take it whole,
so a missing use case is a type error at start-up, not an error at request time. The protocols name
what each edge calls; the concrete classes are the search service, :class:`cairn.answers.AnswerService`,
:class:`cairn.library.NoteViews`, the daemon's indexing controls and :class:`cairn.events.EventBus`.

A use case takes the request whole (a :mod:`cairn.contract` request, checked once by the edge that parsed it) and
the caller (:class:`~cairn.search.CallerView`, made by :attr:`Services.caller` for the caller's withholding rule; it
carries the tally of the withheld notes the request touched, for the audit log).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cairn.config import Config
from cairn.contract import AskRequest, SearchRequest
from cairn.events import NamedEvent
from cairn.policy import Withhold
from cairn.search import CallerView


class Searcher(Protocol):
    """The one query service. Blocking (SQLite, ONNX): edges call it from worker threads."""

    def search(self, request: SearchRequest, caller: CallerView) -> Any:
        """A search result (``hits``, ``elapsed_ms``, ``coverage``)."""
        ...


class Answerer(Protocol):
    """The one ask path: ``stream`` yields events that unpack as ``(event, data)`` (``token``…, ``sources``,
    ``done``, or ``error`` first on a failure after tokens were sent; :mod:`cairn.answers.events`); ``answer``
    collects the same events."""

    def stream(self, request: AskRequest, caller: CallerView) -> AsyncIterator[Any]: ...

    async def answer(self, request: AskRequest, caller: CallerView) -> Any: ...


class NoteLibrary(Protocol):
    """Read views of the notes (blocking; worker threads). Dicts in the wire's camelCase. ``caller`` None: the
    owner."""

    def note(self, raw: Any, caller: CallerView | None = None) -> Mapping[str, Any]: ...

    def related(self, raw: Any, limit: int = 10, caller: CallerView | None = None) -> Mapping[str, Any]: ...

    def tags(self) -> Mapping[str, Any]: ...

    def list_notes(
        self, tag: str | None = None, folder: str | None = None, limit: int = 50, caller: CallerView | None = None
    ) -> Mapping[str, Any]: ...


class IndexControls(Protocol):
    """The index's controls (blocking; worker threads)."""

    def stats(self) -> Mapping[str, Any]:
        """``{notes, chunks, vectors, pending, lastIngestedAt, watching, paused, errors}``."""
        ...

    def request_reindex(self, path: str | None = None) -> Mapping[str, Any]:
        """Queue a re-index of ``path`` (or the vault): ``{queued, path}``."""
        ...

    def set_paused(self, paused: bool) -> Mapping[str, Any]:
        """Stop (or resume) following file changes: ``{paused, watching}``."""
        ...


class Subscription(Protocol):
    async def get(self) -> NamedEvent: ...

    def close(self) -> None: ...


class EventSource(Protocol):
    """Index progress events (``progress``, ``indexed``, ``removed``, ``error``)."""

    def subscribe(self) -> Subscription: ...


#: ``/health``: a blocking function (worker thread) or a coroutine function returning the health dict.
HealthCheck = Callable[[], Mapping[str, Any] | Awaitable[Mapping[str, Any]]]


@dataclass(frozen=True)
class Services:
    """Everything an edge may call. ``config`` is the daemon's frozen configuration."""

    config: Config
    search: Searcher
    answers: Answerer
    library: NoteLibrary
    indexing: IndexControls
    events: EventSource
    health: HealthCheck
    #: The caller's view for a withholding rule (None: the owner, from whom nothing is withheld), one per request:
    #: what a use case is handed with the request. For a rule it reads the withheld set from the store (blocking: a
    #: worker thread); the owner's is made at once.
    caller: Callable[[Withhold | None], CallerView]
    #: ``/health`` for a request that carries the API token (the owner): ``health`` plus what only the owner may
    #: see (why the MCP policy is unusable: ``file:line: reason``); ``None`` → the same as ``health``.
    health_detail: HealthCheck | None = None

"""Small real stand-ins for the services an edge calls (:class:`cairn.services.Services`): a query service that
finds nothing, raises or records its calls, a library without notes, index controls and an event source that say
nothing; for the tests of the edges' plumbing (security, errors, arguments, threads)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from cairn.answers import AnswerService
from cairn.config import Config
from cairn.errors import NotFoundError
from cairn.policy import LinkRedactor, Withhold
from cairn.search import CallerView, Ranked, SearchResult, WithheldSet
from cairn.services import Services


class NoViews:
    """Callers' views of an index that holds nothing: whatever the rule, nothing is withheld (real
    :class:`~cairn.search.CallerView` objects, their tallies real)."""

    def of(self, withhold=None) -> CallerView:
        return CallerView(WithheldSet(Withhold(), {}, {}, LinkRedactor(())), source=None)


class EmptyQuery:
    """Finds nothing: search → no hits; ranked → no hits, so the answer service answers the fixed not-found
    text (as the real service does). ``vector_cache``/``embedder``: what an AnswerService holds on to."""

    PER_NOTE_ASK = 3
    vector_cache = None
    embedder = None
    views = NoViews()

    def search(self, request, caller=None) -> SearchResult:
        return SearchResult(hits=[], elapsed_ms=0.1)

    def ranked(self, query, view, request, **kw):
        return Ranked(())

    def coverage(self, view):
        return None


class RaisingQuery(EmptyQuery):
    """Every call raises ``error`` (to test the error edge)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def search(self, request, caller=None):
        raise self.error

    def ranked(self, query, view, request, **kw):
        raise self.error


class RecordingQuery(EmptyQuery):
    """Empty results, remembering the arguments it was called with (and on which thread)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any], str]] = []

    def search(self, request, caller=None):
        self.calls.append(
            (
                "search",
                request.query,
                {"top_k": request.top_k, "tags": request.tags, "folders": request.folders},
                threading.current_thread().name,
            )
        )
        return super().search(request, caller)

    def ranked(self, query, view, request, **kw):
        self.calls.append(
            (
                "ask",
                query.text,
                {"top_k": request.top_k, "tags": request.tags, "folders": request.folders},
                threading.current_thread().name,
            )
        )
        return super().ranked(query, view, request, **kw)


class GatedQuery:
    """Delegates to ``inner`` but holds ``ranked`` (the answer's retrieval) until ``release`` is set (proves the
    stream starts first)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()
        self.PER_NOTE_ASK = inner.PER_NOTE_ASK
        self.vector_cache, self.embedder, self.store = inner.vector_cache, inner.embedder, inner.store
        self.views, self.coverage = inner.views, inner.coverage

    def search(self, request, caller=None):
        return self.inner.search(request, caller)

    def ranked(self, query, view, request, **kw):
        self.entered.set()
        if not self.release.wait(timeout=30):
            raise RuntimeError("test gate never released")
        return self.inner.ranked(query, view, request, **kw)


HEALTH = {"status": "ok", "store": "ok", "embedder": "ok", "llm": {"configured": False, "reachable": False}}


STATS = {
    "notes": 0,
    "chunks": 0,
    "vectors": 0,
    "pending": 0,
    "lastIngestedAt": None,
    "watching": False,
    "paused": False,
    "errors": [],
}


class NoLibrary:
    """A library without notes: every read is ``not_found``."""

    def note(self, raw, caller=None):
        raise NotFoundError(f"No note {raw!r} in the index.")

    def related(self, raw, limit=10, caller=None):
        raise NotFoundError(f"No note {raw!r} in the index.")

    def tags(self, caller=None):
        return {"tags": []}

    def list_notes(self, tag=None, folder=None, limit=50, caller=None):
        return {"notes": [], "total": 0}


class StandInIndexing:
    """Index controls answering from ``stats()``; re-index requests are queued nowhere."""

    def __init__(self, stats: Callable[[], dict] = lambda: dict(STATS)) -> None:
        self.stats = stats

    def request_reindex(self, path=None):
        return {"queued": True, "path": path}

    def set_paused(self, paused):
        return {"paused": paused, "watching": not paused}


class NoEvents:
    """An event source whose subscriptions never yield."""

    def subscribe(self):
        from cairn.events import EventBus

        return EventBus().subscribe()


def stand_in_services(
    query,
    *,
    config: Config | None = None,
    stats: Callable[[], dict] = lambda: dict(STATS),
    health: Callable[[], Any] = lambda: dict(HEALTH),
    answers=None,
    library=None,
    indexing=None,
    events=None,
) -> Services:
    """Services over a stand-in query service (``search``/``ranked``, its callers' ``views``), answers from the real
    answer service over it; what is not given is a stand-in too."""
    return Services(
        config=config or Config(),
        search=query,
        answers=answers or AnswerService(query),
        library=library or NoLibrary(),
        indexing=indexing or StandInIndexing(stats),
        events=events or NoEvents(),
        health=health,
        caller=query.views.of,
    )

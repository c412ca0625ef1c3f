"""Requests for the services, made as an edge makes them: parsed by the edge contract (:mod:`cairn.contract`), so a
bad one raises the edges' :class:`~cairn.errors.BadRequestError`; and the caller's view they are served in."""

from __future__ import annotations

from typing import Any

from cairn.contract import AskRequest, SearchRequest
from cairn.policy import Withhold


def search_request(query: Any, **fields: Any) -> SearchRequest:
    """``SearchRequest.parse({"query": query, **fields})`` (``top_k``, ``tags``, ``folders``)."""
    return SearchRequest.parse({"query": query, **fields})


def ask_request(question: Any, **fields: Any) -> AskRequest:
    """``AskRequest.parse({"question": question, **fields})`` (``top_k``, ``tags``, ``folders``, ``history``)."""
    return AskRequest.parse({"question": question, **fields})


def caller_of(cairn: Any, withhold: Withhold | None = None) -> Any:
    """The view of a caller withheld ``withhold`` (None: the owner) over ``cairn``'s index, as an edge makes one per
    request (:attr:`cairn.services.Services.caller`); its ``tally`` gathers the withheld notes the request touched."""
    return cairn.query.views.of(withhold)

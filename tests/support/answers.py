"""Answers through the one ask path without a model (:class:`cairn.answers.AnswerService`): the extractive answer,
as the CLI and MCP get it when no model is configured."""

from __future__ import annotations

import asyncio

from cairn.answers import AnswerService
from support.requests import ask_request


def ask(search, question, **kw):
    """The one ask path without a model: the extractive answer (as the CLI and MCP get it)."""
    return asyncio.run(AnswerService(search).answer(ask_request(question, **kw)))

"""The one ask path (:class:`AnswerService`): HTTP, MCP and the CLI answer through it.

Modules: ``service`` (the ask path and the context budget), ``events`` (the answer's events, :class:`Answer`,
:class:`Source`), ``extractive`` (the answer built from the passages), ``citations`` (the citation filter).
"""

from cairn.answers.events import Answer, Source, sources_text
from cairn.answers.service import AnswerService, ChatModel

__all__ = ["Answer", "AnswerService", "ChatModel", "Source", "sources_text"]

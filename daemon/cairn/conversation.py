"""Follow-up questions (layer 0): the previous turns of a conversation, checked, and the text a follow-up is
retrieved with.

A follow-up such as "and give it a custom title?" (after "How do I make a callout foldable?") names nothing to
search for: retrieved alone it finds passages about titles of anything. :func:`retrieval_text` folds the last
turn's question into a follow-up that refers back (short, or opening with "and", "what about", or holding a
pronoun such as "it" or "them"), deterministically and without a model call; a question that stands on its own
is retrieved as it is, so changing the subject is not dragged back to the previous one.

The history only steers retrieval and is shown to a model as the conversation so far: an answer is grounded in
its own turn's sources alone (docs/design.md, "Contract" → Follow-ups). Citations ``[n]`` in earlier answers
point at earlier sources, so :func:`cairn.prompt.history_messages` removes them.

The limits (:attr:`cairn.contract.Limits.history_turns` and friends) are defined in :mod:`cairn.contract`, which
parses a request's ``history`` with :func:`parse_history`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cairn.errors import BadRequestError

if TYPE_CHECKING:
    from cairn.contract import Limits


@dataclass(frozen=True)
class Turn:
    """One earlier turn: the question asked and the answer given (its text, ``[n]`` citations and all)."""

    question: str
    answer: str


def _field(value: Any, where: str, limit: int, *, required: bool) -> str:
    if not isinstance(value, str):
        got = "nothing" if value is None else type(value).__name__
        raise BadRequestError(f"{where} must be a string, got {got}.")
    if required and not value.strip():
        raise BadRequestError(f"{where} is empty; expected the question asked in that turn.")
    if len(value) > limit:
        raise BadRequestError(f"{where} is {len(value)} characters long; the limit is {limit}.")
    try:  # a lone surrogate escape is JSON but not a character: no tokenizer or model request could take it
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequestError(
            f"{where} holds U+{ord(value[exc.start]):04X}, which is not a character; send the text as UTF-8."
        ) from None
    return value


def parse_history(value: Any, limits: Limits) -> tuple[Turn, ...]:
    """``history``: a list of at most ``limits.history_turns`` objects ``{question, answer}``, oldest first;
    ``question`` non-empty, at most ``limits.text_chars`` characters, ``answer`` at most
    ``limits.history_answer_chars`` (it may be empty: an answer that was stopped). ``None`` → ``()``. Raises
    :class:`~cairn.errors.BadRequestError` naming the field (``history[2].answer``) and the limit."""
    if value is None:
        return ()
    example = 'e.g. [{"question": "How do I make a callout foldable?", "answer": "..."}]'
    if not isinstance(value, list | tuple):
        raise BadRequestError(f"history must be a list of earlier turns, {example}.")
    if len(value) > limits.history_turns:
        raise BadRequestError(
            f"history has {len(value)} turns; the limit is {limits.history_turns}. Send only the last "
            f"{limits.history_turns}."
        )
    turns = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise BadRequestError(f"history[{i}] must be an object with question and answer, {example}.")
        unknown = sorted(set(item) - {"question", "answer"})
        if unknown:
            raise BadRequestError(f"Unknown field {unknown[0]!r} in history[{i}]; expected: question, answer.")
        question = _field(item.get("question"), f"history[{i}].question", limits.text_chars, required=True)
        answer = _field(item.get("answer"), f"history[{i}].answer", limits.history_answer_chars, required=False)
        turns.append(Turn(question, answer))
    return tuple(turns)


def history_schema(limits: Limits, text_schema: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of ``history`` that MCP advertises: what :func:`parse_history` accepts (``text_schema``: the
    schema of a question)."""
    answer = {"type": "string", "maxLength": limits.history_answer_chars}
    turn = {
        "type": "object",
        "additionalProperties": False,
        "required": ["question", "answer"],
        "properties": {"question": text_schema, "answer": answer},
    }
    return {
        "type": "array",
        "maxItems": limits.history_turns,
        "items": turn,
        "description": "earlier turns of this conversation, oldest first: a follow-up is retrieved with them",
    }


# -- retrieval --------------------------------------------------------------------------------------------

#: Openings of a question that continues the previous one.
_CONTINUES = re.compile(
    r"^\s*(?:and|also|but|or|so|then|plus|what about|how about|what if|and if|same for|is that|does that|"
    r"can that|does it|is it|can it|can i also|can you also)\b",
    re.IGNORECASE,
)
#: Words that point back at something named earlier.
_REFERS_BACK = re.compile(
    r"\b(?:it|its|it's|they|them|their|theirs|this|these|those|he|she|him|her|his)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[\w][\w'’-]*")
#: A question of at most this many words is a follow-up even without a pointer back ("Any limits?").
SHORT_WORDS = 4


def refers_back(question: str) -> bool:
    """Whether ``question`` reads as a continuation of the previous one: it opens like one ("and …", "what about
    …"), points back ("it", "them", "this" …), or is very short."""
    return bool(
        _CONTINUES.search(question) or _REFERS_BACK.search(question) or len(_WORD.findall(question)) <= SHORT_WORDS
    )


def retrieval_text(question: str, history: Sequence[Turn], max_chars: int) -> str:
    """The text ``question`` is retrieved with: the last turn's question then ``question`` when ``question``
    :func:`refers_back` (the earlier question cut from the front to fit ``max_chars``), else ``question``
    itself. Earlier answers never enter it (they would pull in the previous turn's passages)."""
    if not history or not refers_back(question):
        return question
    room = max_chars - len(question) - 1
    previous = history[-1].question.strip()
    if room <= 0 or not previous:
        return question
    return f"{previous[-room:]} {question}"

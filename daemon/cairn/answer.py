"""Answers as a stream of events (layer 2 use case): retrieve → context within the budget →
prompt → the model's tokens (citations checked) → ``sources`` → ``done``; or the extractive
answer when there is no model or it fails.

Events (``(name, data)`` tuples, as the HTTP edge sends them over SSE):

- found, model answers: ``token`` ``{text}`` …, ``sources`` (exactly the chunks in the prompt),
  ``done`` ``{grounded: true, notFound: false, elapsedMs, removedCitations}``;
- no model, or the model is refused / errors / times out / says nothing *before* any token was
  sent: the extractive answer (:meth:`QueryService.extractive_answer`) as ``token`` events, then
  ``sources`` and ``done`` ``{grounded: false, ...}`` — the same sequence;
- the model fails *after* tokens were sent: ``error`` ``{code, message}``, ``sources``, ``done``
  (``grounded: false``);
- nothing passes the floor: the fixed not-found text, ``sources`` ``[]``, ``done``
  ``{notFound: true}``; the model is never called.

Citations ``[n]`` the model writes for a number outside the included set are removed from the
streamed text (also when ``[``, the digits and ``]`` arrive in different tokens) and counted in
``done.removedCitations``. Text inside backticks is left alone (``arr[0]`` is code, not a citation).

Privacy: a model whose ``remote`` is true (a non-loopback endpoint) is a remote client; chunks of
notes carrying a withheld tag (default ``personal``, nested tags included; a
:class:`~cairn.policy.Withhold`, so withheld folders too) never enter its prompt. The extractive
fallback runs locally and may use them — unless the *caller* is withheld from them: ``withhold``
(an MCP client not declared local, issue 5) removes those notes before retrieval, so they are never
in the prompt, the answer or the sources. The passages a remote model does get are masked as for such an
MCP client: links to withheld notes become ``[withheld link]`` and their names are masked in the heading
paths (:meth:`AnswerService.prompt_blocks`), so a public note's ``[[Diagnosis 2026]]`` never names one.

The model is a :class:`ChatModel` injected by the composition root (``cairn.llm`` implements it).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

from cairn.config import NOT_FOUND_ANSWER
from cairn.errors import CairnError
from cairn.notes import normalise_tag
from cairn.policy import NOTHING_WITHHELD, WithheldTally, Withhold
from cairn.prompt import ContextBlock, build_messages
from cairn.query import Answer, QueryService, Source, WithheldSet

log = logging.getLogger(__name__)

Event = tuple[str, Any]
_PIECE_RE = re.compile(r"\S+\s*|\s+")


class ChatModel(Protocol):
    """A streaming chat model. ``remote``: its endpoint is not on this machine."""

    remote: bool

    def stream(self, messages: Sequence[dict[str, str]]) -> AsyncIterator[str]:
        """Yield text pieces; raise :class:`~cairn.errors.LLMError` (or any exception) on failure."""
        ...


def split_pieces(text: str) -> list[str]:
    """Word pieces for ``token`` events; ``"".join(pieces) == text``."""
    return _PIECE_RE.findall(text)


def is_withheld(tags: Sequence[str], withheld: Sequence[str]) -> bool:
    """True when any of ``tags`` is one of ``withheld`` or nested below one (``personal/health``)."""
    return Withhold(tuple(t for t in map(normalise_tag, withheld) if t)).tag_withheld(tags)


class CitationFilter:
    """Streaming filter that drops ``[n]`` citations whose ``n`` is not in ``allowed``.

    :meth:`feed` returns the text that is safe to send now; a tail that could still become a
    citation (``[``, ``[1``, with the whitespace before it) is held back until the next piece or
    :meth:`flush`. Leading whitespace of the whole answer is dropped. ``removed`` counts removals.
    """

    _HOLD = re.compile(r"[ \t]*(?:\[\d{0,3})?$")
    _CITE = re.compile(r"[ \t]*\[(\d{1,3})\]")
    _TICKS = re.compile(r"(`+)")

    def __init__(self, allowed: Sequence[int]) -> None:
        self.allowed = set(allowed)
        self.removed = 0
        self._buf = ""
        self._in_code = False
        self._started = False

    def feed(self, text: str) -> str:
        self._buf += text
        match = self._HOLD.search(self._buf)
        cut = match.start() if match else len(self._buf)
        ready, self._buf = self._buf[:cut], self._buf[cut:]
        return self._clean(ready)

    def flush(self) -> str:
        ready, self._buf = self._buf, ""
        return self._clean(ready)

    def _clean(self, text: str) -> str:
        out = []
        for part in self._TICKS.split(text):
            if part.startswith("`"):
                self._in_code = not self._in_code
                out.append(part)
            elif self._in_code:
                out.append(part)
            else:
                out.append(self._CITE.sub(self._keep_or_drop, part))
        cleaned = "".join(out)
        if not self._started:
            cleaned = cleaned.lstrip()
            self._started = bool(cleaned)
        return cleaned

    def _keep_or_drop(self, m: re.Match) -> str:
        if int(m.group(1)) in self.allowed:
            return m.group(0)
        self.removed += 1
        return ""


class AnswerService:
    """Streams answers for the HTTP edge (and collects them for the CLI). ``model`` may be ``None``."""

    def __init__(
        self,
        query: QueryService,
        model: ChatModel | None = None,
        *,
        withhold_tags: Sequence[str] | Withhold | Callable[[], Withhold | None] = ("personal",),
    ) -> None:
        """``withhold_tags``: what a REMOTE model never sees — tags (``config.llm.withhold_tags``), a
        :class:`~cairn.policy.Withhold` (tags and folders), or a function returning the one in force now
        (the daemon's: the governance policy's, read live, see :func:`cairn.app.remote_model_withhold`),
        where ``None`` means the policy cannot be read: then nothing enters a remote model's prompt."""
        self.query = query
        self.model = model
        if isinstance(withhold_tags, Withhold) or not callable(withhold_tags):
            fixed = withhold_tags
            if not isinstance(fixed, Withhold):  # strings that are not tags can never match a note
                fixed = Withhold(tuple(dict.fromkeys(t for t in map(normalise_tag, fixed) if t)))
            self._remote_withhold: Callable[[], Withhold | None] = lambda: fixed
        else:
            self._remote_withhold = withhold_tags

    @property
    def remote_withhold(self) -> Withhold | None:
        """What a remote model must not see now (``None``: everything)."""
        return self._remote_withhold()

    def prompt_sources(self, sources: Sequence[Source]) -> list[Source]:
        """The sources that may enter the model's prompt, renumbered 1..n (withheld notes dropped for a remote model)."""
        return self._prompt(sources)[0]

    def prompt_blocks(self, sources: Sequence[Source]) -> list[ContextBlock]:
        """The context blocks of the model's prompt: :meth:`prompt_sources` as :class:`ContextBlock` objects. For a
        remote model the withheld notes' names are masked in them as for an MCP client not declared local:
        links to withheld notes in the text become ``[withheld link]``, and so do their names in the heading
        path (``LinkRedactor.redact_symbol``). The owner's ``sources`` event keeps the text unmasked."""
        return self._prompt(sources)[1]

    def _prompt(self, sources: Sequence[Source]) -> tuple[list[Source], list[ContextBlock]]:
        if self.model is None:
            return [], []
        kept = list(sources)
        text_of: Any = lambda s: s.hit.text  # noqa: E731
        symbol_of: Any = lambda s: s.hit.symbol  # noqa: E731
        withhold = self.remote_withhold if getattr(self.model, "remote", True) else NOTHING_WITHHELD
        if withhold is None:  # the policy cannot be read: fail closed, the answer is built locally
            return [], []
        if withhold:
            # The index's withheld set too: it also holds what a passage's own tags cannot show (a PDF that a
            # withheld note links to or embeds; a note whose front-matter cannot be read).
            hidden = WithheldSet.load(self.query.store, withhold)
            kept = [
                s
                for s in kept
                if not (withhold.note_withheld(s.hit.file_path, s.hit.tags) or hidden.hides_path(s.hit.file_path))
            ]
            if hidden.redactor:  # titles of withheld notes reach the prompt through the kept notes' links
                mask = hidden.symbol_masker(self.query.store)
                text_of = lambda s: hidden.redact(s.hit.text)  # noqa: E731
                symbol_of = lambda s: s.hit.symbol if s.hit.kind == "pdf" else mask(s.hit.file_path, s.hit.symbol)  # noqa: E731
        numbered = [Source(n=i, hit=s.hit) for i, s in enumerate(kept, start=1)]
        blocks = [
            ContextBlock(
                n=s.n, file_path=s.hit.file_path, symbol=symbol_of(s), text=text_of(s), score=s.hit.score, tokens=0
            )
            for s in numbered
        ]
        return numbered, blocks

    async def stream(
        self,
        question: str,
        *,
        top_k: int,
        tags: Sequence[str] = (),
        folders: Sequence[str] = (),
        chosen: list[Source] | None = None,
        withhold: Withhold | None = None,
        tally: WithheldTally | None = None,
    ) -> AsyncIterator[Event]:
        """The answer's events. Raises :class:`~cairn.errors.CairnError` (e.g. BadRequestError) before the first event.
        ``chosen``, when given, receives the :class:`Source` objects of the ``sources`` event.
        ``withhold``: notes removed before retrieval for this caller; ``tally`` receives the withheld
        notes removed from the candidates (see :meth:`QueryService.retrieve`)."""
        started = time.monotonic()
        chosen = chosen if chosen is not None else []

        def done(grounded: bool, not_found: bool = False, removed: int = 0) -> Event:
            return "done", {
                "grounded": grounded,
                "notFound": not_found,
                "elapsedMs": round((time.monotonic() - started) * 1000, 1),
                "removedCitations": removed,
            }

        sources = await asyncio.to_thread(
            self.query.context, question, top_k=top_k, tags=tags, folders=folders, withhold=withhold, tally=tally
        )
        if not sources:
            for piece in split_pieces(NOT_FOUND_ANSWER):
                yield "token", {"text": piece}
            yield "sources", []
            yield done(False, not_found=True)
            return

        in_prompt, blocks = await asyncio.to_thread(self._prompt, sources)
        if in_prompt:
            messages = build_messages(question, blocks)
            filt = CitationFilter([s.n for s in in_prompt])
            sent = False
            failure: Exception | None = None
            try:
                async for delta in self.model.stream(messages):  # type: ignore[union-attr]
                    text = filt.feed(delta)
                    if text:
                        sent = True
                        yield "token", {"text": text}
                tail = filt.flush()
                if tail:
                    sent = True
                    yield "token", {"text": tail}
            except Exception as exc:  # LLMError, or a bug in a model adapter: never crash the stream
                failure = exc
            if sent:
                chosen[:] = in_prompt
            if sent and failure is None:
                yield "sources", [s.to_json() for s in in_prompt]
                yield done(True, removed=filt.removed)
                return
            if sent:
                log.warning("the language model failed mid-answer: %s", _describe(failure))
                code = failure.code if isinstance(failure, CairnError) else "llm_error"
                yield (
                    "error",
                    {
                        "code": code,
                        "message": "The language model stopped before the answer was complete: " + _describe(failure),
                    },
                )
                yield "sources", [s.to_json() for s in in_prompt]
                yield done(False, removed=filt.removed)
                return
            if failure is not None:
                log.warning("the language model failed, answering from the passages instead: %s", _describe(failure))
            else:
                log.warning("the language model returned an empty answer; answering from the passages instead")

        text = await asyncio.to_thread(self.query.extractive_answer, question, sources)
        chosen[:] = sources
        for piece in split_pieces(text):
            yield "token", {"text": piece}
        yield "sources", [s.to_json() for s in sources]
        yield done(False)

    async def answer(
        self,
        question: str,
        *,
        top_k: int,
        tags: Sequence[str] = (),
        folders: Sequence[str] = (),
        withhold: Withhold | None = None,
        tally: WithheldTally | None = None,
    ) -> Answer:
        """The whole answer at once (for the CLI and MCP): the same events, collected.
        ``Answer.withheld`` is the number of withheld notes removed from the candidates."""
        parts: list[str] = []
        chosen: list[Source] = []
        final: dict = {}
        tally = tally if tally is not None else WithheldTally()
        async for name, data in self.stream(
            question, top_k=top_k, tags=tags, folders=folders, chosen=chosen, withhold=withhold, tally=tally
        ):
            if name == "token":
                parts.append(data["text"])
            elif name == "done":
                final = data
        return Answer(
            text="".join(parts),
            grounded=bool(final.get("grounded")),
            not_found=bool(final.get("notFound")),
            sources=list(chosen),
            elapsed_ms=float(final.get("elapsedMs", 0.0)),
            withheld=tally.count,
        )


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no output"
    if isinstance(exc, CairnError):
        return exc.message
    return f"unexpected {type(exc).__name__}"

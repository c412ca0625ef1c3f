"""The one ask path, for HTTP, MCP and the CLI: retrieve → subsections brought by their section
(:mod:`cairn.answers.sections`) → context within the budget → prompt → the model's tokens (citations checked) →
``sources`` → ``done``; or the extractive answer when there is no model or it fails.

Events (:mod:`cairn.answers.events`):

- found, model answers: ``token`` ``{text}`` …, ``sources`` (exactly the chunks in the prompt),
  ``done`` ``{grounded: true, notFound: false, elapsedMs, removedCitations}``;
- no model, or the model is refused / errors / times out / says nothing *before* any token was
  sent: the extractive answer (:mod:`cairn.answers.extractive`) as ``token`` events, then
  ``sources`` and ``done`` ``{grounded: false, ...}`` — the same sequence;
- the model fails *after* tokens were sent: ``error`` ``{code, message}``, ``sources``, ``done``
  (``grounded: false``);
- the model's complete answer is unusable (no sentence, only citations, or words not in the passages it cites;
  :mod:`cairn.answers.degenerate`): ``replace`` ``{text, reason}`` with the extractive answer, its ``sources``, and
  ``done`` ``{grounded: false, fallback: reason}``;
- the evidence is weak (:meth:`~cairn.answers.answerability.Answerability.verdict` ``weak``): the fixed
  :data:`WEAK_ANSWER_LEAD`, then the extractive answer from the closest passages (numbered citations), ``sources``,
  ``done`` ``{grounded: false, weak: true}``; the model is never called;
- nothing passes the floor, or what passes does not answer the question (:mod:`cairn.answers.answerability`):
  the fixed not-found text, ``sources`` ``[]``, ``done``
  ``{notFound: true}``; the model is never called.

Follow-ups: ``history`` (the earlier turns, :mod:`cairn.conversation`) changes only what is retrieved (a follow-up
that refers back is retrieved with the last question folded in: :func:`~cairn.conversation.retrieval_text`) and
the model sees it as the conversation so far; the sources, the citations and the answer are this turn's alone.

Citations ``[n]`` the model writes for a number outside the included set are removed (:mod:`cairn.answers.citations`)
and counted in ``done.removedCitations``.

Requests: :meth:`AnswerService.stream` and :meth:`~AnswerService.answer` take an
:class:`~cairn.contract.AskRequest` whole, checked once by the edge contract and trusted here, and the caller's view
(:class:`~cairn.search.CallerView`; its tally receives the withheld notes the retrieval touched, for the audit log).

Privacy: a model whose ``remote`` is true (a non-loopback endpoint) is a remote client; chunks of notes carrying a
withheld tag (default ``personal``, nested tags included; a :class:`~cairn.policy.Withhold`, so withheld folders
too) never enter its prompt. The extractive fallback runs locally and may use them — unless the *caller* is
withheld from them: the caller's view (an MCP client not declared local) removes those notes before retrieval, so
they are never in the prompt, the answer or the sources. The passages a remote model does get are masked as for such an
MCP client: links to withheld notes become ``[withheld link]`` and their names are masked in the heading paths
(:meth:`AnswerService.prompt_blocks`), so a public note's ``[[Diagnosis 2026]]`` never names one.

The model is a :class:`ChatModel` injected by the composition root (``cairn.llm`` implements it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any, Protocol

from cairn.answers.answerability import Answerability, Verdict
from cairn.answers.citations import CitationFilter
from cairn.answers.degenerate import unusable_reason
from cairn.answers.events import (
    Answer,
    Done,
    Event,
    Failure,
    Replace,
    Source,
    Sources,
    Token,
    cited_sources,
    failure_tail,
    split_pieces,
)
from cairn.answers.extractive import ExtractiveAnswers
from cairn.answers.sections import with_subsections
from cairn.config import CONTEXT_TOKEN_BUDGET, NOT_FOUND_ANSWER, WEAK_ANSWER_LEAD
from cairn.contract import LIMITS, AskRequest, IndexCoverage, SearchRequest
from cairn.conversation import retrieval_text
from cairn.embedder import Embedder
from cairn.embedding import VectorCache
from cairn.errors import CairnError
from cairn.notes import normalise_tag
from cairn.policy import NOTHING_WITHHELD, Withhold
from cairn.prompt import ContextBlock, build_messages, select_within_budget
from cairn.search import CallerView, Hit, Query, Ranked, Views

log = logging.getLogger(__name__)


class Retriever(Protocol):
    """What the ask path needs of the search (:class:`cairn.search.SearchService`): the ranked chunks for a question
    in a request's scope as a caller sees the index, the coverage it sees, callers' views (for what a remote model
    may not see), the embedding model (token counts) and its vector cache."""

    PER_NOTE_ASK: int
    embedder: Embedder
    vector_cache: VectorCache
    views: Views

    def ranked(
        self, query: Query, view: CallerView, request: SearchRequest, *, per_note: int | None = None, purpose: str
    ) -> Ranked: ...

    def coverage(self, view: CallerView) -> IndexCoverage: ...


class ChatModel(Protocol):
    """A streaming chat model. ``remote``: its endpoint is not on this machine."""

    remote: bool

    def stream(self, messages: Sequence[dict[str, str]]) -> AsyncIterator[str]:
        """Yield text pieces; raise :class:`~cairn.errors.LLMError` (or any exception) on failure."""
        ...


def _elapsed_ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 1)


class _ModelRun:
    """One model call streamed through a :class:`CitationFilter`: :meth:`tokens` yields the text safe to send and
    never raises; afterwards ``sent`` says whether any text was sent and ``failure`` what went wrong, if anything."""

    def __init__(self, model: ChatModel, allowed: Sequence[int]) -> None:
        self.model = model
        self.filter = CitationFilter(allowed)
        self.sent = False
        self.failure: Exception | None = None
        self.parts: list[str] = []  # the text sent, for judging the complete answer

    @property
    def text(self) -> str:
        return "".join(self.parts)

    async def tokens(self, messages: list[dict[str, str]]) -> AsyncIterator[Token]:
        try:
            async for delta in self.model.stream(messages):
                text = self.filter.feed(delta)
                if text:
                    self.sent = True
                    self.parts.append(text)
                    yield Token(text)
            tail = self.filter.flush()
            if tail:
                self.sent = True
                self.parts.append(tail)
                yield Token(tail)
        except Exception as exc:  # LLMError, or a bug in a model adapter: never crash the stream
            self.failure = exc


class AnswerService:
    """Answers as a stream of events (:meth:`stream`) or at once (:meth:`answer`). ``model`` may be ``None``:
    then every answer is extractive."""

    def __init__(
        self,
        search: Retriever,
        model: ChatModel | None = None,
        *,
        withhold_tags: Sequence[str] | Withhold | Callable[[], Withhold | None] = ("personal",),
    ) -> None:
        """``withhold_tags``: what a REMOTE model never sees — tags (``config.llm.withhold_tags``), a
        :class:`~cairn.policy.Withhold` (tags and folders), or a function returning the one in force now
        (the daemon's: the governance policy's, read live, see :func:`cairn.app.remote_model_withhold`),
        where ``None`` means the policy cannot be read: then nothing enters a remote model's prompt."""
        self.search = search
        self.model = model
        self.extractive = ExtractiveAnswers(search.vector_cache)
        self.answerability = Answerability(self._tokens_of)
        # Context blocks' token counts (same text, same count).
        self._count_tokens = functools.lru_cache(maxsize=4096)(self._tokens_of)
        if isinstance(withhold_tags, Withhold) or not callable(withhold_tags):
            fixed = withhold_tags
            if not isinstance(fixed, Withhold):  # strings that are not tags can never match a note
                fixed = Withhold(tuple(dict.fromkeys(t for t in map(normalise_tag, fixed) if t)))
            self._remote_withhold: Callable[[], Withhold | None] = lambda: fixed
        else:
            self._remote_withhold = withhold_tags

    def _tokens_of(self, text: str) -> int:
        return self.search.embedder.count_tokens(text)

    @property
    def remote_withhold(self) -> Withhold | None:
        """What a remote model must not see now (``None``: everything)."""
        return self._remote_withhold()

    # ------------------------------------------------------------------ context
    def context(self, request: SearchRequest, caller: CallerView | None = None) -> list[Source]:
        """The numbered sources of an answer to ``request`` (:meth:`judged_context`'s, without the verdict)."""
        return self.judged_context(request, caller)[0]

    def judged_context(self, request: SearchRequest, caller: CallerView | None = None) -> tuple[list[Source], Verdict]:
        """The numbered sources of an answer to ``request`` as ``caller`` sees the index (None: the owner), and the
        answerability verdict (``answer``, ``weak`` or ``refuse``; [] with ``refuse``): :meth:`_judged` of the
        request's own text."""
        view = caller if caller is not None else self.search.views.of(None)
        return self._judged(Query.parse(request.query), request, view)

    def retrieve(self, request: SearchRequest, caller: CallerView | None = None) -> list[Hit]:
        """The chunks an answer to ``request`` is drawn from, before the answerability test and the context budget: the
        search service's hits for an ask (every one above the cosine floor, at most ``PER_NOTE_ASK`` per note)."""
        view = caller if caller is not None else self.search.views.of(None)
        return self._retrieved(Query.parse(request.query), request, view)

    def _judged(self, query: Query, request: SearchRequest, view: CallerView) -> tuple[list[Source], Verdict]:
        """The numbered sources of an answer: the chunks retrieved for ``query`` in ``request``'s scope (a weak one may
        give its place to the subsection of a source's section whose heading names the question:
        :mod:`cairn.answers.sections`) that fit the context budget (``CONTEXT_TOKEN_BUDGET`` tokens; lowest-scored
        dropped first), numbered 1..n in rank order (a subsection right after its source); and the verdict. [] → not
        found: nothing passed the cosine floor, or what did does not answer the question
        (:mod:`cairn.answers.answerability`). The closest passages of a question whose evidence is weak are sources
        too. Withheld notes never become sources; the view's tally receives those the retrieval touched."""
        hits = self._retrieved(query, request, view)
        verdict = self.answerability.judge(query, hits, view)
        if verdict == "refuse":
            return [], verdict
        hits = self._with_subsections(query, request, view, hits)
        # Upper bounds first: a block's tokens are its header's plus its text's (WordPiece never joins across the
        # newline), and the text has at most the chunk's indexed token_count. When the bounds fit, every block
        # does, and nothing is counted; otherwise each block is counted exactly.
        bounds = [
            self._count_tokens(f"[{i}] {h.file_path} › {h.symbol}\n") + h.token_bound for i, h in enumerate(hits, 1)
        ]
        if all(h.token_bound for h in hits) and sum(bounds) <= CONTEXT_TOKEN_BUDGET:
            tokens = bounds
        else:
            tokens = [self._count_tokens(f"[{i}] {h.file_path} › {h.symbol}\n{h.text}") for i, h in enumerate(hits, 1)]
        kept = select_within_budget([h.score for h in hits], tokens, CONTEXT_TOKEN_BUDGET)
        return [Source(n=i, hit=hits[k]) for i, k in enumerate(kept, start=1)], verdict

    def _retrieved(self, query: Query, request: SearchRequest, view: CallerView) -> list[Hit]:
        ranked = self.search.ranked(query, view, request, per_note=self.search.PER_NOTE_ASK, purpose="ask")
        view.tally.add(ranked.withheld)
        return list(ranked.hits)

    def _with_subsections(self, query: Query, request: SearchRequest, view: CallerView, hits: list[Hit]) -> list[Hit]:
        """``hits`` with the subsections their sections bring (:func:`~cairn.answers.sections.with_subsections`),
        found among the same ranking's hits beyond them: the ranking of the widest ``top_k`` the contract allows,
        every chunk of a note allowed (the same candidates, floor and view). Ranked only when a hit has a heading
        path."""
        if not any(h.symbol and h.kind != "pdf" for h in hits):
            return hits
        wide = max(request.top_k, LIMITS.top_k_max)
        widest = SearchRequest(request.query, wide, request.tags, request.folders)
        ranked = self.search.ranked(query, view, widest, per_note=wide, purpose="ask")
        taken = {h.chunk_id for h in hits}
        more = [h for h in ranked.hits if h.chunk_id not in taken]
        closeness = functools.partial(self._closeness, query)
        return with_subsections(hits, more, closeness, top_k=request.top_k, per_note=self.search.PER_NOTE_ASK)

    def _closeness(self, query: Query, texts: Sequence[str]) -> list[float]:
        """Each text's cosine similarity to the question (vectors from the embedding cache when it holds them)."""
        vectors = self.search.vector_cache.embed([query.text, *texts])
        return (vectors[1:] @ vectors[0]).tolist()

    def extractive_answer(self, question: str, sources: Sequence[Source]) -> str:
        """The extractive answer's text (:class:`~cairn.answers.extractive.ExtractiveAnswers`)."""
        return self.extractive.answer(question, sources)

    # ------------------------------------------------------------------ the prompt
    def prompt_sources(self, sources: Sequence[Source]) -> list[Source]:
        """The sources that may enter the model's prompt, renumbered 1..n (for a remote model, withheld notes
        dropped)."""
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
            hidden = self.search.views.of(withhold)
            kept = [
                s
                for s in kept
                if not (withhold.note_withheld(s.hit.file_path, s.hit.tags) or hidden.hides_path(s.hit.file_path))
            ]
            mask = hidden.symbol_masker()
            if mask is not None:  # titles of withheld notes reach the prompt through the kept notes' links
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

    # ------------------------------------------------------------------ answers
    async def stream(
        self, request: AskRequest, caller: CallerView | None = None, *, chosen: list[Source] | None = None
    ) -> AsyncIterator[Event]:
        """The events of the answer to ``request`` (checked by the edge contract: trusted here) as ``caller`` sees the
        index (None: the owner): withheld notes are removed before retrieval, and the caller's tally receives those
        the retrieval touched (for the audit log). ``chosen``, when given, receives the :class:`Source` objects of the
        ``sources`` event. ``request.history``: the conversation's earlier turns (module docstring). ``done`` carries
        the index's coverage as this caller sees it (:mod:`cairn.search.indexed`; counted when the answer is
        complete)."""
        view = caller if caller is not None else self.search.views.of(None)
        events = self._events(request, view, chosen)
        try:
            async for event in events:
                if isinstance(event, Done):
                    event = dataclasses.replace(event, coverage=await asyncio.to_thread(self.search.coverage, view))
                yield event
        finally:
            await events.aclose()  # a client gone mid-answer: the model's stream is closed now, not by the GC

    async def _events(
        self, request: AskRequest, view: CallerView, chosen: list[Source] | None
    ) -> AsyncGenerator[Event, None]:
        """:meth:`stream` in the caller's ``view``, without the coverage."""
        started = time.monotonic()
        chosen = chosen if chosen is not None else []
        query = Query.parse(request.question)
        sources, verdict = await asyncio.to_thread(self._followup_context, query, request, view)
        if not sources or verdict != "answer":
            async for event in self._unanswered(query, sources, chosen, started):
                yield event
            return
        in_prompt, blocks = await asyncio.to_thread(self._prompt, sources)
        if in_prompt:
            run = _ModelRun(self.model, [s.n for s in in_prompt])  # type: ignore[arg-type]
            async for token in run.tokens(build_messages(request.question, blocks, request.history)):
                yield token
            unusable = self._unusable(run, request.question, in_prompt)
            if run.sent and unusable is None:
                in_prompt = cited_sources(in_prompt, run.filter.kept)
                chosen[:] = in_prompt
                for event in self._model_tail(run, in_prompt, started):
                    yield event
                return
            if unusable is not None:
                log.warning("the language model's answer is unusable (%s); answering from the passages", unusable)
                async for event in self._fallback(query, sources, chosen, started, run, unusable):
                    yield event
                return
            if run.failure is not None:
                why = _describe(run.failure)
                log.warning("the language model failed, answering from the passages instead: %s", why)
            else:
                log.warning("the language model returned an empty answer; answering from the passages instead")
        text, cited = await asyncio.to_thread(self.extractive.answer_cited, query, sources)
        sources = cited_sources(sources, cited)
        chosen[:] = sources
        for piece in split_pieces(text):
            yield Token(piece)
        yield Sources(tuple(s.to_json() for s in sources))
        yield Done(False, elapsed_ms=_elapsed_ms(started))

    def _followup_context(self, query: Query, request: AskRequest, view: CallerView) -> tuple[list[Source], Verdict]:
        """:meth:`_judged` of a question asked after ``request.history``: retrieved with the last question folded in
        when it refers back (:func:`~cairn.conversation.retrieval_text`), or alone when that finds no answer (the
        subject changed after all; a weak folded one gives way to an answer alone). The extractive answer still
        picks its sentences for ``query``, this turn's question."""
        folded = retrieval_text(query.text, request.history, LIMITS.text_chars)
        found: tuple[list[Source], Verdict] = ([], "refuse")
        if folded != query.text:
            found = self._judged(Query.parse(folded), request, view)
            if found[1] == "answer":
                return found
        alone = self._judged(query, request, view)
        return alone if alone[1] == "answer" or not found[0] else found

    async def _unanswered(
        self, query: Query, sources: list[Source], chosen: list[Source], started: float
    ) -> AsyncGenerator[Event, None]:
        """Without a model call: no sources → the not-found text, ``sources`` ``[]``, ``done`` ``{notFound: true}``;
        weak evidence (the closest passages as sources) → :data:`WEAK_ANSWER_LEAD`, the extractive answer from
        them, its ``sources``, ``done`` ``{grounded: false, weak: true}``."""
        if not sources:
            for piece in split_pieces(NOT_FOUND_ANSWER):
                yield Token(piece)
            yield Sources()
            yield Done(False, not_found=True, elapsed_ms=_elapsed_ms(started))
            return
        text, cited = await asyncio.to_thread(self.extractive.answer_cited, query, sources)
        sources = cited_sources(sources, cited)
        chosen[:] = sources
        for piece in split_pieces(f"{WEAK_ANSWER_LEAD}\n\n{text}"):
            yield Token(piece)
        yield Sources(tuple(s.to_json() for s in sources))
        yield Done(False, elapsed_ms=_elapsed_ms(started), weak=True)

    @staticmethod
    def _unusable(run: _ModelRun, question: str, in_prompt: Sequence[Source]) -> str | None:
        """Why the model's complete answer must be replaced (:mod:`cairn.answers.degenerate`), or ``None``: also when
        it sent nothing or failed (those have their own paths)."""
        if not run.sent or run.failure is not None:
            return None
        passages = {s.n: f"{s.hit.title}\n{s.hit.symbol}\n{s.hit.text}" for s in in_prompt}
        names = [name for s in in_prompt for name in (s.hit.file_path, s.hit.title, s.hit.symbol)]
        return unusable_reason(run.text, question, passages, names)

    async def _fallback(
        self, query: Query, sources: list[Source], chosen: list[Source], started: float, run: _ModelRun, reason: str
    ) -> AsyncGenerator[Event, None]:
        """After an unusable model answer was streamed: ``replace`` with the extractive answer, its ``sources``,
        ``done`` ``{grounded: false, fallback}``."""
        text, cited = await asyncio.to_thread(self.extractive.answer_cited, query, sources)
        sources = cited_sources(sources, cited)
        chosen[:] = sources
        why = f"The language model's answer was set aside: {reason}."
        yield Replace(text, why)
        yield Sources(tuple(s.to_json() for s in sources))
        yield Done(False, elapsed_ms=_elapsed_ms(started), removed_citations=run.filter.removed, fallback=why)

    @staticmethod
    def _model_tail(run: _ModelRun, in_prompt: Sequence[Source], started: float) -> list[Event]:
        """The events after a model's tokens: ``sources`` and ``done``, after ``error`` when it failed mid-answer."""
        sources = tuple(s.to_json() for s in in_prompt)
        removed = run.filter.removed
        if run.failure is None:
            return [Sources(sources), Done(True, elapsed_ms=_elapsed_ms(started), removed_citations=removed)]
        log.warning("the language model failed mid-answer: %s", _describe(run.failure))
        code = run.failure.code if isinstance(run.failure, CairnError) else "llm_error"
        message = "The language model stopped before the answer was complete: " + _describe(run.failure)
        return failure_tail(code, message, _elapsed_ms(started), sources, removed_citations=removed)

    async def answer(self, request: AskRequest, caller: CallerView | None = None) -> Answer:
        """The whole answer at once (for the CLI and MCP): the events of :meth:`stream`, collected.
        ``Answer.withheld`` is the number of withheld notes removed from the candidates (the caller's tally)."""
        caller = caller if caller is not None else self.search.views.of(None)
        parts: list[str] = []
        chosen: list[Source] = []
        final = Done(False)
        error: str | None = None
        async for event in self.stream(request, caller, chosen=chosen):
            if isinstance(event, Token):
                parts.append(event.text)
            elif isinstance(event, Replace):
                parts[:] = [event.text]
            elif isinstance(event, Done):
                final = event
            elif isinstance(event, Failure):
                error = event.message
        return Answer(
            text="".join(parts),
            grounded=final.grounded,
            not_found=final.not_found,
            weak=final.weak,
            sources=list(chosen),
            elapsed_ms=final.elapsed_ms,
            withheld=caller.tally.count,
            error=error,
            coverage=final.coverage,
            fallback=final.fallback,
        )


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no output"
    if isinstance(exc, CairnError):
        return exc.message
    return f"unexpected {type(exc).__name__}"

"""An answer's events and their collected form.

A stream of events is ``Token``…, then ``Sources``, then ``Done``; a failure after tokens were sent is
``Failure``, ``Sources``, ``Done`` (:func:`failure_tail`, the only place that tail is built); a model's answer found
unusable once complete is followed by ``Replace`` (the extractive answer's whole text), ``Sources``, ``Done``.
Each event has its SSE ``name`` and JSON ``data`` (``tuple(event) == (name, data)``) and :meth:`~_Event.sse`, its
SSE frame.

:class:`Source` is a numbered hit (``[n]`` in the answer); :class:`Answer` is a whole answer at once (for the CLI
and MCP). ``token`` events carry the answer's text only: never a list of its sources (:func:`sources_text` renders
one from the ``sources`` for the CLI and the MCP text).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from cairn.contract import IndexCoverage, answer_json, coverage_json, hit_relevance, source_json
from cairn.prompt import source_line, sources_list
from cairn.relevance import RELEVANCE_TEXT
from cairn.search import Hit

_PIECE_RE = re.compile(r"\S+\s*|\s+")


def split_pieces(text: str) -> list[str]:
    """Split an answer into word pieces for ``token`` events; ``"".join(pieces) == text`` exactly.

    Each piece is a word with its trailing whitespace (leading whitespace is its own piece)."""
    return _PIECE_RE.findall(text)


def sse_frame(name: str, data: Any) -> bytes:
    """One SSE frame: ``event: NAME\\ndata: <json on one line>\\n\\n`` (UTF-8)."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"event: {name}\ndata: {payload}\n\n".encode()


class _Event:
    """An event's SSE ``name`` (a class constant) and JSON ``data``."""

    name: ClassVar[str]

    @property
    def data(self) -> Any:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        """``name, data = event``."""
        return iter((self.name, self.data))

    def sse(self) -> bytes:
        return sse_frame(self.name, self.data)


@dataclass(frozen=True, slots=True)
class Token(_Event):
    """A piece of the answer's text: ``token`` ``{text}``."""

    name: ClassVar[str] = "token"
    text: str

    @property
    def data(self) -> dict[str, Any]:
        return {"text": self.text}


@dataclass(frozen=True, slots=True)
class Replace(_Event):
    """``replace`` ``{text, reason}``: the tokens sent so far are not the answer; ``text`` is (the extractive answer,
    sent whole), and ``reason`` says why the model's answer was set aside. Sent at most once, before ``sources``."""

    name: ClassVar[str] = "replace"
    text: str
    reason: str

    @property
    def data(self) -> dict[str, Any]:
        return {"text": self.text, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Sources(_Event):
    """``sources``: the JSON of exactly the chunks the answer was written from (``[]`` when none)."""

    name: ClassVar[str] = "sources"
    sources: tuple[dict[str, Any], ...] = ()

    @property
    def data(self) -> list[dict[str, Any]]:
        return list(self.sources)


@dataclass(frozen=True, slots=True)
class Done(_Event):
    """``done`` ``{grounded, notFound, elapsedMs, removedCitations, coverage, fallback, weak, unsupported}``: the last
    event of every answer (``grounded``: a model wrote it and every sentence stating something is supported by a
    passage it cites, :mod:`cairn.answers.grounding`; ``coverage``: :func:`cairn.contract.coverage_json`, when
    counted; ``fallback``: why the model's answer was replaced, only when it was; ``weak``: true only when the
    evidence was weak and the answer is the closest passages; ``unsupported``: the model's sentences no passage they
    cite supports, ``[{text, cites}]`` in order, only when there are some)."""

    name: ClassVar[str] = "done"
    grounded: bool
    not_found: bool = False
    elapsed_ms: float = 0.0
    removed_citations: int = 0
    coverage: IndexCoverage | None = None
    fallback: str | None = None
    weak: bool = False
    unsupported: tuple[dict[str, Any], ...] = ()

    @property
    def data(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "grounded": self.grounded,
            "notFound": self.not_found,
            "elapsedMs": self.elapsed_ms,
            "removedCitations": self.removed_citations,
        }
        if self.coverage is not None:
            out["coverage"] = coverage_json(self.coverage)
        if self.fallback is not None:
            out["fallback"] = self.fallback
        if self.weak:
            out["weak"] = True
        if self.unsupported:
            out["unsupported"] = [dict(u) for u in self.unsupported]
        return out


@dataclass(frozen=True, slots=True)
class Failure(_Event):
    """``error`` ``{code, message}``: the answer could not be completed."""

    name: ClassVar[str] = "error"
    code: str
    message: str

    @property
    def data(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


Event = Token | Replace | Sources | Done | Failure


def failure_tail(
    code: str,
    message: str,
    elapsed_ms: float,
    sources: tuple[dict[str, Any], ...] = (),
    *,
    removed_citations: int = 0,
    unsupported: tuple[dict[str, Any], ...] = (),
) -> list[Event]:
    """The end of a stream that failed: ``error``, ``sources`` (those the model was given when it failed
    mid-answer, else none), ``done`` (not grounded; ``unsupported``: the sentences of the model's partial answer that
    no passage they cite supports)."""
    return [
        Failure(code, message),
        Sources(sources),
        Done(False, elapsed_ms=elapsed_ms, removed_citations=removed_citations, unsupported=unsupported),
    ]


@dataclass(frozen=True, slots=True)
class Source:
    """A numbered source: ``n`` is the citation number used as ``[n]`` in the answer. ``cited``: the answer's text
    cites it (known once the text is complete; see :func:`cited_sources`)."""

    n: int
    hit: Hit
    cited: bool = False

    def to_json(self) -> dict[str, Any]:
        """``{n, cited, filePath, symbol, score, relevance, lines|page, snippet, ...}`` (docs/design.md, "Contract" →
        Sources; :func:`cairn.contract.source_json`)."""
        return source_json(self)


def cited_sources(sources: Sequence[Source], cited: Collection[int]) -> list[Source]:
    """``sources`` in the same order, each marked ``cited`` when its ``n`` is in ``cited`` (the numbers the answer's
    text cites). The ``sources`` event keeps every source that was in the context, cited or not: the contract is
    "the chunks actually in the prompt"; clients list the uncited ones apart ("Also retrieved")."""
    return [replace(s, cited=s.n in cited) for s in sources]


def sources_text(sources: Sequence[Source]) -> str:
    """``sources`` as text, for the readers that show an answer as one text (the CLI prints it after the answer,
    the MCP ``ask`` text holds it): ``Sources:`` (the cited ones), then ``Also retrieved:`` (the others the answer
    was given); each line ``[n] filePath › symbol (lines a–b) — relevance``. The answer's own text never holds this
    list: the ``sources`` event and field carry the sources."""

    def line(s: Source) -> str:
        h = s.hit
        return source_line(s.n, h.file_path, h.symbol, h.lines, h.page, RELEVANCE_TEXT[hit_relevance(h)])

    return sources_list([line(s) for s in sources if s.cited], [line(s) for s in sources if not s.cited])


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer with its sources. ``grounded`` is true only when a model wrote it and every sentence stating
    something is supported by a passage it cites; the extractive answer (no model) is ``grounded: false``.
    ``not_found`` → the fixed not-found text."""

    text: str
    grounded: bool
    not_found: bool
    sources: list[Source] = field(default_factory=list)
    elapsed_ms: float = 0.0
    #: withheld notes removed from the candidates (for the audit log; not part of to_json)
    withheld: int = 0
    #: the ``error`` event's message when the model stopped mid-answer (``text`` is what it wrote until then)
    error: str | None = None
    #: the notes indexed and those still waiting for vectors, as this caller sees them (``done.coverage``)
    coverage: IndexCoverage | None = None
    #: why the model's answer was replaced by the extractive one (``text``), when it was
    fallback: str | None = None
    #: the evidence was weak: ``text`` says so and gives the closest passages (no model was asked)
    weak: bool = False
    #: the model's sentences in ``text`` that no passage they cite supports: ``{text, cites}`` (``done.unsupported``)
    unsupported: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return answer_json(self)

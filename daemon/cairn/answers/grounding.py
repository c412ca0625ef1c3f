"""Is each sentence of a model's answer supported by a passage it cites? The check behind ``grounded`` and
``unsupported`` (docs/design.md, "Contract" → Grounding).

A model's complete answer is read as sentences (:func:`answer_sentences`): each line of prose, list item or table
row, split at sentence ends; a citation written after the full stop (``… deep. [1]``) belongs to the sentence before
it; headings and fenced code are not sentences. A sentence *states something* when it holds a content word: a word
of 3+ letters that is not a function word or a word about the context ("passage", "source"), or a number. One that
states nothing is not judged, and neither is a lead-in: a sentence ending in ``:`` with at most
:data:`LEAD_IN_WORDS` content words ("Here's how to do it:", "The conflict file name is:").

A sentence that states something is **supported** when a passage it cites (``[n]`` in the sentence itself) says it,
by two measures against those passages:

- ``cosine``: the cosine similarity of the sentence (markdown and citations removed) to the passages' closest
  sentence (their sentence vectors as the index holds them, :func:`cairn.embedding.embedding_texts`);
- ``share``: the share of its content words found in each cited passage's closest sentence (with :data:`SPAN`
  sentences on each side of it) and the passage's title and heading path (words compared by a 5-letter prefix,
  case-folded; numbers as written). Words scattered over the whole passage do not count: a sentence stitched from
  several of its sentences into a claim none of them makes is not supported.

It is supported when ``(cosine + SHARE_WEIGHT × share) / (1 + SHARE_WEIGHT) >= MIN_SCORE``. The constants are set by
k-fold cross-validation on a labelled set of sentences, SmolLM2's real answers among them
(tests/bench/grounding_labels.jsonl, tests/bench/calibrate_grounding.py; figures in docs/grounding.md): the share in
the closest sentence alone decides (about 0.72 of its content words or more), the cosine choosing that sentence and
breaking near-ties; the cosine as a measure of its own did worse on held-out sentences.

A sentence that cites nothing is never supported: ``grounded`` means every sentence is supported *and* cited. Its
measures are still taken, against the passage closest to it (they are what a labelled uncited sentence is
calibrated on).

What the measures cannot see: a fact changed inside a sentence that keeps the passage's words ("15 cm deep" for
"5 cm deep and 15 cm apart") reads as supported.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cairn.embedding import VectorCache, content_hash, embedding_texts
from cairn.passages import clean_markdown_line
from cairn.prompt import CITATION
from cairn.ranking import STOPWORDS

#: A sentence's score is (cosine + SHARE_WEIGHT × share) / (1 + SHARE_WEIGHT); it is supported from MIN_SCORE up
#: (module docstring; both set by cross-validation, docs/grounding.md).
SHARE_WEIGHT = 16.0
MIN_SCORE = 0.725
#: The sentences on each side of a passage's closest sentence whose words count for the share (``None``: the whole
#: passage); set by the same cross-validation.
SPAN = 0
#: Most content words of a lead-in (a sentence ending in ``:`` that introduces what follows).
LEAD_IN_WORDS = 3

_FENCE = re.compile(r"^\s*(?:>\s*)*(```|~~~)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
_MARKER = re.compile(r"^\s*(?:>\s*)*(?:(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?)?")
#: A sentence end: ``.``, ``!`` or ``?`` (with the citations written after it), then space and what opens a sentence.
_END = re.compile(r"[.!?](?:\s*\[\d{1,3}\])*(?=\s+(?!\[\d)[\"'“(\[*_`]?[A-Z0-9])")
_WORD = re.compile(r"[^\W\d_]{2,}(?:['’][^\W\d_]+)?|\d+(?:[.,]\d+)*")
#: Words a model writes about its context rather than from it.
_ABOUT_CONTEXT = frozenset("passage passages context note notes source sources according answer question".split())


@dataclass(frozen=True, slots=True)
class Passage:
    """A passage the model was given, as ``[n]``: its note's title, heading path (``symbol``), text and kind."""

    title: str
    symbol: str
    text: str
    kind: str = "text"


@dataclass(frozen=True, slots=True)
class AnswerSentence:
    """One sentence of an answer: ``text`` exactly as written (``answer[start:end]``, citations included), the
    numbers it cites, in order."""

    text: str
    start: int
    end: int
    cites: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CheckedSentence:
    """A sentence and its check. ``states``: it holds a content word (else it is not judged, and ``cosine`` and
    ``share`` are 0); ``supported``: a passage it cites supports it (never when it cites none)."""

    sentence: AnswerSentence
    states: bool
    cosine: float
    share: float
    supported: bool

    def to_json(self) -> dict[str, Any]:
        """``{text, cites}``: an item of ``unsupported`` in ``done`` and the JSON answer."""
        return {"text": self.sentence.text, "cites": list(self.sentence.cites)}


@dataclass(frozen=True, slots=True)
class Grounding:
    """The check of a whole answer, sentence by sentence (in order)."""

    sentences: tuple[CheckedSentence, ...]

    @property
    def stating(self) -> tuple[CheckedSentence, ...]:
        return tuple(s for s in self.sentences if s.states)

    @property
    def unsupported(self) -> tuple[CheckedSentence, ...]:
        """The sentences that state something no passage they cite supports (those citing nothing included)."""
        return tuple(s for s in self.stating if not s.supported)

    @property
    def grounded(self) -> bool:
        """Something is stated and every sentence stating something is supported by a passage it cites."""
        return bool(self.stating) and not self.unsupported

    @property
    def anchored(self) -> bool:
        """At least one sentence is supported by a passage it cites."""
        return any(s.supported for s in self.stating)

    @property
    def cites_anything(self) -> bool:
        return any(s.sentence.cites for s in self.sentences)


def answer_sentences(text: str) -> list[AnswerSentence]:
    """The sentences of a markdown answer (module docstring), in order; their ``text`` is stripped of list markers,
    quote markers and surrounding space."""
    out: list[AnswerSentence] = []
    in_code = False
    at = 0
    for line in text.splitlines(keepends=True):
        start, at = at, at + len(line)
        if _FENCE.match(line):
            in_code = not in_code
            continue
        if in_code or _HEADING.match(line) or not line.strip():
            continue
        marker = _MARKER.match(line)
        out.extend(_split_line(text, start + (marker.end() if marker else 0), start + len(line.rstrip())))
    return out


def _split_line(text: str, start: int, end: int) -> Iterator[AnswerSentence]:
    """The sentences of ``text[start:end]`` (one line without its marker)."""
    line = text[start:end]
    cut = 0
    for m in [*_END.finditer(line), None]:
        stop = m.end() if m is not None else len(line)
        piece = line[cut:stop]
        lead = len(piece) - len(piece.lstrip())
        body = piece.strip()
        if body:
            s = start + cut + lead
            yield AnswerSentence(body, s, s + len(body), tuple(dict.fromkeys(int(n) for n in CITATION.findall(body))))
        cut = stop


def content_words(text: str) -> list[str]:
    """The content words of ``text`` (module docstring), citations left out, lower-cased, in order."""
    words = (w.lower() for w in _WORD.findall(CITATION.sub(" ", text)))
    return [w for w in words if w[0].isdigit() or (len(w) >= 3 and w not in STOPWORDS and w not in _ABOUT_CONTEXT)]


def stated_words(sentence: str) -> list[str]:
    """The content words of a sentence that states something; ``[]`` for one that does not (none, or a lead-in)."""
    words = content_words(sentence)
    if len(words) <= LEAD_IN_WORDS and CITATION.sub("", sentence).rstrip(" *_").endswith(":"):
        return []
    return words


def _key(word: str) -> str:
    return word if word[0].isdigit() else word[:5]


def word_share(words: Sequence[str], pool: str) -> float:
    """The share of ``words`` (:func:`content_words`) whose 5-letter prefix (a number: itself) occurs in ``pool``."""
    if not words:
        return 0.0
    known = {_key(w.lower()) for w in _WORD.findall(pool)}
    return sum(1 for w in words if _key(w) in known) / len(words)


class SentenceCheck:
    """Checks answers against their passages (:meth:`check`). The passages' sentence vectors come from the store's
    embedding cache (the index made them), so a check embeds only the answer's sentences. Thread-safe."""

    def __init__(
        self,
        vectors: VectorCache,
        *,
        share_weight: float = SHARE_WEIGHT,
        min_score: float = MIN_SCORE,
        span: int | None = SPAN,
    ) -> None:
        self.vectors = vectors
        self.share_weight = share_weight
        self.min_score = min_score
        self.span = span

    def check(self, text: str, passages: Mapping[int, Passage]) -> Grounding:
        """Each sentence of ``text`` judged against the passages it cites (``passages``: ``{n: passage}``, those the
        model was given; a citation of another number counts as none)."""
        sentences = answer_sentences(text)
        measured = self.measure(sentences, passages)
        return Grounding(
            tuple(
                CheckedSentence(
                    s, bool(words), cos, share, bool(words) and self.supports(cos, share, s.cites, passages)
                )
                for s, (words, cos, share) in zip(sentences, measured)
            )
        )

    def supports(self, cosine: float, share: float, cites: Sequence[int], passages: Mapping[int, Passage]) -> bool:
        """A sentence with these measures is supported: it cites a passage given, and its score is high enough."""
        score = (cosine + self.share_weight * share) / (1 + self.share_weight)
        return any(n in passages for n in cites) and score >= self.min_score

    def measure(
        self, sentences: Sequence[AnswerSentence], passages: Mapping[int, Passage]
    ) -> list[tuple[list[str], float, float]]:
        """(content words, cosine, share) of each sentence, against the passages it cites: the cosine to their
        closest sentence, and the share of its content words found around each cited passage's closest sentence
        (:meth:`_window`). A sentence citing none of them is measured against the passage closest to it."""
        words = [stated_words(s.text) for s in sentences]
        claims = [i for i, w in enumerate(words) if w]
        out: list[tuple[list[str], float, float]] = [(w, 0.0, 0.0) for w in words]
        if not claims or not passages:
            return out
        own = self.vectors.embed([_plain(sentences[i].text) for i in claims])
        inner = {n: self._sentence_vectors(p) for n, p in passages.items()}
        for row, i in enumerate(claims):
            cited = [n for n in sentences[i].cites if n in passages]
            closest = {n: _closest(inner[n][1] @ own[row]) for n in cited or passages}
            if not cited:  # measured as if it cited the passage closest to it
                cited = [max(closest, key=lambda n: closest[n][0])]
            windows = [self._window(passages[n], inner[n][0], closest[n][1]) for n in cited]
            out[i] = (words[i], max(closest[n][0] for n in cited), word_share(words[i], " ".join(windows)))
        return out

    def _window(self, passage: Passage, sentences: Sequence[str], at: int) -> str:
        """The text around a passage's sentence ``at``: its title, heading path, the sentence and :attr:`span`
        sentences on each side of it (the whole passage when ``span`` is ``None``)."""
        if self.span is None:
            return f"{passage.title} {passage.symbol} {passage.text}"
        return " ".join([passage.title, passage.symbol, *sentences[max(0, at - self.span) : at + self.span + 1]])

    def _sentence_vectors(self, passage: Passage) -> tuple[list[str], np.ndarray]:
        """The passage's sentences as the index embeds them (its title when it has none), and their vectors."""
        texts = embedding_texts(passage.symbol, passage.text, passage.kind) or [passage.title]
        return texts, self.vectors.stored_or_embedded(texts, [content_hash(t) for t in texts])


def _closest(cosines: np.ndarray) -> tuple[float, int]:
    """(the highest cosine, its index)."""
    at = int(np.argmax(cosines))
    return float(cosines[at]), at


def _plain(sentence: str) -> str:
    """A sentence as it is embedded: citations and markdown removed."""
    return clean_markdown_line(CITATION.sub("", sentence)) or sentence

"""Exact words: which chunks hold a query's words as typed (case-folded), punctuation included.

The keyword index sees words as FTS5 tokenizes them: ``.obsidian`` is ``obsidian``, ``C++`` is ``c``, ``copying`` is
the stem ``copi`` (also that of ``copy``), and prefix and typo expansion add more tokens. Obsidian's own search
matches the text itself. A query word's *literal* (:func:`literal_form`) is its text NFKC-normalised and
case-folded; a text holds it when it occurs there with no word character (``\\w``) right before or right after it
(:func:`literal_count`): ``.obsidian`` is in "the `.obsidian` folder" but not in "help.obsidian.md", ``copying``
not in "copy".

Finding the holders never scans every chunk: a text holding a literal holds its FTS5 tokens in order, so the
candidates are the chunks matching that phrase, and only their texts are read and checked
(:class:`LiteralFinder`), at most :data:`MAX_CHECKED` of them (the best BM25 of the phrase first).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from cairn.search.query import query_terms
from cairn.search.syntax import And, Node, Or, Phrase, Word

#: At most this many candidate chunks of one literal have their text read and checked (a literal whose tokens are
#: common words: ``.obsidian`` in a vault about Obsidian).
MAX_CHECKED = 3000

_WORD_CHAR = re.compile(r"\w", re.UNICODE)
_PUNCTUATION = re.compile(r"[^\w\s.?!,;:'’\"]", re.UNICODE)


_SENTENCE_END = re.compile(r"[.?!,;:]+$")


def literal_form(text: str) -> str | None:
    """``text`` (one query word or phrase) NFKC-normalised, case-folded and stripped, without the punctuation that
    ends a sentence or clause after it (``fridge?``, ``notes,``); None when it holds no word character (``++``,
    ``->``: nothing a keyword index can find candidates for)."""
    folded = unicodedata.normalize("NFKC", text).casefold().strip()
    folded = _SENTENCE_END.sub("", folded) or folded
    return folded if _WORD_CHAR.search(folded) else None


def counts_as_word(text: str) -> bool:
    """Whether a query word is one a person means to find: it has a search term (:func:`cairn.search.query
    .query_terms`: not only stopwords) or holds punctuation (``C++``, ``[!info]``)."""
    return bool(query_terms(text)) or bool(_PUNCTUATION.search(text))


@functools.lru_cache(maxsize=256)
def _pattern(literal: str) -> re.Pattern[str]:
    # no look-behind: a pattern that starts with its literal is searched for as a string (fast); the character
    # before each match is checked by the caller
    return re.compile(re.escape(literal) + r"(?!\w)", re.UNICODE)


def fold(text: str) -> str:
    """``text`` as literals are looked for in it: NFKC-normalised and case-folded."""
    return unicodedata.normalize("NFKC", text).casefold()


def literal_count(folded: str, literal: str) -> int:
    """How many times ``literal`` occurs in ``folded`` (a :func:`fold`-ed text) with no word character right
    before or after it."""
    if literal not in folded:  # the cheap test first: most candidates of a common token fail it
        return 0
    before = _WORD_CHAR.match
    return sum(1 for m in _pattern(literal).finditer(folded) if not (m.start() and before(folded, m.start() - 1)))


def query_literals(root: Node) -> tuple[tuple[Word | Phrase, str], ...]:
    """(word or phrase, its literal) of each positive word and phrase of a parsed query (not under an exclusion)
    that :func:`counts_as_word` (every phrase), in order, de-duplicated by literal."""
    out: dict[str, Word | Phrase] = {}
    for leaf in _positive(root):
        lit = literal_form(leaf.text)
        if lit is not None and (isinstance(leaf, Phrase) or counts_as_word(leaf.text)):
            out.setdefault(lit, leaf)
    return tuple((leaf, lit) for lit, leaf in out.items())


def _positive(node: Node) -> Iterable[Word | Phrase]:
    if isinstance(node, Word | Phrase):
        yield node
    elif isinstance(node, And | Or):
        for item in node.items:
            yield from _positive(item)


def punctuated(literals: Iterable[str]) -> tuple[str, ...]:
    """The ``literals`` holding something other than word characters and spaces (``.obsidian``, ``c++``)."""
    return tuple(lit for lit in literals if re.search(r"[^\w\s]", lit))


def names_hold(names: Sequence[str], literals: Sequence[str]) -> bool:
    """Whether one of ``names`` (a note's title and aliases) holds every one of ``literals``."""
    return any(all(literal_count(fold(name), lit) for lit in literals) for name in names)


def passage_share(text: str, literals: Sequence[str]) -> float:
    """The share (0..1) of ``literals`` that ``text`` (a passage: title, heading path and text) holds; 0 for
    none."""
    if not literals:
        return 0.0
    folded = fold(text)
    return sum(literal_count(folded, lit) > 0 for lit in literals) / len(literals)


@dataclass(frozen=True)
class Literals:
    """The chunks holding a query's literals. ``literals``: one per clause, in query order; ``counts``: chunk id →
    occurrences of each literal ((len(literals),) tuple); ``bm25``: chunk id → the summed BM25 of the literals it
    holds (positive: each literal scored as one more term of the query, from its own occurrences and chunk
    counts)."""

    literals: tuple[str, ...]
    counts: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    bm25: Mapping[int, float] = field(default_factory=dict)

    def held(self, chunk_id: int) -> int:
        """How many of the literals chunk ``chunk_id`` holds."""
        return sum(n > 0 for n in self.counts.get(chunk_id, ()))

    def by_note(self, notes: Callable[[np.ndarray], np.ndarray]) -> dict[int, int]:
        """Note id → how many of the literals the note holds (in any of its chunks); ``notes``: chunk ids (k,) →
        their note ids (k,), -1 for none."""
        if not self.counts:
            return {}
        ids = np.fromiter(self.counts, dtype=np.int64, count=len(self.counts))
        owner = notes(ids)
        held = np.asarray([[n > 0 for n in self.counts[c]] for c in ids.tolist()], dtype=bool)
        out: dict[int, int] = {}
        for i in range(held.shape[1]):
            for note in np.unique(owner[held[:, i] & (owner >= 0)]).tolist():
                out[note] = out.get(note, 0) + 1
        return out

    def best_first(self) -> list[int]:
        """The chunks holding a literal, the best literal BM25 first (ties by chunk id)."""
        return sorted(self.counts, key=lambda c: (-self.bm25.get(c, 0.0), c))


class LiteralFinder:
    """Finds the chunks holding each literal of a query (module docstring), as one caller sees the texts.

    ``candidates(text)``: (chunk ids, BM25 < 0) of the chunks matching the FTS5 phrase of a word's tokens;
    ``texts(ids)``: {chunk id: the text searched (title, heading path, text as the caller is shown them)};
    ``score(found)``: one literal's score (> 0) of each chunk holding it, from {chunk id: occurrences}."""

    def __init__(
        self,
        candidates: Callable[[str], tuple[np.ndarray, np.ndarray]],
        texts: Callable[[Sequence[int]], Mapping[int, str]],
        score: Callable[[Mapping[int, int]], Mapping[int, float]],
    ) -> None:
        self.candidates = candidates
        self.texts = texts
        self.score = score

    def find(self, words: Sequence[tuple[Word | Phrase, str]], excluding: Mapping[int, int] | None = None) -> Literals:
        """The :class:`Literals` of ``words`` ((word, its literal) each): chunks in ``excluding`` never count."""
        literals = tuple(lit for _, lit in words)
        counts: dict[int, list[int]] = {}
        bm25: dict[int, float] = {}
        for i, (word, lit) in enumerate(words):
            ids, values = self.candidates(word.text)
            if excluding:
                keep = np.fromiter((int(c) not in excluding for c in ids), dtype=bool, count=len(ids))
                ids, values = ids[keep], values[keep]
            if len(ids) > MAX_CHECKED:
                best = np.argsort(values, kind="stable")[:MAX_CHECKED]
                ids = ids[np.sort(best)]
            texts = self.texts(ids.tolist())
            found = {c: n for c, t in texts.items() if (n := literal_count(fold(t), lit))}
            if not found:
                continue
            for c, value in self.score(found).items():
                counts.setdefault(c, [0] * len(words))[i] = found[c]
                bm25[c] = bm25.get(c, 0.0) + value
        return Literals(literals, {c: tuple(n) for c, n in counts.items()}, bm25)

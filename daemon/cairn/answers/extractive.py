"""The extractive answer: the sources' sentences that best answer a question, each followed by its ``[n]`` (the
sources themselves travel apart, marked ``cited`` or not). Built when there is no model, or the model fails or says
nothing; ``grounded: false``."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass

from cairn.answers.events import Source
from cairn.embedding import VectorCache, content_hash, title_hash
from cairn.notes import strip_block_ids
from cairn.passages import Unit, passage_units
from cairn.prompt import Sentence, candidate_sentences, extractive_body, pick_sentences, token_overlap
from cairn.search import EpochLRU, Query

#: Marks a title's key in the similarity table (a title may read like a sentence).
_TITLE = "\x1ftitle"
#: The units that open a FAQ entry: a question, a heading that asks one.
_OPENERS = ("question", "heading")


class ExtractiveAnswers:
    """Extractive answers (module docstring), kept in memory (LRU, :attr:`MAX_ITEMS`) by question and sources:
    the text depends on nothing else. Thread-safe.

    Candidates are the sources' units (:func:`cairn.passages.passage_units`), each scored with the vector of the
    sentence the indexer embedded for it (:class:`IndexedSentences`: most units are that very text; the others —
    a link's display text kept, a callout title apart, a FAQ question whole — differ by a few words), as are the
    titles: their vectors are read from the store's embedding cache, so an answer over indexed notes embeds nothing
    but the question. Only a sentence changed since (a redacted link, a chunk not embedded yet) is embedded."""

    #: Weight of the source note's title cosine added to each sentence's own cosine: the title carries the
    #: subject a sentence often leaves out ("Garlic" for "Plant cloves in October, 5 cm deep"). Tuned on the dev
    #: set's in-corpus questions.
    TITLE_PRIOR = 0.3
    #: A FAQ question (a question line or a heading that asks one) at least this close to the question (cosine)
    #: asks what it asks, in other words: "What encryption do you use?" for "Which cipher does Sync use?". Set
    #: between the help vault's FAQ questions on another matter and those asking the same thing (docs/extractive.md).
    ASKED_COSINE = 0.55
    MAX_ITEMS = 256

    def __init__(self, vectors: VectorCache) -> None:
        self.vectors = vectors
        self._texts: EpochLRU[tuple, tuple[str, frozenset[int]]] = EpochLRU(self.MAX_ITEMS)

    def answer(self, question: Query | str, sources: Sequence[Source]) -> str:
        """The answer's text: :meth:`answer_cited`'s text."""
        return self.answer_cited(question, sources)[0]

    def answer_cited(self, question: Query | str, sources: Sequence[Source]) -> tuple[str, frozenset[int]]:
        """(the answer's text, the numbers ``n`` of the sources it cites). Pick the sentences that best answer
        ``question``: each candidate sentence's cosine similarity to the question plus TITLE_PRIOR × its note
        title's, plus a keyword-overlap bonus (sentence read with its title and heading) and a small prior for
        better-ranked sources. A FAQ answer (a sentence in the entry a question or a question heading opens)
        matches at least as well as its question does, cosine and bonus: "What encryption do you use?" carries the
        subject that "We use AES-256 in Galois/Counter Mode." leaves out; and the answer of the FAQ entry whose
        question asks what the question asks, in other words, is quoted (:func:`_asked_answer_first`). When no
        sentence is picked the text says the passages look relevant, and all count as cited."""
        query = question if isinstance(question, Query) else Query.parse(question)
        key = (
            query.text,
            tuple(
                (s.n, s.hit.title, s.hit.file_path, s.hit.symbol, s.hit.text, s.hit.lines, s.hit.page) for s in sources
            ),
        )
        held = self._texts.get(key)
        if held is None:
            held = self._compose(query, sources)
            self._texts.put(key, held)
        return held

    def _compose(self, query: Query, sources: Sequence[Source]) -> tuple[str, frozenset[int]]:
        candidates = self._candidates(sources)
        picked = pick_sentences(one_entry_each(self._scored(query, candidates))) if candidates else []
        cited = frozenset(s.n for s in picked) or frozenset(s.n for s in sources)
        return extractive_body(picked), cited

    @staticmethod
    def _candidates(sources: Sequence[Source]) -> list[_Candidate]:
        """Every quotable unit of the sources but a chunk's cut-off start and callout titles."""
        out: list[_Candidate] = []
        for s in sources:
            context = " › ".join(p for p in (s.hit.title, s.hit.symbol) if p)
            quoted = passage_units(s.hit.text, attach_code=True)[:40]
            # The same units without a code block appended to "…:", as the indexer embeds such a sentence.
            plain = passage_units(s.hit.text)[:40]
            if len(plain) != len(quoted):
                plain = quoted
            indexed = IndexedSentences(candidate_sentences(s.hit.text, min_words=3))
            for pos, (unit, embedded) in enumerate(zip(quoted, plain)):
                if unit.kind in ("fragment", "title"):
                    continue
                sent = strip_block_ids(unit.text)  # quoted without its ``^blockid``; scored on what was embedded
                scored_as = indexed.counterpart(embedded.text)
                out.append(_Candidate(s.n, pos, sent, f"{context}: {sent}", scored_as, s.hit.title, unit))
        return out

    def _scored(self, query: Query, candidates: list[_Candidate]) -> list[tuple[Sentence, int, float]]:
        """(sentence, its FAQ entry, how well it matches the question alone: cosine + keyword bonus)."""
        qvec = self.vectors.embed([query.text])[0]
        sentences = list(dict.fromkeys(c.embedded for c in candidates))
        titles = list(dict.fromkeys(c.title for c in candidates))
        vecs = self.vectors.stored_or_embedded(
            [*sentences, *titles], [*map(content_hash, sentences), *map(title_hash, titles)]
        )
        sim = dict(zip([*sentences, *((_TITLE, t) for t in titles)], (vecs @ qvec).tolist()))
        terms = query.terms
        owns = [sim[c.embedded] + 0.15 * token_overlap(terms, c.in_context) for c in candidates]
        asked: dict[tuple[int, int], float] = {}  # (source, FAQ entry) → how well its question matches
        for c, own in zip(candidates, owns):
            if c.unit.kind in _OPENERS:
                asked[(c.n, c.unit.entry)] = max(own, asked.get((c.n, c.unit.entry), -1.0))
        out = []
        for c, own in zip(candidates, owns):
            if c.unit.kind not in _OPENERS:  # a FAQ answer matches as well as its question does
                own = max(own, asked.get((c.n, c.unit.entry), own))
            score = own + self.TITLE_PRIOR * sim[(_TITLE, c.title)] - 0.01 * (c.n - 1)
            u = c.unit
            sentence = Sentence(c.n, c.position, c.text, score, u.kind, u.paragraph, u.refers_back)
            out.append((sentence, u.entry, own))
        return _asked_answer_first(out, [sim[c.embedded] for c in candidates], self.ASKED_COSINE)


def _asked_answer_first(
    scored: list[tuple[Sentence, int, float]],
    cosines: Sequence[float],
    asked_cosine: float,
) -> list[tuple[Sentence, int, float]]:
    """``scored`` (rows as :meth:`ExtractiveAnswers._scored` makes them; ``cosines``: each row's own cosine to the
    question) with the answer of the FAQ entry that asks the question raised to the best score. That entry is the
    one whose question matches best (cosine and keyword bonus, as :func:`one_entry_each` picks), when that
    question's cosine is at least ``asked_cosine``. Only its best sentence is raised (the first on a tie): it is
    then quoted, with what follows it as any quoted sentence, whatever its note's title — the author wrote it for
    that question, though its words may name neither the question's subject nor its terms ("Specifically, we use
    AES-256 …" under "What encryption do you use?"). The rest of the entry competes as before, so a FAQ question
    that only looks like the question adds a sentence and pushes out little."""
    openers = [(own, cosines[i], s.n, entry) for i, (s, entry, own) in enumerate(scored) if s.kind in _OPENERS]
    if not openers:
        return scored
    _, cosine, n, entry = max(openers)
    answer = [i for i, (s, e, _) in enumerate(scored) if s.n == n and e == entry and s.kind not in _OPENERS]
    if cosine < asked_cosine or not answer:
        return scored
    first = max(answer, key=lambda i: (scored[i][0].score, -scored[i][0].position))
    top = max(s.score for s, _, _ in scored)
    sentence, at_entry, own = scored[first]
    if sentence.score >= top:
        return scored
    out = list(scored)
    out[first] = (dataclasses.replace(sentence, score=top + 1e-6), at_entry, own)
    return out


class IndexedSentences:
    """The sentences the indexer embedded for one chunk (:func:`cairn.prompt.candidate_sentences`, as
    :func:`cairn.embedding.embedding_texts` reads it), to score a unit with a vector the store already holds."""

    #: Share of words two texts must have in common (Jaccard) for one to be scored as the other.
    SAME_WORDS = 0.6

    def __init__(self, sentences: Sequence[str]) -> None:
        self.sentences = list(sentences)
        self._set = set(self.sentences)
        self._words = [set(re.findall(r"\w+", t.lower())) for t in self.sentences]

    def counterpart(self, text: str) -> str:
        """The indexed sentence ``text`` stands for: itself when indexed as it is; else the one holding it (a unit
        the indexer read with a callout title or a trailing tag attached), or held in it (a FAQ question of two
        sentences), or sharing :data:`SAME_WORDS` of its words (a link whose display text the indexer lost); else
        ``text`` (embedded when scored)."""
        if text in self._set:
            return text
        for s in self.sentences:
            if text in s or (s in text and 2 * len(s) >= len(text)):
                return s
        words = set(re.findall(r"\w+", text.lower()))
        best, best_share = text, self.SAME_WORDS
        for s, other in zip(self.sentences, self._words):
            share = len(words & other) / max(1, len(words | other))
            if share >= best_share:
                best, best_share = s, share
        return best


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A unit of source ``n`` at ``position``: ``text`` as quoted (block-id markers left out), ``in_context`` (with
    the note title and heading path, for the keyword bonus), ``embedded`` (the text the indexer embedded)."""

    n: int
    position: int
    text: str
    in_context: str
    embedded: str
    title: str
    unit: Unit


#: How far below the best-matching FAQ question of an answer another passage's question may match and still give
#: its entry's sentences (cosine + keyword bonus).
ENTRY_MARGIN = 0.1


def one_entry_each(scored: Sequence[tuple[Sentence, int, float]]) -> list[Sentence]:
    """The sentences an answer may quote: from a passage holding FAQ questions, only those of the entry whose
    question best matches the question (its questions included), and only when that question matches within
    :data:`ENTRY_MARGIN` of the best question of all the passages; what precedes a passage's first question is left
    out then (the end of an entry whose question is in another passage, or the FAQ's heading). Passages without a
    question give all their sentences."""
    entries: dict[tuple[int, int], float] = {}
    for s, entry, own in scored:
        if s.kind in ("question", "heading"):
            entries[(s.n, entry)] = max(own, entries.get((s.n, entry), -1.0))
    if not entries:
        return [s for s, _, _ in scored]
    best_of: dict[int, tuple[float, int]] = {}
    for (n, entry), match in entries.items():
        if n not in best_of or match > best_of[n][0]:
            best_of[n] = (match, entry)
    top = max(match for match, _ in best_of.values())
    keep = {n: entry for n, (match, entry) in best_of.items() if match >= top - ENTRY_MARGIN}
    return [s for s, entry, _ in scored if s.n not in best_of or keep.get(s.n) == entry]

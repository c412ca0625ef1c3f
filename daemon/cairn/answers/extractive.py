"""The extractive answer: the sources' sentences that best answer a question, each followed by its ``[n]`` (the
sources themselves travel apart, marked ``cited`` or not). Built when there is no model, or the model fails or says
nothing; ``grounded: false``."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from cairn.answers.compose import NOTHING_QUOTED, Piece, compose, question_shape
from cairn.answers.events import Source
from cairn.embedding import VectorCache, content_hash, title_hash
from cairn.notes import strip_block_ids
from cairn.passages import Unit, passage_units
from cairn.prompt import candidate_sentences
from cairn.search import EpochLRU, Query

#: Marks a title's key in the similarity table (a title may read like a sentence).
_TITLE = "\x1ftitle"
#: The units that open a FAQ entry: a question, a heading that asks one.
_OPENERS = ("question", "heading")
#: Units read per source at most.
_MAX_UNITS = 60
#: Words a unit needs to be scored (a shorter list item is quoted with its list only).
_MIN_WORDS = 4


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
    #: Weight of the share of the question's terms a unit holds (read with its title and headings; rare terms weigh
    #: more: :func:`_held_shares`), added to its cosine.
    HELD_WEIGHT = 0.6
    #: Taken off a unit's score per rank of its source below the first.
    RANK_STEP = 0.03
    #: Added to a step of a numbered list when the question asks how to do something (the procedure answers it).
    STEP_PRIOR = 0.1
    #: A FAQ question (a question line or a heading that asks one) at least this close to the question (cosine)
    #: asks what it asks, in other words: "What encryption do you use?" for "Which cipher does Sync use?". Set
    #: between the help vault's FAQ questions on another matter and those asking the same thing (docs/extractive.md).
    ASKED_COSINE = 0.55
    MAX_ITEMS = 256

    def __init__(self, vectors: VectorCache) -> None:
        self.vectors = vectors
        self._readings: EpochLRU[tuple, Reading] = EpochLRU(self.MAX_ITEMS)

    def answer(self, question: Query | str, sources: Sequence[Source]) -> str:
        """The answer's text: :meth:`answer_cited`'s text."""
        return self.answer_cited(question, sources)[0]

    def answer_cited(self, question: Query | str, sources: Sequence[Source]) -> tuple[str, frozenset[int]]:
        """(the answer's text, the numbers ``n`` of the sources it cites): :meth:`read`'s. Each unit of the sources is
        scored for the question: its cosine similarity to the question plus TITLE_PRIOR × its note title's, plus
        HELD_WEIGHT × the share of the question's terms it holds (read with its title and headings), less RANK_STEP
        per rank of its source, plus STEP_PRIOR for a step of a procedure when the question asks how to do
        something. A FAQ answer (a sentence in the entry a question or a question heading opens) matches at least as
        well as its question does, cosine and bonus: "What encryption do you use?" carries the subject that "We use
        AES-256 in Galois/Counter Mode." leaves out; and the answer of the FAQ entry whose question asks what the
        question asks, in other words, is quoted (:func:`_asked_answer_first`). The text is composed in the note's
        shape from those scores (:func:`cairn.answers.compose.compose`). When nothing can be quoted the text says the
        passages look relevant, and all count as cited."""
        reading = self.read(question, sources)
        return reading.text, reading.cited

    def read(self, question: Query | str, sources: Sequence[Source]) -> Reading:
        """The :class:`Reading` of ``sources`` for ``question`` (the answer's text and what it says of the answer)."""
        query = question if isinstance(question, Query) else Query.parse(question)
        key = (
            query.text,
            tuple(
                (s.n, s.hit.title, s.hit.file_path, s.hit.symbol, s.hit.text, s.hit.lines, s.hit.page) for s in sources
            ),
        )
        held = self._readings.get(key)
        if held is None:
            held = self._read(query, sources)
            self._readings.put(key, held)
        return held

    def _read(self, query: Query, sources: Sequence[Source]) -> Reading:
        candidates = self._candidates(sources)
        if not candidates:
            return Reading(NOTHING_QUOTED, frozenset(s.n for s in sources))
        shape = question_shape(query.text)
        pieces, signals = self._scored(query, candidates, how_to=shape == "how_to")
        by_n = {s.n: s for s in sources}
        composed = compose(one_entry_each(pieces), shape, lambda p: where(by_n[p.n], p.unit))
        cited = composed.cited or frozenset(s.n for s in sources)
        if composed.best is None:
            return Reading(composed.text, cited)
        cosine, held = signals[(composed.best.n, composed.best.position)]
        return Reading(composed.text, cited, cosine, held)

    @staticmethod
    def _candidates(sources: Sequence[Source]) -> list[_Candidate]:
        """Every unit of the sources but a chunk's cut-off start (list items and titles of any length: those too short
        to be scored are quoted with their list only)."""
        out: list[_Candidate] = []
        for s in sources:
            context = " › ".join(p for p in (s.hit.title, s.hit.symbol) if p)
            quoted = passage_units(s.hit.text, attach_code=True, all_items=True)[:_MAX_UNITS]
            # The same units without a code block appended to "…:", as the indexer embeds such a sentence.
            plain = passage_units(s.hit.text, all_items=True)[:_MAX_UNITS]
            if len(plain) != len(quoted):
                plain = quoted
            indexed = IndexedSentences(candidate_sentences(s.hit.text, min_words=3))
            for pos, (unit, embedded) in enumerate(zip(quoted, plain)):
                if unit.kind == "fragment":
                    continue
                sent = strip_block_ids(unit.text)  # quoted without its ``^blockid``; scored on what was embedded
                scored = unit.kind != "title" and (len(sent.split()) >= _MIN_WORDS or unit.kind in _OPENERS)
                scored_as = indexed.counterpart(embedded.text) if scored else ""
                where_in = " › ".join(x for x in (context, unit.heading, unit.label) if x)
                section = f"{s.hit.file_path}\x1f{s.hit.symbol}"
                out.append(
                    _Candidate(
                        s.n, pos, sent, f"{where_in}: {sent}", scored_as, s.hit.title, unit, s.hit.file_path, section
                    )
                )
        return out

    def similarities(self, query: Query, candidates: Sequence[_Candidate]) -> dict[object, float]:
        """Cosine to the question of each candidate's embedded sentence (keyed by that text) and of each note title
        (keyed ``(_TITLE, title)``), the vectors read from the store's embedding cache or embedded when absent."""
        qvec = self.vectors.embed([query.text])[0]
        sentences = list(dict.fromkeys(c.embedded for c in candidates if c.embedded))
        titles = list(dict.fromkeys(c.title for c in candidates))
        vecs = self.vectors.stored_or_embedded(
            [*sentences, *titles], [*map(content_hash, sentences), *map(title_hash, titles)]
        )
        return dict(zip([*sentences, *((_TITLE, t) for t in titles)], (vecs @ qvec).tolist()))

    def _scored(
        self, query: Query, candidates: list[_Candidate], *, how_to: bool = False
    ) -> tuple[list[tuple[Piece, int, float]], dict[tuple[int, int], tuple[float, float]]]:
        """(piece, its FAQ entry, how well it matches the question alone: cosine + keyword bonus) per candidate, and
        per (source, position) of a scored one its (cosine, share of the question's terms held with its title and
        heading). An item too short to be scored (a step "Open **Settings**.") scores nothing: it is quoted with its
        list only."""
        sim = self.similarities(query, candidates)
        held_by = _held_shares(query.terms, [c.in_context if c.embedded else None for c in candidates])
        signals: dict[tuple[int, int], tuple[float, float]] = {}
        owns = []
        for c, held in zip(candidates, held_by):
            if not c.embedded:
                owns.append(-1.0)
                continue
            signals[(c.n, c.position)] = (sim[c.embedded], held)
            owns.append(sim[c.embedded] + self.HELD_WEIGHT * held)
        asked: dict[tuple[int, int], float] = {}  # (source, FAQ entry) → how well its question matches
        for c, own in zip(candidates, owns):
            if c.unit.kind in _OPENERS:
                asked[(c.n, c.unit.entry)] = max(own, asked.get((c.n, c.unit.entry), -1.0))
        out = []
        for c, own in zip(candidates, owns):
            if not c.embedded:
                out.append(
                    (Piece(c.n, c.position, c.unit, c.text, -1.0, False, c.path, 0.0, c.section), c.unit.entry, own)
                )
                continue
            if c.unit.kind not in _OPENERS:  # a FAQ answer matches as well as its question does
                own = max(own, asked.get((c.n, c.unit.entry), own))
            score = own + self.TITLE_PRIOR * sim[(_TITLE, c.title)] - self.RANK_STEP * (c.n - 1)
            if how_to and c.unit.ordered:
                score += self.STEP_PRIOR
            seed = c.unit.kind not in _OPENERS and not _bare_line(c.unit)
            held = signals[(c.n, c.position)][1]
            out.append(
                (Piece(c.n, c.position, c.unit, c.text, score, seed, c.path, held, c.section), c.unit.entry, own)
            )
        cosines = [sim[c.embedded] if c.embedded else -1.0 for c in candidates]
        return _asked_answer_first(out, cosines, self.ASKED_COSINE), signals


def _asked_answer_first(
    scored: list[tuple[Piece, int, float]],
    cosines: Sequence[float],
    asked_cosine: float,
) -> list[tuple[Piece, int, float]]:
    """``scored`` (rows as :meth:`ExtractiveAnswers._scored` makes them; ``cosines``: each row's own cosine to the
    question) with the answer of the FAQ entry that asks the question raised to the best score. That entry is the
    one whose question matches best (cosine and keyword bonus, as :func:`one_entry_each` picks), when that
    question's cosine is at least ``asked_cosine``. Only its best sentence is raised (the first on a tie): it is
    then quoted, with what follows it as any quoted sentence, whatever its note's title — the author wrote it for
    that question, though its words may name neither the question's subject nor its terms ("Specifically, we use
    AES-256 …" under "What encryption do you use?"). The rest of the entry competes as before, so a FAQ question
    that only looks like the question adds a sentence and pushes out little."""
    openers = [(own, cosines[i], s.n, entry) for i, (s, entry, own) in enumerate(scored) if s.unit.kind in _OPENERS]
    if not openers:
        return scored
    _, cosine, n, entry = max(openers)
    answer = [
        i for i, (s, e, _) in enumerate(scored) if s.n == n and e == entry and s.unit.kind not in _OPENERS and s.seed
    ]
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


#: Endings taken off a word (after its plural) before question terms and a unit's words are compared: "deleted",
#: "deletions" and "delete" meet at "delet", "accident" and "accidental" at "accident".
_SUFFIXES = ("ations", "ation", "ions", "ion", "ings", "ing", "edly", "ed", "al", "ly", "ment", "er")


def word_stem(word: str) -> str:
    """``word`` in lower case without its plural, up to two common English endings and a final ``e`` (a stem keeps at
    least 4 letters)."""
    w = word.lower()
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith(("ses", "xes", "zes", "ches", "shes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith("ss") and len(w) > 3:
        w = w[:-1]
    for _ in range(2):  # "accidentally" → "accidental" → "accident"
        cut = next((s for s in _SUFFIXES if w.endswith(s) and len(w) - len(s) >= 4), "")
        w = w[: len(w) - len(cut)]
    return w[:-1] if w.endswith("e") and len(w) > 4 else w


def _held_shares(terms: Sequence[str], texts: Sequence[str | None]) -> list[float]:
    """Per text (None: not scored, 0): the share of the question's terms it holds, each term weighing by how few of
    the texts hold it (``log(1 + n / (1 + holders))``): the rare words of the question ("accident") say more of what
    a sentence answers than the words every passage shares ("note")."""
    stems = list(dict.fromkeys(word_stem(t) for t in terms))
    words = [None if t is None else {word_stem(w) for w in re.findall(r"\w+", t)} for t in texts]
    scored = [w for w in words if w is not None]
    if not stems or not scored:
        return [0.0] * len(texts)
    weight = {t: math.log(1 + len(scored) / (1 + sum(t in w for w in scored))) for t in stems}
    total = sum(weight.values())
    return [0.0 if w is None else sum(v for t, v in weight.items() if t in w) / total for w in words]


_ENDS = re.compile(r"[.!?:…)\]`\"'”]$")


def _bare_line(unit: Unit) -> bool:
    """A line of prose that is not a sentence (no end mark, a few words: a link alone, "Set up Obsidian Sync"): it
    names a thing, it says nothing of it, so it never answers on its own."""
    return unit.kind == "sentence" and not _ENDS.search(unit.text) and len(unit.text.split()) < 8


@dataclass(frozen=True, slots=True)
class Reading:
    """An extractive answer: its ``text``, the numbers of the sources it ``cited``, and what it says of the answer:
    ``cosine``, the cosine similarity to the question of the unit that answers best, and ``held``, the share of the
    question's terms that unit holds (read with its note's title and its headings); both 0 when nothing could be
    quoted."""

    text: str
    cited: frozenset[int]
    cosine: float = 0.0
    held: float = 0.0


_NUMBERED = re.compile(r"^\d+(?:\.\d+)*\s*-?\s+")


def where(source: Source, unit: Unit) -> str:
    """Where a unit of ``source`` sits, as a person finds it: the note's folder (its number prefix dropped: "02 -
    Community" → "Community"), its title, the heading over the unit and the title over its list, joined by " › " ,
    a part that repeats the one before it left out ("Obsidian Sync › Version history › Restore a deleted file")."""
    hit = source.hit
    folder = hit.file_path.rsplit("/", 2)[-2] if "/" in hit.file_path else ""
    heading = unit.heading or (hit.symbol.rsplit(" › ", 1)[-1] if hit.symbol and hit.kind != "pdf" else "")
    parts: list[str] = []
    for part in (_NUMBERED.sub("", folder), hit.title, heading, unit.label):
        part = part.strip()
        if part and (not parts or part.lower() != parts[-1].lower()):
            parts.append(part)
    return " › ".join(parts)


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
    path: str = ""
    section: str = ""


#: How far below the best-matching FAQ question of an answer another passage's question may match and still give
#: its entry's sentences (cosine + keyword bonus).
ENTRY_MARGIN = 0.1


def one_entry_each(scored: Sequence[tuple[Piece, int, float]]) -> list[Piece]:
    """The sentences an answer may quote: from a passage holding FAQ questions, only those of the entry whose
    question best matches the question (its questions included), and only when that question matches within
    :data:`ENTRY_MARGIN` of the best question of all the passages; what precedes a passage's first question is left
    out then (the end of an entry whose question is in another passage, or the FAQ's heading). Passages without a
    question give all their sentences."""
    entries: dict[tuple[int, int], float] = {}
    for s, entry, own in scored:
        if s.unit.kind in _OPENERS:
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

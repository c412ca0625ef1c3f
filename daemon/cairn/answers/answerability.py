"""Whether the retrieved chunks answer a question at all: the not-found decision after the cosine floor.

The 0.35 cosine floor (:mod:`cairn.search.service`) only says that a chunk is about the question's topic. A question
about something the notes never mention still finds chunks on the topic ("sync my tasks with <an app the vault never
names>" finds the sync plugins), so :class:`Answerability` also asks whether the evidence holds the question's words.
Its :class:`Evidence`, all read from the hits and the keyword index the retrieval has just used:

- **coverage**: the idf-weighted share of the question's terms (:class:`cairn.search.query.Query`, matched as FTS5
  phrases, so stemmed as the keyword index is) that occur in at least one retrieved chunk. A term in many chunks
  weighs little, a rare one much;
- **uncovered**: how much of the question no retrieved chunk holds: the sum, over those terms, of their idf as a
  share of the largest idf possible (a term in one chunk of a large vault counts nearly 1, a common word nearly 0).
  A term in no chunk at all counts 1 when it is an unknown term (below) and :attr:`Answerability.ABSENT_COMMON`
  otherwise (a common word the notes happen not to use is often just the user's wording);
- **unknown terms**: the question's terms that occur in no chunk of the vault *and* that the embedding model splits
  into two or more WordPieces. A word the model's vocabulary lacks is mostly a name (a product, a service, a
  technical term); one the notes lack too is what the question is about and the notes are not;
- **top**: the best hit's cosine (chunk or sentence): how close the nearest passage is at all;
- **names absent**: the runs of capitalised words inside the question (not its first word, nor "I") that no chunk
  of the vault holds as a phrase. A user writes a product or service by its name ("Google Fit", "Monzo"); one the
  vault never names is what the question is about and the notes are not, even when each word of it is common
  ("google" and "fit" are both in the hub, "Google Fit" is not);
- **bm25_top**: the best BM25 sum over the vault (FTS5's OR of the question's terms: one chunk holding the
  question's rarer words together), in units of the largest idf. It keeps a question whose words are in the vault
  but apart ("Zotero" in a list of credits, nothing on citations near it) below the answer point where the five
  numbers above let it through.

A term absent from the vault of one WordPiece (a common word: "cipher", "sluggish") weighs in ``coverage`` as
:attr:`Answerability.ABSENT_COMMON` of the largest idf, as it counts in ``uncovered``: a question in the user's own
words uses words the notes do not, and weighing each as the rarest term possible refused such paraphrases.

The rule is a logistic model on these numbers, with three outcomes (:meth:`Answerability.verdict`): ``answer`` when
``INTERCEPT + W_COVERAGE·coverage + W_TOP·top + W_UNKNOWN·unknown + W_UNCOVERED·uncovered + W_NAMES·names_absent +
W_BM25_TOP·bm25_top >= 0``; ``weak`` when the score is below 0 but not below ``-WEAK_MARGIN`` (the ask path then says it
found no clear answer and shows the closest passages, without a model); ``refuse`` below (the fixed not-found answer).
Coverage and a close top hit speak for an answer, unknown terms and absent names against. ``uncovered`` weighs *for* an
answer once coverage is given: at equal coverage, more uncovered rarity means more found as well: a question in the
user's own words is long and wordy and has much of both, a near miss (a question on one kind of tax finds a note on
another kind, which holds "tax" but not the rarer word naming the kind) is short and specific, and its few terms are
either found or not. The weights are fitted by grouped k-fold cross-validation (questions on one note never on both
sides) on questions with known answers, paraphrases written apart from them and off-corpus questions of both eval vaults
(``tests/bench/calibrate_verdict.py``); the refusal point keeps answerable questions refused rare (1.5 % of the training
ones), the answer point is where 8 % of them fall below it. Signals tried and left out (they did not help held out): the
best dense score against the question's scores over every chunk (z-score, gap to the 100th), the margin between the
first and the tenth, agreement of the BM25 and dense legs' top notes, the mean cosine of the top three, the best single
chunk's or note's coverage, the count of absent common words, the keyword leg's best matched share, the number of notes
among the hits, an embedding similarity of each uncovered term to the hits; the best cosine relative to the same vault's
answers to everyday questions no vault answers (difference, z-score, percentile), the best single-sentence cosine, the
share of the question held by one sentence or a window of sentences of a hit, terms the first hit lacks while holding a
near neighbour of them ("import" for "export"), and consecutive question terms the hits hold apart but never together.

Measured with the rule and kept in :class:`Evidence` (:meth:`Evidence.signals`, for ``make eval`` and
``tests/bench/calibrate_verdict.py``), not weighed: the gap from the best BM25 sum to the second (``bm25_gap``), and
what the extractive answer says of itself, the cosine of the unit that answers best and the share of the terms it
holds (``answer_cosine``, ``answer_held``: does any sentence answer?). answer_cosine is the best hit's sentence cosine
in most questions; neither moved a held-out figure (docs/eval.md, "Answered, weak, not found").

Withholding: a chunk the caller may not see does not count, neither as evidence nor for a term's document
frequency, so the decision says nothing about withheld notes.

Cost: one keyword lookup per question term (:meth:`~cairn.search.keyword.KeywordIndex.term_matches`: the in-memory
BM25's postings, or FTS5's matches the keyword leg of the retrieval has just read and kept), one WordPiece count
per term absent from the vault, and one phrase lookup per capitalised run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from cairn.search import CallerView, Hit, Query


@dataclass(frozen=True, slots=True)
class Evidence:
    """What :class:`Answerability` decides on (module docstring). ``coverage`` in [0, 1] (1 when the question has no
    term with positive idf); ``unknown``: the number of unknown terms; ``uncovered`` >= 0: the rarity summed over the
    terms no hit holds; ``top``: the best hit's cosine (0 without hits); ``terms``: the question's terms;
    ``names_absent``: the capitalised runs of the question no chunk of the vault holds as a phrase; ``bm25_top`` (>= 0,
    in units of the largest idf). Measured, not weighed (module docstring): ``bm25_gap`` (>= 0, same units),
    ``answer_cosine`` and ``answer_held`` (the extractive answer's best unit; 0 without hits, 1 when not read)."""

    coverage: float
    unknown: int
    uncovered: float = 0.0
    top: float = 1.0
    terms: tuple[str, ...] = ()
    names_absent: int = 0
    bm25_top: float = 0.0
    bm25_gap: float = 0.0
    answer_cosine: float = 1.0
    answer_held: float = 1.0

    def signals(self) -> dict[str, float]:
        """The numbers the rule weighs, by name (:attr:`Answerability.WEIGHTS`)."""
        return {
            "coverage": self.coverage,
            "top": self.top,
            "unknown": float(self.unknown),
            "uncovered": self.uncovered,
            "names_absent": float(self.names_absent),
            "bm25_top": self.bm25_top,
            "bm25_gap": self.bm25_gap,
            "answer_cosine": self.answer_cosine,
            "answer_held": self.answer_held,
        }


Verdict = Literal["answer", "weak", "refuse"]


class Answerability:
    """The not-found rule on retrieved evidence (module docstring). Thread-safe (no state).

    ``count_tokens``: the embedding model's WordPiece count of a text (an absent term of several pieces is a word
    the vault does not know)."""

    #: The logistic model's weights, per unit of each :class:`Evidence` field, and its intercept (the operating point
    #: folded in): the score is >= 0 exactly when the question is answerable (module docstring).
    INTERCEPT = -7.971
    W_COVERAGE = 3.456
    W_TOP = 6.592
    W_UNKNOWN = -1.327
    W_UNCOVERED = 1.117
    W_NAMES = -3.206
    W_BM25_TOP = 0.713
    #: How far below the answer point a score still gets the closest passages (``weak``) instead of not-found.
    WEAK_MARGIN = 1.502
    #: What a term in no chunk counts in ``uncovered``, and the share of the largest idf it weighs in ``coverage``,
    #: when it is a single WordPiece (a common word); an unknown term counts 1, as a term of the largest idf.
    ABSENT_COMMON = 0.25
    #: WordPieces from which a term absent from the vault counts as unknown.
    UNKNOWN_PIECES = 2
    #: Words that say the question is put to the notes ("what do my notes say about …"), not what it is about: in a
    #: small vault they are rare, and their idf would outweigh the topic's words.
    FRAMING = frozenset({"note", "notes", "say", "says", "said", "tell", "mention", "mentions", "mentioned"})

    def __init__(self, count_tokens: Callable[[str], int]) -> None:
        self.count_tokens = count_tokens

    def evidence(self, query: Query | str, hits: Sequence[Hit], view: CallerView) -> Evidence:
        """The :class:`Evidence` of ``hits`` (the retrieved chunks) for the question ``query``, as ``view``'s caller
        sees the index (rows and matches without the rows withheld from it, rows linking to a withheld note by their
        redacted text). Raises :class:`~cairn.errors.StoreError` when the index cannot be read."""
        if isinstance(query, str):
            query = Query.parse(query)
        top = max((h.cosine for h in hits), default=0.0)
        terms = [t for t in query.terms if t not in self.FRAMING]
        names = self._names_absent(query.text, view)
        if not terms:
            return Evidence(1.0, 0, 0.0, top, (), names)
        n_rows = view.rows()
        idf_max = math.log((n_rows + 0.5) / 0.5) if n_rows else 0.0
        hit_ids = np.asarray([h.chunk_id for h in hits], dtype=np.int64)
        weight_all = weight_found = uncovered = 0.0
        unknown = 0
        matched: list[tuple[np.ndarray, np.ndarray]] = []
        for term in terms:
            ids, values = self._matches(view, term)
            if not len(ids) and (singular := _singular(term)):
                # Porter stems some plurals apart from their singular ("gases" → gase, "gas" → ga): try the singular
                ids, values = self._matches(view, singular)
            matched.append((ids, values))
            df = len(ids)
            idf = max(math.log((n_rows - df + 0.5) / (df + 0.5)), 0.0) if n_rows else 0.0
            weight_all += idf
            if df and np.isin(ids, hit_ids).any():
                weight_found += idf
            elif df:
                uncovered += idf / idf_max
            elif self.count_tokens(term) >= self.UNKNOWN_PIECES:
                unknown += 1
                uncovered += 1.0
            else:  # a common word the notes do not use: weighs as ABSENT_COMMON of the rarest term, not as it
                weight_all += (self.ABSENT_COMMON - 1.0) * idf
                uncovered += self.ABSENT_COMMON
        coverage = weight_found / weight_all if weight_all > 0 else 1.0
        best = _two_best(matched)
        scale = idf_max or 1.0
        return Evidence(
            coverage, unknown, uncovered, top, tuple(terms), names, best[0] / scale, (best[0] - best[1]) / scale
        )

    @staticmethod
    def _names_absent(text: str, view: CallerView) -> int:
        """How many of :func:`capitalised_runs` of ``text`` no chunk the caller sees holds as a phrase."""
        return sum(1 for run in capitalised_runs(text) if not len(view.keyword.phrase_matches(run)[0]))

    @classmethod
    def score(cls, evidence: Evidence) -> float:
        """The logistic model's score of ``evidence`` (module docstring): >= 0 means answerable."""
        return (
            cls.INTERCEPT
            + cls.W_COVERAGE * evidence.coverage
            + cls.W_TOP * evidence.top
            + cls.W_UNKNOWN * evidence.unknown
            + cls.W_UNCOVERED * evidence.uncovered
            + cls.W_NAMES * evidence.names_absent
            + cls.W_BM25_TOP * evidence.bm25_top
        )

    @classmethod
    def answers(cls, evidence: Evidence) -> bool:
        """True when ``evidence`` is enough to answer (the rule of the module docstring)."""
        return cls.score(evidence) >= 0.0

    @classmethod
    def verdict(cls, evidence: Evidence) -> Verdict:
        """``answer``, ``weak`` (the closest passages, said to be no clear answer) or ``refuse`` (not found)."""
        score = cls.score(evidence)
        return "answer" if score >= 0.0 else "weak" if score >= -cls.WEAK_MARGIN else "refuse"

    def judge(self, query: Query | str, hits: Sequence[Hit], view: CallerView) -> Verdict:
        """:meth:`verdict` of :meth:`evidence`; ``refuse`` without hits."""
        return self.verdict(self.evidence(query, hits, view)) if hits else "refuse"

    def answerable(self, query: Query | str, hits: Sequence[Hit], view: CallerView) -> bool:
        """:meth:`answers` of :meth:`evidence`; False without hits."""
        return bool(hits) and self.answers(self.evidence(query, hits, view))

    @staticmethod
    def _matches(view: CallerView, term: str) -> tuple[np.ndarray, np.ndarray]:
        """((k,) int64, (k,) float64): the ids of the chunks holding ``term`` as an FTS5 phrase, as the caller's
        keyword index matches it (the keyword leg's matches), and each one's BM25 for it (< 0, lower is better)."""
        ids, values = view.keyword.term_matches(term)
        return np.asarray(ids, dtype=np.int64), np.asarray(values, dtype=np.float64)


_WORD = re.compile(r"[A-Za-z][\w'.+-]*")
#: Capitalised words that name no thing of their own: "I", and the kinds of file Cairn indexes ("the PDF" is an
#: attachment of the vault, whose text never says "PDF").
_NOT_NAMES = frozenset({"I", "I'm", "I've", "I'd", "I'll", "PDF", "PDFs"})


def capitalised_runs(text: str) -> list[str]:
    """The runs of consecutive words of ``text`` that start with a capital letter (names: "Google Fit"), a
    sentence's first word and "I" left out; a word's trailing dot or apostrophe is dropped."""
    runs: list[str] = []
    run: list[str] = []
    end = 0
    starts = True  # the next word opens a sentence
    for m in _WORD.finditer(text):
        raw = m.group()
        starts = starts or any(c in ".?!" for c in text[end : m.start()])
        word = raw.rstrip(".'")
        if not starts and word[:1].isupper() and word not in _NOT_NAMES:
            run.append(word)
        elif run:
            runs.append(" ".join(run))
            run = []
        starts, end = raw.endswith("."), m.end()
    if run:
        runs.append(" ".join(run))
    return runs


def _two_best(matched: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float]:
    """The two best BM25 sums (> 0, as FTS5's OR query of the terms ranks chunks) over the chunks of ``matched`` (per
    term: chunk ids and their BM25, < 0); 0 for each missing."""
    ids = np.concatenate([i for i, _ in matched]) if matched else np.zeros(0, dtype=np.int64)
    if not len(ids):
        return 0.0, 0.0
    values = np.concatenate([v for _, v in matched])
    sums = np.bincount(ids, weights=-values)
    top = np.partition(sums, len(sums) - 2)[-2:] if len(sums) >= 2 else np.asarray([0.0, sums[0]])
    return float(top.max()), float(top.min())


def _singular(term: str) -> str | None:
    """``term`` without an English plural ``-s`` / ``-es`` (``None`` when it has none or is short)."""
    if len(term) > 4 and term.endswith("es") and term[-3] in "sxz":
        return term[:-2]
    if len(term) > 3 and term.endswith("s") and not term.endswith("ss"):
        return term[:-1]
    return None

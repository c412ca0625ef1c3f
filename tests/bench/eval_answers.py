"""What a person reads: the answers of the ask path (no language model) judged against the dev files' ``evidence``.

Each answerable dev question carries ``evidence``: the words of the note that answer it. An answer **carries** it
when the answer's text holds at least :data:`CARRY_SHARE` of the evidence's content words (:func:`content_words`:
markdown read as shown, lower case, stop words left out, a light suffix stem), its citations and the weak lead left
out. Every question, answerable or off-corpus, gets one **outcome**: ``answer`` (answered clearly), ``weak`` (the
answer says it found no clear answer and shows the closest passages) or ``not_found``.

Two readings of the same answers (:func:`outcome_table`):

- **as shipped**: the outcome the ask path gave, with the constants it ships (fitted on these questions among
  others: in sample);
- **k-fold**: the answerability rule refitted by grouped k-fold (:mod:`answer_folds`; questions sharing a note never
  on both sides) and each question's outcome read from the rule fitted without its fold: the figure to hold
  against the targets. An answer refused there carries nothing; its text is otherwise the same.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from cairn.config import WEAK_ANSWER_LEAD

#: Share of the evidence's content words an answer must hold to carry it.
CARRY_SHARE = 0.8

STOP = frozenset(
    """a an the and or but if of to in on at by for with from into onto about as is are was were be been being do does
    did done doing have has had i me my mine we our you your it its this that these those there here what which who whom
    whose when where why how can could should would will shall may might must not no yes so than then too very just
    also any some all each every more most other such only own same get got make use using used one want way their
    them they he she his her us via per""".split()
)
_WIKILINK = re.compile(r"!?\[\[([^\]|#^]*)(?:[#^][^\]|]*)?(?:\|([^\]]*))?\]\]")
_MDLINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_CITATION = re.compile(r"\[\d{1,3}\]")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def stem(word: str) -> str:
    """A light English stem: possessive and one common suffix off (``-ing``, ``-ed``, ``-es``, ``-s``, ``-ly``)."""
    w = word.removesuffix("'s")
    for suffix in ("ing", "ed", "es", "ly", "s"):
        if len(w) > len(suffix) + 3 and w.endswith(suffix) and not w.endswith("ss"):
            return w[: -len(suffix)]
    return w


def content_words(text: str) -> set[str]:
    """The stems of ``text``'s content words: links read as their display text, citations ``[n]`` and markdown
    marks left out, lower case, stop words and one-letter words dropped."""
    text = _WIKILINK.sub(lambda m: m.group(2) or m.group(1), text)
    text = _MDLINK.sub(lambda m: m.group(1), _CITATION.sub(" ", text))
    words = _WORD.findall(text.lower().replace("’", "'"))
    return {stem(w) for w in words if w not in STOP and len(w) > 1}


def carried_share(answer: str, evidence: str) -> float:
    """Share (0..1) of ``evidence``'s content words that ``answer`` holds (1.0 when the evidence has none)."""
    wanted = content_words(evidence)
    if not wanted:
        return 1.0
    return len(wanted & content_words(answer)) / len(wanted)


def carries(answer: str, evidence: str, share: float = CARRY_SHARE) -> bool:
    """Whether ``answer`` holds at least ``share`` of ``evidence``'s content words."""
    return carried_share(answer, evidence) >= share


def answer_body(text: str) -> str:
    """The answer as read for the fact: without the weak lead."""
    return text.removeprefix(WEAK_ANSWER_LEAD).strip()


@dataclass
class Outcome:
    """One question asked on the ask path: ``outcome`` (answer / weak / not_found), the answer's ``text``, whether
    it ``carries`` the evidence (None without evidence), whether it cites a relevant note, its length in characters
    (citations left out). For the k-fold: whether any hit passed the floor (``hits``), the rule's inputs
    (``features``), and the same three for the extractive answer the question gets when it is not refused
    (``would_*``: the text of an answered and of a weak answer is the same, the weak lead apart)."""

    qid: str
    outcome: str
    text: str
    carries: bool | None
    cites_relevant: bool
    chars: int
    features: dict[str, float] = field(default_factory=dict)
    hits: bool = True
    would_carry: bool | None = None
    would_chars: int = 0
    would_cite: bool = False


def judge(question: dict, text: str, not_found: bool, weak: bool, cited_paths: Sequence[str]) -> Outcome:
    """The :class:`Outcome` of ``question`` answered with ``text``."""
    body = "" if not_found else answer_body(text)
    evidence = question.get("evidence")
    carried = carries(body, evidence) if evidence and question["relevant"] else None
    outcome = "not_found" if not_found else "weak" if weak else "answer"
    cites = bool(set(cited_paths) & set(question["relevant"]))
    chars = len(_CITATION.sub("", body).strip())
    return Outcome(
        question["id"], outcome, body, carried, cites, chars, would_carry=carried, would_chars=chars, would_cite=cites
    )


def _pct(values: Sequence[float]) -> str:
    return f"{100 * sum(values) / len(values):.0f} %" if values else "n/a"


@dataclass
class Reading:
    """Per question id: how often each outcome (``answer`` / ``weak`` / ``not_found``) was given in one reading: once
    as shipped, once per seed held out."""

    label: str
    outcome: dict[str, Counter]

    @classmethod
    def shipped(cls, answers: dict[str, Outcome]) -> Reading:
        return cls("as shipped", {qid: Counter({o.outcome: 1}) for qid, o in answers.items()})

    def share(self, qid: str, outcome: str) -> float:
        tally = self.outcome[qid]
        return tally[outcome] / max(1, sum(tally.values()))


def outcome_rows(vault: str, questions: Sequence[dict], answers: dict[str, Outcome], reading: Reading) -> list[str]:
    """One table row: the figures of the targets for ``questions`` of ``vault`` in ``reading``. An answer carries
    the evidence when its text does and it is not refused; its length counts when it is refused less than half the
    time."""
    inc = [q for q in questions if q["relevant"] and q["id"] in reading.outcome]
    off = [q for q in questions if not q["relevant"] and q["id"] in reading.outcome]
    with_evidence = [q for q in inc if answers[q["id"]].would_carry is not None]

    def carried(q: dict) -> float:
        return float(bool(answers[q["id"]].would_carry)) * (1.0 - reading.share(q["id"], "not_found"))

    def share(qs: Sequence[dict], outcome: str) -> str:
        return _pct([reading.share(q["id"], outcome) for q in qs])

    right_note = [q for q in with_evidence if answers[q["id"]].would_cite]
    lengths = [answers[q["id"]].would_chars for q in inc if reading.share(q["id"], "not_found") < 0.5]
    short = [float(carried(q) > 0 and answers[q["id"]].would_chars <= SHORT) for q in with_evidence]
    return [
        vault,
        reading.label,
        str(len(with_evidence)),
        _pct([carried(q) for q in with_evidence]),
        _pct(short),
        _pct([carried(q) for q in right_note]),
        str(len(inc)),
        share(inc, "answer"),
        share(inc, "weak"),
        share(inc, "not_found"),
        str(len(off)),
        share(off, "answer"),
        share(off, "weak"),
        share(off, "not_found"),
        str(int(statistics.median(lengths))) if lengths else "n/a",
    ]


#: An answer of at most this many characters carries the fact without length helping it in.
SHORT = 500

OUTCOME_HEADER = (
    "vault",
    "reading",
    "n (evidence)",
    "carries the evidence",
    f"… in at most {SHORT} chars",
    "… when it cites a relevant note",
    "answerable n",
    "answered clearly",
    "weak",
    "not found",
    "off-corpus n",
    "off-corpus answered",
    "weak",
    "not found",
    "median chars",
)

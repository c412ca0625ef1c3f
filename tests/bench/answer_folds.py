"""The answered / weak / not-found decision refitted by grouped k-fold, and the ask path's answers collected for it.

:func:`collect` asks each question through the real ask path (``AnswerService.answer``, no language model: the
outcome and the text a person reads) and reads the evidence the verdict is judged on
(``AnswerService.evidenced_context``: :meth:`~cairn.answers.answerability.Evidence.signals`), with the extractive
answer the question would get were it answered (so a question refused as shipped can still be judged held out).

:func:`held_out` refits the rule the way its shipped constants are fitted (:func:`fit_rule`) on the questions of all
folds but one, and reads the held-out fold's outcomes from it: folds are grouped (questions sharing a relevant note
are one group, each off-corpus question its own: :func:`calibrate_answerability_grouped.groups_of`), balanced per
vault and answerable, repeated over seeds. A question with no hit above the floor is not found whatever the rule.

The recipe (:func:`fit_rule`): a class-balanced logistic regression on :data:`SIGNALS`; not found below the score
where the training questions answerable and refused are at most :data:`TRAIN_REFUSED`; answered from the score below
which at most 8 % of the training answerable questions lie (:data:`ANSWER_AT`; or above which at most a share of the
off-corpus ones do); weak between. :data:`ANSWER_AT` and the signals were chosen by this k-fold
(``tests/bench/calibrate_verdict.py``; docs/eval.md, "Answered, weak, not found").
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from calibrate_answerability import fit, threshold_for
from calibrate_answerability_grouped import grouped_folds, groups_of
from eval_answers import Outcome, judge

from cairn.answers import AnswerService
from cairn.contract import AskRequest, SearchRequest

#: The signals the shipped rule weighs (:meth:`cairn.answers.answerability.Evidence.signals`).
SIGNALS = ("coverage", "top", "unknown", "uncovered", "names_absent", "bm25_top")
#: Training answerable questions refused at most (the not-found threshold).
TRAIN_REFUSED = 0.015
#: Training off-corpus questions answered at most (the answer threshold, when it is put by them).
TRAIN_OFF_ANSWERED = 0.2
#: Where the answer point goes (:func:`fit_rule`).
ANSWER_AT = ("in", 0.08)
FOLDS = 5
SEEDS = 10


async def _collect(answers: AnswerService, questions: Sequence[dict]) -> dict[str, Outcome]:
    out: dict[str, Outcome] = {}
    for q in questions:
        answer = await answers.answer(AskRequest.parse({"question": q["question"]}))
        cited = [s.hit.file_path for s in answer.sources if s.cited]
        outcome = judge(q, answer.text, answer.not_found, answer.weak, cited)
        evidenced = getattr(answers, "evidenced_context", None)  # absent before the rule read the answer
        if evidenced is None:
            out[q["id"]] = outcome
            continue
        sources, evidence = await asyncio.to_thread(evidenced, SearchRequest.parse({"query": q["question"]}))
        outcome.hits = bool(sources)
        outcome.features = evidence.signals()
        if sources:
            text, cited_n = answers.extractive.answer_cited(q["question"], sources)
            would = judge(q, text, False, False, [s.hit.file_path for s in sources if s.n in cited_n])
            outcome.would_carry, outcome.would_chars, outcome.would_cite = (
                would.carries,
                would.chars,
                would.cites_relevant,
            )
        out[q["id"]] = outcome
    return out


def collect(answers: AnswerService, questions: Sequence[dict]) -> dict[str, Outcome]:
    """Question id → its :class:`~eval_answers.Outcome` on the ask path (module docstring)."""
    return asyncio.run(_collect(answers, questions))


@dataclass(frozen=True)
class Rule:
    """A fitted rule: ``score = x @ weights + bias``; not found below ``refuse``, answered from ``answer``."""

    names: tuple[str, ...]
    weights: np.ndarray
    bias: float
    refuse: float
    answer: float

    def outcomes(self, x: np.ndarray) -> list[str]:
        score = x @ self.weights + self.bias
        return ["not_found" if s < self.refuse else "weak" if s < self.answer else "answer" for s in score]

    def constants(self) -> str:
        """The rule as :class:`~cairn.answers.answerability.Answerability` ships it (answer point folded in)."""
        w = ", ".join(f"{n} {v:.3f}" for n, v in zip(self.names, self.weights))
        return f"{w}; INTERCEPT {self.bias - self.answer:.3f}; WEAK_MARGIN {self.answer - self.refuse:.3f}"


def fit_rule(
    x: np.ndarray, answerable: np.ndarray, names: Sequence[str], answer_at: tuple[str, float] | None = None
) -> Rule:
    """The recipe of the module docstring on rows ``x`` (signals in ``names`` order) labelled ``answerable``.
    ``answer_at``: where the answer point goes, ``("off", share)`` (off-corpus answered at most ``share``, the
    default with :data:`TRAIN_OFF_ANSWERED`) or ``("in", share)`` (answerable questions below it at most ``share``)."""
    how, share = answer_at or ANSWER_AT
    model = fit(x, answerable, TRAIN_REFUSED)
    scores = model.score(x)
    if how == "in":
        answer = threshold_for(scores, answerable, share)
    else:
        ranked = np.sort(scores[~answerable])[::-1]
        allowed = int(math.floor(share * len(ranked) + 1e-9))
        answer = float(ranked[allowed] + 1e-6) if allowed < len(ranked) else -math.inf
    answer = max(answer, model.threshold)
    return Rule(tuple(names), model.weights, model.bias, model.threshold, answer)


def matrix(rows: Sequence[dict], outcomes: dict[str, Outcome], names: Sequence[str]) -> np.ndarray:
    return np.asarray([[outcomes[r["id"]].features.get(n, 0.0) for n in names] for r in rows], dtype=np.float64)


def held_out(
    rows: Sequence[dict],
    outcomes: dict[str, Outcome],
    names: Sequence[str] = SIGNALS,
    *,
    k: int = FOLDS,
    seeds: int = SEEDS,
    answer_at: tuple[str, float] | None = None,
) -> dict[str, Counter]:
    """Question id → how often (over ``seeds``) each outcome was given held out (module docstring). ``rows``: every
    question the rule is fitted on (dev files, paraphrases, near misses), each with an outcome in ``outcomes``."""
    rows = [r for r in rows if r["id"] in outcomes]
    x = matrix(rows, outcomes, names)
    y = np.asarray([bool(r["relevant"]) for r in rows])
    hits = np.asarray([outcomes[r["id"]].hits for r in rows])
    groups = groups_of(list(rows))
    tally: dict[str, Counter] = {r["id"]: Counter() for r in rows}
    for seed in range(seeds):
        fold = grouped_folds(list(rows), groups, k, seed + 1)
        for f in range(k):
            train, test = (fold != f) & hits, np.flatnonzero(fold == f)
            rule = fit_rule(x[train], y[train], names, answer_at)
            for i, outcome in zip(test, rule.outcomes(x[test])):
                tally[rows[i]["id"]][outcome if hits[i] else "not_found"] += 1
    return tally


def fit_all(rows: Sequence[dict], outcomes: dict[str, Outcome], names: Sequence[str] = SIGNALS) -> Rule:
    """The rule fitted on every question with hits: the constants to ship."""
    rows = [r for r in rows if r["id"] in outcomes and outcomes[r["id"]].hits]
    y = np.asarray([bool(r["relevant"]) for r in rows])
    return fit_rule(matrix(rows, outcomes, names), y, names)


def auc(rows: Sequence[dict], outcomes: dict[str, Outcome], name: str) -> float:
    """The area under the ROC curve of one signal alone, answerable against off-corpus (0.5: no separation)."""
    pos = [outcomes[r["id"]].features.get(name, 0.0) for r in rows if r["relevant"] and r["id"] in outcomes]
    neg = [outcomes[r["id"]].features.get(name, 0.0) for r in rows if not r["relevant"] and r["id"] in outcomes]
    if not pos or not neg:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))

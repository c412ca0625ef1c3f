#!/usr/bin/env python3
"""Calibrate the sentence check (:mod:`cairn.answers.grounding`) by k-fold cross-validation on labelled sentences.

LABELS (JSONL, tests/bench/grounding_labels.jsonl): one sentence of an answer per line, ``{id, answer, vault,
question, sentence, against, origin, supported, why}``: ``sentence`` as the model wrote it (its ``[n]`` kept),
``against`` the keys of the passages it is judged against (``{"n": key}``: those it cites, or every passage the model
was given when it cites none), ``origin`` ``smollm2`` (SmolLM2-135M's real answer, tests/bench/grounding_answers.py)
or ``written`` (by hand, in the manner of a larger model: paraphrases, facts changed, claims from elsewhere),
``supported`` the hand label: do those passages say what the sentence says? PASSAGES (JSONL,
tests/bench/grounding_passages.jsonl): ``{key, vault, filePath, symbol, title, text}``.

Each sentence's two measures (cosine to the closest passage sentence, share of its content words around that
sentence) are taken by the module's own code with the real embedding model. Sentences that state nothing (no content
word, or a lead-in) are not judged and left out. The folds are dealt by answer (every sentence of one answer in the
same fold), answers with a supported sentence and those without dealt apart; on each fold the rule (``SHARE_WEIGHT``,
``MIN_SCORE``, ``SPAN``: supported when (cosine + weight × share) / (1 + weight) ≥ score, the share counted within
``SPAN`` sentences of the closest one) with the best F0.5 of "supported" on the other folds
is chosen (precision counts double: a sentence wrongly called supported is what would make ``grounded: true`` a lie),
then judged on the held-out fold. Prints the held-out precision, recall and F1 of "supported" (pooled over the
folds), for both measures and for each alone, the rules each fold chose, and their median (the constants to ship).

Usage: calibrate_grounding.py [--labels FILE] [--passages FILE] [-k 5] [--seed 17]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "daemon"))

from cairn.answers.grounding import Passage, SentenceCheck, answer_sentences  # noqa: E402
from cairn.embedder import Embedder  # noqa: E402

WEIGHTS = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
SCORES = [round(0.0125 * i, 4) for i in range(81)]  # 0 … 1
BETA = 0.5


class _Vectors:
    """The embedding model without the index's cache: every text embedded (the vectors are the same)."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._memo: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if missing:
            self._memo.update(zip(missing, self.embedder.embed(missing)))
        return np.stack([self._memo[t] for t in texts]) if texts else np.zeros((0, self.embedder.dim), np.float32)

    def stored_or_embedded(self, texts: Sequence[str], hashes: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


#: The windows the share is counted in: sentences on each side of the closest one (None: the whole passage).
SPANS: tuple[int | None, ...] = (0, 1, 2, None)


@dataclass(frozen=True)
class Row:
    id: str
    answer: str
    origin: str
    cited: bool
    supported: bool
    cosine: float
    shares: dict[int | None, float]  # span → share


def measured(labels: list[dict], passages: dict[str, dict]) -> list[Row]:
    vectors = _Vectors(Embedder())
    checks = {span: SentenceCheck(vectors, span=span) for span in SPANS}  # type: ignore[arg-type]
    rows = []
    for lab in labels:
        given = {int(n): _passage(passages[key]) for n, key in lab["against"].items()}
        sentences = answer_sentences(lab["sentence"])
        assert len(sentences) == 1, f"{lab['id']}: not one sentence: {[s.text for s in sentences]}"
        shares = {}
        for span, check in checks.items():
            ((words, cosine, shares[span]),) = check.measure(sentences, given)
        if not words:
            continue
        cited = any(n in given for n in sentences[0].cites)
        rows.append(Row(lab["id"], lab["answer"], lab["origin"], cited, bool(lab["supported"]), cosine, shares))
    return rows


def _passage(p: dict) -> Passage:
    return Passage(p["title"], p["symbol"], p["text"], p.get("kind", "text"))


def folds_by_answer(rows: list[Row], k: int, seed: int) -> list[list[Row]]:
    """Answers dealt into ``k`` folds (sorted, shuffled with ``seed``, round-robin), those with a supported sentence
    and those without dealt apart so both are in every fold."""
    by_answer: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_answer[r.answer].append(r)
    rng = random.Random(seed)
    folds: list[list[Row]] = [[] for _ in range(k)]
    at = 0
    for stratum in (True, False):
        answers = sorted(a for a, rs in by_answer.items() if any(r.supported for r in rs) == stratum)
        rng.shuffle(answers)
        for a in answers:
            folds[at % k].extend(by_answer[a])
            at += 1
    return folds


Rule = tuple[float, float, float, int | None]  # (cosine weight, share weight, least score, span)


def score(r: Row, rule: Rule) -> float:
    """``(a × cosine + b × share) / (a + b)``: in 0..1 whatever the weights."""
    a, b, _, span = rule
    return (a * r.cosine + b * r.shares[span]) / (a + b)


def counts(rows: Sequence[Row], rule: Rule) -> tuple[int, int, int]:
    """(true positives, false positives, false negatives) of "supported" by ``rule``."""
    tp = fp = fn = 0
    for r in rows:
        said = score(r, rule) >= rule[2]
        tp += said and r.supported
        fp += said and not r.supported
        fn += (not said) and r.supported
    return tp, fp, fn


def f_beta(tp: int, fp: int, fn: int, beta: float = BETA) -> float:
    b2 = beta * beta
    return (1 + b2) * tp / max(1e-9, (1 + b2) * tp + b2 * fn + fp)


def prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    p = tp / max(1, tp + fp)
    r = tp / max(1, tp + fn)
    return p, r, 2 * p * r / max(1e-9, p + r)


def cross_validate(rows: list[Row], k: int, seed: int, rules: list[Rule]) -> dict:
    folds = folds_by_answer(rows, k, seed)
    total = [0, 0, 0]
    chosen = []
    for i, held in enumerate(folds):
        train = [r for j, f in enumerate(folds) if j != i for r in f]
        best = max(rules, key=lambda rule: f_beta(*counts(train, rule)))  # ties: the first (smaller span, score)
        chosen.append(best)
        for t, v in enumerate(counts(held, best)):
            total[t] += v
    return {"prf": prf(*total), "counts": total, "chosen": chosen}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--labels", type=Path, default=HERE / "grounding_labels.jsonl")
    ap.add_argument("--passages", type=Path, default=HERE / "grounding_passages.jsonl")
    ap.add_argument("-k", type=int, default=5)
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args(argv)
    labels = [json.loads(x) for x in args.labels.read_text(encoding="utf-8").splitlines() if x.strip()]
    passages = {p["key"]: p for p in map(json.loads, args.passages.read_text(encoding="utf-8").splitlines()) if p}
    rows = measured(labels, passages)
    answers = {r.answer for r in rows}
    print(f"{len(labels)} labelled sentences, {len(rows)} state something, from {len(answers)} answers")
    for origin in sorted({r.origin for r in rows}):
        part = [r for r in rows if r.origin == origin]
        supported, cited = sum(r.supported for r in part), sum(r.cited for r in part)
        print(f"  {origin}: {len(part)} ({supported} supported, {cited} cited)")
    print(f"\nheld-out, {args.k}-fold by answer (seed {args.seed}), limits chosen for F{BETA} on the other folds:")
    print("| measures | precision | recall | F1 | tp / fp / fn | rules chosen (share weight, least score, span) |")
    print("| --- | --- | --- | --- | --- | --- |")
    grids: dict[str, list[Rule]] = {
        "cosine + weight × share": [(1.0, w, t, span) for span in SPANS for w in WEIGHTS for t in SCORES]
        + [(0.0, 1.0, t, span) for span in SPANS for t in SCORES],  # weight ∞: the share alone
        "cosine alone": [(1.0, 0.0, t, None) for t in SCORES],
        "share alone": [(0.0, 1.0, t, span) for span in SPANS for t in SCORES],
    }
    result = {}
    for name, rules in grids.items():
        result[name] = out = cross_validate(rows, args.k, args.seed, rules)
        p, r, f = out["prf"]
        chosen = ", ".join(f"({b / a if a else math.inf:g}, {t:g}, {span})" for a, b, t, span in out["chosen"])
        print(f"| {name} | {p:.2f} | {r:.2f} | {f:.2f} | {' / '.join(map(str, out['counts']))} | {chosen} |")
    both = result["cosine + weight × share"]["chosen"]
    span = statistics.mode(s for *_, s in both)
    weight = statistics.median(b / a if a else math.inf for a, b, _, s in both if s == span)
    least = statistics.median(t for *_, t, s in both if s == span)
    median = (0.0, 1.0, least, span) if math.isinf(weight) else (1.0, weight, least, span)
    print(
        f"\nthe folds' most chosen span and the median of their rules with it: SPAN = {span}, "
        f"SHARE_WEIGHT = {weight:g}, MIN_SCORE = {least:g}"
    )
    for origin in sorted({r.origin for r in rows}):
        part = [r for r in rows if r.origin == origin]
        p, r_, f = prf(*counts(part, median))
        print(f"  with them on {origin} sentences (not held out): precision {p:.2f}, recall {r_:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

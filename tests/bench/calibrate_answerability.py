#!/usr/bin/env python3
"""Calibrate the answerability rule (cairn.answers.answerability) by stratified k-fold cross-validation.

For every question of the dev files (in-corpus: ``relevant`` not empty; off-corpus: empty) this retrieves the hits an
answer is drawn from through the real ask path (``AnswerService.retrieve``, cosine floor included) on the eval
indexes and reads the rule's :class:`~cairn.answers.answerability.Evidence` (coverage, top, unknown, uncovered; the
last for each candidate ``ABSENT_COMMON``), plus candidate signals the rule does not use:

- ``z``: the best dense score as a z-score against the question's dense scores over every chunk of the vault;
- ``gap100``: the best dense score minus the 100th best; ``margin``: minus the 10th best;
- ``agree``: 1 when the best hit's note is BM25's top note.

Held-out figures: the folds are stratified by (vault, kind) (:func:`eval_cv.stratified_folds`) and repeated with
several seeds; a question with no hit above the floor is not-found whatever the rule. In each fold a class-balanced
logistic regression is fitted on the training folds only, and its threshold is put where the training folds'
wrongly-not-found is at most ``--train-wrong``; the test fold is then scored. ``ABSENT_COMMON`` is chosen inside the
training folds by an inner cross-validation (nested), so the held-out figure includes that choice. Reported: held-out
off-corpus not-found and in-corpus wrongly-not-found per vault (mean over seeds, 95 % Wilson interval of one seed's
counts), the held-out trade-off curve over ``--train-wrong``, the signals alone and together, the in-sample best of
the family (fitted and thresholded on all questions, the bound of what it can separate), the off-corpus questions
still answered with their evidence against the in-corpus distribution, and the constants fitted on all questions.

Usage: calibrate_answerability.py [--dev FILE ...] [--vaults DIR] [--data-dir DIR] [--folds 5] [--seeds 10]
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import eval_cv  # noqa: E402

from cairn.answers.answerability import Answerability  # noqa: E402
from cairn.answers.service import AnswerService  # noqa: E402
from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.contract import AskRequest  # noqa: E402
from cairn.embedder import Embedder  # noqa: E402

SHARED = eval_cv.shared_dir()
RULE = ("coverage", "top", "unknown", "uncovered")
ABSENT_GRID = (0.25, 0.5, 1.0)
EXTRA = ("z", "gap100", "margin", "agree")
COMBOS = (
    ("coverage", "unknown"),
    ("coverage", "uncovered"),
    ("coverage", "top", "unknown"),
    ("coverage", "top", "unknown", "uncovered", "z"),
    ("coverage", "top", "unknown", "uncovered", "gap100"),
    ("coverage", "top", "unknown", "uncovered", "agree"),
    ("coverage", "top", "unknown", "uncovered", "margin"),
)


@dataclass
class Question:
    id: str
    vault: str
    kind: str
    text: str
    answerable: bool
    no_hit: bool
    features: dict[str, float] = field(default_factory=dict)
    #: uncovered with ABSENT_COMMON = 0 and = 1 (uncovered(a) = u0 + a · (u1 - u0))
    uncovered01: tuple[float, float] = (0.0, 0.0)
    top_note: str = ""

    def with_absent(self, a: float) -> dict[str, float]:
        u0, u1 = self.uncovered01
        return {**self.features, "uncovered": u0 + a * (u1 - u0)}


# ---------------------------------------------------------------------- extraction
def _variant(a: float) -> type[Answerability]:
    return type("Variant", (Answerability,), {"ABSENT_COMMON": a})


def extract(answers: AnswerService, row: dict) -> Question:
    """One dev question's evidence and candidate signals on the real ask path."""
    search, question = answers.search, row["question"]
    hits = answers.retrieve(AskRequest.parse({"question": question}))
    view = search.views.of(None)
    ev = answers.answerability.evidence(question, hits, view)
    u0, u1 = (_variant(a)(search.embedder.count_tokens).evidence(question, hits, view).uncovered for a in (0.0, 1.0))
    qvec = search.vector_cache.embed([question])[0]
    snap = search.vectors.for_query()
    dq = search.vectors.query_scores(snap, question, qvec)
    cos = (dq.cos_lo + dq.cos_hi) / 2
    dense = np.maximum(cos, search.sentence_weight * (dq.sentence_lo + dq.sentence_hi) / 2)
    by_score = np.sort(dense)[::-1]
    keyword = search.keyword_ranking(question, 10)
    rows = search.store.chunk_rows(keyword[:1])
    bm25_top = rows[keyword[0]].path if keyword and keyword[0] in rows else ""
    features = {
        "coverage": ev.coverage,
        "top": ev.top,
        "unknown": float(ev.unknown),
        "z": float((by_score[0] - dense.mean()) / (dense.std() or 1.0)),
        "gap100": float(by_score[0] - by_score[min(99, len(by_score) - 1)]),
        "margin": float(by_score[0] - by_score[min(9, len(by_score) - 1)]),
        "agree": float(bool(hits) and hits[0].file_path == bm25_top),
    }
    return Question(
        row["id"],
        row["vault"],
        row["kind"],
        question,
        bool(row["relevant"]),
        not hits,
        features,
        (u0, u1),
        hits[0].file_path if hits else "",
    )


def load_questions(dev_files: list[Path], vaults: Path, data_dir: Path) -> list[Question]:
    rows = eval_cv.load_questions(dev_files)
    embedder = Embedder()
    out: list[Question] = []
    for vault in sorted({r["vault"] for r in rows}):
        config = load_config({"vault": str(vaults / vault), "data_dir": str(data_dir)}, env={})
        cairn = Cairn(config, embedder=embedder, readonly=True)
        answers = AnswerService(cairn.query)
        out += [extract(answers, r) for r in rows if r["vault"] == vault]
        cairn.close()
    return out


# ---------------------------------------------------------------------- fitting
def threshold_for(scores: np.ndarray, answerable: np.ndarray, max_wrong: float) -> float:
    """The largest threshold (not-found when score < threshold) whose wrongly-not-found on these rows is at most
    ``max_wrong``: halfway between the last in-corpus score allowed below it and the next one."""
    inc = np.sort(scores[answerable])
    allowed = int(math.floor(max_wrong * len(inc) + 1e-9))
    if allowed >= len(inc):
        return math.inf
    below = inc[allowed - 1] if allowed > 0 else inc[0] - 0.02
    return float((below + inc[allowed]) / 2) if inc[allowed] > below else float(inc[allowed])


@dataclass(frozen=True)
class Model:
    """A linear score ``x @ weights + bias`` in raw feature units, refusing below ``threshold``."""

    weights: np.ndarray
    bias: float
    threshold: float = 0.0

    def score(self, x: np.ndarray) -> np.ndarray:
        return x @ self.weights + self.bias

    def refuses(self, x: np.ndarray) -> np.ndarray:
        return self.score(x) < self.threshold


def fit(x: np.ndarray, y: np.ndarray, max_wrong: float, l2: float = 1.0, steps: int = 600) -> Model:
    """A class-balanced L2 logistic regression (gradient descent on standardised features), weights returned in raw
    units, thresholded at ``max_wrong`` on these rows. One feature alone: the feature itself."""
    if x.shape[1] == 1:
        model = Model(np.ones(1), 0.0)
    else:
        mu, sd = x.mean(0), x.std(0) + 1e-9
        z = (x - mu) / sd
        w, b = np.zeros(z.shape[1]), 0.0
        yf = y.astype(float)
        balance = np.where(y, 0.5 / max(yf.mean(), 1e-9), 0.5 / max(1 - yf.mean(), 1e-9))
        for _ in range(steps):
            g = (1 / (1 + np.exp(-(z @ w + b))) - yf) * balance
            w -= 0.3 * (z.T @ g / len(y) + l2 * w / len(y))
            b -= 0.3 * float(g.mean())
        model = Model(w / sd, b - float((mu / sd) @ w))
    return Model(model.weights, model.bias, threshold_for(model.score(x), y, max_wrong))


def matrix(qs: list[Question], names: tuple[str, ...], absent: float) -> np.ndarray:
    return np.asarray([[q.with_absent(absent)[n] for n in names] for q in qs])


def fold_of(qs: list[Question], k: int, seed: int) -> np.ndarray:
    """Fold number of each question: :func:`eval_cv.stratified_folds` (stratified by (vault, kind))."""
    position = {q.id: i for i, q in enumerate(qs)}
    fold = np.zeros(len(qs), dtype=np.int64)
    rows = [{"id": q.id, "vault": q.vault, "kind": q.kind} for q in qs]
    for f, members in enumerate(eval_cv.stratified_folds(rows, k, seed)):
        for m in members:
            fold[position[m["id"]]] = f
    return fold


Chooser = Callable[[list[Question], float], float]


def choose_absent(qs: list[Question], max_wrong: float) -> float:
    """ABSENT_COMMON for these questions by an inner 4-fold CV: the grid value of the best held-out
    (not-found - 5 x wrongly-not-found)."""
    best = (-math.inf, ABSENT_GRID[0])
    for a in ABSENT_GRID:
        held = cross_validate(qs, RULE, 4, 1, max_wrong, absent=a)
        y = np.asarray([q.answerable for q in qs])
        value = held.rate(~y) - 5 * held.rate(y)
        if value > best[0] + 1e-12:
            best = (value, a)
    return best[1]


@dataclass
class HeldOut:
    refused: np.ndarray  # (seeds, n) bool: not-found held out

    def rate(self, mask: np.ndarray) -> float:
        return float(self.refused[:, mask].mean()) if mask.any() else float("nan")


def cross_validate(
    qs: list[Question],
    names: tuple[str, ...],
    k: int,
    seeds: int,
    max_wrong: float,
    *,
    absent: float = Answerability.ABSENT_COMMON,
    chooser: Chooser | None = None,
) -> HeldOut:
    """Held-out refusals of the family ``names`` (``chooser``: picks ABSENT_COMMON on each training set)."""
    y = np.asarray([q.answerable for q in qs])
    no_hit = np.asarray([q.no_hit for q in qs])
    refused = np.zeros((seeds, len(qs)), dtype=bool)
    for seed in range(seeds):
        fold = fold_of(qs, k, seed + 1)
        for f in range(k):
            train, test = (fold != f) & ~no_hit, fold == f
            train_qs = [q for q, keep in zip(qs, train) if keep]
            a = chooser(train_qs, max_wrong) if chooser else absent
            model = fit(matrix(train_qs, names, a), y[train], max_wrong)
            refused[seed, test] = model.refuses(matrix([q for q, t in zip(qs, test) if t], names, a))
    refused |= no_hit
    return HeldOut(refused)


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (float("nan"), float("nan"))
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


# ---------------------------------------------------------------------- report
def describe(qs: list[Question], held: HeldOut, label: str) -> None:
    y = np.asarray([q.answerable for q in qs])
    off, inc = ~y, y
    nf, wrong = held.rate(off), held.rate(inc)
    lo_nf, hi_nf = wilson(int(held.refused[0, off].sum()), int(off.sum()))
    lo_w, hi_w = wilson(int(held.refused[0, inc].sum()), int(inc.sum()))
    print(
        f"{label:<22} off-corpus not-found {nf:6.1%} [95% {lo_nf:.0%}-{hi_nf:.0%}] of {int(off.sum())}   "
        f"in-corpus wrongly-not-found {wrong:5.1%} [95% {lo_w:.1%}-{hi_w:.1%}] of {int(inc.sum())}"
    )


def per_vault(qs: list[Question], held: HeldOut) -> str:
    y = np.asarray([q.answerable for q in qs])
    vault = np.asarray([q.vault for q in qs])
    parts = []
    for v in sorted(set(vault)):
        m = vault == v
        parts.append(f"{v} {held.rate(m & ~y):5.1%} / {held.rate(m & y):4.1%}")
    return f"{held.rate(~y):5.1%} / {held.rate(y):4.1%}   ({'; '.join(parts)})"


def in_sample(qs: list[Question], names: tuple[str, ...], absent: float, max_wrong: float) -> Model:
    y = np.asarray([q.answerable for q in qs])
    trainable = ~np.asarray([q.no_hit for q in qs])
    kept = [q for q, t in zip(qs, trainable) if t]
    return fit(matrix(kept, names, absent), y[trainable], max_wrong)


def report_bound(qs: list[Question], held: HeldOut, absent: float, train_wrong: float) -> None:
    y = np.asarray([q.answerable for q in qs])
    print("\n== in-sample best of the family (fitted and thresholded on all questions: what it can separate at all)")
    for target in (0.015, 0.03):
        model = in_sample(qs, RULE, absent, target)
        refused = np.asarray([q.no_hit for q in qs]) | model.refuses(matrix(qs, RULE, absent))
        print(f"   wrongly <= {target:4.1%}: {per_vault(qs, HeldOut(refused[None, :]))}")
    model = in_sample(qs, RULE, absent, train_wrong)
    score = model.score(matrix(qs, RULE, absent)) - model.threshold
    inc = np.sort(score[y])
    print("\n== off-corpus answered in most seeds held out: evidence, and the share of in-corpus questions it is above")
    print("   (per feature: share of in-corpus questions with a less answerable value; score: with a lower score)")
    inc_x = {n: np.asarray([q.with_absent(absent)[n] for q, a in zip(qs, y) if a]) for n in RULE}
    share = held.refused.mean(axis=0)
    for i, q in enumerate(qs):
        if q.answerable or share[i] >= 0.5:
            continue
        f = q.with_absent(absent)
        parts = []
        for n in RULE:
            sign = 1 if n in ("coverage", "top") else -1
            below = float(np.mean(sign * inc_x[n] < sign * f[n]))
            parts.append(f"{n} {f[n]:.2f} ({below:.0%})")
        rank = float(np.searchsorted(inc, score[i]) / len(inc))
        print(f"   {q.vault:<14} {'; '.join(parts)}; score above {rank:.0%}  {q.text[:60]!r} -> {q.top_note}")
    for q, s in zip(qs, share):
        if q.answerable and s > 0:
            f = q.with_absent(absent)
            row = " ".join(f"{n} {f[n]:.2f}" for n in RULE)
            print(f"   refused ({s:.0%} of seeds) {q.vault:<14} {row}  {q.text[:70]!r}")


def report(qs: list[Question], k: int, seeds: int, train_wrong: float) -> None:
    y = np.asarray([q.answerable for q in qs])
    print("== cosine floor only")
    describe(qs, HeldOut(np.asarray([[q.no_hit for q in qs]])), "both vaults")
    held = cross_validate(qs, RULE, k, seeds, train_wrong, chooser=choose_absent)
    print(f"\n== the rule ({' + '.join(RULE)}; ABSENT_COMMON chosen inside each training set), held out")
    print(f"   {k}-fold x {seeds} seeds, train target {train_wrong:.1%}")
    describe(qs, held, "both vaults")
    vault = np.asarray([q.vault for q in qs])
    for v in sorted(set(vault)):
        m = vault == v
        describe([q for q, keep in zip(qs, m) if keep], HeldOut(held.refused[:, m]), v)
    print("\n== held-out curve: train target -> off-corpus not-found / in-corpus wrongly-not-found (per vault)")
    for target in (0.0, 0.01, 0.015, 0.02, 0.03, 0.05, 0.08, 0.12):
        h = cross_validate(qs, RULE, k, seeds, target, chooser=choose_absent)
        print(f"   {target:5.1%}  ->  {per_vault(qs, h)}")
    absent_now = Answerability.ABSENT_COMMON
    print(f"\n== signals alone and together (held out, ABSENT_COMMON {absent_now}, target {train_wrong:.1%})")
    for names in [(n,) for n in RULE + EXTRA] + [RULE] + list(COMBOS):
        h = cross_validate(qs, names, k, seeds, train_wrong)
        print(f"   {' + '.join(names):<50} {per_vault(qs, h)}")
    absent = choose_absent([q for q in qs if not q.no_hit], train_wrong)
    report_bound(qs, held, absent, train_wrong)
    model = in_sample(qs, RULE, absent, train_wrong)
    w = dict(zip(RULE, model.weights.tolist()))
    print(
        f"\n== fitted on all questions (target {train_wrong:.1%}): INTERCEPT = {model.bias - model.threshold:.3f}, "
        f"W_COVERAGE = {w['coverage']:.3f}, W_TOP = {w['top']:.3f}, W_UNKNOWN = {w['unknown']:.3f}, "
        f"W_UNCOVERED = {w['uncovered']:.3f}, ABSENT_COMMON = {absent}"
    )
    shipped = (Answerability.INTERCEPT, Answerability.W_COVERAGE, Answerability.W_TOP, Answerability.W_UNKNOWN)
    print(f"   shipped: {shipped + (Answerability.W_UNCOVERED, Answerability.ABSENT_COMMON)}")
    del y


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dev", type=Path, action="append", help="dev file(s) (default: dev.jsonl and dev2.jsonl)")
    ap.add_argument("--vaults", type=Path, default=SHARED / "vaults")
    ap.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--train-wrong", type=float, default=0.015, help="wrongly-not-found allowed on training folds")
    args = ap.parse_args()
    qs = load_questions(args.dev or list(eval_cv.DEV_FILES), args.vaults, args.data_dir)
    report(qs, args.folds, args.seeds, args.train_wrong)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

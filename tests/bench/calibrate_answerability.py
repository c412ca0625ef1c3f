#!/usr/bin/env python3
"""Calibrate the answerability rule (cairn.answers.answerability) by stratified k-fold cross-validation.

For every question of the dev files (in-corpus: ``relevant`` not empty; off-corpus: empty) this retrieves the hits an
answer is drawn from through the real ask path (``AnswerService.retrieve``, cosine floor included) on the eval
indexes, and extracts the rule's evidence (coverage, unknown terms) plus the other candidate features:

- ``top``: the best hit's cosine (chunk or sentence); ``top_chunk``: the best hit's whole-chunk cosine;
- ``gap100`` / ``gap1000``: ``top_chunk`` minus the question's cosine to the 100th / 1000th best chunk of the vault;
- ``z``: ``top_chunk`` as a z-score against every chunk of the vault;
- ``agree``: 1 when the best hit's note is among BM25's top 10 notes;
- ``coverage``: idf-weighted share of the question's terms found in the hits; ``unknown``: question terms in no
  chunk that the model splits into several WordPieces (negated, so higher = more answerable);
- ``miss``: the largest idf share of a question term absent from the hits (negated).

Held-out figures: the folds are stratified by (vault, kind) and repeated with several seeds; a question with no hit
above the floor is not-found whatever the rule. For each fold the rule's constants (or, for the feature table, a
logistic regression's weights and threshold) are fitted on the training folds only, at the operating point that keeps
the training folds' wrongly-not-found at most ``--train-wrong``; the test fold is then scored. Reported: held-out
off-corpus not-found and in-corpus wrongly-not-found (mean over seeds, with a 95 % Wilson interval of one seed's
counts), per vault, the trade-off curve over ``--train-wrong``, the features alone and together, the examples the
rule gets wrong held out, and the constants fitted on all questions.

Usage: calibrate_answerability.py [--dev FILE ...] [--vaults DIR] [--data-dir DIR] [--folds 5] [--seeds 20]
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
from cairn.embedder import Embedder  # noqa: E402

SHARED = eval_cv.shared_dir()
FEATURES = ("top", "top_chunk", "gap100", "gap1000", "z", "agree", "coverage", "unknown", "miss")
RULE = ("coverage", "unknown")
COMBOS = (
    ("top", "gap100"),
    ("top", "coverage"),
    ("top", "z", "coverage"),
    ("top", "coverage", "unknown"),
    ("gap100", "coverage", "unknown"),
    ("top", "gap100", "coverage", "unknown", "agree"),
    FEATURES,
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
    top_note: str = ""


# ---------------------------------------------------------------------- extraction
def extract(answers: AnswerService, row: dict) -> Question:
    """One dev question's features on the real ask path."""
    search, question = answers.search, row["question"]
    hits = answers.retrieve(question)
    ev = answers.answerability.evidence(question, hits)
    qvec = search.vector_cache.embed([question])[0]
    snap = search.vectors.for_query()
    cos, sentence = snap.scores(qvec)
    by_cos = np.sort(cos)[::-1]
    top_chunk = max((float(cos[snap.row_of[h.chunk_id]]) for h in hits if h.chunk_id in snap.row_of), default=0.0)
    keyword = search.keyword_ranking(question, 60)
    rows = search.store.chunk_rows(keyword)
    bm25_notes = list(dict.fromkeys(rows[c].path for c in keyword if c in rows))[:10]
    counts = search.store.fts_counts()
    n_rows = counts.rows if counts is not None else 1
    idf_max = math.log((n_rows + 0.5) / 0.5)
    miss = 0.0
    hit_ids = np.asarray([h.chunk_id for h in hits], dtype=np.int64)
    for term in ev.terms:
        ids = answers.answerability._chunks_of(term)
        if not np.isin(ids, hit_ids).any():
            miss = max(miss, max(math.log((n_rows - len(ids) + 0.5) / (len(ids) + 0.5)), 0.0) / idf_max)
    features = {
        "top": max((h.cosine for h in hits), default=0.0),
        "top_chunk": top_chunk,
        "gap100": top_chunk - float(by_cos[min(99, len(by_cos) - 1)]),
        "gap1000": top_chunk - float(by_cos[min(999, len(by_cos) - 1)]),
        "z": (top_chunk - float(cos.mean())) / float(cos.std() or 1.0),
        "agree": float(bool(hits) and hits[0].file_path in bm25_notes),
        "coverage": ev.coverage,
        "unknown": -float(ev.unknown),
        "miss": -miss,
    }
    return Question(
        row["id"],
        row["vault"],
        row["kind"],
        question,
        bool(row["relevant"]),
        not hits,
        features,
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


# ---------------------------------------------------------------------- cross-validation
def stratified_folds(qs: list[Question], k: int, seed: int) -> np.ndarray:
    """Fold number of each question: :func:`eval_cv.stratified_folds` (stratified by (vault, kind))."""
    position = {q.id: i for i, q in enumerate(qs)}
    fold = np.zeros(len(qs), dtype=np.int64)
    rows = [{"id": q.id, "vault": q.vault, "kind": q.kind} for q in qs]
    for f, members in enumerate(eval_cv.stratified_folds(rows, k, seed)):
        for m in members:
            fold[position[m["id"]]] = f
    return fold


def threshold_for(scores: np.ndarray, answerable: np.ndarray, max_wrong: float) -> float:
    """The largest threshold (not-found when score < threshold) whose wrongly-not-found on these rows is at most
    ``max_wrong``: halfway between the last in-corpus score allowed below it and the next one."""
    inc = np.sort(scores[answerable])
    allowed = int(math.floor(max_wrong * len(inc) + 1e-9))
    if allowed >= len(inc):
        return math.inf
    below = inc[allowed - 1] if allowed > 0 else inc[0] - 0.02
    return float((below + inc[allowed]) / 2) if inc[allowed] > below else float(inc[allowed])


Scorer = Callable[[np.ndarray], np.ndarray]


def fit_rule(x: np.ndarray, answerable: np.ndarray, max_wrong: float) -> tuple[float, float]:
    """(UNKNOWN_PENALTY, COVERAGE_MIN) of the shipped rule: the grid penalty whose threshold (at ``max_wrong``)
    refuses the most off-corpus training questions; ties to the smaller penalty. ``x``: (n, 2) coverage, -unknown."""
    best: tuple[int, float, float] = (-1, 0.0, 0.0)
    for penalty in np.round(np.arange(0.0, 1.01, 0.05), 2):
        s = x[:, 0] + penalty * x[:, 1]
        t = threshold_for(s, answerable, max_wrong)
        refused = int(np.sum(s[~answerable] < t))
        if refused > best[0]:
            best = (refused, float(penalty), t)
    return best[1], best[2]


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 400) -> Scorer:
    """A class-balanced L2 logistic regression on standardised features (gradient descent); returns the scorer."""
    mu, sd = x.mean(0), x.std(0) + 1e-9
    z = (x - mu) / sd
    w, b = np.zeros(z.shape[1]), 0.0
    weight = np.where(y, 0.5 / max(y.mean(), 1e-9), 0.5 / max(1 - y.mean(), 1e-9))
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(z @ w + b)))
        g = (p - y) * weight
        w -= 0.1 * (z.T @ g / len(y) + l2 * w / len(y))
        b -= 0.1 * float(g.mean())
    return lambda xn: ((xn - mu) / sd) @ w + b


def fit_scorer(names: tuple[str, ...], x: np.ndarray, y: np.ndarray, max_wrong: float) -> Scorer:
    """The scorer of a feature set: the shipped rule for RULE, the feature itself alone, else logistic."""
    if names == RULE:
        penalty, _ = fit_rule(x, y, max_wrong)
        return lambda xn: xn[:, 0] + penalty * xn[:, 1]
    if len(names) == 1:
        return lambda xn: xn[:, 0]
    return fit_logistic(x, y.astype(float))


@dataclass
class HeldOut:
    refused: np.ndarray  # (seeds, n) bool: not-found held out

    def rate(self, mask: np.ndarray) -> float:
        return float(self.refused[:, mask].mean()) if mask.any() else float("nan")


def cross_validate(qs: list[Question], names: tuple[str, ...], k: int, seeds: int, max_wrong: float) -> HeldOut:
    x = np.asarray([[q.features[n] for n in names] for q in qs])
    y = np.asarray([q.answerable for q in qs])
    no_hit = np.asarray([q.no_hit for q in qs])
    refused = np.zeros((seeds, len(qs)), dtype=bool)
    for seed in range(seeds):
        fold = stratified_folds(qs, k, seed)
        for f in range(k):
            train, test = (fold != f) & ~no_hit, fold == f
            scorer = fit_scorer(names, x[train], y[train], max_wrong)
            t = threshold_for(scorer(x[train]), y[train], max_wrong)
            refused[seed, test] = scorer(x[test]) < t
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


def report(qs: list[Question], k: int, seeds: int, train_wrong: float) -> None:
    y = np.asarray([q.answerable for q in qs])
    vault = np.asarray([q.vault for q in qs])
    base = HeldOut(np.asarray([[q.no_hit for q in qs]]))
    print("== cosine floor only (today)")
    describe(qs, base, "both vaults")
    held = cross_validate(qs, RULE, k, seeds, train_wrong)
    print(f"\n== the rule ({' + '.join(RULE)}), held out: {k}-fold x {seeds} seeds, train target {train_wrong:.1%}")
    describe(qs, held, "both vaults")
    for v in sorted(set(vault)):
        m = vault == v
        describe([q for q, keep in zip(qs, m) if keep], HeldOut(held.refused[:, m]), v)
    print("\n== trade-off (held out): train target -> off-corpus not-found / in-corpus wrongly-not-found")
    for target in (0.0, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.08):
        h = cross_validate(qs, RULE, k, seeds, target)
        print(f"   {target:5.1%}  ->  {h.rate(~y):6.1%} / {h.rate(y):5.1%}")
    print(f"\n== features alone and together (held out, train target {train_wrong:.1%})")
    for names in [(n,) for n in FEATURES] + [RULE] + list(COMBOS):
        h = cross_validate(qs, names, k, seeds, train_wrong)
        print(f"   {' + '.join(names):<70} {h.rate(~y):6.1%} / {h.rate(y):5.1%}")
    print("\n== held out: off-corpus answered in most seeds / in-corpus refused in any seed")
    share = held.refused.mean(axis=0)
    for q, s in zip(qs, share):
        f = q.features
        row = f"cov {f['coverage']:.2f} unknown {-f['unknown']:.0f} top {f['top']:.2f}"
        if not q.answerable and s < 0.5:
            print(f"   answered  {q.vault:<14} {row}  {q.text[:70]!r} -> {q.top_note}")
        elif q.answerable and s > 0:
            print(f"   refused   {q.vault:<14} {row}  ({s:.0%} of seeds) {q.text[:70]!r}")
    x = np.asarray([[q.features[n] for n in RULE] for q in qs])
    trainable = ~np.asarray([q.no_hit for q in qs])
    penalty, threshold = fit_rule(x[trainable], y[trainable], train_wrong)
    print(
        f"\n== fitted on all questions: UNKNOWN_PENALTY = {penalty:.2f}, COVERAGE_MIN = {threshold:.3f} "
        f"(shipped: {Answerability.UNKNOWN_PENALTY}, {Answerability.COVERAGE_MIN})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_dev = list(eval_cv.DEV_FILES)
    ap.add_argument("--dev", type=Path, action="append", help="dev file(s) (default: dev.jsonl and dev2.jsonl)")
    ap.add_argument("--vaults", type=Path, default=SHARED / "vaults")
    ap.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--train-wrong", type=float, default=0.015, help="wrongly-not-found allowed on training folds")
    args = ap.parse_args()
    qs = load_questions(args.dev or default_dev, args.vaults, args.data_dir)
    report(qs, args.folds, args.seeds, args.train_wrong)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

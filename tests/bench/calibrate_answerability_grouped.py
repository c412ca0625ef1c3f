#!/usr/bin/env python3
"""Calibrate the answerability rule with GROUPED cross-validation on the dev files plus the paraphrase set.

Input: the evidence dump of ``answerability_features.py`` (hits and per-term matches of every question, read on the
real ask path). Questions are grouped by their target notes (questions sharing a relevant note are one group,
transitively; each off-corpus question is its own group), so paraphrases of one note never straddle train and
test. Folds are built from whole groups, balanced per (vault, answerable); repeated with several seeds.

In each fold a class-balanced logistic regression (``calibrate_answerability.fit``) is fitted on the training folds
and thresholded where the training folds' wrongly-not-found is at most ``--train-wrong``; a question with no hit
above the floor is not-found whatever the rule. Reported per vault: held-out off-corpus not-found and in-corpus
wrongly-not-found for every signal set tried (the signals table), and for the chosen set the three-outcome variant:
a second, higher threshold (put where the training folds' off-corpus questions above it are at most
``--train-answered``) below which the answer says the evidence is weak and shows the closest passages. Figures are
given both ways: weak counted as a refusal and not. Finally the chosen set fitted on all questions (the constants
to ship).

Usage: calibrate_answerability_grouped.py FEATURES.json [--folds 5] [--seeds 10] [--train-wrong 0.015]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calibrate_answerability import fit, threshold_for  # noqa: E402

ABSENT = 0.25  # what an absent one-piece term counts in ``uncovered`` (the shipped ABSENT_COMMON)


def idf(df: int, n: int) -> float:
    return max(math.log((n - df + 0.5) / (df + 0.5)), 0.0) if n else 0.0


def features(q: dict, absent_weight: float = 1.0) -> dict[str, float]:
    """Every candidate signal of one question. ``absent_weight``: the share of the largest idf that a term absent
    from the vault, of one WordPiece, weighs in the coverages (1: as rare as a term can be, the shipped rule)."""
    n, idf_max, hits, terms = q["n_rows"], q["idf_max"], q["hits"], q["terms"]
    weights, holders = [], []
    uncovered = 0.0
    unknown = absent_common = 0
    for t in terms:
        if t["df"]:
            w = idf(t["df"], n)
            if not t["in_hits"]:
                uncovered += w / idf_max
        elif t["pieces"] >= 2:
            w = idf_max
            unknown += 1
            uncovered += 1.0
        else:
            w = absent_weight * idf_max
            absent_common += 1
            uncovered += ABSENT
        weights.append(w)
        holders.append(set(t["hits"]))
    total = sum(weights)

    def share(chunks: set[int]) -> float:
        if total <= 0:
            return 1.0
        return sum(w for w, h in zip(weights, holders) if h & chunks) / total

    sem = sum(w * (1.0 if t["in_hits"] else max(0.0, (t.get("sim", 0.0) - 0.3) / 0.4)) for w, t in zip(weights, terms))
    cos = [h["cos"] for h in hits]
    notes: dict[str, set[int]] = defaultdict(set)
    for i, h in enumerate(hits):
        notes[h["path"]].add(i)
    spans = q.get("spans", [])
    return {
        "coverage": share(set(range(len(hits)))),
        "top": max(cos, default=0.0),
        "unknown": float(unknown),
        "uncovered": uncovered,
        "top3": float(np.mean(sorted(cos, reverse=True)[:3])) if cos else 0.0,
        "best_chunk": max((share({i}) for i in range(len(hits))), default=0.0),
        "best_note": max((share(c) for c in notes.values()), default=0.0),
        "absent_common": float(absent_common),
        "names_absent": float(sum(1 for s in spans if not s["df"])),
        "names_unhit": float(sum(1 for s in spans if not s["hits"])),
        "matched": max((h["matched"] for h in hits), default=0.0),
        "notes": float(len(notes)),
        "sem_cov": sem / total if total > 0 else 1.0,
        "min_sim": min((t.get("sim", 0.0) for t in terms if not t["in_hits"]), default=1.0),
    }


def groups_of(qs: list[dict]) -> list[int]:
    """Group number of each question: questions sharing a relevant note are one group (union-find)."""
    parent = list(range(len(qs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[tuple[str, str], int] = {}
    for i, q in enumerate(qs):
        for note in q["relevant"]:
            j = owner.setdefault((q["vault"], note), i)
            parent[find(i)] = find(j)
    return [find(i) for i in range(len(qs))]


def grouped_folds(qs: list[dict], groups: list[int], k: int, seed: int) -> np.ndarray:
    """Fold of each question: whole groups, shuffled, each put in the fold with fewest questions of its stratum."""
    rng = np.random.default_rng(seed)
    members: dict[int, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    order = list(members)
    rng.shuffle(order)
    order.sort(key=lambda g: -len(members[g]))  # stable: big groups first, ties in shuffled order
    load: dict[tuple[str, bool], np.ndarray] = defaultdict(lambda: np.zeros(k))
    fold = np.zeros(len(qs), dtype=np.int64)
    for g in order:
        q = qs[members[g][0]]
        stratum = (q["vault"], bool(q["relevant"]))
        f = int(np.argmin(load[stratum] + rng.random(k) * 1e-3))
        load[stratum][f] += len(members[g])
        fold[members[g]] = f
    return fold


def cross_validate(
    qs: list[dict], x: np.ndarray, k: int, seeds: int, train_wrong: float, train_answered: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(refused, weak), each (seeds, n) bool, held out. ``weak`` only with ``train_answered``: the band between the
    refusal threshold and the one under which ``train_answered`` of the training folds' in-corpus questions lie."""
    y = np.asarray([bool(q["relevant"]) for q in qs])
    no_hit = np.asarray([not q["hits"] for q in qs])
    groups = groups_of(qs)
    refused = np.zeros((seeds, len(qs)), dtype=bool)
    weak = np.zeros((seeds, len(qs)), dtype=bool)
    for seed in range(seeds):
        fold = grouped_folds(qs, groups, k, seed + 1)
        for f in range(k):
            train, test = (fold != f) & ~no_hit, fold == f
            model = fit(x[train], y[train], train_wrong)
            score = model.score(x[test])
            refused[seed, test] = score < model.threshold
            if train_answered is not None:
                high = threshold_for(model.score(x[train]), y[train], train_answered)
                weak[seed, test] = (score >= model.threshold) & (score < max(high, model.threshold))
    refused |= no_hit
    weak &= ~refused
    return refused, weak


def rate(mask_rows: np.ndarray, mask: np.ndarray) -> float:
    return float(mask_rows[:, mask].mean()) if mask.any() else float("nan")


def per_vault(qs: list[dict], refused: np.ndarray) -> str:
    y = np.asarray([bool(q["relevant"]) for q in qs])
    vault = np.asarray([q["vault"] for q in qs])
    parts = []
    for v in sorted(set(vault)):
        m = vault == v
        parts.append(f"{v[9:]} {rate(refused, m & ~y):5.1%} / {rate(refused, m & y):4.1%}")
    return "   ".join(parts)


SETS = (
    ("coverage", "top", "unknown", "uncovered"),
    ("coverage", "top", "unknown"),
    ("coverage", "top", "unknown", "uncovered", "top3"),
    ("coverage", "top", "unknown", "uncovered", "best_chunk"),
    ("coverage", "top", "unknown", "uncovered", "best_note"),
    ("coverage", "top", "unknown", "uncovered", "absent_common"),
    ("coverage", "top", "unknown", "uncovered", "names_absent"),
    ("coverage", "top", "unknown", "uncovered", "names_unhit"),
    ("coverage", "top", "unknown", "uncovered", "matched"),
    ("coverage", "top", "unknown", "uncovered", "notes"),
    ("coverage", "top", "unknown", "uncovered", "best_note", "names_unhit"),
    ("coverage", "top", "unknown", "uncovered", "best_chunk", "names_unhit"),
    ("coverage", "top", "unknown", "uncovered", "best_note", "names_unhit", "top3"),
    ("coverage", "top", "unknown", "uncovered", "sem_cov"),
    ("coverage", "top", "unknown", "uncovered", "min_sim"),
    ("sem_cov", "top", "unknown", "uncovered"),
    ("coverage", "top", "unknown", "uncovered", "names_absent", "sem_cov"),
)


def matrix(qs: list[dict], names: tuple[str, ...], absent_weight: float) -> np.ndarray:
    return np.asarray([[features(q, absent_weight)[n] for n in names] for q in qs])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("features", type=Path)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--train-wrong", type=float, default=0.015)
    ap.add_argument("--train-answered", type=float, default=0.08, help="the X of the constants fitted on all")
    ap.add_argument("--weak-grid", type=float, nargs="*", default=[0.03, 0.05, 0.08, 0.12, 0.2])
    ap.add_argument("--absent-weight", type=float, action="append", help="grid (default 1.0, 0.5, 0.25, 0)")
    ap.add_argument("--only", help="comma-separated signal set: report only it (with the three outcomes)")
    args = ap.parse_args()
    qs = json.loads(args.features.read_text())
    grid = args.absent_weight or [1.0, 0.5, 0.25, 0.0]
    groups = groups_of(qs)
    y = np.asarray([bool(q["relevant"]) for q in qs])
    print(f"{len(qs)} questions ({int(y.sum())} in-corpus, {int((~y).sum())} off-corpus), {len(set(groups))} groups")
    print(f"{args.folds}-fold grouped x {args.seeds} seeds; train wrongly-not-found <= {args.train_wrong:.1%}")
    print("held out: off-corpus not-found / in-corpus wrongly-not-found, per vault")
    sets = [tuple(args.only.split(","))] if args.only else SETS
    for a in grid:
        for names in sets:
            refused, _ = cross_validate(qs, matrix(qs, names, a), args.folds, args.seeds, args.train_wrong)
            print(f"  absent {a:4.2f}  {' + '.join(names):<72} {per_vault(qs, refused)}")
    if args.only:
        names, a = tuple(args.only.split(",")), grid[0]
        x = matrix(qs, names, a)
        print("\nthree outcomes: refused below the training folds' in-corpus --train-wrong quantile, weak up to their")
        print("in-corpus X quantile; per vault: off-corpus / in-corpus")
        for target in args.weak_grid:
            refused, weak = cross_validate(qs, x, args.folds, args.seeds, args.train_wrong, target)
            print(f"  X {target:5.1%}  weak as refusal {per_vault(qs, refused | weak)}")
            print(f"  {'':8} weak as answer  {per_vault(qs, refused)}")
            print(f"  {'':8} weak share      {per_vault(qs, weak)}")
        trainable = np.asarray([bool(q["hits"]) for q in qs])
        model = fit(x[trainable], y[trainable], args.train_wrong)
        high = threshold_for(model.score(x[trainable]), y[trainable], args.train_answered)
        w = ", ".join(f"{n} {v:.3f}" for n, v in zip(names, model.weights))
        print(f"\nfitted on all: {w}; bias {model.bias:.3f}; refuse below {model.threshold:.3f}, weak below {high:.3f}")
        print(f"  as shipped constants: INTERCEPT {model.bias - high:.3f}, WEAK_MARGIN {high - model.threshold:.3f}")
        for i, q in enumerate(qs):
            if refused[:, i].mean() >= 0.5 and q["relevant"]:
                print(f"  refused in-corpus: {q['vault'][9:]} {q['id']} {q['question'][:80]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

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

``--new`` reports the shipped family plus each newer candidate (``NEW_SETS``: sentence-level cosines and coverage,
near-neighbour substitution of a term, consecutive-term pairs, the vault-relative cosine against the vault's own
background questions). ``--curve`` (with ``--only``) prints the held-out trade-off at several operating points, a
model per vault, and the bound of the held-out scores under any threshold per vault.

Usage: calibrate_answerability_grouped.py FEATURES.json [--folds 5] [--seeds 10] [--train-wrong 0.015] [--new]
       [--only SIGNALS --curve 0.01 0.02 ...]
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


def features(q: dict, absent_weight: float = 1.0, bg: dict[str, float] | None = None) -> dict[str, float]:
    """Every candidate signal of one question. ``absent_weight``: the share of the largest idf that a term absent
    from the vault, of one WordPiece, weighs in the coverages (1: as rare as a term can be, the shipped rule).
    ``bg``: the question's vault's background (:func:`background`), for the vault-relative signals."""
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
    raw_top = q.get("raw_top", max(cos, default=0.0))
    top = max(cos, default=0.0)
    bg = bg or {}
    out = {
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
        "raw_top": raw_top,
        "sent_top": max((h.get("sent_cos", -1.0) for h in hits), default=0.0),
        "chunk_top": max((h.get("chunk_cos", -1.0) for h in hits), default=0.0),
        **_sentence_signals(hits, terms, weights, total),
        **_substitution(terms, weights, total),
        **_pair_signals(q, n, idf_max),
    }
    if bg:
        out["top_rel"] = top - bg["raw_top_med"]
        out["raw_top_z"] = (raw_top - bg["raw_top_mean"]) / bg["raw_top_sd"]
        out["top_pct"] = float(np.mean(np.asarray(bg["raw_tops"]) < top))
        out["cov_rel"] = out["coverage"] - bg["coverage_mean"]
        out["bg_top"] = bg["raw_top_med"]
        out["cov_x_top"] = out["coverage"] * top
    return out


def _sentence_signals(hits: list[dict], terms: list[dict], weights: list[float], total: float) -> dict[str, float]:
    """The best idf-weighted share of the question's terms held by one sentence of a hit (``sent_cov``) and by a
    window of 2 or 3 consecutive sentences (``win2_cov``, ``win3_cov``)."""
    best = {"sent_cov": 0.0, "win2_cov": 0.0, "win3_cov": 0.0}
    if total <= 0 or not hits or not all("sents" in t for t in terms):
        return {k: 1.0 if total <= 0 else 0.0 for k in best}
    for i, h in enumerate(hits):
        n = max(h.get("n_sents", 1), 1)
        held = np.zeros(n)
        at = np.zeros((len(terms), n), dtype=bool)
        for k, t in enumerate(terms):
            if i < len(t["sents"]):
                for j in t["sents"][i]:
                    if j < n:
                        at[k, j] = True
        w = np.asarray(weights)
        for size, key in ((1, "sent_cov"), (2, "win2_cov"), (3, "win3_cov")):
            for j in range(max(n - size + 1, 1)):
                held = at[:, j : j + size].any(1)
                best[key] = max(best[key], float(w[held].sum() / total))
    return best


def _substitution(terms: list[dict], weights: list[float], total: float) -> dict[str, float]:
    """Question terms the vault holds but the first hit lacks while holding a near neighbour of them (word embedding
    similarity >= 0.6: "import" for "export"): their count (``sub_n``) and idf share (``sub_w``); the best such
    similarity (``sub_max``)."""
    subs = [(w, t["sub_sim"]) for w, t in zip(weights, terms) if t.get("sub_sim") is not None]
    near = [(w, s) for w, s in subs if s >= 0.6]
    return {
        "sub_n": float(len(near)),
        "sub_w": sum(w for w, _ in near) / total if total > 0 else 0.0,
        "sub_max": max((s for _, s in subs), default=0.0),
    }


def _pair_signals(q: dict, n: int, idf_max: float) -> dict[str, float]:
    """Consecutive question terms (both in the vault) held within 3 tokens of each other: the share of such pairs
    some hit holds (``pair_hit``), the share no chunk of the vault holds (``pair_absent``), and the rarity (the
    rarer term's idf share) summed over pairs whose terms the hits hold apart but never together (``pair_split``)."""
    pairs = q.get("pairs", [])
    if not pairs:
        return {"pair_hit": 1.0, "pair_absent": 0.0, "pair_split": 0.0, "pairs": 0.0}
    inh = {t["term"]: t["in_hits"] for t in q["terms"]}
    split = sum(
        min(idf(d, n) for d in p["idf_terms"]) / idf_max
        for p in pairs
        if not p["hits"] and all(inh.get(t, False) for t in p["pair"])
    )
    return {
        "pair_hit": sum(1 for p in pairs if p["hits"]) / len(pairs),
        "pair_absent": sum(1 for p in pairs if not p["df"]) / len(pairs),
        "pair_split": split,
        "pairs": float(len(pairs)),
    }


def background(qs: list[dict], absent_weight: float) -> dict[str, dict[str, float]]:
    """Per vault, the distribution of the evidence of its background questions (kind ``background``: everyday
    questions no vault answers): the vault-adaptive reference."""
    out: dict[str, dict[str, float]] = {}
    for v in sorted({q["vault"] for q in qs if q["kind"] == "background"}):
        fs = [features(q, absent_weight) for q in qs if q["kind"] == "background" and q["vault"] == v]
        raw = np.asarray([f["raw_top"] for f in fs])
        out[v] = {
            "raw_tops": raw.tolist(),
            "raw_top_med": float(np.median(raw)),
            "raw_top_mean": float(raw.mean()),
            "raw_top_sd": float(raw.std() + 1e-6),
            "coverage_mean": float(np.mean([f["coverage"] if f["top"] > 0 else 0.0 for f in fs])),
        }
    return out


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

#: The shipped family (coverage with absent 0.25, top, unknown, uncovered, names absent) and the signals added to it.
BASE = ("coverage", "top", "unknown", "uncovered", "names_absent")
NEW_SETS = (
    BASE,
    (*BASE, "raw_top"),
    (*BASE, "sent_top"),
    (*BASE, "chunk_top"),
    (*BASE, "sent_cov"),
    (*BASE, "win2_cov"),
    (*BASE, "win3_cov"),
    (*BASE, "sub_n"),
    (*BASE, "sub_w"),
    (*BASE, "sub_max"),
    (*BASE, "bg_top"),
    (*BASE, "top_rel"),
    (*BASE, "raw_top_z"),
    (*BASE, "top_pct"),
    (*BASE, "cov_rel"),
    (*BASE, "pair_hit"),
    (*BASE, "pair_absent"),
    (*BASE, "pair_split"),
    (*BASE, "pair_hit", "pair_absent"),
    (*BASE, "cov_x_top"),
    (*BASE, "sent_cov", "pair_split", "sub_w", "top_rel"),
    (*BASE, "pairs"),
    ("coverage", "top_rel", "unknown", "uncovered", "names_absent"),
    ("coverage", "raw_top_z", "unknown", "uncovered", "names_absent"),
    ("coverage", "top_pct", "unknown", "uncovered", "names_absent"),
    ("cov_rel", "top_rel", "unknown", "uncovered", "names_absent"),
)

BG: dict[str, dict[str, float]] = {}


def matrix(qs: list[dict], names: tuple[str, ...], absent_weight: float) -> np.ndarray:
    return np.asarray([[features(q, absent_weight, BG.get(q["vault"]))[n] for n in names] for q in qs])


def print_curve(qs: list[dict], x: np.ndarray, args: argparse.Namespace) -> None:
    """The held-out trade-off: one shared threshold at each training wrongly-not-found of ``--curve``, and (a bound,
    not a rule: it reads each vault's labels) a threshold per vault from that vault's training questions alone."""
    print("\ncurve (held out, per vault: off-corpus not-found / in-corpus wrongly-not-found)")
    for tw in args.curve:
        refused, _ = cross_validate(qs, x, args.folds, args.seeds, tw)
        print(f"  shared  train {tw:5.1%}  {per_vault(qs, refused)}")
    vault = np.asarray([q["vault"] for q in qs])
    for tw in args.curve:
        refused = np.zeros((args.seeds, len(qs)), dtype=bool)
        for v in sorted(set(vault)):
            m = vault == v
            sub = [q for q, k in zip(qs, m) if k]
            r, _ = cross_validate(sub, x[m], args.folds, args.seeds, tw)
            refused[:, m] = r
        print(f"  per-vault train {tw:5.1%}  {per_vault(qs, refused)}")
    print_roc(qs, x, args)


def held_out_scores(qs: list[dict], x: np.ndarray, k: int, seeds: int) -> np.ndarray:
    """(seeds, n): each question's score by the model fitted on the other folds (-inf without hits)."""
    y = np.asarray([bool(q["relevant"]) for q in qs])
    no_hit = np.asarray([not q["hits"] for q in qs])
    groups = groups_of(qs)
    out = np.full((seeds, len(qs)), -np.inf)
    for seed in range(seeds):
        fold = grouped_folds(qs, groups, k, seed + 1)
        for f in range(k):
            train, test = (fold != f) & ~no_hit, (fold == f) & ~no_hit
            model = fit(x[train], y[train], 0.015)
            out[seed, test] = model.score(x[test]) - model.threshold
    return out


def print_roc(qs: list[dict], x: np.ndarray, args: argparse.Namespace) -> None:
    """The bound: every threshold on the held-out scores, per vault (chosen on the test questions themselves, so
    optimistic): off-corpus not-found at each in-corpus wrongly-not-found, mean over seeds."""
    scores = held_out_scores(qs, x, args.folds, args.seeds)
    y = np.asarray([bool(q["relevant"]) for q in qs])
    vault = np.asarray([q["vault"] for q in qs])
    print("\nheld-out scores, any threshold per vault (optimistic bound): off-corpus not-found at in-corpus wrong <=")
    for v in sorted(set(vault)):
        row = []
        for cap in (0.0, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2):
            best = []
            for s in scores:
                inc, off = np.sort(s[(vault == v) & y]), s[(vault == v) & ~y]
                allowed = int(math.floor(cap * len(inc) + 1e-9))
                t = inc[allowed]  # refuse below the (allowed+1)-th lowest in-corpus score
                best.append(float((off < t).mean()))
            row.append(f"{cap:4.0%}: {np.mean(best):5.1%}")
        print(f"  {v[9:]:5} " + "  ".join(row))


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
    ap.add_argument("--new", action="store_true", help="the new signal sets (NEW_SETS) instead of SETS")
    ap.add_argument("--curve", type=float, nargs="*", help="with --only: held-out figures at these --train-wrong")
    args = ap.parse_args()
    qs = json.loads(args.features.read_text())
    grid = args.absent_weight or [1.0, 0.5, 0.25, 0.0]
    BG.update(background(qs, grid[0]))
    qs = [q for q in qs if q["kind"] != "background"]
    groups = groups_of(qs)
    y = np.asarray([bool(q["relevant"]) for q in qs])
    print(f"{len(qs)} questions ({int(y.sum())} in-corpus, {int((~y).sum())} off-corpus), {len(set(groups))} groups")
    print(f"{args.folds}-fold grouped x {args.seeds} seeds; train wrongly-not-found <= {args.train_wrong:.1%}")
    print("held out: off-corpus not-found / in-corpus wrongly-not-found, per vault")
    sets = [tuple(args.only.split(","))] if args.only else NEW_SETS if args.new else SETS
    for a in grid:
        for names in sets:
            refused, _ = cross_validate(qs, matrix(qs, names, a), args.folds, args.seeds, args.train_wrong)
            print(f"  absent {a:4.2f}  {' + '.join(names):<72} {per_vault(qs, refused)}")
    if args.only and args.curve:
        print_curve(qs, matrix(qs, tuple(args.only.split(",")), grid[0]), args)
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

#!/usr/bin/env python3
"""Fusion families for the hybrid search, each chosen by k-fold cross-validation over the union of the dev files'
answerable questions, on the search's own evidence (:mod:`fusion_replay`: exact replays of
``SearchService._fuse`` / ``_order``, hybrid, search purpose, one chunk per note, top 10, as ``eval_retrieval.py``).

Families (each a grid of settings; the fusion before them, weighted RRF, first in every grid; the service's
default, :data:`DEFAULT`, in several):

- ``rrf``: weighted RRF, BM25 weight × RRF k;
- ``convex``: α · norm(dense) + (1 − α) · norm(BM25) of per-query normalised scores (Bruch et al., "An Analysis of
  Fusion Functions for Hybrid Retrieval"): min-max over each leg's list (``mm``), theoretical-min min-max (BM25
  from 0: ``tmm``), z-score over each list (``z``);
- ``adaptive``: RRF whose BM25 weight depends on the query: on the agreement of the legs' top 5 notes, on how
  peaked the BM25 scores are (best / fifth best), or on the number of terms (a threshold, a weight each side);
- ``second``: note aggregation, each chunk's fused score + λ × its note's second best chunk's;
- ``prf``: dense pseudo-relevance feedback (Rocchio: q + β · mean of the top-k dense chunk vectors) for the dense
  leg's order;
- ``depth``: the candidate depth of each leg;
- ``floor``: in search, lexical evidence below the cosine floor fused among the rest instead of after it;
- ``all``: the product of the best few of each.

Per fold (``eval_cv.stratified_folds``, ``--seeds`` seeds) the setting with the best mean (Hit@5 + MRR@10) / 2 on
the other folds is scored on the held-out fold. Printed per family and vault: the held-out Hit@5 / MRR@10, the
in-sample best (the setting best on the whole set, and the best Hit@5 any setting of the family reaches: an
upper bound of what tuning it can give), and the settings chosen. Then, for the misses of the best held-out family,
where each leg ranks the relevant note.

Usage: experiment_fusion.py [--data-dir DIR] [--vaults DIR] [--folds 5] [--seeds 3] [--family NAME ...]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_cv import DEFAULT_SEED, load_questions, stratified_folds  # noqa: E402
from fusion_replay import QuestionEvidence, Replay, open_vault  # noqa: E402

from cairn.embedder import Embedder  # noqa: E402
from cairn.ranking import FusionWeights  # noqa: E402
from cairn.search.query import query_terms  # noqa: E402

TODAY = FusionWeights()
#: The fusion before this experiment (weighted RRF, note at its best chunk): every setting's fields default to it.
BEFORE = FusionWeights(method="rrf", dense=1.0, bm25=0.3, k=60, second=0.0)


@dataclass(frozen=True)
class Setting:
    """One configuration of the replayed fusion."""

    fusion: str = "rrf"  # rrf | convex
    bm25: float = BEFORE.bm25  # RRF weight of the BM25 list
    k: int = BEFORE.k
    alpha: float = 0.7  # convex: weight of the dense score
    norm: str = "mm"  # convex: mm | tmm | z
    adapt: str = ""  # "" | agree | peak | terms
    threshold: float = 0.0
    bm25_high: float = BEFORE.bm25  # the BM25 weight at or above the threshold
    second: float = 0.0
    prf_k: int = 0
    prf_beta: float = 0.0
    depth_bm25: int = 60
    depth_dense: int = 60
    below_last: bool = True
    title: float = 0.0  # weight of the title-vector list (RRF) or term (convex)
    depth_title: int = 0

    def label(self) -> str:
        base = Setting()
        return ", ".join(f"{k}={v}" for k, v in vars(self).items() if getattr(base, k) != v) or "rrf (before)"


#: The service's default fusion (:class:`cairn.ranking.FusionWeights`) as a setting.
DEFAULT = Setting(fusion=TODAY.method, alpha=TODAY.alpha, norm="tmm", second=TODAY.second)


# ---------------------------------------------------------------------------------------------- fusion functions
def _rrf(weights: dict[str, float], k: int) -> Callable:
    def fuse(ev: QuestionEvidence, lists: dict[str, list[int]], allowed: set[int]) -> dict[int, float]:
        out: dict[int, float] = {}
        for name, ranked in lists.items():
            w = weights[name]
            for r, c in enumerate(ranked, 1):
                out[c] = out.get(c, 0.0) + w / (k + r)
        return out

    return fuse


def _normalised(values: np.ndarray, ref: np.ndarray, norm: str, zero_floor: bool) -> np.ndarray:
    if not len(ref):
        return np.zeros(len(values))
    if norm == "z":
        sd = float(ref.std()) or 1.0
        return (values - float(ref.mean())) / sd
    lo = 0.0 if zero_floor else float(ref.min())
    span = float(ref.max()) - lo or 1.0
    return np.clip((values - lo) / span, 0.0, None)


def _convex(alpha: float, norm: str, dense_scores: np.ndarray | None, title: float = 0.0) -> Callable:
    def fuse(ev: QuestionEvidence, lists: dict[str, list[int]], allowed: set[int]) -> dict[int, float]:
        cands = np.asarray(sorted({c for ranked in lists.values() for c in ranked}), dtype=np.int64)
        if not len(cands):
            return {}
        dense = ev.dense if dense_scores is None else dense_scores
        nt = 0.0
        if title:
            ref = np.asarray(lists["title"], dtype=np.int64) if "title" in lists else cands
            nt = _normalised(ev.title[cands], ev.title[ref], norm, False)
        nd = _normalised(dense[cands], dense[np.asarray(lists["dense"], dtype=np.int64)], norm, False)
        bm_ref = ev.bm25[np.asarray(lists["bm25"], dtype=np.int64)]
        nb = _normalised(ev.bm25[cands], bm_ref, norm, norm == "tmm")
        fused = alpha * nd + (1 - alpha) * nb + title * nt
        if norm == "z":
            fused = fused - fused.min() + 1e-9  # positive, so the kind boost (a factor) raises a score
        return dict(zip(cands.tolist(), fused.tolist()))

    return fuse


def _feature(rp: Replay, ev: QuestionEvidence, adapt: str) -> float:
    """The query feature an adaptive BM25 weight reads."""
    if adapt == "terms":
        return float(len(query_terms(ev.question["question"])))
    legs = rp.legs(ev, 60, 60)
    if adapt == "agree":
        tops = []
        for name in ("dense", "bm25"):
            notes: list[str] = []
            for c in legs[name]:
                if rp.path[c] not in notes:
                    notes.append(str(rp.path[c]))
                if len(notes) == 5:
                    break
            tops.append(set(notes))
        return float(len(tops[0] & tops[1]))
    scores = ev.bm25[np.asarray(legs["bm25"][:5], dtype=np.int64)]
    return float(scores[0] / scores[-1]) if len(scores) == 5 and scores[-1] > 0 else 1.0


def rank(rp: Replay, ev: QuestionEvidence, s: Setting) -> list[str]:
    """The top 10 notes of ``ev`` under setting ``s``."""
    dense = _prf_scores(rp, ev, s.prf_k, s.prf_beta) if s.prf_k else None
    if s.fusion == "convex":
        fuse = _convex(s.alpha, s.norm, dense, s.title)
    else:
        w = s.bm25
        if s.adapt and _feature(rp, ev, s.adapt) >= s.threshold:
            w = s.bm25_high
        fuse = _rrf({"dense": 1.0, "bm25": w, "title": s.title}, s.k)
    return rp.rank(
        ev,
        fuse,
        depth_bm25=s.depth_bm25,
        depth_dense=s.depth_dense,
        second=s.second,
        dense=dense,
        below_last=s.below_last,
        depth_title=s.depth_title,
    )


def _prf_scores(rp: Replay, ev: QuestionEvidence, k: int, beta: float) -> np.ndarray:
    key = ("prf", k, beta)
    if key not in ev.cache:
        top = np.argsort(-ev.dense, kind="stable")[:k]
        q = ev.qvec + beta * rp.snap.chunks[top].mean(axis=0)
        ev.cache[key] = rp.dense_scores((q / np.linalg.norm(q)).astype(np.float32))
    return ev.cache[key]


# ---------------------------------------------------------------------------------------------- grids
def grids(best: dict[str, Setting] | None = None) -> dict[str, list[Setting]]:
    t = Setting()
    now = DEFAULT
    out = {
        "rrf": [t] + [Setting(bm25=w, k=k) for w in (0.2, 0.3, 0.5, 0.7, 1.0) for k in (10, 20, 40, 60, 100)],
        "convex": [t]
        + [Setting(fusion="convex", alpha=a, norm=n) for n in ("mm", "tmm", "z") for a in np.arange(0.4, 1.0, 0.05)],
        "adaptive": [t]
        + [
            Setting(adapt=f, threshold=th, bm25=lo, bm25_high=hi)
            for f, ths in (("agree", (1, 2, 3)), ("peak", (1.2, 1.5, 2.0, 3.0)), ("terms", (5, 7, 9)))
            for th in ths
            for lo in (0.1, 0.3, 0.5, 1.0)
            for hi in (0.1, 0.3, 0.5, 1.0)
            if lo != hi
        ],
        "second": [t, now] + [Setting(second=x) for x in (0.1, 0.2, 0.3, 0.5, 0.8)],
        "prf": [t, now]
        + [Setting(prf_k=k, prf_beta=b) for k in (3, 5, 10) for b in (0.2, 0.5, 1.0)]
        + [replace(now, prf_k=k, prf_beta=b) for k in (3, 5, 10) for b in (0.2, 0.5)],
        "depth": [t]
        + [Setting(depth_bm25=b, depth_dense=d) for b in (20, 40, 60, 100, 200) for d in (40, 60, 100, 200)]
        + [replace(now, depth_bm25=b, depth_dense=d) for b in (40, 60, 100) for d in (40, 60, 100)],
        "floor": [t, Setting(below_last=False), now, replace(now, below_last=False)],
        "title": [t]
        + [Setting(title=w, depth_title=d) for w in (0.1, 0.2, 0.3, 0.5, 1.0) for d in (10, 20, 60)]
        + [
            Setting(fusion="convex", alpha=a, norm="tmm", title=w, depth_title=d)
            for a in (0.45, 0.55)
            for w in (0.05, 0.1, 0.2)
            for d in (10, 20)
        ],
    }
    out["convex+"] = [t] + [
        Setting(fusion="convex", alpha=a, norm=n, title=w, depth_title=d if w else 0, depth_bm25=db)
        for n in ("tmm", "mm")
        for a in (0.35, 0.4, 0.45, 0.5, 0.55)
        for w in (0.0, 0.025, 0.05, 0.1)
        for d in (5, 10, 20)
        for db in (60, 100)
        if w or d == 10
    ]
    out["title-cands"] = [t] + [
        Setting(fusion="convex", alpha=a, norm="tmm", title=w, depth_title=d)
        for a in (0.45, 0.5)
        for w in (0.025, 0.05, 0.1)
        for d in (0, 10)
    ]
    out["combined"] = [t] + [
        Setting(fusion="convex", alpha=a, norm="tmm", title=w, depth_title=d, second=x)
        for a in (0.4, 0.45, 0.5)
        for w, d in ((0.0, 0), (0.05, 5), (0.05, 10))
        for x in (0.0, 0.1, 0.2)
    ]
    if best:
        keys = ("bm25", "k", "second", "depth_bm25", "depth_dense", "below_last", "prf_k", "prf_beta")
        choices = {k: sorted({getattr(s, k) for s in best.values()}, key=repr) for k in keys}
        out["all"] = [t] + [Setting(**dict(zip(keys, combo))) for combo in itertools.product(*choices.values())]
    return out


# ---------------------------------------------------------------------------------------------- scoring and CV
def figures(ranked: Sequence[str], relevant: set[str]) -> tuple[float, float]:
    hit = 1.0 if relevant & set(ranked[:5]) else 0.0
    rr = next((1.0 / i for i, p in enumerate(ranked[:10], 1) if p in relevant), 0.0)
    return hit, rr


def score(replays: Sequence[Replay], grid: Sequence[Setting]) -> np.ndarray:
    """(settings, questions, 2) Hit@5 and RR@10, questions in replay order."""
    items = [(rp, ev) for rp in replays for ev in rp.items]
    out = np.zeros((len(grid), len(items), 2))
    for s, setting in enumerate(grid):
        for i, (rp, ev) in enumerate(items):
            out[s, i] = figures(rank(rp, ev, setting), set(ev.question["relevant"]))
    return out


def cross_validate(scores: np.ndarray, questions: list[dict], folds: int, seeds: int) -> tuple[np.ndarray, Counter]:
    """Held-out (questions, 2) figures averaged over the seeds, and how often each setting was chosen."""
    objective = scores.mean(axis=2)
    pos = {q["id"]: i for i, q in enumerate(questions)}
    held = np.zeros(scores.shape[1:])
    chosen: Counter = Counter()
    for seed in range(seeds):
        for members in stratified_folds(questions, folds, DEFAULT_SEED + seed):
            test = np.zeros(len(questions), dtype=bool)
            test[[pos[m["id"]] for m in members]] = True
            train = objective[:, ~test].mean(axis=1)
            best = int(np.flatnonzero(train == train.max())[0])  # ties: the earlier setting (the one before first)
            chosen[best] += 1
            held[test] += scores[best][test]
    return held / seeds, chosen


def per_vault(rows: np.ndarray, questions: list[dict]) -> str:
    parts = []
    for vault in sorted({q["vault"] for q in questions}):
        ix = [i for i, q in enumerate(questions) if q["vault"] == vault]
        h, rr = rows[ix].mean(axis=0)
        parts.append(f"{vault} {h:.3f} / {rr:.3f}")
    return " | ".join(parts)


def report_family(name: str, grid: list[Setting], scores: np.ndarray, questions: list[dict], args) -> Setting:  # noqa: ANN001
    held, chosen = cross_validate(scores, questions, args.folds, args.seeds)
    objective = scores.mean(axis=(1, 2))
    best = int(np.argmax(objective))
    print(f"\n## {name} ({len(grid)} settings)  Hit@5 / MRR@10")
    print(f"  rrf (before)          : {per_vault(scores[0], questions)}")
    print(f"  held out (CV)         : {per_vault(held, questions)}")
    print(f"  in-sample best        : {per_vault(scores[best], questions)}  [{grid[best].label()}]")
    for vault in sorted({q["vault"] for q in questions}):
        ix = [i for i, q in enumerate(questions) if q["vault"] == vault]
        hits = scores[:, ix, 0].mean(axis=1)
        mrr = scores[:, ix, 1].mean(axis=1)
        print(
            f"  in-sample max {vault}: Hit@5 {hits.max():.3f} [{grid[int(np.argmax(hits))].label()}], "
            f"MRR@10 {mrr.max():.3f} [{grid[int(np.argmax(mrr))].label()}]"
        )
    for s, n in chosen.most_common(4):
        print(f"    chosen {n}x: {grid[s].label()}")
    return grid[best]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache")
    ap.add_argument("--vaults", type=Path, default=REPO.parent / "shared" / "vaults")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--family", action="append", help="only these families (default: all)")
    args = ap.parse_args()
    questions = [q for q in load_questions() if q["relevant"]]
    embedder = Embedder()
    replays = []
    for vault in sorted({q["vault"] for q in questions}):
        cairn = open_vault(vault, args.vaults, args.data_dir, embedder)
        replays.append(Replay(vault, cairn.query, [q for q in questions if q["vault"] == vault]))
        mismatch = [ev.question["id"] for ev in replays[-1].items if rank(replays[-1], ev, DEFAULT) != ev.ranked]
        print(
            f"# {vault}: replay differs from the service on {len(mismatch)} questions {mismatch[:5]}", file=sys.stderr
        )
    ordered = [ev.question for rp in replays for ev in rp.items]
    best: dict[str, Setting] = {}
    families = grids()
    for name in args.family or list(families):
        if name == "all":
            continue
        scores = score(replays, families[name])
        best[name] = report_family(name, families[name], scores, ordered, args)
    if not args.family or "all" in args.family:
        grid = grids(best)["all"]
        report_family("all", grid, score(replays, grid), ordered, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

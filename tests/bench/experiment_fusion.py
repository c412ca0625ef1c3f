#!/usr/bin/env python3
"""The fusion weights of the real search (``FusionWeights``: the BM25 list's RRF weight and RRF ``k``), chosen by
k-fold cross-validation over the union of the dev files' answerable questions.

For every setting of the grid, each question is ranked by ``SearchService.retrieve`` (hybrid, one chunk per note,
top 10: as ``eval_retrieval.py`` ranks) over the indexes in ``--data-dir`` (indexed first if needed), with every
list the service fuses today. Per fold (``eval_cv.stratified_folds``, several seeds) the setting with the best
mean (Hit@5 + MRR@10) / 2 on the other folds is scored on the held-out fold. Printed: each setting's figures on
the whole set (for reference only), the held-out figures of choosing by CV, and the settings chosen.

Usage: experiment_fusion.py [--data-dir DIR] [--vaults DIR] [--seeds 3]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_cv import DEFAULT_SEED, load_questions, stratified_folds  # noqa: E402

from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.embedder import Embedder  # noqa: E402
from cairn.ranking import FusionWeights  # noqa: E402
from cairn.search.cache import EpochLRU  # noqa: E402

GRID = [FusionWeights(dense=1.0, bm25=w, k=k) for w in (0.3, 0.5, 0.7, 1.0, 1.5) for k in (10, 20, 40, 60)]


def figures(ranked: list[str], relevant: set[str]) -> tuple[float, float, float]:
    """(Hit@5, reciprocal rank within the top 10, Recall@5) of one note ranking."""
    top5 = set(ranked[:5])
    rr = next((1.0 / i for i, p in enumerate(ranked[:10], 1) if p in relevant), 0.0)
    return (1.0 if relevant & top5 else 0.0), rr, len(relevant & top5) / len(relevant)


def score_grid(questions: list[dict], vaults: Path, data_dir: Path) -> np.ndarray:
    """(settings, questions, 3) figures of every setting of :data:`GRID` on every question."""
    out = np.zeros((len(GRID), len(questions), 3))
    embedder = Embedder()
    for vault in sorted({q["vault"] for q in questions}):
        config = load_config({"vault": str(vaults / vault), "data_dir": str(data_dir)}, env={})
        cairn = Cairn(config, embedder=embedder)
        cairn.index()
        service = cairn.query
        thread = service.start_keyword_index()
        if thread is not None:
            thread.join()
        mine = [i for i, q in enumerate(questions) if q["vault"] == vault]
        for s, weights in enumerate(GRID):
            service.weights = weights
            service.results = EpochLRU(service.RESULT_CACHE_MAX)  # results cached under other weights
            for i in mine:
                q = questions[i]
                hits, _ = service.retrieve(q["question"], top_k=10, mode="hybrid", per_note=1)
                out[s, i] = figures([h.file_path for h in hits], set(q["relevant"]))
        print(f"# {vault}: {len(mine)} questions x {len(GRID)} settings", file=sys.stderr, flush=True)
        cairn.close()
    return out


def cross_validate(scores: np.ndarray, questions: list[dict], k: int, seeds: int) -> tuple[np.ndarray, dict]:
    """Held-out (questions, 3) figures averaged over the seeds, and how often each setting was chosen."""
    held = np.zeros(scores.shape[1:])
    chosen: dict[int, int] = defaultdict(int)
    objective = (scores[:, :, 0] + scores[:, :, 1]) / 2
    pos = {q["id"]: i for i, q in enumerate(questions)}
    for seed in range(seeds):
        for members in stratified_folds(questions, k, DEFAULT_SEED + seed):
            test = np.zeros(len(questions), dtype=bool)
            test[[pos[m["id"]] for m in members]] = True
            best = int(np.argmax(objective[:, ~test].mean(axis=1)))
            chosen[best] += 1
            held[test] += scores[best][test]
    return held / seeds, chosen


def summary(rows: np.ndarray, questions: list[dict]) -> str:
    parts = []
    for vault in sorted({q["vault"] for q in questions}):
        ix = [i for i, q in enumerate(questions) if q["vault"] == vault]
        h, rr, rec = rows[ix].mean(axis=0)
        parts.append(f"{vault}: Hit@5 {h:.3f} MRR@10 {rr:.3f} Recall@5 {rec:.3f}")
    return " | ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache")
    ap.add_argument("--vaults", type=Path, default=REPO.parent / "shared" / "vaults")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    questions = [q for q in load_questions() if q["relevant"]]
    scores = score_grid(questions, args.vaults, args.data_dir)
    for s, weights in enumerate(GRID):
        print(f"whole set (reference) bm25 {weights.bm25:g} k {weights.k:>2}: {summary(scores[s], questions)}")
    held, chosen = cross_validate(scores, questions, args.folds, args.seeds)
    print(f"held out ({args.folds}-fold x {args.seeds} seeds), fusion chosen by CV: {summary(held, questions)}")
    for s, n in sorted(chosen.items(), key=lambda kv: -kv[1]):
        print(f"    chosen {n}x: bm25 {GRID[s].bm25:g}, k {GRID[s].k}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

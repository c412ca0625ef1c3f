#!/usr/bin/env python3
"""Calibrate the relevance labels (``cairn.relevance``: STRONG_COSINE, GOOD_COSINE) on the dev sets.

For every dev-set question, take the top-10 search hits (one per note) through the real query service and mark
each relevant when its note is one of the question's relevant notes (an off-corpus question's hits never are).
Then, k-fold by question (fixed seed), on each training part:

- strong = the lowest cosine t (0.01 steps) at which the hits with cosine >= t are relevant at least half the time;
- good = the lowest t below strong from which, in every 0.05-wide cosine band up to strong, relevant hits are at
  least as many as off-corpus questions' hits;

and report, on each held-out part, the share of hits given each label that are relevant, the share of all relevant
hits they hold, and the share of off-corpus hits they hold. Also the shipped thresholds, measured the same way.

Usage: calibrate_relevance.py DEV.jsonl [DEV2.jsonl ...] [--vaults DIR] [--data-dir DIR] [--folds K]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))

from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.relevance import GOOD_COSINE, STRONG_COSINE  # noqa: E402

GRID = [round(0.35 + 0.01 * i, 2) for i in range(60)]
LABELS = ("strong", "good", "weak")


def collect(rows: list[dict], vaults: Path, data_dir: Path) -> list[dict]:
    """One record per (question, hit): question key, cosine, relevant, off-corpus."""
    out = []
    for vault in sorted({r["vault"] for r in rows}):
        config = load_config({"vault": str(vaults / vault), "data_dir": str(data_dir)}, env={})
        cairn = Cairn(config)
        cairn.indexing.index()
        for r in (r for r in rows if r["vault"] == vault):
            hits, _ = cairn.query.retrieve(r["question"], top_k=10, per_note=1)
            for h in hits:
                out.append(
                    {
                        "q": (r["file"], r["id"]),
                        "cos": h.cosine,
                        "rel": h.file_path in set(r["relevant"]),
                        "off": not r["relevant"],
                    }
                )
        cairn.close()
    return out


def _precision(hits: list[dict]) -> float:
    return sum(h["rel"] for h in hits) / len(hits) if hits else 0.0


def fit(hits: list[dict]) -> tuple[float, float]:
    """(strong, good) thresholds on ``hits`` (module docstring)."""
    strong = next((t for t in GRID if _precision([h for h in hits if h["cos"] >= t]) >= 0.5), GRID[-1])

    def band_ok(t: float) -> bool:
        band = [h for h in hits if t <= h["cos"] < t + 0.05]
        return sum(h["rel"] for h in band) >= sum(h["off"] for h in band)

    good = next((t for t in GRID if t < strong and all(band_ok(u) for u in GRID if t <= u < strong)), strong)
    return strong, good


def label(cos: float, strong: float, good: float) -> str:
    return "strong" if cos >= strong else "good" if cos >= good else "weak"


def tally(hits: list[dict], strong: float, good: float, into: dict[str, list[int]]) -> None:
    for h in hits:
        counts = into[label(h["cos"], strong, good)]
        counts[0] += 1
        counts[1] += h["rel"]
        counts[2] += h["off"]


def report(name: str, counts: dict[str, list[int]], hits: list[dict]) -> None:
    relevant = max(sum(h["rel"] for h in hits), 1)
    off = max(sum(h["off"] for h in hits), 1)
    for lab in LABELS:
        n, rel, o = counts[lab]
        print(
            f"{name:<10} {lab:<7} hits {n:5d}  relevant {rel / max(n, 1):5.2f}  "
            f"of all relevant {rel / relevant:5.2f}  of off-corpus hits {o / off:5.2f}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("devsets", type=Path, nargs="+")
    ap.add_argument("--vaults", type=Path, default=REPO.parent / "shared" / "vaults")
    ap.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache")
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()
    rows = []
    for path in args.devsets:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rows.append({**json.loads(line), "file": path.stem})
    hits = collect(rows, args.vaults, args.data_dir)
    questions = sorted({h["q"] for h in hits})
    random.Random(17).shuffle(questions)
    held: dict[str, list[int]] = {lab: [0, 0, 0] for lab in LABELS}
    for k in range(args.folds):
        fold = set(questions[k :: args.folds])
        strong, good = fit([h for h in hits if h["q"] not in fold])
        print(f"fold {k}: strong >= {strong:.2f}, good >= {good:.2f}")
        tally([h for h in hits if h["q"] in fold], strong, good, held)
    report("held-out", held, hits)
    shipped: dict[str, list[int]] = {lab: [0, 0, 0] for lab in LABELS}
    tally(hits, STRONG_COSINE, GOOD_COSINE, shipped)
    report("shipped", shipped, hits)
    print(f"shipped: strong >= {STRONG_COSINE}, good >= {GOOD_COSINE}; {len(hits)} hits of {len(questions)} questions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

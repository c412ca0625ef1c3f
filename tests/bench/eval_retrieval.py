#!/usr/bin/env python3
"""Retrieval evaluation on a dev set (JSONL: id, vault, question, kind, relevant[], ...).

For each vault named in the file: index it (incrementally, in a cache folder kept between
runs), then for every question rank notes with bm25-only, dense-only and hybrid retrieval
through the real query service (cosine floor included) and print, per vault and mode:

- Recall@5  — share of a question's relevant notes found in the top 5 notes, averaged;
- Hit@5     — share of questions with at least one relevant note in the top 5;
- MRR@10    — mean reciprocal rank of the first relevant note within the top 10;

and, for hybrid, the off-corpus not-found rate (questions with relevant == [] that get
the not-found answer) and the in-corpus wrongly-not-found rate.

Usage: eval_retrieval.py DEV.jsonl --vaults DIR [--data-dir DIR] [--bm25-weight W ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))

from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.embedder import Embedder  # noqa: E402
from cairn.ranking import FusionWeights  # noqa: E402

MODES = ("bm25", "dense", "hybrid")


def note_ranking(query, question: str, mode: str, limit: int = 10) -> list[str]:
    hits, _ = query.retrieve(question, top_k=limit, mode=mode, per_note=1)
    return [h.file_path for h in hits]


def evaluate(rows: list[dict], query) -> dict:
    out: dict = {}
    in_corpus = [r for r in rows if r["relevant"]]
    off_corpus = [r for r in rows if not r["relevant"]]
    for mode in MODES:
        recall = hit = mrr = 0.0
        empty = 0
        misses = []
        for r in in_corpus:
            ranked = note_ranking(query, r["question"], mode)
            rel = set(r["relevant"])
            top5 = ranked[:5]
            recall += len(rel & set(top5)) / len(rel)
            hit += 1.0 if rel & set(top5) else 0.0
            rr = next((1.0 / i for i, p in enumerate(ranked[:10], 1) if p in rel), 0.0)
            mrr += rr
            empty += not ranked
            if not rel & set(top5):
                misses.append((r["id"], r["question"][:70], r["relevant"][0], ranked[:3]))
        n = max(len(in_corpus), 1)
        out[mode] = {
            "recall@5": recall / n,
            "hit@5": hit / n,
            "mrr@10": mrr / n,
            "wrongly_not_found": empty / n,
            "misses": misses,
        }
    nf = sum(1 for r in off_corpus if not note_ranking(query, r["question"], "hybrid", limit=8))
    out["offcorpus_not_found"] = nf / len(off_corpus) if off_corpus else None
    out["n_in"] = len(in_corpus)
    out["n_off"] = len(off_corpus)
    return out


def print_table(results: dict[str, dict], *, verbose: bool) -> None:
    """The figures per vault and mode, then the off-corpus not-found rate (and the misses when ``verbose``)."""
    print(f"{'vault':<34} {'mode':<7} {'Recall@5':>9} {'Hit@5':>7} {'MRR@10':>7} {'wrong-NF':>9}")
    for key, res in results.items():
        for mode in MODES:
            m = res[mode]
            print(
                f"{key:<34} {mode:<7} {m['recall@5']:>9.3f} {m['hit@5']:>7.3f} {m['mrr@10']:>7.3f} "
                f"{m['wrongly_not_found']:>9.1%}"
            )
        off = res["offcorpus_not_found"]
        print(
            f"{key:<34} off-corpus not-found: {'n/a' if off is None else f'{off:.0%}'} of {res['n_off']}; "
            f"in-corpus questions: {res['n_in']}"
        )
        if verbose:
            for mode in MODES:
                for miss in res[mode]["misses"]:
                    print(f"   miss[{mode}] {miss}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("devset", type=Path)
    ap.add_argument("--vaults", type=Path, default=REPO.parent / "shared" / "vaults")
    ap.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache")
    ap.add_argument("--bm25-weight", type=float, action="append", help="sweep: fusion weight(s) of the BM25 list")
    ap.add_argument("--variant", action="append", help="model variant(s) to evaluate (default: the shipped default)")
    ap.add_argument("--vault", action="append", help="only these vaults of the dev set")
    ap.add_argument("--verbose", action="store_true", help="list the misses")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [json.loads(line) for line in args.devset.read_text(encoding="utf-8").splitlines() if line.strip()]
    by_vault: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_vault[r["vault"]].append(r)
    results = {}
    for variant in args.variant or [None]:
        embedder = Embedder(variant=variant)
        for vault, vrows in sorted(by_vault.items()):
            if args.vault and vault not in args.vault:
                continue
            data_dir = args.data_dir if variant is None else args.data_dir / f"variant-{variant}"
            config = load_config({"vault": str(args.vaults / vault), "data_dir": str(data_dir)}, env={})
            t = time.perf_counter()
            cairn = Cairn(config, embedder=embedder)
            report = cairn.index()
            print(
                f"# {vault} [{embedder.model_id}]: index up to date in {time.perf_counter() - t:.1f} s "
                f"({report.texts_embedded} texts embedded)",
                file=sys.stderr,
            )
            for w in args.bm25_weight or [None]:
                if w is not None:
                    cairn.query.weights = FusionWeights(dense=1.0, bm25=w)
                key = vault if variant is None else f"{vault} [{embedder.variant}]"
                key += "" if w is None else f" (bm25 w {w:g})"
                results[key] = evaluate(vrows, cairn.query)
            cairn.close()
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print_table(results, verbose=args.verbose)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Retrieval evaluation (``make eval``) on dev sets (JSONL: id, vault, question, kind, relevant[], ...).

For each vault named in the files: index it (incrementally, in a cache folder kept between runs), then for
every in-corpus question rank notes (one chunk per note, top 10) with

- ``naive``: the naive pipeline over the same chunks (:mod:`eval_naive`; its whole-chunk vectors are cached
  in ``DATA_DIR/naive/``: the first run on obsidian-hub embeds ~20k chunks, about 12 minutes on 2 cores),
  and *naive-dense*, its dense list alone;
- ``bm25``, ``dense``, ``hybrid``: Cairn's search, ``SearchService.retrieve``;

and score Hit@5, Recall@5, MRR@10 (:mod:`eval_metrics`), per vault and per kind, each with a 95 % bootstrap
interval. Every question, in-corpus or off-corpus, is also asked through the real ask path
(``AnswerService.answer`` without a language model): off-corpus not-found and in-corpus wrongly-not-found
rates; the hybrid misses tested for being bound by the embedding model (:mod:`eval_bound`). Then the
known-item checks generated from the vaults (:mod:`eval_known`). Tables: :mod:`eval_report` (Markdown on
stdout; ``--record FILE`` also writes them with the date and commit); progress on stderr.

Usage: eval_retrieval.py DEV.jsonl [DEV2.jsonl ...] --vaults DIR [--data-dir DIR] [--record docs/eval.md]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_bound import analyse_misses  # noqa: E402
from eval_cv import load_questions  # noqa: E402
from eval_known import Vocabulary, check_links, check_rare_terms, check_titles  # noqa: E402
from eval_metrics import hit_at, recall_at, reciprocal_rank  # noqa: E402
from eval_naive import NaivePipeline, WholeChunks  # noqa: E402
from eval_report import VaultResult, report, write_doc  # noqa: E402
from eval_tiers import tier_one_copy  # noqa: E402

from cairn.answers import AnswerService  # noqa: E402
from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.contract import AskRequest  # noqa: E402
from cairn.embedder import Embedder  # noqa: E402
from cairn.ranking import FusionWeights  # noqa: E402
from cairn.search import SearchService  # noqa: E402

SEARCH_MODES = ("bm25", "dense", "hybrid")
NAIVE_MODES = ("naive", "naive-dense")
MODES = (*NAIVE_MODES, *SEARCH_MODES)
RANK_DEPTH = 10

Ranker = Callable[[str], list[str]]
T = TypeVar("T")


def note_ranking(query: SearchService, question: str, mode: str, limit: int = RANK_DEPTH) -> list[str]:
    """The first ``limit`` notes Cairn's search returns for ``question`` in ``mode`` (one chunk per note)."""
    hits, _ = query.retrieve(question, top_k=limit, mode=mode, per_note=1)
    return [h.file_path for h in hits]


def score_question(ranked: Sequence[str], relevant: Sequence[str]) -> tuple[float, float, float]:
    """(Hit@5, Recall@5, MRR@10) of one note ranking."""
    rel = set(relevant)
    return hit_at(ranked, rel, 5), recall_at(ranked, rel, 5), reciprocal_rank(ranked, rel, 10)


def rank_all(result: VaultResult, rankers: dict[str, Ranker], *, verbose: bool) -> None:
    """Fill ``result.ranking`` (and, when ``verbose``, ``result.misses``) for every in-corpus question."""
    for mode, rank in rankers.items():
        scores = {}
        for q in result.in_corpus():
            ranked = rank(q["question"])
            scores[q["id"]] = score_question(ranked, q["relevant"])
            if verbose and not scores[q["id"]][0]:
                result.misses.setdefault(mode, []).append(f"{q['id']} {q['question'][:70]!r} -> {ranked[:3]}")
        result.ranking[mode] = scores


async def _ask_all(answers: AnswerService, questions: Sequence[dict]) -> dict[str, bool]:
    out = {}
    for q in questions:
        answer = await answers.answer(AskRequest.parse({"question": q["question"]}))
        out[q["id"]] = bool(answer.not_found)
    return out


def ask_all(query: SearchService, questions: Sequence[dict]) -> dict[str, bool]:
    """Question id → whether the ask path (no language model) answered "not found"."""
    return asyncio.run(_ask_all(AnswerService(query, None), questions))


def evaluate_vault(cairn: Cairn, vault: str, questions: list[dict], args: argparse.Namespace) -> VaultResult:
    """Every figure of one vault (module docstring)."""
    result = VaultResult(vault, questions)
    query, store, embedder = cairn.query, cairn.store, cairn.embedder
    rankers: dict[str, Ranker] = {}
    modes = args.mode or list(MODES)
    if any(m in NAIVE_MODES for m in modes):
        cache = args.data_dir / "naive" / (Path(cairn.config.db_path).stem + ".npz")
        naive = NaivePipeline(store, WholeChunks.load(store, cache, embedder, vault), embedder)
        rankers.update({m: (lambda q, m=m: naive.note_ranking(q, m)) for m in NAIVE_MODES if m in modes})
    rankers.update({m: (lambda q, m=m: note_ranking(query, q, m)) for m in SEARCH_MODES if m in modes})
    _timed(f"{vault}: ranking", lambda: rank_all(result, rankers, verbose=args.verbose))
    result.not_found = _timed(f"{vault}: ask path", lambda: ask_all(query, questions))
    vocab = _timed(f"{vault}: vocabulary", lambda: Vocabulary.of(store))
    if "hybrid" in result.ranking:
        missed = [q for q in result.in_corpus() if not result.ranking["hybrid"][q["id"]][0]]
        result.bound = _timed(f"{vault}: misses", lambda: analyse_misses(store, embedder, vocab, missed, query=query))
    if not args.no_known:
        result.known.append(_timed(f"{vault}: rare terms", lambda: check_rare_terms(store, query, vocab=vocab)))
        result.known.append(_timed(f"{vault}: titles", lambda: check_titles(store, query)))
        result.known.extend(_timed(f"{vault}: links", lambda: check_links(store)).values())
    return result


def _timed(label: str, fn: Callable[[], T]) -> T:
    started = time.perf_counter()
    out = fn()
    print(f"# {label}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("devsets", type=Path, nargs="+", help="JSONL dev files (their questions are pooled)")
    ap.add_argument("--vaults", type=Path, default=REPO.parent / "shared" / "vaults")
    ap.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache", help="indexes and whole-chunk vectors")
    ap.add_argument("--vault", action="append", help="only these vaults of the dev sets")
    ap.add_argument("--mode", action="append", choices=MODES, help="only these ranking modes")
    ap.add_argument("--bm25-weight", type=float, help="fusion weight of the BM25 list (default: the shipped one)")
    ap.add_argument("--variant", help="embedding model variant (default: the manifest's default)")
    ap.add_argument("--no-known", action="store_true", help="skip the known-item checks")
    ap.add_argument("--record", type=Path, help="also write the tables to this Markdown file (docs/eval.md)")
    ap.add_argument("--verbose", action="store_true", help="list the misses (stderr)")
    ap.add_argument("--json", type=Path, help="also write the per-question results to this JSON file")
    ap.add_argument(
        "--tier1",
        action="store_true",
        help="also rank bm25, dense and hybrid, and ask, on a copy of each index with only its first vector tier "
        "(one whole-chunk vector per chunk, no sentence vectors): the index part-way through a first index",
    )
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    by_vault: dict[str, list[dict]] = defaultdict(list)
    for q in load_questions(args.devsets):
        by_vault[q["vault"]].append(q)
    embedder = Embedder(variant=args.variant)
    results = []
    for vault, questions in sorted(by_vault.items()):
        if args.vault and vault not in args.vault:
            continue
        config = load_config({"vault": str(args.vaults / vault), "data_dir": str(args.data_dir)}, env={})
        started = time.perf_counter()
        cairn = Cairn(config, embedder=embedder)
        indexed = cairn.indexing.index()
        print(
            f"# {vault}: index up to date in {time.perf_counter() - started:.1f} s "
            f"({indexed.texts_embedded} texts embedded)",
            file=sys.stderr,
        )
        if args.bm25_weight is not None:
            cairn.query.weights = FusionWeights(dense=1.0, bm25=args.bm25_weight)
        try:
            results.append(evaluate_vault(cairn, vault, questions, args))
            if args.tier1:
                results.append(_tier_one(cairn, vault, questions, args, embedder))
        finally:
            cairn.close()
    text = report(results)
    print(text)
    if args.verbose:
        _print_misses(results)
    if args.record:
        write_doc(args.record, text, "python tests/bench/eval_retrieval.py " + " ".join(sys.argv[1:]))
    if args.json:
        args.json.write_text(json.dumps([_as_json(r) for r in results], indent=1), encoding="utf-8")
    return 0


def _tier_one(
    cairn: Cairn, vault: str, questions: list[dict], args: argparse.Namespace, embedder: Embedder
) -> VaultResult:
    """The search modes and the ask path on the index with only its first vector tier (:mod:`eval_tiers`)."""
    copy = tier_one_copy(cairn, args.data_dir / "tier1", embedder)
    try:
        result = VaultResult(f"{vault} (tier 1 only)", questions)
        rankers: dict[str, Ranker] = {
            m: (lambda q, m=m: note_ranking(copy.query, q, m)) for m in SEARCH_MODES if not args.mode or m in args.mode
        }
        _timed(f"{vault} tier 1: ranking", lambda: rank_all(result, rankers, verbose=args.verbose))
        result.not_found = _timed(f"{vault} tier 1: ask path", lambda: ask_all(copy.query, questions))
        return result
    finally:
        copy.close()


def _print_misses(results: Sequence[VaultResult]) -> None:
    for r in results:
        for mode, misses in r.misses.items():
            for miss in misses:
                print(f"   miss[{r.vault} {mode}] {miss}", file=sys.stderr)
        for check in r.known:
            for miss in check.misses:
                print(f"   miss[{r.vault} {check.name}] {miss}", file=sys.stderr)


def _as_json(r: VaultResult) -> dict:
    return {
        "vault": r.vault,
        "ranking": {mode: {qid: list(v) for qid, v in s.items()} for mode, s in r.ranking.items()},
        "not_found": r.not_found,
        "known": {c.name: {"values": c.values, "counts": c.counts, "misses": c.misses} for c in r.known},
    }


if __name__ == "__main__":
    raise SystemExit(main())

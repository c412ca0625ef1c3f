#!/usr/bin/env python3
"""Follow-up retrieval: Hit@5 of follow-up questions retrieved alone and with the conversation folded in.

THREADS (JSONL: id, first, followup, relevant[]) are two-turn threads over one vault: the first question can be
answered alone, the follow-up only with the first ("How do I make a callout foldable?" → "and give it a custom
title?"); ``relevant`` lists the notes that answer the follow-up. For each strategy, the follow-up's note ranking
(Cairn's hybrid search, one chunk per note, top 10) is scored Hit@5 / MRR@10:

- ``alone``: the follow-up as it is (no history);
- ``last``: always the first question then the follow-up;
- ``gated``: :func:`cairn.conversation.retrieval_text` (what ``/ask`` does): folded only when it refers back;
- ``fused``: reciprocal rank fusion (k=60) of the ``alone`` and ``last`` note rankings.

A topic switch is scored too: each thread's first question asked after another thread's first turn (a question
that stands on its own must not be dragged to the previous topic). Then every follow-up goes through the ask path
(``AnswerService.answer`` without a model, as ``POST /ask`` answers it), without and with the first turn as
``history``: how often it is not found, and how often the answer cites a note that answers it. Progress on
stderr, the tables on stdout.

Usage: eval_followups.py THREADS.jsonl --vault DIR [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_metrics import hit_at, reciprocal_rank  # noqa: E402

from cairn.answers import AnswerService  # noqa: E402
from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.contract import LIMITS, AskRequest  # noqa: E402
from cairn.conversation import Turn, retrieval_text  # noqa: E402
from cairn.search import SearchService  # noqa: E402

DEPTH = 10


def ranking(search: SearchService, text: str) -> list[str]:
    hits, _ = search.retrieve(text, top_k=DEPTH, per_note=1)
    return [h.file_path for h in hits]


def fused(*rankings: Sequence[str], k: int = 60) -> list[str]:
    score: dict[str, float] = {}
    for ranked in rankings:
        for rank, path in enumerate(ranked, 1):
            score[path] = score.get(path, 0.0) + 1.0 / (k + rank)
    return sorted(score, key=lambda p: -score[p])[:DEPTH]


def strategies(search: SearchService) -> dict[str, Callable[[str, str], list[str]]]:
    def alone(first: str, question: str) -> list[str]:
        return ranking(search, question)

    def last(first: str, question: str) -> list[str]:
        return ranking(search, f"{first} {question}")

    def gated(first: str, question: str) -> list[str]:
        return ranking(search, retrieval_text(question, [Turn(first, "")], LIMITS.text_chars))

    def fuse(first: str, question: str) -> list[str]:
        return fused(alone(first, question), last(first, question))

    return {"alone": alone, "last": last, "gated": gated, "fused": fuse}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("threads", type=Path)
    ap.add_argument("--vault", type=Path, required=True)
    ap.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache")
    args = ap.parse_args(argv)
    threads = [json.loads(line) for line in args.threads.read_text(encoding="utf-8").splitlines() if line.strip()]
    cairn = Cairn(load_config({"vault": str(args.vault), "data_dir": str(args.data_dir)}, env={}))
    try:
        cairn.indexing.index()
        rows = evaluate(cairn.query, threads)
        asked = asyncio.run(ask_path(AnswerService(cairn.query, None), threads))
    finally:
        cairn.close()
    print(f"| strategy | follow-up Hit@5 | follow-up MRR@10 | topic switch Hit@5 |  (n = {len(threads)})")
    print("| --- | --- | --- | --- |")
    for name, (hit, mrr, switch) in rows.items():
        print(f"| {name} | {hit:.3f} | {mrr:.3f} | {switch:.3f} |")
    print()
    print("| ask path | follow-up not found | answer cites a relevant note |")
    print("| --- | --- | --- |")
    for name, (not_found, cites) in asked.items():
        print(f"| {name} | {not_found:.3f} | {cites:.3f} |")
    return 0


async def ask_path(answers: AnswerService, threads: Sequence[dict]) -> dict[str, tuple[float, float]]:
    """``{"without history" | "with history": (share not found, share whose answer cites a relevant note)}``."""
    out = {}
    for name, with_history in (("without history", False), ("with history", True)):
        not_found = cites = 0
        for t in threads:
            history = [Turn(t["first"], "")] if with_history else []
            request = AskRequest.parse({"question": t["followup"]})
            answer = await answers.answer(dataclasses.replace(request, history=tuple(history)))
            not_found += answer.not_found
            cites += any(s.cited and s.hit.file_path in t["relevant"] for s in answer.sources)
        out[name] = (not_found / len(threads), cites / len(threads))
    return out


def evaluate(search: SearchService, threads: Sequence[dict]) -> dict[str, tuple[float, float, float]]:
    firsts = [hit_at(ranking(search, t["first"]), set(t["relevant"]), 5) for t in threads]
    print(f"# first turns Hit@5: {sum(firsts) / len(threads):.3f}", file=sys.stderr)
    rows = {}
    for name, rank in strategies(search).items():
        hits, rrs, switches = [], [], []
        for i, t in enumerate(threads):
            ranked = rank(t["first"], t["followup"])
            hits.append(hit_at(ranked, set(t["relevant"]), 5))
            rrs.append(reciprocal_rank(ranked, set(t["relevant"]), DEPTH))
            other = threads[(i + 1) % len(threads)]
            switches.append(hit_at(rank(other["first"], t["first"]), set(t["relevant"]), 5))
            if not switches[-1]:
                print(f"   switch miss[{name}] {t['id']} {t['first']!r}", file=sys.stderr)
            if not hits[-1]:
                print(f"   miss[{name}] {t['id']} {t['followup']!r} -> {ranked[:3]}", file=sys.stderr)
        n = len(threads)
        rows[name] = (sum(hits) / n, sum(rrs) / n, sum(switches) / n)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())

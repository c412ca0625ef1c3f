#!/usr/bin/env python3
"""CPU of one new question in process: search (``SearchService.search``) and ask (``AnswerService.answer`` with no
model: retrieval, the answerability rule, the extractive answer), per question never asked before in the process
(no result or question-vector cache hit), on an up-to-date index of VAULT.

Questions are made from the vault itself (fixed seed): ``what is <title>`` and ``how do I use <title>`` for random
note titles, so no evaluation question is needed. CPU is ``time.process_time`` (all threads: the ONNX embedding of
the question included); the wall time is printed alongside. Compare two commits side by side by running this
script from each tree alternately on their own copies of the index (``--data-dir``).

``--withhold-folder F`` (repeatable) measures a client not declared local that is withheld those folders.

Usage: bench_question_cpu.py VAULT [--data-dir DIR] [--questions N] [--withhold-folder F]... [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))

from cairn.answers.service import AnswerService  # noqa: E402
from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.contract import AskRequest, SearchRequest  # noqa: E402
from cairn.policy import Withhold  # noqa: E402


def questions_of(cairn: Cairn, n: int, seed: int = 17) -> list[str]:
    """``n`` distinct questions built from note titles of the index (two templates, fixed seed)."""
    titles = sorted(t for t in cairn.store.note_titles() if len(t) > 3)
    rng = random.Random(seed)
    picked = rng.sample(titles, min(n, len(titles)))
    templates = ("what is {}", "how do I use {}")
    return [templates[i % 2].format(t) for i, t in enumerate(picked)]


def measure(call, questions: list[str]) -> tuple[list[float], list[float]]:
    """(CPU ms, wall ms) of ``call(q)`` for each question."""
    cpu, wall = [], []
    for q in questions:
        c0, w0 = time.process_time(), time.perf_counter()
        call(q)
        cpu.append((time.process_time() - c0) * 1000)
        wall.append((time.perf_counter() - w0) * 1000)
    return cpu, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vault", type=Path)
    ap.add_argument("--data-dir", type=Path, help="index folder (default: a temporary one, indexed first)")
    ap.add_argument("--questions", type=int, default=120)
    ap.add_argument("--withhold-folder", action="append", default=[], help="measure a client withheld this folder")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="cairn-bench-q-"))
    config = load_config({"vault": str(args.vault), "data_dir": str(data_dir)}, env={})
    cairn = Cairn(config)
    cairn.indexing.index()
    cairn.query.keyword.start()
    cairn.query.keyword.wait()
    cairn.query.vectors.reload(wait=True)
    answers = AnswerService(cairn.query, None)
    qs = questions_of(cairn, args.questions * 2 + 4)
    warm, search_qs, ask_qs = qs[:4], qs[4 : 4 + args.questions], qs[4 + args.questions :]
    w = Withhold.of(folders=args.withhold_folder) if args.withhold_folder else None
    # One event loop for every answer, as the daemon has: a loop per answer would start new executor threads,
    # each with a new store connection (which the query caches cannot tell from a commit).
    loop = asyncio.new_event_loop()
    for q in warm:
        cairn.query.search(SearchRequest.parse({"query": q}), cairn.query.views.of(w))
        loop.run_until_complete(answers.answer(AskRequest.parse({"question": q}), cairn.query.views.of(w)))
    cairn.query.visible.wait()  # the one-off embedding of chunks shown redacted to that client
    s_cpu, s_wall = measure(
        lambda q: cairn.query.search(SearchRequest.parse({"query": q}), cairn.query.views.of(w)), search_qs
    )
    a_cpu, a_wall = measure(
        lambda q: loop.run_until_complete(answers.answer(AskRequest.parse({"question": q}), cairn.query.views.of(w))),
        ask_qs,
    )
    loop.close()
    cairn.close()
    rows = {
        "search": {
            "cpu_ms_mean": statistics.fmean(s_cpu),
            "cpu_ms_p50": statistics.median(s_cpu),
            "wall_ms_p50": statistics.median(s_wall),
        },
        "ask": {
            "cpu_ms_mean": statistics.fmean(a_cpu),
            "cpu_ms_p50": statistics.median(a_cpu),
            "wall_ms_p50": statistics.median(a_wall),
        },
    }
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{len(search_qs)} new questions each, vault {args.vault.name}\n")
    print("| path | CPU ms / question (mean) | CPU ms (p50) | wall ms (p50) |")
    print("| --- | ---: | ---: | ---: |")
    for name, r in rows.items():
        print(f"| {name} | {r['cpu_ms_mean']:.1f} | {r['cpu_ms_p50']:.1f} | {r['wall_ms_p50']:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Search during the first index: the real daemon (``cairn serve``, no LLM) indexing VAULT from nothing, and one
client sending ``GET /search`` for new questions while the vectors are being written. Figures, not tests.

The data folder is a fresh temp dir (nothing cached: every vector is computed). From the daemon's start the client
sends the dev set's questions for this vault (then ``bench_index.QUESTIONS``), each once, one at a time, until a
response's ``coverage.pending`` is 0; when the questions run out they are sent again with a number appended (a new
query text: nothing is answered from the result cache). Reported: the time from the start to the first answer that
holds a result, search latency p50 / p95 / max while notes were pending (target p95 < 300 ms on obsidian-hub,
< 500 ms at 40k notes), the coverage seen over time, and the time until every note was embedded.

Usage: bench_search_while_indexing.py [VAULT] [--eval DEV.jsonl] [--every S] [--for S]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_http import Daemon, pct, questions_for  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TARGET_P95_MS = 300.0
DEADLINE_S = 3600


def nothing_pending(coverage: dict) -> bool:
    """Whether a result's ``coverage`` says every note has its vectors (the first tier at least)."""
    return bool(coverage.get("notes")) and coverage.get("pending") == 0


async def measure(
    daemon: Daemon,
    questions: list[str],
    every_s: float,
    for_s: float,
    done: Callable[[dict], bool] = nothing_pending,
) -> dict:
    """Search until ``done(coverage)`` (default: nothing is pending) or ``for_s`` seconds passed; returns the samples
    ``[(s since start, ms, coverage, hits)]``."""
    auth = {"Authorization": f"Bearer {daemon.token}"}
    started = time.monotonic()
    samples: list[tuple[float, float, dict, int]] = []
    n = 0
    async with aiohttp.ClientSession() as session:
        while time.monotonic() - started < for_s:
            q = questions[n % len(questions)] + (f" {n // len(questions)}" if n >= len(questions) else "")
            n += 1
            t = time.perf_counter()
            async with session.get(daemon.url + "/search", params={"q": q}, headers=auth) as resp:
                body = await resp.json()
                status = resp.status
            ms = (time.perf_counter() - t) * 1000
            if status != 200:
                print(f"  /search {status}: {str(body)[:200]}", file=sys.stderr)
                await asyncio.sleep(every_s)
                continue
            coverage = body.get("coverage", {})
            samples.append((time.monotonic() - started, ms, coverage, len(body.get("results", []))))
            if done(coverage):
                break
            await asyncio.sleep(every_s)
    return {"samples": samples}


def report(vault: Path, samples: list[tuple[float, float, dict, int]]) -> None:
    during = [s for s in samples if not (s[2].get("notes") and s[2].get("pending") == 0)]  # text phase too
    first = next((s for s in samples if s[3]), None)
    print(f"Search during the first index of {vault.name} (1 client, new questions)")
    if first is not None:
        print(f"  first answer with results: {first[0]:.1f} s after the API was up (coverage {first[2]})")
    if during:
        lat = [s[1] for s in during]
        print(
            f"  during the first index: {len(lat)} searches, p50 {pct(lat, 0.5):.0f} ms, p95 {pct(lat, 0.95):.0f} ms"
            f" (target < {TARGET_P95_MS:.0f} ms), max {max(lat):.0f} ms"
        )
        notes = max(s[2].get("notes", 0) for s in samples)
        embedding = [s[1] for s in during if s[2].get("notes") == notes and s[2].get("pending")]
        if embedding:
            print(
                f"  while embedding (every note read, some pending): {len(embedding)} searches,"
                f" p50 {pct(embedding, 0.5):.0f} ms, p95 {pct(embedding, 0.95):.0f} ms, max {max(embedding):.0f} ms"
            )
        step = max(1, len(during) // 8)
        for t, ms, cov, hits in during[::step]:
            print(f"    {t:7.1f} s  {ms:6.0f} ms  {hits} results  coverage {cov}")
    if samples and not samples[-1][2].get("pending"):
        print(f"  every note embedded after {samples[-1][0]:.1f} s (coverage {samples[-1][2]})")
    elif samples:
        print(f"  stopped after {samples[-1][0]:.1f} s, coverage {samples[-1][2]}")
    started = next((s[0] for s in samples if s[2].get("embedded")), None)
    if started is not None and samples[-1][0] > started:
        rate = samples[-1][2]["embedded"] / (samples[-1][0] - started)
        print(f"  notes embedded per second from the first embedded note to the last sample: {rate:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vault", nargs="?", default="/work/shared/vaults/obsidian-hub")
    ap.add_argument("--eval", default="/work/shared/eval/dev2.jsonl")
    ap.add_argument("--every", type=float, default=0.2, help="pause between two searches (s)")
    ap.add_argument("--for", dest="for_s", type=float, default=DEADLINE_S, help="stop measuring after this long (s)")
    args = ap.parse_args()
    vault = Path(args.vault).resolve()
    data_dir = Path(tempfile.mkdtemp(prefix="cairn-bench-first-index-"))
    daemon = Daemon(vault, data_dir, clients=1)
    try:
        daemon.start()
        result = asyncio.run(measure(daemon, questions_for(vault, Path(args.eval)), args.every, args.for_s))
    finally:
        daemon.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    report(vault, result["samples"])


if __name__ == "__main__":
    main()

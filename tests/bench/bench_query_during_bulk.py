#!/usr/bin/env python3
"""A question's embedding while bulk embedding holds the cores, in one process. Figures, not tests.

One :class:`~cairn.embedder.Embedder` (the daemon's threads). A bulk thread embeds VAULT's whole-chunk texts (the
longest texts the indexer sends, up to 256 tokens) over and over, either as the indexer did before
(``embed``: the caller's thread and the pool, at the caller's priority: mode *plain*) or as it does now
(``embed_background``: nicer lanes that give way to questions: mode *yield*), or not at all (mode *idle*: what the
machine gives a question without our bulk, the baseline on a shared machine); meanwhile the main thread embeds a new
question every ``--every`` seconds (``embed_query``; dev-set questions, each made new by a number). The modes
alternate, ``--rounds`` rounds of ``--seconds`` each. Reported per mode: question latency p50 / p95 / max, and the
bulk's tokens/s (its share of the machine: the rate lost to giving way).

Usage: bench_query_during_bulk.py [VAULT] [--variant V] [--rounds R] [--seconds S] [--every S]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_quantisation import vault_texts  # noqa: E402

from cairn.embedder import Embedder  # noqa: E402


def run_mode(emb: Embedder, mode: str, bulk: list[str], questions: list[str], seconds: float, every: float) -> dict:
    """One round: (question latencies in ms, bulk tokens per second)."""
    stop = threading.Event()
    tokens = [0]
    lengths = {t: len(ids) for t, ids in zip(bulk, emb.tokenizer.encode_for_model(bulk))}
    step = 64

    def bulk_loop() -> None:
        i = 0
        while not stop.is_set():
            part = [bulk[(i + k) % len(bulk)] for k in range(step)]
            i += step
            seen: list[list[int]] = []

            def halt(done: list[int], seen: list[list[int]] = seen) -> bool:
                seen[:] = [done]
                return stop.is_set()

            if mode == "plain":
                emb.embed(part, stop=halt)
            else:
                emb.embed_background(part, stop=halt)
            tokens[0] += sum(lengths[part[k]] for k in (seen[0] if seen else ()))

    t = threading.Thread(target=bulk_loop if mode != "idle" else stop.wait, daemon=True)
    started = time.perf_counter()
    t.start()
    time.sleep(1.0)  # the bulk is running
    lat: list[float] = []
    n = 0
    while time.perf_counter() - started < seconds:
        q = f"{questions[n % len(questions)]} {n}"
        n += 1
        t0 = time.perf_counter()
        emb.embed_query(q)
        lat.append((time.perf_counter() - t0) * 1000)
        time.sleep(every)
    elapsed = time.perf_counter() - started
    stop.set()
    t.join()
    return {"latencies": lat, "tokens_per_s": tokens[0] / elapsed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vault", nargs="?", type=Path, default=REPO.parent / "shared" / "vaults" / "obsidian-help")
    ap.add_argument("--eval", type=Path, default=REPO.parent / "shared" / "eval" / "dev2.jsonl")
    ap.add_argument("--variant")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--every", type=float, default=0.2)
    args = ap.parse_args()
    emb = Embedder(variant=args.variant)
    bulk = [t for t in vault_texts(args.vault) if emb.count_tokens(t) > 120]
    rows = [json.loads(line) for line in args.eval.read_text(encoding="utf-8").splitlines() if line.strip()]
    questions = [r["question"] for r in rows]
    print(
        f"{len(bulk)} bulk texts over 120 tokens, {emb.model_id}, {emb.threads} threads, load {os.getloadavg()[0]:.1f}"
    )
    emb.embed(bulk[:16])
    modes = ("idle", "plain", "yield")
    figures: dict[str, dict] = {m: {"lat": [], "rate": []} for m in modes}
    for r in range(args.rounds):
        for mode in modes[r % 3 :] + modes[: r % 3]:
            out = run_mode(emb, mode, bulk, questions, args.seconds, args.every)
            figures[mode]["lat"] += out["latencies"]
            figures[mode]["rate"].append(out["tokens_per_s"])
            lat = sorted(out["latencies"])
            print(
                f"  round {r + 1} {mode:5}: {len(lat)} questions, p50 {lat[len(lat) // 2]:.0f} ms,"
                f" p95 {lat[int(0.95 * (len(lat) - 1))]:.0f} ms; bulk {out['tokens_per_s']:.0f} tokens/s",
                flush=True,
            )
    for mode, f in figures.items():
        lat = sorted(f["lat"])
        print(
            f"{mode:5}: {len(lat)} questions, p50 {lat[len(lat) // 2]:.0f} ms,"
            f" p95 {lat[int(0.95 * (len(lat) - 1))]:.0f} ms, max {lat[-1]:.0f} ms;"
            f" bulk median {statistics.median(f['rate']):.0f} tokens/s"
        )


if __name__ == "__main__":
    main()

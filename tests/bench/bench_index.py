#!/usr/bin/env python3
"""Benchmarks: embedding throughput and index time on a real vault. Figures, not tests.

Prints a table of figure and target:
- embedding throughput of the shipped model on the vault's real chunks (chunks/s, tokens/s;
  target ≥ 10,000 tokens/s on 2 cores), for each model variant side by side in one run;
- full index of the vault into a fresh store: keyword-ready time (target < 30 s for
  obsidian-hub) and fully embedded time (target < 5 min);
- a second run with nothing changed (target: 0 texts embedded);
- search latency over a set of questions (p50, p95).

Usage: bench_index.py VAULT [--sample N] [--variants int8,fp32] [--skip-index]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))

from cairn.chunking import chunk_note  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.embedder import Embedder  # noqa: E402
from cairn.indexer import CHUNK_MAX_TOKENS, Indexer, chunk_embed_text  # noqa: E402
from cairn.notes import parse_note  # noqa: E402
from cairn.query import QueryService  # noqa: E402
from cairn.store import Store  # noqa: E402
from cairn.vault import read_note_text, scan_vault  # noqa: E402

QUESTIONS = [
    "How do I make a callout?", "how do I embed a note in another note", "What is a vault?",
    "keyboard shortcut for the command palette", "How do I sync between devices?", "dataview query examples",
    "How can I publish my notes as a website?", "templates with dates", "graph view filters",
    "What is the capital of France?",
]


def sample_chunks(vault: Path, embedder: Embedder, limit: int) -> list[str]:
    texts: list[str] = []
    for vf in scan_vault(vault):
        try:
            text, _ = read_note_text(vf.abs_path, max_bytes=5_000_000)
        except Exception:
            continue
        note = parse_note(text, vf.path)
        for c in chunk_note(note.body, title=note.title, body_line=note.body_line, count_tokens=embedder.count_tokens,
                            max_tokens=CHUNK_MAX_TOKENS):
            texts.append(chunk_embed_text(c.symbol, c.text))
        if len(texts) >= limit:
            break
    return texts[:limit]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vault", type=Path)
    ap.add_argument("--sample", type=int, default=1500, help="chunks embedded for the throughput figure")
    ap.add_argument("--variants", default="int8,fp32", help="model variants compared for throughput")
    ap.add_argument("--skip-index", action="store_true")
    args = ap.parse_args()
    rows: list[tuple[str, str, str]] = []
    cores = os.cpu_count()

    default = Embedder()
    texts = sample_chunks(args.vault, default, args.sample)
    tokens = sum(min(default.count_tokens(t) + 2, default.max_tokens) for t in texts)
    for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
        emb = default if variant in default.model_id else Embedder(variant=variant)
        emb.embed(texts[:64])  # warm-up
        t = time.perf_counter()
        emb.embed(texts)
        dt = time.perf_counter() - t
        mark = " (shipped default)" if emb is default else ""
        rows.append((f"embed {variant}{mark}: tokens/s ({len(texts)} chunks, {cores} cores)", f"{tokens / dt:,.0f}",
                     "≥ 10,000"))
        rows.append((f"embed {variant}{mark}: chunks/s", f"{len(texts) / dt:,.1f}", ""))

    if not args.skip_index:
        with tempfile.TemporaryDirectory() as tmp:
            config = load_config({"vault": str(args.vault), "data_dir": tmp}, env={})
            store = Store(config.db_path)
            indexer = Indexer(config, store, default)
            t = time.perf_counter()
            report = indexer.sync_text()
            keyword_ready = time.perf_counter() - t
            written, embedded = indexer.embed_pending()
            full = time.perf_counter() - t
            stats = store.stats()
            rows.append((f"index {args.vault.name}: notes / chunks / skipped",
                         f"{stats['notes']} / {stats['chunks']} / {stats['skipped']}", ""))
            rows.append((f"index {args.vault.name}: keyword-ready (s)", f"{keyword_ready:.1f}", "< 30"))
            rows.append((f"index {args.vault.name}: fully embedded (s)", f"{full:.1f}", "< 300"))
            rows.append((f"index {args.vault.name}: texts embedded (chunks + titles)", f"{embedded}", ""))
            t = time.perf_counter()
            again = indexer.sync_text()
            _, embedded2 = indexer.embed_pending()
            rows.append((f"re-index unchanged: texts embedded / seconds", f"{embedded2} / {time.perf_counter() - t:.1f}",
                         "0 embedded"))
            query = QueryService(store, default)
            lat = []
            for q in QUESTIONS * 3:
                t = time.perf_counter()
                query.search(q)
                lat.append((time.perf_counter() - t) * 1000)
            lat.sort()
            rows.append(("search latency p50 / p95 (ms)",
                         f"{statistics.median(lat):.0f} / {lat[int(len(lat) * 0.95) - 1]:.0f}", ""))
            db_mb = sum(p.stat().st_size for p in config.db_path.parent.glob("*")) / 1e6
            rows.append(("index size on disk (MB)", f"{db_mb:.0f}", ""))
            store.close()
            del again, written, report

    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'value':>14}  target")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>14}  {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Speed and parity of the embedding model's variants, side by side in one process. Figures, not tests.

The texts are what the indexer embeds for VAULT (default obsidian-help): every note parsed and chunked as the
indexer does (:func:`cairn.index.prepare_note`), then per chunk its sentence texts, its whole-chunk text (title,
heading path and sentences, up to 256 tokens) and the note's title, deduplicated; ``--texts`` of them drawn at random
(seeded). Each variant is an :class:`~cairn.embedder.Embedder` with the daemon's threads (``--threads``, default
every core). The sample is cut into ``--rounds`` parts; round r embeds part r with every variant in turn, the order
rotating each round, so a drift of the shared machine's speed falls on all of them alike.

Reported per variant: passages/s (texts embedded a second: median of the rounds' wall clock) and CPU-time
passages/s (per CPU-second × threads); tokens/s (median of the rounds' wall clock; tokens include [CLS]/[SEP]
after truncation), the ratio to fp32 (median of the per-round ratios), CPU-time tokens/s (tokens per CPU-second ×
threads), and the cosine of each text's vector with fp32's over the whole sample: min, 1st percentile, mean.

Usage: bench_quantisation.py [VAULT] [--variant V ...] [--texts N] [--rounds R] [--threads T] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))

from cairn.embedder import Embedder, load_tokenizer  # noqa: E402
from cairn.embedding import embedding_texts, whole_chunk_text  # noqa: E402
from cairn.index import prepare_note  # noqa: E402

DEFAULT_VARIANTS = ("fp32", "int8", "int8-matmul", "int8-matmul-pt", "int8-static", "fp32-fused", "int8-fused")


def vault_texts(vault: Path) -> list[str]:
    """Every text the indexer embeds for ``vault`` (sentences, whole chunks, titles), deduplicated, in path order."""
    tok = load_tokenizer()
    texts: dict[str, None] = {}
    for path in sorted(vault.rglob("*.md")):
        rel = path.relative_to(vault).as_posix()
        prepared = prepare_note(path.read_text(encoding="utf-8", errors="replace"), rel, tok.count_tokens)
        title = prepared.note.title
        texts[title] = None
        for c in prepared.chunks:
            units = [u for u, _ in c.units]
            texts.update(dict.fromkeys(units))
            texts[whole_chunk_text(title, c.symbol, units or embedding_texts(c.symbol, c.text, c.kind))] = None
    return [t for t in texts if t.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vault", nargs="?", type=Path, default=REPO.parent / "shared" / "vaults" / "obsidian-help")
    ap.add_argument("--variant", action="append", help=f"default: {', '.join(DEFAULT_VARIANTS)}")
    ap.add_argument("--texts", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    variants = args.variant or list(DEFAULT_VARIANTS)
    if variants[0] != "fp32":
        variants = ["fp32", *[v for v in variants if v != "fp32"]]
    every = vault_texts(args.vault)
    sample = random.Random(0).sample(every, min(args.texts, len(every)))
    embedders = {v: Embedder(variant=v, threads=args.threads) for v in variants}
    tok = embedders["fp32"].tokenizer
    lengths = [len(ids) for ids in tok.encode_for_model(sample)]
    parts = [list(range(r, len(sample), args.rounds)) for r in range(args.rounds)]
    print(
        f"{len(sample)} of {len(every)} texts of {args.vault.name}: {sum(lengths)} tokens,"
        f" median {np.median(lengths):.0f}, {sum(n > 128 for n in lengths)} over 128;"
        f" {args.threads} threads; load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    for emb in embedders.values():
        emb.embed(sample[:64])  # warm-up
    vecs = {v: np.empty((len(sample), emb.dim), dtype=np.float32) for v, emb in embedders.items()}
    walls: dict[str, list[float]] = {v: [] for v in variants}
    cpus: dict[str, float] = dict.fromkeys(variants, 0.0)
    for r, idx in enumerate(parts):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for v in order:
            w0, c0 = time.perf_counter(), time.process_time()
            vecs[v][idx] = embedders[v].embed([sample[i] for i in idx])
            walls[v].append(time.perf_counter() - w0)
            cpus[v] += time.process_time() - c0
        print(f"  round {r + 1}: " + ", ".join(f"{v} {walls[v][-1]:.1f} s" for v in variants), flush=True)
    rows = {}
    for v in variants:
        toks = [sum(lengths[i] for i in idx) for idx in parts]
        rate = statistics.median(t / w for t, w in zip(toks, walls[v]))
        ratio = statistics.median(wf / wv for wf, wv in zip(walls["fp32"], walls[v]))
        cos = (vecs[v] * vecs["fp32"]).sum(axis=1)
        rows[v] = {
            "passages_per_s": round(statistics.median(len(idx) / w for idx, w in zip(parts, walls[v])), 1),
            "passages_per_cpu_s_x_threads": round(args.threads * len(sample) / cpus[v], 1),
            "tokens_per_s": round(rate),
            "speed_vs_fp32": round(ratio, 2),
            "tokens_per_cpu_s_x_threads": round(args.threads * sum(lengths) / cpus[v]),
            "cosine_to_fp32_min": round(float(cos.min()), 4),
            "cosine_to_fp32_p1": round(float(np.percentile(cos, 1)), 4),
            "cosine_to_fp32_mean": round(float(cos.mean()), 4),
            "file_mb": round(embedders[v].model_dir.joinpath(_file_of(embedders[v])).stat().st_size / 1e6, 1),
        }
    print(
        f"{'variant':16} {'pass/s':>7} {'cpu pass/s':>10} {'tok/s':>7} {'×fp32':>6} {'cpu tok/s':>9} {'cos min':>8}"
        f" {'p1':>7} {'mean':>7} {'MB':>6}"
    )
    for v, row in rows.items():
        print(
            f"{v:16} {row['passages_per_s']:7.1f} {row['passages_per_cpu_s_x_threads']:10.1f}"
            f" {row['tokens_per_s']:7d} {row['speed_vs_fp32']:6.2f} {row['tokens_per_cpu_s_x_threads']:9d}"
            f" {row['cosine_to_fp32_min']:8.4f} {row['cosine_to_fp32_p1']:7.4f} {row['cosine_to_fp32_mean']:7.4f}"
            f" {row['file_mb']:6.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"texts": len(sample), "tokens": sum(lengths), "variants": rows}, indent=1))


def _file_of(emb: Embedder) -> str:
    entry = (emb.manifest.get("files") or {}).get(emb.variant) or emb.manifest["variants_built"][emb.variant]
    return str(entry["file"])


if __name__ == "__main__":
    main()

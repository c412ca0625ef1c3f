#!/usr/bin/env python3
"""Benchmarks: embedding throughput and index time on a real vault. Figures, not tests.

Prints a table of figure and target:
- embedding throughput of the shipped model on the vault's real chunks (chunks/s, tokens/s;
  target ≥ 10,000 tokens/s on 2 cores), for each model variant side by side in one run;
- full index of the vault into a fresh store, run as ``cairn index`` in a child process:
  keyword-ready time (target < 30 s for obsidian-hub) and fully embedded time (target < 5 min);
- peak memory (RSS) of that child, and of the same full index of a small vault (the help vault)
  in the same run: target < 1 GB for obsidian-hub (3,900 notes, ~20k chunks), and the hub's
  peak at most 1.25× the help vault's (170 notes): the text phase works in bounded batches and
  the vector phase in fixed-size batches, so what is left is the model and its ONNX buffers
  (~0.5 GB for batches of 32 texts of up to 256 tokens), which do not grow with the vault;
- a second run with nothing changed (target: 0 texts embedded);
- search latency of questions not asked before, one client (p50, p95).

Usage: bench_index.py VAULT [--sample N] [--variants int8,fp32] [--skip-index] [--rss-compare SMALL_VAULT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))

from cairn.chunking import chunk_note  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.contract import SearchRequest  # noqa: E402
from cairn.embedder import Embedder  # noqa: E402
from cairn.embedding import chunk_embed_text  # noqa: E402
from cairn.index import CHUNK_MAX_TOKENS, ChunkVectors, IndexWriter, NoteIndexer  # noqa: E402
from cairn.notes import parse_note  # noqa: E402
from cairn.search import SearchService  # noqa: E402
from cairn.store import Store  # noqa: E402
from cairn.vault import read_note_text, scan_vault  # noqa: E402

QUESTIONS = [
    "How do I make a callout?",
    "how do I embed a note in another note",
    "What is a vault?",
    "keyboard shortcut for the command palette",
    "How do I sync between devices?",
    "dataview query examples",
    "How can I publish my notes as a website?",
    "templates with dates",
    "graph view filters",
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
        for c in chunk_note(
            note.body,
            title=note.title,
            body_line=note.body_line,
            count_tokens=embedder.count_tokens,
            max_tokens=CHUNK_MAX_TOKENS,
        ):
            texts.append(chunk_embed_text(c.symbol, c.text))
        if len(texts) >= limit:
            break
    return texts[:limit]


#: Peak RSS targets of a full ``cairn index`` (see the module docstring): absolute, and hub ÷ help vault.
RSS_TARGET_MB = 1000
RSS_GROWTH_TARGET = 1.25


def _tree_rss_bytes(pid: int) -> int | None:
    """Resident memory (bytes) of ``pid`` and its descendants (the parse workers), from /proc; None elsewhere."""
    if not os.path.isdir("/proc"):
        return None
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        total += _status_bytes(p, "VmRSS:") or 0
        stack.extend(children.get(p, []))
    return total


def _status_bytes(pid: int, field: str) -> int | None:
    """A size field of ``/proc/PID/status`` (``VmRSS:``, ``VmHWM:``, given in kB there) in bytes; None when unreadable.

    ``VmHWM`` (the peak of ``pid``'s own address space) starts afresh at exec, unlike ``ru_maxrss`` from wait4:
    Linux keeps the pre-exec image's high-water mark in ``ru_maxrss``, so a child spawned by this script (itself
    ~1 GB with both models loaded) would report this script's size, whatever the child used."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
            return next((int(line.split()[1]) * 1024 for line in fh if line.startswith(field)), None)
    except OSError:
        return None


def index_in_child(vault: Path, home: Path) -> tuple[dict, float, float | None]:
    """A full ``cairn index --json`` of ``vault`` into a fresh data folder under ``home``, in a child process.
    Returns (its JSON report, peak RSS of the child in MB — its ``VmHWM`` last read before it exited, sampled every
    0.1 s; ``ru_maxrss`` from wait4 off Linux — and the peak RSS of the child and its parse workers together in MB
    sampled every 0.1 s from /proc, or None off Linux)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update(
        {
            "CAIRN_DATA_DIR": str(home / "data"),
            "CAIRN_CONFIG_DIR": str(home / "config"),
            "CAIRN_LOG_DIR": str(home / "log"),
            "CAIRN_KEYRING": "file",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "daemon"), env.get("PYTHONPATH")])),
        }
    )
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cairn", "index", "--vault", str(vault), "--json"],
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
        peak_tree = [0]
        high_water = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.1):
                rss = _tree_rss_bytes(proc.pid)
                if rss is None:
                    return
                peak_tree[0] = max(peak_tree[0], rss)
                high_water[0] = max(high_water[0], _status_bytes(proc.pid, "VmHWM:") or 0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        done.set()
        sampler.join()
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"cairn index {vault} exited {proc.returncode}:\n{err.read().decode()[-3000:]}")
        report = json.loads(out.read())
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    main_bytes = high_water[0] or usage.ru_maxrss * scale
    return report, main_bytes / 1e6, (peak_tree[0] / 1e6 if peak_tree[0] else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vault", type=Path)
    ap.add_argument("--sample", type=int, default=1500, help="chunks embedded for the throughput figure")
    ap.add_argument("--variants", default="int8,fp32", help="model variants compared for throughput")
    ap.add_argument("--skip-index", action="store_true")
    ap.add_argument(
        "--rss-compare",
        type=Path,
        default=None,
        metavar="SMALL_VAULT",
        help="a small vault whose full-index peak RSS is set beside VAULT's "
        "(default: obsidian-help next to VAULT, when there)",
    )
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
        rows.append(
            (f"embed {variant}{mark}: tokens/s ({len(texts)} chunks, {cores} cores)", f"{tokens / dt:,.0f}", "≥ 10,000")
        )
        rows.append((f"embed {variant}{mark}: chunks/s", f"{len(texts) / dt:,.1f}", ""))

    if not args.skip_index:
        with tempfile.TemporaryDirectory() as tmp:
            peaks = {}
            small = args.rss_compare or args.vault.parent / "obsidian-help"
            if small and small.is_dir() and small.resolve() != args.vault.resolve():
                _, main_mb, tree_mb = index_in_child(small, Path(tmp) / "small")
                peaks[small.name] = (main_mb, tree_mb)
            report, main_mb, tree_mb = index_in_child(args.vault, Path(tmp))
            peaks[args.vault.name] = (main_mb, tree_mb)
            keyword_ready, full, embedded = (
                report["keywordReadySeconds"],
                report["elapsedSeconds"],
                report["textsEmbedded"],
            )
            config = load_config({"vault": str(args.vault), "data_dir": str(Path(tmp) / "data")}, env={})
            store = Store(config.db_path)
            indexer = NoteIndexer(config, IndexWriter(store, config.require_vault(), config.ignore), default)
            vectors = ChunkVectors(store, default)
            stats = store.stats()
            rows.append(
                (
                    f"index {args.vault.name}: notes / chunks / skipped",
                    f"{stats.notes} / {stats.chunks} / {stats.skipped}",
                    "",
                )
            )
            rows.append((f"index {args.vault.name}: keyword-ready (s)", f"{keyword_ready:.1f}", "< 30"))
            rows.append((f"index {args.vault.name}: fully embedded (s)", f"{full:.1f}", "< 300"))
            rows.append((f"index {args.vault.name}: texts embedded (chunks + titles)", f"{embedded}", ""))
            for name, (main_mb, tree_mb) in peaks.items():
                target = f"< {RSS_TARGET_MB:,}" if name == args.vault.name else ""
                rows.append((f"index {name}: peak RSS, cairn index (MB)", f"{main_mb:,.0f}", target))
                if tree_mb is not None:
                    rows.append((f"index {name}: peak RSS with parse workers (MB)", f"{tree_mb:,.0f}", ""))
            if len(peaks) == 2:
                (small_mb, _), (big_mb, _) = peaks[small.name], peaks[args.vault.name]
                rows.append(
                    (f"peak RSS {args.vault.name} ÷ {small.name}", f"{big_mb / small_mb:.2f}", f"≤ {RSS_GROWTH_TARGET}")
                )
            t = time.perf_counter()
            again = indexer.sync_text()
            _, embedded2 = vectors.embed_pending()
            rows.append(
                (
                    "re-index unchanged: texts embedded / seconds",
                    f"{embedded2} / {time.perf_counter() - t:.1f}",
                    "0 embedded",
                )
            )
            query = SearchService(store, default)
            query.start_keyword_index().join()  # as the daemon: BM25 from memory once built
            lat = []
            for i, q in enumerate(QUESTIONS * 3):  # each a question not asked before (no cached result)
                t = time.perf_counter()
                query.search(SearchRequest.parse({"query": f"{q} (question {i})"}))
                lat.append((time.perf_counter() - t) * 1000)
            lat.sort()
            rows.append(
                (
                    "search latency, one client, questions not asked before: p50 / p95 (ms)",
                    f"{statistics.median(lat):.0f} / {lat[int(len(lat) * 0.95) - 1]:.0f}",
                    "",
                )
            )
            db_mb = sum(p.stat().st_size for p in config.db_path.parent.glob("*")) / 1e6
            rows.append(("index size on disk (MB)", f"{db_mb:.0f}", ""))
            store.close()
            del again

    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'value':>14}  target")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>14}  {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

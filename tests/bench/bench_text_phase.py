#!/usr/bin/env python3
"""Benchmark: the text phase alone (``NoteIndexer.sync_text``) of a vault into a fresh store, no embedding. A figure,
not a test.

Prints keyword-ready seconds (the run's own ``keyword_ready_s``), the notes indexed, and the notes/s of each tenth of
the run (from the ``index`` progress events), so a per-note slowdown as the store fills shows as a falling rate;
and the CPU seconds of this process and of its parse workers, with this process's CPU ms per note by tenth (a
figure that holds on a busy machine, where wall-clock rates mostly measure the other processes).
With ``--profile FILE`` the run is under cProfile (main thread only: parse workers are other processes) and the top
entries by cumulative and own time are printed.

Usage: bench_text_phase.py VAULT [--data-dir DIR] [--profile FILE] [--top 25] [--json]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))

from cairn.config import load_config  # noqa: E402
from cairn.embedder import Embedder  # noqa: E402
from cairn.index import IndexWriter, NoteIndexer  # noqa: E402
from cairn.store import Store  # noqa: E402


def run(vault: Path, data_dir: Path, profile: Path | None, top: int) -> dict:
    config = load_config({"vault": str(vault), "data_dir": str(data_dir)}, env={})
    store = Store(config.db_path)
    indexer = NoteIndexer(config, IndexWriter(store, config.require_vault(), config.ignore), Embedder())
    marks: list[tuple[float, int, int]] = []  # (seconds, done, total) of each "index" event
    cpu_marks: list[tuple[float, int, int]] = []  # the same with this process's CPU seconds

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "index":
            marks.append((time.perf_counter(), done, total))
            cpu_marks.append((time.process_time(), done, total))

    prof = cProfile.Profile() if profile else None
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_started = time.process_time()
    started = time.perf_counter()
    if prof:
        prof.enable()
    report = indexer.sync_text(progress=progress)
    if prof:
        prof.disable()
        prof.dump_stats(str(profile))
    wall = time.perf_counter() - started
    main_cpu = time.process_time() - cpu_started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    workers_cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    tenths = _tenths(marks, started)
    cpu_tenths = _tenths(cpu_marks, cpu_started)
    out = {
        "vault": str(vault),
        "keyword_ready_s": round(report.keyword_ready_s, 2),
        "wall_s": round(wall, 2),
        "added": report.added,
        "skipped": len(report.skipped),
        "chunks": report.chunks_written,
        "notes_per_s": round(report.added / report.keyword_ready_s, 1) if report.keyword_ready_s else None,
        "notes_per_s_by_tenth": tenths,
        "main_cpu_s": round(main_cpu, 1),
        "workers_cpu_s": round(workers_cpu, 1),
        "load_avg_1m": os.getloadavg()[0],
        "main_cpu_ms_per_note_by_tenth": [round(1000 / r, 2) if r else None for r in cpu_tenths],
        "db_bytes": sum(p.stat().st_size for p in data_dir.rglob("*") if p.is_file()),
    }
    store.close()
    if prof:
        stats = pstats.Stats(str(profile))
        stats.sort_stats("cumulative").print_stats(top)
        stats.sort_stats("tottime").print_stats(top)
    return out


def _tenths(marks: list[tuple[float, int, int]], started: float) -> list[float]:
    """Notes/s over each tenth of the notes to index (interpolated between progress events)."""
    if not marks or not marks[-1][2]:
        return []
    total = marks[-1][2]
    points = [(started, 0)] + [(t, d) for t, d, _ in marks]
    rates, prev_t, prev_n = [], started, 0
    for k in range(1, 11):
        goal = total * k / 10
        t = next((t for t, d in points if d >= goal), points[-1][0])
        rates.append(round((goal - prev_n) / max(t - prev_t, 1e-9), 1))
        prev_t, prev_n = t, goal
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("vault", type=Path)
    ap.add_argument("--data-dir", type=Path, help="a fresh folder for the index (default: a temporary one)")
    ap.add_argument("--profile", type=Path, help="write cProfile stats there and print the top entries")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cairn-text-bench-") as tmp:
        data = args.data_dir or Path(tmp) / "data"
        out = run(args.vault.resolve(), data, args.profile, args.top)
    if args.json:
        print(json.dumps(out))
        return
    print(f"vault {out['vault']}")
    print(f"keyword-ready {out['keyword_ready_s']} s (wall {out['wall_s']} s), {out['added']} notes added, ")
    print(f"  {out['skipped']} skipped, {out['chunks']} chunks, index {out['db_bytes'] / 1e6:.1f} MB")
    print(f"notes/s overall {out['notes_per_s']}")
    print("notes/s per tenth of the run: " + " ".join(str(r) for r in out["notes_per_s_by_tenth"]))
    print(f"CPU s: main {out['main_cpu_s']}, parse workers {out['workers_cpu_s']} (load average {out['load_avg_1m']})")
    print("main CPU ms/note per tenth: " + " ".join(str(r) for r in out["main_cpu_ms_per_note_by_tenth"]))


if __name__ == "__main__":
    main()

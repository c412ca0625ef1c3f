#!/usr/bin/env python3
"""Reload benchmark for the query service's in-memory vectors: CPU of a full load (every vector read out of
sqlite-vec, deduplicated and quantised) against an incremental reload (only the chunks added or removed since the
snapshot it replaces: VectorSnapshot.refresh) after 1 and after 50 notes were rewritten. Figures, not
tests; every incremental snapshot is also checked against a full load of the same state (scores by chunk id and the
dense top 60 for a few questions).

On a copy of VAULT (default: obsidian-hub), with the index copied from --index FILE when given (the eval cache's,
for instance: nothing to embed) or indexed first. Each figure is the median of --repeat runs, CPU time of this
process (time.process_time: all threads) and wall time. Target: an incremental reload after one saved note under
10 % of a full load's CPU.

Usage: bench_vector_reload.py [VAULT] [--index FILE] [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))

import numpy as np  # noqa: E402

from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.search import SearchService  # noqa: E402
from cairn.search.vectors import Vectors, VectorSnapshot  # noqa: E402

QUESTIONS = [
    "how do I sync my vault between devices",
    "plugin for spaced repetition flashcards",
    "keyboard shortcut to open the command palette",
]


def measure(fn, repeat: int) -> tuple[float, float, object]:
    """(median CPU ms, median wall ms, last result) of ``fn()`` over ``repeat`` runs."""
    cpu, wall, out = [], [], None
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        cpu.append((time.process_time() - c0) * 1000)
        wall.append((time.perf_counter() - w0) * 1000)
    return statistics.median(cpu), statistics.median(wall), out


def check_same(inc: VectorSnapshot, full: VectorSnapshot, embedder) -> None:
    assert sorted(inc.chunk_ids.tolist()) == sorted(full.chunk_ids.tolist()), "chunk ids differ"
    for q in QUESTIONS:
        v = embedder.embed_query(q)
        for a, b in zip(inc.scores(v), full.scores(v)):
            assert dict(zip(inc.chunk_ids.tolist(), a.tolist())) == dict(zip(full.chunk_ids.tolist(), b.tolist()))
        ti = inc.chunk_ids[inc.dense.query(v).top(60, SearchService.SENTENCE_WEIGHT, inc.chunk_ids)].tolist()
        tf = full.chunk_ids[full.dense.query(v).top(60, SearchService.SENTENCE_WEIGHT, full.chunk_ids)].tolist()
        assert ti == tf, "dense top 60 differs"


def rewrite(notes: list[Path], start: int, count: int) -> None:
    for i, path in enumerate(notes[start : start + count]):
        path.write_text(
            path.read_text(encoding="utf-8") + f"\n\nA paragraph added by the reload benchmark ({i}).\n",
            encoding="utf-8",
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("vault", nargs="?", default=str(REPO.parent / "shared" / "vaults" / "obsidian-hub"))
    ap.add_argument("--index", help="an index of VAULT to copy (skips indexing)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cairn-reload-") as tmp:
        vault = Path(tmp) / "vault"
        shutil.copytree(args.vault, vault)
        config = load_config(
            {"vault": str(vault), "data_dir": str(Path(tmp) / "data"), "config_dir": str(Path(tmp) / "config")}, env={}
        )
        if args.index:
            config.db_path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(args.index, config.db_path)
        cairn = Cairn(config)
        try:
            t0 = time.perf_counter()
            report = cairn.indexing.index()
            print(f"index before: {time.perf_counter() - t0:.1f} s ({report.to_json()})")
            store, embedder = cairn.store, cairn.embedder
            cpu, wall, old = measure(lambda: VectorSnapshot.load(store), args.repeat)
            print(
                f"full load: {len(old.chunk_ids)} chunks, {len(old.sentence_order)} sentences "
                f"({len(old.sentences)} distinct): "
                f"CPU {cpu:.0f} ms, wall {wall:.0f} ms (median of {args.repeat})"
            )
            notes = sorted(p for p in vault.rglob("*.md") if ".obsidian" not in p.parts)
            cpu0, wall0, same = measure(
                lambda: VectorSnapshot.refresh(old, store, max_changed=Vectors.INCREMENTAL_MAX),
                args.repeat,
            )
            print(f"reload, nothing changed: CPU {cpu0:.1f} ms, wall {wall0:.1f} ms")
            for count, start in ((1, 100), (50, 200)):
                rewrite(notes, start, count)
                cairn.indexing.index()
                cpu_f, wall_f, full = measure(lambda: VectorSnapshot.load(store), args.repeat)
                cpu_i, wall_i, inc = measure(
                    lambda old=old: VectorSnapshot.refresh(old, store, max_changed=Vectors.INCREMENTAL_MAX),
                    args.repeat,
                )
                assert inc is not None, "the incremental reload declined"
                added = len(set(full.chunk_ids.tolist()) - set(old.chunk_ids.tolist()))
                removed = len(set(old.chunk_ids.tolist()) - set(full.chunk_ids.tolist()))
                check_same(inc, full, embedder)
                print(
                    f"{count} note(s) rewritten (+{added} / -{removed} chunks since the snapshot): incremental CPU "
                    f"{cpu_i:.0f} ms, wall {wall_i:.0f} ms; full load CPU {cpu_f:.0f} ms, wall {wall_f:.0f} ms "
                    f"({100 * cpu_i / cpu_f:.1f} % of a full load's CPU; target < 10 % after one note); "
                    f"same scores and dense top 60: yes"
                )
                old = inc
        finally:
            cairn.close()


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()

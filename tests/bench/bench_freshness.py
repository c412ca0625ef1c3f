#!/usr/bin/env python3
"""Freshness benchmark: how soon a saved note is searchable, with the real file watcher. Figures, not tests.

On a copy of VAULT (default: obsidian-hub), indexed first (reused from --work DIR when given):
- EDITS atomic saves (temp file + rename over) of random notes, one at a time, each adding a
  sentence with a unique word: time from the save until the keyword index (the BM25 leg of search,
  from memory as in the daemon: FTS5's bm25() followed after each commit) finds the note by that word,
  and until the dense leg (nearest sentence vectors) finds it by the sentence — p50 / p95, raw and
  minus the debounce; plus how often the full query service
  (hybrid, after the cosine floor) returns the note for the new sentence
  (targets: keyword p95 < 300 ms after the debounce, semantic p95 < 1 s);
- a burst of BURST new files (a ``git checkout``): time until the reconcile diff is empty, then the
  same for deleting them;
- search latency p50 / p95 while a full re-index runs, against idle (every search a question not asked
  before, so no cached result answers it).

Usage: bench_freshness.py [VAULT] [--edits 50] [--burst 1000] [--work DIR] [--debounce-ms 300]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))

from bench_index import QUESTIONS  # noqa: E402  (the same questions as the index bench's latency figure)

from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.contract import SearchRequest  # noqa: E402
from cairn.index import VaultWatcher  # noqa: E402

ANIMALS = ["heron", "otter", "lynx", "badger", "kestrel", "salamander", "marmot", "ibis", "okapi", "tapir"]
PLACES = ["lighthouse", "orchard", "observatory", "boathouse", "greenhouse", "quarry", "monastery", "harbour"]
ACTS = [
    "repair the weather vane",
    "count the apricots",
    "polish the telescope lens",
    "mend the fishing nets",
    "sort the seed packets",
    "tune the old organ",
    "sweep the chimney",
    "paint the shutters blue",
]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def fmt(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5) * 1000:7.0f} ms   p95 {pct(values, 0.95) * 1000:7.0f} ms   (n={len(values)})"


def indexed_paths(store) -> list[str]:
    """The vault-relative paths of the indexed notes, sorted (skipped files left out)."""
    return sorted(path for path, state in store.note_states().items() if state.status == "ok")


def nearest_sentence_chunks(store, qvec, k: int) -> list[int]:
    """Chunk ids of the ``k`` sentence vectors nearest to ``qvec`` (sqlite-vec, cosine), best first."""
    rows = store.conn.execute(
        "SELECT u.chunk_id FROM (SELECT unit_id, distance FROM unit_vectors WHERE embedding MATCH ? AND k = ?) v "
        "JOIN chunk_units u ON u.id = v.unit_id ORDER BY v.distance",
        (qvec.astype("<f4").tobytes(), k),
    )
    return list(dict.fromkeys(r[0] for r in rows))


def wait_until(check, deadline_s: float, step: float = 0.005) -> float | None:
    """Seconds until ``check()`` holds (polled every ``step``), or None at the deadline."""
    start = time.perf_counter()
    while time.perf_counter() - start < deadline_s:
        if check():
            return time.perf_counter() - start
        time.sleep(step)
    return None


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vault", type=Path, nargs="?", default=REPO.parent / "shared" / "vaults" / "obsidian-hub")
    ap.add_argument("--edits", type=int, default=50)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--work", type=Path, help="keep the vault copy and index here (reused by the next run)")
    ap.add_argument("--debounce-ms", type=int, default=300)
    ap.add_argument("--seed", type=int, default=7)
    return ap.parse_args()


def indexed_copy(source: Path, work: Path) -> Cairn:
    """A Cairn over a fresh copy of ``source`` in ``work/vault``, indexed, BM25 served from memory."""
    vault = work / "vault"
    if vault.exists():
        shutil.rmtree(vault)
    shutil.copytree(source, vault, copy_function=shutil.copy2, symlinks=True)
    config = load_config(
        {"vault": str(vault), "data_dir": str(work / "data"), "config_dir": str(work / "config")}, env={}
    )
    cairn = Cairn(config)
    started = time.perf_counter()
    report = cairn.indexing.index()
    print(
        f"vault {source} → {vault}: {cairn.indexing.stats()['notes']} notes indexed "
        f"({report.added} added, {report.texts_embedded} texts embedded) in {time.perf_counter() - started:.1f} s"
    )
    cairn.query.start_keyword_index().join()  # as the daemon does after its start-up run: BM25 from memory
    return cairn


class Edits:
    """Atomic saves of random notes, each adding a sentence with a unique word; when each leg found it."""

    def __init__(self, cairn: Cairn, vault: Path, rng: random.Random) -> None:
        self.cairn, self.vault, self.rng = cairn, vault, rng
        self.results: dict[str, list[float]] = {"keyword": [], "semantic": []}
        self.missed = {"keyword": 0, "semantic": 0}
        self.service_found: list[bool] = []

    def run(self, count: int) -> None:
        cairn, rng = self.cairn, self.rng
        notes = [p for p in indexed_paths(cairn.store) if (self.vault / p).stat().st_size < 50_000]
        for i in range(count):
            rel = rng.choice(notes)
            word = f"zq{rng.randrange(16**8):08x}"
            sentence = (
                f"The {rng.choice(ANIMALS)} went to the {rng.choice(PLACES)} to {rng.choice(ACTS)} "
                f"on day {i} of the {rng.choice(['spring', 'autumn', 'winter'])} festival."
            )
            self.one(i, rel, word, sentence)

    def one(self, i: int, rel: str, word: str, sentence: str) -> None:
        cairn = self.cairn
        qvec = cairn.embedder.embed_query(sentence)  # before the save: not part of the latency
        path = self.vault / rel
        tmp = path.with_name(path.name + f".tmp-{i}")
        tmp.write_text(path.read_text(encoding="utf-8") + f"\n\n{sentence} Code word {word}.\n", encoding="utf-8")
        saved = time.perf_counter()
        os.replace(tmp, path)  # the save

        def keyword_found() -> bool:  # the BM25 leg of search sees the new text (from memory, as the daemon's)
            ids = cairn.query.keyword_ranking(word, 5)
            return any(r.path == rel for r in cairn.store.chunk_rows(ids).values())

        def semantic_found() -> bool:  # the dense leg: the new sentence's vector is the nearest sentence vector
            ids = nearest_sentence_chunks(cairn.store, qvec, 5)
            return any(r.path == rel and word in r.text for r in cairn.store.chunk_rows(ids).values())

        for kind, check in (("keyword", keyword_found), ("semantic", semantic_found)):
            if wait_until(check, 10) is None:
                self.missed[kind] += 1
            else:
                self.results[kind].append(time.perf_counter() - saved)
        hits = cairn.query.search(SearchRequest.parse({"query": f"{sentence} {word}"})).hits
        self.service_found.append(any(h.file_path == rel for h in hits))


def burst(cairn: Cairn, vault: Path, count: int, rng: random.Random) -> dict[str, float | None]:
    """Seconds until the reconcile diff is empty after ``count`` files created at once, then deleted."""
    times: dict[str, float | None] = {}
    folder = vault / "Burst checkout"
    folder.mkdir()
    t0 = time.perf_counter()
    for i in range(count):
        (folder / f"Branch note {i:04d}.md").write_text(
            f"# Branch note {i}\n\nFile {i} of a checkout about {rng.choice(PLACES)} maintenance.\n",
            encoding="utf-8",
        )
    empty = {"added": [], "changed": [], "deleted": []}
    done = wait_until(lambda: cairn.indexer.reconcile_diff() == empty and cairn.store.count_pending() == 0, 600, 0.1)
    times["create"] = None if done is None else time.perf_counter() - t0
    t0 = time.perf_counter()
    shutil.rmtree(folder)
    done = wait_until(lambda: cairn.indexer.reconcile_diff() == empty, 600, 0.1)
    times["delete"] = None if done is None else time.perf_counter() - t0
    return times


def watched(cairn: Cairn, vault: Path, debounce_ms: int, *work) -> None:
    """Run each of ``work`` (blocking callables, in turn, off the loop) while the file watcher runs."""

    async def scenario() -> None:
        watcher = VaultWatcher(
            vault,
            apply_hints=cairn.indexing.save_lane.save,
            reconcile=cairn.indexing.index,
            hints=cairn.indexing.hints,
            executor=cairn.indexing.save_lane.executor,
            ignore=cairn.config.ignore,
            debounce_ms=debounce_ms,
        )
        await watcher.start()
        try:
            for step in work:
                await asyncio.to_thread(step)
        finally:
            await watcher.stop()

    asyncio.run(scenario())


def search_latencies(cairn: Cairn) -> tuple[list[float], list[float]]:
    """Search latency idle, then while a full re-index (re-parse everything; vectors from the cache) runs.

    Every search is a question not asked before (a serial number appended), so no cached result or vector
    answers it."""
    asked = itertools.count()

    def latencies(seconds: float) -> list[float]:
        out: list[float] = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for q in QUESTIONS:
                q = f"{q} (question {next(asked)})"
                t = time.perf_counter()
                cairn.query.search(SearchRequest.parse({"query": q}))
                out.append(time.perf_counter() - t)
        return out

    idle = latencies(5)
    reindex = threading.Thread(target=lambda: cairn.indexing.index(full=True), name="full-reindex")
    reindex.start()
    busy: list[float] = []
    while reindex.is_alive():
        busy += latencies(1)
    reindex.join()
    return idle, busy


def print_report(args: argparse.Namespace, edits: Edits, burst_times: dict[str, float | None], idle, busy) -> None:
    deb = args.debounce_ms / 1000
    print(f"\nsave → found, {args.edits} atomic saves (debounce {args.debounce_ms} ms):")
    for kind in ("keyword", "semantic"):
        vals = edits.results[kind]
        if vals:
            after = [max(0.0, v - deb) for v in vals]
            print(
                f"  {kind:8s} {fmt(vals)};   after the debounce: p50 {pct(after, 0.5) * 1000:.0f} ms, "
                f"p95 {pct(after, 0.95) * 1000:.0f} ms"
                + (f"; {edits.missed[kind]} not found in 10 s" if edits.missed[kind] else "")
            )
    print(
        f"  the full query service (hybrid, cosine floor) returned the edited note for its new sentence in "
        f"{sum(edits.service_found)} of {len(edits.service_found)} edits"
    )
    for k, v in burst_times.items():
        print(
            f"  burst of {args.burst} files, {k}: reconcile diff = 0 after "
            + (f"{v:.1f} s" if v is not None else "NOT within 600 s")
        )
    print(f"  search idle:                   {fmt(idle)}")
    print(f"  search during a full re-index: {fmt(busy)}")


def main() -> int:
    args = parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="cairn-fresh-"))
    cairn = indexed_copy(args.vault, work)
    vault = work / "vault"
    rng = random.Random(args.seed)
    edits = Edits(cairn, vault, rng)
    burst_times: dict[str, float | None] = {}
    watched(
        cairn,
        vault,
        args.debounce_ms,
        lambda: edits.run(args.edits),
        lambda: burst_times.update(burst(cairn, vault, args.burst, rng)),
    )
    idle, busy = search_latencies(cairn)
    print_report(args, edits, burst_times, idle, busy)
    cairn.close()
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

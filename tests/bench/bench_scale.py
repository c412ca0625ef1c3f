#!/usr/bin/env python3
"""Scale benchmark (``make bench-scale``): the real daemon on a synthetic vault of ``--notes`` notes (default 40,000)
beside the same figures on ``--baseline`` (default obsidian-hub), in one run, with the growth factor. Figures, not
tests; each figure is printed beside its target (hub / 40k).

The synthetic vault is made first (:mod:`synth_vault`: perturbed copies of ``--source`` vaults, default obsidian-hub
and obsidian-help) in ``--work`` (a temp folder by default, removed at the end); the baseline is copied there too (its
notes are edited below). Then for each vault, baseline first, ``cairn serve`` runs in a child process
(:class:`bench_http.Daemon`: its own config, no MCP HTTP, no LLM) on a fresh data folder:

- first index: keyword-ready (the ``index`` phase's last ``progress`` event on ``/events``) and fully embedded (the
  ``embed`` phase's last one), both from the daemon's start; the daemon's resident set sampled every 0.5 s (its own
  peak, VmHWM, and with its worker processes); meanwhile one client sends a new question to ``/search`` every
  ``--every`` seconds (:func:`bench_search_while_indexing.measure`): their p50 / p95 are "search during the first
  index";
- a budget: the wait for the vectors ends at a deadline (the baseline's share of ``--budget-min``, the synthetic
  vault's at ``--budget-min`` less ``--reserve-min``), after which the embedding rate (passages/s over the embed
  phase) and the projected time to fully embedded are reported and the figures below are marked as measured while
  passages were still pending; the searches and saves below stop 70 % of ``--reserve-min`` after that deadline;
- the index's size on disk; the resident set ``--settle-s`` after the first index, with its breakdown
  (``/index/stats`` ``memory``), and again after ``--searches`` (1,000) searches: 8 warm-up questions,
  ``--searches-one`` new questions from 1 client, the rest from ``--clients`` clients (a new question: a dev-set
  question with a serial number appended, so nothing is answered from a cache);
- ``--edits`` atomic saves of random notes, each adding a sentence with a unique word: save → the word found by
  ``/search``, and save → the new chunk's vectors in the store (read-only, from this process: what the dense leg
  ranks), p50 / p95 less the watcher's debounce;
- the daemon stopped with SIGINT (seconds to exit), then started again on the same index: start → first ``/search``
  answer with results.

Prints the table (figure, targets hub / 40k, baseline, synthetic, ratio) then the memory breakdowns; ``make
bench-scale`` writes the output to docs/benchmarks.md (section ``scale``) with ``record.py``.

Usage: bench_scale.py [--notes 40000] [--baseline VAULT] [--source VAULT]... [--work DIR] [--budget-min 90]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import random
import shutil
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_http  # noqa: E402
from bench_freshness import ACTS, ANIMALS, PLACES, wait_until  # noqa: E402
from bench_http import Daemon, load, one_search, pct  # noqa: E402
from bench_index import QUESTIONS, _tree_rss_bytes  # noqa: E402
from bench_memory import _get, _memory, _table  # noqa: E402
from bench_search_while_indexing import measure  # noqa: E402
from synth_vault import DEFAULT_SOURCES, generate  # noqa: E402

from cairn.index.watch import DEFAULT_DEBOUNCE_MS  # noqa: E402
from cairn.memory import process_memory  # noqa: E402
from cairn.store import Store  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
VAULTS = REPO.parent / "shared" / "vaults"
EVAL = REPO.parent / "shared" / "eval"
MB = 1e6
#: The baseline's share of the budget for its first index.
BASELINE_SHARE = 0.35
#: Saves after which the save test stops when none of them was found (neither leg within 10 s).
GIVE_UP_AFTER = 3
WARM_UP = 8


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def new_questions(questions: list[str]) -> Callable[[], str]:
    """A function returning a question not asked before at each call (a serial number appended)."""
    count = [0]

    def next_question() -> str:
        q = questions[count[0] % len(questions)]
        count[0] += 1
        return f"{q} (question {count[0]})"

    return next_question


def dev_questions(files: list[Path], vault_name: str | None) -> list[str]:
    """The dev sets' questions (those of ``vault_name``; all when None), then ``QUESTIONS``, without repeats."""
    rows = [json.loads(line) for f in files if f.exists() for line in f.read_text("utf-8").splitlines() if line.strip()]
    qs = [r["question"] for r in rows if vault_name is None or r.get("vault") == vault_name]
    return list(dict.fromkeys(qs + QUESTIONS))


async def follow_events(daemon: Daemon, t0: float, seen: dict) -> None:
    """Read ``/events`` until cancelled: ``seen[phase]`` = [(s since t0, done, total)] of each ``progress`` event,
    ``seen[phase + ':done']`` the time of the last with done = total, ``seen['connected']`` when the stream opened."""
    auth = {"Authorization": f"Bearer {daemon.token}"}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.get(daemon.url + "/events", headers=auth) as resp:
            seen["connected"] = time.monotonic() - t0
            event = ""
            async for raw in resp.content:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:") and event == "progress":
                    data = json.loads(line[5:])
                    now = time.monotonic() - t0
                    seen.setdefault(data["phase"], []).append((now, data["done"], data["total"]))
                    if data["done"] >= data["total"]:  # the phase's last event (links resolved, vectors written)
                        seen[data["phase"] + ":done"] = now


async def sample_rss(pid: int, peak: list[int]) -> None:
    """Until cancelled: ``peak[0]`` the largest resident set of ``pid`` with its worker processes (bytes)."""
    while True:
        rss = await asyncio.to_thread(_tree_rss_bytes, pid)
        peak[0] = max(peak[0], rss or 0)
        await asyncio.sleep(0.5)


def embed_rate(events: list[tuple[float, int, int]]) -> tuple[float | None, float | None]:
    """(passages embedded per second over the ``embed`` events, seconds from the start to fully embedded projected
    from the last event at that rate), None where there is too little to tell."""
    if len(events) < 2 or events[-1][0] <= events[0][0]:
        return None, None
    (t0, d0, _), (t1, d1, total) = events[0], events[-1]
    rate = (d1 - d0) / (t1 - t0)
    return rate, (t1 + (total - d1) / rate if rate > 0 else None)


def complete(coverage: dict) -> bool:
    """Whether a result's ``coverage`` says every note has its complete vectors (both tiers)."""
    return bool(coverage.get("notes")) and coverage.get("pending") == 0 and not coverage.get("refining")


async def saves_during(daemon: Daemon, vault: Path, args: argparse.Namespace, until: float) -> dict:
    """Saves made while the first index runs: one every ``--save-every`` s once the notes are keyword-searchable,
    up to ``--edits`` of them, none after ``until`` (monotonic); as :func:`save_latencies`."""
    stats = await asyncio.to_thread(_get, daemon.url + "/index/stats", daemon.token)
    while not stats.get("notes") and time.monotonic() < until:
        await asyncio.sleep(0.5)
        stats = await asyncio.to_thread(_get, daemon.url + "/index/stats", daemon.token)
    out: dict = {"keyword": [], "dense": []}
    for i in range(args.edits):
        if time.monotonic() > until:
            break
        one = await asyncio.to_thread(save_latencies, daemon, vault, 1, args.seed * 1000 + i, until)
        out["keyword"] += one["keyword"]
        out["dense"] += one["dense"]
        await asyncio.sleep(args.save_every)
    return out


async def first_index(
    daemon: Daemon, t0: float, questions: list[str], deadline: float, args: argparse.Namespace, vault: Path
) -> dict:
    """The first index as the module docstring says, until fully embedded or ``deadline`` (monotonic); a search
    every ``--every`` seconds meanwhile, and saves (:func:`saves_during`)."""
    seen: dict = {}
    peak_tree = [0]
    tasks = [
        asyncio.create_task(follow_events(daemon, t0, seen)),
        asyncio.create_task(sample_rss(daemon.proc.pid, peak_tree)),
    ]
    saving = asyncio.create_task(saves_during(daemon, vault, args, deadline))
    started = time.monotonic() - t0
    try:
        result = await measure(daemon, questions, args.every, max(1.0, deadline - time.monotonic()), complete)
        saved = await saving
    finally:
        for task in [*tasks, saving]:
            task.cancel()
        await asyncio.gather(*tasks, saving, return_exceptions=True)
    samples = result["samples"]
    done = bool(samples) and complete(samples[-1][2])
    during = [s[1] for s in samples if not complete(s[2])]
    rate, projected = embed_rate(seen.get("refine") or seen.get("embed", []))
    tier_rate, tier_projected = embed_rate(seen.get("embed", []))
    memory = process_memory(daemon.proc.pid)
    return {
        "keyword_ready_s": seen.get("index:done"),
        "events_from_s": seen.get("connected"),
        "fully_embedded_s": seen.get("refine:done", seen.get("embed:done", started + samples[-1][0])) if done else None,
        "tier1_s": seen.get("embed:done"),
        "tier1_rate": tier_rate,
        "tier1_projected_s": tier_projected,
        "saves_during": saved,
        "embed_rate": rate,
        "embed_events": len(seen.get("embed", [])),
        "projected_s": projected,
        "complete": done,
        "pending_notes": samples[-1][2].get("pending") if samples else None,
        "during_ms": during,
        "peak_mb": (memory["peak"] or 0) / MB,
        "peak_tree_mb": peak_tree[0] / MB,
    }


async def searches(
    daemon: Daemon, next_question: Callable[[], str], one: int, clients: int, total: int, until: float
) -> dict:
    """Warm-up, then ``one`` new questions from 1 client, then the rest of ``total`` from ``clients``; none sent
    after ``until`` (monotonic)."""
    auth = {"Authorization": f"Bearer {daemon.token}"}
    async with aiohttp.ClientSession() as session:
        for _ in range(WARM_UP):
            await one_search(session, daemon.url, auth, next_question())
    single, _ = await load(daemon.url, auth, [next_question() for _ in range(one)], 1, one_search, until)
    rest = max(0, total - WARM_UP - one)
    many, wall = await load(daemon.url, auth, [next_question() for _ in range(rest)], clients, one_search, until)
    return {
        "one_ms": [r for _, r in single],
        "many_ms": [r for _, r in many],
        "many_rps": len(many) / wall if wall else 0.0,
        "searches_done": WARM_UP + len(single) + len(many),
    }


def _found(daemon: Daemon, query: str, rel: str) -> bool:
    """Whether ``/search`` with ``query`` (params) returns the note ``rel``."""
    return any(h["filePath"] == rel for h in _get(daemon.url + "/search", daemon.token, query)["results"])


def _embedded(store: Store, rel: str, word: str) -> bool:
    """Whether the chunk of ``rel`` holding ``word`` has its vectors in the store."""
    return any(r.embedded and word in r.text for r in store.chunks_of_note(rel))


def save_latencies(daemon: Daemon, vault: Path, edits: int, seed: int, until: float) -> dict:
    """``edits`` atomic saves; seconds from each save to the word found by ``/search`` and to the new chunk's vectors
    in the store (None: not within 10 s). Stops after :data:`GIVE_UP_AFTER` saves when none was found at all, and
    after ``until`` (monotonic)."""
    rng = random.Random(seed)
    notes = sorted(p for p in vault.rglob("*.md") if not p.name.startswith(".") and p.stat().st_size < 50_000)
    store = Store(daemon.config.db_path, readonly=True)
    keyword: list[float | None] = []
    dense: list[float | None] = []
    try:
        for i in range(edits):
            path = rng.choice(notes)
            rel = path.relative_to(vault).as_posix()
            word = f"zq{rng.randrange(16**8):08x}"
            sentence = f"The {rng.choice(ANIMALS)} went to the {rng.choice(PLACES)} to {rng.choice(ACTS)} on day {i}."
            tmp = path.with_name(path.name + f".tmp-{i}")
            tmp.write_text(path.read_text(encoding="utf-8") + f"\n\n{sentence} Code word {word}.\n", encoding="utf-8")
            tmp.replace(path)  # the save
            saved = time.perf_counter()
            query = f"?q={urllib.parse.quote(word)}&topK=5"
            found = wait_until(functools.partial(_found, daemon, query, rel), 10, 0.01)
            keyword.append(None if found is None else time.perf_counter() - saved)
            stored = wait_until(functools.partial(_embedded, store, rel, word), 10, 0.01)
            dense.append(None if stored is None else time.perf_counter() - saved)
            if (i + 1 == GIVE_UP_AFTER and all(v is None for v in keyword + dense)) or time.monotonic() > until:
                break
    finally:
        store.close()
    return {"keyword": keyword, "dense": dense}


async def first_answer(daemon: Daemon, t0: float, question: str, deadline_s: float = 300) -> float | None:
    """Seconds from ``t0`` to the first ``/search`` for ``question`` answered with results (None at the deadline)."""
    auth = {"Authorization": f"Bearer {daemon.token}"}
    async with aiohttp.ClientSession() as session:
        while time.monotonic() - t0 < deadline_s:
            async with session.get(daemon.url + "/search", params={"q": question}, headers=auth) as resp:
                if resp.status == 200 and (await resp.json()).get("results"):
                    return time.monotonic() - t0
            await asyncio.sleep(0.05)
    return None


def note_name(vault: Path, seed: int) -> str:
    """The name of a random note of ``vault``: a question its index has an answer for."""
    return random.Random(seed).choice(sorted(vault.rglob("*.md"))).stem


def disk_mb(data_dir: Path) -> float:
    return sum(p.stat().st_size for p in data_dir.rglob("*") if p.is_file()) / MB


def measure_vault(vault: Path, data_dir: Path, questions: list[str], args: argparse.Namespace, deadline: float) -> dict:
    """Every figure of one vault (see the module docstring), the first index bounded by ``deadline`` (monotonic), the
    searches and saves after it by 70 % of ``--reserve-min`` more (the rest: stop and start again)."""
    ask = new_questions(questions)
    until = deadline + 0.7 * args.reserve_min * 60
    daemon = Daemon(vault, data_dir, args.clients)
    t0 = time.monotonic()
    try:
        daemon.start()
        log(f"{vault.name}: daemon up after {time.monotonic() - t0:.1f} s; first index")
        out = asyncio.run(first_index(daemon, t0, [ask() for _ in range(5000)], deadline, args, vault))
        log(f"{vault.name}: first index {'complete' if out['complete'] else 'NOT complete at the deadline'}")
        out["disk_mb"] = disk_mb(data_dir)
        time.sleep(args.settle_s)
        stats = _get(daemon.url + "/index/stats", daemon.token)
        out.update(notes=stats["notes"], chunks=stats["chunks"], vectors=stats["vectors"])
        out["idle"] = _memory(daemon.url, daemon.token, daemon.proc.pid)
        out.update(asyncio.run(searches(daemon, ask, args.searches_one, args.clients, args.searches, until)))
        out["searched"] = _memory(daemon.url, daemon.token, daemon.proc.pid)
        log(f"{vault.name}: {out['searches_done']} searches done; {args.edits} saves")
        out.update(save_latencies(daemon, vault, args.edits, args.seed, until))
        started = time.monotonic()
        daemon.stop()
        out["stop_s"] = time.monotonic() - started
        daemon = Daemon(vault, data_dir, args.clients)
        t0 = time.monotonic()
        daemon.start()
        out["startup_s"] = asyncio.run(first_answer(daemon, t0, note_name(vault, args.seed)))
    except BaseException:
        if daemon.proc is not None:
            log(daemon.log_tail())
        raise
    finally:
        daemon.stop()
    return out


def _ms(values: list[float | None], debounce_s: float = 0.0) -> str:
    got = [max(0.0, v - debounce_s) * 1000 for v in values if v is not None]
    missed = len(values) - len(got)
    text = f"{pct(got, 0.5):.0f} / {pct(got, 0.95):.0f}" if got else "n/a"
    return text + (f" ({missed} not in 10 s)" if missed else "")


def _p(values: list[float]) -> str:
    return f"{pct(values, 0.5):.0f} / {pct(values, 0.95):.0f}" if values else "n/a"


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _keyword_ready(f: dict) -> str:
    """Keyword-ready; when the text phase ended before the event stream opened (a small vault), ``< `` that time."""
    if f["keyword_ready_s"] is None and f["events_from_s"] is not None and f.get("embed_events"):
        return f"< {f['events_from_s']:.1f}"
    return _s(f["keyword_ready_s"])


def cells(f: dict, searches: int) -> dict[str, str]:
    """One vault's figures as table cells, by row key (``searches``: how many were asked for)."""
    debounce = DEFAULT_DEBOUNCE_MS / 1000
    pending = "" if f["complete"] else f" ({f['pending_notes']} notes pending)"
    return {
        "size": f"{f['notes']} / {f['chunks']} / {f['vectors']}",
        "keyword": _keyword_ready(f),
        "tier1": _s(f["tier1_s"]) if f["tier1_s"] is not None else f"> {_s(f['tier1_projected_s'])} projected",
        "embedded": _s(f["fully_embedded_s"]) if f["complete"] else f"> {_s(f['projected_s'])} projected",
        "tier1_rate": "n/a" if f["tier1_rate"] is None else f"{f['tier1_rate']:.0f}",
        "rate": "n/a" if f["embed_rate"] is None else f"{f['embed_rate']:.0f}",
        "during_kw": _ms(f["saves_during"]["keyword"], debounce),
        "during_dense": _ms(f["saves_during"]["dense"], debounce),
        "disk": f"{f['disk_mb']:.0f}",
        "peak": f"{f['peak_mb']:.0f}" + pending,
        "peak_tree": f"{f['peak_tree_mb']:.0f}",
        "idle": f"{f['idle']['rssMB']:.0f}" + pending,
        "searched": f"{f['searched']['rssMB']:.0f}"
        + ("" if f["searches_done"] == searches else f" (after {f['searches_done']})"),
        "one": _p(f["one_ms"]),
        "many": _p(f["many_ms"]),
        "during": _p(f["during_ms"]) + f" (n = {len(f['during_ms'])})",
        "save_kw": _ms(f["keyword"], debounce),
        "save_dense": _ms(f["dense"], debounce),
        "startup": _s(f["startup_s"]),
        "stop": _s(f["stop_s"]),
    }


#: Row key, label, target on the baseline, target at 40k, which value the ratio compares ("" none, "p95" the
#: second of "p50 / p95").
ROWS = [
    ("size", "notes / chunks / vectors", "", "", ""),
    ("keyword", "keyword-ready, first index (s from start)", "< 10", "< 90", "first"),
    ("during_kw", "save during the first index → keyword-searchable, p50 / p95 (ms)", "p95 < 1,000", "< 1,000", "p95"),
    ("during_dense", "save during the first index → vectors stored, p50 / p95 (ms)", "p95 < 3,000", "< 3,000", "p95"),
    ("tier1", "tier 1 (one vector per chunk) done, first index (s from start)", "< 180", "< 2,400", "first"),
    ("tier1_rate", "tier 1 embedding rate (passages/s)", "", "", "first"),
    ("embedded", "fully embedded (both tiers), first index (s from start)", "", "", "first"),
    ("rate", "tier 2 embedding rate (passages/s)", "", "", "first"),
    ("disk", "index size on disk (MB)", "", "", "first"),
    ("peak", "daemon RSS peak during the first index (MB)", "", "", "first"),
    ("peak_tree", "… with its worker processes, sampled every 0.5 s (MB)", "", "", "first"),
    ("idle", "daemon RSS idle after the first index (MB)", "≤ 350", "≤ 700", "first"),
    ("searched", "daemon RSS after {searches:,} searches (MB)", "≤ 400", "≤ 800", "first"),
    ("one", "/search new question, 1 client, idle, p50 / p95 (ms)", "p95 < 50", "p95 < 100", "p95"),
    ("many", "/search new question, 8 clients, p50 / p95 (ms)", "", "", "p95"),
    ("during", "/search new question, 1 client, while embedding, p50 / p95 (ms)", "p95 < 150", "p95 < 250", "p95"),
    ("save_kw", "save → keyword-searchable, after the debounce, p50 / p95 (ms)", "", "", "p95"),
    ("save_dense", "save → dense (vectors stored), after the debounce, p50 / p95 (ms)", "", "", "p95"),
    ("startup", "start-up on the existing index → first answer (s)", "< 2", "< 3", "first"),
    ("stop", "SIGINT → daemon exited (s)", "", "", "first"),
]


def ratio(a: str, b: str, which: str) -> str:
    if not which:
        return ""
    pick = (lambda s: s.split(" / ")[1] if " / " in s else s) if which == "p95" else (lambda s: s)
    try:
        x, y = (float(pick(v).lstrip("> ").split(" ")[0].replace(",", "")) for v in (a, b))
    except (ValueError, IndexError):
        return ""
    return f"{y / x:.1f}×" if x > 0 else ""


def print_table(base: dict, big: dict, names: tuple[str, str], searches: int, header: list[str]) -> None:
    a, b = cells(base, searches), cells(big, searches)
    rows = [("figure", "target hub / 40k", *names, "ratio")]
    rows += [
        (label.format(searches=searches), f"{t1} / {t2}" if t1 else "", a[k], b[k], ratio(a[k], b[k], w))
        for k, label, t1, t2, w in ROWS
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for line in header:
        print(line)
    print()
    for r in rows:
        print("  ".join(c.ljust(w) if i in (0, 1) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    for name, f in zip(names, (base, big)):
        print()
        print(_table(f"{name}: idle after the first index", f["idle"]))
        print(_table(f"{name}: after {searches:,} searches", f["searched"]))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--notes", type=int, default=40000)
    ap.add_argument("--baseline", type=Path, default=VAULTS / "obsidian-hub")
    ap.add_argument("--source", type=Path, action="append", help="a vault copied (default: obsidian-hub and -help)")
    ap.add_argument("--work", type=Path, help="folder for the vaults and indexes (default: a temp folder, removed)")
    ap.add_argument("--budget-min", type=float, default=90.0, help="the whole run's time budget (minutes)")
    ap.add_argument("--reserve-min", type=float, default=10.0, help="kept for the figures after the big first index")
    ap.add_argument("--eval", type=Path, action="append", help="dev sets for the questions (default dev, dev2)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--searches", type=int, default=1000, help="searches before the last RSS figure, warm-up included")
    ap.add_argument("--searches-one", type=int, default=200, help="of which from 1 client (the rest: --clients)")
    ap.add_argument("--every", type=float, default=1.0, help="seconds between two searches during the first index")
    ap.add_argument("--edits", type=int, default=30, help="saves after the first index, and at most during it")
    ap.add_argument("--save-every", type=float, default=5.0, help="seconds between two saves during the first index")
    ap.add_argument("--settle-s", type=float, default=20.0, help="seconds idle before the idle figure")
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--share", type=float, default=0.3, help="share of the vocabulary replaced in each copy")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bench_http.START_DEADLINE_S = 600  # a daemon checks a large index (quick_check) before it listens
    began = time.monotonic()
    end = began + args.budget_min * 60
    work = args.work or Path(tempfile.mkdtemp(prefix="cairn-bench-scale-"))
    evals = args.eval or [EVAL / "dev.jsonl", EVAL / "dev2.jsonl"]
    sources = args.source or [VAULTS / name for name in DEFAULT_SOURCES]
    try:
        big_vault = work / f"synthetic-{args.notes}"
        shutil.rmtree(big_vault, ignore_errors=True)
        made = generate(big_vault, args.notes, sources, seed=args.seed, share=args.share, log=log)
        base_vault = work / "baseline" / args.baseline.name
        shutil.rmtree(base_vault, ignore_errors=True)
        shutil.copytree(args.baseline, base_vault, symlinks=True)
        for name in ("data-baseline", "data-synthetic"):
            shutil.rmtree(work / name, ignore_errors=True)
        base_deadline = time.monotonic() + BASELINE_SHARE * (end - time.monotonic())
        base = measure_vault(
            base_vault, work / "data-baseline", dev_questions(evals, base_vault.name), args, base_deadline
        )
        big_deadline = end - args.reserve_min * 60
        big = measure_vault(big_vault, work / "data-synthetic", dev_questions(evals, None), args, big_deadline)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    header = [
        f"synthetic vault: {made.notes} notes in {made.copies} {'copy' if made.copies == 1 else 'copies'} (the last "
        f"may be partial) of {', '.join(s.name for s in sources)}, made in {made.seconds:.0f} s; words "
        f"replaced {made.words_replaced_share():.0%}, non-blank lines changed {made.lines_changed_share():.0%}, "
        f"links to files resolved in the source and rewritten {made.links_rewritten:,} of {made.links:,}",
        f"baseline: {args.baseline.name}; run took {(time.monotonic() - began) / 60:.0f} min of a "
        f"{args.budget_min:.0f} min budget; ratio = synthetic ÷ baseline",
    ]
    if not big["complete"]:
        header.append(
            "the synthetic vault's vectors were not all written by the deadline: 'fully embedded' is projected from "
            "the embedding rate, and the figures after it were measured while passages were still being embedded"
        )
    print_table(base, big, (args.baseline.name, f"{args.notes:,} notes"), args.searches, header)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

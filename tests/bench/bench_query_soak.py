#!/usr/bin/env python3
"""The daemon's memory under unique questions: ``cairn serve`` on VAULT, its index complete, then ``--queries``
(default 30,000) searches over HTTP (``/search``, ``--clients`` at once), every one a question not asked before, with
its resident set (RSS) before and after and every ``--every`` searches between. Every cache of the daemon has a
bound, so its memory levels off: the rise after the warm-up stays within :data:`TARGET_RISE_MB`. A memory figure,
not a timed one: other load on the machine does not change it.

The questions are made from the vault's own words (fixed seed), in three shapes: a phrase typed a few characters at
a time (search-as-you-type: each prefix is a new query), a question about a note's name, and a vault word with a
word never seen before (what a client probing the daemon sends). ``--warmup`` unique searches come first, so that
what a daemon loads once (the vectors, the in-memory BM25, the model's work buffers) is in the figure "before".

    PYTHONPATH=daemon python tests/bench/bench_query_soak.py /work/shared/vaults/obsidian-hub --data-dir .eval-cache

``--data-dir`` holds the index (reused when it is there; indexed first when it is not). Prints a table (RSS by
searches done, with the daemon's own breakdown: :mod:`cairn.memory`) and a JSON line of every figure. Exits 1 when
the rise exceeds the target.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_memory import REPO, _env, _get, _memory, _table, _wait_indexed, _wait_service  # noqa: E402

#: The largest rise of the daemon's resident set (MB) over the unique searches after the warm-up.
TARGET_RISE_MB = 64
_WORD = re.compile(r"[^\W\d_]{3,}")
_LETTERS = "bcdfghjklmnpqrstvwxz"


def unique_questions(vault: Path, n: int, seed: int = 29) -> list[str]:
    """``n`` distinct questions from ``vault``'s words and note names (module docstring), fixed seed."""
    words: set[str] = set()
    for path in sorted(vault.rglob("*.md")):
        words.update(w.lower() for w in _WORD.findall(path.read_text(encoding="utf-8", errors="replace")))
    vocabulary = sorted(words)
    names = sorted({p.stem for p in vault.rglob("*.md") if len(p.stem) > 3})
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        shape = rng.random()
        if shape < 0.5:  # typed: the phrase's prefixes, a few characters apart
            phrase = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(2, 4)))
            for end in range(3, len(phrase) + 1, rng.randint(2, 4)):
                out[phrase[:end].strip()] = None
        elif shape < 0.75:
            template = rng.choice(("what is {}", "how do I use {}", "{} settings", "where is {} kept"))
            out[template.format(rng.choice(names))] = None
        else:
            nonce = "".join(rng.choice(_LETTERS) for _ in range(rng.randint(5, 9)))
            out[f"{rng.choice(vocabulary)} {nonce}"] = None
    return list(out)[:n]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit("no VmRSS for the daemon")


def _search_all(url: str, token: str, questions: list[str], clients: int) -> int:
    """Run ``/search`` for each question, ``clients`` at a time; the number that did not answer 200."""
    failed = [0]
    lock = threading.Lock()
    it = iter(questions)

    def client() -> None:
        while True:
            with lock:
                q = next(it, None)
            if q is None:
                return
            try:
                _get(url + "/search", token, "?q=" + urllib.parse.quote(q))
            except OSError:
                with lock:
                    failed[0] += 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failed[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vault", type=Path)
    ap.add_argument("--data-dir", type=Path, help="index folder (default: a temporary one, indexed first)")
    ap.add_argument("--queries", type=int, default=30_000)
    ap.add_argument("--warmup", type=int, default=1_000)
    ap.add_argument("--every", type=int, default=5_000, help="searches between two RSS samples")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--code", type=Path, default=REPO / "daemon", help="the daemon's package folder (another version)")
    args = ap.parse_args(argv)
    vault = args.vault.resolve()
    questions = unique_questions(vault, args.warmup + args.queries)
    warmup, soak = questions[: args.warmup], questions[args.warmup :]
    with tempfile.TemporaryDirectory(prefix="cairn-soak-") as tmp:
        home = Path(tmp)
        data_dir = (args.data_dir or home / "data").resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        env = _env(data_dir, home, args.code.resolve())
        cmd = [sys.executable, "-m", "cairn", "serve", "--vault", str(vault), "--port", "0", "--no-tray"]
        with open(home / "serve.log", "wb") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        try:
            url = _wait_service(data_dir, proc, 300)
            token = subprocess.run(
                [sys.executable, "-m", "cairn", "token", "--vault", str(vault)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            stats = _wait_indexed(url, token, 7200)
            idle = _rss_mb(proc.pid)
            failed = _search_all(url, token, warmup, args.clients)
            before = _memory(url, token, proc.pid)
            samples = [(0, _rss_mb(proc.pid))]
            started = time.monotonic()
            for start in range(0, len(soak), args.every):
                failed += _search_all(url, token, soak[start : start + args.every], args.clients)
                samples.append((min(start + args.every, len(soak)), _rss_mb(proc.pid)))
            minutes = (time.monotonic() - started) / 60
            after = _memory(url, token, proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    rise = samples[-1][1] - samples[0][1]
    print(
        f"vault {vault.name}: {stats['notes']} notes; {len(soak):,} unique searches after {len(warmup):,} to warm up, "
        f"{args.clients} clients over HTTP, {minutes:.0f} min; {failed} not answered 200\n"
    )
    print(f"{'figure':<58} {'target':>10} {'value':>8}")
    print(f"{'daemon RSS idle, index complete (MB)':<58} {'':>10} {idle:>8.1f}")
    print(f"{f'daemon RSS after the {len(warmup):,} warm-up searches: before (MB)':<58} {'':>10} {samples[0][1]:>8.1f}")
    for done, mb in samples[1:]:
        print(f"{f'  after {done:,} more unique searches (MB)':<58} {'':>10} {mb:>8.1f}")
    print(f"{'rise over the unique searches: after - before (MB)':<58} {f'<= {TARGET_RISE_MB}':>10} {rise:>8.1f}")
    print(f"{'  per unique search (kB)':<58} {'':>10} {rise * 1024 / max(1, len(soak)):>8.2f}")
    print()
    print(_table("before", before))
    print(_table(f"after {len(soak):,} unique searches", after))
    figures = {"vault": vault.name, "idleMB": idle, "samples": samples, "riseMB": rise, "failed": failed}
    print(json.dumps({**figures, "before": before, "after": after}))
    return 0 if rise <= TARGET_RISE_MB and not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())

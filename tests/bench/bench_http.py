#!/usr/bin/env python3
"""HTTP API benchmark: the real daemon (``cairn serve``, no LLM) on a real vault under concurrent clients.
Figures, not tests.

The daemon runs as a subprocess on 127.0.0.1 (port 0) over VAULT (default obsidian-hub) with the index in
DATA_DIR (default ``.eval-cache/``, the folder ``make eval`` keeps up to date — so nothing is re-embedded
when it is current; the daemon's start-up run brings it up to date otherwise and the bench waits for it).
Its config folder is a temp dir (own token, ``mcp_http = false``, no ``[llm]``: answers are extractive,
``grounded: false``; ``max_ask_streams`` = the number of clients, so no ``/ask`` is refused with 503).

Then QUERIES requests from CLIENTS concurrent aiohttp clients (one session each), the questions being the
dev set's questions for this vault plus ``bench_index.QUESTIONS``, cycled:

- ``GET /search``: request sent → JSON body read, p50 / p95 (target p95 < 50 ms);
- ``POST /ask``: request sent → the ``sources`` event read, p50 / p95 (target p95 < 150 ms), and → ``done``.

Latency is wall time seen by the client, so it includes queueing behind the other clients' requests.
The questions repeat (QUERIES cycles through them) and the daemon keeps ranked results while the index is
unchanged, so most requests are answered from memory; the rows "questions not asked before" give the latency of
the first time each question reached that route (after the WARM_UP questions), with nothing cached for it but
the vectors the index holds.

Usage: bench_http.py [VAULT] [--queries 200] [--clients 8] [--data-dir DIR] [--eval DEV.jsonl] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))

from bench_index import QUESTIONS  # noqa: E402  (the index bench's latency questions)

from cairn.config import load_config  # noqa: E402
from cairn.secrets import get_or_create_token  # noqa: E402

START_DEADLINE_S = 120
INDEX_DEADLINE_S = 1800
STOP_DEADLINE_S = 30
SEARCH_TARGET_MS, ASK_TARGET_MS = 50.0, 150.0
#: Questions sent once on each route before measuring (model sessions, page cache, thread pools).
WARM_UP = 8


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def questions_for(vault: Path, devset: Path) -> list[str]:
    """The dev set's questions for ``vault`` (matched by folder name), then the index bench's, without repeats."""
    rows = [json.loads(line) for line in devset.read_text(encoding="utf-8").splitlines() if line.strip()]
    qs = [r["question"] for r in rows if r.get("vault") == vault.name] + list(QUESTIONS)
    return list(dict.fromkeys(qs))


class Daemon:
    """``cairn serve`` as a subprocess with its own config/log folders; ``url`` and ``token`` once started."""

    def __init__(self, vault: Path, data_dir: Path, clients: int, embed_threads: int | None = None) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="cairn-bench-http-"))
        (self.home / "config").mkdir()
        extra = f"embed_threads = {embed_threads}\n" if embed_threads else ""
        (self.home / "config" / "config.toml").write_text(
            f"mcp_http = false\nmax_ask_streams = {clients}\n{extra}", encoding="utf-8"
        )
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
        self.env.update(
            {
                "CAIRN_CONFIG_DIR": str(self.home / "config"),
                "CAIRN_DATA_DIR": str(data_dir),
                "CAIRN_LOG_DIR": str(self.home / "log"),
                "CAIRN_KEYRING": "file",
                "CAIRN_PORT": "0",
            }
        )
        self.config = load_config({"vault": str(vault)}, env=self.env)
        os.environ["CAIRN_KEYRING"] = "file"  # the token file the daemon reads (never the user's keyring)
        self.token = get_or_create_token(self.config)
        self.vault = vault
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> None:
        exe = Path(sys.executable).parent / "cairn"
        self.stderr = open(self.home / "serve.stderr", "wb")
        self.proc = subprocess.Popen(
            [str(exe), "serve", "--vault", str(self.vault), "--no-tray"],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
        )
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"cairn serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                info = json.loads(self.config.service_file.read_text(encoding="utf-8"))
                if info.get("pid") == self.proc.pid:
                    self.url = info["url"]
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise SystemExit(f"cairn serve did not write {self.config.service_file} in {START_DEADLINE_S} s")

    def log_tail(self) -> str:
        return (self.home / "serve.stderr").read_text(encoding="utf-8", errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.home, ignore_errors=True)


async def wait_indexed(session: aiohttp.ClientSession, url: str, auth: dict[str, str]) -> dict:
    """Poll ``/index/stats`` until the start-up run is over (nothing indexing, nothing pending)."""
    deadline = time.monotonic() + INDEX_DEADLINE_S
    last = 0.0
    while time.monotonic() < deadline:
        async with session.get(url + "/index/stats", headers=auth) as resp:
            stats = await resp.json()
        if not stats.get("indexing") and stats.get("pending") == 0:
            return stats
        if time.monotonic() - last > 15:
            print(
                f"  waiting for the start-up index: {stats.get('notes')} notes, {stats.get('pending')} pending",
                file=sys.stderr,
            )
            last = time.monotonic()
        await asyncio.sleep(0.5)
    raise SystemExit(f"the index was not ready within {INDEX_DEADLINE_S} s")


async def one_search(session: aiohttp.ClientSession, url: str, auth: dict[str, str], q: str) -> float:
    t = time.perf_counter()
    async with session.get(url + "/search", params={"q": q}, headers=auth) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"/search {resp.status}: {body[:200]!r}")
    return (time.perf_counter() - t) * 1000


async def one_ask(session: aiohttp.ClientSession, url: str, auth: dict[str, str], q: str) -> tuple[float, float, dict]:
    """(ms to the ``sources`` event, ms to ``done``, the done payload)."""
    t = time.perf_counter()
    to_sources = None
    event = None
    async with session.post(url + "/ask", json={"question": q}, headers=auth) as resp:
        if resp.status != 200:
            raise RuntimeError(f"/ask {resp.status}: {(await resp.read())[:200]!r}")
        while True:
            line = await resp.content.readline()
            if not line:
                raise RuntimeError("/ask stream ended without a done event")
            line = line.rstrip(b"\r\n")
            if line.startswith(b"event:"):
                event = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                if event == "sources" and to_sources is None:
                    to_sources = (time.perf_counter() - t) * 1000
                elif event == "done":
                    done = json.loads(line[5:])
                    if to_sources is None:
                        raise RuntimeError("/ask sent done before sources")
                    return to_sources, (time.perf_counter() - t) * 1000, done


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds used so far by process ``pid`` (all its threads), from /proc; None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


async def load(
    url: str, auth: dict[str, str], queries: list[str], clients: int, fn, until: float | None = None
) -> tuple[list, float]:
    """Run ``fn(session, url, auth, q)`` for every query from ``clients`` concurrent sessions (no new one after
    ``until``, a ``time.monotonic()`` value, when given); ([(q, result)] in completion order, seconds)."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for q in queries:
        queue.put_nowait(q)
    results: list = []

    async def client() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            while until is None or time.monotonic() < until:
                try:
                    q = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                results.append((q, await fn(session, url, auth, q)))

    t = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return results, time.perf_counter() - t


async def bench(
    daemon: Daemon, questions: list[str], n: int, clients: int, rounds: int, routes: set[str]
) -> list[tuple[str, str, str]]:
    auth = {"Authorization": f"Bearer {daemon.token}"}
    url = daemon.url
    async with aiohttp.ClientSession() as session:
        stats = await wait_indexed(session, url, auth)
        for q in questions[:WARM_UP]:  # warm-up: model sessions, page cache, thread pools
            await one_search(session, url, auth, q)
            await one_ask(session, url, auth, q)
    batch = list(itertools.islice(itertools.cycle(questions), n))
    seen = {"search": set(questions[:WARM_UP]), "ask": set(questions[:WARM_UP])}

    def first_asked(route: str, results: list) -> list:
        """The results of questions this daemon had not been asked before on ``route`` (nothing cached for them)."""
        out = []
        for q, r in results:
            if q not in seen[route]:
                seen[route].add(q)
                out.append(r)
        return out

    rows = [
        (
            f"{daemon.vault.name}: notes / chunks / vectors",
            f"{stats['notes']} / {stats['chunks']} / {stats['vectors']}",
            "",
        ),
        ("queries / concurrent clients / distinct questions", f"{n} / {clients} / {len(questions)}", ""),
    ]

    def measured(
        label: str,
        route: str,
        latencies: list[float],
        new: list[float],
        target_ms: float,
        wall: float,
        cpu0: float | None,
        cpu: float | None,
        tag: str,
        middle: list[tuple[str, str, str]],
    ) -> list[tuple[str, str, str]]:
        """The rows of one route: p50 / p95 against the target, the first-time questions, ``middle``,
        throughput and the daemon's CPU per request."""
        return [
            (
                f"{label} p50 / p95 (ms){tag}",
                f"{pct(latencies, 0.5):.0f} / {pct(latencies, 0.95):.0f}",
                f"p95 < {target_ms:.0f}",
            ),
            (
                f"{label} p50 / max (ms), questions not asked before (n = {len(new)}){tag}",
                f"{pct(new, 0.5):.0f} / {max(new):.0f}" if new else "n/a",
                "",
            ),
            *middle,
            (f"{route} throughput (req/s){tag}", f"{n / wall:.1f}", ""),
            (
                f"{route} daemon CPU per request (ms, all threads){tag}",
                f"{(cpu - cpu0) * 1000 / n:.0f}" if cpu0 is not None and cpu is not None else "n/a",
                "",
            ),
        ]

    for r in range(1, rounds + 1):
        tag = f" (round {r})" if rounds > 1 else ""
        if "search" in routes:
            cpu0 = cpu_seconds(daemon.proc.pid)
            results, wall = await load(url, auth, batch, clients, one_search)
            cpu = cpu_seconds(daemon.proc.pid)
            rows += measured(
                "/search",
                "/search",
                [r for _, r in results],
                first_asked("search", results),
                SEARCH_TARGET_MS,
                wall,
                cpu0,
                cpu,
                tag,
                [],
            )
        if "ask" in routes:
            cpu0 = cpu_seconds(daemon.proc.pid)
            results, wall = await load(url, auth, batch, clients, one_ask)
            cpu = cpu_seconds(daemon.proc.pid)
            asks = [r for _, r in results]
            to_done = [a[1] for a in asks]
            grounded = sum(1 for a in asks if a[2].get("grounded"))
            not_found = sum(1 for a in asks if a[2].get("notFound"))
            rows += measured(
                "/ask → sources",
                "/ask",
                [a[0] for a in asks],
                [a[0] for a in first_asked("ask", results)],
                ASK_TARGET_MS,
                wall,
                cpu0,
                cpu,
                tag,
                [
                    (f"/ask → done p50 / p95 (ms){tag}", f"{pct(to_done, 0.5):.0f} / {pct(to_done, 0.95):.0f}", ""),
                    (
                        f"/ask answers: grounded / not found / total{tag}",
                        f"{grounded} / {not_found} / {len(asks)}",
                        "0 grounded (no LLM)",
                    ),
                ],
            )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vault", type=Path, nargs="?", default=REPO.parent / "shared" / "vaults" / "obsidian-hub")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument(
        "--data-dir",
        type=Path,
        default=REPO / ".eval-cache",
        help="where the index lives (default: the eval cache, kept between runs)",
    )
    ap.add_argument("--eval", type=Path, default=REPO.parent / "shared" / "eval" / "dev.jsonl")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the measurement (a shared machine is noisy)")
    ap.add_argument("--routes", default="search,ask", help="which routes to measure (default: search,ask)")
    ap.add_argument("--embed-threads", type=int, help="the daemon's embed_threads (default: its own, all cores)")
    args = ap.parse_args()
    vault = args.vault.resolve()
    questions = questions_for(vault, args.eval)
    daemon = Daemon(vault, args.data_dir.resolve(), args.clients, args.embed_threads)
    try:
        daemon.start()
        rows = asyncio.run(
            bench(
                daemon, questions, args.queries, args.clients, args.rounds, {r.strip() for r in args.routes.split(",")}
            )
        )
    except BaseException:
        if daemon.proc is not None:
            print(daemon.log_tail(), file=sys.stderr)
        raise
    finally:
        daemon.stop()
    load1, _, _ = os.getloadavg()
    rows.append(("machine: cores / load average (1 min) at the end", f"{os.cpu_count()} / {load1:.1f}", ""))
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'value':>17}  target")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>17}  {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The daemon's resident memory by part: ``cairn serve`` on a vault, idle once its index is complete, then after
searches, with the breakdown of ``/index/stats`` (:mod:`cairn.memory`) printed as a table.

    PYTHONPATH=daemon python tests/bench/bench_memory.py /work/shared/vaults/obsidian-help \\
        --data-dir /tmp/cairn-mem --questions /work/shared/eval/dev2.jsonl --searches 200

``--data-dir`` holds the index (reused when it is there: an index copied from an eval data folder starts the
daemon on it without indexing; when it is not, the daemon's peak includes its first index). When the question files
hold fewer questions for the vault than ``--searches``, the rest are new questions made from note names (``what is
<name>``, ``how do I use <name>``; fixed seed), so that every search is a new question. Prints one table per moment
(idle after the index, after the searches) and a JSON line of every figure. Not a test: the figures depend on the
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _get(url: str, token: str, params: str = "") -> dict:
    request = urllib.request.Request(url + params, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=120) as resp:
        return json.loads(resp.read())


def _env(data_dir: Path, home: Path, code: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update(
        CAIRN_DATA_DIR=str(data_dir),
        CAIRN_CONFIG_DIR=str(home / "config"),
        CAIRN_LOG_DIR=str(home / "log"),
        CAIRN_KEYRING="file",
        PYTHONPATH=str(code),
    )
    return env


def _wait_service(data_dir: Path, proc: subprocess.Popen, deadline_s: float) -> str:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"cairn serve exited with {proc.returncode}")
        try:
            info = json.loads((data_dir / "service.json").read_text(encoding="utf-8"))
            if info.get("pid") == proc.pid:
                return str(info["url"])
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    raise SystemExit("cairn serve did not start in time")


def _wait_indexed(url: str, token: str, deadline_s: float) -> dict:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        stats = _get(url + "/index/stats", token)
        if not stats["indexing"] and stats["pending"] == 0 and stats["notes"]:
            return stats
        time.sleep(1.0)
    raise SystemExit("the index did not complete in time")


def _memory(url: str, token: str, pid: int) -> dict:
    """The daemon's breakdown, or (a version without one) its resident set from the system alone; with the
    system's split of the resident set (``proc``: anonymous memory, mapped files such as the libraries' code,
    shared memory; MB)."""
    memory = _get(url + "/index/stats", token).get("memory")
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines()
    kb = {line.split(":")[0]: int(line.split()[1]) for line in status if line.startswith(("VmRSS", "VmHWM", "Rss"))}
    if not memory:
        memory = {"rssMB": round(kb["VmRSS"] / 1024, 1), "peakMB": round(kb["VmHWM"] / 1024, 1), "parts": {}}
        memory["workers"] = {}
    memory["proc"] = {
        key[3:].lower(): round(kb[key] / 1024, 1) for key in ("RssAnon", "RssFile", "RssShmem") if key in kb
    }
    return memory


def _table(title: str, memory: dict) -> str:
    lines = [f"{title}: resident {memory['rssMB']} MB (peak {memory['peakMB']} MB)", f"  {'part':<10} {'MB':>8}"]
    lines += [f"  {name:<10} {mb:>8}" for name, mb in memory["parts"].items()]
    lines += ["  resident set as the system splits it: " + ", ".join(f"{k} {v} MB" for k, v in memory["proc"].items())]
    lines += [
        f"  {name:<10} {mb if mb is not None else '-':>8}  (separate process)" for name, mb in memory["workers"].items()
    ]
    return "\n".join(lines)


def _name_questions(vault: Path, n: int, seed: int = 17) -> list[str]:
    """``n`` questions (at most two per note) made from the names of the vault's notes, fixed seed."""
    names = sorted({p.stem for p in vault.rglob("*.md") if len(p.stem) > 3})
    picked = random.Random(seed).sample(names, min(len(names), (n + 1) // 2))
    return [q for name in picked for q in (f"what is {name}", f"how do I use {name}")][:n]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vault", type=Path)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--questions", type=Path, action="append", default=[])
    ap.add_argument("--searches", type=int, default=200)
    ap.add_argument("--settle-s", type=float, default=20.0, help="seconds idle before the idle figure")
    ap.add_argument("--code", type=Path, default=REPO / "daemon", help="the daemon's package folder (another version)")
    args = ap.parse_args(argv)
    vault = args.vault.resolve()
    questions = [
        q["question"]
        for path in args.questions
        for q in map(json.loads, path.read_text(encoding="utf-8").splitlines())
        if q.get("vault") == vault.name
    ]
    if len(questions) < args.searches:
        seen = set(questions)
        questions += [q for q in _name_questions(vault, args.searches) if q not in seen]
    with tempfile.TemporaryDirectory(prefix="cairn-mem-") as tmp:
        home = Path(tmp)
        env = _env(args.data_dir, home, args.code)
        cmd = [sys.executable, "-m", "cairn", "serve", "--vault", str(vault), "--port", "0", "--no-tray"]
        with open(home / "serve.log", "wb") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        try:
            url = _wait_service(args.data_dir, proc, 300)
            token = subprocess.run(
                [sys.executable, "-m", "cairn", "token", "--vault", str(vault)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            _wait_indexed(url, token, 7200)
            time.sleep(args.settle_s)
            idle = _memory(url, token, proc.pid)
            print(_table("idle after the index", idle))
            for i in range(min(args.searches, len(questions)) if questions else 0):
                q = urllib.parse.quote(questions[i % len(questions)])
                _get(url + "/search", token, f"?q={q}&topK=8")
            searched = _memory(url, token, proc.pid)
            print(_table(f"after {min(args.searches, len(questions))} searches", searched))
            print(json.dumps({"vault": vault.name, "idle": idle, "afterSearches": searched}))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

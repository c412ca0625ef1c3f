"""Crash safety of ``cairn serve`` as a real subprocess: kill -9 during indexing, a damaged database,
a second instance, changes made while stopped, no worker process outliving a killed daemon.

The kill test runs ``CAIRN_KILL_CYCLES`` cycles (default 20; ``make soak`` runs 1,000): change some
notes of a small vault (enough of them that the text phase parses in worker processes), start the daemon,
wait until it is serving (index opened and checked, indexing started), let it run a random 0–0.8 s,
``kill -9`` it, then check the database file: ``PRAGMA integrity_check`` = ok, the FTS5 integrity check
passes, and the store's invariants hold; and every process the daemon started (its process group: each
daemon is started in a session of its own) is gone within :data:`ORPHAN_DEADLINE_S`. At the end one clean
run must bring the reconcile diff to zero, without any quarantine. It prints the cycles, integrity
failures, reconcile mismatches and orphaned processes.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from cairn.store import Store
from support import pdfgen
from support.cairns import make_config, open_cairn
from support.cli import cairn_env, cairn_executable
from support.spawned import (
    INDEX_DEADLINE_S,
    ORPHAN_DEADLINE_S,
    START_DEADLINE_S,
    get_json,
    group_processes,
    kill_9,
    request_json,
    serving,
    spawn,
    token_for,
    wait_indexed,
    wait_serving,
)
from support.vaults import HELP_VAULT
from support.waits import wait_until

pytestmark = pytest.mark.e2e  # `cairn serve` subprocesses killed and restarted

KILL_CYCLES = int(os.environ.get("CAIRN_KILL_CYCLES", "20"))
#: Seconds after which no new kill cycle starts (unset: no limit): a soak on a shared machine runs the cycles
#: that fit and says how many ran.
KILL_BUDGET_S = float(os.environ.get("CAIRN_KILL_BUDGET_S", "inf"))
EMPTY = {"added": [], "changed": [], "deleted": []}
#: Small notes rewritten in every kill cycle: with the cycle's other edits, more than the text phase's
#: PARALLEL_MIN_NOTES, so every start parses in worker processes (the processes a kill could orphan).
STUB_NOTES = 110


def db_file(home: Path, vault: Path) -> Path:
    return make_config(vault.resolve(), home / "data").db_path


def check_database(db: Path) -> list[str]:
    store = Store(db)
    try:
        return store.integrity_problems(full=True)
    finally:
        store.close()


def reconcile_diff(home: Path, vault: Path, embedder) -> dict:
    cairn = open_cairn(vault.resolve(), home / "data", embedder)
    try:
        return cairn.indexer.reconcile_diff()
    finally:
        cairn.close()


def index_finished(home: Path, vault: Path, embedder) -> bool:
    """Text in line with the disk and no chunk waiting for its vectors."""
    cairn = open_cairn(vault.resolve(), home / "data", embedder)
    try:
        return cairn.indexer.reconcile_diff() == EMPTY and cairn.store.count_pending() == 0
    finally:
        cairn.close()


@pytest.fixture
def small_vault(tmp_path) -> Path:
    """One folder of the help vault (11 notes)."""
    vault = tmp_path / "vault"
    (vault / "User interface").mkdir(parents=True)
    for src in (HELP_VAULT / "User interface").glob("*.md"):
        shutil.copy2(src, vault / "User interface" / src.name)
    return vault


def mutate(vault: Path, rng: random.Random, cycle: int) -> None:
    """Some edits a user or a sync would make: new text (needs embedding), a new note, a rename, a delete, and
    a new line in each stub note (see :func:`write_stubs`). The vault stays about the same size however many
    cycles run (``make soak``): an edit replaces the note's previous edit, and only the last three cycle notes
    are kept."""
    write_stubs(vault, cycle)
    notes = sorted(p for p in vault.rglob("*.md") if p.parent.name != "Stubs")
    for p in rng.sample(notes, min(8, len(notes))):
        text = p.read_text(encoding="utf-8").split("\n\nEdit ")[0]
        for k in range(40):  # enough new text that embedding it takes a second or more
            text += (
                f"\n\nEdit {cycle}.{k}: the {rng.choice(['amber', 'cobalt', 'saffron'])} settings "
                f"now include option {rng.randrange(10**6)} for {rng.choice(['tabs', 'panes', 'themes'])}.\n"
            )
        p.write_text(text, encoding="utf-8")
    (vault / f"Cycle {cycle}.md").write_text(
        f"# Cycle {cycle}\n\nNotes written in cycle {cycle} about {rng.choice(['tabs', 'panes', 'hotkeys'])}.\n",
        encoding="utf-8",
    )
    victim = rng.choice(notes)
    if rng.random() < 0.5:
        victim.rename(victim.with_name(f"Renamed {cycle} {victim.name}"))
    elif len(notes) > 8:
        victim.unlink()
    (vault / f"Cycle {cycle - 3}.md").unlink(missing_ok=True)


def write_stubs(vault: Path, cycle: int) -> None:
    """:data:`STUB_NOTES` one-line notes in ``Stubs/``, their text new in each ``cycle``."""
    stubs = vault / "Stubs"
    stubs.mkdir(exist_ok=True)
    for n in range(STUB_NOTES):
        (stubs / f"Stub {n}.md").write_text(f"Stub {n} was last written in cycle {cycle}.\n", encoding="utf-8")


# -- kill -9 -----------------------------------------------------------------------------------


# Each cycle starts a daemon (model, HTTP and MCP servers): ~3 s on a quiet 2-core machine, ~40 s measured with
# the machine shared (load average 12-16), so the time allowed grows with the cycle count, plus the final index
# (make soak: no limit).
@pytest.mark.soak
@pytest.mark.timeout(INDEX_DEADLINE_S + 60 * KILL_CYCLES)
@pytest.mark.shared_data("vaults/obsidian-help")
def test_kill_9_at_random_points_during_indexing_never_leaves_a_damaged_index(small_vault, tmp_path, embedder):
    home = tmp_path / "home"
    home.mkdir()
    rng = random.Random(int(os.environ.get("CAIRN_KILL_SEED", "4")))
    db = db_file(home, small_vault)
    write_stubs(small_vault, 0)
    unfinished = cycles = 0
    damaged: list[str] = []
    orphans: list[str] = []
    started = time.monotonic()
    for cycle in range(KILL_CYCLES):
        if time.monotonic() - started > KILL_BUDGET_S:
            break
        cycles += 1
        if cycle:
            mutate(small_vault, rng, cycle)
        proc = spawn(home, small_vault)
        try:
            wait_serving(home, proc)
            time.sleep(rng.uniform(0.0, 0.8))  # the random point of the kill (not a wait for a condition)
        finally:
            orphans += [f"cycle {cycle}: {pid} {cmd}" for pid, cmd in kill_9(proc).items()]
        problems = check_database(db)
        damaged += [f"cycle {cycle}: {problem}" for problem in problems]
        if problems:
            break  # the next cycles would start from a damaged file
        if not index_finished(home, small_vault, embedder):  # killed in the text or the vector phase
            unfinished += 1
        if cycles % 25 == 0:
            print(f"{cycles} cycles, {time.monotonic() - started:.0f} s, {len(orphans)} orphans", flush=True)
    per_cycle_s = (time.monotonic() - started) / max(1, cycles)
    with serving(home, small_vault) as (proc, url):
        stats = wait_indexed(url, token_for(home, small_vault), proc)
        assert stats["recovered"] is None
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    damaged += [f"after the clean run: {problem}" for problem in check_database(db)]
    diff = reconcile_diff(home, small_vault, embedder)
    mismatches = sum(len(paths) for paths in diff.values())
    print(
        f"\n{cycles} kill -9 cycles ({per_cycle_s:.1f} s each), {unfinished} interrupted indexing; integrity "
        f"failures {len(damaged)}, reconcile mismatches {mismatches}, orphaned processes {len(orphans)}"
    )
    assert damaged == []
    assert orphans == []
    assert diff == EMPTY
    assert not list(db.parent.glob("*.corrupt-*"))  # no cycle needed a quarantine
    # The kills must have landed during indexing, else this tested nothing.
    assert unfinished >= cycles // 5, f"only {unfinished} of {cycles} kills interrupted indexing"


@pytest.mark.shared_data("vaults/obsidian-help")
def test_kill_9_of_the_daemon_while_it_parses_in_workers_leaves_no_process_of_its(tmp_path):
    """The text phase's parse workers (and multiprocessing's resource tracker) end with the daemon."""
    home = tmp_path / "home"
    home.mkdir()
    vault = tmp_path / "vault"
    shutil.copytree(HELP_VAULT, vault, ignore=shutil.ignore_patterns(".*"))
    write_stubs(vault, 0)
    proc = spawn(home, vault)
    try:
        workers = wait_until(
            "the parse workers to start",
            lambda: [cmd for pid, cmd in group_processes(proc.pid).items() if "multiprocessing" in cmd],
            START_DEADLINE_S,
            proc=proc,
            log=home / "serve.stderr",
            interval_s=0.01,
        )
    finally:
        left = kill_9(proc)
    assert workers
    assert left == {}, f"still running {ORPHAN_DEADLINE_S} s after the daemon was killed: {left}"


def test_kill_9_of_the_daemon_leaves_no_pdf_reader_process(tmp_path):
    """The PDF worker (started for the vault's PDF attachment and kept for the next) ends with the daemon."""
    home = tmp_path / "home"
    home.mkdir()
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Reading.md").write_text("# Reading\n\nThe field guide: ![[Guide.pdf]]\n", encoding="utf-8")
    pdfgen.text_pdf(vault / "Guide.pdf", pdfgen.numbered_pages(2), title="Cairn field guide")
    proc = spawn(home, vault)
    try:
        readers = wait_until(
            "the PDF reader to start",
            lambda: [cmd for pid, cmd in group_processes(proc.pid).items() if "pdf_worker" in cmd],
            START_DEADLINE_S + INDEX_DEADLINE_S,
            proc=proc,
            log=home / "serve.stderr",
            interval_s=0.02,
        )
    finally:
        left = kill_9(proc)
    assert readers
    assert left == {}, f"still running {ORPHAN_DEADLINE_S} s after the daemon was killed: {left}"


# -- a damaged database ------------------------------------------------------------------------


@pytest.mark.shared_data("vaults/obsidian-help")
def test_a_damaged_database_is_moved_aside_rebuilt_and_reported(small_vault, tmp_path, embedder):
    home = tmp_path / "home"
    home.mkdir()
    cairn = open_cairn(small_vault.resolve(), home / "data", embedder)
    config = cairn.config
    cairn.indexing.index()
    notes = cairn.indexing.stats()["notes"]
    cairn.close()
    db = config.db_path
    size = db.stat().st_size
    with open(db, "r+b") as fh:  # overwrite pages in the middle of the file
        fh.seek(size // 3)
        fh.write(os.urandom(8192))
    damaged = db.read_bytes()
    with serving(home, small_vault) as (proc, url):
        stats = wait_indexed(url, token_for(home, small_vault), proc, notes=notes)
        rec = stats["recovered"]
        assert rec and rec["reason"] and isinstance(rec["at"], (int, float))
        moved = Path(rec["movedTo"])
        assert moved.parent == db.parent and moved.name.startswith(db.name + ".corrupt-")
        assert moved.read_bytes() == damaged  # kept as it was, not deleted
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    assert "damaged" in (home / "serve.stderr").read_text()
    assert check_database(db) == []
    assert reconcile_diff(home, small_vault, embedder) == EMPTY


# -- the index file deleted or replaced while serving ------------------------------------------


def tiny_vault(root: Path, word: str) -> Path:
    """Three short notes; ``Topic.md`` holds ``word`` (a word no other test vault holds)."""
    root.mkdir(parents=True)
    (root / "Topic.md").write_text(f"# Topic\n\nThe {word} is kept in the lower cabinet.\n", encoding="utf-8")
    (root / "Other.md").write_text("# Other\n\nTabs, panes and themes.\n", encoding="utf-8")
    (root / "Third.md").write_text("# Third\n\nHotkeys and the command palette.\n", encoding="utf-8")
    return root


def request(url: str, path: str, token: str | None) -> tuple[int, dict]:
    """(HTTP status, JSON body) of one GET; no assertion on the status."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


READS = ["/search?q=cabinet", "/index/stats", "/notes/Topic.md", "/tags", "/search?q=lighthouse+keeper"]


def assert_refused_clearly(url: str, token: str) -> None:
    """Every read is a 503 ``index_file_changed`` saying what happened (never a 500, never another vault's
    notes), and ``/health`` is degraded with that reason. The store compares the file's identity at most every
    ``Store.IDENTITY_CHECK_S``, so the reads start once a read has seen the change (reads of the old file
    until then are of its intact data)."""
    deadline = time.monotonic() + 10
    while request(url, READS[0], token)[0] == 200:
        assert time.monotonic() < deadline, "the changed index file was not noticed within 10 s"
    for n in range(30):
        status, body = request(url, READS[n % len(READS)], token)
        assert status == 503 and body["error"]["code"] == "index_file_changed", (status, body)
        assert "Restart Cairn" in body["error"]["message"]
    status, body = request(url, "/health", None)
    assert status == 200 and body["status"] == "degraded", body
    assert body["store"] == {"ok": False, "reason": "index_file_changed"}


def test_an_index_file_deleted_while_serving_is_refused_then_rebuilt_at_restart(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    vault = tiny_vault(tmp_path / "vault", "quillwort")
    db = db_file(home, vault)
    with serving(home, vault) as (proc, url):
        token = token_for(home, vault)
        wait_indexed(url, token, proc, notes=3)
        db.unlink()
        (vault / "Added later.md").write_text("The lighthouse keeper's log.\n", encoding="utf-8")
        assert_refused_clearly(url, token)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    first_log = (home / "serve.stderr").read_text()  # the restart below writes the file anew
    with serving(home, vault) as (proc, url):
        wait_indexed(url, token, proc, notes=4)
        assert [r["filePath"] for r in search(url, token, "lighthouse keeper log")][:1] == ["Added later.md"]
    assert "was deleted while Cairn was using it" in first_log


def test_an_index_file_replaced_by_another_vaults_is_never_served(tmp_path, embedder):
    home = tmp_path / "home"
    home.mkdir()
    vault = tiny_vault(tmp_path / "vault", "quillwort")
    other_vault = tiny_vault(tmp_path / "other vault", "bladderwrack")
    other = open_cairn(other_vault.resolve(), tmp_path / "other data", embedder, verify=True)
    other.indexing.index()
    other.store.check_vault(other_vault.resolve())  # recorded, as a daemon over that vault records it
    other_db = other.store.path
    other.close()
    db = db_file(home, vault)
    with serving(home, vault) as (proc, url):
        token = token_for(home, vault)
        wait_indexed(url, token, proc, notes=3)
        shutil.copyfile(other_db, tmp_path / "copy.sqlite3")
        os.replace(tmp_path / "copy.sqlite3", db)  # e.g. a backup of another vault's index restored here
        assert_refused_clearly(url, token)
        status, body = request(url, "/search?q=bladderwrack", token)
        assert status == 503, body
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    # At the next start the file names another vault: moved aside (kept) and this vault's index rebuilt.
    with serving(home, vault) as (proc, url):
        stats = wait_indexed(url, token, proc, notes=3)
        moved = Path(stats["recovered"]["movedTo"])
        assert moved.name.startswith(db.name + ".other-vault-") and moved.exists()
        assert search(url, token, "bladderwrack") == []
        assert [r["filePath"] for r in search(url, token, "quillwort cabinet")][:1] == ["Topic.md"]
    assert "belongs to another vault" in (home / "serve.stderr").read_text()


# -- one instance; changes while stopped -------------------------------------------------------


@pytest.mark.shared_data("vaults/obsidian-help")
def test_a_second_instance_is_refused_and_changes_made_while_stopped_are_picked_up(small_vault, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    with serving(home, small_vault) as (proc, url):
        token = token_for(home, small_vault)
        wait_indexed(url, token, proc)
        second = subprocess.run(
            [cairn_executable(), "serve", "--vault", str(small_vault), "--port", "0", "--no-tray"],
            env=cairn_env(home),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert f"pid {proc.pid}" in second.stderr and "already serving" in second.stderr, second.stderr
        assert get_json(url, "/health", token)["status"] == "ok"  # the first is untouched
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    (small_vault / "Offline.md").write_text(
        "Written while the daemon was stopped: the lighthouse keeper's log.\n", encoding="utf-8"
    )
    (small_vault / "User interface" / "Ribbon.md").unlink()
    with serving(home, small_vault) as (proc, url):
        stats = wait_indexed(url, token, proc)
        results = search(url, token, "lighthouse keeper log")
        assert results and results[0]["filePath"] == "Offline.md"
        assert stats["watching"] is True and stats["paused"] is False
        # Pause over HTTP: nothing followed; resume: a reconcile picks up what changed meanwhile.
        assert post_json(url, "/index/pause", token) == {"paused": True, "watching": False}
        assert get_json(url, "/index/stats", token)["paused"] is True
        (small_vault / "While paused.md").write_text(
            "The ferryman's timetable, written while paused.\n", encoding="utf-8"
        )
        assert post_json(url, "/index/resume", token) == {"paused": False, "watching": True}
        end = time.monotonic() + INDEX_DEADLINE_S
        while "While paused.md" not in {r["filePath"] for r in search(url, token, "ferryman timetable")}:
            assert time.monotonic() < end, "the change made while paused was not picked up after resume"
            time.sleep(0.05)


def post_json(url: str, path: str, token: str) -> dict:
    return request_json("POST", url, path, token)


def search(url: str, token: str, q: str) -> list[dict]:
    from urllib.parse import urlencode

    return get_json(url, "/search?" + urlencode({"q": q}), token)["results"]

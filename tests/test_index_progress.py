"""The first index as a user lives it: ``cairn index`` draws a bar per phase on a terminal
(notes read, then passages embedded, each with its rate and the time left), says a plain line per phase and every
~10 s when it is not on a terminal, ``cairn serve`` logs the same lines, and Ctrl-C stops a run at once, the next
run carrying on without embedding again what was embedded.

Real ``cairn`` subprocesses, the real model; a terminal is a pseudo-terminal (:mod:`pty`) with a window size.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shutil
import signal
import sqlite3
import struct
import subprocess
import termios
import threading
from pathlib import Path

import pytest

from cairn.progress import ProgressLines
from support.cairns import make_config
from support.cli import cairn_env, cairn_executable
from support.spawned import group_processes, serving, token_for, wait_indexed
from support.vaults import HELP_VAULT

#: Seconds a run may take to end after Ctrl-C: a bound on the wait (the test's point), with room for the model run
#: in progress to end on a CI machine whose cores are shared (typically well under a second).
STOP_DEADLINE_S = 5
#: Seconds a whole run of a small vault may take on the shared 2-core machine (a bound on a hang).
RUN_DEADLINE_S = 600

NOTES = {
    "Bees/Hive inspection.md": "# Hive inspection\n\nOpen the hive on a warm day and look for the queen's eggs.\n",
    "Bees/Swarming.md": "# Swarming\n\nA colony swarms in late spring when the hive runs out of room for brood.\n",
    "Garden/Compost.md": "# Compost\n\nTurn the heap every two weeks so that the middle stays warm and damp.\n",
    "Garden/Tomatoes.md": "# Tomatoes\n\nPinch out the side shoots and water the plants at the roots.\n",
}


def write_vault(root: Path) -> Path:
    for rel, text in NOTES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


class Terminal:
    """``cairn …`` run on a pseudo-terminal 100 columns wide (stdin, stdout and stderr), in its own process group
    as a shell runs a foreground job; what it writes is collected by a reader thread (:meth:`wait_for`)."""

    def __init__(self, home: Path, *args: str) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        self.proc = subprocess.Popen(
            [cairn_executable(), *args],
            env=cairn_env(home),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        self._master = master
        self._text = ""
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 4096)
            except OSError:  # EIO once the last process holding the terminal has exited
                data = b""
            with self._changed:
                if not data:
                    self._text += "\0"  # end of output
                    self._changed.notify_all()
                    return
                self._text += data.decode(errors="replace")
                self._changed.notify_all()

    @property
    def text(self) -> str:
        with self._changed:
            return self._text.rstrip("\0")

    def wait_for(self, pattern: str, timeout_s: float) -> re.Match[str]:
        """The first match of ``pattern`` in the output; fails the test when the output ends or ``timeout_s``
        passes first."""
        with self._changed:
            found = self._changed.wait_for(
                lambda: re.search(pattern, self._text) or self._text.endswith("\0"), timeout=timeout_s
            )
            match = re.search(pattern, self._text)
            if not match:
                state = "timed out" if not found else f"exited with {self.proc.poll()}"
                pytest.fail(f"{state} waiting for {pattern!r}; the terminal showed:\n{self._text[-3000:]}")
            return match

    def finish(self, timeout_s: float) -> int:
        code = self.proc.wait(timeout=timeout_s)
        self._reader.join(timeout=30)
        os.close(self._master)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def bar_states(text: str, label: str) -> list[tuple[int, int]]:
    """(done, total) of every drawing of the bar ``label`` (tqdm: ``label:  40%|███  | 4/10 [00:01<00:02, …]``)."""
    return [
        (int(d.replace(",", "")), int(t.replace(",", "")))
        for d, t in re.findall(rf"{label}: +\d+%\|[^|]*\| ([\d,]+)/([\d,]+) \[", text)
    ]


@pytest.mark.e2e
def test_cairn_index_on_a_terminal_draws_a_bar_for_notes_read_then_passages_embedded(tmp_path):
    vault = write_vault(tmp_path / "vault")
    term = Terminal(tmp_path / "home", "index", "--vault", str(vault))
    try:
        assert term.finish(RUN_DEADLINE_S) == 0, term.text
    finally:
        term.kill()
    out = term.text
    notes = bar_states(out, "reading notes")
    passages = bar_states(out, "embedding passages")
    assert notes[0] == (0, len(NOTES)) and notes[-1] == (len(NOTES), len(NOTES)), out
    # Drawn as soon as the phase starts (before the model has made a vector), and drawn complete at the end.
    assert passages[0][0] == 0 and passages[-1][0] == passages[-1][1] > 0, out
    assert out.index("reading notes:") < out.index("embedding passages:")
    # Each drawing has the elapsed time, the time left and the rate in the phase's unit.
    assert re.search(
        r"embedding passages: 100%\|[^|]*\| [\d,]+/[\d,]+ \[\d\d:\d\d<\d\d:\d\d, +[\d.]+ passages/s\]", out
    )
    assert re.search(r"reading notes: 100%\|[^|]*\| [\d,]+/[\d,]+ \[\d\d:\d\d<\d\d:\d\d, +[\d.]+ notes/s\]", out)
    assert f"Indexed {vault}" in out  # then the summary, as before


@pytest.mark.e2e
def test_cairn_index_without_a_terminal_says_plain_lines_per_phase_and_no_bar(tmp_path):
    vault = write_vault(tmp_path / "vault")
    proc = subprocess.run(
        [cairn_executable(), "index", "--vault", str(vault)],
        env=cairn_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE_S,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    n = len(NOTES)
    assert f"reading notes: 0 / {n} (0%)" in lines, proc.stderr
    assert any(re.fullmatch(rf"reading notes: {n} / {n}, done in \d+ s", line) for line in lines), proc.stderr
    started = [line for line in lines if re.fullmatch(r"embedding passages: 0 / [\d,]+ \(0%\)", line)]
    done = [
        line for line in lines if re.fullmatch(r"embedding passages: ([\d,]+) / \1, done in \d+ (min \d\d )?s", line)
    ]
    assert len(started) == 1 and len(done) == 1, proc.stderr
    assert "\r" not in proc.stderr and "%|" not in proc.stderr  # no bar drawn into a file or a pipe
    assert proc.stdout.startswith(f"Indexed {vault}")


def test_a_plain_line_when_a_phase_starts_every_ten_seconds_while_it_runs_and_when_it_ends():
    now = [100.0]
    said: list[str] = []
    lines = ProgressLines(said.append, clock=lambda: now[0])
    lines("scan", 10, 10)  # the stat pass is quick: not said
    for done, at in [(0, 100.0), (500, 104.0), (1000, 110.0), (1500, 115.0), (2000, 120.5), (4000, 140.0)]:
        now[0] = at
        lines("embed", done, 4000)
    lines("embed", 4000, 4000)  # said complete twice by the indexer: one line
    assert said == [
        "embedding passages: 0 / 4,000 (0%)",
        "embedding passages: 1,000 / 4,000 (25%), 100 passages/s, about 30 s left",
        "embedding passages: 2,000 / 4,000 (50%), 98 passages/s, about 20 s left",
        "embedding passages: 4,000 / 4,000, done in 40 s",
    ]


@pytest.mark.e2e
def test_cairn_serve_logs_the_progress_of_its_first_index(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    vault = write_vault(tmp_path / "vault")
    with serving(home, vault) as (proc, url):
        wait_indexed(url, token_for(home, vault), proc, notes=len(NOTES))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    log = (home / "serve.stderr").read_text()
    assert re.search(rf"cairn\.index\.lanes: reading notes: {len(NOTES)} / {len(NOTES)}, done in \d+ s", log), log
    assert re.search(r"cairn\.index\.lanes: embedding passages: ([\d,]+) / \1, done in", log), log


def cache_rows(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
    finally:
        conn.close()


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(3 * RUN_DEADLINE_S)
@pytest.mark.shared_data("vaults/obsidian-help")
def test_ctrl_c_during_the_first_index_of_the_help_vault_stops_at_once_and_the_next_run_carries_on(tmp_path):
    home = tmp_path / "home"
    vault = tmp_path / "vault"
    shutil.copytree(HELP_VAULT, vault, ignore=shutil.ignore_patterns(".*"))
    term = Terminal(home, "index", "--vault", str(vault))
    try:
        # Past the first batch of 256 chunks (its vectors written; the bar moves within a batch), more to come.
        term.wait_for(r"embedding passages: +\d+%\|[^|]*\| (2[6-9]\d|[3-9]\d\d|\d,?\d{3})/[\d,]+ \[", RUN_DEADLINE_S)
        os.killpg(term.proc.pid, signal.SIGINT)  # what Ctrl-C does: SIGINT to the terminal's foreground group
        code = term.finish(STOP_DEADLINE_S)
    finally:
        term.kill()
    out = term.text
    assert code == 130, out
    assert "Stopped: " in out and "Run `cairn index` again to carry on." in out, out
    assert "Traceback" not in out, out
    assert group_processes(term.proc.pid) == {}  # no parse worker or model thread left behind
    db = make_config(vault.resolve(), home / "data").db_path
    cached = cache_rows(db)
    status = subprocess.run(
        [cairn_executable(), "status", "--vault", str(vault), "--json"],
        env=cairn_env(home),
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE_S,
    )
    before = json.loads(status.stdout)
    assert before["pending"] > 0 and before["vectors"] > 0, before
    again = subprocess.run(
        [cairn_executable(), "index", "--vault", str(vault), "--json"],
        env=cairn_env(home),
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE_S,
    )
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["added"] == report["updated"] == 0  # every note was written by the stopped run
    assert report["stats"]["pending"] == 0
    assert report["vectorsWritten"] == report["stats"]["vectors"] - before["vectors"]
    # Every text the model embedded in the second run is one it had not embedded before the stop.
    assert report["textsEmbedded"] == cache_rows(db) - cached > 0

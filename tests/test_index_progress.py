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

from cairn.progress import ProgressLines, RunEstimate, VectorWork
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
    # Each drawing has the elapsed time and the rate in the phase's unit; the time left is the whole run's, so the
    # first vector pass's last drawing still has the second pass's time left.
    assert re.search(
        r"embedding passages: 100%\|[^|]*\| [\d,]+/[\d,]+ \[\d\d:\d\d, +[\d.]+ passages/s, about \d+ s left in all\]",
        out,
    )
    assert re.search(r"reading notes: 100%\|[^|]*\| [\d,]+/[\d,]+ \[\d\d:\d\d, +[\d.]+ notes/s", out)
    assert "<" not in "".join(re.findall(r"\[\d\d:\d\d[^\]]*\]", out))  # no time left of one pass alone
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
    assert any(re.match(rf"reading notes: {n} / {n}, done in \d+ s", line) for line in lines), proc.stderr
    started = [line for line in lines if re.match(r"embedding passages: 0 / [\d,]+ \(0%\)", line)]
    done = [line for line in lines if re.match(r"embedding passages: ([\d,]+) / \1, done in \d+ (min \d\d )?s", line)]
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


def test_the_time_left_in_a_run_counts_the_passes_still_to_come():
    """1,000 notes read at 100 notes/s, each adding 4 passages of 100 tokens; their first vectors at 100 passages/s;
    then their sentence vectors, as many tokens again at the same model rate (40 s)."""
    now = [0.0]
    work = [VectorWork(0, 0)]
    said: list[str] = []
    estimate = RunEstimate(lambda: work[0], prior_tokens_per_s=5000.0, clock=lambda: now[0])
    lines = ProgressLines(said.append, clock=lambda: now[0], estimate=estimate)
    for done in range(0, 1001, 100):
        now[0], work[0] = done / 100, VectorWork(400 * done, 400 * done)
        lines("index", done, 1000)
    for phase in ("embed", "refine"):
        began = now[0]
        for done in range(0, 4001, 250):
            now[0] = began + done / 100
            work[0] = (
                VectorWork(400_000 - 100 * done, 400_000) if phase == "embed" else VectorWork(0, 400_000 - 100 * done)
            )
            lines(phase, done, 4000)
    assert said == [
        "reading notes: 0 / 1,000 (0%)",
        # Until a vector has been made, the model's rate is the prior one: 800,000 tokens at 5,000 tokens/s.
        "reading notes: 1,000 / 1,000, done in 10 s; about 2 min 40 s left in all",
        "embedding passages: 0 / 4,000 (0%), about 2 min 40 s left in all",
        # Then measured: 100 passages/s of 100 tokens; the sentence vectors' 400,000 tokens are 40 s more.
        "embedding passages: 1,000 / 4,000 (25%), 100 passages/s, about 1 min 10 s left in all",
        "embedding passages: 2,000 / 4,000 (50%), 100 passages/s, about 1 min 00 s left in all",
        "embedding passages: 3,000 / 4,000 (75%), 100 passages/s, about 50 s left in all",
        "embedding passages: 4,000 / 4,000, done in 40 s; about 40 s left in all",
        "refining passages (sentence vectors): 0 / 4,000 (0%), about 40 s left in all",
        "refining passages (sentence vectors): 1,000 / 4,000 (25%), 100 passages/s, about 30 s left in all",
        "refining passages (sentence vectors): 2,000 / 4,000 (50%), 100 passages/s, about 20 s left in all",
        "refining passages (sentence vectors): 3,000 / 4,000 (75%), 100 passages/s, about 10 s left in all",
        "refining passages (sentence vectors): 4,000 / 4,000, done in 40 s",
    ]


def test_the_time_left_in_a_run_grows_with_the_notes_still_to_read():
    """Half the notes read in 10 s, their passages' vectors 100 s of the model: the other half's are counted too."""
    now = [0.0]
    work = [VectorWork(0, 0)]
    estimate = RunEstimate(lambda: work[0], prior_tokens_per_s=1000.0, clock=lambda: now[0], every_s=5)
    estimate.observe("index", 0, 1000)
    now[0], work[0] = 10.0, VectorWork(50_000, 50_000)
    estimate.observe("index", 500, 1000)
    assert estimate.left() == pytest.approx(10 + 200)


def _thread_niceness(pid: int) -> dict[str, int]:
    """``{"<command> <thread id>": niceness}`` of every thread of process ``pid`` (Linux /proc)."""
    out: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            name = (task / "comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        out[f"{name} {task.name}"] = int(fields[16])  # field 19 of stat: nice
    return out


def write_long_vault(root: Path, notes: int = 40) -> Path:
    """``notes`` notes of 8 paragraphs of 3 sentences each, every sentence its own: a second vector pass of seconds."""
    words = "amber basil cedar delta ember fjord grove heron iris juniper kelp lotus maple".split()
    for n in range(notes):
        paragraphs = [
            " ".join(
                f"The {words[(n + p + k) % len(words)]} note {n} paragraph {p} sentence {k} speaks of "
                f"{words[(n * 3 + p * 5 + k) % len(words)]} and {words[(n + 2 * p + 3 * k) % len(words)]}."
                for k in range(3)
            )
            for p in range(8)
        ]
        (root / f"Note {n}.md").parent.mkdir(parents=True, exist_ok=True)
        (root / f"Note {n}.md").write_text(f"# Note {n}\n\n" + "\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return root


@pytest.mark.e2e
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads each thread's priority from Linux's /proc")
def test_cairn_index_runs_the_model_at_the_priority_it_was_started_with(tmp_path):
    """A person waits for ``cairn index``: its model runs are not background work (the daemon's are nicer)."""
    vault = write_long_vault(tmp_path / "vault")
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    proc = subprocess.Popen(
        [cairn_executable(), "index", "--vault", str(vault)],
        env=cairn_env(tmp_path / "home"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: dict[str, int] = {}
    said: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            if line.startswith("refining passages") and not seen:  # the first pass's model threads are there
                assert proc.poll() is None, "the run ended before its threads could be looked at"
                os.kill(proc.pid, signal.SIGSTOP)
                try:
                    seen = _thread_niceness(proc.pid)
                finally:
                    os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=RUN_DEADLINE_S) == 0, "".join(said)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(seen) > 2, "".join(said)  # the main thread and the model's (Python does not name the OS threads)
    assert {name: nice for name, nice in seen.items() if nice != mine} == {}


@pytest.mark.e2e
def test_cairn_index_says_the_time_left_in_the_whole_run_until_its_last_pass_is_done(tmp_path):
    vault = write_vault(tmp_path / "vault")
    proc = subprocess.run(
        [cairn_executable(), "index", "--vault", str(vault)],
        env=cairn_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE_S,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if re.match(r"(reading|embedding|refining) ", line)]
    embedded = next(line for line in lines if re.match(r"embedding passages: ([\d,]+) / \1, done", line))
    refining = next(line for line in lines if line.startswith("refining passages (sentence vectors): 0 /"))
    # The first vector pass is over, the second not begun: time is still left, and said so.
    assert re.search(r"; about \d+ s left in all$", embedded), proc.stderr
    assert re.search(r", about \d+ s left in all$", refining), proc.stderr
    assert re.fullmatch(r"refining passages \(sentence vectors\): ([\d,]+) / \1, done in \d+ s", lines[-1])
    for line in lines[:-1]:
        assert not re.search(r"about 0 s", line), proc.stderr
        assert "left" not in line or line.endswith("left in all"), proc.stderr


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

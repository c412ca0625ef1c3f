"""A policy edit takes effect on time whatever the timing of calls and saves.

The real :class:`~cairn.policy_file.PolicyHolder` over real files: a policy tightened while the holder was
idle is in force on the first call after it; a save is adopted without any call; a tool that only touches the
file never keeps the previous policy past the churn bound; a half-save written again between two reads is never
used; a file that never stops changing fails closed (logged); a reload that withholds less than before is logged
as a warning. Waits are on conditions with timeouts; the pauses are the saves' own timing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest

from cairn.policy_file import apply_policy
from cairn.policy_live import PolicyHolder

LOOSE = """\
version: 1
withhold:
  tags: [personal]
  folders: []
default_tools: [get_note, list_notes]
clients:
  claude-desktop: {local: false, tools: [search_notes, get_note, list_notes]}
audit: {enabled: false}
"""
TIGHT = LOOSE.replace("folders: []", "folders: [Private]")


def save_as_of(path: Path, text: str, seconds_ago: float) -> None:
    """Save ``text`` atomically (temp file + rename) with an mtime ``seconds_ago`` in the past: the owner saved
    it that long ago while nothing asked the holder."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    when = time.time_ns() - int(seconds_ago * 1e9)
    os.utime(tmp, ns=(when, when))
    os.replace(tmp, path)


class LogEvent(logging.Handler):
    """Sets ``event`` when a record from :mod:`cairn.policy_file` contains ``words``."""

    def __init__(self, words: str) -> None:
        super().__init__(logging.DEBUG)
        self.words = words
        self.event = threading.Event()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if self.words in record.getMessage():
            self.event.set()


@pytest.fixture
def policy_log():
    logger = logging.getLogger("cairn.policy_live")
    handlers: list[LogEvent] = []
    old_level = logger.level
    logger.setLevel(logging.DEBUG)

    def watch(words: str) -> LogEvent:
        handler = LogEvent(words)
        logger.addHandler(handler)
        handlers.append(handler)
        return handler

    yield watch
    for handler in handlers:
        logger.removeHandler(handler)
    logger.setLevel(old_level)


def test_a_policy_tightened_while_idle_is_in_force_on_the_first_call(tmp_path):
    path = tmp_path / "mcp-serve.yaml"
    save_as_of(path, LOOSE, 60)
    holder = PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=1.0)
    assert holder.current().withhold.folders == ()

    save_as_of(path, TIGHT, 6)  # one save, 6 s ago: long settled
    served = [holder.current().withhold.folders for _ in range(40)]
    assert served == [("Private",)] * 40, f"{served.count(())} of 40 calls ran under the looser policy"


def test_a_save_is_adopted_on_a_timer_without_any_call(tmp_path, policy_log):
    path = tmp_path / "mcp-serve.yaml"
    save_as_of(path, LOOSE, 60)
    holder = PolicyHolder(path, strict=True, check_interval_s=3600.0, settle_s=0.2)  # calls never read the file
    reloaded = policy_log("reloaded")
    path.write_text(TIGHT, encoding="utf-8")
    assert reloaded.event.wait(10), "the saved policy was not adopted without a call"
    assert holder.current().withhold.folders == ("Private",)


def test_touching_the_file_never_keeps_the_previous_policy_past_the_churn_bound(tmp_path):
    """A tool touching a saved change without end: the looser policy before it is in force at most ``10 × settle``
    (then the holder fails closed), and the change is used once the touching stops."""
    path = tmp_path / "mcp-serve.yaml"
    save_as_of(path, LOOSE, 60)
    settle_s = 0.2
    holder = PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=settle_s)
    path.write_text(TIGHT, encoding="utf-8")
    seen = set()
    started = time.monotonic()
    late_loose = 0
    while time.monotonic() - started < settle_s * 10 * 2:
        now = time.time_ns()
        os.utime(path, ns=(now, now))  # a sync tool touching the file: same bytes, a new mtime
        policy = holder.current()
        loose = policy.fail_closed_reason is None and policy.withhold.folders == ()
        seen.add((policy.fail_closed_reason is None, policy.withhold.folders))
        late_loose += loose and time.monotonic() - started > settle_s * 10 + 1.0
    assert late_loose == 0, "the looser policy stayed in force while the tightening save was touched"
    assert seen <= {(True, ()), (True, ("Private",)), (False, ())}
    assert holder.reload().withhold.folders == ("Private",), "the change was not used once the touching stopped"


def test_saves_whose_complete_state_no_read_saw_never_put_their_first_write_in_force(tmp_path):
    """The same half-save written again and again, each save completed between two reads: every read sees the
    first write only, but it never stood for the settle time, so it is never used."""
    full = TIGHT
    first_write = full[: full.index("  folders:")] + "  folders: []\n"
    assert first_write != full
    path = tmp_path / "mcp-serve.yaml"
    save_as_of(path, full, 60)
    settle_s = 0.3
    holder = PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=settle_s)
    pause = threading.Event()
    in_force = set()
    started = time.monotonic()
    while time.monotonic() - started < settle_s * 4:  # well inside the churn bound (10 × settle)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(first_write)
            fh.flush()
            policy = holder.current()  # reads the first write
            in_force.add((policy.fail_closed_reason is None, policy.withhold.folders))
            pause.wait(settle_s / 6)
            fh.seek(0)
            fh.truncate()
            fh.write(full)  # completed, and at once saved again: no read sees it
    assert in_force == {(True, ("Private",))}, in_force


def test_a_file_that_never_stops_changing_fails_closed_and_says_so(tmp_path, policy_log):
    path = tmp_path / "mcp-serve.yaml"
    save_as_of(path, LOOSE, 60)
    holder = PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=0.2)
    errors = policy_log("kept changing")
    deadline = time.monotonic() + 20
    i = 0
    while not errors.event.is_set() and time.monotonic() < deadline:
        i += 1
        path.write_text(LOOSE + f"# save {i}\n", encoding="utf-8")
        holder.current()
    assert errors.event.is_set(), "a file changing without end kept the previous policy in force, unlogged"
    closed = holder.current()
    assert closed.fail_closed_reason and "kept changing" in closed.fail_closed_reason
    assert any(r.levelno == logging.ERROR for r in errors.records if "kept changing" in r.getMessage())

    path.write_text(TIGHT, encoding="utf-8")  # the owner saves once: it settles and is used
    fixed = holder.reload()
    assert fixed.fail_closed_reason is None and fixed.withhold.folders == ("Private",)


def test_a_reload_that_withholds_less_than_before_is_a_warning(tmp_path, policy_log):
    path = tmp_path / "mcp-serve.yaml"
    save_as_of(path, TIGHT, 60)
    holder = PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=0.2)
    laxer = policy_log("withholding less")
    path.write_text(LOOSE, encoding="utf-8")
    assert holder.reload().withhold.folders == ("Private",)  # withholding less waits for the owner
    apply_policy(path)  # `cairn policy apply`
    assert holder.reload().withhold.folders == ()
    warned = [r for r in laxer.records if "withholding less" in r.getMessage()]
    assert warned and warned[0].levelno == logging.WARNING and "folder Private" in warned[0].getMessage()


def test_a_settle_time_below_a_fifth_of_a_second_is_refused():
    from cairn.config import load_config
    from cairn.errors import ConfigError

    for bad in ("0", "0.0", "0.1"):
        with pytest.raises(ConfigError, match="mcp_policy_settle_s"):
            load_config({"mcp_policy_settle_s": bad}, env={})
    assert load_config({"mcp_policy_settle_s": "0.2"}, env={}).mcp_policy_settle_s == 0.2

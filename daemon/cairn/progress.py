"""Index progress in words (layer 0): what the indexer's ``progress(phase, done, total)`` calls say, as the labels
and units of a progress bar (:data:`PHASES`) and as plain lines with a rate and an estimate of the time left
(:class:`ProgressLines`: ``cairn index`` without a terminal, the daemon's log).

Phases, in the order a run goes through them: ``scan`` (the files' stat, fast), ``index`` (notes read, parsed and
written: keyword-searchable from then on), ``embed`` (chunks, called passages here, given their first vector:
searchable by meaning from then on), ``refine`` (their sentence vectors added) and ``pdf`` (PDF attachments read).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

#: phase → (what is being done, the unit counted), for a bar's label and the plain lines.
PHASES: dict[str, tuple[str, str]] = {
    "scan": ("checking files", "file"),
    "index": ("reading notes", "note"),
    "embed": ("embedding passages", "passage"),
    "refine": ("refining passages (sentence vectors)", "passage"),
    "pdf": ("reading PDFs", "PDF"),
}
#: Seconds between two plain lines of the same phase (the first and the last line of a phase are said at once).
EVERY_S = 10.0


def phase_words(phase: str) -> tuple[str, str]:
    """(label, unit) of ``phase``; an unknown phase is its own label, counted in items."""
    return PHASES.get(phase, (phase, "item"))


def duration_words(seconds: float) -> str:
    """``"45 s"``, ``"3 min 20 s"``, ``"1 h 05 min"`` (rounded to whole seconds or minutes)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def pro_rata(
    progress: Callable[[str, int, int], None], phase: str, done: int, share: int, total: int
) -> Callable[[int, int], None]:
    """A ``(part done, whole)`` callback for one step of ``phase`` worth ``share`` of ``total`` items, ``done``
    before it: ``progress(phase, done + share · part / whole, total)`` (a batch of chunks whose texts are embedded
    a slice at a time moves the bar as its texts are)."""

    def step(part: int, whole: int) -> None:
        progress(phase, done + share * part // max(1, whole), total)

    return step


@dataclass
class _Phase:
    name: str
    started: float
    first_done: int
    last_said: float


class ProgressLines:
    """A ``progress(phase, done, total)`` callback that calls ``say(line)`` with one plain line: when a phase
    starts, at most every ``every_s`` seconds while it runs, and when it is complete (``done == total``), e.g.
    ``embedding passages: 5,120 / 20,480 (25%), 118 passages/s, about 2 min 10 s left``. The rate counts what was
    done since this phase's first call (``done`` may start above 0 when a run carries on an earlier one). The
    ``scan`` phase, a stat of each file, is said only when it lasts ``every_s``. ``clock``: seconds, monotonic."""

    def __init__(
        self, say: Callable[[str], None], *, every_s: float = EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.say = say
        self.every_s = every_s
        self.clock = clock
        self._phase: _Phase | None = None
        self._complete: str | None = None  # the phase last said complete

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = self.clock()
        complete = done >= total
        current = self._phase
        if current is None or current.name != phase:
            if complete and phase == self._complete:
                return  # said complete already (the indexer may say so twice)
            current = self._phase = _Phase(phase, now, done, now)
            self._complete = None
            if phase != "scan":
                self.say(self.line(current, done, total, now))
        elif complete:
            if phase != "scan":
                self.say(self.line(current, done, total, now))
        elif now - current.last_said >= self.every_s:
            current.last_said = now
            self.say(self.line(current, done, total, now))
        if complete:
            self._phase, self._complete = None, phase

    @staticmethod
    def line(phase: _Phase, done: int, total: int, now: float) -> str:
        """The line for ``phase`` at ``done`` of ``total``, ``now`` on the clock."""
        label, unit = phase_words(phase.name)
        elapsed = now - phase.started
        head = f"{label}: {done:,} / {total:,}"
        if total and done >= total:
            return f"{head}, done in {duration_words(elapsed)}"
        percent = f" ({100 * done // total}%)" if total else ""
        moved = done - phase.first_done
        if elapsed <= 0 or moved <= 0:
            return f"{head}{percent}"
        rate = moved / elapsed
        left = (total - done) / rate
        return f"{head}{percent}, {rate:,.0f} {unit}s/s, about {duration_words(left)} left"

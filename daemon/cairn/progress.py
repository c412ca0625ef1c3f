"""Index progress in words (layer 0): what the indexer's ``progress(phase, done, total)`` calls say, as the labels
and units of a progress bar (:data:`PHASES`) and as plain lines with a rate and an estimate of the time left
(:class:`ProgressLines`: ``cairn index`` without a terminal, the daemon's log).

Phases, in the order a run goes through them: ``scan`` (the files' stat, fast), ``index`` (notes read, parsed and
written: keyword-searchable from then on), ``embed`` (chunks, called passages here, given their first vector:
searchable by meaning from then on), ``refine`` (their sentence vectors added) and ``pdf`` (PDF attachments read).

A run's time left (:class:`RunEstimate`, ``cairn index``) covers every pass still to come, not only the one under way:
the text pass, then the vectors' two passes, so it does not reach zero at the end of a pass that another follows.
"""

from __future__ import annotations

import math
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
#: Model tokens embedded per second by one embedding thread, assumed for the vectors' passes until the run has
#: measured its own rate; a little below a core's rate on a slow machine (docs/benchmarks.md), so a first estimate
#: errs long.
PRIOR_TOKENS_PER_S = 1500.0
#: The second vector pass's model work per token of its chunks, relative to the first pass's: its texts are each
#: chunk's sentences and its note's title, about as many tokens as the chunk in shorter texts.
REFINE_COST = 1.0


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

    def rate(self, done: int, now: float) -> float | None:
        """Items per second since the phase's first call (None until some moved and time passed)."""
        moved, elapsed = done - self.first_done, now - self.started
        return moved / elapsed if moved > 0 and elapsed > 0 else None


@dataclass(frozen=True)
class VectorWork:
    """The vectors' work left, in model tokens (the chunks' token counts): ``first`` for the chunks without a vector
    (the first pass, ``embed``), ``second`` for those not yet complete (the second pass, ``refine``: the first
    pass's chunks among them)."""

    first: int
    second: int


class RunEstimate:
    """Seconds left in a whole run (``cairn index``): the pass under way at its own rate, plus every pass still to
    come, so that the estimate does not reach zero while a pass is still to come.

    Feed it every ``progress(phase, done, total)`` call (:meth:`observe`), then ask :meth:`left`.

    - During the text pass (``index``): its notes at their rate, then the vectors' work as ``work()`` says it now,
      grown in proportion to the notes still to read (each note read adds its chunks), at the model rate.
    - During the first vector pass (``embed``): its passages at their rate, then the second pass's tokens at the
      model rate this pass shows (its passages/s times its tokens per passage).
    - The second pass (``refine``) and others: their own rate.

    The model rate is ``prior_tokens_per_s`` until a vector pass has measured it. ``work()`` (a query) is called when
    a phase starts, at most every ``every_s`` seconds during the text pass and at its end. ``clock``: seconds,
    monotonic."""

    def __init__(
        self,
        work: Callable[[], VectorWork],
        *,
        prior_tokens_per_s: float,
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.work = work
        self.tokens_per_s = prior_tokens_per_s
        self.every_s = every_s
        self.clock = clock
        self._phase: _Phase | None = None
        self._at_start = VectorWork(0, 0)  # work() when the phase under way started
        self._sample: tuple[float, int, VectorWork] | None = None  # text pass: (when, notes done, work()) last read
        self._last: tuple[int, int] = (0, 0)  # (done, total) of the last call

    def observe(self, phase: str, done: int, total: int) -> None:
        """Record one progress call."""
        now = self.clock()
        if self._phase is None or self._phase.name != phase:
            self._phase = _Phase(phase, now, done, now)
            self._at_start = self.work()
            self._sample = (now, done, self._at_start)
        elif phase == "index" and self._sample is not None and (done >= total or now - self._sample[0] >= self.every_s):
            self._sample = (now, done, self.work())
        self._last = (done, total)

    def left(self) -> float | None:
        """Seconds left in the run as of the last call observed; None while the pass under way has no rate yet and
        nothing else is known (the text pass's first seconds), or after a scan."""
        phase = self._phase
        if phase is None or phase.name == "scan":
            return None
        done, total = self._last
        rate = phase.rate(done, self.clock())
        if phase.name == "index":
            return None if rate is None else (total - done) / rate + self._vectors_after_text(done, total)
        if phase.name == "embed":
            per_passage = self._at_start.first / max(1, total)
            if rate is not None and per_passage > 0:
                self.tokens_per_s = rate * per_passage
            first = (total - done) / rate if rate is not None else self._at_start.first / self.tokens_per_s
            return first + REFINE_COST * self._at_start.second / self.tokens_per_s
        if rate is not None:
            return (total - done) / rate
        if phase.name == "refine":
            return REFINE_COST * self._at_start.second / self.tokens_per_s
        return None

    def _vectors_after_text(self, done: int, total: int) -> float:
        """Seconds of the vectors' passes after the text pass, at ``done`` of ``total`` notes read."""
        start, (_, sampled_done, now) = self._at_start, self._sample or (0.0, 0, self._at_start)
        first, second = float(now.first), float(now.second)
        if sampled_done > 0 and total > sampled_done:  # what the notes left to read will add, at the same rate
            grow = (total - sampled_done) / sampled_done
            first += max(0, now.first - start.first) * grow
            second += max(0, now.second - start.second) * grow
        return (first + REFINE_COST * second) / self.tokens_per_s


class ProgressLines:
    """A ``progress(phase, done, total)`` callback that calls ``say(line)`` with one plain line: when a phase
    starts, at most every ``every_s`` seconds while it runs, and when it is complete (``done == total``), e.g.
    ``embedding passages: 5,120 / 20,480 (25%), 118 passages/s, about 2 min 10 s left``. The rate counts what was
    done since this phase's first call (``done`` may start above 0 when a run carries on an earlier one). The
    ``scan`` phase, a stat of each file, is said only when it lasts ``every_s``. ``clock``: seconds, monotonic.

    With ``estimate`` (a whole run: ``cairn index``) the time left is the run's (:class:`RunEstimate`): ``about 14
    min left in all``, said from a phase's first line on and after a complete phase that others follow."""

    def __init__(
        self,
        say: Callable[[str], None],
        *,
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        estimate: RunEstimate | None = None,
    ) -> None:
        self.say = say
        self.every_s = every_s
        self.clock = clock
        self.estimate = estimate
        self._phase: _Phase | None = None
        self._complete: str | None = None  # the phase last said complete

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self.estimate is not None:
            self.estimate.observe(phase, done, total)
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

    def line(self, phase: _Phase, done: int, total: int, now: float) -> str:
        """The line for ``phase`` at ``done`` of ``total``, ``now`` on the clock."""
        label, unit = phase_words(phase.name)
        head = f"{label}: {done:,} / {total:,}"
        in_all = self.estimate.left() if self.estimate is not None else None
        if total and done >= total:
            after = f"; {left_words(in_all)} in all" if in_all is not None and in_all > 0 else ""
            return f"{head}, done in {duration_words(now - phase.started)}{after}"
        percent = f" ({100 * done // total}%)" if total else ""
        rate = phase.rate(done, now)
        speed = f", {rate:,.0f} {unit}s/s" if rate is not None else ""
        if self.estimate is not None:
            return f"{head}{percent}{speed}" + (f", {left_words(in_all)} in all" if in_all is not None else "")
        if rate is None:
            return f"{head}{percent}"
        return f"{head}{percent}{speed}, about {duration_words((total - done) / rate)} left"


def left_words(seconds: float) -> str:
    """``"about 3 min 20 s left"`` for time left in a run: at least ``1 s`` while any is (never "0 s" before the
    end)."""
    return f"about {duration_words(max(1.0, math.ceil(seconds)))} left"

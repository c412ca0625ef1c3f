"""Watching the vault (on ``watchfiles``): file events become :class:`~cairn.index.hints.Hints`, never the truth.

docs/design.md, "Flows" → Watch. Events are filtered (hidden and ignored places cause no work) and added to the
hints as vault-relative paths; what is due there — a batch of paths once quiet ``debounce_ms`` (at most
``max_wait_ms`` after the first hint), or a reconcile — is handed as ONE call to ``apply_hints(paths)`` (which
re-stats each path and decides what changed by mtime, size and hash) or ``reconcile()``. Calls run one at a time on
``executor`` (the save lane's thread; never on the event loop); hints arriving meanwhile form the next batch.

Native file events (inotify, FSEvents, ReadDirectoryChangesW via ``watchfiles``) are used unless polling is
forced (``force_polling``, ``WATCHFILES_FORCE_POLLING``): then this module polls by itself, every
``poll_interval_s``, with the scan's rules — hidden and ignored folders are never entered, so a big ignored
folder costs nothing — and :meth:`VaultWatcher.mode_stats` reports the mode and what the polling costs.

A full ``reconcile()`` (disk against store) runs when the watcher fails or restarts, when more
than ``max_hints`` paths pile up (an overflow: a ``git checkout`` of thousands of files is cheaper
as one scan), when watching resumes after a pause, and every ``reconcile_interval_s``.

The callbacks are plain blocking functions supplied by the composition root (``cairn.app``);
this module knows nothing of the store or the index.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
import unicodedata
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from cairn.index.hints import Hints
from cairn.vault import IgnoreRules

log = logging.getLogger(__name__)

DEFAULT_DEBOUNCE_MS = 300
DEFAULT_RECONCILE_INTERVAL_S = 600.0
#: More pending paths than this → drop them and run one full reconcile instead.
DEFAULT_MAX_HINTS = 5000
#: Seconds between two passes of the polling watcher (no native file events: network shares, some containers).
DEFAULT_POLL_INTERVAL_S = 2.0
#: The errors that say a path is not there.
_GONE = frozenset({errno.ENOENT, errno.ENOTDIR})


def polling_wanted(force_polling: bool | None) -> bool:
    """Whether to poll instead of using native file events: ``force_polling`` when given, else what the
    environment variable ``WATCHFILES_FORCE_POLLING`` says (set and not ``0``/``false``/``no``/``off``)."""
    if force_polling is not None:
        return force_polling
    return os.environ.get("WATCHFILES_FORCE_POLLING", "").strip().lower() not in ("", "0", "false", "no", "off")


class VaultWatcher:
    """Watches ``root``: its file events go to ``hints`` (a new :class:`~cairn.index.hints.Hints` when not given),
    and what is due there goes to ``apply_hints`` / ``reconcile``, one call at a time on ``executor`` (the event
    loop's default executor when not given).

    Use from a running event loop: ``await start()`` (it follows ``hints`` from then on), ``await stop()``.
    :meth:`stats` and :meth:`idle` may be called from any thread.
    """

    def __init__(
        self,
        root: Path,
        *,
        apply_hints: Callable[[set[str]], Any],
        reconcile: Callable[[], Any],
        hints: Hints | None = None,
        executor: Executor | None = None,
        ignore: Sequence[str] = (),
        debounce_ms: int = DEFAULT_DEBOUNCE_MS,
        max_wait_ms: int | None = None,
        reconcile_interval_s: float = DEFAULT_RECONCILE_INTERVAL_S,
        max_hints: int = DEFAULT_MAX_HINTS,
        force_polling: bool | None = None,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
    ) -> None:
        self.root = Path(root)
        self._root_str = str(self.root)
        self.hints = hints if hints is not None else Hints()
        self._apply_hints = apply_hints
        self._reconcile = reconcile
        self._executor = executor
        self._rules = IgnoreRules(ignore)
        self.debounce_s = max(0, debounce_ms) / 1000
        self.max_wait_s = (max_wait_ms if max_wait_ms is not None else max(2000, 4 * debounce_ms)) / 1000
        self.reconcile_interval_s = reconcile_interval_s
        self.max_hints = max_hints
        self.force_polling = force_polling
        #: ``native`` (file events) or ``polling`` (:meth:`_poll_pass` every ``poll_interval_s``).
        self.mode = "polling" if polling_wanted(force_polling) else "native"
        self.poll_interval_s = poll_interval_s
        self._poll_cost: dict[str, Any] = {}
        self._watching = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        # Counters, for stats and tests.
        self.batches = 0
        self.reconciles = 0
        self.hints_seen = 0
        self.last_batch: frozenset[str] = frozenset()
        self.busy = False
        self.last_error: str | None = None

    # ------------------------------------------------------------------ filtering
    def relative(self, abs_path: str) -> str | None:
        """Vault-relative POSIX NFC path of an event's path, or None when outside the vault, hidden or ignored."""
        if abs_path == self._root_str:
            return None
        if not abs_path.startswith(self._root_str + os.sep):
            return None
        rel = unicodedata.normalize("NFC", abs_path[len(self._root_str) + 1 :].replace(os.sep, "/"))
        parts = rel.split("/")
        if any(not p or p.startswith(".") for p in parts):
            return None
        if self._rules:
            for i in range(1, len(parts)):
                if self._rules.ignored("/".join(parts[:i]), True):
                    return None
            if os.path.isdir(abs_path):
                if self._rules.ignored(rel, True):
                    return None
            elif self._rules.ignored(rel, False) and self._rules.ignored(rel, True):  # gone: file or folder?
                return None
        return rel

    def _filter(self, _change: Any, path: str) -> bool:
        return self.relative(path) is not None

    # ------------------------------------------------------------------ what the hints see of it (any thread)
    def wake(self) -> None:
        """Look at the hints again now (something was added to them)."""
        loop, wake = self._loop, self._wake
        if loop is None or wake is None:
            return
        try:
            loop.call_soon_threadsafe(wake.set)
        except RuntimeError:  # loop closed
            pass

    @property
    def watching(self) -> bool:
        """File events arrive (or the polling passes run), paused or not."""
        return self._watching

    def idle(self) -> bool:
        """No hint pending, no reconcile wanted, no place waiting to be looked at again, nothing running."""
        return self.hints.idle() and not self.busy

    def stats(self) -> dict[str, Any]:
        """The hints' :meth:`~cairn.index.hints.Hints.stats` and this watcher's counters: ``{watching, paused,
        pendingPaths, retrying, watcher, batches, reconciles, watchError}``."""
        return {
            **self.hints.stats(),
            "watching": self._watching and not self.hints.paused,
            "watcher": self.mode_stats(),
            "batches": self.batches,
            "reconciles": self.reconciles,
            "watchError": self.last_error,
        }

    def mode_stats(self) -> dict[str, Any]:
        """How the vault is watched and what it costs: ``{mode: "native", hints}`` (file events: no cost while
        nothing changes), or ``{mode: "polling", intervalS, files, folders, lastPassMs, cpuShare}`` — the files
        and folders the last pass looked at (ignored and hidden folders are not entered), its duration, and its
        CPU time over the interval: the share of one core that polling takes (0.01 = 1 %)."""
        if self.mode == "native":
            return {"mode": "native", "hints": self.hints_seen}
        return {"mode": "polling", "intervalS": self.poll_interval_s, **self._poll_cost}

    # ------------------------------------------------------------------ polling
    def _poll_pass(self, previous: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        """{vault-relative NFC path: (mtime ns, size)} of every file the scan's rules let through (hidden and
        ignored folders not entered, no symlink followed). What could not be listed or stat'ed now keeps its
        ``previous`` entry: an error is no change (never a hint of a deletion). Blocking; on a worker thread."""
        wall, cpu = time.perf_counter(), time.thread_time()
        out: dict[str, tuple[int, int]] = {}
        stack: list[tuple[str, str]] = [("", self._root_str)]
        seen: set[tuple[int, int]] = set()
        folders = 0
        while stack:
            rel_dir, abs_dir = stack.pop()
            folders += 1
            try:
                with os.scandir(abs_dir) as it:
                    entries = list(it)
            except OSError as exc:
                if exc.errno not in _GONE:
                    prefix = f"{rel_dir}/" if rel_dir else ""
                    out.update((p, sig) for p, sig in previous.items() if p.startswith(prefix))
                continue
            for entry in entries:
                self._poll_entry(entry, rel_dir, out, stack, seen, previous)
        self._poll_cost = {
            "files": len(out),
            "folders": folders,
            "lastPassMs": round((time.perf_counter() - wall) * 1000, 1),
            "cpuShare": round((time.thread_time() - cpu) / max(self.poll_interval_s, 1e-3), 4),
        }
        return out

    def _poll_entry(
        self,
        entry: os.DirEntry[str],
        rel_dir: str,
        out: dict[str, tuple[int, int]],
        stack: list[tuple[str, str]],
        seen: set[tuple[int, int]],
        previous: dict[str, tuple[int, int]],
    ) -> None:
        """One folder entry of :meth:`_poll_pass`: a file into ``out``, a folder onto ``stack`` (once each)."""
        name = unicodedata.normalize("NFC", entry.name)
        if name.startswith("."):
            return
        rel = f"{rel_dir}/{name}" if rel_dir else name
        try:
            if entry.is_symlink():
                return
            st = entry.stat(follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in _GONE and rel in previous:
                out[rel] = previous[rel]
            return
        if entry.is_dir(follow_symlinks=False):
            if not (self._rules and self._rules.ignored(rel, True)) and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                stack.append((rel, entry.path))
        elif not (self._rules and self._rules.ignored(rel, False)):
            out[rel] = (st.st_mtime_ns, st.st_size)

    async def _poll_loop(self, ready: asyncio.Event) -> None:
        """The polling watcher: a pass every ``poll_interval_s``; each path whose (mtime, size) changed, came or
        went is a hint."""
        assert self._stop is not None
        snapshot = await asyncio.to_thread(self._poll_pass, {})
        self._watching = True
        ready.set()
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=self.poll_interval_s)
                break
            except TimeoutError:
                pass
            fresh = await asyncio.to_thread(self._poll_pass, snapshot)
            changed = {p for p, sig in fresh.items() if snapshot.get(p) != sig} | (snapshot.keys() - fresh.keys())
            snapshot = fresh
            if changed:
                self.hints_seen += len(changed)
                self.hints.add(changed)
        self._watching = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start watching, and following the hints."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        ready = asyncio.Event()
        self.hints.follow(self)
        self._tasks = [
            asyncio.create_task(
                self._poll_loop(ready) if self.mode == "polling" else self._watch_loop(ready), name="cairn-watch"
            ),
            asyncio.create_task(self._work_loop(), name="cairn-index-worker"),
        ]
        try:
            await asyncio.wait_for(ready.wait(), timeout=30)
        except TimeoutError:
            log.warning("the file watcher took over 30 s to start")

    async def stop(self, timeout: float = 30.0) -> None:
        """Stop watching; wait (up to ``timeout``) for a running batch to end between notes."""
        if self._stop is None:
            return
        self._stop.set()
        self.wake()
        done, pending = await asyncio.wait(self._tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        for task in done:
            if not task.cancelled() and task.exception():
                log.warning("watcher task ended with %r", task.exception())
        self._watching = False
        self.hints.follow(None)

    async def _watch_loop(self, ready: asyncio.Event) -> None:
        from watchfiles import awatch

        assert self._stop is not None
        backoff = 0.5
        while not self._stop.is_set():
            try:
                watcher = awatch(
                    self.root,
                    watch_filter=self._filter,
                    debounce=50,
                    step=50,
                    stop_event=self._stop,
                    rust_timeout=5000,
                    force_polling=self.force_polling,
                    recursive=True,
                )
                it = watcher.__aiter__()
                nxt = asyncio.ensure_future(it.__anext__())
                # The generator's first step sets up the Rust watcher (inotify watches on every folder)
                # before it first suspends; let it run that far, and we are watching.
                for _ in range(3):
                    await asyncio.sleep(0)
                if nxt.done() and nxt.exception() is not None:
                    raise nxt.exception()  # type: ignore[misc]
                self._watching = True
                ready.set()
                while True:
                    try:
                        changes = await nxt
                    except StopAsyncIteration:
                        break
                    rels = {r for _c, p in changes if (r := self.relative(p)) is not None}
                    self.hints_seen += len(rels)
                    if rels:
                        self.hints.events(rels)
                    nxt = asyncio.ensure_future(it.__anext__())
                backoff = 0.5
            except Exception as exc:  # a watcher error: reconcile (events were lost), then watch again
                self._watching = False
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("file watcher failed (%s); reconciling and watching again", self.last_error)
                self.hints.request_reconcile()
                ready.set()
                try:
                    await asyncio.wait_for(self._stop.wait(), timeout=backoff)
                except TimeoutError:
                    pass
                backoff = min(backoff * 2, 30)
        self._watching = False
        ready.set()

    async def _run(self, fn: Callable[..., Any], *args: Any) -> None:
        assert self._loop is not None
        self.busy = True
        try:
            await self._loop.run_in_executor(self._executor, fn, *args)
        except Exception:
            log.exception("indexing changes failed; a full reconcile follows")
            if fn is not self._reconcile:
                self.hints.request_reconcile()
        finally:
            self.busy = False

    async def _work_loop(self) -> None:
        assert self._wake is not None and self._stop is not None
        next_reconcile = time.monotonic() + self.reconcile_interval_s
        while not self._stop.is_set():
            self._wake.clear()  # before reading the hints: a hint after this point wakes the wait below
            now = time.monotonic()
            due = self.hints.due(
                now, debounce_s=self.debounce_s, max_wait_s=self.max_wait_s, periodic=now >= next_reconcile
            )
            if due.reconcile:
                self.reconciles += 1
                await self._run(self._reconcile)
                next_reconcile = time.monotonic() + self.reconcile_interval_s
                continue
            if due.batch is not None:
                if len(due.batch) > self.max_hints:
                    log.info("%d changed paths at once: reconciling the whole vault instead", len(due.batch))
                    self.hints.request_reconcile()
                    continue
                self.batches += 1
                self.last_batch = frozenset(due.batch)
                await self._run(self._apply_hints, due.batch)
                continue
            # Sleep until the batch is due, the periodic reconcile, or a wake-up.
            quiet_at = due.quiet_at if due.quiet_at is not None else next_reconcile
            wake_at = min(quiet_at, due.retry_at or next_reconcile)
            timeout = self.reconcile_interval_s if due.paused else max(0.0, wake_at - now)
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            except TimeoutError:
                pass

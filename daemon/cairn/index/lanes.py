"""When the index side's work runs: the lanes, each with its thread, and the one timer (docs/design.md, "Contract" →
Freshness). What a run does is below: the notes' text (:mod:`~cairn.index.notes`), the vectors
(:mod:`~cairn.index.vectors`), the PDFs (:mod:`~cairn.index.pdfs`).

- :class:`VaultLane` owns the whole-vault runs (now, or on request) and the **retry** after one failed for lack of
  disk space (a timer, with backoff).
- :class:`SaveLane` owns a **save** and the watcher's **reconcile**, on its one thread, the watcher's.
- :class:`BulkLane` owns the **bulk vectors**, background model work that gives way to saves and questions.
- :class:`PdfLane` indexes the PDFs on their own thread, after the notes.

Pausing is the hints' (:meth:`Hints.pause <cairn.index.hints.Hints.pause>`). Blocking (SQLite, the model, the vault's
files): call from worker threads in async code.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from cairn.config import Config
from cairn.embedder import Embedder
from cairn.events import EventBus
from cairn.index.hints import Hints
from cairn.index.notes import NoteIndexer
from cairn.index.pdfs import PdfIndexer
from cairn.index.report import IndexReport, KeptPlaces, Progress, indexed_json
from cairn.index.vectors import ChunkVectors
from cairn.progress import ProgressLines
from cairn.store import Store, disk_full
from cairn.vault import normalise_rel_path

log = logging.getLogger(__name__)

#: Chunks per vector slice of a save (a few seconds of the model): how long a new save may wait behind an earlier
#: one's vectors before its text is written (:meth:`SaveLane.save`).
WATCH_EMBED_BATCH = 64
#: Seconds before indexing is tried again after a run failed for lack of disk space; doubled after each such
#: failure up to :data:`DISK_FULL_RETRY_MAX_S`, back to the first once a run succeeds.
DISK_FULL_RETRY_FIRST_S = 5.0
DISK_FULL_RETRY_MAX_S = 300.0
#: How often (s) the PDF lane looks again whether the notes' indexing is still busy.
BUSY_POLL_S = 0.05


def lower_thread_priority(niceness: int = 10) -> None:
    """Run the calling thread at a lower CPU priority (Linux: per-thread nice, at least ``niceness``; a thread
    already nicer stays so), so queries stay fast while indexing. Best effort: silently nothing where
    unsupported."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(niceness, os.getpriority(os.PRIO_PROCESS, tid)))
    except (AttributeError, OSError):
        pass


class Runs:
    """The runs under way on every lane (the save lane and the bulk lane may run at once; thread-safe), and the
    request to stop them: the daemon's shutdown or Ctrl-C sets :attr:`stop_requested`, and runs end early (between
    notes, between vector batches); the next run resumes."""

    def __init__(self) -> None:
        self.stop_requested = threading.Event()
        self._n = 0
        self._lock = threading.Lock()

    @contextmanager
    def running(self) -> Iterator[None]:
        with self._lock:
            self._n += 1
        try:
            yield
        finally:
            with self._lock:
                self._n = max(0, self._n - 1)

    @property
    def under_way(self) -> bool:
        return self._n > 0

    def stopping(self) -> bool:
        return self.stop_requested.is_set()


def _progress(events: EventBus, also: Progress | None = None) -> Progress:
    """``progress(phase, done, total)`` to the ``progress`` events, the daemon's log (a line per phase and every
    ~10 s) and ``also``."""
    bus, said = events.progress_callback(), ProgressLines(log.info)

    def both(phase: str, done: int, total: int) -> None:
        bus(phase, done, total)
        said(phase, done, total)
        if also is not None:
            also(phase, done, total)

    return both


def _keep_places(places: KeptPlaces, hints: Hints, report: IndexReport, hinted: Iterable[str] | None) -> None:
    """Keep ``places`` in line with a run and have the watcher look again at what could not be read."""
    again = places.update(report, hinted)
    if again is not None:
        hints.retry_later(again[0], settled=again[1])


class PdfLane:
    """Runs :meth:`PdfIndexer.sync` on its own low-priority thread once :meth:`start`\\ ed (the daemon), for requested
    paths or the whole vault, after the notes' indexing whenever that has work: a run under way on ``runs``, changes
    waiting in ``hints``, or following changes paused. Requests made while a run goes on form the next run; each run
    that changed something is published as ``indexed``, its progress as ``progress`` (``pdf``: files; ``embed``: the
    current PDF's chunks). Not started, :meth:`after_notes` and :meth:`after_save` index the PDFs inline."""

    def __init__(self, pdfs: PdfIndexer, hints: Hints, runs: Runs, events: EventBus) -> None:
        self.pdfs = pdfs
        self.hints = hints
        self.runs = runs
        self.events = events
        self._cond = threading.Condition()
        self._paths: set[str] = set()
        self._scan = False
        self._full = False
        self._running = False
        self._stopping = False
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        """Whether PDFs are indexed on this lane's thread (their vectors too: the bulk lane leaves them)."""
        return self._thread is not None

    def start(self) -> None:
        """Start the thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="cairn-pdf", daemon=True)
            self._thread.start()

    def after_notes(self, *, full: bool, progress: Progress | None, stopped: bool) -> IndexReport | None:
        """After a whole-vault run of the notes: every PDF queued (``full``: re-extracted), or indexed now when the
        lane is not started and the run was not ``stopped`` (their report)."""
        if self.started:
            self.request(None, full=full)
        elif not stopped:
            return self.pdfs.sync(full=full, progress=progress, should_stop=self.runs.stopping)
        return None

    def after_save(self, paths: Iterable[str], *, stopped: bool) -> IndexReport | None:
        """After a save: the hinted paths that may concern PDFs (:meth:`PdfIndexer.hints`) queued, or indexed now
        when the lane is not started and the save was not ``stopped`` (their report)."""
        pdf_hints = self.pdfs.hints(paths)  # PDFs, folders holding some (named Projects.md too), gone paths
        if pdf_hints and self.started:
            self.request(pdf_hints)
        elif pdf_hints and not stopped:
            return self.pdfs.sync(pdf_hints, should_stop=self.runs.stopping)
        return None

    def request(self, paths: Iterable[str] | None = None, *, full: bool = False) -> None:
        """Queue hinted vault-relative paths (files or folders), or — ``paths`` None — a whole-vault scan;
        ``full`` re-extracts unchanged PDFs too. Any thread."""
        with self._cond:
            if paths is None:
                self._scan = True
                self._full = self._full or full
            else:
                self._paths.update(normalise_rel_path(str(p)) for p in paths)
            self._cond.notify_all()

    def idle(self) -> bool:
        """True when nothing is queued or running."""
        with self._cond:
            return not (self._running or self._scan or self._paths)

    def wait_idle(self, timeout: float) -> bool:
        """Block until :meth:`idle` (True) or ``timeout`` seconds pass (False)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._running or self._scan or self._paths:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def stats(self) -> dict:
        """``{queued, current, scanPending}``: hinted paths waiting, the PDF being worked on, whether a scan waits."""
        with self._cond:
            return {"queued": len(self._paths), "current": self.pdfs.current, "scanPending": self._scan}

    def stop(self, timeout: float = 10.0) -> None:
        """End the thread: the file under way is dropped (its extraction killed), the rest stays for the next start."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self.pdfs.close()
        if self._thread is not None:
            self._thread.join(timeout)

    def _stopped(self) -> bool:
        return self._stopping or self.runs.stopping()

    def _busy(self) -> bool:
        return self.hints.paused or self.runs.under_way or self.hints.pending_count() > 0

    def _wait_turn(self) -> None:
        with self._cond:
            while self._busy() and not self._stopped():
                self._cond.wait(BUSY_POLL_S)

    def _loop(self) -> None:
        lower_thread_priority()
        progress = self.events.progress_callback()
        while True:
            with self._cond:
                while not (self._scan or self._paths) and not self._stopped():
                    self._cond.wait()
                if self._stopped():
                    self._running = False
                    self._cond.notify_all()
                    return
                scan, full, paths = self._scan, self._full, self._paths
                self._scan, self._full, self._paths = False, False, set()
                self._running = True
            try:
                report = self.pdfs.sync(
                    None if scan else sorted(paths),
                    full=full,
                    should_stop=self._stopped,
                    wait_turn=self._wait_turn,
                    progress=progress,
                )
                if report.changed:
                    self.events.publish("indexed", indexed_json(report, stopped_early=self.runs.stopping()))
            except Exception:  # the daemon keeps serving; the next request tries again
                log.exception("PDF indexing failed; the daemon keeps serving what is indexed")
            finally:
                with self._cond:
                    self._running = False
                    self._cond.notify_all()


class VaultLane:
    """The whole-vault runs of one vault's index: the notes' text (``notes``), their vectors (``vectors``), then the
    PDFs (``pdf_lane``), progress published on ``events``; what could not be read kept in ``places`` and looked at
    again through ``hints``. ``index_error`` says why the last run failed (None: it did not), ``write_error`` why the
    index cannot be written now (``disk_full``; None while it can)."""

    def __init__(
        self,
        config: Config,
        store: Store,
        notes: NoteIndexer,
        vectors: ChunkVectors,
        pdf_lane: PdfLane,
        hints: Hints,
        places: KeptPlaces,
        events: EventBus,
        runs: Runs,
    ) -> None:
        self.config = config
        self.store = store
        self.notes = notes
        self.vectors = vectors
        self.pdf_lane = pdf_lane
        self.hints = hints
        self.places = places
        self.events = events
        self.runs = runs
        self.index_error: str | None = None
        self.write_error: str | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None  # a requested run, when no watcher follows the vault
        self._full_requested = threading.Event()  # the tray's "Reindex now": the next run re-reads every note
        self._recovery_queued = False  # a reconcile is queued for when the vault is back (vault_is_there)
        self._retry_s = DISK_FULL_RETRY_FIRST_S
        self._retry: threading.Timer | None = None

    def run(
        self, *, full: bool = False, progress: Progress | None = None, vectors: bool = True, foreground: bool = False
    ) -> IndexReport:
        """Index the whole vault now (blocking): text first (keyword-searchable), then vectors (``vectors`` False:
        text only), then the PDFs. Saves go first: the text is written a batch at a time and the vectors are
        background model work, which gives way while a save is indexed, on threads nicer than the caller's;
        ``foreground`` (``cairn index``: a person waits for the run) runs the model at the caller's priority.

        Once stop is requested the run ends early; the next run picks up where it stopped. After
        :meth:`request_full` the next run is a full one whatever ``full`` says. ``progress(phase, done, total)`` is
        called besides the ``progress`` events and the log's lines. Re-raises what the run raised (``index_error``
        then says what it was)."""
        with self.runs.running():
            if self._full_requested.is_set():
                self._full_requested.clear()
                full = True
            try:
                report = self._whole(full, _progress(self.events, progress), vectors, foreground)
            except Exception as exc:
                self.index_error = f"{type(exc).__name__}: {exc}"
                # Retried by vault_is_there() once the vault is back, only when it was gone (not a loop on others).
                vault = self.config.vault  # never None here: the vault was required when the Cairn was built
                self._recovery_queued = vault is not None and vault.is_dir()
                self.retry_if_disk_full(exc)
                self.events.publish("error", {"message": f"Indexing failed: {type(exc).__name__}; see the daemon log."})
                raise
            self.index_error = None
            _keep_places(self.places, self.hints, report, None)
            if not report.stopped:
                self._space_is_back()
            self.events.publish("indexed", indexed_json(report, stopped_early=self.runs.stopping()))
            return report

    def _whole(self, full: bool, progress: Progress, vectors: bool, foreground: bool) -> IndexReport:
        stop = self.runs.stopping
        started = time.perf_counter()
        report = self.notes.index(full=full, progress=progress, should_stop=stop)
        if not report.stopped and vectors:
            report.vectors_written, report.texts_embedded = self.vectors.embed_pending(
                progress=progress,
                should_stop=stop,
                pdf=False if self.pdf_lane.started else None,
                background=not foreground,
            )
        if vectors and not report.stopped and not stop():
            report.cache_pruned = self.vectors.prune_embedding_cache()
        report.elapsed_s = time.perf_counter() - started
        pdfs = self.pdf_lane.after_notes(full=full, progress=progress, stopped=report.stopped)
        return report.merge(pdfs) if pdfs is not None else report

    def request(self) -> None:
        """Queue a run and return at once: the watcher's reconcile while one follows the vault, else an incremental
        run on a thread of its own, one at a time."""
        if self.hints.followed:
            self.hints.request_reconcile()
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run_requested, name="cairn-reindex", daemon=True)
                self._thread.start()

    def request_full(self) -> None:
        """The tray's "Reindex now": queue a run that re-reads and re-parses every note (vectors of unchanged text
        still come from the cache; ``lastIngestedAt`` moves)."""
        self._full_requested.set()
        self.request()

    def _run_requested(self) -> None:
        lower_thread_priority()  # the daemon's own run (its parse workers inherit the priority)
        try:
            self.run()
        except Exception:
            log.exception("re-indexing failed; the daemon keeps serving what is indexed")
        finally:
            self.store.close_thread_connection()  # this thread ends (one per request)

    def wait(self, timeout: float) -> bool:
        """Wait for a requested run's thread to end; False if it still runs after ``timeout`` s."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def vault_is_there(self) -> bool:
        """Whether the vault folder is there now. When it is and the last whole run failed (``index_error``, e.g.
        the folder was gone: moved, renamed, a drive unmounted), a run is requested once, and its success clears
        ``index_error``: no one has to ask for a full re-index."""
        try:
            there = self.config.vault is not None and self.config.vault.is_dir()
        except OSError:
            there = False
        if there and self.index_error is not None and not self.runs.under_way and not self._recovery_queued:
            self._recovery_queued = True
            log.info("the vault folder %s is there again; reconciling the index with it", self.config.vault)
            self.request()
        return there

    def retry_if_disk_full(self, exc: BaseException) -> None:
        """After a run (on any lane) that failed for lack of disk space: say so (``write_error``, ``/health``) and
        request a run in ``_retry_s`` seconds (then twice as long, up to :data:`DISK_FULL_RETRY_MAX_S`), so indexing
        resumes by itself once space is freed. Other failures: nothing."""
        if not disk_full(exc) or self.runs.stopping():
            return
        self.write_error = "disk_full"
        with self._lock:
            if self._retry is not None and self._retry.is_alive():
                return  # one retry queued at a time (a failed watcher batch is followed by a failed reconcile)
            delay, self._retry_s = self._retry_s, min(self._retry_s * 2, DISK_FULL_RETRY_MAX_S)
            log.error("the index cannot be written: the disk is full (%s); trying again in %.0f s", exc, delay)
            self._retry = threading.Timer(delay, self._retry_now)
            self._retry.daemon = True
            self._retry.start()

    def _retry_now(self) -> None:
        if not self.runs.stopping():
            self.request()

    def _space_is_back(self) -> None:
        """A run wrote what it had to: forget a disk-full state and its backoff."""
        if self.write_error is not None:
            log.info("the index is written again (disk space was freed)")
        self.write_error = None
        self._retry_s = DISK_FULL_RETRY_FIRST_S

    def close(self) -> None:
        """Cancel a queued retry (runs end when stop is requested)."""
        if self._retry is not None:
            self._retry.cancel()


class BulkLane:
    """Fills every missing vector (``vectors``: tier 1 first, then complete, most recently modified notes first;
    PDF chunks too unless the PDF lane is started) on its own low-priority thread, as background model work; a failure
    for lack of disk space is retried by ``vault_lane``."""

    def __init__(
        self,
        store: Store,
        vectors: ChunkVectors,
        vault_lane: VaultLane,
        pdf_lane: PdfLane,
        events: EventBus,
        runs: Runs,
    ) -> None:
        self.store = store
        self.vectors = vectors
        self.vault_lane = vault_lane
        self.pdf_lane = pdf_lane
        self.events = events
        self.runs = runs
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wanted = False

    def request(self) -> None:
        """Have the thread fill every missing vector; returns at once. Requests made while it runs make it look
        again when done."""
        with self._lock:
            self._wanted = True
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="cairn-vectors", daemon=True)
                self._thread.start()

    def wait(self, timeout: float) -> bool:
        """Wait for the thread to end; False if it still runs after ``timeout`` s."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def _loop(self) -> None:
        lower_thread_priority()
        try:
            while not self.runs.stopping():
                with self._lock:
                    if not self._wanted:
                        self._thread = None
                        return
                    self._wanted = False
                self._fill()
        finally:
            self.store.close_thread_connection()

    def _fill(self) -> None:
        with self.runs.running():
            try:
                written, embedded = self.vectors.embed_pending(
                    progress=_progress(self.events),
                    should_stop=self.runs.stopping,
                    pdf=False if self.pdf_lane.started else None,
                )
                if not self.runs.stopping():
                    self.vectors.prune_embedding_cache()
                    if written or embedded:
                        log.info("vectors complete: %d passages given vectors, %d texts embedded", written, embedded)
            except Exception as exc:
                self.vault_lane.retry_if_disk_full(exc)
                log.exception("embedding failed; the daemon keeps serving what is indexed")


class SaveLane:
    """A save and the watcher's reconcile, on the lane's one low-priority thread (:attr:`executor`, handed to the
    watcher): a save's text (``notes``), then its complete vectors (``vectors``) before anything else, then the
    PDFs among its paths (``pdf_lane``); a reconcile's text, then its vectors on ``bulk_lane``. Meanwhile the bulk's
    model runs wait (a save is foreground work for ``embedder``, as a question is). A failure for lack of disk space
    is retried by ``vault_lane``."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        notes: NoteIndexer,
        vectors: ChunkVectors,
        vault_lane: VaultLane,
        bulk_lane: BulkLane,
        pdf_lane: PdfLane,
        hints: Hints,
        places: KeptPlaces,
        events: EventBus,
        runs: Runs,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.notes = notes
        self.vectors = vectors
        self.vault_lane = vault_lane
        self.bulk_lane = bulk_lane
        self.pdf_lane = pdf_lane
        self.hints = hints
        self.places = places
        self.events = events
        self.runs = runs
        #: The lane's thread (started with the first save): the watcher runs its batches and reconciles there.
        self.executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="cairn-index", initializer=lower_thread_priority
        )
        self._saved_notes: set[int] = set()  # notes saves wrote whose vectors are not complete yet

    def save(self, paths: set[str]) -> IndexReport:
        """Index a batch of changed paths (file-event hints, re-stat'ed), then fill their vectors at once
        (keyword-searchable first). Blocking."""
        with self.runs.running():
            try:
                with self.embedder.foreground():
                    return self._save(paths)
            except Exception as exc:
                self.vault_lane.retry_if_disk_full(exc)
                raise

    def _save(self, paths: set[str]) -> IndexReport:
        stop = self.runs.stopping
        report = self.notes.index_paths(paths, should_stop=stop)
        _keep_places(self.places, self.hints, report, paths)
        if not report.stopped:
            self._saved_notes.update(self.store.note_ids(report.hinted))
            saved = sorted(self._saved_notes)
            report.vectors_written, report.texts_embedded = self.vectors.embed_notes(
                saved, batch_size=WATCH_EMBED_BATCH, should_stop=self._yield_to_new_changes(stop)
            )
            if not self.store.pending_chunks(1, note_ids=saved, below=2):
                self._saved_notes.clear()
        pdfs = self.pdf_lane.after_save(paths, stopped=report.stopped)
        if pdfs is not None:
            report.merge(pdfs)
        if report.changed:
            self.events.publish("indexed", indexed_json(report, stopped_early=self.runs.stopping()))
            log.info(
                "changes indexed: %d added, %d updated, %d removed, %d skipped; %d texts embedded",
                report.added,
                report.updated,
                report.deleted,
                len(report.skipped),
                report.texts_embedded,
            )
        return report

    def reconcile(self) -> IndexReport:
        """The watcher's full reconcile (the disk against the store): the text of what changed, then its vectors
        handed to the bulk lane, so no save waits behind them."""
        report = self.vault_lane.run(vectors=False)
        if not report.stopped:
            self.bulk_lane.request()
        return report

    def _yield_to_new_changes(self, stop: Callable[[], bool]) -> Callable[[], bool]:
        """``should_stop`` for the vectors of a save: after its first slice, it also stops while changes wait in the
        hints, so their text is written (keyword-searchable) next and the remaining vectors follow in the next
        save: one long note's vectors never keep later saves out of search."""
        first = True

        def should_stop() -> bool:
            nonlocal first
            if stop():
                return True
            if first:  # every save makes progress, however often files change
                first = False
                return False
            return self.hints.pending_count() > 0

        return should_stop

    def close(self) -> None:
        """Stop the lane's thread once its batch under way ends (what is queued is dropped)."""
        self.executor.shutdown(wait=False, cancel_futures=True)

"""Keeping one vault's index up to date while the daemon serves it (layer 2): :class:`Indexing` runs the whole-vault
and watcher-batch runs, queues re-index requests, pauses and resumes following file changes, reports
``/index/stats`` and ``/health``, and queues a reconcile once a vault folder that was gone is back.

Blocking (SQLite, the model, the vault's files): call from worker threads in async code.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from cairn import __version__
from cairn.config import Config
from cairn.embedder import Embedder
from cairn.errors import CairnError
from cairn.events import EventBus
from cairn.indexer import Indexer, IndexReport
from cairn.library import checked_rel_path
from cairn.pdf_index import PdfIndexer
from cairn.pdf_queue import PdfQueue
from cairn.progress import ProgressLines
from cairn.store import IndexStats, Store, disk_full
from cairn.vault import paths_under, resolve_in_vault

#: Chunks per vector slice of a watcher batch (a few seconds of the model): how long a new save may wait behind
#: an earlier one's vectors before its text is written (:meth:`Indexing.index_paths`).
WATCH_EMBED_BATCH = 64
#: Seconds before indexing is tried again after a run failed for lack of disk space; doubled after each such
#: failure up to :data:`DISK_FULL_RETRY_MAX_S`, back to the first once a run succeeds.
DISK_FULL_RETRY_FIRST_S = 5.0
DISK_FULL_RETRY_MAX_S = 300.0

log = logging.getLogger(__name__)


def index_stats_json(stats: IndexStats) -> dict[str, Any]:
    """The JSON view of the index's counts (``/index/stats``, ``cairn status --json``): {notes, pdfs, skipped,
    chunks, vectors, pending, refining, lastIngestedAt, errors: [{filePath, reason, skipped}]}: ``vectors`` chunks
    have one, ``pending`` none yet, ``refining`` (of ``vectors``) only their first, whole-chunk vector."""
    return {
        "notes": stats.notes,
        "pdfs": stats.pdfs,
        "skipped": stats.skipped,
        "chunks": stats.chunks,
        "vectors": stats.vectors,
        "pending": stats.pending,
        "refining": stats.refining,
        "lastIngestedAt": stats.last_ingested_at,
        "errors": [{"filePath": e.path, "reason": e.reason, "skipped": e.skipped} for e in stats.errors],
    }


class Watcher(Protocol):
    """What :class:`Indexing` needs of the file watcher (:class:`cairn.watcher.VaultWatcher`, an adapter)."""

    @property
    def watching(self) -> bool: ...
    def add_hints(self, paths: Iterable[str]) -> None: ...
    def request_reconcile(self) -> None: ...
    def pending_count(self) -> int: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def stats(self) -> dict[str, Any]: ...
    def retry_later(self, paths: Iterable[str], *, settled: Iterable[str] = ()) -> None: ...


class RunCount:
    """How many indexing runs are under way (the save lane and the bulk lane may both run): ``is_set()`` while one
    is; thread-safe."""

    def __init__(self) -> None:
        self._n = 0
        self._lock = threading.Lock()

    def set(self) -> None:
        with self._lock:
            self._n += 1

    def clear(self) -> None:
        with self._lock:
            self._n = max(0, self._n - 1)

    def is_set(self) -> bool:
        return self._n > 0


class Indexing:
    """The index-keeping use case for one vault: ``indexer`` (notes) and ``pdfs`` (PDF attachments) over ``store``,
    progress published on ``events``. ``recovered`` is what opening a damaged database did ({movedTo, reason, at};
    ``None`` when nothing was), reported in :meth:`stats`.

    ``watcher`` (set by the composition root while it watches the vault) takes re-index requests as hints; without
    one, a request starts an incremental run in a background thread.

    Two lanes (docs/design.md, "Contract" → Freshness): the **save lane** (the watcher's thread: :meth:`index_paths`,
    :meth:`reconcile`) writes a save's text and then its complete vectors; the **bulk lane** (:meth:`index` at
    start, :meth:`request_vectors` after a reconcile) writes the whole vault's text a batch at a time and its
    vectors in tiers as background model work, which waits before each ONNX run while a save is being indexed (the
    save lane holds :meth:`Embedder.foreground <cairn.embedder.Embedder.foreground>`, as a question does).
    ``pdf_queue`` (:meth:`start_pdf_queue`, the daemon) indexes PDFs on their own low-priority thread; without it
    PDFs are indexed inline after the notes.
    """

    def __init__(
        self,
        config: Config,
        store: Store,
        embedder: Embedder,
        indexer: Indexer,
        pdfs: PdfIndexer,
        events: EventBus,
        *,
        recovered: dict[str, Any] | None = None,
        memory: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.embedder = embedder
        self.indexer = indexer
        self.pdfs = pdfs
        self.events = events
        self.recovered = recovered
        self.watcher: Watcher | None = None
        self.pdf_queue: PdfQueue | None = None
        #: Set while a notes run (whole vault, a watcher batch, or the bulk's vectors) is under way.
        self.running = RunCount()
        #: Daemon shutdown: runs end early (between notes, between vector batches); the next run resumes.
        self.stop_requested = threading.Event()
        self.last_report: IndexReport | None = None
        #: The daemon's memory breakdown for :meth:`stats` (:mod:`cairn.memory`; ``None``: not reported).
        self.memory = memory
        self.index_error: str | None = None
        #: The places that exist but could not be read at the last look (vault-relative, ``""`` the vault folder;
        #: → the OS's reason): what is indexed there is kept and the watcher looks again (``/index/stats``).
        self.unreadable: dict[str, str] = {}
        #: The notes only an iCloud placeholder stands for at the last look (→ what to do), their last indexed
        #: version kept; not retried: the download is a file event (``/index/stats`` ``notDownloaded``).
        self.not_downloaded: dict[str, str] = {}
        self._reindex_lock = threading.Lock()
        self._reindex_thread: threading.Thread | None = None
        self._recovery_queued = False  # a reconcile is queued for when the vault is back (_vault_is_there)
        self._paused = False
        self._full_requested = threading.Event()  # the tray's "Reindex now": the next run re-reads every note
        #: Why the index cannot be written now ("disk_full"), None while it can; said by /health.
        self.write_error: str | None = None
        self._retry_s = DISK_FULL_RETRY_FIRST_S
        self._retry: threading.Timer | None = None
        self._saved_notes: set[int] = set()  # notes saves wrote whose vectors are not complete yet
        self._bulk_lock = threading.Lock()
        self._bulk_thread: threading.Thread | None = None
        self._bulk_wanted = False
        self._bulk_init: Callable[[], None] | None = None

    # ------------------------------------------------------------------------------------------------ runs
    def index(
        self,
        *,
        full: bool = False,
        progress: Callable[[str, int, int], None] | None = None,
        vectors: bool = True,
    ) -> IndexReport:
        """Run both indexing phases over the whole vault (blocking): text first (keyword-searchable), then vectors
        (``vectors`` False: text only). Saves go first: the text is written a batch at a time and the vectors are
        background model work, which gives way while a save is indexed.

        Once ``stop_requested`` is set the run ends early; the next run picks up where it stopped. After
        :meth:`request_full_reindex` the next run is a full one whatever ``full`` says. ``progress(phase, done,
        total)`` is called besides the ``progress`` events and the log's lines (:class:`ProgressLines`). Re-raises
        what the indexer raised (``index_error`` then says what it was)."""
        self.running.set()
        if self._full_requested.is_set():
            self._full_requested.clear()
            full = True
        bus = self.events.progress_callback()
        said = ProgressLines(log.info)  # the daemon's log: a line per phase and every ~10 s

        def both(phase: str, done: int, total: int) -> None:
            bus(phase, done, total)
            said(phase, done, total)
            if progress is not None:
                progress(phase, done, total)

        try:
            report = self.indexer.index(
                full=full,
                progress=both,
                should_stop=self.stop_requested.is_set,
                pdf_vectors=self.pdf_queue is None,
                vectors=vectors,
            )
            if self.pdf_queue is not None:
                self.pdf_queue.request(None, full=full)
            elif not report.stopped:
                report.merge(self.pdfs.sync(full=full, progress=both, should_stop=self.stop_requested.is_set))
            self.last_report = report
            self.index_error = None
            self._note_unreadable(report, None)
            if not report.stopped:
                self._space_is_back()
            self._publish_indexed(report)
            return report
        except Exception as exc:
            self.index_error = f"{type(exc).__name__}: {exc}"
            # Retried by stats() once the vault is back, only when it was gone (not a loop on other failures).
            vault = self.config.vault  # never None here: the vault was required when the Cairn was built
            self._recovery_queued = vault is not None and vault.is_dir()
            self._retry_if_disk_full(exc)
            self.events.publish("error", {"message": f"Indexing failed: {type(exc).__name__}; see the daemon log."})
            raise
        finally:
            self.running.clear()

    def index_paths(self, paths: set[str]) -> IndexReport:
        """Index a batch of changed paths (file-event hints, re-stat'ed), then fill their vectors at once
        (keyword-searchable first). Blocking; runs on the watcher's indexing thread. Meanwhile the bulk's model runs
        wait (the save is foreground work for the embedder, as a question is)."""
        self.running.set()
        try:
            with self.embedder.foreground():
                return self._save(paths)
        except Exception as exc:
            self._retry_if_disk_full(exc)
            raise
        finally:
            self.running.clear()

    def _save(self, paths: set[str]) -> IndexReport:
        stop = self.stop_requested.is_set
        report = self.indexer.index_paths(paths, should_stop=stop)
        self._note_unreadable(report, paths)
        if not report.stopped:
            self._saved_notes.update(self.store.note_ids(report.hinted))
            saved = sorted(self._saved_notes)
            report.vectors_written, report.texts_embedded = self.indexer.embed_notes(
                saved, batch_size=WATCH_EMBED_BATCH, should_stop=self._yield_to_new_changes(stop)
            )
            if not self.store.pending_chunks(1, note_ids=saved, below=2):
                self._saved_notes.clear()
        pdf_hints = self.pdfs.hints(paths)  # PDFs, folders holding some (named Projects.md too), gone paths
        if pdf_hints and self.pdf_queue is not None:
            self.pdf_queue.request(pdf_hints)
        elif pdf_hints and not report.stopped:
            report.merge(self.pdfs.sync(pdf_hints, should_stop=stop))
        if report.added or report.updated or report.deleted or report.skipped:
            self._publish_indexed(report)
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
        """The watcher's full reconcile (the disk against the store) on the save lane: the text of what changed, then
        its vectors handed to the bulk lane (:meth:`request_vectors`), so no save waits behind them."""
        report = self.index(vectors=False)
        if not report.stopped:
            self.request_vectors()
        return report

    # ------------------------------------------------------------------------------------------------ bulk lane
    def request_vectors(self) -> None:
        """Have the bulk lane fill every missing vector (tier 1 first, then complete, most recently modified notes
        first) on its own thread; returns at once. Requests made while it runs make it look again when done."""
        with self._bulk_lock:
            self._bulk_wanted = True
            if self._bulk_thread is None or not self._bulk_thread.is_alive():
                self._bulk_thread = threading.Thread(target=self._bulk_loop, name="cairn-vectors", daemon=True)
                self._bulk_thread.start()

    def _bulk_loop(self) -> None:
        if self._bulk_init is not None:
            self._bulk_init()
        try:
            while not self.stop_requested.is_set():
                with self._bulk_lock:
                    if not self._bulk_wanted:
                        self._bulk_thread = None
                        return
                    self._bulk_wanted = False
                self._bulk_vectors()
        finally:
            self.store.close_thread_connection()

    def _bulk_vectors(self) -> None:
        self.running.set()
        try:
            bus, said = self.events.progress_callback(), ProgressLines(log.info)

            def both(phase: str, done: int, total: int) -> None:
                bus(phase, done, total)
                said(phase, done, total)

            written, embedded = self.indexer.embed_pending(
                progress=both,
                should_stop=self.stop_requested.is_set,
                pdf=None if self.pdf_queue is None else False,
            )
            if not self.stop_requested.is_set():
                self.indexer.prune_embedding_cache()
                if written or embedded:
                    log.info("vectors complete: %d passages given vectors, %d texts embedded", written, embedded)
        except Exception as exc:
            self._retry_if_disk_full(exc)
            log.exception("embedding failed; the daemon keeps serving what is indexed")
        finally:
            self.running.clear()

    def set_bulk_thread_init(self, init: Callable[[], None] | None) -> None:
        """``init`` runs first on each bulk-lane thread (the daemon lowers its priority)."""
        self._bulk_init = init

    def wait_for_vectors(self, timeout: float) -> bool:
        """Wait for the bulk lane's thread to end; False if it still runs after ``timeout`` s."""
        thread = self._bulk_thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def _note_unreadable(self, report: IndexReport, hinted: set[str] | None) -> None:
        """Keep :attr:`unreadable` in line with a run (``hinted``: a watcher batch's paths; None: the whole vault)
        and have the watcher look again at what could not be read (with backoff, then a reconcile)."""
        before = set(self.unreadable)
        if hinted is None:
            self.unreadable, self.not_downloaded = {}, {}
        else:
            for places in (self.unreadable, self.not_downloaded):
                for path in paths_under(places, hinted):
                    del places[path]
        self.unreadable.update(report.deferred)
        self.not_downloaded.update(report.not_downloaded)
        if self.watcher is not None and (report.deferred or before):
            self.watcher.retry_later(sorted({p for p, _r in report.deferred}), settled=before - set(self.unreadable))

    def _retry_if_disk_full(self, exc: BaseException) -> None:
        """After a run that failed for lack of disk space: say so (``write_error``, ``/health``) and queue a
        reconcile in ``_retry_s`` seconds (then twice as long, up to :data:`DISK_FULL_RETRY_MAX_S`), so indexing
        resumes by itself once space is freed. Other failures: nothing."""
        if not disk_full(exc) or self.stop_requested.is_set():
            return
        self.write_error = "disk_full"
        with self._reindex_lock:
            if self._retry is not None and self._retry.is_alive():
                return  # one retry queued at a time (a failed watcher batch is followed by a failed reconcile)
            delay, self._retry_s = self._retry_s, min(self._retry_s * 2, DISK_FULL_RETRY_MAX_S)
            log.error("the index cannot be written: the disk is full (%s); trying again in %.0f s", exc, delay)
            self._retry = threading.Timer(delay, self._retry_now)
            self._retry.daemon = True
            self._retry.start()

    def _retry_now(self) -> None:
        if not self.stop_requested.is_set():
            self.request_reindex()

    def _space_is_back(self) -> None:
        """A run wrote what it had to: forget a disk-full state and its backoff."""
        if self.write_error is not None:
            log.info("the index is written again (disk space was freed)")
        self.write_error = None
        self._retry_s = DISK_FULL_RETRY_FIRST_S

    def _yield_to_new_changes(self, stop: Callable[[], bool]) -> Callable[[], bool]:
        """``should_stop`` for the vector phase of a watcher batch: after its first slice, it also stops while the
        watcher holds changes not yet applied, so their text is written (keyword-searchable) next and the
        remaining vectors follow in the next batch: one long note's vectors never keep later saves out of
        search."""
        first = True

        def should_stop() -> bool:
            nonlocal first
            if stop():
                return True
            if first:  # every batch makes progress, however often files change
                first = False
                return False
            return self.watcher is not None and self.watcher.pending_count() > 0

        return should_stop

    def start_pdf_queue(
        self, watcher: Watcher | None = None, *, thread_init: Callable[[], None] | None = None
    ) -> PdfQueue:
        """Index PDFs from now on in :attr:`pdf_queue`, on its own thread (``thread_init`` runs first on it: the
        daemon lowers its priority). The queue waits while the notes' indexing runs or ``watcher`` holds file
        events not yet applied (PDFs never delay notes), and while indexing is paused (tray,
        ``POST /index/pause``). Stopped by :meth:`close`."""

        def busy() -> bool:
            return self._paused or self.running.is_set() or (watcher is not None and watcher.pending_count() > 0)

        self.pdf_queue = PdfQueue(
            self.pdfs,
            busy=busy,
            should_stop=self.stop_requested.is_set,
            on_report=self._publish_indexed,
            thread_init=thread_init,
            progress=self.events.progress_callback(),
        )
        self.pdf_queue.start()
        return self.pdf_queue

    def _publish_indexed(self, report: IndexReport) -> None:
        self.events.publish(
            "indexed",
            {
                "added": report.added,
                "updated": report.updated,
                "removed": report.deleted,
                "skipped": len(report.skipped),
                "elapsedS": round(report.elapsed_s, 2),
                "stoppedEarly": self.stop_requested.is_set(),
            },
        )

    # ------------------------------------------------------------------------------------------------ requests
    def request_reindex(self, path: str | None = None) -> dict[str, Any]:
        """``POST /index/reindex``: queue work and return ``{queued, path}`` at once. ``path`` (checked to be inside
        the vault: :class:`~cairn.errors.PathOutsideVaultError` otherwise) becomes a watcher hint; no path asks for a
        full reconcile. Without a watcher an incremental run starts in a background thread, one at a time."""
        rel = None
        if path is not None:
            rel = checked_rel_path(path)
            resolve_in_vault(self.config.require_vault(), rel)
        if self.watcher is not None:
            if rel is not None:
                self.watcher.add_hints([rel])
            else:
                self.watcher.request_reconcile()
            return {"queued": True, "path": rel}
        with self._reindex_lock:
            if self._reindex_thread is None or not self._reindex_thread.is_alive():
                self._reindex_thread = threading.Thread(target=self._reindex_run, name="cairn-reindex", daemon=True)
                self._reindex_thread.start()
        return {"queued": True, "path": rel}

    def request_full_reindex(self) -> dict[str, Any]:
        """The tray's "Reindex now": queue a run that re-reads and re-parses every note (vectors of unchanged
        text still come from the cache; ``lastIngestedAt`` moves). Returns at once, like :meth:`request_reindex`."""
        self._full_requested.set()
        return self.request_reindex()

    def _reindex_run(self) -> None:
        try:
            self.index()
        except Exception:
            log.exception("re-indexing failed; the daemon keeps serving what is indexed")
        finally:
            self.store.close_thread_connection()  # this thread ends (one per POST /index/reindex)

    def wait_for_indexing(self, timeout: float) -> bool:
        """Wait for a background re-index thread to end; False if it still runs after ``timeout`` s."""
        thread = self._reindex_thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def pause(self) -> None:
        """Stop following file changes (the tray's and ``POST /index/pause``'s action)."""
        self._paused = True
        if self.watcher is not None:
            self.watcher.pause()

    def resume(self) -> None:
        """Follow file changes again; a reconcile picks up what changed while paused."""
        self._paused = False
        if self.watcher is not None:
            self.watcher.resume()

    def set_paused(self, paused: bool) -> dict[str, bool]:
        """``POST /index/pause`` (True) and ``/index/resume`` (False): {paused, watching} afterwards."""
        self.pause() if paused else self.resume()
        watching = self.watcher.watching if self.watcher is not None else False
        return {"paused": self._paused, "watching": watching}

    # ------------------------------------------------------------------------------------------------ reports
    def stats(self) -> dict[str, Any]:
        """``/index/stats``: {notes, skipped, chunks, vectors, pending, lastIngestedAt, indexing, watching, paused,
        pendingPaths, recovered, errors, vault, schemaVersion, model, indexError, pdf, unreadable, watcher}. ``pending``
        counts chunks awaiting vectors plus changed paths awaiting indexing. ``unreadable``: the places that could
        not be read at the last look, their indexed notes kept: [{filePath, reason}]; ``notDownloaded`` the same for
        iCloud placeholders; ``watcher`` how the vault is watched and its cost (``VaultWatcher.mode_stats``). Queues
        the reconcile of a vault that is back."""
        out = index_stats_json(self.store.stats())
        watch = self.watcher.stats() if self.watcher is not None else {}
        pending_paths = int(watch.get("pendingPaths", 0))
        out["pending"] += pending_paths
        out.update({"pendingPaths": pending_paths, "recovered": self.recovered})
        pdf_busy = self.pdf_queue is not None and not self.pdf_queue.idle()  # a PDF being read counts as indexing
        vault_there = self._vault_is_there()
        index_error = self.index_error
        if not vault_there:
            index_error = (
                f"the vault folder {str(self.config.vault)!r} is missing or not a folder (moved, renamed or "
                "on a drive not mounted); searches answer from the index as it was"
            )
        out.update(
            {
                "indexing": self.running.is_set() or pdf_busy,
                "watching": bool(watch.get("watching", False)) and vault_there,
                "paused": bool(watch.get("paused", self._paused)),
                "watcher": watch.get("watcher"),
                "vault": str(self.config.vault),
                "schemaVersion": self.store.schema_version,
                "model": self.embedder.model_id,
                "indexError": index_error,
                "pdf": self.pdf_queue.stats() if self.pdf_queue is not None else None,
                "unreadable": [{"filePath": p or ".", "reason": r} for p, r in sorted(self.unreadable.items())],
                "notDownloaded": [{"filePath": p, "reason": r} for p, r in sorted(self.not_downloaded.items())],
                "memory": self.memory() if self.memory is not None else None,
            }
        )
        return out

    def _vault_is_there(self) -> bool:
        """Whether the vault folder is there now. When it is and the last whole scan failed (``index_error``, e.g.
        the folder was gone: moved, renamed, a drive unmounted), a reconcile is queued once (the watcher's, else a
        background run), and its success clears ``index_error``: no one has to ask for a full re-index."""
        try:
            there = self.config.vault is not None and self.config.vault.is_dir()
        except OSError:
            there = False
        if there and self.index_error is not None and not self.running.is_set() and not self._recovery_queued:
            self._recovery_queued = True
            log.info("the vault folder %s is there again; reconciling the index with it", self.config.vault)
            self.request_reindex()
        return there

    def health(self) -> dict[str, Any]:
        """``/health``: {status, version, vaultId, store: {ok, reason}, embedder, llm}; ``vaultId`` says which vault
        this daemon serves (:func:`cairn.config.vault_id_of`: a client holding another vault's id refuses it).
        ``status`` is ``ok`` only when the store can be read and written and the model answers. ``store.reason``
        (``None`` when ok) is a code, never a path (``/health`` needs no token): ``disk_full`` (the last run could
        not write; retried with backoff), ``index_file_changed`` (the index file was deleted or replaced while
        served), ``unreadable``. Never raises (a failed check is logged and reported)."""
        store_ok = embedder_ok = True
        reason = self.write_error
        try:
            self.store.check_readable()
        except Exception as exc:  # report, never raise, from a health check
            reason = exc.code if isinstance(exc, CairnError) else "unreadable"
            log.warning("health: store check failed: %s", exc)
        store_ok = reason is None
        try:
            embedder_ok = self.embedder.embed_query("health").shape == (self.embedder.dim,)
        except Exception as exc:
            embedder_ok = False
            log.warning("health: embedder check failed: %s", exc)
        return {
            "status": "ok" if store_ok and embedder_ok else "degraded",
            "version": __version__,
            "vaultId": self.config.vault_id,
            "store": {"ok": store_ok, "reason": reason},
            "embedder": {"ok": embedder_ok, "model": self.embedder.model_id},
            "llm": {"configured": self.config.llm.configured, "reachable": False, "remote": self.config.llm.remote},
        }

    def close(self) -> None:
        """Ask running work to stop and stop the PDF queue (the store is closed by its owner)."""
        self.stop_requested.set()
        if self._retry is not None:
            self._retry.cancel()
        if self.pdf_queue is not None:
            self.pdf_queue.stop()
        self.pdfs.close()

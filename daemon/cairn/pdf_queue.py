"""The daemon's PDF worker thread (:class:`PdfQueue`): runs :meth:`cairn.pdf_index.PdfIndexer.sync` for the
requested PDFs after the notes' indexing (see :mod:`cairn.pdf_index`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from cairn.indexer import IndexReport, Progress
from cairn.pdf_index import PdfIndexer
from cairn.vault import normalise_rel_path

log = logging.getLogger(__name__)

#: How often (s) the queue looks again whether the notes' indexing is still busy.
BUSY_POLL_S = 0.05


class PdfQueue:
    """The daemon's PDF worker: one thread that runs :meth:`PdfIndexer.sync` for requested paths (or the
    whole vault), after the notes' indexing whenever that has work (``busy()``; see the module docstring).

    :meth:`request` may be called from any thread; requests made while a run goes on form the next run.
    ``on_report(report)`` is called after each run that changed something; ``progress(phase, done, total)``
    gets ``pdf`` (files) and ``embed`` (the current PDF's chunks). ``thread_init`` runs first on
    the worker thread (the daemon lowers its CPU priority)."""

    def __init__(
        self,
        pdfs: PdfIndexer,
        *,
        busy: Callable[[], bool],
        should_stop: Callable[[], bool],
        on_report: Callable[[IndexReport], None] | None = None,
        thread_init: Callable[[], None] | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.pdfs = pdfs
        self._progress = progress
        self._busy = busy
        self._should_stop = should_stop
        self._on_report = on_report
        self._thread_init = thread_init
        self._cond = threading.Condition()
        self._paths: set[str] = set()
        self._scan = False
        self._full = False
        self._running = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.last_report: IndexReport | None = None

    def start(self) -> None:
        """Start the worker thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="cairn-pdf", daemon=True)
            self._thread.start()

    def request(self, paths: Iterable[str] | None = None, *, full: bool = False) -> None:
        """Queue hinted vault-relative paths (files or folders), or — ``paths`` None — a whole-vault scan;
        ``full`` re-extracts unchanged PDFs too."""
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
        """End the worker: the file under way is dropped (its extraction killed), the rest stays for the next start."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self.pdfs.close()
        if self._thread is not None:
            self._thread.join(timeout)

    def _stopped(self) -> bool:
        return self._stopping or self._should_stop()

    def _wait_turn(self) -> None:
        with self._cond:
            while self._busy() and not self._stopped():
                self._cond.wait(BUSY_POLL_S)

    def _loop(self) -> None:
        if self._thread_init is not None:
            self._thread_init()
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
                    progress=self._progress,
                )
                self.last_report = report
                if self._on_report is not None and (report.added or report.updated or report.deleted or report.skipped):
                    self._on_report(report)
            except Exception:  # the daemon keeps serving; the next request tries again
                log.exception("PDF indexing failed; the daemon keeps serving what is indexed")
            finally:
                with self._cond:
                    self._running = False
                    self._cond.notify_all()

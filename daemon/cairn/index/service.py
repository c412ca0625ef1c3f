"""Keeping one vault's index up to date while the daemon serves it (:class:`IndexService`): its lanes, built at
construction, and the controls the edges call — ``/index/stats``, ``/health``, re-index requests, pause and resume.

Blocking (SQLite, the model, the vault's files): call from worker threads in async code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cairn.config import Config
from cairn.embedder import Embedder
from cairn.events import EventBus
from cairn.index.hints import Hints
from cairn.index.lanes import BulkLane, PdfLane, Runs, SaveLane, VaultLane
from cairn.index.notes import NoteIndexer
from cairn.index.pdfs import PdfIndexer
from cairn.index.report import IndexReport, KeptPlaces, Progress, index_health, stats_json
from cairn.index.vectors import ChunkVectors
from cairn.store import Store
from cairn.vault import checked_rel_path, resolve_in_vault


class IndexService:
    """The index-keeping use case for one vault: ``notes`` (the notes' text), ``vectors`` and ``pdfs`` over ``store``,
    progress published on ``events``, in the lanes of :mod:`cairn.index.lanes` (:attr:`vault_lane`,
    :attr:`save_lane`, :attr:`bulk_lane`, :attr:`pdf_lane`) around one :attr:`hints`, which a file watcher follows
    once the daemon starts one (:class:`cairn.index.watch.VaultWatcher`). ``recovered`` is what opening a damaged
    database did ({movedTo, reason, at}; ``None`` when nothing was); ``memory()`` the daemon's memory breakdown
    (:mod:`cairn.memory`; ``None``: not reported); both in :meth:`stats`."""

    def __init__(
        self,
        config: Config,
        store: Store,
        embedder: Embedder,
        notes: NoteIndexer,
        vectors: ChunkVectors,
        pdfs: PdfIndexer,
        events: EventBus,
        *,
        recovered: dict[str, Any] | None = None,
        memory: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.embedder = embedder
        self.recovered = recovered
        self.memory = memory
        self.runs = Runs()
        #: Daemon shutdown, Ctrl-C: runs end early (between notes, between vector batches); the next run resumes.
        self.stop_requested = self.runs.stop_requested
        self.hints = Hints()
        self.places = KeptPlaces()
        self.pdf_lane = PdfLane(pdfs, self.hints, self.runs, events)
        self.vault_lane = VaultLane(
            config, store, notes, vectors, self.pdf_lane, self.hints, self.places, events, self.runs
        )
        self.bulk_lane = BulkLane(store, vectors, self.vault_lane, self.pdf_lane, events, self.runs)
        self.save_lane = SaveLane(
            store,
            embedder,
            notes,
            vectors,
            self.vault_lane,
            self.bulk_lane,
            self.pdf_lane,
            self.hints,
            self.places,
            events,
            self.runs,
        )

    def index(
        self, *, full: bool = False, progress: Progress | None = None, vectors: bool = True, foreground: bool = False
    ) -> IndexReport:
        """Index the whole vault now, blocking (:meth:`VaultLane.run <cairn.index.lanes.VaultLane.run>`): the
        start-up run (on a low-priority thread), ``cairn index`` (``foreground``: the model at the caller's
        priority)."""
        return self.vault_lane.run(full=full, progress=progress, vectors=vectors, foreground=foreground)

    # ------------------------------------------------------------------------------------------------ requests
    def request_reindex(self, path: str | None = None) -> dict[str, Any]:
        """``POST /index/reindex``: queue work and return ``{queued, path}`` at once. ``path`` (checked to be inside
        the vault: :class:`~cairn.errors.PathOutsideVaultError` otherwise) becomes a hint for the watcher; no path
        asks for a full reconcile. Without a watcher an incremental run starts in a background thread, one at a
        time."""
        rel = None
        if path is not None:
            rel = checked_rel_path(path)
            resolve_in_vault(self.config.require_vault(), rel)
        if rel is not None and self.hints.followed:
            self.hints.add([rel])
        else:
            self.vault_lane.request()
        return {"queued": True, "path": rel}

    def request_full_reindex(self) -> dict[str, Any]:
        """The tray's "Reindex now": queue a run that re-reads and re-parses every note. Returns at once, like
        :meth:`request_reindex`."""
        self.vault_lane.request_full()
        return {"queued": True, "path": None}

    def set_paused(self, paused: bool) -> dict[str, bool]:
        """``POST /index/pause`` (True) and ``/index/resume`` (False; a reconcile picks up what changed while
        paused): {paused, watching} afterwards."""
        self.hints.pause() if paused else self.hints.resume()
        return {"paused": self.hints.paused, "watching": self.hints.watching}

    def wait_for_indexing(self, timeout: float) -> bool:
        """Wait for a requested run's thread to end; False if it still runs after ``timeout`` s."""
        return self.vault_lane.wait(timeout)

    # ------------------------------------------------------------------------------------------------ reports
    def stats(self) -> dict[str, Any]:
        """``/index/stats`` (:func:`~cairn.index.report.stats_json`). Requests the run that reconciles a vault
        folder that is back (:meth:`VaultLane.vault_is_there <cairn.index.lanes.VaultLane.vault_is_there>`)."""
        pdf = self.pdf_lane
        vault_there = self.vault_lane.vault_is_there()
        return stats_json(
            self.store.stats(),
            watch=self.hints.stats(),
            pdf=pdf.stats() if pdf.started else None,
            indexing=self.runs.under_way or (pdf.started and not pdf.idle()),  # a PDF being read counts
            vault=str(self.config.vault),
            vault_there=vault_there,
            index_error=self.vault_lane.index_error,
            places=self.places,
            recovered=self.recovered,
            schema_version=self.store.schema_version,
            model=self.embedder.model_id,
            memory=self.memory() if self.memory is not None else None,
        )

    def health(self) -> dict[str, Any]:
        """``/health``'s index part (:func:`~cairn.index.report.index_health`)."""
        return index_health(
            self.store, self.embedder, self.config.llm, self.vault_lane.write_error, self.config.vault_id
        )

    def close(self) -> None:
        """Ask running work to stop, stop the PDF lane and the save lane's thread (the store is closed by its
        owner)."""
        self.stop_requested.set()
        self.vault_lane.close()
        self.pdf_lane.stop()
        self.save_lane.close()

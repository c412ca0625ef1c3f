"""The notes' text (:class:`NoteIndexer`): brings the store's notes in line with the vault, incrementally.

Scan the vault (or re-stat a save's hinted paths), compare (mtime, size, content hash) with the store, delete what is
gone, and write what changed — row, tags, links, chunks, FTS rows — a batch at a time (:class:`TextRun`, through the
:class:`~cairn.index.writer.IndexWriter`); then re-resolve the links elsewhere that may now point elsewhere. After
this keyword search is complete; the vectors follow (:mod:`cairn.index.vectors`; docs/design.md, "Flows" → Index).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from cairn.config import Config
from cairn.embedder import Embedder
from cairn.index.links import LinkCache
from cairn.index.report import IndexReport, Progress, errors_of
from cairn.index.text_run import TextRun
from cairn.index.writer import IndexWriter
from cairn.notes import PARSER_VERSION
from cairn.store import NoteState
from cairn.vault import (
    IgnoreRules,
    VaultFile,
    file_digest,
    hinted_changes,
    hints_change_files,
    is_not_downloaded,
    kept_unreadable,
    scan_vault,
)

log = logging.getLogger(__name__)


class NoteIndexer:
    """Keeps the notes of one vault's store in line with the vault (PDFs are :mod:`cairn.index.pdfs`'), writing
    through ``writer``; ``embedder`` counts the tokens of the chunks. A whole-vault run and a save may run at once
    on two threads: each batch written holds :attr:`IndexWriter.lock`, a whole-vault run never holds it throughout,
    and a note a save wrote since the run's scan is left as the save left it."""

    def __init__(self, config: Config, writer: IndexWriter, embedder: Embedder) -> None:
        self.config = config
        self.root = config.require_vault()
        self.writer = writer
        self.store = writer.store
        self.embedder = embedder
        self.lock = writer.lock
        self._whole_run = threading.Lock()  # one whole-vault text run at a time
        #: The paths hinted batches wrote or removed since the running whole-vault run's scan (None: no such run).
        self._saved_since_scan: set[str] | None = None
        #: The vault's file list and the notes' aliases as the last run left them, for resolving the links of the
        #: next hinted batch without walking the vault again; dropped when a hint may have changed the file list
        #: (:func:`hints_change_files`).
        self._links: LinkCache | None = None

    def index(
        self,
        *,
        full: bool = False,
        progress: Progress | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> IndexReport:
        """The whole vault's notes (:meth:`sync_text`), read again whole when what their text depends on besides
        the files changed since the last whole run: the note parser (``text_recipe``), ``max_note_bytes`` (notes
        skipped under another limit are read again). Holds :attr:`lock` only a batch at a time: a save is indexed
        between two batches. Returns the report with the keyword-ready time."""
        with self.lock:
            # What the text phase's result depends on besides the files, kept in meta: when it changed since the
            # last whole run, notes are read again (as the PDFs do for their ``pdf_limits``).
            text_recipe, stored_recipe = f"notes-v{PARSER_VERSION}", self.store.get_meta("text_recipe")
            stale = stored_recipe != text_recipe  # made by another parser (or new): re-read every note
            if stale and not full and self.store.stats().notes:
                log.info("the note parser changed (%s -> %s): re-reading every note", stored_recipe, text_recipe)
            note_limits = str(self.config.max_note_bytes)
            limits_changed = self.store.get_meta("note_limits") != note_limits
            if limits_changed:
                # Notes skipped under another max_note_bytes are forgotten, so this scan reads them again as new
                # files (indexed, or skipped with the new reason). Without it a note skipped as too big stayed
                # skipped after the limit was raised, as the skip message advises, until ``--full``.
                for path, state in self.store.note_states().items():
                    if state.status == "skipped" and state.kind != "pdf":
                        self.store.delete_note(path)
        report = self.sync_text(full=full or stale, progress=progress, should_stop=should_stop)
        with self.lock:
            if stale and not report.stopped:
                self.store.set_meta("text_recipe", text_recipe)
            if limits_changed and not report.stopped:
                self.store.set_meta("note_limits", note_limits)
        return report

    def sync_text(
        self, *, full: bool = False, progress: Progress | None = None, should_stop: Callable[[], bool] | None = None
    ) -> IndexReport:
        """Scan the vault and write every new or changed note; delete notes gone from disk.
        ``full`` re-parses every note even if unchanged (vectors still come from the cache).
        When ``should_stop()`` turns true the run ends between notes (``report.stopped``); every
        note written so far is complete, and the next run does the rest.
        Returns the report; never raises for a bad note (it is recorded as skipped with its reason)."""
        with self._whole_run:
            unreadable: dict[str, str] = {}
            files = list(scan_vault(self.root, self.config.ignore, unreadable=unreadable))
            with self.lock:
                known = self.markdown_states()
                self._links = None
                self._saved_since_scan = set()
            gone = set(known) - {f.path for f in files} - kept_unreadable(known, unreadable)
            try:
                return self._sync(
                    files,
                    sorted(gone),
                    known,
                    full=full,
                    progress=progress,
                    should_stop=should_stop,
                    unreadable=unreadable,
                )
            finally:
                with self.lock:
                    self._saved_since_scan = None

    def superseded(self, path: str) -> bool:
        """Whether a hinted batch (a save) wrote or removed ``path`` since the whole-vault run under way scanned the
        vault: that run's reading of it is older, so it leaves the note as the save left it."""
        saved = self._saved_since_scan
        return saved is not None and path in saved

    def markdown_states(self) -> dict[str, NoteState]:
        """The store's states of every file but PDFs (those are :mod:`cairn.index.pdfs`')."""
        return {p: s for p, s in self.store.note_states().items() if s.kind != "pdf"}

    def reconcile_diff(self) -> dict[str, list[str]]:
        """The disk-vs-store comparison, read-only: ``{"added", "changed", "deleted"}`` (sorted vault-relative
        paths; notes, and PDFs when ``config.pdf``). ``changed`` means the bytes differ from what was indexed (a
        new mtime with the same hash is not a change). All three empty means the store matches the vault (the
        source of truth for tests). A note under a place that cannot be read now is not counted as deleted."""
        unreadable: dict[str, str] = {}
        with self.lock:
            exts = (".md", ".pdf") if self.config.pdf else (".md",)
            files = list(scan_vault(self.root, self.config.ignore, extensions=exts, unreadable=unreadable))
            known = self.store.note_states() if self.config.pdf else self.markdown_states()
        added, changed = [], []
        for vf in files:
            state = known.get(vf.path)
            if state is None:
                added.append(vf.path)
            elif (state.mtime_ns, state.size) != (vf.mtime_ns, vf.size) and file_digest(
                vf.abs_path
            ) != state.content_hash:
                changed.append(vf.path)
        gone = set(known) - {f.path for f in files} - kept_unreadable(known, unreadable)
        return {"added": added, "changed": changed, "deleted": sorted(gone)}

    def index_paths(
        self, paths: Iterable[str], *, progress: Progress | None = None, should_stop: Callable[[], bool] | None = None
    ) -> IndexReport:
        """Bring the store in line with the vault for a batch of hinted vault-relative paths (files or
        folders, existing or gone), e.g. from file events. Each path is re-stat'ed: a file is indexed when
        its (mtime, size, hash) differ from the store's; a folder is scanned; a path gone from disk removes
        its note, or every note under it for a folder. Folder or file is what the disk says now (a folder may be
        named ``Projects.md``), and the full scan's rules apply (:func:`cairn.vault.stat_hint`: no symlink
        followed, ignore globs, Unicode-name collisions). Hints in ignored or hidden places are dropped.
        Text phase only (call :meth:`embed_notes` next: ``report.hinted`` lists the files looked at). Never raises
        for a bad note."""
        with self.lock:
            return self._index_paths(paths, progress=progress, should_stop=should_stop)

    def _index_paths(
        self, paths: Iterable[str], *, progress: Progress | None, should_stop: Callable[[], bool] | None
    ) -> IndexReport:
        paths = list(paths)
        known = self.markdown_states()
        rules = IgnoreRules(self.config.ignore)
        # What the full scan would find there now (a file, or every note under a folder, whatever its name), and
        # what is indexed at or under a hinted path but not found there now: deleted, moved away, no longer read.
        unreadable: dict[str, str] = {}
        files, gone = hinted_changes(self.root, paths, rules, known, unreadable=unreadable)
        links, self._links = self._links, None
        if links is not None and hints_change_files(self.root, paths, rules, links.file_set):
            links = None
        # Without the file list from before (a stopped run), assume the files changed: links are re-resolved.
        report = self._sync(
            files,
            gone,
            known,
            full=False,
            progress=progress,
            should_stop=should_stop,
            whole_vault=False,
            links=links,
            files_changed=links is None and not errors_of(unreadable),  # a file list read now may lack what was not
            unreadable=unreadable,
        )
        if self._saved_since_scan is not None:
            self._saved_since_scan.update(vf.path for vf in files)
            self._saved_since_scan.update(gone)
        report.hinted = [vf.path for vf in files]
        return report

    def _sync(
        self,
        files: list[VaultFile],
        gone: Sequence[str],
        known: dict[str, NoteState],
        *,
        full: bool,
        progress: Progress | None,
        should_stop: Callable[[], bool] | None,
        whole_vault: bool = True,
        links: LinkCache | None = None,
        files_changed: bool = False,
        unreadable: dict[str, str] | None = None,
    ) -> IndexReport:
        """Write the new or changed notes among ``files`` and delete the notes at ``gone``. Links elsewhere
        are re-resolved after a whole-vault run with changes (attachments may have come or gone), and after
        a hinted batch when a note was added or removed, its aliases changed (a skipped note loses them), or
        ``files_changed`` (a hint added, removed or moved a file or folder: attachments are link targets too);
        an edit of a note's text cannot change how another note's links resolve. ``unreadable``: the places the
        scan could not read now (``report.deferred``, with the notes that could not be opened; iCloud placeholders
        go to ``report.not_downloaded``).

        Memory stays bounded whatever the vault's size: changed notes are read, parsed and written in
        batches of at most :data:`~cairn.index.text_run.BATCH_NOTES` notes or
        :data:`~cairn.index.text_run.BATCH_BYTES` bytes of text, and only two
        batches' texts and parsed notes are held at a time (besides per-note states and alias lists)."""
        stop = should_stop or (lambda: False)
        started = time.perf_counter()
        report = IndexReport()
        report.scanned = len(files)
        with self.lock:
            self._delete_gone(gone, report, whole_vault=whole_vault)
        todo = self._maybe_changed(files, known, full, report, progress)
        run = TextRun(
            self.writer,
            self.config,
            self.embedder,
            report,
            known,
            stop,
            progress,
            len(todo),
            links=links,
            superseded=self.superseded if whole_vault else None,
        )
        if progress and todo:
            progress("index", 0, len(todo))
        try:
            run.write_changed(todo, full)
            if errors_of(unreadable or {}):  # the file list read now lacks what could not be read: no link targets
                whole_vault = files_changed = False
            with self.lock:
                # A save while a whole-vault run is under way leaves other notes' links to that run's end.
                deferred = not whole_vault and self._saved_since_scan is not None
                self._links = run.finish_links(
                    whole_vault=whole_vault, files_changed=files_changed, reresolve=not deferred
                )
                if whole_vault and self._saved_since_scan:
                    # Saves came during this run: its file list is older than theirs, so links are resolved
                    # once more against the files on disk now.
                    self.writer.reresolve_links()
                    self._links = None
                if whole_vault:
                    self._saved_since_scan = None  # saves from now on re-resolve links themselves
        finally:
            run.close()
        if progress and todo and not report.stopped:
            progress("index", len(todo), len(todo))
        places = sorted((unreadable or {}).items())
        report.deferred[:0] = [(p, r) for p, r in places if not is_not_downloaded(r)]
        report.not_downloaded = [(p, r) for p, r in places if is_not_downloaded(r)]
        if report.deferred:  # the file list links resolved against may lack what could not be read
            self._links = None
        report.keyword_ready_s = report.elapsed_s = time.perf_counter() - started
        return report

    def _delete_gone(self, gone: Sequence[str], report: IndexReport, *, whole_vault: bool) -> None:
        for path in gone:
            if whole_vault and self.superseded(path):
                continue
            self.writer.delete_note(path, report)

    def _maybe_changed(
        self,
        files: list[VaultFile],
        known: dict[str, NoteState],
        full: bool,
        report: IndexReport,
        progress: Progress | None,
    ) -> list[VaultFile]:
        """The cheap pass (stat only): the files that may have changed. Their bytes are read batch by batch."""
        todo: list[VaultFile] = []
        total = len(files)
        skip_conflicts = self.config.sync_conflicts == "skip"
        for i, vf in enumerate(files):
            state = known.get(vf.path)
            # A conflict copy indexed under the other sync_conflicts setting is read again whatever its stat says.
            stale = vf.conflict_of is not None and state is not None and (state.status == "skipped") != skip_conflicts
            if state and not full and not stale and state.mtime_ns == vf.mtime_ns and state.size == vf.size:
                report.unchanged += 1
            else:
                todo.append(vf)
            if progress:
                progress("scan", i + 1, total)
        return todo

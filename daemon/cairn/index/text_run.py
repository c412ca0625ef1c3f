"""One text run: the changed notes read, parsed and written a batch at a time, through an
:class:`~cairn.index.writer.IndexWriter` (:class:`~cairn.index.notes.NoteIndexer` starts one :class:`TextRun` per
run). Only a few batches' texts and parsed notes are held at a time; batches big enough are parsed and chunked in
worker processes while the one before is written, one transaction per batch.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path

from cairn.config import Config
from cairn.embedder import Embedder, load_tokenizer
from cairn.errors import FileOpenError, NoteReadError
from cairn.index.links import LINK_FILES_META, LinkCache, LinkTargets, fingerprint
from cairn.index.prepare import PreparedNote, prepare_note
from cairn.index.report import IndexReport, Progress
from cairn.index.writer import IndexWriter
from cairn.notes import LinkResolver
from cairn.store import LinkRecord, NoteRecord, NoteState, disk_full
from cairn.vault import VaultFile, conflict_reason, duplicate_reason, file_digest, read_note_text
from cairn.vault.lifeline import exit_with_parent

log = logging.getLogger(__name__)

_NoteRows = tuple[NoteRecord, list[LinkRecord]]

#: Truncate the WAL after this many notes written in one run.
WAL_CHECKPOINT_EVERY = 200
#: Parse and chunk in worker processes when a batch has at least this many notes.
PARALLEL_MIN_NOTES = 100
#: Changed notes are read, parsed and written in batches of at most this many notes…
BATCH_NOTES = 128
#: …or this many bytes of note text (UTF-8 characters counted), whichever comes first, so the text phase holds a
#: few batches at a time: its memory does not grow with the vault…
BATCH_BYTES = 8 * 1024 * 1024
#: …or this many files whose bytes did not change (only their new stat is written).
BATCH_TOUCHED = 1024
#: Batches read and sent to the parse workers while one is written.
PARSE_AHEAD = 1
#: Seconds between two looks at ``stop()`` while waiting for the parse workers (a shutdown never waits for them).
STOP_POLL_S = 0.1


_worker_tokenizer = None


def _worker_init(model_dir: str, parent_pid: int) -> None:
    """A parse worker's start: it exits when the daemon (``parent_pid``) dies, even by ``kill -9``, and ignores
    Ctrl-C (the terminal sends SIGINT to the whole process group: the parent stops the run, then its workers);
    then the tokenizer is loaded."""
    global _worker_tokenizer
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent(parent_pid)
    _worker_tokenizer = load_tokenizer(Path(model_dir))


def _worker_prepare_many(items: list[tuple[str, str]]) -> list[tuple[str, PreparedNote | None, str | None]]:
    return [_worker_prepare(item) for item in items]


def _worker_prepare(item: tuple[str, str]) -> tuple[str, PreparedNote | None, str | None]:
    path, text = item
    try:
        assert _worker_tokenizer is not None
        return path, prepare_note(text, path, _worker_tokenizer.count_tokens, _worker_tokenizer.count_tokens_many), None
    except Exception as exc:  # reported back and recorded as the note's skip reason
        return path, None, f"{type(exc).__name__}: {exc}"


@dataclass
class _Batch:
    """Notes read for one write: (file, text, sha256) of each note whose bytes changed, the files whose bytes did
    not (only their stat is written), how many of the run's changed files are dealt with once it is written (for
    progress), and the parse workers' futures when it was sent to them."""

    items: list[tuple[VaultFile, str, str]] = field(default_factory=list)
    touched: list[VaultFile] = field(default_factory=list)
    size: int = 0
    consumed: int = 0
    futures: list[Future] | None = None

    def full(self) -> bool:
        return len(self.items) >= BATCH_NOTES or self.size >= BATCH_BYTES or len(self.touched) >= BATCH_TOUCHED


def _never(_path: str) -> bool:
    return False


class TextRun:
    """One text-phase run's state across its batches: the parse workers (started with the first full batch,
    kept for the rest), what links resolve against (:class:`~cairn.index.links.LinkTargets`, from ``links``,
    the last run's, when still valid), and counters.

    Batches flow through a short pipeline: while batch *i* is written (one transaction, :attr:`IndexWriter.lock`
    held only then), batch *i + 1* is already read and being parsed by the workers, so both cores stay busy.

    ``superseded`` (a whole-vault run): whether a save wrote or removed a path since the run's scan; the run then
    leaves that note as the save left it."""

    def __init__(
        self,
        writer: IndexWriter,
        config: Config,
        embedder: Embedder,
        report: IndexReport,
        known: dict[str, NoteState],
        stop: Callable[[], bool],
        progress: Progress | None,
        todo: int,
        *,
        links: LinkCache | None = None,
        superseded: Callable[[str], bool] | None = None,
    ) -> None:
        self.writer = writer
        self.config = config
        self.embedder = embedder
        self.report = report
        self.known = known
        self.stop = stop
        self.progress = progress
        self.todo = todo
        self.batches = 0
        self.written = 0
        self.links = LinkTargets(writer.root, config.ignore, writer.store, links)
        self._pool: ProcessPoolExecutor | None = None
        self.superseded = superseded
        self._checkpointed = 0

    def write_changed(self, files: list[VaultFile], full: bool) -> None:
        """Read ``files`` (those that may have changed) and write those whose bytes changed, a batch at a time
        (until ``stop()``); up to :data:`PARSE_AHEAD` batches are parsed while one is written. A whole-vault run's
        batches are :meth:`Store.bulk_batches <cairn.store.Store.bulk_batches>`: searches meanwhile may rank with
        a note map a moment old."""
        if self.superseded is None:
            self._write_changed(files, full)
            return
        with self.writer.store.bulk_batches():
            self._write_changed(files, full)

    def _write_changed(self, files: list[VaultFile], full: bool) -> None:
        ahead: deque[_Batch] = deque()
        for batch in self._read_batches(files, full):
            self._start_parse(batch)
            ahead.append(batch)
            if len(ahead) > PARSE_AHEAD:
                self.write_batch(ahead.popleft())
            if self.report.stopped:
                return
        while ahead and not self.report.stopped:
            self.write_batch(ahead.popleft())

    def _read_batches(self, files: list[VaultFile], full: bool) -> Iterator[_Batch]:
        """The notes of ``files`` whose bytes need indexing, read a batch at a time (until ``stop()``)."""
        batch = _Batch()
        for n, vf in enumerate(files):
            if self.stop():
                self.report.stopped = True
                return
            item = self._read_changed(vf, self.known.get(vf.path), full, batch)
            if item is not None:
                batch.items.append(item)
                batch.size += len(item[1])
            if batch.full():
                batch.consumed = n + 1
                yield batch
                batch = _Batch()
        if batch.items or batch.touched:
            batch.consumed = len(files)
            yield batch

    def _read_changed(
        self, vf: VaultFile, state: NoteState | None, full: bool, batch: _Batch
    ) -> tuple[VaultFile, str, str] | None:
        """(file, text, sha256) of a note whose bytes need indexing; None when it cannot be read (recorded as
        skipped) or its bytes are the ones indexed (only its mtime moved: the file goes to ``batch.touched``). A
        file whose name equals an indexed one's in Unicode NFC (``vf.duplicate_of``) is recorded as skipped, naming
        that one; so is a Syncthing conflict copy (``vf.conflict_of``) unless ``sync_conflicts = "index"``."""
        writer = self.writer
        conflict = vf.conflict_of if self.config.sync_conflicts == "skip" else None
        if vf.duplicate_of is not None or conflict is not None:
            reason = duplicate_reason(vf) if conflict is None else conflict_reason(vf.path, conflict)
            writer.record_skipped(vf, file_digest(vf.abs_path), reason, self.report, state=state)
            log.warning("skipped %s: %s", vf.path, reason)
            return None
        try:
            text, digest = read_note_text(vf.abs_path, max_bytes=self.config.max_note_bytes)
        except FileOpenError as exc:  # a moment's error, not the note's: its indexed version stays (see deferred)
            self.report.deferred.append((vf.path, exc.message))
            log.warning("cannot read %s now (%s); its last indexed version is kept", vf.path, exc.message)
            return None
        except NoteReadError as exc:
            writer.record_skipped(vf, file_digest(vf.abs_path), exc.message, self.report, state=state)
            log.warning("skipped %s: %s", vf.path, exc.message)
            return None
        if state and not full and state.content_hash == digest and state.status == "ok":
            batch.touched.append(vf)
            self.report.unchanged += 1
            return None
        return vf, text, digest

    def _start_parse(self, batch: _Batch) -> None:
        """Send ``batch``'s notes to the parse workers (spawned: safe beside the daemon's threads; started with the
        first batch big enough to be worth them); a smaller batch before that is parsed here when written."""
        workers = min(os.cpu_count() or 1, 4)
        if self._pool is None and len(batch.items) >= PARALLEL_MIN_NOTES and workers > 1:
            ctx = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(
                max_workers=workers,
                mp_context=ctx,
                initializer=_worker_init,
                initargs=(str(self.embedder.model_dir), os.getpid()),
            )
        if self._pool is None or not batch.items:
            return
        items = [(vf.path, text) for vf, text, _ in batch.items]
        chunk = max(1, min(16, len(items) // (4 * workers)))
        batch.futures = [
            self._pool.submit(_worker_prepare_many, items[i : i + chunk]) for i in range(0, len(items), chunk)
        ]

    def _prepared(self, batch: _Batch) -> Iterator[tuple[str, PreparedNote | None, str | None]]:
        """(path, PreparedNote | None, error | None) for each note of ``batch``, in order: from the parse workers,
        or parsed here. Ends early, with ``report.stopped``, once ``stop()`` says so (looked at every
        :data:`STOP_POLL_S` s of waiting for the workers)."""
        if batch.futures is None:
            yield from self._prepare_here([(vf.path, text) for vf, text, _ in batch.items])
            return
        for future in batch.futures:
            while True:
                try:
                    results = future.result(timeout=STOP_POLL_S)
                    break
                except FutureTimeout:
                    if self.stop():
                        self.report.stopped = True
                        return
            yield from results

    def _prepare_here(self, items: list[tuple[str, str]]) -> Iterator[tuple[str, PreparedNote | None, str | None]]:
        counter = self.embedder.tokenizer
        for path, text in items:
            try:
                yield path, prepare_note(text, path, counter.count_tokens, counter.count_tokens_many), None
            except Exception as exc:
                log.exception("cannot parse %s", path)
                yield path, None, f"{type(exc).__name__}: {exc}"

    def write_batch(self, batch: _Batch) -> None:
        """Write one batch in one transaction (:attr:`IndexWriter.lock` held only for that): each parsed note's rows
        (a note that cannot be written is rolled back alone and recorded as skipped, with its reason), the notes
        that do not parse (skipped, with theirs), and the new stat of the files whose bytes did not change."""
        self.batches += 1
        parsed, failed = self._parse(batch)
        if self.report.stopped:
            return
        superseded = self.superseded or _never
        parsed = [item for item in parsed if not superseded(item[0].path)]
        self.links.note_aliases((vf.path, list(prepared.note.aliases)) for vf, _d, prepared in parsed)
        resolver = self.links.resolver()
        rows = [
            (vf, digest, prepared, self._records(vf, digest, prepared, resolver)) for vf, digest, prepared in parsed
        ]
        store = self.writer.store
        # Held per batch written: a save waits at most one batch. What a save wrote since the scan stays as it is.
        with self.writer.lock, store.transaction():
            for vf in batch.touched:
                if not superseded(vf.path):
                    store.touch_note(vf.path, vf.mtime_ns, vf.size)
            for vf, digest, reason in failed:
                if not superseded(vf.path):
                    log.warning("skipped %s: %s", vf.path, reason)
                    self.writer.record_skipped(vf, digest, reason, self.report)
            for vf, digest, prepared, records in rows:
                if self.stop():
                    self.report.stopped = True
                    break
                if not superseded(vf.path):
                    self._write(vf, digest, prepared, records)
        if self.written - self._checkpointed >= WAL_CHECKPOINT_EVERY:  # keep the WAL small during a first index
            self._checkpointed = self.written
            store.wal_checkpoint()
        if self.progress and not self.report.stopped:
            self.progress("index", batch.consumed, self.todo)

    def _parse(
        self, batch: _Batch
    ) -> tuple[list[tuple[VaultFile, str, PreparedNote]], list[tuple[VaultFile, str, str]]]:
        """``batch``'s notes parsed: (file, sha256, PreparedNote) of those that parse, (file, sha256, reason to
        skip) of the others."""
        by_path = {vf.path: (vf, digest) for vf, _text, digest in batch.items}
        parsed: list[tuple[VaultFile, str, PreparedNote]] = []
        failed: list[tuple[VaultFile, str, str]] = []
        for path, prepared, error in self._prepared(batch):
            vf, digest = by_path[path]
            if prepared is None:
                failed.append((vf, digest, f"cannot parse: {error}"))
            else:
                parsed.append((vf, digest, prepared))
        return parsed, failed

    def _write(self, vf: VaultFile, digest: str, prepared: PreparedNote, records: _NoteRows) -> None:
        """Write one parsed note (its own savepoint in the batch's transaction) and count it in the report; a note
        that cannot be written is recorded as skipped."""
        report, note, store = self.report, prepared.note, self.writer.store
        record, links = records
        try:
            store.write_note(record, prepared.chunks, note.tags, links)
        except Exception as exc:  # e.g. a title too long to fit a chunk: skip the note, keep going
            if disk_full(exc) or not store.conn.in_transaction:  # not this note's fault (SQLite rolled back)
                raise
            log.exception("cannot index %s", vf.path)
            self.writer.record_skipped(vf, digest, f"cannot index: {exc}", report, title=note.title)
            return
        report.chunks_written += len(prepared.chunks)
        if note.frontmatter_error:
            report.warnings.append((vf.path, note.frontmatter_error))
        known = self.known.get(vf.path)
        if known is None:
            report.added += 1
        elif known.content_hash == digest and known.status == "ok":  # re-read (--full), not changed
            report.unchanged += 1
        else:
            report.updated += 1
        self.written += 1

    @staticmethod
    def _records(vf: VaultFile, digest: str, prepared: PreparedNote, resolver: LinkResolver) -> _NoteRows:
        """The note's row and its links (resolved now), ready for :meth:`Store.write_note`."""
        note = prepared.note
        links = [
            LinkRecord(
                raw_target=link.target,
                target_path=resolver.resolve(link.target, vf.path) if link.target else vf.path,
                heading=link.heading,
                block_id=link.block_id,
                alias=link.alias,
                is_embed=link.is_embed,
                line=link.line,
            )
            for link in note.links
        ]
        record = NoteRecord(
            path=vf.path,
            kind=vf.kind,
            title=note.title,
            aliases=note.aliases,
            frontmatter=note.frontmatter,
            mtime_ns=vf.mtime_ns,
            size=vf.size,
            content_hash=digest,
            error=note.frontmatter_error,
            error_code=note.frontmatter_error_code,
        )
        return record, links

    def finish_links(self, *, whole_vault: bool, files_changed: bool, reresolve: bool = True) -> LinkCache | None:
        """Re-resolve links elsewhere when this run may have changed their targets (see ``NoteIndexer._sync``; not when
        ``reresolve`` is False: a whole-vault run under way does it at its end); returns what links resolve
        against, for the next hinted batch (None when the run stopped)."""
        store, report, links = self.writer.store, self.report, self.links
        if report.skipped:
            links.forget_aliases(path for path, _reason in report.skipped)
        if whole_vault and not report.stopped:
            # Attachments that came, went or moved while no one watched (the daemon was not running) change
            # how links resolve too: the store keeps a fingerprint of the file list links were resolved against.
            links.resolver()
            files_changed = files_changed or fingerprint(links.files) != store.get_meta(LINK_FILES_META)
        if self.batches or report.deleted or files_changed or links.aliases_changed:
            # Links elsewhere may resolve differently now: a note came or went, an alias changed, or a file
            # (an attachment: a link target too) or folder came, went or moved.
            changed = whole_vault or report.added or report.deleted or links.aliases_changed or files_changed
            if reresolve and changed:
                self.writer.reresolve_links_with(links.resolver())
                if not report.stopped:
                    store.set_meta(LINK_FILES_META, fingerprint(links.files))
            if whole_vault:  # a save's few pages go with SQLite's own checkpoints: truncating waits for every reader
                store.wal_checkpoint()
        return None if report.stopped else links.link_cache(complete=whole_vault)

    def close(self) -> None:
        """Stop the parse workers: at once when the run stopped early (a shutdown: they hold nothing worth
        waiting for, and may still be starting), else once idle."""
        if self._pool is None:
            return
        if self.report.stopped:
            processes = getattr(self._pool, "_processes", None) or {}  # {pid: multiprocessing.Process}
            for process in list(processes.values()):
                process.terminate()
        self._pool.shutdown(wait=True, cancel_futures=True)

"""PDF attachments, indexed page by page (:class:`PdfIndexer`), always after the notes.

A PDF in the vault becomes one ``notes`` row of kind ``pdf`` (title: its ``/Title`` metadata, else the file
name) with chunks of kind ``pdf``: each page's text (from :class:`cairn.vault.pdf.PdfExtractor`, which runs
the PDF library in a worker subprocess with a per-file time limit) is cut like a note's section, never across
pages (:func:`cairn.index.prepare.prepare_pdf`). Sources, the extractive answer and the plugin open the PDF at a
chunk's page (``#page=N``).

What could not be indexed is recorded per file, as for notes: a PDF that yields nothing (encrypted, no text
layer, damaged, too big, timed out) is a skipped file with its reason; a partial one (some pages image-only,
past ``pdf_max_pages``, past the time limit) is indexed with the reason as its warning. Both show in
``/index/stats`` and ``cairn index``.

**Priority**: in the daemon, the PDF lane (:class:`cairn.index.lanes.PdfLane`) runs :meth:`PdfIndexer.sync` on its
own low-priority thread.
Before each step — extracting a file, writing it, each slice of 16 sentences sent to the model — it
waits while the notes' indexing has work (``wait_turn``), and it holds the writer's lock only for the one
short write transaction; the model runs outside every lock. So a note edited while a 300-page PDF is being
indexed waits for at most one such step (``make bench`` measures it). The notes' own vector
phase takes only non-PDF chunks. A changed PDF is re-extracted whole; pages whose text did not change
re-embed nothing (sentence vectors come from the embedding cache by content hash).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.config import Config
from cairn.embedder import Embedder
from cairn.errors import FileOpenError, NoteReadError
from cairn.index.prepare import prepare_pdf
from cairn.index.report import IndexReport, Progress
from cairn.index.vectors import ChunkVectors
from cairn.index.writer import IndexWriter
from cairn.store import ChunkRecord, NoteRecord, NoteState
from cairn.vault import (
    IgnoreRules,
    VaultFile,
    duplicate_reason,
    file_digest,
    hinted_changes,
    kept_unreadable,
    scan_vault,
)

if TYPE_CHECKING:  # imported when the first PDF is read: a vault without PDFs never loads the PDF library
    from cairn.vault.pdf import PdfExtractor, PdfText

log = logging.getLogger(__name__)

#: Chunks per vector batch of a PDF (one store transaction); the model gets their sentences
#: :data:`~cairn.index.vectors.PAUSE_SLICE` at a time, and the lane yields to the notes before each slice.
PDF_EMBED_BATCH = 8


class PdfIndexer:
    """Brings the store's PDFs in line with the vault's, one file at a time (see the module docstring): written
    through ``writer``, their vectors made by ``vectors``, their chunks counted in ``embedder``'s tokens, under the
    configuration's ``pdf``, ``pdf_max_pages``, ``pdf_max_bytes``, ``pdf_timeout_s`` and ``ignore``. The extraction
    worker starts with the first PDF and lives until :meth:`close`. Thread-safe for one caller at a time."""

    def __init__(
        self,
        config: Config,
        writer: IndexWriter,
        vectors: ChunkVectors,
        embedder: Embedder,
        *,
        extractor: PdfExtractor | None = None,
    ) -> None:
        self.config = config
        self.root = config.require_vault()
        self.writer = writer
        self.store = writer.store
        self.vectors = vectors
        self.embedder = embedder
        self._extractor = extractor
        self._extractor_lock = threading.Lock()
        self._closed = False
        #: The vault-relative path being worked on, or None (``/index/stats``).
        self.current: str | None = None

    def _extract(self, path: Path) -> PdfText:
        with self._extractor_lock:
            if self._closed:
                raise NoteReadError("Cairn is stopping; the PDF was not read.")
            if self._extractor is None:
                from cairn.vault.pdf import PdfExtractor

                self._extractor = PdfExtractor(
                    max_pages=self.config.pdf_max_pages,
                    max_bytes=self.config.pdf_max_bytes,
                    timeout_s=self.config.pdf_timeout_s,
                )
            extractor = self._extractor
        return extractor.extract(path)

    @property
    def worker_pid(self) -> int | None:
        """The PDF reader's worker process id, None when none runs (the memory breakdown lists its resident set)."""
        extractor = self._extractor
        return extractor.worker_pid if extractor is not None else None

    def close(self) -> None:
        """Stop the extraction worker (an extraction under way ends at once; its file is not recorded)."""
        with self._extractor_lock:
            self._closed = True
            extractor, self._extractor = self._extractor, None
        if extractor is not None:
            extractor.close()

    def states(self) -> dict[str, NoteState]:
        """The store's states of PDF files, by vault-relative path."""
        return {p: s for p, s in self.store.note_states().items() if s.kind == "pdf"}

    def plan(self, paths: Iterable[str] | None = None) -> tuple[list[VaultFile], list[str]]:
        """(the PDF files to look at, sorted; the stored PDFs gone from disk). ``paths``: vault-relative hints
        (files or folders, existing or gone) — None for the whole vault. With ``config.pdf`` off, every
        stored PDF counts as gone."""
        known = self.states()
        if not self.config.pdf:
            return [], sorted(known)
        root = self.root
        if paths is None:
            unreadable: dict[str, str] = {}  # places not readable now: their PDFs are not gone (kept_unreadable)
            files = list(scan_vault(root, self.config.ignore, extensions=(".pdf",), unreadable=unreadable))
            on_disk = {f.path for f in files}
            return files, sorted(set(known) - on_disk - kept_unreadable(known, unreadable))
        # The full scan's rules, file or folder as on disk (see NoteIndexer.index_paths).
        return hinted_changes(root, paths, IgnoreRules(self.config.ignore), known, extensions=(".pdf",))

    def hints(self, paths: Iterable[str]) -> set[str]:
        """The hinted vault-relative paths that may concern PDFs: all but those that are a note file on disk now
        (a folder named ``Projects.md`` may hold PDFs, and a path gone from disk may have been such a folder)."""
        root = self.root
        return {p for p in paths if not (str(p).lower().endswith(".md") and (root / str(p)).is_file())}

    def sync(
        self,
        paths: Iterable[str] | None = None,
        *,
        full: bool = False,
        progress: Progress | None = None,
        should_stop: Callable[[], bool] | None = None,
        wait_turn: Callable[[], None] | None = None,
    ) -> IndexReport:
        """Index the new and changed PDFs among ``paths`` (None: the whole vault), delete the gone ones, and
        fill their vectors. ``full`` re-extracts unchanged files too. ``wait_turn()`` is called before each
        step and returns when the PDF work may go on (the daemon: when the notes' indexing is idle).
        ``should_stop()`` ends the run between steps. Never raises for a bad PDF (recorded with its reason)."""
        stop = should_stop or (lambda: False)
        turn = wait_turn or (lambda: None)
        started = time.perf_counter()
        report = IndexReport()
        files, gone = self.plan(paths)
        report.scanned = len(files)
        known = self.states()
        self._delete_gone(gone, report)
        limits = f"{self.config.pdf_max_pages}|{self.config.pdf_max_bytes}|{self.config.pdf_timeout_s:g}"
        retry = self._to_retry(known, limits) if paths is None else set()
        if report.deleted or any(vf.path not in known for vf in files):
            # Before a new PDF is written: links to it written while it did not exist (or was elsewhere) now
            # resolve, so a withheld note's embed withholds it from its first searchable moment.
            with self.writer.lock:
                self.writer.reresolve_links()
        for i, vf in enumerate(files):
            if stop():
                report.stopped = True
                break
            turn()
            self.current = vf.path
            if progress:
                progress("pdf", i, len(files))
            try:
                self._index_file(
                    vf,
                    known.get(vf.path),
                    report,
                    full=full or vf.path in retry,
                    stop=stop,
                    turn=turn,
                    progress=progress,
                )
            finally:
                self.current = None
            if progress:
                progress("pdf", i + 1, len(files))
        if paths is None and not report.stopped:
            self.store.set_meta("pdf_limits", limits)
        report.keyword_ready_s = report.elapsed_s = time.perf_counter() - started
        return report

    def _delete_gone(self, gone: Iterable[str], report: IndexReport) -> None:
        for path in gone:
            self.writer.delete_note(path, report)

    def _to_retry(self, known: dict[str, NoteState], limits: str) -> set[str]:
        """The stored PDFs to read again in a whole-vault run: when the limits changed since the last one (config
        edited, daemon restarted), those that hit a limit or could not be read."""
        if self.store.get_meta("pdf_limits") == limits:
            return set()
        return {e.path for e in self.store.stats().errors if e.path in known}

    def _index_file(
        self,
        vf: VaultFile,
        state: NoteState | None,
        report: IndexReport,
        *,
        full: bool,
        stop: Callable[[], bool],
        turn: Callable[[], None],
        progress: Progress | None = None,
    ) -> None:
        """Index one PDF when it is new or changed (else fill the vectors a stopped run left unfilled); a file
        that yields nothing is recorded as skipped with its reason."""
        if state and not full and (state.mtime_ns, state.size) == (vf.mtime_ns, vf.size):
            report.unchanged += 1
            if state.status == "ok":
                self._embed(vf, report, stop, turn)  # vectors a stopped run left unfilled
            return
        if self._refused_unread(vf, state, report):
            return
        digest = file_digest(vf.abs_path)
        if state and not full and state.content_hash == digest:
            with self.writer.lock:
                self.store.touch_note(vf.path, vf.mtime_ns, vf.size)
            report.unchanged += 1
            return
        started = time.perf_counter()
        read = self._read(vf, state, digest, report, stop)
        if read is None:
            return
        extracted, title, chunks = read
        if stop():
            report.stopped = True
            return
        turn()
        if _moved_on(vf):  # deleted or changed while it was read: the queued file event deals with it
            return
        self._write(vf, state, digest, report, extracted, title, chunks, started)
        self._embed(vf, report, stop, turn, progress=progress, total=len(chunks))

    def _refused_unread(self, vf: VaultFile, state: NoteState | None, report: IndexReport) -> bool:
        """Record, without reading it, a PDF whose name collides with an indexed one's or that is too big."""
        title = Path(vf.path).stem
        if vf.duplicate_of is not None:  # its name equals an indexed PDF's in Unicode NFC: reported, not read
            self._skip(vf, state, file_digest(vf.abs_path), report, duplicate_reason(vf), title)
            return True
        if vf.size > self.config.pdf_max_bytes:  # refused before reading a byte
            self._skip(
                vf,
                state,
                f"size:{vf.size}",
                report,
                f"too big: {_mb(vf.size)}, over pdf_max_bytes "
                f"{_mb(self.config.pdf_max_bytes)}; raise pdf_max_bytes in the config to index it",
                title,
            )
            return True
        return False

    def _read(
        self, vf: VaultFile, state: NoteState | None, digest: str, report: IndexReport, stop: Callable[[], bool]
    ) -> tuple[PdfText, str, list[ChunkRecord]] | None:
        """``(extracted text, title, chunks)`` of one PDF, or None when it was recorded as skipped (or the run
        stopped while it was read)."""
        title = Path(vf.path).stem
        try:
            extracted = self._extract(vf.abs_path)
        except FileOpenError as exc:  # not opened now (permission, too many open files, locked): kept as indexed
            report.deferred.append((vf.path, exc.message))
            log.warning("cannot read %s now (%s); its last indexed version is kept", vf.path, exc.message)
            return None
        except NoteReadError as exc:
            if stop() or self._closed:
                report.stopped = True
                return None
            self._skip(vf, state, digest, report, exc.message, title)
            return None
        counter = self.embedder.tokenizer
        try:
            title, chunks = prepare_pdf(extracted, vf.path, counter.count_tokens, counter.count_tokens_many)
        except Exception as exc:  # a chunker bug must not stop the PDF lane: record it
            log.exception("cannot chunk %s", vf.path)
            self._skip(vf, state, digest, report, f"cannot index: {type(exc).__name__}: {exc}", title)
            return None
        return extracted, title, chunks

    def _write(
        self,
        vf: VaultFile,
        state: NoteState | None,
        digest: str,
        report: IndexReport,
        extracted: PdfText,
        title: str,
        chunks: list[ChunkRecord],
        started: float,
    ) -> None:
        """Write one PDF's note row and chunks in one transaction; its problems become the note's warning."""
        problems = "; ".join(extracted.problems) or None
        record = NoteRecord(
            path=vf.path,
            kind="pdf",
            title=title,
            aliases=[],
            frontmatter={"pages": extracted.page_count},
            mtime_ns=vf.mtime_ns,
            size=vf.size,
            content_hash=digest,
            error=problems,
        )
        with self.writer.lock:
            self.store.write_note(record, chunks, (), ())
        report.chunks_written += len(chunks)
        if problems:
            report.warnings.append((vf.path, problems))
        if state is None:
            report.added += 1
        else:
            report.updated += 1
        log.info(
            "PDF %s: %d of %d pages with text, %d chunks, extracted in %.1f s%s",
            vf.path,
            sum(1 for p in extracted.pages if p.text.strip()),
            extracted.page_count,
            len(chunks),
            time.perf_counter() - started,
            f" ({problems})" if problems else "",
        )

    def _embed(
        self,
        vf: VaultFile,
        report: IndexReport,
        stop: Callable[[], bool],
        turn: Callable[[], None],
        *,
        progress: Progress | None = None,
        total: int = 0,
    ) -> None:
        """Fill the vectors of ``vf``'s chunks, :data:`PDF_EMBED_BATCH` at a time, yielding between batches. A file
        deleted meanwhile is removed from the index at once (its text must not stay searchable for the minutes a
        long PDF takes); one changed meanwhile is left to the queued file event, which reads it again."""
        done = 0
        while not stop():
            turn()
            moved = _moved_on(vf)
            if moved == "gone":
                self.writer.delete_note(vf.path, report)
                return
            if moved:
                return
            written, embedded, taken = self.vectors.embed_batch(
                PDF_EMBED_BATCH, pdf=True, note_path=vf.path, pause=turn
            )
            report.vectors_written += written
            report.texts_embedded += embedded
            done += taken
            if progress and total:
                progress("embed", min(done, total), total)  # "Embedding 120 / 708" for the PDF being read
            if not taken:
                return
        report.stopped = True

    def _skip(
        self, vf: VaultFile, state: NoteState | None, digest: str, report: IndexReport, reason: str, title: str
    ) -> None:
        self.writer.record_skipped(vf, digest, reason, report, title=title, state=state)
        log.warning("skipped %s: %s", vf.path, reason)


def _moved_on(vf: VaultFile) -> str | None:
    """``"gone"`` when the file is no longer on disk, ``"changed"`` when its (mtime, size) moved since ``vf``."""
    try:
        st = vf.abs_path.stat()
    except OSError:
        return "gone"
    return "changed" if (st.st_mtime_ns, st.st_size) != (vf.mtime_ns, vf.size) else None


def _mb(n: int) -> str:
    return f"{n / (1024 * 1024):.0f} MB" if n >= 1024 * 1024 else f"{n} bytes"

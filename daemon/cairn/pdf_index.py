"""PDF attachments: indexed page by page, in a queue that always lets the notes go first. Layer 2.

A PDF in the vault becomes one ``notes`` row of kind ``pdf`` (title: its ``/Title`` metadata, else the file
name) with chunks of kind ``pdf``: each page's text (from :class:`cairn.vault.pdf.PdfExtractor`, which runs
the PDF library in a worker subprocess with a per-file time limit) is cut like a note's section — at most
254 tokens of the embedding tokenizer, 32 tokens of overlap, never across pages — and every chunk carries its
1-based ``page`` and the ``symbol`` ``page N`` (``page N › <heading>`` when a heading-like line was found
on the page). Sources, the extractive answer and the plugin open the PDF at that page (``#page=N``).

What could not be indexed is recorded per file, as for notes: a PDF that yields nothing (encrypted, no text
layer, damaged, too big, timed out) is a skipped file with its reason; a partial one (some pages image-only,
past ``pdf_max_pages``, past the time limit) is indexed with the reason as its warning. Both show in
``/index/stats`` and ``cairn index``.

**Priority**: in the daemon, :class:`PdfQueue` works on its own low-priority thread.
Before each step — extracting a file, writing it, each slice of 16 sentences sent to the model — it
waits while the notes' indexing has work (``busy()``), and it holds the indexer's lock only for the one
short write transaction; the model runs outside every lock. So a note edited while a 300-page PDF is being
indexed waits for at most one such step (``make bench`` measures it). The notes' own vector
phase takes only non-PDF chunks. A changed PDF is re-extracted whole; pages whose text did not change
re-embed nothing (sentence vectors come from the embedding cache by content hash).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.chunking import chunk_note
from cairn.embedding import chunk_embed_text, content_hash, embedding_texts
from cairn.errors import FileOpenError, NoteReadError
from cairn.indexer import (
    CHUNK_MAX_TOKENS,
    CHUNK_OVERLAP_TOKENS,
    Indexer,
    IndexReport,
    Progress,
)
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
#: :data:`~cairn.indexer.PAUSE_SLICE` at a time, and the queue yields to the notes before each slice.
PDF_EMBED_BATCH = 8

_HYPHEN_BREAK = re.compile(r"(?<=[a-z])-\n(?=[a-z])")
#: A line of at most this many words, without closing punctuation, under half as long as the longest line of its
#: block and followed by one starting with a capital, is a title or heading of its own ("Findings" above "The most
#: common rootstock …"), not the start of a wrapped sentence (wrapped lines run to about the block's width).
SHORT_LINE_WORDS = 6


def reflow(text: str) -> str:
    """Page text with the lines of each paragraph joined by spaces (paragraphs stay apart at blank lines), so a
    sentence wrapped over lines is one sentence to the chunker and the embedder; a word hyphenated at a line end
    is joined; a short unpunctuated line before a capitalised one stays a paragraph of its own. Idempotent."""
    text = _HYPHEN_BREAK.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    paragraphs = []
    for block in re.split(r"\n[ \t]*\n", text):
        lines = [ln.strip() for ln in block.split("\n") if ln.strip()]
        width = max((len(ln) for ln in lines), default=0)
        out: list[str] = []
        last = ""  # the previous line as it was on the page
        for line in lines:
            alone = (
                len(last.split()) <= SHORT_LINE_WORDS
                and len(last) < width / 2
                and last[-1:] not in (".", ",", ";", ":", "!", "?", ")", '"', "'", "’", "”")
                and line[:1].isupper()
            )
            if out and not alone:
                out[-1] = f"{out[-1]} {line}"
            else:
                out.append(line)
            last = line
        paragraphs.extend(out)
    return "\n\n".join(paragraphs)


def page_symbol(number: int, heading: str | None) -> str:
    """``page N`` or ``page N › <heading>`` (docs/design.md, "Contract" → Sources: ``symbol`` is ``page N`` for a
    PDF)."""
    heading = " ".join((heading or "").split())
    return f"page {number} › {heading}" if heading else f"page {number}"


def prepare_pdf(
    extracted: PdfText,
    path: str,
    count_tokens: Callable[[str], int],
    count_tokens_batch: Callable[[list[str]], Sequence[int]] | None = None,
) -> tuple[str, list[ChunkRecord]]:
    """(title, chunk records) of an extracted PDF (pure). Pages without text yield no chunk. Each chunk:
    kind ``pdf``, ``page`` set, ``symbol`` from :func:`page_symbol`, no line range, at most
    :data:`~cairn.indexer.CHUNK_MAX_TOKENS` tokens with the title and symbol; units as for a note's prose."""
    title = " ".join((extracted.title or "").split()) or Path(path).stem
    chunks: list[ChunkRecord] = []
    for page in extracted.pages:
        text = page.text or ""
        if page.heading:  # the heading line stays a paragraph of its own, not the start of the first sentence
            text = re.sub(rf"(?m)^([ \t]*{re.escape(page.heading)}[ \t]*)\n(?!\n)", r"\1\n\n", text, count=1)
        text = reflow(text)
        if not text:
            continue
        symbol = page_symbol(page.number, page.heading)
        # The chunker sees the page as plain paragraphs; its title slot carries "title › page N › heading" so
        # the token cap holds with what is embedded beside the text.
        pieces = chunk_note(
            text,
            title=f"{title} › {symbol}",
            count_tokens=count_tokens,
            count_tokens_batch=count_tokens_batch,
            max_tokens=CHUNK_MAX_TOKENS,
            overlap_tokens=CHUNK_OVERLAP_TOKENS,
        )
        for piece in pieces:
            chunks.append(
                ChunkRecord(
                    ordinal=len(chunks),
                    symbol=symbol,
                    text=piece.text,
                    line_start=None,
                    line_end=None,
                    page=page.number,
                    token_count=piece.token_count,
                    kind="pdf",
                    content_hash=content_hash(chunk_embed_text(symbol, piece.text)),
                    units=tuple((u, content_hash(u)) for u in embedding_texts(symbol, piece.text, "prose")),
                )
            )
    return title, chunks


class PdfIndexer:
    """Brings the store's PDFs in line with the vault's, one file at a time (see the module docstring).

    ``indexer`` provides the store, the model, the configuration (``pdf``, ``pdf_max_pages``,
    ``pdf_max_bytes``, ``pdf_timeout_s``, ``ignore``) and the lock that serialises writes. The extraction
    worker starts with the first PDF and lives until :meth:`close`. Thread-safe for one caller at a time."""

    def __init__(self, indexer: Indexer, *, extractor: PdfExtractor | None = None) -> None:
        self.indexer = indexer
        self.config = indexer.config
        self.store = indexer.store
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
        root = self.indexer.root
        if paths is None:
            unreadable: dict[str, str] = {}  # places not readable now: their PDFs are not gone (kept_unreadable)
            files = list(scan_vault(root, self.config.ignore, extensions=(".pdf",), unreadable=unreadable))
            on_disk = {f.path for f in files}
            return files, sorted(set(known) - on_disk - kept_unreadable(known, unreadable))
        # The full scan's rules, file or folder as on disk (see Indexer.index_paths).
        return hinted_changes(root, paths, IgnoreRules(self.config.ignore), known, extensions=(".pdf",))

    def hints(self, paths: Iterable[str]) -> set[str]:
        """The hinted vault-relative paths that may concern PDFs: all but those that are a note file on disk now
        (a folder named ``Projects.md`` may hold PDFs, and a path gone from disk may have been such a folder)."""
        root = self.indexer.root
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
            with self.indexer.lock:
                self.indexer.reresolve_links()
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
            with self.indexer.lock:
                if self.store.delete_note(path):
                    report.deleted += 1
                    if self.indexer.on_removed is not None:
                        self.indexer.on_removed(path)

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
            with self.indexer.lock:
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
        counter = self.indexer.embedder.tokenizer
        try:
            title, chunks = prepare_pdf(extracted, vf.path, counter.count_tokens, counter.count_tokens_many)
        except Exception as exc:  # a chunker bug must not stop the queue: record it
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
        with self.indexer.lock:
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
                with self.indexer.lock:
                    if self.store.delete_note(vf.path):
                        report.deleted += 1
                        if self.indexer.on_removed is not None:
                            self.indexer.on_removed(vf.path)
                return
            if moved:
                return
            written, embedded, taken = self.indexer.embed_batch(
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
        self.indexer.record_skipped(vf, digest, reason, report, title=title, state=state)
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

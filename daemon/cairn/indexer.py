"""The indexer: brings the store in line with the vault, incrementally.

Two phases (DESIGN.md, Flows → Index):

1. **Text** (:meth:`Indexer.sync_text`): scan the vault, compare (mtime, size,
   content hash) with the store, parse and chunk what changed, and write each
   note — row, tags, links, chunks, FTS rows — in one short transaction. After
   this phase keyword search is complete.
2. **Vectors** (:meth:`Indexer.embed_pending`): fill vectors for chunks that
   have none, from the embedding cache when the same text was embedded before
   (so unchanged text is never embedded twice, and renames re-embed nothing),
   else with the model.

What is embedded: each chunk is split into **units** — its prose sentences and list
items (cleaned of markdown), and the whole chunk for code, tables and chunks
without sentences — and each unit is embedded on its own; the note's title is
embedded once. A chunk's vector is ``normalise(mean(unit vectors) + TITLE_WEIGHT ·
v_title)``; the unit vectors are kept too, so a question can match one sentence
closely (the query service ranks by the best of both). Measured on the dev set
(help vault) against one vector per whole chunk plus title: dense Recall@5 0.61 →
0.75, MRR@10 0.61 → 0.69, hybrid Recall@5 0.70 → 0.77, off-corpus not-found 60 →
80 %. Sentences are short inputs (no padding to a chunk's length), so the help vault
embeds in about the time whole chunks took (7,180 texts, 38 s on a quiet machine). Units and titles are cached by content hash, so
unchanged text is never embedded twice, a moved note needs no embedding at all
and a renamed one only its new title.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cairn.chunking import chunk_note
from cairn.config import Config
from cairn.embedder import Embedder, load_tokenizer
from cairn.errors import NoteReadError
from cairn.notes import PARSER_VERSION, LinkResolver, ParsedNote, parse_note
from cairn.prompt import candidate_sentences
from cairn.store import ChunkRecord, LinkRecord, NoteRecord, NoteState, Store
from cairn.vault import (
    IgnoreRules,
    VaultFile,
    duplicate_reason,
    file_digest,
    hinted_changes,
    hints_change_files,
    list_all_files,
    read_note_text,
    scan_vault,
)

log = logging.getLogger(__name__)

#: Weight of the title vector added to each chunk's text vector (tuned on the dev set; see README, Evaluation).
TITLE_WEIGHT = 0.5
#: Content tokens per chunk: the model's 256 minus [CLS] and [SEP].
CHUNK_MAX_TOKENS = 254
#: Tokens of trailing context repeated at the start of the next piece of a split section.
CHUNK_OVERLAP_TOKENS = 32
#: With a ``pause`` callback, :meth:`Indexer.embed_batch` sends texts to the model this many at a time (about
#: 0.1–0.2 s of work on 2 cores): the longest a note edited meanwhile waits for the PDF queue's model use.
PAUSE_SLICE = 16

Progress = Callable[[str, int, int], None]  # (phase, done, total)


def chunk_embed_text(symbol: str, text: str) -> str:
    """The text embedded for a chunk (without the title, which has its own vector): heading path, then text."""
    return f"{symbol}\n{text}" if symbol else text


def embedding_units(symbol: str, text: str, kind: str) -> list[str]:
    """The texts embedded for one chunk: its sentences and list items (≥ 3 words, markdown
    cleaned), plus the whole chunk (heading path + text) for code and tables or when it has no
    sentence. Never empty for a non-empty chunk; duplicates removed, order kept."""
    units = candidate_sentences(text, min_words=3)
    if kind in ("code", "table") or not units:
        units.append(chunk_embed_text(symbol, text))
    return list(dict.fromkeys(u for u in units if u.strip()))


def chunk_vector(
    unit_vectors: Sequence[np.ndarray] | np.ndarray, title_vector: np.ndarray, title_weight: float = TITLE_WEIGHT
) -> np.ndarray:
    """A chunk's vector from its units' and its note title's (each (384,) float32):
    ``normalise(mean(unit vectors) + title_weight · title vector)``, (384,) float32, L2-normalised."""
    vec = np.mean(unit_vectors, axis=0) if len(unit_vectors) else np.zeros_like(title_vector)
    vec = vec + title_weight * title_vector
    return (vec / max(float(np.linalg.norm(vec)), 1e-12)).astype(np.float32)


def content_hash(text: str) -> str:
    """sha256 hex of UTF-8 text: the embedding-cache key."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def title_hash(title: str) -> str:
    return content_hash("\x1ftitle\x1f" + title)


#: Embedding-cache rows no note uses are kept this long (s) after they were written, then pruned at the end of
#: an indexing run: a note moved out of the vault and back, renamed, or edited back within 30 days re-embeds
#: nothing, while the cache no longer keeps every sentence ever deleted (measured: the obsidian-hub index
#: holds 29,775 rows, 45 MB of vectors, for 3,879 notes).
CACHE_GRACE_S = 30 * 86400

#: Truncate the WAL after this many notes written in one run.
WAL_CHECKPOINT_EVERY = 200
#: Parse and chunk in worker processes when a batch has at least this many notes (2 cores: ~2× faster).
PARALLEL_MIN_NOTES = 100
#: Changed notes are read, parsed and written in batches of at most this many notes…
BATCH_NOTES = 128
#: …or this many bytes of note text (UTF-8 characters counted), whichever comes first, so the text phase holds one
#: batch at a time: its memory does not grow with the vault (before: every changed note's text and parse at once).
BATCH_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class PreparedNote:
    """A parsed note and its chunk records, ready to write (pure result of :func:`prepare_note`)."""

    note: ParsedNote
    chunks: list[ChunkRecord]


def prepare_note(
    text: str,
    path: str,
    count_tokens: Callable[[str], int],
    count_tokens_batch: Callable[[list[str]], Sequence[int]] | None = None,
) -> PreparedNote:
    """Parse a note and chunk it (CPU only, no I/O). Raises whatever the parser or chunker raises."""
    note = parse_note(text, path)
    pieces = chunk_note(
        note.body,
        title=note.title,
        body_line=note.body_line,
        count_tokens=count_tokens,
        count_tokens_batch=count_tokens_batch,
        max_tokens=CHUNK_MAX_TOKENS,
        overlap_tokens=CHUNK_OVERLAP_TOKENS,
    )
    chunks = [
        ChunkRecord(
            ordinal=c.ordinal,
            symbol=c.symbol,
            text=c.text,
            line_start=c.line_start,
            line_end=c.line_end,
            page=None,
            token_count=c.token_count,
            kind=c.kind,
            content_hash=content_hash(chunk_embed_text(c.symbol, c.text)),
            units=tuple((u, content_hash(u)) for u in embedding_units(c.symbol, c.text, c.kind)),
        )
        for c in pieces
    ]
    return PreparedNote(note, chunks)


_worker_tokenizer = None


def _worker_init(model_dir: str) -> None:
    global _worker_tokenizer
    _worker_tokenizer = load_tokenizer(Path(model_dir))


def _worker_prepare(item: tuple[str, str]) -> tuple[str, PreparedNote | None, str | None]:
    path, text = item
    try:
        assert _worker_tokenizer is not None
        return path, prepare_note(text, path, _worker_tokenizer.count_tokens, _worker_tokenizer.count_tokens_many), None
    except Exception as exc:  # reported back and recorded as the note's skip reason
        return path, None, f"{type(exc).__name__}: {exc}"


@dataclass
class IndexReport:
    """What one indexing run did. Times in seconds."""

    scanned: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    chunks_written: int = 0
    vectors_written: int = 0
    texts_embedded: int = 0  # texts actually run through the model (cache misses)
    cache_pruned: int = 0  # unused embedding-cache rows dropped (Indexer.prune_embedding_cache)
    stopped: bool = False  # ended early on request; the next run continues
    keyword_ready_s: float = 0.0
    elapsed_s: float = 0.0

    def merge(self, other: IndexReport) -> IndexReport:
        """Add ``other``'s counts, lists and time to this report (e.g. the PDF phase's to the notes'); returns self."""
        for name in (
            "scanned",
            "added",
            "updated",
            "unchanged",
            "deleted",
            "chunks_written",
            "vectors_written",
            "texts_embedded",
            "cache_pruned",
            "elapsed_s",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.skipped.extend(other.skipped)
        self.warnings.extend(other.warnings)
        self.stopped = self.stopped or other.stopped
        return self

    def to_json(self) -> dict:
        return {
            "scanned": self.scanned,
            "added": self.added,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "deleted": self.deleted,
            "skipped": [{"filePath": p, "reason": r} for p, r in self.skipped],
            "warnings": [{"filePath": p, "reason": r} for p, r in self.warnings],
            "chunksWritten": self.chunks_written,
            "vectorsWritten": self.vectors_written,
            "textsEmbedded": self.texts_embedded,
            "cachePruned": self.cache_pruned,
            "keywordReadySeconds": round(self.keyword_ready_s, 2),
            "elapsedSeconds": round(self.elapsed_s, 2),
        }


class Indexer:
    """Keeps one vault's store up to date. One indexer per store. Runs are serialised by :attr:`lock`
    (the start-up index, file-watch batches and reindex requests may come from different threads);
    the vector phase takes it per batch, so a file-watch batch can slip in between."""

    def __init__(
        self,
        config: Config,
        store: Store,
        embedder: Embedder,
        *,
        title_weight: float = TITLE_WEIGHT,
        on_removed: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.root = config.require_vault()
        self.store = store
        self.embedder = embedder
        self.title_weight = float(title_weight)
        self.lock = threading.RLock()
        #: Called with a note's vault-relative path right after its rows are deleted (its file is gone: deleted, or
        #: renamed or moved away — the new path is indexed as an added note). The daemon publishes ``removed``.
        self.on_removed: Callable[[str], None] | None = on_removed
        #: The vault's file list and the notes' aliases as the last run left them, for resolving the links of the
        #: next hinted batch without walking the vault again (obsidian-hub: ~110 ms a save: the walk, the stored
        #: aliases, the resolver); dropped when a hint may have changed the file list (:func:`hints_change_files`).
        self._links: _LinkCache | None = None
        self._check_vector_recipe()

    @property
    def vector_recipe(self) -> str:
        """Identifies how chunk vectors are made; a change invalidates stored vectors (the cache stays)."""
        return f"{self.embedder.model_id}|units=sentences-v1|title_weight={self.title_weight:g}"

    def _check_vector_recipe(self) -> None:
        stored = self.store.get_meta("vector_recipe")
        if stored != self.vector_recipe:
            if stored is not None:
                log.info(
                    "vector recipe changed (%s -> %s): rebuilding vectors from the cache", stored, self.vector_recipe
                )
                self.store.reset_vectors()
            self.store.set_meta("vector_recipe", self.vector_recipe)

    # ------------------------------------------------------------------ phase 1: text
    def sync_text(
        self, *, full: bool = False, progress: Progress | None = None, should_stop: Callable[[], bool] | None = None
    ) -> IndexReport:
        """Scan the vault and write every new or changed note; delete notes gone from disk.
        ``full`` re-parses every note even if unchanged (vectors still come from the cache).
        When ``should_stop()`` turns true the run ends between notes (``report.stopped``); every
        note written so far is complete, and the next run does the rest.
        Returns the report; never raises for a bad note (it is recorded as skipped with its reason)."""
        with self.lock:
            files = list(scan_vault(self.root, self.config.ignore))
            known = self.markdown_states()
            on_disk = {f.path for f in files}
            self._links = None
            return self._sync(
                files, sorted(set(known) - on_disk), known, full=full, progress=progress, should_stop=should_stop
            )

    def markdown_states(self) -> dict[str, NoteState]:
        """The store's states of every file but PDFs (those are the PDF queue's, see :mod:`cairn.pdf_index`)."""
        return {p: s for p, s in self.store.note_states().items() if s.kind != "pdf"}

    # ------------------------------------------------------------------ reconcile and hinted paths
    def reconcile_diff(self) -> dict[str, list[str]]:
        """The disk-vs-store comparison, read-only: ``{"added", "changed", "deleted"}`` (sorted vault-relative
        paths; notes, and PDFs when ``config.pdf``). ``changed`` means the bytes differ from what was indexed (a
        new mtime with the same hash is not a change). All three empty means the store matches the vault (the
        source of truth for tests)."""
        with self.lock:
            files = list(
                scan_vault(self.root, self.config.ignore, extensions=(".md", ".pdf") if self.config.pdf else (".md",))
            )
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
        on_disk = {f.path for f in files}
        return {"added": added, "changed": changed, "deleted": sorted(set(known) - on_disk)}

    def index_paths(
        self, paths: Iterable[str], *, progress: Progress | None = None, should_stop: Callable[[], bool] | None = None
    ) -> IndexReport:
        """Bring the store in line with the vault for a batch of hinted vault-relative paths (files or
        folders, existing or gone), e.g. from file events. Each path is re-stat'ed: a file is indexed when
        its (mtime, size, hash) differ from the store's; a folder is scanned; a path gone from disk removes
        its note, or every note under it for a folder. Folder or file is what the disk says now (a folder may be
        named ``Projects.md``), and the full scan's rules apply (:func:`cairn.vault.stat_hint`: no symlink
        followed, ignore globs, Unicode-name collisions). Hints in ignored or hidden places are dropped.
        Text phase only (call :meth:`embed_pending` next). Never raises for a bad note."""
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
        files, gone = hinted_changes(self.root, paths, rules, known)
        links, self._links = self._links, None
        if links is not None and hints_change_files(self.root, paths, rules, links.file_set):
            links = None
        # Without the file list from before (a stopped run), assume the files changed: links are re-resolved.
        return self._sync(
            files,
            gone,
            known,
            full=False,
            progress=progress,
            should_stop=should_stop,
            whole_vault=False,
            links=links,
            files_changed=links is None,
        )

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
        links: _LinkCache | None = None,
        files_changed: bool = False,
    ) -> IndexReport:
        """Write the new or changed notes among ``files`` and delete the notes at ``gone``. Links elsewhere
        are re-resolved after a whole-vault run with changes (attachments may have come or gone), and after
        a hinted batch when a note was added or removed, its aliases changed (a skipped note loses them), or
        ``files_changed`` (a hint added, removed or moved a file or folder: attachments are link targets too);
        an edit of a note's text cannot change how another note's links resolve.

        Memory stays bounded whatever the vault's size: changed notes are read, parsed and written in
        batches of at most :data:`BATCH_NOTES` notes or :data:`BATCH_BYTES` bytes of text, and only one
        batch's texts and parsed notes are held at a time (besides per-note states and alias lists)."""
        stop = should_stop or (lambda: False)
        started = time.perf_counter()
        report = IndexReport()
        report.scanned = len(files)
        for path in gone:
            if self.store.delete_note(path):
                report.deleted += 1
                if self.on_removed is not None:
                    self.on_removed(path)
        # Cheap pass (stat only): the files that may have changed. Their bytes are read batch by batch below.
        todo: list[VaultFile] = []
        total = len(files)
        for i, vf in enumerate(files):
            state = known.get(vf.path)
            if state and not full and state.mtime_ns == vf.mtime_ns and state.size == vf.size:
                report.unchanged += 1
            else:
                todo.append(vf)
            if progress:
                progress("scan", i + 1, total)
        run = _Run(self, report, known, stop, progress, len(todo), links=links)
        try:
            batch: list[tuple[VaultFile, str, str]] = []
            batch_bytes = 0
            for n, vf in enumerate(todo):
                if stop():
                    report.stopped = True
                    break
                item = self._read_changed(vf, known.get(vf.path), full, report)
                if item is not None:
                    batch.append(item)
                    batch_bytes += len(item[1])
                if batch and (len(batch) >= BATCH_NOTES or batch_bytes >= BATCH_BYTES):
                    run.write_batch(batch, consumed=n + 1)
                    batch, batch_bytes = [], 0
            if batch and not report.stopped:
                run.write_batch(batch, consumed=len(todo))
            batch = []
            if report.skipped:
                run.forget_aliases(path for path, _reason in report.skipped)
            if whole_vault and not report.stopped:
                # Attachments that came, went or moved while no one watched (the daemon was not running) change
                # how links resolve too: the store keeps a fingerprint of the file list links were resolved against.
                run.resolver()
                files_changed = files_changed or _fingerprint(run.files) != self.store.get_meta(LINK_FILES_META)
            if run.batches or report.deleted or files_changed or run.aliases_changed:
                # Links elsewhere may resolve differently now: a note came or went, an alias changed, or a file
                # (an attachment: a link target too) or folder came, went or moved (obsidian-hub: ~0.25 s).
                if whole_vault or report.added or report.deleted or run.aliases_changed or files_changed:
                    self._reresolve_links(run.resolver())
                    if not report.stopped:
                        self.store.set_meta(LINK_FILES_META, _fingerprint(run.files))
                self.store.wal_checkpoint()
            if not report.stopped:
                self._links = run.link_cache(complete=whole_vault)
        finally:
            run.close()
        if progress and todo and not report.stopped:
            progress("index", len(todo), len(todo))
        report.keyword_ready_s = report.elapsed_s = time.perf_counter() - started
        return report

    def _read_changed(
        self, vf: VaultFile, state: NoteState | None, full: bool, report: IndexReport
    ) -> tuple[VaultFile, str, str] | None:
        """(file, text, sha256) of a note whose bytes need indexing; None when it cannot be read (recorded as
        skipped) or its bytes are the ones indexed (only its mtime moved: the new stat is remembered). A file whose
        name equals an indexed one's in Unicode NFC (``vf.duplicate_of``) is recorded as skipped, naming that one."""
        if vf.duplicate_of is not None:
            reason = duplicate_reason(vf)
            self.record_skipped(vf, file_digest(vf.abs_path), reason, report, state=state)
            log.warning("skipped %s: %s", vf.path, reason)
            return None
        try:
            text, digest = read_note_text(vf.abs_path, max_bytes=self.config.max_note_bytes)
        except NoteReadError as exc:
            self.record_skipped(vf, file_digest(vf.abs_path), exc.message, report, state=state)
            log.warning("skipped %s: %s", vf.path, exc.message)
            return None
        if state and not full and state.content_hash == digest and state.status == "ok":
            self.store.touch_note(vf.path, vf.mtime_ns, vf.size)
            report.unchanged += 1
            return None
        return vf, text, digest

    def record_skipped(
        self,
        vf: VaultFile,
        digest: str,
        reason: str,
        report: IndexReport,
        *,
        title: str | None = None,
        state: NoteState | None = None,
    ) -> None:
        """Record ``vf`` as a file that could not be indexed, with ``reason`` (shown in ``/index/stats``), and add
        it to ``report.skipped``. Nothing is written when ``state`` says these bytes were skipped already."""
        if not (state and state.status == "skipped" and state.content_hash == digest):
            with self.lock:
                self.store.write_skipped(
                    vf.path,
                    kind=vf.kind,
                    title=title or Path(vf.path).stem,
                    mtime_ns=vf.mtime_ns,
                    size=vf.size,
                    content_hash=digest,
                    reason=reason,
                )
        report.skipped.append((vf.path, reason))

    def _write(self, vf: VaultFile, digest: str, prepared: PreparedNote, resolver: LinkResolver) -> int:
        note, chunks = prepared.note, prepared.chunks
        links = [
            LinkRecord(
                raw_target=l.target,
                target_path=resolver.resolve(l.target, vf.path) if l.target else vf.path,
                heading=l.heading,
                block_id=l.block_id,
                alias=l.alias,
                is_embed=l.is_embed,
                line=l.line,
            )
            for l in note.links
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
        self.store.write_note(record, chunks, note.tags, links)
        return len(chunks)

    def reresolve_links(self) -> None:
        """Resolve every stored link again against the files on disk now and the stored aliases (an attachment
        came, went or moved: a link to it written before may now point elsewhere). Call with :attr:`lock` held."""
        aliases = self.store.note_aliases()
        self._reresolve_links(
            LinkResolver([(p, aliases.get(p, ())) for p in list_all_files(self.root, self.config.ignore)])
        )

    def _reresolve_links(self, resolver: LinkResolver) -> None:
        """Links elsewhere may now resolve differently (a note was added, removed or renamed)."""
        changes = []
        for note_id, ordinal, source, raw, current in self.store.iter_links():
            target = resolver.resolve(raw, source) if raw else source
            if target != current:
                changes.append((target, note_id, ordinal))
        self.store.update_link_targets(changes)

    # ------------------------------------------------------------------ phase 2: vectors
    def embed_pending(
        self,
        *,
        batch_size: int = 256,
        progress: Progress | None = None,
        should_stop: Callable[[], bool] | None = None,
        pdf: bool | None = None,
    ) -> tuple[int, int]:
        """Fill vectors for every chunk that has none (``pdf``: only PDF chunks, only the others, or all when None).
        Returns (vectors written, texts embedded by the model). Stops early (between batches) when
        ``should_stop()`` returns True."""
        total = self.store.count_pending()
        done = written = embedded = 0
        while not (should_stop and should_stop()):
            with self.lock:
                w, e, n = self.embed_batch(batch_size, pdf=pdf)
            if not n:
                break
            written += w
            embedded += e
            done += n
            if progress:
                progress("embed", min(done, total), total)
            if done % (batch_size * 20) == 0:
                self.store.wal_checkpoint()
        self.store.wal_checkpoint()
        return written, embedded

    def embed_batch(
        self,
        batch_size: int,
        *,
        pdf: bool | None = None,
        note_path: str | None = None,
        pause: Callable[[], None] | None = None,
    ) -> tuple[int, int, int]:
        """Vectors for up to ``batch_size`` pending chunks (filters as in :meth:`Store.pending_chunks`):
        (vectors written, texts embedded, chunks taken). Needs no lock: a chunk deleted or changed while its
        vectors were computed is skipped when they are stored (:meth:`Store.set_vectors`). ``pause()``, when
        given, is called before each :data:`PAUSE_SLICE` texts go to the model (the PDF queue waits there
        while the notes' indexing has work)."""
        model_id = self.embedder.model_id
        embedded = 0
        rows = self.store.pending_chunks(batch_size, pdf=pdf, note_path=note_path)
        if not rows:
            return 0, 0, 0
        wanted: dict[str, str] = {}
        for _cid, _chash, title, units in rows:
            wanted[title_hash(title)] = title
            for _uid, text, uhash in units:
                wanted[uhash] = text
        cache = self.store.cached_vectors(wanted, model_id)
        missing = [h for h in wanted if h not in cache]
        if missing:
            texts = [wanted[h] for h in missing]
            if pause is None:
                vecs = list(self.embedder.embed(texts))
            else:
                vecs = []
                for start in range(0, len(texts), PAUSE_SLICE):
                    pause()
                    vecs.extend(self.embedder.embed(texts[start : start + PAUSE_SLICE]))
            fresh = dict(zip(missing, vecs))
            self.store.put_cached_vectors(fresh, model_id)
            cache.update(fresh)
            embedded += len(missing)
        items = []
        for cid, chash, title, units in rows:
            unit_vecs = [(uid, cache[uhash]) for uid, _text, uhash in units]
            items.append(
                (cid, chash, self.chunk_vector([v for _, v in unit_vecs], cache[title_hash(title)]), unit_vecs)
            )
        w = self.store.set_vectors(items)
        return w, embedded, len(rows)

    def chunk_vector(self, unit_vectors: Sequence[np.ndarray], title_vector: np.ndarray) -> np.ndarray:
        return chunk_vector(unit_vectors, title_vector, self.title_weight)

    def index(
        self,
        *,
        full: bool = False,
        progress: Progress | None = None,
        should_stop: Callable[[], bool] | None = None,
        pdf_vectors: bool = True,
    ) -> IndexReport:
        """Both phases for the vault's notes: text then vectors (of PDF chunks too unless ``pdf_vectors`` is
        False: the daemon's PDF queue fills those). Returns the report with keyword-ready and total times."""
        started = time.perf_counter()
        with self.lock:
            # What the text phase's result depends on besides the files, kept in meta: when it changed since the
            # last whole run, notes are read again (as pdf_index does for its ``pdf_limits``).
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
            if stale and not report.stopped:
                self.store.set_meta("text_recipe", text_recipe)
            if limits_changed and not report.stopped:
                self.store.set_meta("note_limits", note_limits)
        if not report.stopped:
            report.vectors_written, report.texts_embedded = self.embed_pending(
                progress=progress, should_stop=should_stop, pdf=None if pdf_vectors else False
            )
        if not report.stopped and not (should_stop and should_stop()):
            report.cache_pruned = self.prune_embedding_cache()
        report.elapsed_s = time.perf_counter() - started
        return report

    def prune_embedding_cache(self, *, now: float | None = None) -> int:
        """Drop embedding-cache rows no note has used for :data:`CACHE_GRACE_S` (:meth:`Store.prune_embedding_cache`:
        rows older than that whose text — a sentence, a code block, a note title — is in no note now, and every row
        of another model). Without it the cache grows by every sentence ever written or deleted. Returns the number
        of rows deleted."""
        cutoff = (time.time() if now is None else now) - CACHE_GRACE_S
        keep = (title_hash(t) for t in self.store.note_titles())
        pruned = self.store.prune_embedding_cache(self.embedder.model_id, keep, cutoff)
        if pruned:
            log.info("embedding cache: %d unused rows older than %d days dropped", pruned, CACHE_GRACE_S // 86400)
        return pruned


#: Meta key: sha256 of the vault's file list (:func:`list_all_files`) the stored links were last resolved against.
LINK_FILES_META = "link_files_sha256"


def _fingerprint(files: Sequence[str] | None) -> str:
    """sha256 (hex) of a file list (obsidian-hub's 3,957 paths: ~1 ms)."""
    h = hashlib.sha256()
    for path in files or ():
        h.update(path.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


@dataclass
class _LinkCache:
    """What links resolve against: every file of the vault (sorted, :func:`list_all_files`), the notes' aliases by
    path, and the resolver built from both (made on first need)."""

    files: list[str]
    file_set: frozenset[str]
    aliases: dict[str, list[str]]
    resolver: LinkResolver | None = None


class _Run:
    """One text-phase run's state across its batches: the parse workers (started with the first full batch,
    kept for the rest), the vault's file list and alias lists for link resolution (from ``links``, the last run's,
    when still valid), and counters."""

    def __init__(
        self,
        indexer: Indexer,
        report: IndexReport,
        known: dict[str, NoteState],
        stop: Callable[[], bool],
        progress: Progress | None,
        todo: int,
        links: _LinkCache | None = None,
    ) -> None:
        self.indexer = indexer
        self.report = report
        self.known = known
        self.stop = stop
        self.progress = progress
        self.todo = todo
        self.batches = 0
        self.written = 0
        self.aliases_changed = False
        self._pool: ProcessPoolExecutor | None = None
        self._files: list[str] | None = None
        self._old_aliases: dict[str, list[str]] | None = None
        self._fresh_aliases: dict[str, list[str]] = {}  # path -> aliases, for notes whose aliases changed in this run
        self._links = links
        self._file_set: frozenset[str] | None = None
        self._resolver: LinkResolver | None = None
        if links is not None:
            self._files, self._file_set, self._old_aliases = links.files, links.file_set, dict(links.aliases)
            self._resolver = links.resolver

    def resolver(self) -> LinkResolver:
        """Links resolve against every file of the vault and the aliases known so far (stored, then this run's)."""
        if self._files is None:
            self._files = list(list_all_files(self.indexer.root, self.indexer.config.ignore))
        if self._old_aliases is None:
            self._old_aliases = self.indexer.store.note_aliases()
        if self._resolver is None or self._fresh_aliases:
            fresh, old = self._fresh_aliases, self._old_aliases
            self._resolver = LinkResolver([(p, fresh[p] if p in fresh else old.get(p, ())) for p in self._files])
        return self._resolver

    def forget_aliases(self, paths: Iterable[str]) -> None:
        """Notes recorded as skipped in this run: their stored aliases are gone (``Store.write_skipped``), so links
        by those aliases resolve elsewhere or nowhere now (:attr:`aliases_changed` when any had some)."""
        if self._old_aliases is None:
            self._old_aliases = self.indexer.store.note_aliases()
        for path in paths:
            if self._fresh_aliases.get(path, self._old_aliases.get(path)):
                self._fresh_aliases[path] = []
                self.aliases_changed = True

    @property
    def files(self) -> list[str] | None:
        """The vault's file list this run resolves links against (None until :meth:`resolver` first runs)."""
        return self._files

    def link_cache(self, *, complete: bool = False) -> _LinkCache | None:
        """The file list and aliases as this run leaves them, for the next hinted batch. When this run read
        neither (nothing was written), the cache it was given (None if none), unless ``complete`` (a whole-vault
        run: then they are read now, so the next batch can tell whether its hints changed the files)."""
        if complete:
            self.resolver()
        if self._files is None or self._old_aliases is None:
            return self._links
        aliases = self._old_aliases
        for path, fresh in self._fresh_aliases.items():
            if fresh:
                aliases[path] = fresh
            else:
                aliases.pop(path, None)
        resolver = self._resolver if not self._fresh_aliases else None
        return _LinkCache(self._files, self._file_set or frozenset(self._files), aliases, resolver)

    def _prepare(self, items: list[tuple[str, str]]) -> Iterable[tuple[str, PreparedNote | None, str | None]]:
        """(path, PreparedNote | None, error | None) for each (path, text), in order; in worker processes
        (spawned: safe beside the daemon's threads) once a batch is big enough to be worth them."""
        workers = min(os.cpu_count() or 1, 4)
        if self._pool is None and len(items) >= PARALLEL_MIN_NOTES and workers > 1:
            ctx = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(
                max_workers=workers,
                mp_context=ctx,
                initializer=_worker_init,
                initargs=(str(self.indexer.embedder.model_dir),),
            )
        if self._pool is not None:
            return self._pool.map(_worker_prepare, items, chunksize=max(1, min(16, len(items) // (4 * workers))))
        return self._prepare_here(items)

    def _prepare_here(self, items: list[tuple[str, str]]):
        counter = self.indexer.embedder.tokenizer
        for path, text in items:
            try:
                yield path, prepare_note(text, path, counter.count_tokens, counter.count_tokens_many), None
            except Exception as exc:
                log.exception("cannot parse %s", path)
                yield path, None, f"{type(exc).__name__}: {exc}"

    def write_batch(self, batch: list[tuple[VaultFile, str, str]], *, consumed: int) -> None:
        """Parse and write one batch of (file, text, sha256), one transaction per note; ``consumed``: how many
        of the run's changed files are dealt with once this batch is written (for progress)."""
        indexer, report, store = self.indexer, self.report, self.indexer.store
        self.batches += 1
        by_path = {vf.path: (vf, digest) for vf, _text, digest in batch}
        parsed: dict[str, PreparedNote] = {}
        for path, prepared, error in self._prepare([(vf.path, text) for vf, text, _ in batch]):
            if prepared is not None:
                parsed[path] = prepared
                continue
            vf, digest = by_path[path]
            reason = f"cannot parse: {error}"
            log.warning("skipped %s: %s", path, reason)
            indexer.record_skipped(vf, digest, reason, report)
        if self._old_aliases is None:
            self._old_aliases = store.note_aliases()
        for path, prepared in parsed.items():
            aliases = list(prepared.note.aliases)
            if aliases != self._old_aliases.get(path, []):
                self.aliases_changed = True
                self._fresh_aliases[path] = aliases  # only the changed ones are kept (dropped aliases too)
            elif path in self._fresh_aliases:
                self._fresh_aliases[path] = aliases
        resolver = self.resolver()
        for path, prepared in parsed.items():
            if self.stop():
                report.stopped = True
                break
            vf, digest = by_path[path]
            note = prepared.note
            try:
                chunks = indexer._write(vf, digest, prepared, resolver)
            except Exception as exc:  # e.g. a title too long to fit a chunk: skip the note, keep going
                log.exception("cannot index %s", vf.path)
                indexer.record_skipped(vf, digest, f"cannot index: {exc}", report, title=note.title)
                continue
            report.chunks_written += chunks
            if note.frontmatter_error:
                report.warnings.append((vf.path, note.frontmatter_error))
            if self.known.get(vf.path) is None:
                report.added += 1
            else:
                report.updated += 1
            self.written += 1
            if self.written % WAL_CHECKPOINT_EVERY == 0:  # keep the WAL file small during a long first index
                store.wal_checkpoint()
        if self.progress and not report.stopped:
            self.progress("index", consumed, self.todo)

    def close(self) -> None:
        if self._pool is not None:  # also when the run stopped early: drop the queued work
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

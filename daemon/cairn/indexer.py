"""The indexer: brings the store in line with the vault, incrementally.

Two phases (docs/design.md, "Flows" → Index):

1. **Text** (:meth:`Indexer.sync_text`): scan the vault, compare (mtime, size,
   content hash) with the store, parse and chunk what changed, and write each
   note — row, tags, links, chunks, FTS rows — in one short transaction. After
   this phase keyword search is complete.
2. **Vectors** (:meth:`Indexer.embed_pending`): fill vectors for chunks that
   have none, from the embedding cache when the same text was embedded before
   (so unchanged text is never embedded twice, and renames re-embed nothing),
   else with the model.

What is embedded, and how a chunk's vector is made: :mod:`cairn.embedding`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from cairn.config import Config
from cairn.embedder import Embedder
from cairn.embedding import (
    RECIPE_VERSION,
    TITLE_WEIGHT,
    WHOLE_WEIGHT,
    chunk_vector,
    embed_in_slices,
    title_hash,
    whole_chunk_hash,
    whole_chunk_text,
)
from cairn.index_run import (
    CHUNK_MAX_TOKENS,
    CHUNK_OVERLAP_TOKENS,
    IndexReport,
    PreparedNote,
    Progress,
    prepare_note,
)
from cairn.link_targets import LinkCache
from cairn.notes import PARSER_VERSION, LinkResolver
from cairn.progress import pro_rata
from cairn.store import NoteState, Store
from cairn.vault import (
    IgnoreRules,
    VaultFile,
    file_digest,
    hinted_changes,
    hints_change_files,
    is_not_downloaded,
    kept_unreadable,
    list_all_files,
    scan_vault,
)

log = logging.getLogger(__name__)

#: With a ``pause`` callback, :meth:`Indexer.embed_batch` sends texts to the model this many at a time: a slice
#: is the longest a note edited meanwhile waits for the PDF queue's model use.
PAUSE_SLICE = 16

__all__ = [
    "CHUNK_MAX_TOKENS",
    "CHUNK_OVERLAP_TOKENS",
    "IndexReport",
    "Indexer",
    "PreparedNote",
    "Progress",
    "prepare_note",
]

#: Embedding-cache rows no note uses are kept this long (s) after they were written, then pruned at the end of
#: an indexing run: a note moved out of the vault and back, renamed, or edited back within 30 days re-embeds
#: nothing, while the cache no longer keeps every sentence ever deleted.
CACHE_GRACE_S = 30 * 86400


def _errors(unreadable: dict[str, str]) -> dict[str, str]:
    """The places of ``unreadable`` that could not be read for an error (not iCloud placeholders)."""
    return {p: r for p, r in unreadable.items() if not is_not_downloaded(r)}


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
        whole_weight: float = WHOLE_WEIGHT,
        on_removed: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.root = config.require_vault()
        self.store = store
        self.embedder = embedder
        self.title_weight = float(title_weight)
        self.whole_weight = float(whole_weight)
        #: Held while the store is written (a batch of notes, a save's batch, link re-resolution), never across a
        #: whole-vault run: a save is written between two of its batches (docs/design.md, "Contract" → Freshness).
        self.lock = threading.RLock()
        self._whole_run = threading.Lock()  # one whole-vault text run at a time
        #: The paths hinted batches wrote or removed since the running whole-vault run's scan (None: no such run).
        self._saved_since_scan: set[str] | None = None
        #: Called with a note's vault-relative path right after its rows are deleted (its file is gone: deleted, or
        #: renamed or moved away — the new path is indexed as an added note). The daemon publishes ``removed``.
        self.on_removed: Callable[[str], None] | None = on_removed
        #: The vault's file list and the notes' aliases as the last run left them, for resolving the links of the
        #: next hinted batch without walking the vault again; dropped when a hint may have changed the file list
        #: (:func:`hints_change_files`).
        self._links: LinkCache | None = None
        self._check_vector_recipe()

    @property
    def vector_recipe(self) -> str:
        """Identifies how chunk vectors are made; a change invalidates stored vectors (the cache stays)."""
        return (
            f"{self.embedder.model_id}|units={RECIPE_VERSION}|title_weight={self.title_weight:g}"
            f"|whole_weight={self.whole_weight:g}"
        )

    def _check_vector_recipe(self) -> None:
        stored = self.store.get_meta("vector_recipe")
        if stored != self.vector_recipe:
            if stored is not None:
                log.info(
                    "vector recipe changed (%s -> %s): re-making every chunk vector once (texts already embedded "
                    "come from the embedding cache)",
                    stored,
                    self.vector_recipe,
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
        """The store's states of every file but PDFs (those are the PDF queue's, see :mod:`cairn.pdf_index`)."""
        return {p: s for p, s in self.store.note_states().items() if s.kind != "pdf"}

    # ------------------------------------------------------------------ reconcile and hinted paths
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
            files_changed=links is None and not _errors(unreadable),  # a file list read now may lack what was not
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
        batches of at most :data:`~cairn.text_phase.BATCH_NOTES` notes or
        :data:`~cairn.text_phase.BATCH_BYTES` bytes of text, and only two
        batches' texts and parsed notes are held at a time (besides per-note states and alias lists)."""
        stop = should_stop or (lambda: False)
        started = time.perf_counter()
        report = IndexReport()
        report.scanned = len(files)
        with self.lock:
            self._delete_gone(gone, report, whole_vault=whole_vault)
        todo = self._maybe_changed(files, known, full, report, progress)
        from cairn.text_phase import TextRun  # here: text_phase imports this module

        run = TextRun(self, report, known, stop, progress, len(todo), links=links)
        run.superseded = self.superseded if whole_vault else None
        if progress and todo:
            progress("index", 0, len(todo))
        try:
            run.write_changed(todo, full)
            if _errors(unreadable or {}):  # the file list read now lacks what could not be read: no link targets
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
                    self.reresolve_links()
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
            if self.store.delete_note(path):
                report.deleted += 1
                if self.on_removed is not None:
                    self.on_removed(path)

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

    def reresolve_links(self) -> None:
        """Resolve every stored link again against the files on disk now and the stored aliases (an attachment
        came, went or moved: a link to it written before may now point elsewhere). Call with :attr:`lock` held."""
        aliases = self.store.note_aliases()
        self.reresolve_links_with(
            LinkResolver([(p, aliases.get(p, ())) for p in list_all_files(self.root, self.config.ignore)])
        )

    def reresolve_links_with(self, resolver: LinkResolver) -> None:
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
        """Vectors in two tiers (``pdf``: only PDF chunks, only the others, or all when None): first tier 1 — one
        whole-chunk vector — for every chunk without a vector (progress phase ``embed``), then tier 2 — sentence
        and title vectors, and the chunk's blended vector — for every chunk not yet complete (phase ``refine``),
        each pass most recently modified notes first (:meth:`Store.pending_chunks`). Every note is searchable by
        meaning after the first pass, at about a third of the model's work. Returns (vectors written, texts
        embedded by the model). Stops early (between batches) when ``should_stop()`` returns True. The model runs as
        background work, which waits while foreground work (a save, a question) is in flight. Takes no lock
        (:meth:`embed_batch`)."""
        written = embedded = 0
        for tier, phase, count in ((1, "embed", self.store.count_pending), (2, "refine", self.store.count_unrefined)):
            total = count()
            done = 0
            if progress and total:
                progress(phase, 0, total)
            while not (should_stop and should_stop()):
                part = pro_rata(progress, phase, done, min(batch_size, total - done), total) if progress else None
                w, e, n = self.embed_batch(batch_size, pdf=pdf, tier=tier, should_stop=should_stop, on_slice=part)
                embedded += e
                if not n:
                    break
                written += w
                done += n
                if progress:
                    progress(phase, min(done, total), total)
                if done % (batch_size * 20) == 0:
                    self.store.wal_checkpoint()
            if should_stop and should_stop():
                break
            if progress and total and done < total:  # saves completed some meanwhile: this pass is done
                progress(phase, total, total)
        self.store.wal_checkpoint()
        return written, embedded

    def embed_notes(
        self, note_ids: Sequence[int], *, batch_size: int = 64, should_stop: Callable[[], bool] | None = None
    ) -> tuple[int, int]:
        """Complete vectors (tier 2 at once) for the chunks of ``note_ids`` not yet complete: a save's vectors,
        made before the bulk's next slice. Returns (chunks given their first vector, texts embedded by the
        model); ``should_stop()`` is looked at before each batch."""
        written = embedded = 0
        while note_ids and not (should_stop and should_stop()):
            w, e, n = self.embed_batch(batch_size, note_ids=note_ids, tier=2, background=False)
            written, embedded = written + w, embedded + e
            if not n:
                break
        return written, embedded

    def embed_batch(
        self,
        batch_size: int,
        *,
        pdf: bool | None = None,
        note_path: str | None = None,
        note_ids: Sequence[int] | None = None,
        tier: int = 2,
        background: bool = True,
        pause: Callable[[], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        on_slice: Callable[[int, int], None] | None = None,
    ) -> tuple[int, int, int]:
        """Vectors of ``tier`` for up to ``batch_size`` chunks below it (filters as in :meth:`Store.pending_chunks`):
        tier 1 embeds only each chunk's whole-chunk text, its vector the chunk's; tier 2 embeds the title, the
        whole chunk and the sentences and blends them (:func:`~cairn.embedding.chunk_vector`), sentence vectors kept.
        Returns (chunks written that had no vector before, texts embedded, chunks taken). Needs no lock: a chunk
        deleted or changed while its vectors were computed is skipped when they are stored
        (:meth:`Store.set_vectors`). ``background``: the model runs as bulk work that gives way to questions (else
        as work a person waits for: a save's vectors). ``pause()``, when given, is called before each
        :data:`PAUSE_SLICE` texts go to the model. Once ``should_stop()`` is true (looked at before each ONNX run,
        :func:`~cairn.embedding.embed_in_slices`) the texts embedded so far go to the embedding cache, no vector is
        written and (0, texts embedded, 0) is returned: the next run takes the same chunks and finds those texts
        cached. ``on_slice(texts embedded, texts to embed)`` is called as the model goes (for progress)."""
        model_id = self.embedder.model_id
        embedded = 0
        rows = self.store.pending_chunks(batch_size, pdf=pdf, note_path=note_path, note_ids=note_ids, below=tier)
        if not rows:
            return 0, 0, 0
        wanted: dict[str, str] = {}
        for row in rows:
            units = [text for _uid, text, _uhash in row.sentences]
            wanted[whole_chunk_hash(row.title, row.content_hash)] = whole_chunk_text(row.title, row.symbol, units)
            if tier >= 2:
                wanted[title_hash(row.title)] = row.title
                for _uid, text, uhash in row.sentences:
                    wanted[uhash] = text
        cache = self.store.cached_vectors(wanted, model_id)
        missing = [h for h in wanted if h not in cache]
        if missing:
            texts = [wanted[h] for h in missing]
            vecs = embed_in_slices(
                self.embedder, texts, PAUSE_SLICE, pause, should_stop, on_slice, background=background
            )
            fresh = {missing[i]: v for i, v in vecs.items()}
            self.store.put_cached_vectors(fresh, model_id)
            cache.update(fresh)
            embedded += len(fresh)
            if len(fresh) < len(missing):
                return 0, embedded, 0
        items: list[tuple[int, str, np.ndarray, list[tuple[int, np.ndarray]]]] = []
        for row in rows:
            whole_vec = cache[whole_chunk_hash(row.title, row.content_hash)]
            if tier == 1:
                items.append((row.chunk_id, row.content_hash, whole_vec, []))
                continue
            unit_vecs = [(uid, cache[uhash]) for uid, _text, uhash in row.sentences]
            vec = self.chunk_vector([v for _, v in unit_vecs], cache[title_hash(row.title)], whole_vec)
            items.append((row.chunk_id, row.content_hash, vec, unit_vecs))
        written = self.store.set_vectors(items, tier=tier)
        return min(written, sum(1 for row in rows if row.tier == 0)), embedded, len(rows)

    def chunk_vector(
        self, unit_vectors: Sequence[np.ndarray], title_vector: np.ndarray, whole_vector: np.ndarray
    ) -> np.ndarray:
        """:func:`cairn.embedding.chunk_vector` with this indexer's weights."""
        return chunk_vector(unit_vectors, title_vector, whole_vector, self.title_weight, self.whole_weight)

    def index(
        self,
        *,
        full: bool = False,
        progress: Progress | None = None,
        should_stop: Callable[[], bool] | None = None,
        pdf_vectors: bool = True,
        vectors: bool = True,
    ) -> IndexReport:
        """Both phases for the vault's notes: text then vectors (of PDF chunks too unless ``pdf_vectors`` is
        False: the daemon's PDF queue fills those; ``vectors`` False: the text phase alone). Neither holds
        :attr:`lock` for the whole run: a save is indexed between two batches. Returns the report with
        keyword-ready and total times."""
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
        with self.lock:
            if stale and not report.stopped:
                self.store.set_meta("text_recipe", text_recipe)
            if limits_changed and not report.stopped:
                self.store.set_meta("note_limits", note_limits)
        if not report.stopped and vectors:
            report.vectors_written, report.texts_embedded = self.embed_pending(
                progress=progress, should_stop=should_stop, pdf=None if pdf_vectors else False
            )
        if vectors and not report.stopped and not (should_stop and should_stop()):
            report.cache_pruned = self.prune_embedding_cache()
        report.elapsed_s = time.perf_counter() - started
        return report

    def prune_embedding_cache(self, *, now: float | None = None) -> int:
        """Drop embedding-cache rows no note has used for :data:`CACHE_GRACE_S` (:meth:`Store.prune_embedding_cache`:
        rows older than that whose text — a sentence, a code block, a note title, a whole chunk — is in no note now,
        and every row of another model). Without it the cache grows by every sentence ever written or deleted.
        Returns the number of rows deleted."""
        cutoff = (time.time() if now is None else now) - CACHE_GRACE_S

        def keep() -> Iterator[str]:  # read only when some rows are old enough to prune
            yield from (title_hash(t) for t in self.store.note_titles())
            yield from (whole_chunk_hash(t, h) for t, h in self.store.chunk_title_hashes())

        pruned = self.store.prune_embedding_cache(self.embedder.model_id, keep(), cutoff)
        if pruned:
            log.info("embedding cache: %d unused rows older than %d days dropped", pruned, CACHE_GRACE_S // 86400)
        return pruned

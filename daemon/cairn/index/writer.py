"""The store as the index side writes it (:class:`IndexWriter`): one write lock, and the writes that notes and PDFs
share — a note's rows deleted (and said: ``removed``), a file recorded as skipped, links re-resolved."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from cairn.index.report import IndexReport
from cairn.notes import LinkResolver
from cairn.store import NoteState, Store
from cairn.vault import VaultFile, list_all_files


class IndexWriter:
    """Writes ``store`` for one vault (``root``, ``ignore``: the configured globs). Every write of the index side
    holds :attr:`lock`: a batch of notes, a save, one PDF, link re-resolution — never a whole-vault run, so a save is
    written between two of its batches (docs/design.md, "Contract" → Freshness). Reentrant; thread-safe.

    ``on_removed(path)`` is called with a note's vault-relative path right after its rows are deleted (its file is
    gone: deleted, or renamed or moved away — the new path is indexed as an added note); the daemon publishes
    ``removed``."""

    def __init__(
        self,
        store: Store,
        root: Path,
        ignore: Sequence[str] = (),
        *,
        on_removed: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.root = root
        self.ignore = ignore
        self.on_removed = on_removed
        self.lock = threading.RLock()

    def delete_note(self, path: str, report: IndexReport) -> None:
        """Delete the rows of the note at ``path`` (counted in ``report.deleted``, said to ``on_removed``); nothing
        when none is stored."""
        with self.lock:
            if self.store.delete_note(path):
                report.deleted += 1
                if self.on_removed is not None:
                    self.on_removed(path)

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
            LinkResolver([(p, aliases.get(p, ())) for p in list_all_files(self.root, self.ignore)])
        )

    def reresolve_links_with(self, resolver: LinkResolver) -> None:
        """Links elsewhere may now resolve differently (a note was added, removed or renamed)."""
        changes = []
        for note_id, ordinal, source, raw, current in self.store.iter_links():
            target = resolver.resolve(raw, source) if raw else source
            if target != current:
                changes.append((target, note_id, ordinal))
        self.store.update_link_targets(changes)

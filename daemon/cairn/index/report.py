"""What the index side reports, as data (no threads): one run's :class:`IndexReport`, the places kept while they
cannot be read (:class:`KeptPlaces`), and the JSON views: the index's counts (:func:`index_stats_json`), a run's
``indexed`` event (:func:`indexed_json`), ``/index/stats`` (:func:`stats_json`) and ``/health``'s index part
(:func:`index_health`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cairn import __version__
from cairn.config import LLMConfig
from cairn.embedder import Embedder
from cairn.errors import CairnError
from cairn.store import IndexStats, Store
from cairn.vault import is_not_downloaded, paths_under

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]  # (phase, done, total)

#: The :class:`IndexReport` fields that :meth:`IndexReport.merge` adds up.
_SUMMED = "scanned added updated unchanged deleted chunks_written vectors_written texts_embedded cache_pruned elapsed_s"


@dataclass
class IndexReport:
    """What one indexing run did. Times in seconds."""

    scanned: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    #: (path, reason) of the places that exist but could not be read now — a folder not listed, a file not opened
    #: (permission denied, too many open files, locked): what was indexed there is kept, to be looked at again.
    deferred: list[tuple[str, str]] = field(default_factory=list)
    #: (path, reason) of the notes only an iCloud placeholder stands for: their last indexed version is kept.
    not_downloaded: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    chunks_written: int = 0
    vectors_written: int = 0
    texts_embedded: int = 0  # texts actually run through the model (cache misses)
    cache_pruned: int = 0  # unused embedding-cache rows dropped (ChunkVectors.prune_embedding_cache)
    stopped: bool = False  # ended early on request; the next run continues
    #: the files a hinted batch looked at (vault-relative paths; empty for a whole-vault run)
    hinted: list[str] = field(default_factory=list)
    keyword_ready_s: float = 0.0
    elapsed_s: float = 0.0

    def merge(self, other: IndexReport) -> IndexReport:
        """Add ``other``'s counts, lists and time to this report (e.g. the PDF phase's to the notes'); returns self."""
        for name in _SUMMED.split():
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.skipped.extend(other.skipped)
        self.deferred.extend(other.deferred)
        self.not_downloaded.extend(other.not_downloaded)
        self.warnings.extend(other.warnings)
        self.stopped = self.stopped or other.stopped
        return self

    @property
    def changed(self) -> bool:
        """Whether the run added, updated, removed or skipped a file (what an ``indexed`` event is published for)."""
        return bool(self.added or self.updated or self.deleted or self.skipped)

    def to_json(self) -> dict:
        return {
            "scanned": self.scanned,
            "added": self.added,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "deleted": self.deleted,
            "skipped": [{"filePath": p, "reason": r} for p, r in self.skipped],
            "unreadable": [{"filePath": p, "reason": r} for p, r in self.deferred],
            "notDownloaded": [{"filePath": p, "reason": r} for p, r in self.not_downloaded],
            "warnings": [{"filePath": p, "reason": r} for p, r in self.warnings],
            "chunksWritten": self.chunks_written,
            "vectorsWritten": self.vectors_written,
            "textsEmbedded": self.texts_embedded,
            "cachePruned": self.cache_pruned,
            "keywordReadySeconds": round(self.keyword_ready_s, 2),
            "elapsedSeconds": round(self.elapsed_s, 2),
        }


def indexed_json(report: IndexReport, *, stopped_early: bool) -> dict[str, Any]:
    """The ``indexed`` event a run ends with: ``{added, updated, removed, skipped, elapsedS, stoppedEarly}``."""
    return {
        "added": report.added,
        "updated": report.updated,
        "removed": report.deleted,
        "skipped": len(report.skipped),
        "elapsedS": round(report.elapsed_s, 2),
        "stoppedEarly": stopped_early,
    }


@dataclass
class KeptPlaces:
    """The places that exist but could not be read at the last look (vault-relative, ``""`` the vault folder → the
    OS's reason; ``/index/stats`` ``unreadable``): what is indexed there is kept and the watcher looks again. And the
    notes only an iCloud placeholder stands for (→ what to do; ``notDownloaded``), their last indexed version kept;
    not retried: the download is a file event."""

    unreadable: dict[str, str] = field(default_factory=dict)
    not_downloaded: dict[str, str] = field(default_factory=dict)

    def update(self, report: IndexReport, hinted: Iterable[str] | None) -> tuple[list[str], set[str]] | None:
        """Bring both in line with a run (``hinted``: a watcher batch's paths; None: the whole vault). Returns what
        the watcher is to do, ``(places to look at again, places read fine again)``, or None when nothing."""
        before = set(self.unreadable)
        if hinted is None:
            self.unreadable, self.not_downloaded = {}, {}
        else:
            hinted = set(hinted)
            for places in (self.unreadable, self.not_downloaded):
                for path in paths_under(places, hinted):
                    del places[path]
        self.unreadable.update(report.deferred)
        self.not_downloaded.update(report.not_downloaded)
        if not (report.deferred or before):
            return None
        return sorted({p for p, _r in report.deferred}), before - set(self.unreadable)

    def unreadable_json(self) -> list[dict[str, str]]:
        return [{"filePath": p or ".", "reason": r} for p, r in sorted(self.unreadable.items())]

    def not_downloaded_json(self) -> list[dict[str, str]]:
        return [{"filePath": p, "reason": r} for p, r in sorted(self.not_downloaded.items())]


def errors_of(unreadable: Mapping[str, str]) -> dict[str, str]:
    """The places of ``unreadable`` that could not be read for an error (not iCloud placeholders)."""
    return {p: r for p, r in unreadable.items() if not is_not_downloaded(r)}


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


def stats_json(
    counts: IndexStats,
    *,
    watch: Mapping[str, Any],
    pdf: Mapping[str, Any] | None,
    indexing: bool,
    vault: str,
    vault_there: bool,
    index_error: str | None,
    places: KeptPlaces,
    recovered: Mapping[str, Any] | None,
    schema_version: int,
    model: str,
    memory: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """``/index/stats``: {notes, skipped, chunks, vectors, pending, lastIngestedAt, pendingPaths, recovered, indexing,
    watching, paused, watcher, vault, schemaVersion, model, indexError, pdf, unreadable, notDownloaded, memory, errors}.
    ``pending`` counts chunks awaiting vectors plus changed paths awaiting indexing (``watch``: the watcher's
    :meth:`~cairn.index.watch.Hints.stats`); ``pdf`` the PDF lane's, None when PDFs are indexed inline;
    ``indexing``: a run (or a PDF) is under way. When the vault folder is not there (``vault_there``), ``indexError``
    says so and ``watching`` is false."""
    out = index_stats_json(counts)
    pending_paths = int(watch.get("pendingPaths", 0))
    out["pending"] += pending_paths
    out.update({"pendingPaths": pending_paths, "recovered": recovered})
    if not vault_there:
        index_error = (
            f"the vault folder {vault!r} is missing or not a folder (moved, renamed or on a drive not mounted); "
            "searches answer from the index as it was"
        )
    out.update(
        {
            "indexing": indexing,
            "watching": bool(watch.get("watching", False)) and vault_there,
            "paused": bool(watch.get("paused", False)),
            "watcher": watch.get("watcher"),
            "vault": vault,
            "schemaVersion": schema_version,
            "model": model,
            "indexError": index_error,
            "pdf": pdf,
            "unreadable": places.unreadable_json(),
            "notDownloaded": places.not_downloaded_json(),
            "memory": memory,
        }
    )
    return out


def index_health(
    store: Store, embedder: Embedder, llm: LLMConfig, write_error: str | None, vault_id: str
) -> dict[str, Any]:
    """``/health``: {status, version, vaultId, store: {ok, reason}, embedder, llm}; ``vaultId`` says which vault
    this daemon serves (:func:`cairn.config.vault_id_of`: a client holding another vault's id refuses it).
    ``status`` is ``ok`` only when the store can be read and written and the model answers. ``store.reason``
    (``None`` when ok) is a code, never a path (``/health`` needs no token): ``write_error`` (``disk_full``: the
    last run could not write; retried with backoff), ``index_file_changed`` (the index file was deleted or
    replaced while served), ``unreadable``. Never raises (a failed check is logged and reported)."""
    reason = write_error
    try:
        store.check_readable()
    except Exception as exc:  # report, never raise, from a health check
        reason = exc.code if isinstance(exc, CairnError) else "unreadable"
        log.warning("health: store check failed: %s", exc)
    store_ok = reason is None
    try:
        embedder_ok = embedder.embed_query("health").shape == (embedder.dim,)
    except Exception as exc:
        embedder_ok = False
        log.warning("health: embedder check failed: %s", exc)
    return {
        "status": "ok" if store_ok and embedder_ok else "degraded",
        "version": __version__,
        "vaultId": vault_id,
        "store": {"ok": store_ok, "reason": reason},
        "embedder": {"ok": embedder_ok, "model": embedder.model_id},
        "llm": {"configured": llm.configured, "reachable": False, "remote": llm.remote},
    }

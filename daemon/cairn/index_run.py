"""What one indexing run makes and reports (layer 2, part of :mod:`cairn.indexer`): a note parsed and chunked ready
to write (:func:`prepare_note`, pure) and the run's :class:`IndexReport`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cairn.chunking import chunk_note
from cairn.embedding import chunk_embed_text, content_hash, embedding_texts
from cairn.notes import ParsedNote, parse_note
from cairn.store import ChunkRecord

#: Content tokens per chunk: the model's 256 minus [CLS] and [SEP].
CHUNK_MAX_TOKENS = 254
#: Tokens of trailing context repeated at the start of the next piece of a split section.
CHUNK_OVERLAP_TOKENS = 32

Progress = Callable[[str, int, int], None]  # (phase, done, total)


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
            units=tuple((u, content_hash(u)) for u in embedding_texts(c.symbol, c.text, c.kind)),
        )
        for c in pieces
    ]
    return PreparedNote(note, chunks)


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
    cache_pruned: int = 0  # unused embedding-cache rows dropped (Indexer.prune_embedding_cache)
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

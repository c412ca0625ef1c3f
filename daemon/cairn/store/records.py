"""The rows the store writes and returns: frozen dataclasses, and named tuples where rows are hot (every note's
state is read before each file-event batch). No wire formats here: the JSON views are built by the callers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


class NoteState(NamedTuple):
    """What the store knows of a file, to decide whether it changed: (mtime, size, hash). A named tuple: the
    indexer reads every note's state before each file-event batch, and a named tuple is cheaper to make than a
    frozen dataclass."""

    id: int
    path: str
    mtime_ns: int
    size: int
    content_hash: str
    status: str
    kind: str = "markdown"


class TagCount(NamedTuple):
    """A normalised tag and the number of ``notes`` carrying it."""

    tag: str
    notes: int


class LinkTarget(NamedTuple):
    """A stored link and where it resolves (a named tuple: every link of the vault is read to re-resolve them)."""

    note_id: int
    ordinal: int
    source_path: str
    raw_target: str
    target_path: str | None


class PendingSentence(NamedTuple):
    """A sentence of a chunk waiting for its vector: its id, text and sha256 (the embedding cache key)."""

    unit_id: int
    text: str
    content_hash: str


class PendingChunk(NamedTuple):
    """A chunk below the complete vector tier: its id, content hash, note title, sentences, heading path, text and
    vector tier now (0: none, 1: its whole-chunk vector alone)."""

    chunk_id: int
    content_hash: str
    title: str
    sentences: list[PendingSentence]
    symbol: str
    text: str
    tier: int = 0


class Neighbour(NamedTuple):
    """A chunk found near a query vector, and its cosine similarity to it."""

    chunk_id: int
    cosine: float


class VectorMatrices(NamedTuple):
    """Chunk and sentence vectors read in one transaction: the vectors ``generation`` they were read at, chunk ids
    (n,) int64 ascending with their vectors (n, 384) float32, and the owning chunk id (m,) int64 of each sentence
    vector (m, 384) float32 (each chunk's sentences after it)."""

    generation: int
    chunk_ids: np.ndarray
    chunk_vectors: np.ndarray
    sentence_owners: np.ndarray
    sentence_vectors: np.ndarray


class EmbeddedChunks(NamedTuple):
    """The chunks that have a vector: the vectors ``generation``, the vector ``recipe`` they were made with (None
    when unset), their ids (k,) int64 ascending and their vector tiers (k,) int8 (1 or 2)."""

    generation: int
    recipe: str | None
    chunk_ids: np.ndarray
    tiers: np.ndarray


class FtsCounts(NamedTuple):
    """``chunks_fts``'s rows, tokens in all columns and highest row id."""

    rows: int
    tokens: int
    top_id: int


@dataclass(frozen=True, slots=True)
class NoteRecord:
    path: str
    kind: str
    title: str
    aliases: Sequence[str]
    frontmatter: dict
    mtime_ns: int
    size: int
    content_hash: str
    error: str | None = None
    #: the stable code of ``error`` (e.g. :data:`cairn.notes.FRONTMATTER_INVALID`): what withholding keys on
    error_code: str | None = None


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    ordinal: int
    symbol: str
    text: str
    line_start: int | None
    line_end: int | None
    page: int | None
    token_count: int
    kind: str
    content_hash: str
    #: embedding units: (text, sha256 of text); at least one per chunk
    units: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class LinkRecord:
    raw_target: str
    target_path: str | None
    heading: str | None
    block_id: str | None
    alias: str | None
    is_embed: bool
    line: int


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """A chunk joined with its note, as the query service needs it."""

    chunk_id: int
    note_id: int
    path: str
    title: str
    symbol: str
    text: str
    line_start: int | None
    line_end: int | None
    page: int | None
    kind: str
    indexed_at: float
    content_hash: str
    embedded: bool
    #: tokens of the chunk's embedded text (title, heading path and text): an upper bound on its text's
    token_count: int = 0


class ChunkKey(NamedTuple):
    """What ranking reads of every candidate chunk (:meth:`Store.chunk_keys`): far cheaper to read than a
    :class:`ChunkRow`, whose text only the hits shown need."""

    chunk_id: int
    note_id: int
    path: str


CHUNK_KEY_COLUMNS = "c.id, c.note_id, n.path"

CHUNK_ROW_COLUMNS = (
    "c.id, c.note_id, n.path, n.title, c.symbol, c.text, c.line_start, c.line_end, c.page, c.kind, "
    "n.indexed_at, c.content_hash, c.embedded, c.token_count"
)


def chunk_row(r: Sequence) -> ChunkRow:
    """A :class:`ChunkRow` from a row of :data:`CHUNK_ROW_COLUMNS`."""
    return ChunkRow(
        chunk_id=r[0],
        note_id=r[1],
        path=r[2],
        title=r[3],
        symbol=r[4],
        text=r[5],
        line_start=r[6],
        line_end=r[7],
        page=r[8],
        kind=r[9],
        indexed_at=r[10],
        content_hash=r[11],
        embedded=bool(r[12]),
        token_count=r[13],
    )


@dataclass(frozen=True, slots=True)
class StoredNote:
    """A file the index knows: an indexed note or PDF (``status`` ``"ok"``), or one skipped (``"skipped"``) with
    the reason in ``error`` (for an indexed note, ``error`` is a warning, e.g. invalid front-matter)."""

    id: int
    path: str
    kind: str
    title: str
    aliases: tuple[str, ...]
    frontmatter: dict
    indexed_at: float  # unix seconds
    status: str
    error: str | None


@dataclass(frozen=True, slots=True)
class NoteListing:
    """An indexed note as a listing shows it: its path, title, tags (sorted) and indexing time (unix seconds)."""

    path: str
    title: str
    tags: tuple[str, ...]
    indexed_at: float


@dataclass(frozen=True, slots=True)
class Backlink:
    """A note (``path``) with a link to another at file line ``line``."""

    path: str
    line: int


@dataclass(frozen=True, slots=True)
class NoteProblem:
    """A file with an error: skipped (``skipped``), or indexed with a warning (e.g. invalid front-matter)."""

    path: str
    reason: str
    skipped: bool


@dataclass(frozen=True, slots=True)
class IndexStats:
    """Counts of the index: ``notes`` indexed (PDFs included), of which ``pdfs``; files ``skipped``; ``chunks``,
    of which ``vectors`` have a vector and ``pending`` not yet; ``last_ingested_at`` (unix seconds, None when
    empty); ``errors``, by path. All zero for an empty index."""

    notes: int = 0
    pdfs: int = 0
    skipped: int = 0
    chunks: int = 0
    vectors: int = 0
    pending: int = 0
    #: chunks whose vector is tier 1 (the whole chunk alone): searchable by meaning, sentence vectors to come
    refining: int = 0
    last_ingested_at: float | None = None
    errors: tuple[NoteProblem, ...] = ()


@dataclass(frozen=True)
class FtsSnapshot:
    """See :meth:`Store.fts_snapshot`."""

    live: np.ndarray | None
    docs: list[tuple[int, list[str]]]
    n_rows: int
    n_tokens: int
    deleted: np.ndarray | None = None
    deletion_seq: int | None = None

"""The index store: one SQLite file per vault (apsw, WAL, one writer). All SQL lives in this package.

Tables are described in :mod:`cairn.store.schema`. Connections are per thread
(readers never block the writer in WAL mode); writes are serialised by a lock
and each note is written in one short transaction, so a crash at any moment
leaves a consistent store (docs/design.md, "Flows" → Index: "one transaction per note").

:class:`Store` composes the tables' parts: :mod:`~cairn.store.notes` (notes, tags,
links), :mod:`~cairn.store.chunks` (chunks, FTS5), :mod:`~cairn.store.vectors`
(vectors, embedding cache) over :mod:`~cairn.store.base` (connections, schema,
meta). Every method returns plain values or the rows of :mod:`~cairn.store.records`.
"""

from __future__ import annotations

from cairn.store.base import disk_full
from cairn.store.chunks import ChunkTables
from cairn.store.notes import NoteTables
from cairn.store.records import (
    Backlink,
    ChunkKey,
    ChunkRecord,
    ChunkRow,
    EmbeddedChunks,
    FtsCounts,
    FtsSnapshot,
    IndexStats,
    LinkRecord,
    LinkTarget,
    Neighbour,
    NoteListing,
    NoteProblem,
    NoteRecord,
    NoteState,
    PendingChunk,
    PendingSentence,
    StoredNote,
    TagCount,
    VectorMatrices,
)
from cairn.store.schema import EMBED_DIM, SCHEMA_VERSION
from cairn.store.vectors import VectorTables, tiers_of

__all__ = [
    "Store",
    "disk_full",
    "NoteState",
    "NoteRecord",
    "ChunkRecord",
    "LinkRecord",
    "ChunkKey",
    "ChunkRow",
    "StoredNote",
    "Backlink",
    "IndexStats",
    "NoteProblem",
    "NoteListing",
    "FtsSnapshot",
    "PendingChunk",
    "PendingSentence",
    "TagCount",
    "LinkTarget",
    "Neighbour",
    "VectorMatrices",
    "EmbeddedChunks",
    "FtsCounts",
    "SCHEMA_VERSION",
    "EMBED_DIM",
    "tiers_of",
]


class Store(NoteTables, ChunkTables, VectorTables):
    """An open index database.

    ``Store(path)`` creates the file and folders if needed, loads sqlite-vec,
    switches to WAL and applies pending migrations. Raises
    :class:`~cairn.errors.SchemaTooNewError` for a database from a newer Cairn and
    :class:`~cairn.errors.StoreError` when the file cannot be opened or is not a database.
    """

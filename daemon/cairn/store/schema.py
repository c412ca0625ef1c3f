"""The index's schema: its migrations, one named function each, tracked in ``PRAGMA user_version`` (docs/design.md,
"Data").

A migration is a function of the connection, registered in order with :func:`migration` (as sqlite-utils and llm
name theirs): the *i*-th (1-based) brings a database from version ``i - 1`` to ``i``, in one transaction with the
new version (:meth:`cairn.store.base.StoreBase._migrate`). A database whose ``user_version`` is above
:data:`SCHEMA_VERSION` was written by a newer Cairn and is refused (:class:`cairn.errors.SchemaTooNewError`). A new
migration goes at the end; one that shipped is never changed.
"""

from __future__ import annotations

from collections.abc import Callable

import apsw

EMBED_DIM = 384
#: The tokenizer of ``chunks_fts`` (FTS5's ``tokenize=`` option): Porter stemming over unicode61 with diacritics
#: removed. The query service's in-memory BM25 (cairn.search.keyword) tokenizes with this same tokenizer.
FTS_TOKENIZER = ("porter", "unicode61", "remove_diacritics", "2")

#: The rows whose ``error`` is a front-matter problem, by the messages Cairn wrote before ``notes.error_code``
#: (schema version 4) existed: used once, by migration 4, and to read an older index opened read-only.
LEGACY_FRONTMATTER_ERROR = "(error LIKE 'invalid YAML front-matter%' OR error LIKE 'front-matter %')"

Migration = Callable[[apsw.Connection], None]
#: The migrations in order: the *i*-th makes schema version *i*.
MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    """Register ``fn`` as the next migration (its position is its schema version)."""
    MIGRATIONS.append(fn)
    return fn


@migration
def m001_initial(conn: apsw.Connection) -> None:
    """The first schema."""
    conn.execute(
        f"""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;

        -- One row per vault file Cairn knows: indexed notes, and files skipped with `error` set.
        CREATE TABLE notes (
            id           INTEGER PRIMARY KEY,
            path         TEXT NOT NULL UNIQUE,          -- vault-relative, POSIX, NFC
            kind         TEXT NOT NULL DEFAULT 'markdown',
            title        TEXT NOT NULL,
            aliases      TEXT NOT NULL DEFAULT '[]',    -- JSON list
            frontmatter  TEXT NOT NULL DEFAULT '{{}}',  -- JSON object
            mtime_ns     INTEGER NOT NULL,
            size         INTEGER NOT NULL,
            content_hash TEXT NOT NULL,                 -- sha256 of the file's bytes
            indexed_at   REAL NOT NULL,                 -- unix seconds
            status       TEXT NOT NULL DEFAULT 'ok',    -- 'ok' | 'skipped'
            error        TEXT                           -- why skipped, or a warning (invalid front-matter)
        );

        CREATE TABLE note_tags (
            note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
            tag     TEXT NOT NULL,                      -- normalised: no '#', casefolded, nested 'a/b'
            PRIMARY KEY (note_id, tag)
        ) WITHOUT ROWID;
        CREATE INDEX note_tags_by_tag ON note_tags(tag);

        CREATE TABLE links (
            note_id     INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
            ordinal     INTEGER NOT NULL,
            raw_target  TEXT NOT NULL,
            target_path TEXT,                           -- resolved vault-relative path, NULL if unresolved
            heading     TEXT,
            block_id    TEXT,
            alias       TEXT,
            is_embed    INTEGER NOT NULL DEFAULT 0,
            line        INTEGER NOT NULL,
            PRIMARY KEY (note_id, ordinal)
        ) WITHOUT ROWID;
        CREATE INDEX links_by_target ON links(target_path);

        -- AUTOINCREMENT: a chunk id is never reused, so an id held by a reader's in-memory
        -- vectors can never come to mean another chunk.
        CREATE TABLE chunks (
            id           INTEGER PRIMARY KEY AUTOINCREMENT,
            note_id      INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
            ordinal      INTEGER NOT NULL,
            symbol       TEXT NOT NULL,                 -- heading path joined with ' › ', or 'page N'
            text         TEXT NOT NULL,
            line_start   INTEGER,
            line_end     INTEGER,
            page         INTEGER,
            token_count  INTEGER NOT NULL,
            kind         TEXT NOT NULL,                 -- prose | code | table | pdf
            content_hash TEXT NOT NULL,                 -- sha256 of heading path + text: identifies this version
            embedded     INTEGER NOT NULL DEFAULT 0     -- its vector tier: 0 none, then 1 or 2 (migration 5)
        );
        CREATE INDEX chunks_by_note ON chunks(note_id, ordinal);
        CREATE INDEX chunks_pending ON chunks(embedded) WHERE embedded = 0;

        -- Embedding units: the sentences (or, for code and tables, the whole chunk) of each chunk.
        -- Each has its own vector; a chunk's vector is built from its units' (see cairn.index.vectors).
        CREATE TABLE chunk_units (
            id           INTEGER PRIMARY KEY AUTOINCREMENT,
            chunk_id     INTEGER NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
            text         TEXT NOT NULL,
            content_hash TEXT NOT NULL                  -- sha256 of text: the embedding cache key
        );
        CREATE INDEX chunk_units_by_chunk ON chunk_units(chunk_id);

        -- FTS5 over chunk text + heading path + note title; rowid = chunks.id.
        CREATE VIRTUAL TABLE chunks_fts USING fts5(
            text, symbol, title,
            content='', contentless_delete=1,
            tokenize='{" ".join(FTS_TOKENIZER)}'
        );

        -- sqlite-vec: one L2-normalised vector per chunk, cosine distance; rowid = chunks.id.
        CREATE VIRTUAL TABLE chunk_vectors USING vec0(
            chunk_id INTEGER PRIMARY KEY,
            embedding float[{EMBED_DIM}] distance_metric=cosine
        );

        CREATE VIRTUAL TABLE unit_vectors USING vec0(
            unit_id INTEGER PRIMARY KEY,
            embedding float[{EMBED_DIM}] distance_metric=cosine
        );

        -- Embeddings by (content hash, model id): unchanged text is never embedded twice;
        -- rows outlive the chunks that used them, so renames and moves re-embed nothing.
        CREATE TABLE embedding_cache (
            content_hash TEXT NOT NULL,
            model_id     TEXT NOT NULL,
            vector       BLOB NOT NULL,                 -- {EMBED_DIM} float32, little-endian, L2-normalised
            created_at   REAL NOT NULL,
            PRIMARY KEY (content_hash, model_id)
        ) WITHOUT ROWID;
    """
    )


@migration
def m002_embedding_cache_by_age(conn: apsw.Connection) -> None:
    """Embedding-cache rows by age, for pruning the unused old ones (Store.prune_embedding_cache) without reading
    every vector."""
    conn.execute(
        """
        CREATE INDEX embedding_cache_by_age ON embedding_cache(created_at);
    """
    )


@migration
def m003_chunk_deletions(conn: apsw.Connection) -> None:
    """The ids of deleted chunks, in commit order (``seq``: AUTOINCREMENT, so gap-free unless trimmed), written by a
    trigger in the transaction that deletes them. A reader holding the full-text index in memory
    (cairn.search.keyword) reads the entries after the last one it applied instead of scanning all of FTS5's row ids
    after every save. Trimmed to the newest Store.DELETION_LOG_KEEP entries; a reader further behind sees the gap
    and scans."""
    conn.execute(
        """
        CREATE TABLE chunk_deletions (
            seq      INTEGER PRIMARY KEY AUTOINCREMENT,
            chunk_id INTEGER NOT NULL
        );
        CREATE TRIGGER chunks_deleted AFTER DELETE ON chunks BEGIN
            INSERT INTO chunk_deletions(chunk_id) VALUES (old.id);
        END;
    """
    )


@migration
def m004_note_error_codes(conn: apsw.Connection) -> None:
    """A stable code beside each note's error message (cairn.notes.FRONTMATTER_ERROR_CODES for front-matter
    problems; NULL when the producer gives none): withholding keys on the code, never on the message. Rows written
    before get their code from the message's prefix."""
    conn.execute(
        f"""
        ALTER TABLE notes ADD COLUMN error_code TEXT;
        UPDATE notes SET error_code = CASE
            WHEN error LIKE 'front-matter repeats a property%' THEN 'frontmatter_repeated_property'
            ELSE 'frontmatter_invalid' END
        WHERE {LEGACY_FRONTMATTER_ERROR};
    """
    )


@migration
def m005_vector_tiers(conn: apsw.Connection) -> None:
    """Vectors in two tiers (docs/design.md, "Data"). ``chunks.embedded`` is 0 (no vector), 1 (tier 1: the chunk's
    vector is its whole-chunk vector alone, no sentence vectors yet) or 2 (complete: the blended vector and the
    sentence vectors). Every chunk embedded before this version was complete. ``chunks_unrefined`` finds the chunks
    a second pass still has to complete without reading the others."""
    conn.execute(
        """
        UPDATE chunks SET embedded = 2 WHERE embedded = 1;
        CREATE INDEX chunks_unrefined ON chunks(embedded) WHERE embedded < 2;
    """
    )


@migration
def m006_pending_notes_indexes(conn: apsw.Connection) -> None:
    """The notes still waiting for vectors counted from an index alone (:func:`cairn.store.reads.coverage_counts`,
    on every search while a vault embeds): the note ids of the chunks without a vector, and of those not complete."""
    conn.execute(
        """
        CREATE INDEX chunks_pending_notes ON chunks(note_id) WHERE embedded = 0;
        CREATE INDEX chunks_unrefined_notes ON chunks(note_id, embedded) WHERE embedded < 2;
    """
    )


@migration
def m007_embedding_cache_rowid(conn: apsw.Connection) -> None:
    """The embedding cache as a rowid table. WITHOUT ROWID keeps a row in an index b-tree, where a 1.6 KB row spills
    past the ~1 KB a 4 KB page keeps in place onto overflow pages of its own (4.8 KB of file a vector); in a table
    b-tree two rows share a page. Its age index becomes (model_id, created_at): pruning finds another model's rows
    without reading the vectors."""
    conn.execute(
        """
        CREATE TABLE embedding_cache_rows (
            content_hash TEXT NOT NULL,
            model_id     TEXT NOT NULL,
            vector       BLOB NOT NULL,
            created_at   REAL NOT NULL,
            UNIQUE (content_hash, model_id)
        );
        INSERT INTO embedding_cache_rows(content_hash, model_id, vector, created_at)
            SELECT content_hash, model_id, vector, created_at FROM embedding_cache;
        DROP TABLE embedding_cache;
        ALTER TABLE embedding_cache_rows RENAME TO embedding_cache;
        CREATE INDEX embedding_cache_by_model_age ON embedding_cache(model_id, created_at);
    """
    )


SCHEMA_VERSION = len(MIGRATIONS)
#: Migrations after which the file is vacuumed once: 7 rewrites the embedding cache (more than half of an index made
#: before it), and the pages it frees would otherwise stay in the file.
VACUUM_AFTER = frozenset({7})

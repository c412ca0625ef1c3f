"""The ``notes``, ``note_tags`` and ``links`` tables (a note's chunks are written with it, in one transaction)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence

import apsw

from cairn.store.base import StoreBase, scalar
from cairn.store.records import (
    Backlink,
    ChunkRecord,
    IndexStats,
    LinkRecord,
    LinkTarget,
    NoteProblem,
    NoteRecord,
    NoteState,
    StoredNote,
    TagCount,
)


class NoteTables(StoreBase):
    """Notes, their tags and links: the writes of one note in one transaction, and the reads by path."""

    def note_states(self) -> dict[str, NoteState]:
        """Every file the store knows, by vault-relative path."""
        rows = self.conn.execute("SELECT id, path, mtime_ns, size, content_hash, status, kind FROM notes")
        return {r[1]: NoteState(*r) for r in rows}

    def write_note(
        self, note: NoteRecord, chunks: Sequence[ChunkRecord], tags: Iterable[str], links: Sequence[LinkRecord]
    ) -> int:
        """Replace everything stored for ``note.path`` in ONE transaction: the note row, its tags,
        links, chunks and FTS rows. Vectors of the old chunks are removed; new chunks start
        un-embedded (``embedded = 0``) and are filled later by :meth:`set_vectors`.
        Returns the note id (kept stable across updates of the same path)."""
        with self._write_lock, self.conn as c:
            note_id = self._put_note_row(c, note)
            c.executemany(
                "INSERT OR IGNORE INTO note_tags(note_id, tag) VALUES(?, ?)", [(note_id, t) for t in set(tags)]
            )
            c.executemany(
                "INSERT INTO links(note_id, ordinal, raw_target, target_path, heading, block_id, alias, is_embed, line)"
                " VALUES(?,?,?,?,?,?,?,?,?)",
                [
                    (note_id, i, k.raw_target, k.target_path, k.heading, k.block_id, k.alias, int(k.is_embed), k.line)
                    for i, k in enumerate(links)
                ],
            )
            for ch in chunks:
                self._insert_chunk(c, note_id, note.title, ch)
        return note_id

    def _put_note_row(self, c: apsw.Connection, note: NoteRecord) -> int:
        """Insert ``note``'s row, or update it (its old contents deleted) when its path is known; its id."""
        self._bump_notes_generation(c)
        row = c.execute("SELECT id FROM notes WHERE path=?", (note.path,)).fetchone()
        values = (
            note.kind,
            note.title,
            json.dumps(list(note.aliases), ensure_ascii=False),
            json.dumps(note.frontmatter, ensure_ascii=False, default=str),
            note.mtime_ns,
            note.size,
            note.content_hash,
            time.time(),
            note.error,
            note.error_code,
        )
        if row:
            self._delete_note_contents(c, row[0])
            c.execute(
                "UPDATE notes SET kind=?, title=?, aliases=?, frontmatter=?, mtime_ns=?, size=?, "
                "content_hash=?, indexed_at=?, status='ok', error=?, error_code=? WHERE id=?",
                (*values, row[0]),
            )
            return int(row[0])
        c.execute(
            "INSERT INTO notes(kind, title, aliases, frontmatter, mtime_ns, size, content_hash, "
            "indexed_at, status, error, error_code, path) VALUES(?,?,?,?,?,?,?,?,'ok',?,?,?)",
            (*values, note.path),
        )
        return c.last_insert_rowid()

    @staticmethod
    def _insert_chunk(c: apsw.Connection, note_id: int, title: str, ch: ChunkRecord) -> None:
        """One chunk of note ``note_id`` (titled ``title``) with its FTS row and its sentences, not yet embedded."""
        c.execute(
            "INSERT INTO chunks(note_id, ordinal, symbol, text, line_start, line_end, page, token_count,"
            " kind, content_hash) VALUES(?,?,?,?,?,?,?,?,?,?)",
            (
                note_id,
                ch.ordinal,
                ch.symbol,
                ch.text,
                ch.line_start,
                ch.line_end,
                ch.page,
                ch.token_count,
                ch.kind,
                ch.content_hash,
            ),
        )
        chunk_id = c.last_insert_rowid()
        c.execute(
            "INSERT INTO chunks_fts(rowid, text, symbol, title) VALUES(?,?,?,?)", (chunk_id, ch.text, ch.symbol, title)
        )
        c.executemany(
            "INSERT INTO chunk_units(chunk_id, text, content_hash) VALUES(?,?,?)",
            [(chunk_id, t, h) for t, h in ch.units],
        )

    def write_skipped(
        self, path: str, *, kind: str, title: str, mtime_ns: int, size: int, content_hash: str, reason: str
    ) -> None:
        """Record a file that could not be indexed, with its reason (shown in ``/index/stats``).
        Any rows from an earlier good version are removed in the same transaction."""
        now = time.time()
        with self._write_lock, self.conn as c:
            self._bump_notes_generation(c)
            row = c.execute("SELECT id FROM notes WHERE path=?", (path,)).fetchone()
            if row:
                self._delete_note_contents(c, row[0])
                c.execute(
                    "UPDATE notes SET kind=?, title=?, aliases='[]', frontmatter='{}', mtime_ns=?, size=?, "
                    "content_hash=?, indexed_at=?, status='skipped', error=?, error_code=NULL WHERE id=?",
                    (kind, title, mtime_ns, size, content_hash, now, reason, row[0]),
                )
            else:
                c.execute(
                    "INSERT INTO notes(path, kind, title, mtime_ns, size, content_hash, indexed_at, status, error)"
                    " VALUES(?,?,?,?,?,?,?,'skipped',?)",
                    (path, kind, title, mtime_ns, size, content_hash, now, reason),
                )

    def touch_note(self, path: str, mtime_ns: int, size: int) -> None:
        """The file's bytes are unchanged (same hash) but its mtime moved: remember the new stat."""
        with self._write_lock, self.conn as c:
            c.execute("UPDATE notes SET mtime_ns=?, size=? WHERE path=?", (mtime_ns, size, path))

    def delete_note(self, path: str) -> bool:
        """Remove a note and every row that belongs to it (chunks, FTS, vectors, tags, links) in one
        transaction. Embedding-cache rows stay (a moved note re-embeds nothing). Returns True if it existed."""
        with self._write_lock, self.conn as c:
            row = c.execute("SELECT id FROM notes WHERE path=?", (path,)).fetchone()
            if row:
                self._bump_notes_generation(c)
                self._delete_note_contents(c, row[0])
                c.execute("DELETE FROM notes WHERE id=?", (row[0],))
        return bool(row)

    @classmethod
    def _delete_note_contents(cls, c: apsw.Connection, note_id: int) -> None:
        ids = [r[0] for r in c.execute("SELECT id FROM chunks WHERE note_id=?", (note_id,))]
        if ids:
            cls._bump_vectors_generation(c)
            c.executemany("DELETE FROM chunks_fts WHERE rowid=?", [(i,) for i in ids])
            c.executemany("DELETE FROM chunk_vectors WHERE chunk_id=?", [(i,) for i in ids])
            units = [
                (r[0],)
                for r in c.execute(
                    "SELECT id FROM chunk_units WHERE chunk_id IN (SELECT value FROM json_each(?))", (json.dumps(ids),)
                )
            ]
            c.executemany("DELETE FROM unit_vectors WHERE unit_id=?", units)
            c.execute("DELETE FROM chunk_units WHERE chunk_id IN (SELECT value FROM json_each(?))", (json.dumps(ids),))
        c.execute("DELETE FROM chunks WHERE note_id=?", (note_id,))  # trigger chunks_deleted logs the ids
        if ids:
            c.execute(
                "DELETE FROM chunk_deletions WHERE seq <= (SELECT seq FROM sqlite_sequence WHERE "
                "name = 'chunk_deletions') - ?",
                (cls.DELETION_LOG_KEEP,),
            )
        c.execute("DELETE FROM note_tags WHERE note_id=?", (note_id,))
        c.execute("DELETE FROM links WHERE note_id=?", (note_id,))

    def note_ids(self, paths: Iterable[str]) -> list[int]:
        """The ids of the notes (any status) at ``paths`` (vault-relative); paths the store lacks are left out."""
        rows = self.conn.execute(
            "SELECT id FROM notes WHERE path IN (SELECT value FROM json_each(?))", (json.dumps(list(paths)),)
        )
        return [int(r[0]) for r in rows]

    def note_aliases(self) -> dict[str, list[str]]:
        """Aliases of every indexed note, by path (for link resolution)."""
        return {p: json.loads(a) for p, a in self.conn.execute("SELECT path, aliases FROM notes WHERE status='ok'")}

    def iter_links(self) -> Iterator[LinkTarget]:
        """Every stored link, one row at a time from a cursor (memory does not grow with the vault). Finish or drop
        the iterator before writing on this thread's connection."""
        for row in self.conn.execute(
            "SELECT l.note_id, l.ordinal, n.path, l.raw_target, l.target_path FROM links l "
            "JOIN notes n ON n.id=l.note_id"
        ):
            yield LinkTarget(*row)

    def update_link_targets(self, changes: Sequence[tuple[str | None, int, int]]) -> None:
        """Set ``target_path`` for (target_path, note_id, ordinal) triples, in one transaction."""
        if not changes:
            return
        with self._write_lock, self.conn as c:
            c.executemany("UPDATE links SET target_path=? WHERE note_id=? AND ordinal=?", changes)

    def note_by_path(self, path: str) -> StoredNote | None:
        """What the index holds for the file at vault-relative ``path`` (any status), or None."""
        row = self.conn.execute(
            "SELECT id, path, kind, title, aliases, frontmatter, indexed_at, status, error FROM notes WHERE path=?",
            (path,),
        ).fetchone()
        if not row:
            return None
        return StoredNote(
            id=row[0],
            path=row[1],
            kind=row[2],
            title=row[3],
            aliases=tuple(json.loads(row[4])),
            frontmatter=json.loads(row[5]),
            indexed_at=row[6],
            status=row[7],
            error=row[8],
        )

    def links_of_note(self, path: str) -> list[LinkRecord]:
        """The links of the note at vault-relative ``path``, in document order."""
        rows = self.conn.execute(
            "SELECT l.raw_target, l.target_path, l.heading, l.block_id, l.alias, l.is_embed, l.line FROM links l "
            "JOIN notes n ON n.id=l.note_id WHERE n.path=? ORDER BY l.ordinal",
            (path,),
        )
        return [
            LinkRecord(
                raw_target=r[0],
                target_path=r[1],
                heading=r[2],
                block_id=r[3],
                alias=r[4],
                is_embed=bool(r[5]),
                line=r[6],
            )
            for r in rows
        ]

    def backlinks(self, path: str) -> list[Backlink]:
        """The other notes linking to vault-relative ``path`` (one entry per source line), by path then line. A
        note's links to itself (``[[#Heading]]``, ``[[#^block]]``, its own name) make it no backlink of its own."""
        rows = self.conn.execute(
            "SELECT DISTINCT n.path, l.line FROM links l JOIN notes n ON n.id=l.note_id WHERE l.target_path=? "
            "AND n.path<>? ORDER BY n.path, l.line",
            (path, path),
        )
        return [Backlink(path=r[0], line=r[1]) for r in rows]

    def tag_counts(self) -> list[TagCount]:
        """Every tag with its number of notes, sorted by tag."""
        return [
            TagCount(*r) for r in self.conn.execute("SELECT tag, count(*) FROM note_tags GROUP BY tag ORDER BY tag")
        ]

    def note_tags(self, path: str) -> list[str]:
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT t.tag FROM note_tags t JOIN notes n ON n.id=t.note_id WHERE n.path=? ORDER BY t.tag", (path,)
            )
        ]

    def tags_of_notes(self, note_ids: Iterable[int]) -> dict[int, list[str]]:
        ids = list(set(note_ids))
        out: dict[int, list[str]] = {i: [] for i in ids}
        if ids:
            for nid, tag in self.conn.execute(
                "SELECT note_id, tag FROM note_tags WHERE note_id IN (SELECT value FROM json_each(?)) ORDER BY tag",
                (json.dumps(ids),),
            ):
                out[nid].append(tag)
        return out

    def note_names(self) -> dict[int, list[str]]:
        """{note id: [title, *aliases]} of every indexed note (status ok)."""
        rows = self.conn.execute("SELECT id, title, aliases FROM notes WHERE status='ok'")
        # Most notes have no alias ('[]'): parsed only where there are some (a second of JSON at 40,000 notes).
        return {int(i): [str(t), *(str(a) for a in json.loads(a))] if a and a != "[]" else [str(t)] for i, t, a in rows}

    def note_titles(self) -> list[str]:
        """The titles of every note and PDF in the index (status ok), distinct."""
        return [t for (t,) in self.conn.execute("SELECT DISTINCT title FROM notes WHERE status='ok'")]

    def stats(self) -> IndexStats:
        """Counts and freshness of the index, and every file with an error or warning (by path)."""
        c = self.conn
        notes = scalar(c, "SELECT count(*) FROM notes WHERE status='ok'")
        pdfs = scalar(c, "SELECT count(*) FROM notes WHERE status='ok' AND kind='pdf'")
        skipped = scalar(c, "SELECT count(*) FROM notes WHERE status='skipped'")
        chunks = scalar(c, "SELECT count(*) FROM chunks")
        pending = scalar(c, "SELECT count(*) FROM chunks WHERE embedded=0")
        refining = scalar(c, "SELECT count(*) FROM chunks WHERE embedded=1")
        last = scalar(c, "SELECT max(indexed_at) FROM notes")
        problems = tuple(
            NoteProblem(path=p, reason=e, skipped=s == "skipped")
            for p, e, s in c.execute("SELECT path, error, status FROM notes WHERE error IS NOT NULL ORDER BY path")
        )
        return IndexStats(
            notes=notes,
            pdfs=pdfs,
            skipped=skipped,
            chunks=chunks,
            vectors=chunks - pending,
            pending=pending,
            refining=refining,
            last_ingested_at=last,
            errors=problems,
        )

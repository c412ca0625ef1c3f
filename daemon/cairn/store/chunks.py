"""The ``chunks`` table and its FTS5 index ``chunks_fts``: chunk rows by id or note, tag/folder scopes, and what an
in-memory BM25 (cairn.search.keyword) reads of FTS5."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import cast

import apsw
import numpy as np

from cairn.errors import StoreError
from cairn.store.base import StoreBase, scalar
from cairn.store.fts import fts_totals
from cairn.store.records import (
    CHUNK_KEY_COLUMNS,
    CHUNK_ROW_COLUMNS,
    ChunkKey,
    ChunkRow,
    FtsCounts,
    FtsSnapshot,
    chunk_row,
)
from cairn.store.schema import FTS_TOKENIZER


class ChunkTables(StoreBase):
    """Chunks joined with their notes, and the full-text index ``chunks_fts`` (FTS5, BM25)."""

    def _by_ids(self, columns: str, chunk_ids: Sequence[int]) -> list[tuple]:
        """Rows of ``columns`` (of ``chunks c`` joined with ``notes n``) for each chunk of ``chunk_ids`` that
        exists, in no particular order; one statement whatever the number of ids (bound as one JSON array, as
        SQLite limits the number of host parameters)."""
        ids = list(chunk_ids)
        if not ids:
            return []
        return self.conn.execute(
            f"SELECT {columns} FROM chunks c JOIN notes n ON n.id=c.note_id "
            "WHERE c.id IN (SELECT value FROM json_each(?))",
            (json.dumps(ids),),
        ).fetchall()

    def chunk_rows(self, chunk_ids: Sequence[int]) -> dict[int, ChunkRow]:
        """Chunks with their note's path, title and indexing time, by id."""
        return {r[0]: chunk_row(r) for r in self._by_ids(CHUNK_ROW_COLUMNS, chunk_ids)}

    def chunk_keys(self, chunk_ids: Sequence[int]) -> dict[int, ChunkKey]:
        """The :class:`ChunkKey` of each chunk of ``chunk_ids`` that exists, by id."""
        return {r[0]: ChunkKey._make(r) for r in self._by_ids(CHUNK_KEY_COLUMNS, chunk_ids)}

    def chunk_texts(self, chunk_ids: Sequence[int]) -> dict[int, tuple[str, str, str]]:
        """(note title, heading path, text) of each chunk of ``chunk_ids`` that exists, by id: the columns of its
        full-text row."""
        return {r[0]: (r[1], r[2], r[3]) for r in self._by_ids("c.id, n.title, c.symbol, c.text", chunk_ids)}

    def chunk_kinds(self, chunk_ids: Sequence[int]) -> dict[int, str]:
        """The kind (prose, code, table, pdf) of each chunk of ``chunk_ids`` that exists, by id."""
        return {r[0]: r[1] for r in self._by_ids("c.id, c.kind", chunk_ids)}

    def chunks_of_note(self, path: str) -> list[ChunkRow]:
        """The chunks of the note at vault-relative ``path``, in order ([] when none)."""
        rows = self.conn.execute(
            f"SELECT {CHUNK_ROW_COLUMNS} FROM chunks c JOIN notes n ON n.id=c.note_id "
            "WHERE n.path=? ORDER BY c.ordinal",
            (path,),
        )
        return [chunk_row(r) for r in rows]

    def scoped_chunk_ids(self, tags: Sequence[str], folders: Sequence[str]) -> list[int]:
        """Chunk ids of notes carrying ANY of ``tags`` (nested ``a/b`` matches ``a``) and lying under
        ANY of ``folders`` (vault-relative folder prefixes, ASCII letter case ignored). Empty sequences mean no
        restriction on that axis."""
        where, args = ["n.status='ok'"], []
        if tags:
            ors = []
            for t in tags:
                ors.append("(t.tag = ? OR substr(t.tag, 1, ?) = ?)")
                args += [t, len(t) + 1, t + "/"]
            where.append(f"n.id IN (SELECT t.note_id FROM note_tags t WHERE {' OR '.join(ors)})")
        if folders:
            ors = []
            for f in folders:
                f = f.strip("/")
                ors.append("substr(n.path, 1, ?) = ? COLLATE NOCASE")  # ASCII letters: as Obsidian's path: search
                args += [len(f) + 1, f + "/"]
            where.append("(" + " OR ".join(ors) + ")")
        sql = f"SELECT c.id FROM chunks c JOIN notes n ON n.id=c.note_id WHERE {' AND '.join(where)}"
        return [r[0] for r in self.conn.execute(sql, args)]

    def fts_tokens(self, text: str) -> list[str]:
        """``text`` as ``chunks_fts`` tokenizes a query phrase (its own tokenizer, :data:`FTS_TOKENIZER`): e.g.
        ``"Plugins"`` → ``["plugin"]``, ``"e-mail"`` → ``["e", "mail"]``."""
        tokens = self._fts_tokenizer()(
            text.encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None, include_offsets=False, include_colocated=False
        )
        return cast("list[str]", tokens)

    def fts_tokens_of(self, texts: Iterable[str]) -> Iterator[list[str]]:
        """:meth:`fts_tokens` of each of ``texts``, in order (the tokenizer looked up once: a vault's names)."""
        tokenize = self._fts_tokenizer()
        for text in texts:
            yield cast(
                "list[str]",
                tokenize(
                    text.encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None, include_offsets=False, include_colocated=False
                ),
            )

    def _fts_tokenizer(self) -> apsw.FTS5Tokenizer:
        """This thread's connection's instance of the ``chunks_fts`` tokenizer."""
        c = self.conn
        held = getattr(self._local, "fts_tokenizer", None)
        if held is None or held[0] is not c:
            held = self._local.fts_tokenizer = (c, c.fts5_tokenizer(FTS_TOKENIZER[0], list(FTS_TOKENIZER[1:])))
        return held[1]

    def fts_counts(self) -> FtsCounts:
        """(rows, tokens in all columns, highest row id) of ``chunks_fts``, read in one transaction: FTS5's own
        totals (:func:`cairn.store.fts.fts_totals`) and its row-size table's last id (two lookups, no scan). Every
        change to the table changes one of them (rows are only added with a new, higher id)."""
        c = self.conn
        with c:
            rows, tokens = fts_totals(c)
            top = scalar(c, "SELECT max(id) FROM chunks_fts_docsize")
        return FtsCounts(rows, tokens, int(top or 0))

    def fts_snapshot(
        self,
        after_id: int,
        max_rows: int | None = None,
        after_seq: int | None = None,
        sink: Callable[[int, list[str]], None] | None = None,
    ) -> FtsSnapshot | None:
        """What ``chunks_fts`` holds, read in one transaction, for an in-memory BM25 (cairn.search.keyword).

        ``docs`` [(chunk id, tokens)]: the rows with an id above ``after_id`` (ids are never reused:
        AUTOINCREMENT), each row's columns (text, symbol, title) tokenized by the table's own tokenizer as one token
        list; ``n_rows``, ``n_tokens``: FTS5's own counts (:func:`cairn.store.fts.fts_totals`: what bm25() computes
        idf and the average row length from); ``deletion_seq``: the deletion log's last entry (None: no log, an index of
        schema version 2 opened read-only). Then either ``deleted`` (k,) int64, the ids deleted after log entry
        ``after_seq`` in order (``live`` None), when ``after_seq`` is given and the log holds every entry since; or
        else ``live`` (n,) int64 ascending, the ids of every row, from a scan of FTS5's row-size table.
        None when more than ``max_rows`` rows are newer than ``after_id``. Tokenizing is the cost: pass ``after_id``
        and ``after_seq`` to read only what changed. With ``sink``, each row is given to ``sink(chunk id, tokens)``
        as it is read (inside the transaction) and ``docs`` is empty: a reader of every row need not hold them all."""
        c = self.conn
        with c:
            rows, tokens = fts_totals(c)
            seq = self._deletion_seq(c)
            live, deleted = self._rows_since(c, after_seq, seq)
            too_many = (
                max_rows is not None and scalar(c, "SELECT count(*) FROM chunks WHERE id > ?", (after_id,)) > max_rows
            )
            docs: list[tuple[int, list[str]]] = []
            if too_many:
                pass
            elif sink is None:
                docs = list(self._tokenized_rows(c, after_id))
            else:
                for cid, row_tokens in self._tokenized_rows(c, after_id):
                    sink(cid, row_tokens)
        if too_many:
            return None
        return FtsSnapshot(live=live, docs=docs, n_rows=rows, n_tokens=tokens, deleted=deleted, deletion_seq=seq)

    def _rows_since(
        self, c: apsw.Connection, after_seq: int | None, seq: int | None
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(live, deleted) of :meth:`fts_snapshot`: the ids deleted after log entry ``after_seq`` when the log holds
        every entry since (live None), else every row id of ``chunks_fts`` (deleted None)."""
        if after_seq is not None and seq is not None and 0 <= seq - after_seq <= self.DELETION_LOG_MAX_READ:
            rows = c.execute("SELECT chunk_id FROM chunk_deletions WHERE seq > ? ORDER BY seq", (after_seq,))
            deleted = np.fromiter((r[0] for r in rows), dtype=np.int64)
            if len(deleted) == seq - after_seq:  # else entries were trimmed away: the log cannot say what was deleted
                return None, deleted
        # FTS5's own list of its rows: a small table, cheaper to read than the ids of `chunks`.
        live = np.fromiter((r[0] for r in c.execute("SELECT id FROM chunks_fts_docsize ORDER BY id")), dtype=np.int64)
        return live, None

    def _tokenized_rows(self, c: apsw.Connection, after_id: int) -> Iterator[tuple[int, list[str]]]:
        """(chunk id, tokens) of each chunk above ``after_id`` in id order, tokenized as ``chunks_fts`` does."""
        tok = self._fts_tokenizer()
        flag = apsw.FTS5_TOKENIZE_DOCUMENT
        # The three columns joined by a newline, which unicode61 never makes part of a token: the same
        # tokens, in the same number, as the three columns FTS5 tokenized one by one.
        return (
            (
                cid,
                cast(
                    "list[str]", tok(text.encode("utf-8"), flag, None, include_offsets=False, include_colocated=False)
                ),
            )
            for cid, text in c.execute(
                "SELECT c.id, c.text || char(10) || c.symbol || char(10) || n.title FROM chunks c "
                "JOIN notes n ON n.id = c.note_id WHERE c.id > ? ORDER BY c.id",
                (after_id,),
            )
        )

    @staticmethod
    def _deletion_seq(c: apsw.Connection) -> int | None:
        """The deletion log's last ``seq`` (0 before any deletion), or None when the index has no log (schema
        version 2, opened read-only: not migrated)."""
        if not c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'chunk_deletions'").fetchone():
            return None
        row = c.execute("SELECT seq FROM sqlite_sequence WHERE name = 'chunk_deletions'").fetchone()
        return int(row[0]) if row else 0

    def fts_phrase_scores(self, phrase: str) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk matching one FTS5 phrase (a double-quoted term, as :func:`cairn.ranking.fts_match_expression`
        builds them) with its BM25: (chunk ids (k,) int64, bm25 (k,) float64, each < 0). FTS5's bm25 of an OR of
        phrases is the sum, in query order, of these per-phrase values (``fts5_aux.c``: one idf-weighted term per
        phrase), so a query can be ranked from cached phrases. Raises :class:`StoreError` for a bad phrase."""
        try:
            rows = self.conn.execute(
                "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?", (phrase,)
            ).fetchall()
        except apsw.SQLError as exc:  # a MATCH expression the caller should never build
            raise StoreError(f"full-text query failed: {exc}") from exc
        pairs = np.array(rows, dtype=np.float64).reshape(-1, 2)  # chunk ids < 2**53: exact as doubles
        return pairs[:, 0].astype(np.int64), pairs[:, 1].copy()

    def chunk_note_map(self) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
        """(chunk ids (n,) int64, their note ids (n,) int64, {note id: vault-relative path}) of every indexed note
        (status ok), read in one transaction: what search needs to tell which notes hold a query's terms."""
        c = self.conn
        with c:
            rows = c.execute(
                "SELECT c.id, c.note_id FROM chunks c JOIN notes n ON n.id = c.note_id WHERE n.status='ok'"
            )
            pairs = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64).reshape(-1, 2)
            paths = {int(i): str(p) for i, p in c.execute("SELECT id, path FROM notes WHERE status='ok'")}
        return pairs[:, 0].copy(), pairs[:, 1].copy(), paths

    def fts_vocabulary(self) -> tuple[list[str], np.ndarray]:
        """(every token of ``chunks_fts``, the number of rows holding each (k,) int64), in FTS5's order (ascending),
        from an ``fts5vocab`` table in this connection's temp schema (created on first use; a read-only index
        works too). A scan of the whole vocabulary: for prefix and typo expansion when no in-memory BM25 holds it."""
        c = self.conn
        c.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunks_fts_vocab USING fts5vocab(main, 'chunks_fts', 'row')")
        rows = c.execute("SELECT term, doc FROM temp.chunks_fts_vocab").fetchall()
        return [str(t) for t, _ in rows], np.fromiter((d for _, d in rows), dtype=np.int64, count=len(rows))

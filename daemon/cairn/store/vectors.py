"""The vector tables (``chunk_vectors``, ``unit_vectors``: sqlite-vec, cosine) and the embedding cache."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence

import numpy as np

from cairn.store.base import StoreBase, scalar, vec_bytes
from cairn.store.records import EmbeddedChunks, Neighbour, PendingChunk, PendingSentence, VectorMatrices
from cairn.store.schema import EMBED_DIM


def tiers_of(embedded: EmbeddedChunks, chunk_ids: np.ndarray) -> np.ndarray:
    """The vector tier (int8) of each of ``chunk_ids`` (n,) as ``embedded`` lists them; 0 for an id it lacks."""
    ids = embedded.chunk_ids
    if not len(ids):
        return np.zeros(len(chunk_ids), dtype=np.int8)
    pos = np.minimum(np.searchsorted(ids, chunk_ids), len(ids) - 1)
    return np.where(ids[pos] == chunk_ids, embedded.tiers[pos], 0).astype(np.int8)


class VectorTables(StoreBase):
    """Chunk and sentence vectors (sqlite-vec) and the embedding cache."""

    def pending_chunks(
        self,
        limit: int,
        *,
        pdf: bool | None = None,
        note_path: str | None = None,
        note_ids: Sequence[int] | None = None,
        below: int = 1,
    ) -> list[PendingChunk]:
        """Up to ``limit`` chunks whose vector tier is below ``below`` (1: chunks without a vector; 2: those and the
        tier-1 chunks), each with its sentences in order, heading path and text, the notes modified most recently
        first (then by chunk id): the notes an owner edits are the ones asked about first. ``pdf``: only PDF chunks
        (True), only the others (False), or all (None); ``note_path``: only that file's; ``note_ids``: only those
        notes'. ``PendingChunk.tier`` is the chunk's tier now."""
        where = "c.embedded < ?"
        args: list[object] = [int(below)]
        if pdf is not None:
            where += " AND c.kind " + ("=" if pdf else "!=") + " 'pdf'"
        if note_path is not None:
            where += " AND n.path=?"
            args.append(note_path)
        if note_ids is not None:
            where += " AND c.note_id IN (SELECT value FROM json_each(?))"
            args.append(json.dumps([int(i) for i in note_ids]))
        chunks = list(
            self.conn.execute(
                "SELECT c.id, c.content_hash, n.title, c.symbol, c.text, c.embedded FROM chunks c "
                f"JOIN notes n ON n.id=c.note_id WHERE {where} ORDER BY n.mtime_ns DESC, c.id LIMIT ?",
                (*args, limit),
            )
        )
        units: dict[int, list[PendingSentence]] = {row[0]: [] for row in chunks}
        if chunks:
            for uid, cid, text, h in self.conn.execute(
                "SELECT id, chunk_id, text, content_hash FROM chunk_units WHERE chunk_id IN "
                "(SELECT value FROM json_each(?)) ORDER BY id",
                (json.dumps(list(units)),),
            ):
                units[cid].append(PendingSentence(uid, text, h))
        return [
            PendingChunk(cid, h, title, units[cid], symbol, text, tier) for cid, h, title, symbol, text, tier in chunks
        ]

    def chunk_title_hashes(self) -> list[tuple[str, str]]:
        """(note title, chunk content hash) of every chunk, distinct: what a whole-chunk vector's cache key is made
        of (:func:`cairn.embedding.whole_chunk_hash`), without reading chunk text."""
        return list(
            self.conn.execute("SELECT DISTINCT n.title, c.content_hash FROM chunks c JOIN notes n ON n.id = c.note_id")
        )

    def count_pending(self) -> int:
        """The number of chunks without a vector."""
        return scalar(self.conn, "SELECT count(*) FROM chunks WHERE embedded=0")

    def count_unrefined(self) -> int:
        """The number of chunks not yet at the complete tier (without a vector, or at tier 1)."""
        return scalar(self.conn, "SELECT count(*) FROM chunks WHERE embedded < 2")

    def pending_tokens(self) -> tuple[int, int]:
        """(tokens of the chunks without a vector, tokens of the chunks not yet at the complete tier), by the chunks'
        token counts: the model's work left in each tier's pass, for the time-left estimate of a run."""
        row = self.conn.execute(
            "SELECT coalesce(sum(CASE WHEN embedded = 0 THEN token_count END), 0), coalesce(sum(token_count), 0) "
            "FROM chunks WHERE embedded < 2"
        ).fetchone()
        return (int(row[0]), int(row[1])) if row is not None else (0, 0)

    def cached_vectors(self, hashes: Iterable[str], model_id: str) -> dict[str, np.ndarray]:
        """Cached embeddings for the given content hashes: {hash: (384,) float32}."""
        out: dict[str, np.ndarray] = {}
        hashes = list(dict.fromkeys(hashes))
        for start in range(0, len(hashes), 500):
            part = hashes[start : start + 500]
            marks = ",".join("?" * len(part))
            for h, blob in self.conn.execute(
                f"SELECT content_hash, vector FROM embedding_cache WHERE model_id=? AND content_hash IN ({marks})",
                (model_id, *part),
            ):
                out[h] = np.frombuffer(blob, dtype="<f4")
        return out

    def put_cached_vectors(self, items: dict[str, np.ndarray], model_id: str) -> None:
        now = time.time()
        with self._write_lock, self.conn as c:
            c.executemany(
                "INSERT OR REPLACE INTO embedding_cache(content_hash, model_id, vector, created_at) VALUES(?,?,?,?)",
                [(h, model_id, vec_bytes(v), now) for h, v in items.items()],
            )

    def prune_embedding_cache(self, model_id: str, keep: Iterable[str], older_than: float) -> int:
        """Delete the embedding-cache rows no current text uses: every row of another model id (the vault was
        embedded again with ``model_id``), and the rows of ``model_id`` written before ``older_than`` (Unix time,
        s) whose hash is neither a unit's (``chunk_units.content_hash``) nor in ``keep`` (hashes the caller still
        needs, e.g. the notes' title hashes). Rows written since ``older_than`` stay, so a note moved, renamed or
        edited back within that time re-embeds nothing. One transaction; the index on (model, age) finds the
        candidates without reading a vector. Returns the number of rows deleted."""
        with self._write_lock, self.conn as c:
            doomed = c.execute(
                "SELECT content_hash, model_id FROM embedding_cache WHERE model_id < ? UNION ALL "
                "SELECT content_hash, model_id FROM embedding_cache WHERE model_id > ?",
                (model_id, model_id),
            ).fetchall()
            old = c.execute(
                "SELECT content_hash FROM embedding_cache WHERE model_id = ? AND created_at < ?",
                (model_id, older_than),
            ).fetchall()
            if old:  # rarely: only then are the sentence hashes read (a scan of them all)
                used = set(keep) | {h for (h,) in c.execute("SELECT DISTINCT content_hash FROM chunk_units")}
                doomed.extend((h, model_id) for (h,) in old if h not in used)
            c.executemany("DELETE FROM embedding_cache WHERE content_hash=? AND model_id=?", doomed)
        return len(doomed)

    def set_vectors(
        self, items: Sequence[tuple[int, str, np.ndarray, Sequence[tuple[int, np.ndarray]]]], *, tier: int = 2
    ) -> int:
        """Store vectors, given (chunk_id, content_hash they were made for, chunk vector, [(unit_id, unit vector)]),
        vectors (384,) float32, at vector ``tier`` (1: the chunk's vector alone, no unit vectors; 2: complete). A
        chunk deleted or changed meanwhile (hash differs), or at a higher tier already, is skipped (a tier-1 vector
        never replaces a complete one). One transaction. Returns the number of chunks written."""
        written = 0
        with self._write_lock, self.conn as c:
            for chunk_id, content_hash, vec, units in items:
                row = c.execute("SELECT content_hash, embedded FROM chunks WHERE id=?", (chunk_id,)).fetchone()
                if not row or row[0] != content_hash or row[1] > tier:
                    continue
                c.execute("DELETE FROM chunk_vectors WHERE chunk_id=?", (chunk_id,))
                c.execute("INSERT INTO chunk_vectors(chunk_id, embedding) VALUES(?, ?)", (chunk_id, vec_bytes(vec)))
                for unit_id, uvec in units:
                    c.execute("DELETE FROM unit_vectors WHERE unit_id=?", (unit_id,))
                    c.execute("INSERT INTO unit_vectors(unit_id, embedding) VALUES(?, ?)", (unit_id, vec_bytes(uvec)))
                c.execute("UPDATE chunks SET embedded=? WHERE id=?", (tier, chunk_id))
                written += 1
            if written:
                self._bump_vectors_generation(c)
        return written

    def tier_counts(self) -> tuple[int, int, int]:
        """(chunks without a vector, chunks at tier 1, complete chunks), from one read."""
        row = self.conn.execute(
            "SELECT (SELECT count(*) FROM chunks WHERE embedded = 0), (SELECT count(*) FROM chunks WHERE embedded = 1),"
            " (SELECT count(*) FROM chunks WHERE embedded = 2)"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2])

    def reset_vectors(self) -> None:
        """Drop every chunk vector (the cache stays): used when the vector recipe changes."""
        with self._write_lock, self.conn as c:
            c.execute("DELETE FROM chunk_vectors")
            c.execute("DELETE FROM unit_vectors")
            c.execute("UPDATE chunks SET embedded=0")
            self._bump_vectors_generation(c)

    def knn(self, query: np.ndarray, k: int) -> list[Neighbour]:
        """Nearest ``k`` chunk vectors to ``query`` ((384,) float32, L2-normalised) by cosine distance.
        Returns (chunk_id, cosine_similarity), best first."""
        rows = self.conn.execute(
            "SELECT chunk_id, distance FROM chunk_vectors WHERE embedding MATCH ? AND k = ?",
            (vec_bytes(query), int(k)),
        )
        return [Neighbour(r[0], 1.0 - r[1]) for r in rows]

    def vectors_generation(self) -> int:
        """A counter bumped by every committed change to vectors (any connection, any process)."""
        row = self.conn.execute("SELECT value FROM meta WHERE key='vectors_generation'").fetchone()
        return int(row[0]) if row else 0

    def _load_vector_matrices(self) -> VectorMatrices:
        """Every chunk and sentence vector, read in one snapshot:
        (generation, chunk ids (n,) int64, chunk vectors (n, 384) float32,
        owning chunk id of each sentence vector (m,) int64, sentence vectors (m, 384) float32). Memory: 1.5 KiB a
        vector, held once: rows are copied one at a time into arrays sized by a count in the same read transaction
        (never a list of every row's bytes beside the arrays)."""
        c = self.conn

        def matrix(count_sql: str, rows_sql: str) -> tuple[np.ndarray, np.ndarray]:
            n = scalar(c, count_sql)
            ids = np.empty(n, dtype=np.int64)
            mat = np.empty((n, EMBED_DIM), dtype=np.float32)
            i = 0
            for owner, blob in c.execute(rows_sql):
                ids[i] = owner
                mat[i] = np.frombuffer(blob, dtype="<f4")
                i += 1
            return ids[:i], mat[:i]

        with c:  # one read transaction: generation, counts and vectors agree
            gen = self.vectors_generation()
            chunk_ids, chunk_mat = matrix(
                "SELECT count(*) FROM chunk_vectors", "SELECT chunk_id, embedding FROM chunk_vectors"
            )
            unit_owner, unit_mat = matrix(
                "SELECT count(*) FROM unit_vectors v JOIN chunk_units u ON u.id = v.unit_id",
                "SELECT u.chunk_id, v.embedding FROM unit_vectors v JOIN chunk_units u ON u.id = v.unit_id",
            )
        return VectorMatrices(gen, chunk_ids, chunk_mat, unit_owner, unit_mat)

    def embedded_chunk_ids(self) -> EmbeddedChunks:
        """The chunks that have a vector, read in one transaction: (vectors generation, the vector recipe they were
        made with (meta ``vector_recipe``, set by the indexer; None when unset), chunk ids (k,) int64 ascending, their
        vector tiers (k,) int8). Ids only, no vectors: cheap enough to call before every reload.

        A chunk id's vector changes only with its tier or the recipe: :meth:`write_note` gives a note's new chunks
        new ids (never reused: AUTOINCREMENT), and :meth:`set_vectors` writes a chunk's vector only for its content
        hash and only to raise its tier, so a reader holding the vectors of ids still listed here at the same tier
        under the same recipe holds their current vectors (a recipe change is :meth:`reset_vectors`, then every
        chunk embedded again under the same ids)."""
        c = self.conn
        with c:
            gen = self.vectors_generation()
            recipe = self.get_meta("vector_recipe")
            n = scalar(c, "SELECT count(*) FROM chunks WHERE embedded > 0")
            ids, tiers = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int8)
            i = 0
            for cid, tier in c.execute("SELECT id, embedded FROM chunks WHERE embedded > 0 ORDER BY id"):
                ids[i], tiers[i] = cid, tier
                i += 1
        return EmbeddedChunks(gen, recipe, ids[:i], tiers[:i])

    def load_vector_matrices_and_recipe(
        self,
    ) -> tuple[VectorMatrices, str | None, np.ndarray]:
        """:meth:`_load_vector_matrices`, the vector recipe (meta ``vector_recipe``) and the vector tier of each chunk
        read ((n,) int8, in the order of its chunk ids), read in one transaction, so the recipe and the tiers are the
        ones the vectors read were made with."""
        with self.conn:
            matrices, recipe = self._load_vector_matrices(), self.get_meta("vector_recipe")
            embedded = self.embedded_chunk_ids()
        return matrices, recipe, tiers_of(embedded, matrices.chunk_ids)

    def vector_matrices_of(self, chunk_ids: Sequence[int] | np.ndarray) -> VectorMatrices:
        """Like :meth:`_load_vector_matrices` for just ``chunk_ids`` (chunks without a vector are absent), in one
        read transaction: (generation, chunk ids (n,) int64, chunk vectors (n, 384) float32, owning chunk id of each
        unit (m,) int64, unit vectors (m, 384) float32). Chunks in ascending id order, each one's units after it
        (:meth:`vectors` and :meth:`unit_vectors`: 500 ids per statement)."""
        ids = sorted({int(c) for c in chunk_ids})
        with self.conn:  # one read transaction: the generation and both reads agree
            gen = self.vectors_generation()
            chunk_vecs, unit_vecs = self.vectors(ids), self.unit_vectors(ids)
        held = [i for i in ids if i in chunk_vecs]
        owners = [i for i in held for _ in range(len(unit_vecs.get(i, ())))]
        units = [unit_vecs[i] for i in held if i in unit_vecs]
        return VectorMatrices(
            gen,
            np.asarray(held, dtype=np.int64),
            np.stack([chunk_vecs[i] for i in held]) if held else np.zeros((0, EMBED_DIM), np.float32),
            np.asarray(owners, dtype=np.int64),
            np.concatenate(units) if units else np.zeros((0, EMBED_DIM), np.float32),
        )

    def embedded_chunks_after(self, chunk_id: int, limit: int) -> list[int]:
        """Ids of chunks with vectors and an id above ``chunk_id`` (ids are never reused), newest first (the notes
        saved last: what a user searching during an editing session looks for), at most ``limit``."""
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT id FROM chunks WHERE id > ? AND embedded > 0 ORDER BY id DESC LIMIT ?", (chunk_id, limit)
            )
        ]

    def unit_vectors(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """Unit vectors of the given chunks: {chunk_id: (m, 384) float32}; chunks without any are absent."""
        out: dict[int, list[np.ndarray]] = {}
        ids = list(chunk_ids)
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            rows = self.conn.execute(
                "SELECT u.chunk_id, v.embedding FROM chunk_units u JOIN unit_vectors v ON v.unit_id = u.id "
                "WHERE u.chunk_id IN (SELECT value FROM json_each(?))",
                (json.dumps(part),),
            )
            for cid, blob in rows:
                out.setdefault(cid, []).append(np.frombuffer(blob, dtype="<f4"))
        return {cid: np.stack(v) for cid, v in out.items()}

    def vectors(self, chunk_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """Stored vectors of the given chunks: {chunk_id: (384,) float32}; chunks without one are absent."""
        out: dict[int, np.ndarray] = {}
        ids = list(chunk_ids)
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            rows = self.conn.execute(
                "SELECT chunk_id, embedding FROM chunk_vectors WHERE chunk_id IN (SELECT value FROM json_each(?))",
                (json.dumps(part),),
            )
            for cid, blob in rows:
                out[cid] = np.frombuffer(blob, dtype="<f4")
        return out

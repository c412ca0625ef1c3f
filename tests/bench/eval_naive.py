"""The naive pipeline the evaluation compares Cairn against, over the same chunks as the index.

One vector per chunk, embedding ``f"{title}\\n{symbol}\\n{text}"`` (``f"{title}\\n{text}"`` when the chunk has no
heading path; truncated by the model to 256 tokens); FTS5's plain ``bm25()`` of the OR of the query's terms
(:func:`cairn.ranking.fts_match_expression`, every term a quoted phrase); plain RRF (k = 60, equal weights) of
the top :data:`CANDIDATES` of each list; no cosine floor. A note ranks at its best chunk (first occurrence).

The whole-chunk vectors are cached in ``<data dir>/naive/<index file stem>.npz``: arrays ``keys`` (sha256 of
the embedded text) and ``vecs`` ((n, 384) float32, L2-normalised) — every text ever embedded, so a chunk that
comes back costs nothing — plus ``chunk_ids`` (int64) and ``chunk_keys`` (the key of each chunk now). Only
texts missing from the cache are embedded (checkpointed every :data:`CHECKPOINT` chunks, so an interrupted
run resumes); progress goes to stderr.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cairn.config import RRF_K
from cairn.embedder import Embedder
from cairn.ranking import rrf_fuse
from cairn.search.query import fts_match_expression
from cairn.store import Store

#: Candidates taken from each ranked list before fusion.
CANDIDATES = 60
#: Chunks embedded between two writes of the cache file.
CHECKPOINT = 1024


def whole_chunk_text(title: str, symbol: str, text: str) -> str:
    """The text the naive pipeline embeds for a chunk: its note's title and heading path in front."""
    return f"{title}\n{symbol}\n{text}" if symbol else f"{title}\n{text}"


Recipe = Callable[[str, str, str], str]


def text_key(text: str) -> str:
    """The cache key of an embedded text: sha256 hex of its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _load_cache(path: Path) -> dict[str, np.ndarray]:
    if not path.exists():
        return {}
    with np.load(path) as z:
        return dict(zip(z["keys"].tolist(), z["vecs"]))


def _save_cache(path: Path, have: dict[str, np.ndarray], ids: np.ndarray | None, keys: list[str] | None) -> None:
    """Write the cache atomically (a reader never sees a half-written file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {
        "keys": np.array(list(have)),
        "vecs": np.stack(list(have.values())).astype(np.float32) if have else np.zeros((0, 384), np.float32),
    }
    if ids is not None and keys is not None:
        arrays.update(chunk_ids=ids, chunk_keys=np.array(keys))
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, **arrays)  # type: ignore[arg-type]
    tmp.replace(path)


@dataclass(frozen=True)
class WholeChunks:
    """The index's chunks for the naive pipeline: ids (n,) int64 ascending, their notes' paths, and one
    whole-chunk vector per chunk ((n, 384) float32, L2-normalised, row i = chunk ``ids[i]``)."""

    ids: np.ndarray
    paths: dict[int, str]
    matrix: np.ndarray

    @classmethod
    def load(
        cls, store: Store, cache: Path, embedder: Embedder, label: str = "", recipe: Recipe = whole_chunk_text
    ) -> WholeChunks:
        """Read every chunk of ``store``; vectors from ``cache`` (the .npz file), the missing ones embedded now
        with ``embedder`` and added to it. ``recipe(title, symbol, text)``: the text embedded per chunk."""
        rows = store.conn.execute(
            "SELECT c.id, n.path, n.title, c.symbol, c.text FROM chunks c JOIN notes n ON n.id = c.note_id "
            "ORDER BY c.id"
        ).fetchall()
        texts = {int(cid): recipe(title, symbol, text) for cid, _, title, symbol, text in rows}
        keys = {cid: text_key(t) for cid, t in texts.items()}
        have = _load_cache(cache)
        todo = [cid for cid in texts if keys[cid] not in have]
        ids = np.array(sorted(texts), dtype=np.int64)
        if todo:
            _embed_missing(todo, texts, keys, have, embedder, cache, label)
        if todo or not cache.exists():
            _save_cache(cache, have, ids, [keys[int(c)] for c in ids])
        matrix = np.stack([have[keys[int(c)]] for c in ids]) if len(ids) else np.zeros((0, 384), np.float32)
        return cls(ids, {int(cid): path for cid, path, *_ in rows}, matrix.astype(np.float32))


def _embed_missing(
    todo: list[int],
    texts: dict[int, str],
    keys: dict[int, str],
    have: dict[str, np.ndarray],
    embedder: Embedder,
    cache: Path,
    label: str,
) -> None:
    """Embed the chunks ``todo`` into ``have``, writing ``cache`` after every :data:`CHECKPOINT` chunks."""
    print(f"# naive {label}: embedding {len(todo)} whole chunks (cached in {cache})", file=sys.stderr)
    started = time.perf_counter()
    for at in range(0, len(todo), CHECKPOINT):
        part = todo[at : at + CHECKPOINT]
        for cid, vec in zip(part, embedder.embed([texts[c] for c in part])):
            have[keys[cid]] = vec
        _save_cache(cache, have, None, None)
        print(
            f"#   {at + len(part)}/{len(todo)} whole chunks in {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )


class NaivePipeline:
    """Note rankings of the naive pipeline (module docstring) over one index."""

    def __init__(self, store: Store, chunks: WholeChunks, embedder: Embedder) -> None:
        self.store = store
        self.chunks = chunks
        self.embedder = embedder

    def bm25(self, question: str, limit: int = CANDIDATES) -> list[int]:
        """Chunk ids with the best plain FTS5 ``bm25()`` for the OR of the question's terms, best first."""
        expression = fts_match_expression(question)
        if expression is None:
            return []
        rows = self.store.conn.execute(
            "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY bm25(chunks_fts), rowid LIMIT ?",
            (expression, limit),
        ).fetchall()
        return [int(r[0]) for r in rows]

    def dense(self, question: str, limit: int = CANDIDATES) -> list[int]:
        """Chunk ids with the highest cosine of their whole-chunk vector to the question's, best first."""
        if not len(self.chunks.ids):
            return []
        qvec = self.embedder.embed([question])[0]
        scores = self.chunks.matrix @ qvec
        top = np.lexsort((self.chunks.ids, -scores))[:limit]
        return [int(self.chunks.ids[i]) for i in top]

    def chunk_ranking(self, question: str, mode: str = "naive") -> list[int]:
        """``naive``: plain RRF of :meth:`bm25` and :meth:`dense`; ``naive-dense``: the dense list alone."""
        if mode == "naive-dense":
            return self.dense(question)
        fused = rrf_fuse(
            {"bm25": self.bm25(question), "dense": self.dense(question)}, {"bm25": 1.0, "dense": 1.0}, RRF_K
        )
        return sorted(fused, key=lambda c: (-fused[c], c))

    def note_ranking(self, question: str, mode: str = "naive", limit: int = 10) -> list[str]:
        """The first ``limit`` notes of :meth:`chunk_ranking`, each at its best chunk."""
        out: list[str] = []
        for cid in self.chunk_ranking(question, mode):
            path = self.chunks.paths.get(cid)
            if path is not None and path not in out:
                out.append(path)
                if len(out) == limit:
                    break
        return out

"""Is a miss bound by the embedding model? For each hybrid miss (no relevant note in the top 5), two tests:

- **outside the dense top 100**: no relevant note is among the 100 notes nearest to the question by the best
  cosine of any of their vectors (chunk or sentence vectors, as the index stores them) — the model itself does
  not bring the note near, whatever the fusion does;
- **no shared content word**: no relevant note holds any of the question's content words (its terms after
  :func:`cairn.ranking.query_terms`, as FTS5 tokens: stemmed, diacritics removed) — BM25 cannot find it either.

A miss passing both is bound by the embedding model: only a better model (or text in the note that says it)
would find it. The table counts each, and lists the ids of the misses bound by both.

A third count bounds what fusion can do: **no leg's top 5** — no relevant note is among the first 5 notes of the
BM25 leg (``SearchService.keyword_ranking``, each note at its best chunk) nor among the 5 nearest by best-vector
cosine. Such a miss needs a leg to rank the note better; no fusion of these legs puts it in the top 5 but by
pushing up a note that neither leg puts high.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from eval_known import Vocabulary

from cairn.embedder import Embedder
from cairn.search import SearchService
from cairn.search.query import query_terms
from cairn.store import Store

DENSE_DEPTH = 100


@dataclass(frozen=True)
class NoteVectors:
    """Every chunk and sentence vector of the index ((n, 384) float32) with the note (index into ``paths``)
    each belongs to."""

    paths: list[str]
    note_of: np.ndarray
    matrix: np.ndarray

    @classmethod
    def of(cls, store: Store) -> NoteVectors:
        m, _, _ = store.load_vector_matrices_and_recipe()
        path_of = dict(store.conn.execute("SELECT c.id, n.path FROM chunks c JOIN notes n ON n.id = c.note_id"))
        paths = sorted(set(path_of.values()))
        index = {p: i for i, p in enumerate(paths)}
        owners = np.concatenate([m.chunk_ids, m.sentence_owners]).tolist()
        note_of = np.asarray([index.get(path_of.get(int(c), ""), -1) for c in owners], dtype=np.int64)
        matrix = np.concatenate([m.chunk_vectors, m.sentence_vectors]).astype(np.float32)
        keep = note_of >= 0
        return cls(paths, note_of[keep], matrix[keep])

    def nearest(self, qvec: np.ndarray, depth: int = DENSE_DEPTH) -> list[str]:
        """The ``depth`` notes with the highest best-vector cosine to ``qvec``, best first."""
        best = np.full(len(self.paths), -np.inf)
        np.maximum.at(best, self.note_of, self.matrix @ qvec)
        order = np.lexsort((np.arange(len(best)), -best))[:depth]
        return [self.paths[i] for i in order]


@dataclass
class BoundReport:
    """Counts over the hybrid misses of one vault."""

    misses: int = 0
    outside_dense: int = 0
    no_shared_word: int = 0
    both: list[str] = field(default_factory=list)
    no_leg_top5: list[str] = field(default_factory=list)


def content_tokens(store: Store, question: str) -> set[str]:
    """The question's content words as FTS5 tokens."""
    return {t for term in query_terms(question) for t in store.fts_tokens(term)}


def first_notes(paths: Sequence[str], n: int) -> list[str]:
    """The first ``n`` distinct notes of ``paths``, in order."""
    return list(dict.fromkeys(paths))[:n]


def analyse_misses(
    store: Store,
    embedder: Embedder,
    vocab: Vocabulary,
    misses: Sequence[dict],
    depth: int = DENSE_DEPTH,
    query: SearchService | None = None,
) -> BoundReport:
    """The tests (module docstring) for each missed question (dev-file rows); the legs' top 5 with ``query``."""
    report = BoundReport(misses=len(misses))
    if not misses:
        return report
    vectors = NoteVectors.of(store)
    for q in misses:
        relevant = set(q["relevant"])
        ranked = vectors.nearest(embedder.embed([q["question"]])[0], depth)
        near = set(ranked)
        outside = not relevant & near
        if query is not None:
            chunks = query.keyword_ranking(q["question"], 200)
            rows = query.store.chunk_rows(chunks)
            paths = [rows[c].path for c in chunks if c in rows]
            if not relevant & (set(first_notes(paths, 5)) | set(ranked[:5])):
                report.no_leg_top5.append(q["id"])
        shared = any(vocab.notes.get(t, set()) & relevant for t in content_tokens(store, q["question"]))
        report.outside_dense += outside
        report.no_shared_word += not shared
        if outside and not shared:
            report.both.append(q["id"])
    return report

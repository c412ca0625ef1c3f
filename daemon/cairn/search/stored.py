"""Cosines of the candidate chunks that the in-memory vectors (:mod:`cairn.search.vectors`) do not hold: chunks
embedded after the snapshot, read from the store, and chunks not embedded yet (a keyword-ready index, or rewritten
by a re-index), whose vectors are made now the way the indexer makes them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cairn.embedder import Embedder
from cairn.embedding import (
    chunk_vector,
    content_hash,
    embedding_texts,
    title_hash,
    whole_chunk_hash,
    whole_chunk_text,
)
from cairn.store import ChunkRow, Store


def stored_cosines(
    store: Store,
    embedder: Embedder,
    qvec: np.ndarray,
    rows: Sequence[ChunkRow],
    *,
    compute: set[int],
    title_weight: float,
    budget: int,
) -> tuple[dict[int, float], dict[int, float]]:
    """For the chunks ``rows`` and the unit query vector ``qvec`` (384,): ({chunk id: cosine of its chunk vector},
    {chunk id: best cosine among its sentence vectors, or -1}). A chunk with no stored vector gets one computed now
    if its id is in ``compute`` (the keyword candidates; :func:`_embed_now`, at most ``budget`` model tokens
    embedded); the others are absent this time."""
    ids = [r.chunk_id for r in rows]
    chunk_vecs = store.vectors(ids)
    sentence_vecs = store.unit_vectors(ids)
    missing = [r for r in rows if r.chunk_id not in chunk_vecs and r.chunk_id in compute]
    if missing:
        _embed_now(store, embedder, missing, chunk_vecs, sentence_vecs, title_weight, budget)
    cosines = {c: float(chunk_vecs[c] @ qvec) for c in ids if c in chunk_vecs}
    best_sentence = {}
    for c in cosines:
        sv = sentence_vecs.get(c)
        best_sentence[c] = float(np.max(sv @ qvec)) if sv is not None and len(sv) else -1.0
    return cosines, best_sentence


def _embed_now(
    store: Store,
    embedder: Embedder,
    missing: list[ChunkRow],
    chunk_vecs: dict[int, np.ndarray],
    sentence_vecs: dict[int, np.ndarray],
    title_weight: float,
    budget: int,
) -> None:
    """Fill ``chunk_vecs`` and ``sentence_vecs`` for the chunks ``missing`` (best keyword candidates first): the
    texts' vectors from the embedding cache when it has them (a note re-indexed unchanged, moved, or embedded by
    another run), the model for the rest, at most ``budget`` model tokens (each text counted as the model reads it,
    [CLS] and [SEP] included, truncated at its input limit): a candidate beyond it is left out this time. It is
    embedded seconds later, and embedding every candidate would stall searches during a first index or a bulk
    re-index: the indexer's batches hold the cores, and a whole-chunk text alone is up to 256 tokens."""
    texts = {r.chunk_id: embedding_texts(r.symbol, r.text, r.kind) for r in missing}
    wanted = {content_hash(t): t for r in missing for t in texts[r.chunk_id]}
    wanted.update({title_hash(r.title): r.title for r in missing})
    whole = {r.chunk_id: whole_chunk_hash(r.title, r.content_hash) for r in missing}
    wanted.update({whole[r.chunk_id]: whole_chunk_text(r.title, r.symbol, texts[r.chunk_id]) for r in missing})
    found = store.cached_vectors(wanted, embedder.model_id)
    for r in missing:
        c = r.chunk_id
        keys = [*map(content_hash, texts[c]), title_hash(r.title), whole[c]]
        need = [h for h in dict.fromkeys(keys) if h not in found]
        cost = sum(map(len, embedder.tokenizer.encode_for_model([wanted[h] for h in need])))
        if cost > budget:
            continue
        if need:
            found.update(zip(need, embedder.embed([wanted[h] for h in need])))
            budget -= cost
        sentence_vecs[c] = np.stack([found[content_hash(t)] for t in texts[c]])
        chunk_vecs[c] = chunk_vector(sentence_vecs[c], found[title_hash(r.title)], found[whole[c]], title_weight)

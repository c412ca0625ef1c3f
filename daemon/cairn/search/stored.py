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
    if its id is in ``compute`` (the keyword candidates; :func:`_embed_now`: its tier-1 vector, at most ``budget``
    model tokens embedded); the others are absent this time."""
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
    """Fill ``chunk_vecs`` (and ``sentence_vecs`` where the cache completes a chunk) for the chunks ``missing`` (best
    keyword candidates first). A chunk whose texts the embedding cache all holds (a note re-indexed unchanged, moved,
    or embedded by another run) gets its complete vectors; any other gets its tier-1 vector, its whole-chunk text's
    (the cache's, else the model's, in one call, at most ``budget`` model tokens, each text counted as the model reads
    it, [CLS] and [SEP] included, truncated at its input limit): a candidate beyond it is left out this time. It is
    embedded seconds later, and embedding every candidate would stall searches during a first index or a bulk
    re-index: the indexer's batches hold the cores, and a whole-chunk text alone is up to 256 tokens."""
    texts = {r.chunk_id: embedding_texts(r.symbol, r.text, r.kind) for r in missing}
    whole = {r.chunk_id: whole_chunk_hash(r.title, r.content_hash) for r in missing}
    whole_text = {r.chunk_id: whole_chunk_text(r.title, r.symbol, texts[r.chunk_id]) for r in missing}
    wanted = {content_hash(t): t for r in missing for t in texts[r.chunk_id]}
    wanted.update({title_hash(r.title): r.title for r in missing})
    wanted.update({whole[c]: t for c, t in whole_text.items()})
    found = store.cached_vectors(wanted, embedder.model_id)
    to_embed: list[int] = []
    for r in missing:
        c = r.chunk_id
        units = [content_hash(t) for t in texts[c]]
        if whole[c] in found and title_hash(r.title) in found and all(h in found for h in units):
            sentence_vecs[c] = np.stack([found[h] for h in units])
            chunk_vecs[c] = chunk_vector(sentence_vecs[c], found[title_hash(r.title)], found[whole[c]], title_weight)
        elif whole[c] in found:
            chunk_vecs[c] = found[whole[c]]
        elif budget >= MIN_TEXT_TOKENS:
            cost = min(embedder.tokenizer.count_tokens(whole_text[c]) + 2, embedder.max_tokens)
            if cost <= budget:
                to_embed.append(c)
                budget -= cost
    if to_embed:
        for c, vec in zip(to_embed, embedder.embed([whole_text[c] for c in to_embed])):
            chunk_vecs[c] = vec


#: The fewest model tokens a whole-chunk text costs ([CLS], [SEP], a title and a few words): below that left of the
#: budget, no candidate is counted any more.
MIN_TEXT_TOKENS = 8

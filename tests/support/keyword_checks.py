"""The in-memory BM25 (:class:`cairn.search.keyword.Bm25Index`) checked against FTS5's own scores."""

from __future__ import annotations

import numpy as np

from cairn.ranking import fts_phrase
from cairn.search.keyword import Bm25Index


def assert_same_as_fts5(index: Bm25Index, terms, *, expect_from_memory: bool = True) -> int:
    """Every term's (ids, bm25) from memory equals FTS5's own, bit for bit; returns how many came from memory."""
    from_memory = 0
    for term in terms:
        got = index.scores(term)
        ids, values = index.store.fts_phrase_scores(fts_phrase(term))
        if got is None:
            assert not expect_from_memory or len(index.store.fts_tokens(term)) != 1, term
            continue
        from_memory += 1
        assert np.array_equal(got[0], ids), term
        assert np.array_equal(got[1], values), (term, np.abs(got[1] - values).max() if len(values) else None)
    return from_memory

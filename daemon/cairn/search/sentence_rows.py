"""The sentence vectors' rows as the dense snapshot holds them (:mod:`cairn.search.vectors`): identical sentence
vectors found by a compact key and held once, kept rows compacted in place, and each chunk's run of sentence rows.
"""

from __future__ import annotations

import numpy as np

#: Odd 64-bit multipliers of the sentence vectors' compact keys (:func:`row_keys`); fixed, so keys agree
#: across loads.
_KEY_MULT = (
    np.random.default_rng(0x5EED_CA1E).integers(0, 2**63, size=192, dtype=np.uint64) << np.uint64(1)
) | np.uint64(1)


def row_keys(mat: np.ndarray) -> np.ndarray:
    """(m,) uint64 keys of the rows of ``mat`` (m, 384) float32: a random linear hash of each row's 192 64-bit words
    (modulo 2**64), to find identical sentence vectors without a dict of 1.5 KB byte strings. Equal rows (bytes) have
    equal keys; callers compare the rows of equal keys before treating them as one (a collision is not trusted)."""
    out = np.empty(len(mat), dtype=np.uint64)
    words = np.ascontiguousarray(mat, dtype=np.float32).view(np.uint64)
    for start in range(0, len(mat), 4096):
        out[start : start + 4096] = (words[start : start + 4096] * _KEY_MULT).sum(axis=1, dtype=np.uint64)
    return out


def distinct_sentences(sentences: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of ``sentences`` (m, 384) in order of first occurrence: (row of ``sentences`` of each
    distinct one (d,) int64, index of each sentence's distinct row (m,) int64, keys of the distinct rows (d,) uint64).
    Same result as keying a dict by each row's bytes (identical rows are found by key, then compared)."""
    keys = row_keys(sentences)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    rank = np.empty(len(first), dtype=np.int64)
    rank[by_first] = np.arange(len(first))
    firsts, index = first[by_first], rank[inverse.reshape(-1)]
    same = all(
        np.array_equal(sentences[s : s + 4096], sentences[firsts[index[s : s + 4096]]])
        for s in range(0, len(sentences), 4096)
    )
    if not same:  # two different vectors with one key: by bytes
        distinct: dict[bytes, int] = {}
        first_list: list[int] = []
        index = np.empty(len(sentences), dtype=np.int64)
        for i, row in enumerate(sentences):
            j = distinct.setdefault(row.tobytes(), len(first_list))
            if j == len(first_list):
                first_list.append(i)
            index[i] = j
        firsts = np.asarray(first_list, dtype=np.int64)
    return firsts, index, keys[firsts]


def compact_rows(mat: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``mat[rows]`` for ascending ``rows`` (k,) int64 with ``rows[i] >= i``, made in place in ``mat``'s first ``k``
    rows (a view of them), a block at a time: no second matrix of the kept rows beside ``mat``."""
    for start in range(0, len(rows), 4096):
        block = rows[start : start + 4096]
        mat[start : start + len(block)] = mat[block]
    return mat[: len(rows)]


def sentence_runs(owner_rows: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """From the owning chunk row of each sentence position, sorted (m,) int64, and the number of chunk rows ``n``:
    (group_starts (g,), group_rows (g,), sentence_start (n,), sentence_end (n,)) as VectorSnapshot and DenseIndex
    hold them."""
    m = len(owner_rows)
    starts = np.flatnonzero(np.r_[True, owner_rows[1:] != owner_rows[:-1]]) if m else np.zeros(0, np.int64)
    group_rows = owner_rows[starts] if m else starts
    sentence_start = np.zeros(n, dtype=np.int64)
    sentence_end = np.zeros(n, dtype=np.int64)
    sentence_start[group_rows] = starts
    sentence_end[group_rows] = np.r_[starts[1:], m] if len(starts) else starts
    return starts, group_rows, sentence_start, sentence_end

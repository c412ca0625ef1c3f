"""Dense scores with an int8 first pass (cairn.dense): the bounds hold, the top chunks are exactly those of scoring
every vector in float32, and search results are the same as with the float32 path."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cairn.embedder import DIM, Int8Dot
from cairn.errors import ModelError
from cairn.search import SearchService
from cairn.search.dense import DenseIndex, quantize_query, quantize_rows
from support.requests import search_request
from support.vaults import SHARED


def _dev_questions(vault: str) -> list[str]:
    rows = [
        json.loads(line)
        for line in (SHARED / "eval" / "dev.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    return [r["question"] for r in rows if r["vault"] == vault]


def _no_int8(values):
    raise ModelError("no int8 kernel in this test")


def _reference(snap, qvec, weight):
    """Every chunk's exact (cos, best sentence cos, dense score), row by row in float32."""
    cos = np.einsum("ij,j->i", snap.chunks.matrix(), qvec)
    per_sentence = np.einsum("ij,j->i", snap.sentences.matrix(), qvec)
    sentence = np.full(len(cos), -1.0, dtype=np.float32)
    for g, row in enumerate(snap.group_rows):
        end = snap.group_starts[g + 1] if g + 1 < len(snap.group_starts) else len(snap.sentence_order)
        sentence[row] = per_sentence[snap.sentence_order[snap.group_starts[g] : end]].max()
    return cos, sentence, np.maximum(cos, np.float32(weight) * sentence)


def test_int8_dot_products_are_exact_and_do_not_depend_on_the_batch():
    rng = np.random.default_rng(7)
    rows = rng.integers(-127, 128, size=(5000, DIM), dtype=np.int8)
    dot = Int8Dot(rows)
    q = rng.integers(-63, 64, size=(3, DIM), dtype=np.int32)
    q[0] = 63  # the extremes: no int16 saturation anywhere
    q[1] = -63
    got = dot.dot(q)
    assert got.dtype == np.int32 and got.shape == (3, 5000)
    assert np.array_equal(got, q @ rows.astype(np.int32).T)
    assert np.array_equal(dot.dot(q[2:]), got[2:])
    with pytest.raises(ValueError):
        dot.dot(np.full((1, DIM), 64))
    assert Int8Dot(np.zeros((0, DIM), dtype=np.int8)).dot(q).shape == (3, 0)


def test_a_missing_int8_graph_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="int8 dot-product graph"):
        Int8Dot(np.zeros((4, DIM), dtype=np.int8), model_path=tmp_path / "absent.onnx")


@pytest.mark.shared_data("eval/dev.jsonl")
def test_the_bounds_hold_for_every_vector_and_every_dev_question(help_cairn):
    query = help_cairn.query
    snap = query.vectors.current()
    assert not snap.dense.exact_only
    for question in _dev_questions("obsidian-help")[:12]:
        qvec = query.embedder.embed_query(question)
        dq = snap.dense.query(qvec)
        cos, sentence, _ = _reference(snap, qvec, 1.0)
        assert np.all(dq.cos_lo <= cos) and np.all(cos <= dq.cos_hi), question
        assert np.all(dq.sentence_lo <= sentence) and np.all(sentence <= dq.sentence_hi), question
        assert float(np.median(dq.cos_hi - dq.cos_lo)) < 0.05  # tight enough to prune


@pytest.mark.shared_data("eval/dev.jsonl")
def test_the_top_chunks_are_exactly_those_of_scoring_every_vector(help_cairn):
    query = help_cairn.query
    snap = query.vectors.current()
    rng = np.random.default_rng(3)
    weight = query.sentence_weight
    for question in _dev_questions("obsidian-help"):
        qvec = query.embedder.embed_query(question)
        dq = snap.dense.query(qvec)
        cos, sentence, score = _reference(snap, qvec, weight)
        for allowed in (None, rng.random(len(cos)) < 0.5):
            pool = np.arange(len(cos)) if allowed is None else np.flatnonzero(allowed)
            expected = pool[np.lexsort((snap.chunk_ids[pool], -score[pool].astype(np.float64)))][:60]
            got = dq.top(60, weight, snap.chunk_ids, allowed)
            assert got.tolist() == expected.tolist(), question
        got_cos, got_sentence = dq.exact(got)
        assert np.array_equal(got_cos, cos[got]) and np.array_equal(got_sentence, sentence[got])  # bit for bit


@pytest.mark.shared_data("eval/dev.jsonl")
def test_the_float32_path_ranks_the_same_chunks(help_cairn):
    query = help_cairn.query
    snap = query.vectors.current()
    plain = DenseIndex(
        snap.chunks.matrix(),
        snap.sentences.matrix(),
        snap.dense.sentence_order,
        snap.dense.sentence_start,
        snap.dense.sentence_end,
        dot_factory=_no_int8,
    )
    assert plain.exact_only
    for question in _dev_questions("obsidian-help")[:10]:
        qvec = query.embedder.embed_query(question)
        fast, slow = snap.dense.query(qvec), plain.query(qvec)
        top = fast.top(60, query.sentence_weight, snap.chunk_ids)
        assert top.tolist() == slow.top(60, query.sentence_weight, snap.chunk_ids).tolist(), question
        for got, expected in zip(fast.exact(top), slow.exact(top)):
            assert np.array_equal(got, expected)  # the same cosines, to the last bit


@pytest.mark.shared_data("eval/dev.jsonl")
def test_search_results_are_the_same_with_and_without_the_int8_pass(help_cairn, monkeypatch):
    store, embedder = help_cairn.query.store, help_cairn.query.embedder
    questions = _dev_questions("obsidian-help")
    fast = SearchService(store, embedder)
    assert not fast.vectors.current().dense.exact_only

    def results(service, q):
        return [(h.file_path, h.symbol, h.score, h.cosine) for h in service.search(search_request(q, top_k=8)).hits]

    with_int8 = {q: results(fast, q) for q in questions}
    monkeypatch.setattr("cairn.search.vectors.DenseIndex", lambda *a, **k: DenseIndex(*a, **k, dot_factory=_no_int8))
    slow = SearchService(store, embedder)
    assert slow.vectors.current().dense.exact_only
    for q in questions:
        assert results(slow, q) == with_int8[q], q  # scores and cosines too, to the last bit


def test_quantized_rows_and_queries_are_within_their_stated_error():
    rng = np.random.default_rng(11)
    mat = rng.standard_normal((300, DIM)).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    values, scale, resid, norm = quantize_rows(mat)
    assert values.dtype == np.int8 and np.abs(values.astype(int)).max() == 127
    assert np.allclose(np.linalg.norm(mat - scale[:, None] * values, axis=1), resid)
    assert np.allclose(norm, 1.0, atol=1e-6)
    ints, steps, qhat_norm, err_norm = quantize_query(mat[0])
    assert np.abs(ints).max() <= 63
    approx = steps[0] * ints[0] + steps[1] * ints[1]
    assert np.isclose(np.linalg.norm(mat[0] - approx), err_norm) and err_norm < 1e-3
    assert np.isclose(np.linalg.norm(approx), qhat_norm)
    zero_q = quantize_query(np.zeros(DIM, dtype=np.float32))
    assert not zero_q[0].any() and zero_q[3] == 0.0


@pytest.mark.slow
def test_identical_notes_rank_the_same_on_both_paths_in_note_order(fresh_cairn, vault_copy, monkeypatch):
    """Identical vectors tie: both paths break the tie by chunk id (the order the notes were indexed in), whatever
    rows the vectors sit in (a BLAS product gave the same vector different last bits by row position)."""
    text = "Gardening notes. Water the tomatoes every morning. Compost keeps the soil rich. Bees like lavender.\n"
    for i in range(23):
        (vault_copy / f"f{i:02d}").mkdir()
        (vault_copy / f"f{i:02d}" / "Garden.md").write_text(text, encoding="utf-8")
    fresh_cairn.indexing.index()
    store, embedder = fresh_cairn.store, fresh_cairn.embedder
    expected = [f"f{i:02d}/Garden.md" for i in range(8)]
    fast = SearchService(store, embedder)
    monkeypatch.setattr("cairn.search.vectors.DenseIndex", lambda *a, **k: DenseIndex(*a, **k, dot_factory=_no_int8))
    slow = SearchService(store, embedder)
    for q in ("Garden", "watering plants in the morning", "compost and bees"):
        for service in (fast, slow):
            hits = service.search(search_request(q, top_k=8), mode="dense").hits
            assert [h.file_path for h in hits] == expected, q

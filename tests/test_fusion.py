"""Fusion of the search's ranked lists: the convex combination of normalised scores, the note
aggregation after it, and the BM25 sums it reads, on their own and through the search service."""

from __future__ import annotations

import pytest

from cairn.ranking import FusionWeights, rrf_fuse
from cairn.search.fusion import add_second_best, bm25_scores, convex_fuse, fuse


def test_a_bm25_hit_far_above_the_rest_outranks_a_dense_first_by_a_hair():
    # "x": BM25 far ahead of everything; "a": dense first, but only just above "b". RRF sees ranks only and puts the
    # dense first ahead; the convex fusion sees the gap.
    rankings = {"dense": ["a", "b", "x"], "bm25": ["x", "a"]}
    scores = {"dense": {"a": 0.60, "b": 0.59, "x": 0.58}, "bm25": {"x": 20.0, "a": 1.0}}
    by_rank = rrf_fuse(rankings, {"dense": 1.0, "bm25": 0.3})
    by_score = convex_fuse(rankings, scores, {"dense": 0.45, "bm25": 0.55})
    assert max(by_rank, key=by_rank.get) == "a"
    assert max(by_score, key=by_score.get) == "x"


def test_convex_scores_are_min_max_normalised_per_leg():
    rankings = {"dense": ["a", "b", "c"], "bm25": ["c", "b"]}
    scores = {"dense": {"a": 0.8, "b": 0.6, "c": 0.4}, "bm25": {"c": 10.0, "b": 5.0}}
    fused = convex_fuse(rankings, scores, {"dense": 0.5, "bm25": 0.5})
    # dense: a 1, b 0.5, c 0 (the list's last); BM25 from 0: c 1, b 0.5, a (none held) 0
    assert fused == pytest.approx({"a": 0.5, "b": 0.5, "c": 0.5})
    # an item of no list of a leg scores that leg's lower end, never below it
    one = convex_fuse(
        {"dense": ["a"], "bm25": ["z"]},
        {"dense": {"a": 0.7, "z": 0.1}, "bm25": {"z": 3.0}},
        {"dense": 1.0, "bm25": 1.0},
    )
    assert one["z"] == pytest.approx(1.0) and one["a"] == pytest.approx(1.0)


def test_fuse_follows_the_method_of_its_weights():
    rankings = {"dense": ["a", "b"], "bm25": ["b"]}
    scores = {"dense": {"a": 0.9, "b": 0.5}, "bm25": {"b": 2.0}}
    rrf = FusionWeights(method="rrf", dense=1.0, bm25=0.5, k=60)
    assert fuse(rankings, {}, rrf) == rrf_fuse(rankings, {"dense": 1.0, "bm25": 0.5}, 60)
    convex = FusionWeights(method="convex", alpha=0.25)
    assert fuse(rankings, scores, convex) == pytest.approx({"a": 0.25, "b": 0.75})
    with pytest.raises(ValueError):
        FusionWeights(method="borda")


def test_a_note_two_passages_support_outranks_one_with_a_single_passage_of_the_same_score():
    fused = {"n1#1": 0.5, "n1#2": 0.4, "n2#1": 0.5, "n3#1": 0.45}
    notes = {c: c.split("#")[0] for c in fused}
    raised = add_second_best(fused, notes, 0.2)
    assert raised["n1#1"] == pytest.approx(0.58) and raised["n1#2"] == pytest.approx(0.48)
    assert raised["n2#1"] == 0.5 and raised["n3#1"] == 0.45
    assert sorted(raised, key=raised.get, reverse=True)[:2] == ["n1#1", "n2#1"]
    assert add_second_best(fused, notes, 0.0) == fused


def test_bm25_scores_are_the_sums_the_keyword_leg_ranks_by(sample_cairn):
    service = sample_cairn.query
    query = "sourdough starter feeding"
    ranked = service.keyword_ranking(query, 20)
    scores = bm25_scores(service.keyword, ["sourdough", "starter", "feeding"], [*ranked, 10**9])
    assert scores[10**9] == 0.0
    assert all(scores[c] > 0 for c in ranked)
    assert [scores[c] for c in ranked] == sorted((scores[c] for c in ranked), reverse=True)


def test_the_search_fuses_scores_by_default_and_ranks_as_rrf_when_told(sample_cairn):
    service = sample_cairn.query
    default = service.weights
    question = "how do I keep a sourdough starter alive"
    try:
        service.results.clear()
        convex = service.retrieve(question, top_k=5, mode="hybrid", per_note=1)[0]
        service.weights = FusionWeights(method="rrf")
        service.results.clear()
        rrf = service.retrieve(question, top_k=5, mode="hybrid", per_note=1)[0]
    finally:
        service.weights = default
        service.results.clear()
    assert default.method == "convex"
    assert "sourdough" in convex[0].file_path.lower()
    assert 0 < convex[0].score <= 1.0 + default.second  # normalised scores, not 1 / (k + rank)
    assert all(h.score < 0.05 for h in rrf)

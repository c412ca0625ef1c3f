"""cairn.ranking: FTS5 query building, weighted RRF, the query classifier, per-note limits."""

from __future__ import annotations

import apsw
import pytest

from cairn.ranking import FusionWeights, QueryClassifier, limit_per_group, rrf_fuse
from cairn.search.query import fts_match_expression, query_terms


def test_query_terms_drop_stopwords_and_keep_order():
    assert query_terms("How do I make a callout?") == ["callout"]
    assert query_terms("What's the Graph view's filter") == ["graph", "view", "filter"]


@pytest.mark.parametrize(
    "text",
    [
        'callout AND NOT "x',
        "NEAR(a b)",
        "title:secret",
        "alpha* OR beta",
        '"unbalanced',
        "^start",
        "col : value",
        "-minus +plus",
        "(paren",
        "{braces}",
        "DROP TABLE notes;--",
    ],
)
def test_user_text_is_never_fts5_syntax(text):
    match = fts_match_expression(text)
    conn = apsw.Connection(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE f USING fts5(text, symbol, title, tokenize='porter unicode61 remove_diacritics 2')"
    )
    conn.execute(
        "INSERT INTO f VALUES ('and not near title secret drop table notes minus plus braces paren start', '', '')"
    )
    assert match is not None
    list(conn.execute("SELECT rowid FROM f WHERE f MATCH ?", (match,)))  # must not raise


def test_text_without_terms_gives_no_expression():
    assert fts_match_expression("how do I ?") is None
    assert fts_match_expression("   ") is None


def test_rrf_weights_and_ranks():
    fused = rrf_fuse({"dense": ["a", "b"], "bm25": ["b", "c"]}, {"dense": 1.0, "bm25": 0.5}, k=60)
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == pytest.approx(1 / 62 + 0.5 / 61)
    assert fused["c"] == pytest.approx(0.5 / 62)
    assert max(fused, key=fused.get) == "b"


def test_rrf_zero_weight_ignores_a_list():
    assert rrf_fuse({"dense": ["a"], "bm25": ["z"]}, {"dense": 1.0, "bm25": 0.0}) == {"a": pytest.approx(1 / 61)}


def test_default_fusion_leans_on_dense():
    w = FusionWeights()
    assert w.dense >= w.bm25 > 0


def test_the_search_fuses_with_the_rrf_k_of_its_weights_when_told_to_use_rrf(sample_cairn):
    # A small k lets each list's first ranks decide; the service's fused scores follow the k it is given.
    service = sample_cairn.query
    default = service.weights
    try:
        fused = {}
        for k in (1, 60):
            service.weights = FusionWeights(dense=default.dense, bm25=default.bm25, k=k, method="rrf")
            service.results.clear()  # results are cached by query, not by weights
            hits, _ = service.retrieve("how to feed a sourdough starter", top_k=3, mode="dense", per_note=1)
            fused[k] = hits[0].score
    finally:
        service.weights = default
    assert fused[1] == pytest.approx(default.dense / 2) and fused[60] == pytest.approx(default.dense / 61)


@pytest.mark.parametrize(
    "question,kind",
    [
        ("what does the pdf say on page 3", "pdf"),
        ("in the paper, what is the result", "pdf"),
        ("show me the code snippet for a dataview query", "code"),
        ("the bash script to back up my vault", "code"),
        ("which table lists the shortcuts", "table"),
        ("How do I make a callout?", None),
        ("what is a vault", None),
    ],
)
def test_query_classifier(question, kind):
    assert QueryClassifier().classify(question) == kind


def test_classifier_boost_only_for_the_preferred_kind():
    c = QueryClassifier()
    assert c.boost("code", "code") > 1.0
    assert c.boost("code", "prose") == 1.0
    assert c.boost(None, "code") == 1.0


def test_limit_per_group_keeps_order():
    items = ["a1", "a2", "a3", "b1", "c1", "b2", "b3"]
    groups = {i: i[0] for i in items}
    assert limit_per_group(items, groups, per_group=2, limit=5) == ["a1", "a2", "b1", "c1", "b2"]

"""The ranking metrics and bootstrap intervals of the evaluation (tests/bench/eval_metrics.py) on hand-made rankings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))

from eval_metrics import bootstrap, first_occurrence, hit_at, recall_at, reciprocal_rank  # noqa: E402

RANKED = ["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11"]


def test_reciprocal_rank_is_one_over_the_one_based_rank_within_the_top_10() -> None:
    assert reciprocal_rank(RANKED, {"n1"}) == 1.0
    assert reciprocal_rank(RANKED, {"n2"}) == 0.5
    assert reciprocal_rank(RANKED, {"n4", "n3"}) == pytest.approx(1 / 3)
    assert reciprocal_rank(RANKED, {"n10"}) == pytest.approx(0.1)
    assert reciprocal_rank(RANKED, {"n11"}) == 0.0  # rank 11: outside MRR@10
    assert reciprocal_rank(RANKED, {"elsewhere"}) == 0.0
    assert reciprocal_rank([], {"n1"}) == 0.0


def test_hit_and_recall_count_the_first_five_notes_only() -> None:
    assert hit_at(RANKED, {"n5"}) == 1.0
    assert hit_at(RANKED, {"n6"}) == 0.0
    assert hit_at(RANKED, {"n6", "n1"}) == 1.0
    assert recall_at(RANKED, {"n1", "n6"}) == 0.5
    assert recall_at(RANKED, {"n1", "n2", "n3"}) == 1.0
    assert recall_at(RANKED, {"n2", "n7", "n8", "n9"}) == 0.25
    assert recall_at(RANKED, set()) == 0.0
    assert hit_at(RANKED, {"n2"}, k=1) == 0.0


def test_chunk_ranks_become_note_ranks_at_the_first_occurrence() -> None:
    chunks = ["b.md", "a.md", "b.md", "c.md", "a.md"]
    assert first_occurrence(chunks) == ["b.md", "a.md", "c.md"]
    assert reciprocal_rank(first_occurrence(chunks), {"c.md"}) == pytest.approx(1 / 3)


def test_bootstrap_interval_holds_the_mean_and_is_reproducible() -> None:
    values = [1.0] * 50 + [0.0] * 50
    est = bootstrap(values, resamples=2000, seed=7)
    assert est.mean == 0.5 and est.n == 100
    # the normal approximation: 0.5 ± 1.96 × sqrt(0.25 / 100)
    assert est.lo == pytest.approx(0.402, abs=0.02)
    assert est.hi == pytest.approx(0.598, abs=0.02)
    assert bootstrap(values, resamples=2000, seed=7) == est
    assert bootstrap(values, resamples=2000, seed=8) != est


def test_bootstrap_of_constant_and_empty_samples() -> None:
    est = bootstrap([1.0] * 12)
    assert (est.mean, est.lo, est.hi) == (1.0, 1.0, 1.0)
    assert est.cell() == "1.000 [1.000–1.000]"
    assert bootstrap([0.0, 1.0, 1.0, 1.0], seed=3).percent().startswith("75 % [")
    empty = bootstrap([])
    assert empty.n == 0 and empty.cell() == "n/a"
    with pytest.raises(ValueError):
        bootstrap([1.0], resamples=0)

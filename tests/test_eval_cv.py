"""The k-fold cross-validation helper of the evaluation (tests/bench/eval_cv.py) on hand-made questions."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))

from eval_cv import cross_validate, mean_over, stratified_folds  # noqa: E402


def _questions() -> list[dict]:
    rows = []
    for vault in ("a", "b"):
        for kind, n in (("keyword", 10), ("paraphrase", 15)):
            rows += [{"id": f"{vault}-{kind}-{i}", "vault": vault, "kind": kind} for i in range(n)]
    return rows


def test_folds_are_stratified_disjoint_and_reproducible() -> None:
    questions = _questions()
    folds = stratified_folds(questions, k=5, seed=3)
    ids = [q["id"] for fold in folds for q in fold]
    assert sorted(ids) == sorted(q["id"] for q in questions)
    assert {len(f) for f in folds} == {10}
    for fold in folds:
        per_stratum = Counter((q["vault"], q["kind"]) for q in fold)
        assert per_stratum == {("a", "keyword"): 2, ("a", "paraphrase"): 3, ("b", "keyword"): 2, ("b", "paraphrase"): 3}
    assert [[q["id"] for q in f] for f in stratified_folds(questions, k=5, seed=3)] == [
        [q["id"] for q in f] for f in folds
    ]
    assert [[q["id"] for q in f] for f in stratified_folds(questions, k=5, seed=4)] != [
        [q["id"] for q in f] for f in folds
    ]


def test_the_setting_is_chosen_on_training_folds_and_scored_held_out() -> None:
    """A setting that only "memorises" one fold's questions wins on the whole set but not held out."""
    questions = _questions()
    folds = stratified_folds(questions, k=5, seed=3)
    memorised = {q["id"] for q in folds[0]} | {q["id"] for q in folds[1]}

    def per_question(setting: str, q: dict) -> float:
        if setting == "general":
            return 0.6
        return 1.0 if q["id"] in memorised else 0.4

    result = cross_validate(questions, ["general", "memorise"], mean_over(per_question), k=5, seed=3)
    assert [f.chosen for f in result.folds] == ["general", "general", "memorise", "memorise", "memorise"]
    assert result.folds[2].heldout_score == pytest.approx(0.4)
    assert result.heldout == pytest.approx((0.6 * 2 + 0.4 * 3) / 5)
    assert result.fixed == [pytest.approx(0.6), pytest.approx((1.0 * 2 + 0.4 * 3) / 5)]
    assert result.heldout < result.fixed[0]


def test_ties_go_to_the_first_setting_and_bad_input_is_refused() -> None:
    result = cross_validate(_questions(), ["baseline", "same"], lambda s, qs: 0.5, k=2)
    assert {f.chosen for f in result.folds} == {"baseline"}
    with pytest.raises(ValueError):
        cross_validate(_questions(), [], lambda s, qs: 0.0)
    with pytest.raises(ValueError):
        stratified_folds(_questions()[:3], k=5)

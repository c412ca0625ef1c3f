"""What a person reads, as the evaluation judges it (tests/bench/eval_answers.py, answer_folds.py): the answer
carries the evidence, the outcome tallies, the rule refitted by grouped k-fold."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))

import answer_folds  # noqa: E402
from eval_answers import Outcome, Reading, carried_share, carries, judge, outcome_rows  # noqa: E402

from cairn.config import WEAK_ANSWER_LEAD  # noqa: E402


def test_an_answer_carries_the_evidence_when_it_holds_most_of_its_content_words():
    evidence = "From here you can follow the [[Import Markdown files]] instructions."
    assert carries("Follow the Import Markdown files instructions from here. [2]", evidence)
    assert carried_share("Follow the instructions. [2]", evidence) == pytest.approx(
        2 / 5
    )  # of follow import markdown file instruction
    assert not carries("Follow the instructions. [2]", evidence)
    assert carries("Snapshots are **deleted** after 7 days", "snapshot deletion: 7 day") is False  # deleted ≠ deletion
    assert carries("Snapshots are deleted after 7 days", "snapshots deleted, 7 days")


def test_a_weak_answer_is_judged_without_its_lead_and_a_refused_one_carries_nothing():
    q = {"id": "Q1", "relevant": ["a.md"], "evidence": "kept for seven days"}
    weak = judge(q, f"{WEAK_ANSWER_LEAD}\n\nSnapshots are kept for seven days. [1]", False, True, ["a.md"])
    assert (
        weak.outcome == "weak"
        and weak.carries
        and weak.cites_relevant
        and weak.chars == len("Snapshots are kept for seven days.")
    )
    refused = judge(q, "I couldn't find this in your indexed notes.", True, False, [])
    assert refused.outcome == "not_found" and refused.carries is False and refused.chars == 0


def test_rates_are_shares_of_the_tallies_and_an_answer_refused_half_the_time_carries_half():
    qs = [{"id": "A", "relevant": ["a.md"], "evidence": "x y"}, {"id": "B", "relevant": [], "evidence": None}]
    answers = {"A": Outcome("A", "answer", "x y", True, True, 3), "B": Outcome("B", "weak", "z", None, False, 1)}
    answers["A"].would_carry = True
    reading = Reading("k-fold", {"A": Counter(answer=1, not_found=1), "B": Counter(weak=2)})
    row = outcome_rows("v", qs, answers, reading)
    assert row[3] == "50 %" and row[7:10] == ["50 %", "0 %", "50 %"] and row[11:14] == ["0 %", "100 %", "0 %"]


def test_the_rule_is_refitted_on_the_other_folds_and_refuses_what_no_hit_supports():
    rng = np.random.default_rng(3)
    rows, outcomes = [], {}
    for i in range(60):
        answerable = i % 3 != 0
        qid = f"Q{i}"
        rows.append({"id": qid, "vault": "v", "relevant": [f"n{i}.md"] if answerable else []})
        o = Outcome(qid, "answer", "", None, False, 0, hits=i != 59)
        o.features = {n: float(rng.normal(1.0 if answerable else -1.0, 0.3)) for n in answer_folds.SIGNALS}
        outcomes[qid] = o
    tally = answer_folds.held_out(rows, outcomes, k=5, seeds=2)
    assert sum(tally["Q59"].values()) == 2 and tally["Q59"]["not_found"] == 2  # no hit: not found whatever the rule
    answered = np.mean([tally[r["id"]]["answer"] / 2 for r in rows if r["relevant"]])
    off_answered = np.mean([tally[r["id"]]["answer"] / 2 for r in rows if not r["relevant"] and r["id"] != "Q59"])
    assert answered > 0.8 and off_answered < 0.1

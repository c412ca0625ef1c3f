"""The tables of ``make eval`` (Markdown, printed and written to docs/eval.md) from per-question results.

Input: one :class:`VaultResult` per vault — per ranking mode, each in-corpus question's (Hit@5, Recall@5,
MRR@10); per question, whether the real ask path answered "not found"; the known-item checks. Every figure is a
mean over questions (or notes, or terms) with its 95 % bootstrap interval (:func:`eval_metrics.bootstrap`).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import answer_folds
from eval_answers import OUTCOME_HEADER, Outcome, Reading, outcome_rows
from eval_bound import DENSE_DEPTH, BoundReport
from eval_known import Check
from eval_metrics import RESAMPLES, bootstrap
from record import commit

METRICS = ("hit@5", "recall@5", "mrr@10")
KINDS = ("keyword", "paraphrase", "detail", "multi")
#: Rows not in the acceptance tables: the naive pipeline's dense list alone (whole-chunk vectors, no floor).
ANALYSIS_MODES = ("naive-dense",)

Scores = dict[str, tuple[float, float, float]]  # question id -> (hit@5, recall@5, mrr@10)


@dataclass
class VaultResult:
    """Everything measured on one vault."""

    vault: str
    questions: list[dict]
    ranking: dict[str, Scores] = field(default_factory=dict)
    not_found: dict[str, bool] = field(default_factory=dict)
    known: list[Check] = field(default_factory=list)
    misses: dict[str, list[str]] = field(default_factory=dict)
    bound: BoundReport | None = None
    #: Per question id (``questions`` and ``training``): what the ask path answered (:mod:`eval_answers`).
    answers: dict[str, Outcome] = field(default_factory=dict)
    #: Questions asked only to refit the answered / weak / not-found rule in its k-fold.
    training: list[dict] = field(default_factory=list)

    def in_corpus(self, *, kind: str | None = None, source: str | None = None) -> list[dict]:
        return [
            q
            for q in self.questions
            if q["relevant"] and (kind is None or q["kind"] == kind) and (source is None or q.get("source") == source)
        ]


def _metric_cells(scores: Scores, questions: Sequence[dict]) -> list[str]:
    cells = []
    for m in range(len(METRICS)):
        cells.append(bootstrap([scores[q["id"]][m] for q in questions if q["id"] in scores]).cell())
    return cells


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def ranking_tables(results: Sequence[VaultResult]) -> str:
    """Per vault and mode, then per vault, kind and mode: Hit@5, Recall@5, MRR@10 with intervals."""
    head = ["vault", "mode", "n", "Hit@5", "Recall@5", "MRR@10"]
    rows = []
    for r in results:
        qs = r.in_corpus()
        for mode, scores in r.ranking.items():
            label = f"*{mode}*" if mode in ANALYSIS_MODES else (f"**{mode}**" if mode == "hybrid" else mode)
            rows.append([r.vault, label, str(len(qs)), *_metric_cells(scores, qs)])
    kind_rows = []
    for r in results:
        for kind in KINDS:
            qs = r.in_corpus(kind=kind)
            for mode, scores in r.ranking.items():
                if mode not in ANALYSIS_MODES:
                    kind_rows.append([r.vault, kind, mode, str(len(qs)), *_metric_cells(scores, qs)])
    return (
        "### Ranking, both dev files\n\n"
        + _table(head, rows)
        + "\n\n### Ranking per kind of question\n\n"
        + _table(["vault", "kind", *head[1:]], kind_rows)
    )


def per_file_table(results: Sequence[VaultResult]) -> str:
    """Point values per vault, dev file and mode (to compare with figures measured on one file)."""
    rows = []
    for r in results:
        for source in sorted({q.get("source", "") for q in r.questions}):
            qs = r.in_corpus(source=source)
            for mode, scores in r.ranking.items():
                vals = [sum(scores[q["id"]][m] for q in qs) / max(len(qs), 1) for m in range(len(METRICS))]
                rows.append([r.vault, source, mode, str(len(qs)), *(f"{v:.3f}" for v in vals)])
    return "### Ranking per dev file (no intervals)\n\n" + _table(
        ["vault", "file", "mode", "n", "Hit@5", "Recall@5", "MRR@10"], rows
    )


def not_found_table(results: Sequence[VaultResult]) -> str:
    """Off-corpus questions answered "not found", and in-corpus questions wrongly so, by the real ask path."""
    rows = []
    for r in results:
        off = [float(r.not_found[q["id"]]) for q in r.questions if not q["relevant"] and q["id"] in r.not_found]
        wrong = [float(r.not_found[q["id"]]) for q in r.questions if q["relevant"] and q["id"] in r.not_found]
        rows.append([r.vault, str(len(off)), bootstrap(off).percent(), str(len(wrong)), bootstrap(wrong).percent()])
    return "### Not found (the ask path, no language model)\n\n" + _table(
        ["vault", "off-corpus n", "off-corpus not found", "in-corpus n", "in-corpus wrongly not found"], rows
    )


def answers_table(results: Sequence[VaultResult]) -> str:
    """What a person reads: the answer carries the evidence; answered / weak / not found; as shipped and k-fold (the
    rule refitted on the other folds of every vault's questions, :func:`answer_folds.held_out`)."""
    asked = [r for r in results if r.answers]
    rows = [q for r in asked for q in (*r.questions, *r.training)]
    outcomes = {qid: o for r in asked for qid, o in r.answers.items()}
    featured = [q for q in rows if outcomes[q["id"]].features]
    readings = [Reading.shipped(outcomes)]
    if featured:
        readings.append(
            Reading(f"k-fold ({answer_folds.FOLDS} × {answer_folds.SEEDS})", answer_folds.held_out(featured, outcomes))
        )
    lines = []
    for r in asked:
        for reading in readings:
            lines.append(outcome_rows(r.vault, r.questions, outcomes, reading))
    return "### What the answer says (the ask path, no language model)\n\n" + _table(OUTCOME_HEADER, lines)


def bound_table(results: Sequence[VaultResult]) -> str:
    """Hybrid misses, and how many are outside the dense top 100 / share no content word with the question."""
    rows = []
    for r in results:
        b = r.bound
        if b is not None:
            ids = ", ".join(b.both) or "none"
            legs = ", ".join(b.no_leg_top5) or "none"
            rows.append(
                [
                    r.vault,
                    str(b.misses),
                    str(b.outside_dense),
                    str(b.no_shared_word),
                    f"{len(b.both)} ({ids})",
                    f"{len(b.no_leg_top5)} ({legs})",
                ]
            )
    return "### Hybrid misses: bound by the embedding model?\n\n" + _table(
        [
            "vault",
            "misses (Hit@5 = 0)",
            f"outside the dense top {DENSE_DEPTH}",
            "no content word shared",
            "both (question ids)",
            "in no leg's top 5 notes (BM25, dense)",
        ],
        rows,
    )


def known_table(results: Sequence[VaultResult]) -> str:
    """The known-item checks per vault with their intervals and item counts."""
    rows = []
    for r in results:
        for check in r.known:
            counts = "; ".join(f"{k}: {v}" for k, v in check.counts.items())
            rows.append([r.vault, check.name, str(len(check.values)), bootstrap(check.values).cell(), counts])
    return "### Known-item checks (generated from the vaults)\n\n" + _table(
        ["vault", "check", "n", "share [95 % CI]", "items"], rows
    )


def report(results: Sequence[VaultResult]) -> str:
    """All tables, in the order make eval prints them."""
    parts = [ranking_tables(results), per_file_table(results), not_found_table(results)]
    if any(r.answers for r in results):
        parts.append(answers_table(results))
    if any(r.bound is not None for r in results):
        parts.append(bound_table(results))
    if any(r.known for r in results):
        parts.append(known_table(results))
    return "\n\n".join(parts) + "\n"


DOC_HEADER = f"""# Retrieval evaluation

Written by `make eval` (`tests/bench/eval_retrieval.py --record docs/eval.md`): the tables of its last run,
with the date, the commit and the command. Questions: both dev files (`dev.jsonl`, `dev2.jsonl` in
`../shared/eval`), note level. Hit@5: share of questions with a relevant note in the top 5; Recall@5: share
of a question's relevant notes in the top 5, averaged; MRR@10: mean of 1 / rank of the first relevant note
within the top 10 (0 when none). Brackets: 95 % percentile-bootstrap interval, {RESAMPLES} resamples of the
questions (notes, terms), fixed seed. `naive`: one vector per whole chunk (title and heading path in
front), FTS5 `bm25()` of the OR of the terms, plain RRF (k = 60), no floor; *naive-dense*: its dense list
alone. `bm25`, `dense`, `hybrid`: Cairn's search (`SearchService.retrieve`). "Not found" is measured through
the ask path (`AnswerService.answer`, no language model): the answer's `done` says `notFound`.
"""


NOTES_MARK = "<!-- eval:notes -->"


def write_doc(path: Path, body: str, command: str) -> None:
    """Replace ``path`` with the header, the run's date (UTC), commit and command, and ``body``; what the file
    held from :data:`NOTES_MARK` on (hand-written notes) is kept."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    notes = old[old.index(NOTES_MARK) :] if NOTES_MARK in old else f"{NOTES_MARK}\n"
    when = dt.datetime.now(dt.UTC)
    stamp = (
        f"{when:%Y-%m-%d %H:%M} UTC, commit {commit()}, {os.cpu_count() or '?'} cores, "
        f"Python {platform.python_version()}: `{command}`"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{DOC_HEADER}\n{stamp}\n\n{body}\n{notes}", encoding="utf-8")

"""Stratified k-fold cross-validation for choosing retrieval parameters on the dev questions.

A parameter is tuned on some questions and judged on others: the questions (the union of both dev files) are
dealt into ``k`` folds stratified by (vault, kind) with a fixed seed; for each fold, the setting with the best
score on the other ``k - 1`` folds is chosen and then scored on the held-out fold. The held-out figure is the
size-weighted mean of those fold scores -- the figure to report, never the best score on the whole set.

Example (``hit_at_5`` ranks one question and returns 1.0 or 0.0)::

    from eval_cv import cross_validate, load_questions, mean_over

    questions = [q for q in load_questions() if q["relevant"]]      # in-corpus only
    grid = [{"bm25": w} for w in (0.5, 1.0, 2.0)]
    result = cross_validate(questions, grid, mean_over(hit_at_5), k=5, seed=17)
    print(result.heldout)                          # the held-out figure of tuning over the grid
    print([f.chosen for f in result.folds])        # the setting each fold chose
    print(result.fixed[1])                         # held-out figure of grid[1] kept fixed (the baseline)
    print(result.summary())

Per-question pieces to build ``hit_at_5`` from: :func:`eval_retrieval.note_ranking` (a question's top 10 notes
through ``SearchService.retrieve``) and :mod:`eval_metrics` (``hit_at``, ``recall_at``, ``reciprocal_rank``).

Keep a parameter only when ``result.heldout`` beats the baseline's ``result.fixed[i]``. ``score`` is called
once per (setting, fold) on the training questions and once on the held-out questions; wrap a per-question
function with :func:`mean_over`, which caches each (setting, question) result so a grid costs one pass over
the questions per setting. Import from a script under tests/bench with ``sys.path`` including this folder,
or from a test with ``sys.path.insert(0, "tests/bench")``.
"""

from __future__ import annotations

import json
import os
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    """The read-only shared folder (vaults, eval sets): ``$CAIRN_SHARED``, else ``../shared`` of the repo or of
    the folder holding a git worktree of it (``/work/wt/NAME`` -> ``/work/shared``)."""
    if os.environ.get("CAIRN_SHARED"):
        return Path(os.environ["CAIRN_SHARED"])
    for base in (REPO.parent, REPO.parent.parent):
        if (base / "shared" / "eval").is_dir():
            return base / "shared"
    return REPO.parent / "shared"


DEV_FILES = (shared_dir() / "eval" / "dev.jsonl", shared_dir() / "eval" / "dev2.jsonl")
DEFAULT_K = 5
DEFAULT_SEED = 17

Question = dict[str, Any]
Score = Callable[[Any, Sequence[Question]], float]


def load_questions(paths: Iterable[Path | str] = DEV_FILES) -> list[Question]:
    """The questions of the JSONL dev files, in file order; each row gains ``source`` (the file's stem).

    Raises ``ValueError`` when two rows share an ``id`` (folds and caches key on it).
    """
    rows: list[Question] = []
    seen: set[str] = set()
    for path in paths:
        path = Path(path)
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if row["id"] in seen:
                raise ValueError(f"question id {row['id']!r} appears twice (second time in {path})")
            seen.add(row["id"])
            rows.append({**row, "source": path.stem})
    return rows


def stratified_folds(
    questions: Sequence[Question], k: int = DEFAULT_K, seed: int = DEFAULT_SEED
) -> list[list[Question]]:
    """``questions`` dealt into ``k`` folds, each (vault, kind) stratum spread evenly over the folds.

    Within a stratum the questions are sorted by id and shuffled with ``seed``, then dealt round-robin; the
    dealing continues across strata from where the last one stopped, so fold sizes differ by at most one.
    The same questions, ``k`` and ``seed`` always give the same folds. Raises ``ValueError`` for ``k < 2``
    or fewer questions than folds.
    """
    if k < 2 or len(questions) < k:
        raise ValueError(f"need k >= 2 and at least k questions (k={k}, {len(questions)} questions)")
    strata: dict[tuple[str, str], list[Question]] = defaultdict(list)
    for q in questions:
        strata[(q["vault"], q["kind"])].append(q)
    rng = random.Random(seed)
    folds: list[list[Question]] = [[] for _ in range(k)]
    at = 0
    for key in sorted(strata):
        members = sorted(strata[key], key=lambda q: q["id"])
        rng.shuffle(members)
        for q in members:
            folds[at % k].append(q)
            at += 1
    return folds


@dataclass(frozen=True)
class Fold:
    """One fold: the setting chosen on the other folds, its training score and its held-out score."""

    index: int
    chosen: Any
    train_score: float
    heldout_score: float
    n_heldout: int


@dataclass
class CVResult:
    """Per-fold choices, the held-out figure of tuning, and the held-out figure of each setting kept fixed.

    ``heldout``: size-weighted mean of the folds' held-out scores (the figure to report). ``fixed[i]``: the
    same mean for ``grid[i]`` used on every fold (what the setting does with no tuning).
    """

    folds: list[Fold]
    heldout: float
    fixed: list[float]
    grid: list[Any] = field(default_factory=list)

    def summary(self) -> str:
        """A few lines: each fold's choice and scores, the held-out figure, each fixed setting's figure."""
        lines = [
            f"fold {f.index}: chose {f.chosen!r} (train {f.train_score:.3f}) -> held-out {f.heldout_score:.3f} "
            f"on {f.n_heldout}"
            for f in self.folds
        ]
        lines.append(f"held-out (tuned over {len(self.grid)} settings): {self.heldout:.3f}")
        lines += [f"  fixed {s!r}: {v:.3f}" for s, v in zip(self.grid, self.fixed)]
        return "\n".join(lines)


def _weighted(scores: Sequence[float], sizes: Sequence[int]) -> float:
    total = sum(sizes)
    return sum(s * n for s, n in zip(scores, sizes)) / total if total else 0.0


def cross_validate(
    questions: Sequence[Question],
    grid: Sequence[Any],
    score: Score,
    *,
    k: int = DEFAULT_K,
    seed: int = DEFAULT_SEED,
) -> CVResult:
    """Choose a setting from ``grid`` on each fold's training questions; score it on the held-out fold.

    ``score(setting, questions) -> float`` (higher is better) may be any set-level figure; ties go to the
    earlier setting in ``grid`` (put the baseline first). Raises ``ValueError`` for an empty grid or
    (from :func:`stratified_folds`) too few questions.
    """
    if not grid:
        raise ValueError("the grid of settings is empty")
    folds = stratified_folds(questions, k, seed)
    sizes = [len(f) for f in folds]
    per_setting_test = [[score(s, fold) for fold in folds] for s in grid]
    chosen: list[Fold] = []
    for i, test in enumerate(folds):
        train = [q for j, fold in enumerate(folds) if j != i for q in fold]
        train_scores = [score(s, train) for s in grid]
        best = max(range(len(grid)), key=lambda g: (train_scores[g], -g))
        chosen.append(Fold(i, grid[best], train_scores[best], per_setting_test[best][i], len(test)))
    heldout = _weighted([f.heldout_score for f in chosen], sizes)
    fixed = [_weighted(tests, sizes) for tests in per_setting_test]
    return CVResult(chosen, heldout, fixed, list(grid))


def mean_over(per_question: Callable[[Any, Question], float]) -> Score:
    """A set-level ``score`` that averages ``per_question(setting, question)``, each pair computed once.

    The cache keys on ``repr(setting)`` and the question's ``id``, so settings must have a stable repr
    (dicts, tuples, dataclasses do). An empty question list scores 0.0.
    """
    cache: dict[tuple[str, str], float] = {}

    def score(setting: Any, questions: Sequence[Question]) -> float:
        if not questions:
            return 0.0
        key = repr(setting)
        total = 0.0
        for q in questions:
            pair = (key, q["id"])
            if pair not in cache:
                cache[pair] = float(per_question(setting, q))
            total += cache[pair]
        return total / len(questions)

    return score

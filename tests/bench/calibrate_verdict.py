#!/usr/bin/env python3
"""Calibrate the answered / weak / not-found rule (cairn.answers.answerability) by grouped k-fold.

Questions: both dev files, ``paraphrases.jsonl`` and ``near_misses.jsonl``. Each is asked on the eval indexes through
the ask path (:func:`answer_folds.collect`: the evidence the verdict is judged on, the answer a person reads); the
dump is kept in ``--dump`` and read back with ``--load``. Reported: each signal's AUC alone (answerable against
off-corpus), then for each signal set the held-out outcomes per vault (:func:`answer_folds.held_out`: answerable
answered / weak / not found, off-corpus answered / weak / not found, the share of the evidence carried), and for the
chosen set (``--only``, else :data:`answer_folds.SIGNALS`) the constants fitted on all questions.

Usage: calibrate_verdict.py [--dump OUT.json | --load IN.json] [--vaults DIR] [--data-dir DIR] [--only a,b,c]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import answer_folds  # noqa: E402
import eval_cv  # noqa: E402
from eval_answers import Outcome, Reading, outcome_rows  # noqa: E402

BENCH = Path(__file__).resolve().parent
FILES = (*eval_cv.DEV_FILES, BENCH / "paraphrases.jsonl", BENCH / "near_misses.jsonl")
BASE = ("coverage", "top", "unknown", "uncovered", "names_absent")
SETS = (
    BASE,
    (*BASE, "bm25_top"),
    (*BASE, "bm25_top", "bm25_gap"),
    (*BASE, "answer_cosine"),
    (*BASE, "answer_held"),
    (*BASE, "answer_cosine", "answer_held"),
    (*BASE, "bm25_top", "bm25_gap", "answer_cosine"),
    (*BASE, "bm25_top", "bm25_gap", "answer_cosine", "answer_held"),
    ("coverage", "top", "unknown", "names_absent", "bm25_top", "bm25_gap", "answer_cosine"),
)


def ask_all(rows: list[dict], vaults: Path, data_dir: Path) -> dict[str, Outcome]:
    from cairn.answers import AnswerService
    from cairn.app import Cairn
    from cairn.config import load_config
    from cairn.embedder import Embedder

    embedder = Embedder()
    out: dict[str, Outcome] = {}
    for vault in sorted({r["vault"] for r in rows}):
        config = load_config({"vault": str(vaults / vault), "data_dir": str(data_dir)}, env={})
        cairn = Cairn(config, embedder=embedder, readonly=True)
        try:
            out.update(answer_folds.collect(AnswerService(cairn.query), [r for r in rows if r["vault"] == vault]))
        finally:
            cairn.close()
        print(f"# {vault}: asked", file=sys.stderr, flush=True)
    return out


def report(rows: list[dict], outcomes: dict[str, Outcome], sets: tuple[tuple[str, ...], ...]) -> None:
    names = sorted({n for o in outcomes.values() for n in o.features})
    for vault in sorted({r["vault"] for r in rows}):
        mine = [r for r in rows if r["vault"] == vault]
        aucs = ", ".join(f"{n} {answer_folds.auc(mine, outcomes, n):.2f}" for n in names)
        print(f"AUC alone, {vault}: {aucs}")
    dev = [r for r in rows if r["source"] in ("dev", "dev2")]
    print("\nheld out (dev questions; fitted on the others of all files), per vault:")
    print("vault | set | carries | answerable answered / weak / not found | off-corpus answered / weak / not found")
    shipped = Reading.shipped(outcomes)
    for vault in sorted({r["vault"] for r in rows}):
        row = outcome_rows(vault, [r for r in dev if r["vault"] == vault], outcomes, shipped)
        print(f"  {vault} shipped: {row[3]} | {' / '.join(row[7:10])} | {' / '.join(row[11:14])}")
    for names_ in sets:
        reading = Reading("k-fold", answer_folds.held_out(rows, outcomes, names_))
        for vault in sorted({r["vault"] for r in rows}):
            row = outcome_rows(vault, [r for r in dev if r["vault"] == vault], outcomes, reading)
            print(f"  {vault} {'+'.join(names_)}: {row[3]} | {' / '.join(row[7:10])} | {' / '.join(row[11:14])}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", type=Path)
    ap.add_argument("--load", type=Path)
    ap.add_argument("--vaults", type=Path, default=eval_cv.shared_dir() / "vaults")
    ap.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache")
    ap.add_argument("--vault", action="append", help="only these vaults")
    ap.add_argument("--only", help="comma-separated signals: report only this set")
    args = ap.parse_args()
    rows = [r for r in eval_cv.load_questions(FILES) if not args.vault or r["vault"] in args.vault]
    if args.load:
        outcomes = {k: Outcome(**v) for k, v in json.loads(args.load.read_text()).items()}
    else:
        outcomes = ask_all(rows, args.vaults, args.data_dir)
        if args.dump:
            args.dump.write_text(json.dumps({k: dataclasses.asdict(v) for k, v in outcomes.items()}))
    rows = [r for r in rows if r["id"] in outcomes]
    chosen = tuple(args.only.split(",")) if args.only else answer_folds.SIGNALS
    report(rows, outcomes, (chosen,) if args.only else SETS)
    print("\nfitted on all:", answer_folds.fit_all(rows, outcomes, chosen).constants())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

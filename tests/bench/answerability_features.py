#!/usr/bin/env python3
"""Dump the raw evidence of every eval question on the real ask path, for calibrate_answerability_grouped.py.

For each question of the given files (dev files and the paraphrase set): the hits an answer is drawn from
(``AnswerService.retrieve``, cosine floor included: cosine, fused score, note, matched share) and, per question term
(framing words removed as :class:`~cairn.answers.answerability.Answerability` removes them): its document frequency
in the caller's keyword index, whether a hit holds it, and its WordPiece count. Everything the rule and its candidate
signals are computed from, so signals can be tried without retrieving again.

Usage: answerability_features.py OUT.json [--dev FILE ...] [--vaults DIR] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import eval_cv  # noqa: E402

from cairn.answers.answerability import Answerability, _singular, capitalised_runs  # noqa: E402
from cairn.answers.service import AnswerService  # noqa: E402
from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.embedder import Embedder  # noqa: E402
from cairn.search import Query  # noqa: E402

PARAPHRASES = Path(__file__).resolve().parent / "paraphrases.jsonl"


def extract(answers: AnswerService, row: dict) -> dict:
    search, question = answers.search, row["question"]
    hits = answers.retrieve(question)
    view = search.view()
    n_rows = view.rows()
    hit_ids = np.asarray([h.chunk_id for h in hits], dtype=np.int64)
    terms = []
    for term in Query.parse(question).terms:
        if term in Answerability.FRAMING:
            continue
        ids = np.asarray(view.keyword.term_matches(term)[0], dtype=np.int64)
        if not len(ids) and (singular := _singular(term)):
            ids = np.asarray(view.keyword.term_matches(singular)[0], dtype=np.int64)
        terms.append(
            {
                "term": term,
                "df": len(ids),
                "in_hits": bool(len(ids) and np.isin(ids, hit_ids).any()),
                "pieces": search.embedder.count_tokens(term),
                "hits": [i for i, h in enumerate(hit_ids) if h in set(ids.tolist())],
            }
        )
    snap = search.vectors.for_query()
    rows = np.searchsorted(snap.chunk_ids, hit_ids) if len(hit_ids) else np.zeros(0, dtype=np.int64)
    vecs = search.vector_cache.embed([t["term"] for t in terms]) if terms else []
    for t, vec in zip(terms, vecs):
        chunk_cos, sentence_cos = snap.scores(np.asarray(vec, dtype=np.float32))
        best = np.maximum(chunk_cos, sentence_cos)
        t["sim"] = float(best[rows].max()) if len(rows) else 0.0
        t["sim_vault"] = float(best.max())
    spans = []
    for span in capitalised_runs(question):
        ids = np.asarray(view.keyword.phrase_matches(span)[0], dtype=np.int64)
        spans.append(
            {"span": span, "df": len(ids), "hits": [i for i, h in enumerate(hit_ids) if h in set(ids.tolist())]}
        )
    ev = answers.answerability.evidence(question, hits, view)
    return {
        "id": row["id"],
        "vault": row["vault"],
        "kind": row["kind"],
        "question": question,
        "relevant": row["relevant"],
        "n_rows": n_rows,
        "idf_max": math.log((n_rows + 0.5) / 0.5) if n_rows else 0.0,
        "terms": terms,
        "spans": spans,
        "hits": [{"cos": h.cosine, "score": h.score, "path": h.file_path, "matched": h.matched} for h in hits],
        "shipped": answers.answerability.answers(ev) if hits else False,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--dev", type=Path, action="append")
    ap.add_argument("--vaults", type=Path, default=eval_cv.shared_dir() / "vaults")
    ap.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache")
    args = ap.parse_args()
    rows = eval_cv.load_questions(args.dev or [*eval_cv.DEV_FILES, PARAPHRASES])
    embedder = Embedder()
    out = []
    for vault in sorted({r["vault"] for r in rows}):
        config = load_config({"vault": str(args.vaults / vault), "data_dir": str(args.data_dir)}, env={})
        cairn = Cairn(config, embedder=embedder, readonly=True)
        answers = AnswerService(cairn.query)
        out += [extract(answers, r) for r in rows if r["vault"] == vault]
        cairn.close()
    args.out.write_text(json.dumps(out, indent=0))
    print(f"{len(out)} questions -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

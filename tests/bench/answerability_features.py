#!/usr/bin/env python3
"""Dump the raw evidence of every eval question on the real ask path, for calibrate_answerability_grouped.py.

For each question of the given files (dev files, the paraphrase set and the near-miss set): the hits an answer is
drawn from (``AnswerService.retrieve``, cosine floor included: cosine, chunk and best-sentence cosine, fused score,
note, matched share) and, per question term (framing words removed as
:class:`~cairn.answers.answerability.Answerability` removes them): its document frequency in the caller's keyword
index, which hits hold it and in which of their sentences, its WordPiece count, and, when the first hit lacks it, the
word of the first hit nearest to it (term embeddings). Per pair of consecutive terms: the chunks holding both within
3 tokens. Per question: the best cosine over the whole vault. Each vault also gets the everyday questions of
``off_topic.txt`` (kind ``background``: the vault-adaptive reference). Everything the rule and its candidate signals
are computed from, so signals can be tried without retrieving again.

Usage: answerability_features.py OUT.json [--dev FILE ...] [--vaults DIR] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import apsw
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import eval_cv  # noqa: E402

from cairn.answers.answerability import Answerability, _singular, capitalised_runs  # noqa: E402
from cairn.answers.service import AnswerService  # noqa: E402
from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.contract import AskRequest  # noqa: E402
from cairn.embedder import Embedder  # noqa: E402
from cairn.prompt import candidate_sentences  # noqa: E402
from cairn.search import Query  # noqa: E402

PARAPHRASES = Path(__file__).resolve().parent / "paraphrases.jsonl"
#: Off-corpus near misses written after the paraphrase set (questions on a vault's topic that no note answers).
NEAR_MISSES = Path(__file__).resolve().parent / "near_misses.jsonl"
#: Everyday questions no eval vault answers (the vault-adaptive reference): dumped with kind "background".
BACKGROUND = Path(__file__).resolve().parent / "off_topic.txt"
_WORDS = re.compile(r"[a-z][a-z'-]{2,}")


def _sentence_matches(hits: list, terms: list[str]) -> dict[str, list[list[int]]]:
    """Per term, per hit: the indices of the hit's sentences holding the term as the keyword index matches it (an
    in-memory FTS5 table with the index's tokenizer)."""
    db = apsw.Connection(":memory:")
    db.execute("CREATE VIRTUAL TABLE s USING fts5(t, tokenize='porter unicode61 remove_diacritics 2')")
    for i, h in enumerate(hits):
        sents = candidate_sentences(h.text, min_words=1) or [h.text]
        db.executemany("INSERT INTO s(rowid, t) VALUES (?, ?)", [(i * 10000 + j, x) for j, x in enumerate(sents)])
    out: dict[str, list[list[int]]] = {}
    for term in terms:
        per: list[list[int]] = [[] for _ in hits]
        try:
            rows = db.execute("SELECT rowid FROM s WHERE s MATCH ?", ('"' + term.replace('"', "") + '"',)).fetchall()
        except apsw.SQLError:
            rows = []
        for (rid,) in rows:
            per[rid // 10000].append(rid % 10000)
        out[term] = per
    db.close()
    return out


def _pairs(fts, hit_ids: np.ndarray, terms: list[dict]) -> list[dict]:
    """Each pair of consecutive question terms the vault holds: the chunks of the index holding both within 3 tokens
    (FTS5 NEAR, either order): how many, and which hits."""
    out = []
    known = [t for t in terms if t["df"]]
    hit_pos = {int(h): i for i, h in enumerate(hit_ids)}
    for a, b in zip(known, known[1:]):
        query = 'NEAR("{}" "{}", 3)'.format(a["term"].replace('"', ""), b["term"].replace('"', ""))
        try:
            ids = [r[0] for r in fts.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?", (query,))]
        except Exception:  # noqa: BLE001 - a term FTS5 cannot parse: no pair evidence
            ids = []
        out.append(
            {
                "pair": [a["term"], b["term"]],
                "idf_terms": [a["df"], b["df"]],
                "df": len(ids),
                "hits": sorted({hit_pos[i] for i in ids if i in hit_pos}),
            }
        )
    return out


def _substitutes(search, hits: list, terms: list[dict], question: str) -> None:
    """For each term of df > 0 the first hit lacks: its best embedding similarity to a word of the first hit that
    the question does not hold (a near neighbour standing in for it: "import" for "export")."""
    if not hits:
        return
    qwords = set(_WORDS.findall(question.lower()))
    words = sorted({w for w in _WORDS.findall(hits[0].text.lower()) if w not in qwords})[:150]
    missing = [t for t in terms if t["df"] and 0 not in t["hits"]]
    if not words or not missing:
        return
    wv = np.asarray(search.vector_cache.embed(words), dtype=np.float32)
    tv = np.asarray(search.vector_cache.embed([t["term"] for t in missing]), dtype=np.float32)
    sims = tv @ wv.T
    for t, row in zip(missing, sims):
        j = int(row.argmax())
        t["sub_sim"], t["sub_word"] = float(row[j]), words[j]


def extract(answers: AnswerService, row: dict, fts=None) -> dict:
    search, question = answers.search, row["question"]
    hits = answers.retrieve(AskRequest.parse({"question": question}))
    view = search.views.of(None)
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
    qvec = np.asarray(search.vector_cache.embed([question])[0], dtype=np.float32)
    chunk_all, sent_all = snap.scores(qvec)
    raw_top = float(np.maximum(chunk_all, sent_all).max()) if len(chunk_all) else 0.0
    in_sent = _sentence_matches(hits, [t["term"] for t in terms])
    for t in terms:
        t["sents"] = in_sent.get(t["term"], [])
    _substitutes(search, hits, terms, question)
    pairs = _pairs(fts, hit_ids, terms) if fts is not None else []
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
        "raw_top": raw_top,
        "pairs": pairs,
        "hits": [
            {
                "cos": h.cosine,
                "score": h.score,
                "path": h.file_path,
                "matched": h.matched,
                "chunk_cos": float(chunk_all[r]),
                "sent_cos": float(sent_all[r]),
                "n_sents": len(candidate_sentences(h.text, min_words=1) or [h.text]),
            }
            for h, r in zip(hits, rows)
        ],
        "shipped": answers.answerability.answers(ev) if hits else False,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--dev", type=Path, action="append")
    ap.add_argument("--vaults", type=Path, default=eval_cv.shared_dir() / "vaults")
    ap.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache")
    args = ap.parse_args()
    rows = eval_cv.load_questions(args.dev or [*eval_cv.DEV_FILES, PARAPHRASES, NEAR_MISSES])
    background = [line.strip() for line in BACKGROUND.read_text().splitlines() if line.strip()]
    for vault in sorted({r["vault"] for r in rows}):
        rows += [
            {"id": f"BG{i:02d}-{vault}", "vault": vault, "kind": "background", "question": q, "relevant": []}
            for i, q in enumerate(background)
        ]
    embedder = Embedder()
    out = []
    for vault in sorted({r["vault"] for r in rows}):
        config = load_config({"vault": str(args.vaults / vault), "data_dir": str(args.data_dir)}, env={})
        cairn = Cairn(config, embedder=embedder, readonly=True)
        answers = AnswerService(cairn.query)
        index = next((args.data_dir / "indexes").glob(f"{vault}-*.sqlite3"))
        fts = apsw.Connection(str(index), flags=apsw.SQLITE_OPEN_READONLY)
        out += [extract(answers, r, fts) for r in rows if r["vault"] == vault]
        fts.close()
        cairn.close()
    args.out.write_text(json.dumps(out, indent=0))
    print(f"{len(out)} questions -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Experiment: the lexical signals of a note (incoming-link text, title/alias fields) and FTS5 column weights.

Over the in-corpus questions of both dev files, on a COPY of the eval indexes (``--data-dir``), each vault:

- ``baseline``: the search service's hybrid note ranking (``retrieve(..., per_note=1)``, top 50 notes, search
  purpose);
- note-level lists fused by RRF as one more list inside the service (its ``_fuse`` wrapped: ``w / (60 + rank)``
  added to the fused score of the listed note's best fused chunk, so the service's own ordering follows): an
  in-memory FTS5 over each note's title, aliases, incoming-link display text (``[[Target|display]]``, or the
  target's name) and the sentence around each incoming link in its source note, ranked by ``bm25()`` with column
  weights (``title+aliases``; ``anchors``: display + sentence; ``display``; ``all``), or one row per incoming
  link, a note ranked by its best link (``best link``: the form that could leave out a caller's withheld sources
  exactly);
- ``anchor column``: the chunk BM25 list over an in-memory copy of the chunks with the note's incoming-link text as
  a fourth column (on the note's first chunk or all its chunks): the web-search form; it cannot leave out the
  contexts of one caller's withheld sources, and it changes ``chunks_fts`` and the in-memory BM25;
- ``column weights``: the chunk BM25 list by ``bm25(chunks_fts, 1, w_symbol, w_title)`` instead of weights 1;
- ``both``: column weights with a note-level list.

Each family's setting is chosen with :mod:`eval_cv` (stratified k-fold, the baseline first in every grid) by
mean(Hit@5 + MRR@10) on the training folds; printed: the held-out figures per vault and pooled, and the held-out
change against the baseline with a 95 % paired-bootstrap interval. The sentences around links are read from the
vault files (the stored line of each link, markup removed).

Usage: experiment_anchors.py --data-dir /work/eval-cache-anchors [--vaults DIR] [--folds 5] [--seed 17]
       [--cache FILE.pkl]   (the rankings collected, reused by later runs: only the CV is redone)
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import defaultdict
from pathlib import Path

import apsw

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import eval_cv  # noqa: E402

from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.search.cache import EpochLRU  # noqa: E402
from cairn.search.query import fts_match_expression  # noqa: E402
from cairn.store.schema import FTS_TOKENIZER  # noqa: E402

WIKI = re.compile(r"!?\[\[([^\[\]\n]+?)\]\]")
MD = re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)")
SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\[\"'(])")


def _plain(line: str) -> str:
    def wiki(m: re.Match) -> str:
        ref, _, shown = m.group(1).partition("|")
        return shown or ref.split("#")[0].rsplit("/", 1)[-1]

    line = WIKI.sub(wiki, line)
    line = MD.sub(lambda m: m.group(1), line)
    return re.sub(r"^\s*(?:[-*+]|\d+[.)]|#+|>)\s*", "", line).strip()


def context_of(line: str, shown: str, max_words: int = 40) -> str:
    """The sentence of ``line`` (a source note's line, markup removed) holding the link's shown text."""
    plain = _plain(line)
    sentences = SENT.split(plain) or [plain]
    pick = next((s for s in sentences if shown and shown.casefold() in s.casefold()), sentences[0])
    words = pick.split()
    return " ".join(words[:max_words])


def note_fields(cairn: Cairn, vault: Path) -> tuple[dict[int, tuple[str, str, str, str]], list[tuple[int, str, str]]]:
    """{note id: (title, aliases, incoming display texts, incoming context sentences)}, and every incoming link as
    (target note id, display text, context sentence)."""
    conn = cairn.store.conn
    notes = {
        nid: (path, title, " ".join(json.loads(al or "[]")))
        for nid, path, title, al in conn.execute("SELECT id, path, title, aliases FROM notes WHERE status='ok'")
    }
    by_path = {p: nid for nid, (p, _, _) in notes.items()}
    display: dict[int, list[str]] = defaultdict(list)
    context: dict[int, list[str]] = defaultdict(list)
    lines_cache: dict[str, list[str]] = {}
    per_link: list[tuple[int, str, str]] = []
    for src, raw, target, alias, line in conn.execute(
        "SELECT n.path, l.raw_target, l.target_path, l.alias, l.line FROM links l JOIN notes n ON n.id=l.note_id "
        "WHERE l.target_path IS NOT NULL AND l.target_path != n.path"
    ):
        tid = by_path.get(target)
        if tid is None:
            continue
        shown = alias or (raw or "").rsplit("/", 1)[-1].removesuffix(".md")
        display[tid].append(shown)
        if src not in lines_cache:
            try:
                lines_cache[src] = (vault / src).read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                lines_cache[src] = []
        lines = lines_cache[src]
        if 0 < line <= len(lines):
            context[tid].append(context_of(lines[line - 1], shown))
            per_link.append((tid, shown, context[tid][-1]))
    return {
        nid: (title, aliases, " ; ".join(display.get(nid, [])), " ; ".join(context.get(nid, [])))
        for nid, (_, title, aliases) in notes.items()
    }, list(dict.fromkeys(per_link))


class NoteList:
    """In-memory FTS5 over the note fields; ranking by bm25 with column weights."""

    def __init__(self, fields: dict[int, tuple[str, str, str, str]], links: list[tuple[int, str, str]]) -> None:
        self.conn = apsw.Connection(":memory:")
        self.conn.execute(f"CREATE VIRTUAL TABLE lf USING fts5(display, context, tokenize='{' '.join(FTS_TOKENIZER)}')")
        self.link_target = {i: t for i, (t, _, _) in enumerate(links)}
        with self.conn:
            self.conn.executemany(
                "INSERT INTO lf(rowid, display, context) VALUES (?,?,?)",
                [(i, d, c) for i, (_, d, c) in enumerate(links)],
            )
        self.conn.execute(
            "CREATE VIRTUAL TABLE nf USING fts5(title, aliases, display, context, "
            f"tokenize='{' '.join(FTS_TOKENIZER)}')"
        )
        with self.conn:
            self.conn.executemany(
                "INSERT INTO nf(rowid, title, aliases, display, context) VALUES (?,?,?,?,?)",
                [(nid, *f) for nid, f in fields.items()],
            )

    def rank_links(self, query: str, weights: tuple[float, float], limit: int) -> list[int]:
        """Targets ordered by their best incoming-link row (display, context)."""
        expr = fts_match_expression(query)
        if expr is None:
            return []
        rows = self.conn.execute(
            "SELECT rowid, bm25(lf, ?, ?) AS s FROM lf WHERE lf MATCH ? ORDER BY s LIMIT 2000", (*weights, expr)
        ).fetchall()
        out = list(dict.fromkeys(self.link_target[r] for r, s in rows if s < 0))
        return out[:limit]

    def rank(self, query: str, weights: tuple[float, float, float, float], limit: int) -> list[int]:
        expr = fts_match_expression(query)
        if expr is None:
            return []
        rows = self.conn.execute(
            "SELECT rowid, bm25(nf, ?, ?, ?, ?) AS s FROM nf WHERE nf MATCH ? ORDER BY s LIMIT ?",
            (*weights, expr, limit * 4),
        ).fetchall()
        return [nid for nid, s in rows if s < 0][:limit]


def weighted_keyword(store, ws: float, wt: float):
    """A stand-in for KeywordIndex.ranking: FTS5's bm25 with column weights (text 1, symbol ws, title wt)."""

    def ranking(query, limit, *, within=None, excluding=()):
        expr = fts_match_expression(query)
        if expr is None:
            return []
        rows = store.conn.execute(
            "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY bm25(chunks_fts, 1.0, ?, ?), rowid LIMIT ?",
            (expr, ws, wt, limit + len(excluding)),
        ).fetchall()
        skip = set(excluding)
        ids = [r[0] for r in rows if r[0] not in skip]
        if within is not None:
            keep = set(within)
            ids = [c for c in ids if c in keep]
        return ids[:limit]

    return ranking


def anchored_keyword(chunks: list[tuple[int, int, str, str, str]], fields, placement: str, weights):
    """A stand-in for KeywordIndex.ranking over an in-memory FTS5 of the chunks with a fourth column: the note's
    incoming-link text (display + context), on the note's first chunk or on all its chunks."""
    conn = apsw.Connection(":memory:")
    conn.execute(
        f"CREATE VIRTUAL TABLE cf USING fts5(text, symbol, title, anchors, tokenize='{' '.join(FTS_TOKENIZER)}')"
    )
    with conn:
        conn.executemany(
            "INSERT INTO cf(rowid, text, symbol, title, anchors) VALUES (?,?,?,?,?)",
            [
                (
                    cid,
                    text,
                    symbol,
                    title,
                    (fields[nid][2] + " ; " + fields[nid][3])
                    if nid in fields and (placement == "all" or ordinal == 0)
                    else "",
                )
                for cid, nid, ordinal, text, symbol, title in chunks
            ],
        )

    def ranking(query, limit, *, within=None, excluding=()):
        expr = fts_match_expression(query)
        if expr is None:
            return []
        rows = conn.execute(
            "SELECT rowid FROM cf WHERE cf MATCH ? ORDER BY bm25(cf, 1.0, ?, ?, ?), rowid LIMIT ?",
            (expr, *weights, limit + len(excluding)),
        ).fetchall()
        skip = set(excluding)
        ids = [r[0] for r in rows if r[0] not in skip]
        if within is not None:
            keep = set(within)
            ids = [c for c in ids if c in keep]
        return ids[:limit]

    return ranking


ANCHOR_COLUMN_GRID = [(pl, (1.0, 1.0, wa)) for pl in ("first", "all") for wa in (0.5, 1.0, 2.0)]
COLUMN_GRID = [(1.0, 1.0), (2.0, 1.0), (1.0, 2.0), (2.0, 2.0), (4.0, 4.0), (1.0, 4.0), (4.0, 1.0)]
FIELD_SETS = {
    "title+aliases": (1.0, 1.0, 0.0, 0.0),
    "anchors": (0.0, 0.0, 1.0, 1.0),
    "display": (0.0, 0.0, 1.0, 0.0),
    "all": (1.0, 1.0, 1.0, 1.0),
}
LINK_SETS = {"links max": (1.0, 1.0)}
NOTE_W = [0.02, 0.05, 0.1, 0.2]
BASE = (1.0, 1.0)
#: (keyword-leg setting, note list or None, its RRF weight): every run of the service the experiment makes.
RUNS = [
    *((c, None, 0.0) for c in COLUMN_GRID),
    *((c, None, 0.0) for c in ANCHOR_COLUMN_GRID),
    *((BASE, f, w) for f in [*FIELD_SETS, *LINK_SETS] for w in NOTE_W),
    *((c, f, w) for c in COLUMN_GRID[1:4] for f in ("anchors", "all") for w in (0.05, 0.1)),
]


def _with_note_list(q, lists: dict[str, list[int]], weight: float):
    """The service's ``_fuse`` with the note list fused as one more RRF list: ``weight / (60 + rank)`` added to the
    fused score of each listed note's best fused chunk (so the service's own ordering, tiers included, follows)."""
    fuse = type(q)._fuse

    def fused_with_notes(r, candidates, rows, sims, preference):
        fused = fuse(q, r, candidates, rows, sims, preference)
        best: dict[int, int] = {}
        for c, score in fused.items():
            nid = rows[c].note_id
            if nid not in best or score > fused[best[nid]]:
                best[nid] = c
        for rank, nid in enumerate(lists.get(r.query, ()), 1):
            if nid in best:
                fused[best[nid]] += weight / (60 + rank)
        return fused

    return fused_with_notes


def _run(cairn: Cairn, vrows: list[dict], per_q: dict[str, dict], key, ranking, lists) -> None:
    """Each question's hybrid note ranking (paths, the service's order) with ``ranking`` as the keyword leg and
    the note list ``lists`` (query → note ids) fused with weight ``key[2]``, under ``key``."""
    q = cairn.query
    q.keyword.ranking = ranking
    q._fuse = _with_note_list(q, lists, key[2]) if key[1] else type(q)._fuse.__get__(q)
    q.results = EpochLRU(q.RESULT_CACHE_MAX)
    for r in vrows:
        hits, _ = q.retrieve(r["question"], top_k=50, mode="hybrid", per_note=1)
        per_q[r["id"]]["base"][key] = [h.file_path for h in hits]


def _collect_vault(args, vault: str, vrows: list[dict]) -> list[dict]:
    config = load_config({"vault": str(args.vaults / vault), "data_dir": str(args.data_dir)}, env={})
    cairn = Cairn(config)
    cairn.indexing.index()
    fields, links = note_fields(cairn, args.vaults / vault)
    nl = NoteList(fields, links)
    keep = cairn.query.keyword.ranking
    chunks = cairn.store.conn.execute(
        "SELECT c.id, c.note_id, c.ordinal, c.text, c.symbol, n.title FROM chunks c JOIN notes n ON n.id=c.note_id"
    ).fetchall()
    lists: dict[str, dict[str, list[int]]] = {
        **{f: {r["question"]: nl.rank(r["question"], w, 30) for r in vrows} for f, w in FIELD_SETS.items()},
        **{f: {r["question"]: nl.rank_links(r["question"], w, 30) for r in vrows} for f, w in LINK_SETS.items()},
    }
    per_q: dict[str, dict] = {r["id"]: {"row": r, "base": {}} for r in vrows}
    for key in RUNS:
        col = key[0]
        if col == BASE:
            ranking = keep
        elif isinstance(col[0], str):
            ranking = anchored_keyword(chunks, fields, col[0], col[1])
        else:
            ranking = weighted_keyword(cairn.store, *col)
        _run(cairn, vrows, per_q, key, ranking, lists.get(key[1] or "", {}))
    cairn.query.keyword.ranking = keep
    print(
        f"# {vault}: {len(vrows)} questions, {sum(bool(f[2]) for f in fields.values())} notes with incoming links",
        file=sys.stderr,
    )
    cairn.close()
    return list(per_q.values())


def collect(args) -> list[dict]:
    """Per question: the service's hybrid note ranking for every run of :data:`RUNS`."""
    by_vault = defaultdict(list)
    for r in eval_cv.load_questions():
        if r["relevant"]:
            by_vault[r["vault"]].append(r)
    return [item for vault, vrows in sorted(by_vault.items()) for item in _collect_vault(args, vault, vrows)]


def ranked(item: dict, col, field, w: float) -> list[str]:
    return item["base"][(col, field, w)]


def metrics(item: dict, order: list[str]) -> tuple[float, float]:
    rel = set(item["row"]["relevant"])
    hit = 1.0 if rel & set(order[:5]) else 0.0
    mrr = next((1.0 / i for i, p in enumerate(order[:10], 1) if p in rel), 0.0)
    return hit, mrr


def _family(note_lists, cols=(BASE,)) -> list[tuple]:
    return [k for k in RUNS if k[0] in cols and (k[1] in note_lists)]


FAMILIES = {
    "baseline": [(BASE, None, 0.0)],
    "+note list (title+aliases)": _family({"title+aliases"}),
    "+anchor list (display+ctx)": _family({"anchors", "display"}),
    "+anchor list (best link)": _family({"links max"}),
    "+note list (all fields)": _family({"all"}),
    "+anchor column (chunk BM25)": _family({None}, tuple(ANCHOR_COLUMN_GRID)),
    "+column weights": _family({None}, tuple(COLUMN_GRID)),
    "both (weights + note list)": _family({"anchors", "all"}, tuple(COLUMN_GRID)),
}


def _bootstrap(deltas: list[float], n: int = 2000, seed: int = 17) -> tuple[float, float]:
    """95 % paired-bootstrap interval of the mean of ``deltas``."""
    rng = random.Random(seed)
    means = sorted(sum(rng.choice(deltas) for _ in deltas) / len(deltas) for _ in range(n))
    return means[int(0.025 * n)], means[int(0.975 * n) - 1]


def cv(items: list[dict], folds: int, seed: int = eval_cv.DEFAULT_SEED) -> None:
    """Per family: eval_cv's stratified k-fold choice on the training folds (score: mean of Hit@5 + MRR@10), the
    held-out figures per vault and pooled, and the held-out change against the baseline with a 95 % interval."""
    by_id = {it["row"]["id"]: it for it in items}
    questions = [it["row"] for it in items]
    split = eval_cv.stratified_folds(questions, folds, seed)

    def per_question(cfg, q):
        hit, mrr = metrics(by_id[q["id"]], ranked(by_id[q["id"]], *cfg))
        return hit + mrr

    base_cfg = FAMILIES["baseline"][0]
    base = {q["id"]: metrics(by_id[q["id"]], ranked(by_id[q["id"]], *base_cfg)) for q in questions}
    vaults = sorted({q["vault"] for q in questions})
    print(f"{'family':<30} {'vault':<15} {'Hit@5':>6} {'MRR@10':>7} {'dHit@5 (95% CI)':>24} {'dMRR@10 (95% CI)':>24}")
    for fam, configs in FAMILIES.items():
        grid = configs if fam == "baseline" else [base_cfg, *configs]
        result = eval_cv.cross_validate(questions, grid, eval_cv.mean_over(per_question), k=folds, seed=seed)
        held = {}
        for fold, test in zip(result.folds, split):
            for q in test:
                held[q["id"]] = metrics(by_id[q["id"]], ranked(by_id[q["id"]], *fold.chosen))
        for vault in [*vaults, "pooled"]:
            ids = [q["id"] for q in questions if vault in ("pooled", q["vault"])]
            h = sum(held[i][0] for i in ids) / len(ids)
            m = sum(held[i][1] for i in ids) / len(ids)
            dh = [held[i][0] - base[i][0] for i in ids]
            dm = [held[i][1] - base[i][1] for i in ids]
            lo_h, hi_h = _bootstrap(dh)
            lo_m, hi_m = _bootstrap(dm)
            print(
                f"{fam:<30} {vault:<15} {h:>6.3f} {m:>7.3f} "
                f"{sum(dh) / len(dh):>+7.3f} [{lo_h:+.3f}, {hi_h:+.3f}] "
                f"{sum(dm) / len(dm):>+7.3f} [{lo_m:+.3f}, {hi_m:+.3f}]"
            )
        print(f"{'':<30} chosen: {sorted({str(f.chosen) for f in result.folds})}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--vaults", type=Path, default=eval_cv.shared_dir() / "vaults")
    ap.add_argument("--folds", type=int, default=eval_cv.DEFAULT_K)
    ap.add_argument("--seed", type=int, default=eval_cv.DEFAULT_SEED)
    ap.add_argument("--cache", type=Path, help="pickle of the collected rankings (read if present, else written)")
    args = ap.parse_args()
    import pickle  # noqa: PLC0415

    if args.cache and args.cache.exists():
        items = pickle.loads(args.cache.read_bytes())
    else:
        items = collect(args)
        if args.cache:
            args.cache.write_bytes(pickle.dumps(items))
    cv(items, args.folds, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

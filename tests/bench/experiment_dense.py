#!/usr/bin/env python3
"""The vector signals and the fusion, measured under k-fold cross-validation.

Reads the eval indexes read-only (``--data-dir``/indexes/*.sqlite3) and the whole-chunk vectors precomputed for
them (``--naive``/<index stem>.npz: one vector per chunk of ``f"{title}\\n{symbol}\\n{text}"``), embeds the dev
questions of both dev files, and scores every question against every chunk in float32 under each configuration:

- the chunk vector: ``normalise(a · whole + b · mean(sentence vectors) + tau · title)`` (a = 0, b = 1, tau = 0.5
  is today's recipe), or the max of the whole-chunk and today's cosines;
- the sentence-max score: dense chunk score ``max(chunk, w · best sentence)`` (w = 0: none);
- the note-level aggregation: a chunk's score plus ``lam`` × the best other chunk of its note (top-2), or plus
  ``delta`` × the cosine of its note's title vector;
- the fusion of the BM25 and dense top-60 chunk lists: weighted RRF (BM25 weight, k) or a min-max normalised
  score fusion (BM25 share alpha).

Rankings are of notes (a note's best chunk, as the eval's per_note=1), top 10; the cosine floor is not applied
(it is checked with ``eval_retrieval.py`` on the implementation). Every choice is made by k-fold CV over the
union of the dev files' answerable questions (folds stratified by vault, repeated with several seeds): the
configuration with the best mean (Hit@5 + MRR@10) / 2 on the training folds is scored on the held-out fold.
Printed: a table of signal families (each CV-selected within its own space), held-out figures per vault.

Usage: experiment_dense.py [--data-dir /work/eval-cache] [--naive /work/eval-cache/naive] [--folds 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))

sys.path.insert(0, str(REPO / "tests" / "bench"))

from eval_cv import DEFAULT_SEED, load_questions, stratified_folds  # noqa: E402

from cairn.embedder import Embedder  # noqa: E402
from cairn.embedding import title_hash  # noqa: E402
from cairn.search.query import query_terms  # noqa: E402
from cairn.search.service import SearchService  # noqa: E402
from cairn.store import Store  # noqa: E402

CANDIDATES = 60


@dataclass
class VaultData:
    """Per-chunk arrays of one eval index (rows ascending by chunk id)."""

    ids: np.ndarray  # (n,) chunk ids
    note: np.ndarray  # (n,) note index
    paths: list[str]  # note index -> vault-relative path
    whole: np.ndarray  # (n, 384) whole-chunk vectors
    mean: np.ndarray  # (n, 384) mean of the chunk's sentence vectors (not normalised)
    title: np.ndarray  # (n, 384) the note title's vector
    current: np.ndarray  # (n, 384) the stored chunk vector
    sent_owner: np.ndarray  # (m,) chunk row of each sentence vector, sorted
    sents: np.ndarray  # (m, 384)
    service: SearchService


def load_vault(db: Path, naive: Path, embedder: Embedder) -> VaultData:
    store = Store(db, readonly=True)
    m = store._load_vector_matrices()
    ids = m.chunk_ids
    order = np.argsort(ids)
    ids, current = ids[order], m.chunk_vectors[order]
    row_of = {int(c): i for i, c in enumerate(ids)}
    owner = np.asarray([row_of[int(c)] for c in m.sentence_owners], dtype=np.int64)
    so = np.argsort(owner, kind="stable")
    owner, sents = owner[so], m.sentence_vectors[so]
    mean = np.zeros_like(current)
    np.add.at(mean, owner, sents)
    counts = np.bincount(owner, minlength=len(ids)).astype(np.float32)
    mean /= np.maximum(counts, 1)[:, None]
    rows = {
        cid: (path, title)
        for cid, path, title in store.conn.execute(
            "SELECT c.id, n.path, n.title FROM chunks c JOIN notes n ON n.id = c.note_id"
        )
    }
    paths = sorted({rows[int(c)][0] for c in ids})
    note_ix = {p: i for i, p in enumerate(paths)}
    note = np.asarray([note_ix[rows[int(c)][0]] for c in ids], dtype=np.int64)
    titles = {rows[int(c)][1] for c in ids}
    tv = store.cached_vectors([title_hash(t) for t in titles], embedder.model_id)
    title = np.stack([tv[title_hash(rows[int(c)][1])] for c in ids]).astype(np.float32)
    z = np.load(naive / (db.stem + ".npz"))
    by_key = dict(zip(z["keys"].tolist(), range(len(z["keys"]))))
    key_of = dict(zip(z["chunk_ids"].tolist(), z["chunk_keys"].tolist()))
    whole = z["vecs"][[by_key[key_of[int(c)]] for c in ids]]
    service = SearchService(store, embedder)
    return VaultData(ids, note, paths, whole, mean, title, current, owner, sents, service)


@dataclass
class QuestionData:
    """Per question: the dot products with every chunk's vectors, and the BM25 list."""

    qid: str
    vault: str
    kind: str
    relevant: set[str]
    dw: np.ndarray
    dm: np.ndarray
    dt: np.ndarray
    dc: np.ndarray
    smax: np.ndarray
    bm25_rows: np.ndarray  # chunk rows, best first (top CANDIDATES)
    bm25_scores: np.ndarray  # their BM25 (higher = better)


def bm25(service: SearchService, question: str) -> tuple[list[int], list[float]]:
    """Top CANDIDATES chunk ids by BM25 for the OR of the terms, with their scores (higher better)."""
    kw = service.keyword
    terms = query_terms(question)
    ids = service.keyword_ranking(question, CANDIDATES)
    if not ids:
        return [], []
    acc = defaultdict(float)
    for t in terms:
        tid, sc = kw._term_scores(t)
        for i, s in zip(tid.tolist(), sc.tolist()):
            acc[i] += s
    return ids, [-acc[i] for i in ids]


def question_data(v: VaultData, vault: str, rows: list[dict], embedder: Embedder) -> list[QuestionData]:
    qv = embedder.embed([r["question"] for r in rows])
    row_of = {int(c): i for i, c in enumerate(v.ids)}
    starts = np.flatnonzero(np.r_[True, v.sent_owner[1:] != v.sent_owner[:-1]])
    out = []
    for r, q in zip(rows, qv):
        sdot = v.sents @ q
        smax = np.full(len(v.ids), -1.0, np.float32)
        smax[v.sent_owner[starts]] = np.maximum.reduceat(sdot, starts)
        ids, scores = bm25(v.service, r["question"])
        out.append(
            QuestionData(
                r["id"],
                vault,
                r["kind"],
                set(r["relevant"]),
                v.whole @ q,
                v.mean @ q,
                v.title @ q,
                v.current @ q,
                smax,
                np.asarray([row_of[c] for c in ids if c in row_of], dtype=np.int64),
                np.asarray([s for c, s in zip(ids, scores) if c in row_of]),
            )
        )
    return out


@dataclass(frozen=True)
class Dense:
    """One dense configuration (module docstring)."""

    a: float = 0.0  # whole-chunk vector
    b: float = 1.0  # mean of sentence vectors
    tau: float = 0.5  # title vector
    vmax: bool = False  # max(cos whole, cos current) instead of the combined vector
    w: float = 0.9  # sentence-max weight (0: none)
    lam: float = 0.0  # top-2 note aggregation
    delta: float = 0.0  # note title cosine added
    wunit: bool = False  # the whole-chunk vector joins the sentence vectors (its cosine in the sentence max)

    def norms(self, v: VaultData) -> np.ndarray:
        vec = self.a * v.whole + self.b * v.mean + self.tau * v.title
        return np.linalg.norm(vec, axis=1)


def dense_scores(cfg: Dense, q: QuestionData, norm: np.ndarray, v: VaultData) -> np.ndarray:
    if cfg.vmax:
        base = np.maximum(q.dw, q.dc)
    else:
        base = (cfg.a * q.dw + cfg.b * q.dm + cfg.tau * q.dt) / np.maximum(norm, 1e-12)
    smax = np.maximum(q.smax, q.dw) if cfg.wunit else q.smax
    s = np.maximum(base, cfg.w * smax) if cfg.w > 0 else base
    if cfg.delta:
        s = s + cfg.delta * q.dt
    if cfg.lam:
        top = np.argpartition(-s, min(400, len(s) - 1))[:400]
        top = top[np.argsort(-s[top], kind="stable")]
        best: dict[int, float] = {}
        second: dict[int, float] = {}
        for r in top.tolist():
            n = int(v.note[r])
            if n not in best:
                best[n] = float(s[r])
            elif n not in second:
                second[n] = float(s[r])
        s = s.copy()
        for r in top.tolist():
            n = int(v.note[r])
            other = second.get(n, 0.0) if s[r] >= best[n] else best[n]
            s[r] += cfg.lam * other
    return s


def top_rows(s: np.ndarray, k: int) -> np.ndarray:
    k = min(k, len(s))
    top = np.argpartition(-s, k - 1)[:k]
    return top[np.argsort(-s[top], kind="stable")]


def note_ranking(rows: list[int] | np.ndarray, v: VaultData, limit: int = 10) -> list[str]:
    out: list[str] = []
    seen: set[int] = set()
    for r in rows:
        n = int(v.note[r])
        if n not in seen:
            seen.add(n)
            out.append(v.paths[n])
            if len(out) >= limit:
                break
    return out


def metrics(ranked: list[str], rel: set[str]) -> tuple[float, float, float]:
    top5 = set(ranked[:5])
    rr = next((1.0 / i for i, p in enumerate(ranked[:10], 1) if p in rel), 0.0)
    return (1.0 if rel & top5 else 0.0), rr, len(rel & top5) / len(rel)


@dataclass(frozen=True)
class Fusion:
    kind: str = "rrf"  # "rrf" | "norm" | "dense" (dense only) | "bm25"
    wb: float = 0.3  # BM25 weight (rrf) or share (norm)
    k: int = 60


def fuse(f: Fusion, q: QuestionData, s: np.ndarray, dense_top: np.ndarray) -> list[int]:
    if f.kind == "dense":
        return dense_top.tolist()
    if f.kind == "bm25":
        return q.bm25_rows.tolist()
    scores: dict[int, float] = defaultdict(float)
    if f.kind == "rrf":
        for rank, r in enumerate(dense_top.tolist(), 1):
            scores[r] += 1.0 / (f.k + rank)
        for rank, r in enumerate(q.bm25_rows.tolist(), 1):
            scores[r] += f.wb / (f.k + rank)
    else:
        cand = np.unique(np.r_[dense_top, q.bm25_rows]).astype(np.int64)
        ds = s[cand]
        ds = (ds - ds.min()) / max(float(ds.max() - ds.min()), 1e-9)
        bs = np.zeros(len(cand))
        if len(q.bm25_rows):
            pos = {r: i for i, r in enumerate(cand.tolist())}
            b = q.bm25_scores / max(float(q.bm25_scores.max()), 1e-9)
            for r, x in zip(q.bm25_rows.tolist(), b.tolist()):
                bs[pos[r]] = x
        for r, x in zip(cand.tolist(), ((1 - f.wb) * ds + f.wb * bs).tolist()):
            scores[r] = x
    return sorted(scores, key=lambda r: (-scores[r], r))


def run_grid(
    dense_cfgs: list[Dense], fusions: list[Fusion], vaults: dict[str, VaultData], qs: list[QuestionData]
) -> dict[tuple[Dense, Fusion], np.ndarray]:
    """(config) -> (n_questions, 3) array of Hit@5, RR@10, Recall@5."""
    out: dict[tuple[Dense, Fusion], np.ndarray] = {}
    norms = {}
    for d in dense_cfgs:
        for name, v in vaults.items():
            norms[name] = d.norms(v)
        res = {f: np.zeros((len(qs), 3)) for f in fusions}
        for i, q in enumerate(qs):
            v = vaults[q.vault]
            s = dense_scores(d, q, norms[q.vault], v)
            dense_top = top_rows(s, CANDIDATES)
            for f in fusions:
                res[f][i] = metrics(note_ranking(fuse(f, q, s, dense_top), v), q.relevant)
        for f in fusions:
            out[(d, f)] = res[f]
    return out


def folds(qs: list[QuestionData], k: int, seed: int) -> np.ndarray:
    """Fold of each question: eval_cv.stratified_folds (by vault and kind) with seed ``DEFAULT_SEED + seed``."""
    pos = {q.qid: i for i, q in enumerate(qs)}
    fold = np.zeros(len(qs), dtype=np.int64)
    rows = [{"id": q.qid, "vault": q.vault, "kind": q.kind} for q in qs]
    for f, members in enumerate(stratified_folds(rows, k, DEFAULT_SEED + seed)):
        for m in members:
            fold[pos[m["id"]]] = f
    return fold


def cross_validate(
    results: dict, keys: list, qs: list[QuestionData], k: int, seeds: tuple[int, ...]
) -> tuple[np.ndarray, dict]:
    """Held-out (n_questions, 3) figures averaged over seeds, and how often each key was chosen."""
    held = np.zeros((len(qs), 3))
    chosen: dict = defaultdict(int)
    stack = np.stack([results[key] for key in keys])  # (configs, n, 3)
    objective = (stack[:, :, 0] + stack[:, :, 1]) / 2
    for seed in seeds:
        fold = folds(qs, k, seed)
        for f in range(k):
            train = fold != f
            best = int(np.argmax(objective[:, train].mean(axis=1)))
            chosen[keys[best]] += 1
            held[fold == f] += stack[best][fold == f]
    return held / len(seeds), chosen


def summary(held: np.ndarray, qs: list[QuestionData]) -> str:
    parts = []
    for vault in sorted({q.vault for q in qs}):
        ix = [i for i, q in enumerate(qs) if q.vault == vault]
        h, rr, rec = held[ix].mean(axis=0)
        parts.append(f"{vault.split('-')[-1]} H@5 {h:.3f} MRR {rr:.3f} R@5 {rec:.3f}")
    return " | ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=Path("/work/eval-cache"))
    ap.add_argument("--naive", type=Path, default=Path("/work/eval-cache/naive"))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--vault", action="append", help="only these vaults")
    args = ap.parse_args()
    rows = [r for r in load_questions() if r["relevant"]]
    embedder = Embedder()
    vaults: dict[str, VaultData] = {}
    qs: list[QuestionData] = []
    for db in sorted((args.data_dir / "indexes").glob("*.sqlite3")):
        vault = db.stem.rsplit("-", 1)[0]
        vrows = [r for r in rows if r["vault"] == vault]
        if not vrows or (args.vault and vault not in args.vault):
            continue
        vaults[vault] = load_vault(db, args.naive, embedder)
        qs.extend(question_data(vaults[vault], vault, vrows, embedder))
        print(f"# {vault}: {len(vaults[vault].ids)} chunks, {len(vrows)} questions", file=sys.stderr, flush=True)
    report(vaults, qs, args.folds, tuple(range(args.seeds)))
    return 0


def families() -> dict[str, list[Dense]]:
    """Named spaces of dense configurations; CV picks within each."""
    grid = list(itertools.product((0.0, 1.0), (0.0, 0.5, 1.0), (0.0, 0.25, 0.5)))
    vecs = [(a, b, t) for a, b, t in grid if a or b]
    ws = (0.0, 0.8, 0.9, 1.0)
    fam: dict[str, list[Dense]] = {
        "today's dense (w 0.9), fusion by CV": [Dense(w=0.9)],
        "current vector, no sentence-max": [Dense(w=0.0)],
        "current vector + sentence-max (today)": [Dense(w=w) for w in ws[1:]],
        "current vector, title weight by CV, + sentence-max": [
            Dense(b=1.0, tau=t, w=w) for t in (0.0, 0.25, 0.5, 1.0) for w in ws
        ],
        "whole-chunk vector alone": [Dense(a=1.0, b=0.0, tau=0.0, w=0.0)],
        "whole-chunk + title vector": [Dense(a=1.0, b=0.0, tau=t, w=0.0) for t in (0.0, 0.25, 0.5)],
        "whole-chunk + sentence-max": [Dense(a=1.0, b=0.0, tau=0.0, w=w) for w in ws],
        "max(whole, current) [+ sentence-max]": [Dense(vmax=True, w=w) for w in ws],
        "whole-chunk as one more sentence vector": [Dense(w=w, wunit=True) for w in ws[1:]],
        "whole as a sentence, title weight by CV": [
            Dense(tau=t, w=w, wunit=True) for t in (0.0, 0.25, 0.5, 1.0) for w in ws[1:]
        ],
        "combined vector a*whole+b*mean+tau*title [+ sentence-max]": [
            Dense(a=a, b=b, tau=t, w=w) for a, b, t in vecs for w in ws
        ],
    }
    best_like = [Dense(w=w, wunit=True) for w in ws[1:]] + [
        Dense(a=1.0, b=b, tau=0.0, w=w) for b in (0.0, 1.0) for w in ws
    ]
    fam["+ note top-2 (lam by CV)"] = [
        dataclasses.replace(d, lam=lam) for d in best_like for lam in (0.0, 0.1, 0.25, 0.5)
    ]
    fam["+ note title cosine (delta by CV)"] = [
        dataclasses.replace(d, delta=x) for d in best_like for x in (0.0, 0.05, 0.1, 0.2)
    ]
    return fam


def report(vaults: dict[str, VaultData], qs: list[QuestionData], k: int, seeds: tuple[int, ...]) -> None:
    fam = families()
    dense_cfgs = list(dict.fromkeys(d for ds in fam.values() for d in ds))
    rrf = [Fusion("rrf", wb, kk) for wb in (0.3, 0.5, 0.7, 1.0) for kk in (10, 30, 60)]
    norm = [Fusion("norm", wb) for wb in (0.2, 0.3, 0.4, 0.5)]
    fusions = [Fusion("dense"), Fusion("bm25"), *rrf, *norm]
    print(f"# {len(dense_cfgs)} dense configurations x {len(fusions)} fusions", file=sys.stderr, flush=True)
    results = run_grid(dense_cfgs, fusions, vaults, qs)
    print(f"held-out figures, {k}-fold CV x {len(seeds)} seeds, {len(qs)} answerable questions")
    b = cross_validate(results, [(dense_cfgs[0], Fusion("bm25"))], qs, k, seeds)[0]
    print(f"{'bm25 alone':<62} {summary(b, qs)}")
    for name, key in (
        ("today, fixed: dense", (Dense(w=0.9), Fusion("dense"))),
        ("today, fixed: hybrid RRF bm25 0.3, k 60", (Dense(w=0.9), Fusion("rrf", 0.3, 60))),
    ):
        print(f"{name:<62} {summary(results[key], qs)}")
    for name, ds in fam.items():
        for label, fs in (("dense", [Fusion("dense")]), ("hybrid", rrf + norm)):
            keys = [(d, f) for d in ds for f in fs]
            held, chosen = cross_validate(results, keys, qs, k, seeds)
            top = max(chosen, key=chosen.get)
            print(f"{name[:54]:<54} {label:<7} {summary(held, qs)}  [mode choice: {top}]")
    for label, fs in (("rrf k=60 only", [f for f in rrf if f.k == 60]), ("rrf", rrf), ("norm", norm)):
        keys = [(d, f) for d in dense_cfgs for f in fs]
        held, chosen = cross_validate(results, keys, qs, k, seeds)
        ranked = sorted(chosen.items(), key=lambda kv: -kv[1])[:3]
        print(f"{'all dense signals, fusion ' + label:<62} {summary(held, qs)}")
        for key, n in ranked:
            print(f"    chosen {n}x: {key}")


if __name__ == "__main__":
    raise SystemExit(main())

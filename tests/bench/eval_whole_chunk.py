#!/usr/bin/env python3
"""Why one vector per whole chunk once measured dense Recall@5 0.61 on obsidian-help while the naive pipeline's
dense list gets a far higher Hit@5: the same dense-only ranking of one vault's chunks, one factor changed at a
time, on the dev questions (``--file`` to restrict to one dev file, e.g. ``dev`` for the figure of that time).

Vectors compared (all over the index's chunks as they are now):

- ``naive``: one vector of ``title\\nheading path\\ntext`` per chunk (:mod:`eval_naive`, its cache);
- ``before``: what the index stored before sentence vectors: ``normalise(v(heading path\\ntext) + 0.5 · v(title))``
  (cached beside the naive vectors in ``DATA_DIR/naive/<index>.before.npz``; the first run embeds every chunk);
- ``cairn``: Cairn's dense leg now (``SearchService.retrieve(mode="dense")``: sentence vectors, floor).

Factors: the cosine floor 0.35 (on or off), the ranking unit (``notes``: each note at its best chunk, as
``make eval`` counts; ``chunks``: the top 5 chunks, several of one note taking several places), and the metric
(Hit@5 against Recall@5). Point values, no intervals: the rows differ in one factor on the same questions.

Usage: eval_whole_chunk.py DEV.jsonl [DEV2.jsonl] --vault obsidian-help [--file dev] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_cv import load_questions  # noqa: E402
from eval_metrics import hit_at, recall_at, reciprocal_rank  # noqa: E402
from eval_naive import WholeChunks  # noqa: E402

from cairn.app import Cairn  # noqa: E402
from cairn.config import COSINE_FLOOR, load_config  # noqa: E402
from cairn.embedder import Embedder  # noqa: E402
from cairn.embedding import TITLE_WEIGHT, chunk_embed_text, title_hash  # noqa: E402
from cairn.store import Store  # noqa: E402


def before_vectors(store: Store, cache: Path, embedder: Embedder, vault: str) -> WholeChunks:
    """The ``before`` vectors: each chunk's heading path + text embedded whole, plus TITLE_WEIGHT × its title's."""
    body = WholeChunks.load(store, cache, embedder, f"{vault} (before)", lambda _t, s, x: chunk_embed_text(s, x))
    titles = dict(store.conn.execute("SELECT c.id, n.title FROM chunks c JOIN notes n ON n.id = c.note_id"))
    wanted = {title_hash(t): t for t in set(titles.values())}
    found = store.cached_vectors(wanted, embedder.model_id)
    missing = [h for h in wanted if h not in found]
    if missing:
        found.update(zip(missing, embedder.embed([wanted[h] for h in missing])))
    tvec = np.stack([found[title_hash(titles[int(c)])] for c in body.ids])
    mixed = body.matrix + TITLE_WEIGHT * tvec
    mixed /= np.maximum(np.linalg.norm(mixed, axis=1, keepdims=True), 1e-12)
    return WholeChunks(body.ids, body.paths, mixed.astype(np.float32))


def chunk_order(chunks: WholeChunks, qvec: np.ndarray, floor: float | None) -> list[str]:
    """Note paths of the chunks by cosine, best first (a note once per chunk), below ``floor`` dropped."""
    scores = chunks.matrix @ qvec
    order = np.lexsort((chunks.ids, -scores))[:200]
    return [chunks.paths[int(chunks.ids[i])] for i in order if floor is None or scores[i] >= floor]


def scores(ranked_chunks: list[str], relevant: set[str], unit: str) -> tuple[float, float, float]:
    ranked = ranked_chunks if unit == "chunks" else list(dict.fromkeys(ranked_chunks))
    return hit_at(ranked, relevant), recall_at(ranked, relevant), reciprocal_rank(ranked, relevant)


def table(rows: dict[str, list[tuple[float, float, float]]], n: int) -> str:
    out = [f"| dense ranking ({n} questions) | Hit@5 | Recall@5 | MRR@10 |", "| --- | --- | --- | --- |"]
    for label, vals in rows.items():
        means = np.mean(np.asarray(vals), axis=0) if vals else [float("nan")] * 3
        out.append(f"| {label} | " + " | ".join(f"{m:.3f}" for m in means) + " |")
    return "\n".join(out)


def compare(cairn: Cairn, questions: Sequence[dict], data_dir: Path, vault: str) -> str:
    store, embedder = cairn.store, cairn.embedder
    stem = Path(cairn.config.db_path).stem
    variants = {
        "naive": WholeChunks.load(store, data_dir / "naive" / f"{stem}.npz", embedder, vault),
        "before": before_vectors(store, data_dir / "naive" / f"{stem}.before.npz", embedder, vault),
    }
    rows: dict[str, list[tuple[float, float, float]]] = {}
    for q in questions:
        rel, qvec = set(q["relevant"]), embedder.embed([q["question"]])[0]
        for name, chunks in variants.items():
            for floor in (None, COSINE_FLOOR):
                ranked = chunk_order(chunks, qvec, floor)
                for unit in ("notes", "chunks"):
                    label = f"{name}, {'floor ' + str(floor) if floor else 'no floor'}, top 5 {unit}"
                    rows.setdefault(label, []).append(scores(ranked, rel, unit))
        hits, _ = cairn.query.retrieve(q["question"], top_k=10, mode="dense", per_note=1)
        rows.setdefault("cairn dense leg (sentence vectors, floor), top 5 notes", []).append(
            scores([h.file_path for h in hits], rel, "notes")
        )
    return table(rows, len(questions))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("devsets", type=Path, nargs="+")
    ap.add_argument("--vault", default="obsidian-help")
    ap.add_argument("--file", help="only the questions of this dev file (its stem, e.g. dev)")
    ap.add_argument("--vaults", type=Path, default=REPO.parent / "shared" / "vaults")
    ap.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache")
    args = ap.parse_args()
    questions = [
        q
        for q in load_questions(args.devsets)
        if q["vault"] == args.vault and q["relevant"] and (args.file is None or q["source"] == args.file)
    ]
    config = load_config({"vault": str(args.vaults / args.vault), "data_dir": str(args.data_dir)}, env={})
    cairn = Cairn(config, embedder=Embedder())
    try:
        cairn.indexing.index()
        print(f"{args.vault}, {args.file or 'all dev files'}:\n")
        print(compare(cairn, questions, args.data_dir, args.vault))
    finally:
        cairn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

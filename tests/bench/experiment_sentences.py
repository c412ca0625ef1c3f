"""Which unit of the sources answers: the extractive answer's unit score refitted by grouped k-fold on the dev files.

``dump``: every answerable dev question with ``evidence`` is retrieved on the ask path (``evidenced_context``, over
the indexes ``make eval`` keeps in ``.eval-cache``, read-only), and every unit of its sources is written with the
signals it could be scored on (its cosine to the question, the question's terms it holds with and without its title
and headings, its title's cosine, its source's rank and cosine, where it sits in its paragraph) and the share of the
evidence's content words it holds.

``fit``: the unit score ``cos + Σ w·signal`` (the shipped one is ``cos + 0.15 held + 0.3 title − 0.01 rank``) is
searched coordinate by coordinate on the training folds (objective: the share of answers carrying the evidence,
:mod:`eval_answers`) and judged on the held-out fold, questions sharing a note never on both sides
(:func:`calibrate_answerability_grouped.grouped_folds`), over several seeds. The answer is composed by the shipped
:func:`cairn.answers.compose.compose` from the rescored units. Prints the shipped and refitted figures side by side.

    python tests/bench/experiment_sentences.py dump ../shared/eval/dev.jsonl ../shared/eval/dev2.jsonl --out F.pkl
    python tests/bench/experiment_sentences.py fit F.pkl
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from calibrate_answerability_grouped import grouped_folds, groups_of  # noqa: E402
from eval_answers import carried_share, carries  # noqa: E402
from eval_cv import load_questions  # noqa: E402

import cairn.answers.compose as compose_module  # noqa: E402
from cairn.answers.compose import Piece, compose, question_shape  # noqa: E402
from cairn.answers.extractive import (  # noqa: E402
    _OPENERS,
    _TITLE,
    ExtractiveAnswers,
    _asked_answer_first,
    _bare_line,
    _held_shares,
    one_entry_each,
    where,
)
from cairn.contract import SearchRequest  # noqa: E402
from cairn.search import Query  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
#: The signals a unit is scored on beside its cosine, and the shipped weights.
SIGNALS = ("held", "held_self", "title", "rank", "hit_cos", "para_first", "head_held", "words", "step", "item")
#: Median answer length (characters) a choice may not exceed: a longer answer must not be how the fact gets in.
MAX_MEDIAN = 450
#: The composition's constants searched beside the weights (:mod:`cairn.answers.compose`).
KNOBS = ("SECOND_MARGIN", "MAX_BLOCKS", "EXTEND_RATIO")
#: The weights and constants before this search (docs/extractive.md) and as shipped.
BEFORE = {
    **dict.fromkeys(SIGNALS, 0.0),
    "held": 0.15,
    "title": 0.3,
    "rank": -0.01,
    "SECOND_MARGIN": 0.25,
    "MAX_BLOCKS": 3,
    "EXTEND_RATIO": 0.6,
}
SHIPPED = {
    **BEFORE,
    "held": ExtractiveAnswers.HELD_WEIGHT,
    "title": ExtractiveAnswers.TITLE_PRIOR,
    "rank": -ExtractiveAnswers.RANK_STEP,
    "step": ExtractiveAnswers.STEP_PRIOR,
    **{k: getattr(compose_module, k) for k in KNOBS},
}
GRID = {
    "held": (0.0, 0.1, 0.15, 0.25, 0.4, 0.6),
    "held_self": (0.0, 0.1, 0.2, 0.3, 0.5),
    "title": (0.0, 0.15, 0.3, 0.45),
    "rank": (-0.06, -0.03, -0.01, 0.0),
    "hit_cos": (0.0, 0.2, 0.4, 0.6),
    "para_first": (0.0, 0.02, 0.05, 0.1),
    "head_held": (-0.1, 0.0, 0.1, 0.2),
    "words": (-0.002, 0.0, 0.002, 0.005),
    "step": (-0.05, 0.0, 0.05, 0.1, 0.15),
    "item": (-0.05, 0.0, 0.05, 0.1),
    "SECOND_MARGIN": (0.1, 0.25, 0.4, 0.6),
    "MAX_BLOCKS": (2, 3, 4),
    "EXTEND_RATIO": (0.4, 0.6, 0.8),
}


def dump(args: argparse.Namespace) -> None:
    from cairn.answers import AnswerService
    from cairn.app import Cairn
    from cairn.config import load_config
    from cairn.embedder import Embedder

    rows = [q for q in load_questions(args.devsets) if q["relevant"] and q.get("evidence")]
    embedder = Embedder()
    out = []
    for vault in sorted({q["vault"] for q in rows}):
        config = load_config({"vault": str(args.vaults / vault), "data_dir": str(args.data_dir)}, env={})
        cairn = Cairn(config, embedder=embedder, readonly=True)
        answers = AnswerService(cairn.query)
        for q in (q for q in rows if q["vault"] == vault):
            sources, _ = answers.evidenced_context(SearchRequest.parse({"query": q["question"]}), read=False)
            out.append(_units(answers.extractive, q, sources))
        cairn.close()
        print(f"# {vault}: {sum(r['vault'] == vault for r in out)} questions", file=sys.stderr)
    args.out.write_bytes(pickle.dumps(out))


def _units(ex: ExtractiveAnswers, q: dict, sources: Sequence) -> dict:
    query = Query.parse(q["question"])
    cands = ex._candidates(sources) if sources else []
    by_n = {s.n: s for s in sources}
    row = {k: q[k] for k in ("id", "vault", "question", "evidence", "relevant")}
    row["shape"] = question_shape(query.text)
    row["units"] = []
    if not cands:
        return row
    sim = ex.similarities(query, cands)
    scored = [c.embedded for c in cands]
    held = _held_shares(query.terms, [c.in_context if e else None for c, e in zip(cands, scored)])
    held_self = _held_shares(query.terms, [c.text if e else None for c, e in zip(cands, scored)])
    head = _held_shares(query.terms, [c.in_context[: -len(c.text)] if e else None for c, e in zip(cands, scored)])
    last_para: dict[int, int] = {}
    for c, h, hs, hh in zip(cands, held, held_self, head):
        hit = by_n[c.n].hit
        para_first = last_para.get(c.n) != c.unit.paragraph
        last_para[c.n] = c.unit.paragraph
        row["units"].append(
            {
                "n": c.n,
                "position": c.position,
                "unit": c.unit,
                "text": c.text,
                "note": c.path,
                "section": c.section,
                "embedded": bool(c.embedded),
                "seed": c.unit.kind not in _OPENERS and not _bare_line(c.unit),
                "opener": c.unit.kind in _OPENERS,
                "where": where(by_n[c.n], c.unit),
                "cos": sim[c.embedded] if c.embedded else -1.0,
                "f": {
                    "held": h,
                    "held_self": hs,
                    "title": sim[(_TITLE, c.title)],
                    "rank": float(c.n - 1),
                    "hit_cos": float(getattr(hit, "cosine", 0.0)),
                    "para_first": float(para_first),
                    "head_held": hh,
                    "words": float(min(40, len(c.text.split()))),
                },
                "share": carried_share(c.text, q["evidence"]),
            }
        )
    return row


def answer(row: dict, w: dict[str, float], asked_cosine: float = ExtractiveAnswers.ASKED_COSINE) -> str:
    """The composed answer of ``row`` with the unit score ``cos + Σ w·signal`` (FAQ answers raised as shipped)."""
    units = row["units"]
    if not units:
        return ""
    owns = [
        u["cos"] + w["held"] * u["f"]["held"] + w["held_self"] * u["f"]["held_self"] if u["embedded"] else -1.0
        for u in units
    ]
    asked: dict[tuple[int, int], float] = {}
    for u, own in zip(units, owns):
        if u["opener"] and u["embedded"]:
            key = (u["n"], u["unit"].entry)
            asked[key] = max(own, asked.get(key, -1.0))
    scored = []
    for u, own in zip(units, owns):
        if not u["embedded"]:
            p = Piece(u["n"], u["position"], u["unit"], u["text"], -1.0, False, u["note"], 0.0, u["section"])
            scored.append((p, u["unit"].entry, own))
            continue
        if not u["opener"]:
            own = max(own, asked.get((u["n"], u["unit"].entry), own))
        f = {
            **u["f"],
            "step": float(row["shape"] == "how_to" and u["unit"].ordered),
            "item": float(row["shape"] == "list" and u["unit"].kind == "item"),
        }
        score = own + sum(w[k] * f[k] for k in SIGNALS if k not in ("held", "held_self"))
        p = Piece(
            u["n"], u["position"], u["unit"], u["text"], score, u["seed"], u["note"], u["f"]["held"], u["section"]
        )
        scored.append((p, u["unit"].entry, own))
    cosines = [u["cos"] for u in units]
    pieces = one_entry_each(_asked_answer_first(scored, cosines, asked_cosine))
    wheres = {(u["n"], u["position"]): u["where"] for u in units}
    for k in KNOBS:
        setattr(compose_module, k, w[k])
    return compose(pieces, row["shape"], lambda p: wheres[(p.n, p.position)]).text


def figures(rows: Sequence[dict], w: dict[str, float]) -> tuple[float, float]:
    """(share of ``rows`` whose answer carries the evidence, median characters)."""
    texts = [answer(r, w) for r in rows]
    carried = [carries(t, r["evidence"]) for t, r in zip(texts, rows)]
    return sum(carried) / max(1, len(rows)), statistics.median(len(t) for t in texts) if texts else 0.0


def search(rows: Sequence[dict], start: dict[str, float], sweeps: int = 2) -> dict[str, float]:
    """Coordinate search over :data:`GRID` from ``start``: each weight in turn set to the grid value with the most
    answers carrying the evidence (shorter median on a tie; the current value kept on a tie)."""
    w = dict(start)
    best = figures(rows, w)
    for _ in range(sweeps):
        moved = False
        for k in (*SIGNALS, *KNOBS):
            for v in GRID[k]:
                if v == w[k]:
                    continue
                trial = {**w, k: v}
                got = figures(rows, trial)
                if got[1] > MAX_MEDIAN:
                    continue
                if got[0] > best[0] + 1e-9 or (abs(got[0] - best[0]) < 1e-9 and got[1] < best[1]):
                    w, best, moved = trial, got, True
        if not moved:
            break
    return w


def fit(args: argparse.Namespace) -> None:
    rows = pickle.loads(args.dump.read_bytes())
    groups = groups_of(rows)
    held_out: dict[str, list[float]] = {r["id"]: [] for r in rows}
    chosen = []
    for seed in range(args.seeds):
        folds = grouped_folds(rows, groups, args.folds, seed)
        for f in range(args.folds):
            train = [r for r, k in zip(rows, folds) if k != f]
            test = [r for r, k in zip(rows, folds) if k == f]
            w = search(train, BEFORE)
            chosen.append(w)
            for r in test:
                held_out[r["id"]].append(float(carries(answer(r, w), r["evidence"])))
        print(f"# seed {seed} done", file=sys.stderr)
    for vault in sorted({r["vault"] for r in rows}):
        vr = [r for r in rows if r["vault"] == vault]
        before, med_before = figures(vr, BEFORE)
        shipped, med = figures(vr, SHIPPED)
        kfold = statistics.mean(statistics.mean(held_out[r["id"]]) for r in vr)
        in_units = statistics.mean(any(u["share"] >= 0.8 for u in r["units"]) for r in vr)
        print(
            f"{vault}: n {len(vr)}; shipped carries {100 * shipped:.0f} % (median {med:.0f} chars); "
            f"refitted, held out {100 * kfold:.0f} %; a single unit holds it {100 * in_units:.0f} %"
        )
    for k in (*SIGNALS, *KNOBS):
        vals = [w[k] for w in chosen]
        print(f"  {k}: median {statistics.median(vals):g}  range {min(vals):g}..{max(vals):g}")
    whole = search(rows, BEFORE)
    print("fitted on all:", whole, figures(rows, whole))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("devsets", type=Path, nargs="+")
    d.add_argument("--vaults", type=Path, default=REPO.parent / "shared" / "vaults")
    d.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache")
    d.add_argument("--out", type=Path, required=True)
    f = sub.add_parser("fit")
    f.add_argument("dump", type=Path)
    f.add_argument("--folds", type=int, default=5)
    f.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args(argv)
    (dump if args.cmd == "dump" else fit)(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

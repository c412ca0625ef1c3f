#!/usr/bin/env python3
"""A real small model's answers, to label sentence by sentence (tests/bench/grounding_labels.jsonl).

Starts llama.cpp's server with SmolLM2-135M-Instruct (packaging/run_llm.py, as ``make run-llm``), indexes each vault
into ``--data-dir`` (incremental), and for each question takes the ask path up to the model: the sources
(``AnswerService.judged_context``; weak and not-found questions are skipped, the model never sees them), the prompt
(``prompt_blocks``, ``build_messages``), then the model's streamed text with invented citations removed
(``CitationFilter``), as the daemon sends it. Writes one JSON line per answer to ``--out``:
``{id, vault, question, answer, sources: [{n, key}]}`` and the passages' texts to ``--passages``
(``{key, vault, filePath, symbol, title, text}``, one line per passage, shared by the answers).

Questions: the dev files' (``$CAIRN_SHARED/eval``; ``--per-vault`` of each vault, answerable ones, in file order)
and :data:`SAMPLE_QUESTIONS` over examples/vault.

Usage: grounding_answers.py [--data-dir DIR] [--per-vault N] [--out FILE] [--passages FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(Path(__file__).parent))

from eval_cv import load_questions, shared_dir  # noqa: E402

from cairn.answers import AnswerService  # noqa: E402
from cairn.answers.citations import CitationFilter  # noqa: E402
from cairn.app import Cairn  # noqa: E402
from cairn.config import LLMConfig, load_config  # noqa: E402
from cairn.llm import OpenAIChatModel  # noqa: E402
from cairn.prompt import build_messages  # noqa: E402
from cairn.search import Query  # noqa: E402

_spec = importlib.util.spec_from_file_location("run_llm", REPO / "packaging" / "run_llm.py")
assert _spec and _spec.loader
run_llm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_llm)

#: Questions over the sample vault (examples/vault).
SAMPLE_QUESTIONS = [
    "How deep do I plant garlic cloves?",
    "When is the garlic harvested?",
    "When do I sow tomatoes, and when do they go into the polytunnel?",
    "What do I feed the sourdough starter?",
    "How do I pickle cucumbers?",
    "What goes into the compost?",
    "How does the watering system work?",
    "What pests attack the tomatoes and what do I do about them?",
    "How long does the tomato sauce keep?",
    "What is in the pantry?",
    "What's on the meal plan this week?",
    "How warm should I keep my seed trays?",
]


def vault_path(name: str) -> Path:
    return REPO / "examples" / "vault" if name == "examples" else shared_dir() / "vaults" / name


async def answer_all(
    service: AnswerService, rows: list[dict], passages: dict[str, dict], top_k: int, keep_to: Path | None = None
) -> list[dict]:
    out = []
    for row in rows:
        query = Query.parse(row["question"])
        sources, verdict = service.judged_context(query, top_k=top_k)
        if not sources or verdict != "answer":
            print(f"  {row['id']}: {verdict}, skipped", file=sys.stderr)
            continue
        in_prompt, blocks = service._prompt(sources)
        keep = CitationFilter([s.n for s in in_prompt])
        parts = []
        async for delta in service.model.stream(build_messages(row["question"], blocks)):  # type: ignore[union-attr]
            parts.append(keep.feed(delta))
        parts.append(keep.flush())
        listed = []
        for s in in_prompt:
            h = s.hit
            key = f"{row['vault']}:{h.file_path}:{h.chunk_id}"
            passages.setdefault(
                key,
                {
                    "key": key,
                    "vault": row["vault"],
                    "filePath": h.file_path,
                    "symbol": h.symbol,
                    "title": h.title,
                    "text": h.text,
                },
            )
            listed.append({"n": s.n, "key": key})
        out.append({**row, "answer": "".join(parts), "sources": listed})
        if keep_to is not None:
            with keep_to.open("a", encoding="utf-8") as f:  # kept as it comes: a long run can be read while it runs
                f.write(json.dumps(out[-1], ensure_ascii=False) + "\n")
        print(f"  {row['id']}: {len(''.join(parts))} characters", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache")
    ap.add_argument("--per-vault", type=int, default=30)
    ap.add_argument("--skip", type=int, default=0, help="leave out the first SKIP questions of each vault")
    ap.add_argument("--out", type=Path, default=Path("grounding_answers.jsonl"))
    ap.add_argument("--passages", type=Path, default=Path("grounding_passages.jsonl"))
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--top-k", type=int, default=3, help="passages per prompt (the daemon's default is 8)")
    ap.add_argument("--threads", type=int, default=1, help="the model server's CPU threads")
    ap.add_argument("--vaults", nargs="+", default=["examples", "obsidian-help", "obsidian-hub"])
    args = ap.parse_args(argv)
    rows: list[dict] = [
        {"id": f"S{i:02d}", "vault": "examples", "question": q} for i, q in enumerate(SAMPLE_QUESTIONS, 1)
    ]
    dev = [q for q in load_questions() if q["relevant"]]
    for vault in ("obsidian-help", "obsidian-hub"):
        rows += [{"id": q["id"], "vault": vault, "question": q["question"]} for q in dev if q["vault"] == vault][
            args.skip : args.skip + args.per_vault
        ]
    port = run_llm.free_port()
    server = run_llm.start_model_server(port, open(args.out.with_suffix(".server.log"), "wb"), threads=args.threads)
    answers: list[dict] = []
    passages: dict[str, dict] = {}
    partial = args.out.with_suffix(".partial.jsonl")
    partial.unlink(missing_ok=True)
    try:
        run_llm.wait_ready(f"http://127.0.0.1:{port}/v1", server, 300)
        llm = LLMConfig(
            base_url=f"http://127.0.0.1:{port}/v1",
            model=run_llm.MODEL_NAME,
            temperature=0.0,
            max_tokens=args.max_tokens,
            first_token_timeout_s=300.0,
            total_timeout_s=600.0,
        )
        for name in [v for v in dict.fromkeys(r["vault"] for r in rows) if v in args.vaults]:
            print(f"# {name}", file=sys.stderr)
            config = load_config({"vault": str(vault_path(name)), "data_dir": str(args.data_dir / name)}, env={})
            cairn = Cairn(config)
            try:
                cairn.indexing.index()
                service = AnswerService(cairn.query, OpenAIChatModel(llm))
                answers += asyncio.run(
                    answer_all(service, [r for r in rows if r["vault"] == name], passages, args.top_k, partial)
                )
            finally:
                cairn.close()
    finally:
        run_llm.stop(server)
    args.out.write_text("".join(json.dumps(a, ensure_ascii=False) + "\n" for a in answers), encoding="utf-8")
    args.passages.write_text(
        "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in passages.values()), encoding="utf-8"
    )
    print(f"{len(answers)} answers, {len(passages)} passages", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PDF benchmark: extraction speed, end-to-end indexing time per page, and how fresh notes stay while a
long PDF is being indexed. Figures, not tests.

The PDF: PAGES pages (default 300) of real English — the text of VAULT's notes (default: obsidian-help), laid out
about 330 words a page by fpdf2 with a running header and page numbers — so every page is different text, as in
a real manual (a PDF repeating one page would be served from the embedding cache and look too fast).

Printed, each with its target:
- extraction: pages/s of ``PdfExtractor.extract`` (the PDF library in its worker process), and the worker's
  start-up time;
- end to end: seconds per page from dropping the PDF into the watched vault until every chunk of it has vectors
  (the daemon's PDF queue: extract, chunk, write, embed);
- freshness: EDITS saves of random notes with no PDF work, then EDITS more while the PDF queue is working on the
  PDF, side by side in one run: time until the keyword index finds the edited note by a new word, and until
  the dense index finds its new sentence (target: during the PDF within the normal figure — keyword p95 < 300 ms
  after the debounce, semantic p95 < 1 s, as in bench_freshness).

Usage: bench_pdf.py [VAULT] [--pages 300] [--edits 10] [--debounce-ms 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(REPO))

from bench_freshness import (  # noqa: E402
    ACTS,
    ANIMALS,
    PLACES,
    fmt,
    indexed_paths,
    nearest_sentence_chunks,
    pct,
    wait_until,
)

from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.index import VaultWatcher  # noqa: E402
from cairn.vault.pdf import PdfExtractor  # noqa: E402

WORDS_PER_PAGE = 330


def vault_prose(vault: Path) -> list[str]:
    """The vault's note text as plain words (markup and front-matter dropped), in a fixed order."""
    words: list[str] = []
    for path in sorted(vault.rglob("*.md")):
        if any(part.startswith(".") for part in path.relative_to(vault).parts):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        text = re.sub(r"(?s)^---\n.*?\n---\n", "", text)
        text = re.sub(r"```.*?```", " ", text, flags=re.S)
        text = re.sub(r"!?\[\[([^\]|]*\|)?([^\]]*)\]\]", r"\2", text)
        text = re.sub(r"[#*`>|\[\]()_=~-]+", " ", text)
        words += text.split()
    return words


def write_pdf(path: Path, words: list[str], pages: int) -> None:
    """``pages`` pages of ``words`` (wrapping round), ~WORDS_PER_PAGE a page, with a running header and footer."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_title("Obsidian Handbook (bench)")
    pos = 0
    for n in range(1, pages + 1):
        pdf.add_page()
        pdf.set_font("Helvetica", size=9)
        pdf.text(80, 10, "Obsidian Handbook")
        pdf.text(100, 287, f"Page {n}")
        pdf.set_font("Helvetica", style="B", size=16)
        pdf.text(15, 28, f"Section {n}")
        pdf.set_font("Helvetica", size=11)
        chunk = [words[(pos + i) % len(words)] for i in range(WORDS_PER_PAGE)]
        pos += WORDS_PER_PAGE
        text = " ".join(chunk).encode("latin-1", "replace").decode("latin-1")
        y = 40.0
        for line in textwrap.wrap(text, 95):
            pdf.text(15, y, line)
            y += 5.5
    pdf.output(str(path))


def copy_without_pdfs(source: Path, vault: Path) -> None:
    """``source`` copied to ``vault`` without its PDFs: the bench's PDF is the only one."""
    shutil.copytree(source, vault, copy_function=shutil.copy2, symlinks=True)
    for stray in vault.rglob("*.pdf"):
        stray.unlink()


def measure_extraction(work: Path, pdf_src: Path) -> tuple[float, float, int]:
    """Extraction alone: worker start-up (a 1-page PDF) in s, the best of 3 reads of ``pdf_src`` in s, and
    how many of its pages have text."""
    one = work / "one.pdf"
    write_pdf(one, ["Hello", "world."], 1)
    with PdfExtractor() as extractor:
        t0 = time.perf_counter()
        extractor.extract(one)
        start_s = time.perf_counter() - t0
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            got = extractor.extract(pdf_src)
            runs.append(time.perf_counter() - t0)
    return start_s, min(runs), sum(1 for p in got.pages if p.text.strip())


def print_report(
    args, extraction: tuple[float, float, int], e2e: float | None, chunks: int, note, results, during_ok: list[bool]
) -> None:
    start_s, extract_s, pages_with_text = extraction
    deb = args.debounce_ms / 1000
    print(f"\n{'figure':58s} {'measured':>22s}   target")
    print(f"{'extraction worker start-up':58s} {start_s * 1000:19.0f} ms   -")
    print(
        f"{f'extraction, {args.pages} pages ({pages_with_text} with text)':58s} "
        f"{args.pages / extract_s:15.0f} pages/s   -"
    )
    if e2e:
        print(
            f"{f'end to end: drop → all {chunks} chunks embedded':58s} {e2e / args.pages:17.3f} s/page   "
            f"- ({e2e:.0f} s in all; status {note.get('status')}, {note.get('error') or 'no problems'})"
        )
    for phase in ("idle", "during PDF"):
        for kind, target in (("keyword", 0.3), ("semantic", 1.0)):
            vals = results[phase][kind]
            if not vals:
                print(f"{f'{kind} freshness, {phase}':58s} {'no edits measured':>22s}")
                continue
            after = [max(0.0, v - deb) for v in vals]
            p95 = pct(after, 0.95)
            verdict = "ok" if p95 < target else "MISSED"
            print(
                f"{f'{kind} save → found, {phase}, p95 after debounce (n={len(vals)})':58s} {p95 * 1000:19.0f} ms   "
                f"< {target * 1000:.0f} ms  {verdict}   ({fmt(vals)} raw)"
            )
    if during_ok:
        print(
            f"  {sum(during_ok)} of {len(during_ok)} edits during the PDF were found while the PDF was still "
            "being indexed (the notes did not wait for it)"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vault", type=Path, nargs="?", default=REPO.parent / "shared" / "vaults" / "obsidian-help")
    ap.add_argument("--pages", type=int, default=300)
    ap.add_argument("--edits", type=int, default=10)
    ap.add_argument("--debounce-ms", type=int, default=300)
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cairn-pdf-bench-"))
    vault = work / "vault"
    copy_without_pdfs(args.vault, vault)
    pdf_src = work / "handbook.pdf"
    t0 = time.perf_counter()
    write_pdf(pdf_src, vault_prose(args.vault), args.pages)
    print(
        f"{args.pages}-page PDF of {args.vault.name}'s text written in {time.perf_counter() - t0:.1f} s "
        f"({pdf_src.stat().st_size / 1e6:.1f} MB)"
    )

    start_s, extract_s, pages_with_text = measure_extraction(work, pdf_src)

    config = load_config(
        {"vault": str(vault), "data_dir": str(work / "data"), "config_dir": str(work / "config")}, env={}
    )
    cairn = Cairn(config)
    t0 = time.perf_counter()
    cairn.indexing.index()
    print(f"vault indexed: {cairn.indexing.stats()['notes']} notes in {time.perf_counter() - t0:.1f} s")
    rng = random.Random(args.seed)
    notes = [p for p in indexed_paths(cairn.store) if p.endswith(".md")]
    results: dict[str, dict[str, list[float]]] = {
        "idle": {"keyword": [], "semantic": []},
        "during PDF": {"keyword": [], "semantic": []},
    }
    during_ok: list[bool] = []
    timing: dict[str, float] = {}

    def edit(i: int, phase: str) -> None:
        rel = rng.choice(notes)
        word = f"zq{rng.randrange(16**8):08x}"
        sentence = (
            f"The {rng.choice(ANIMALS)} went to the {rng.choice(PLACES)} to {rng.choice(ACTS)} "
            f"on day {i} of the {rng.choice(['spring', 'autumn', 'winter'])} festival."
        )
        qvec = cairn.embedder.embed_query(sentence)
        path = vault / rel
        tmp = path.with_name(path.name + f".tmp-{i}")
        tmp.write_text(path.read_text(encoding="utf-8") + f"\n\n{sentence} Code word {word}.\n", encoding="utf-8")
        saved = time.perf_counter()
        os.replace(tmp, path)

        def keyword_found() -> bool:
            ids = [
                r[0]
                for r in cairn.store.conn.execute(
                    "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY bm25(chunks_fts) LIMIT 5",
                    (f'"{word}"',),
                )
            ]
            return any(r.path == rel for r in cairn.store.chunk_rows(ids).values())

        def semantic_found() -> bool:
            ids = nearest_sentence_chunks(cairn.store, qvec, 5)
            return any(r.path == rel and word in r.text for r in cairn.store.chunk_rows(ids).values())

        for kind, check in (("keyword", keyword_found), ("semantic", semantic_found)):
            if wait_until(check, 20) is not None:
                results[phase][kind].append(time.perf_counter() - saved)

    async def scenario() -> None:
        watcher = VaultWatcher(
            vault,
            apply_hints=cairn.indexing.save_lane.save,
            reconcile=cairn.indexing.index,
            hints=cairn.indexing.hints,
            executor=cairn.indexing.save_lane.executor,
            ignore=config.ignore,
            debounce_ms=args.debounce_ms,
        )
        queue = cairn.indexing.pdf_lane
        queue.start()
        await watcher.start()
        try:
            await asyncio.to_thread(run, queue)
        finally:
            await watcher.stop()

    def pdf_vectors() -> int:
        return cairn.store.conn.execute("SELECT count(*) FROM chunks WHERE kind='pdf' AND embedded > 0").fetchone()[0]

    def run(queue) -> None:
        for i in range(args.edits):
            edit(i, "idle")
        t0 = time.perf_counter()
        shutil.copy2(pdf_src, vault / "Handbook.pdf")
        wait_until(lambda: pdf_vectors() > 0, 120, 0.01)
        for i in range(args.edits):
            if queue.idle():
                break
            edit(args.edits + i, "during PDF")
            during_ok.append(not queue.idle())
            time.sleep(rng.uniform(0.5, 1.5))  # the owner types on; the queue gets on with the PDF meanwhile
        queue.wait_idle(3600)
        timing["end_to_end"] = time.perf_counter() - t0

    asyncio.run(scenario())
    chunks = cairn.store.conn.execute("SELECT count(*) FROM chunks WHERE kind='pdf'").fetchone()[0]
    stored = cairn.store.note_by_path("Handbook.pdf")
    note = {"status": stored.status, "error": stored.error} if stored else {}
    cairn.close()
    shutil.rmtree(work, ignore_errors=True)

    extraction = (start_s, extract_s, pages_with_text)
    print_report(args, extraction, timing.get("end_to_end"), chunks, note, results, during_ok)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Benchmark: pypdfium2 vs pypdf for Cairn's PDF text extraction. Figures, not tests.

For each PDF (default: two real PDFs shipped on this machine, skipped when missing, plus a generated
300-page text PDF from tests/support/pdfgen.py) it prints, per library:
- pages/s of plain text extraction, best of ``--repeat`` runs, in this process
  (pypdfium2: ``get_text_range``; pypdf: ``extract_text``), and for pypdfium2 also with the per-line
  geometry Cairn reads (``cairn.vault.pdf_worker.read_page``: position + font size of each line);
- quality: words extracted, share of tokens that are plain alphabetic words, tokens still holding a
  ligature (ﬁ, ﬂ, …), words left split by an end-of-line hyphen (``manip-\\nulation``), and PDFium's
  own hyphenation marks (U+FFFE, which it joins), and one spot sample line per library;
- the whole Cairn path: ``PdfExtractor.extract`` (worker process + tidying) pages/s and the worker's
  start cost (ms), so the cost of the subprocess design is visible.

The rule: choose the faster library unless its text is clearly worse;
``PdfExtractor`` ≥ 200 pages/s on a text PDF on 2 cores.

Usage: bench_pdf_libs.py [PDF ...] [--repeat 3] [--no-generated]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(REPO / "tests"))

import pypdf  # noqa: E402
import pypdfium2 as pdfium  # noqa: E402
import pypdfium2.raw as pdfium_c  # noqa: E402

from cairn.vault.pdf import PdfExtractor  # noqa: E402
from cairn.vault.pdf_worker import read_page  # noqa: E402
from support import pdfgen  # noqa: E402

DEFAULT_PDFS = [
    Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf"),
    Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf"),
]
LIGATURES = "ﬀﬁﬂﬃﬄﬅﬆ"
WORD = re.compile(r"^[^\W\d_]+(?:['’][^\W\d_]+)?[.,;:!?)\]\"”’]*$")


def pdfium_texts(path: Path) -> list[str]:
    doc = pdfium.PdfDocument(path)
    try:
        out = []
        for i in range(len(doc)):
            page = doc[i]
            textpage = page.get_textpage()
            out.append(textpage.get_text_range())
            textpage.close()
            page.close()
        return out
    finally:
        doc.close()


def pdfium_geometry(path: Path) -> int:
    doc = pdfium.PdfDocument(path)
    try:
        for i in range(len(doc)):
            read_page(doc, i, pdfium_c)
        return len(doc)
    finally:
        doc.close()


def pypdf_texts(path: Path) -> list[str]:
    return [page.extract_text() or "" for page in pypdf.PdfReader(path).pages]


def best_time(fn, repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def quality(texts: list[str]) -> dict:
    joined = "\n".join(texts)
    tokens = joined.split()
    words = sum(bool(WORD.match(t)) for t in tokens)
    return {
        "tokens": len(tokens),
        "alpha_share": words / len(tokens) if tokens else 0.0,
        "ligatures": sum(any(ch in LIGATURES for ch in t) for t in tokens),
        "split_hyphens": len(re.findall(r"[^\W\d_]{2}-\r?\n[a-z]", joined)),
        "fffe_marks": joined.count("\ufffe"),
    }


def sample(texts: list[str]) -> str:
    for text in texts[len(texts) // 2 :] + texts:
        for line in text.splitlines():
            if len(line.split()) >= 8:
                return line.strip()[:100]
    return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pdfs", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-generated", action="store_true")
    args = ap.parse_args()
    pdfs = [p for p in (args.pdfs or DEFAULT_PDFS) if p.exists()]
    for p in args.pdfs or DEFAULT_PDFS:
        if not p.exists():
            print(f"skip (missing): {p}")
    tmp = tempfile.TemporaryDirectory()
    if not args.no_generated:
        start = time.perf_counter()
        pdfs.append(pdfgen.big_pdf(Path(tmp.name) / "generated-300.pdf", pages=300))
        print(f"generated 300-page PDF in {time.perf_counter() - start:.2f} s")

    print(f"\npypdfium2 {pdfium.PDFIUM_INFO} / pypdf {pypdf.__version__}; best of {args.repeat}\n")
    header = (
        f"{'PDF':34} {'pages':>5}  {'pdfium p/s':>10} {'+geom p/s':>9} {'pypdf p/s':>9} {'speed-up':>8}  "
        f"{'Cairn p/s':>9}"
    )
    print(header)
    print("-" * len(header))
    rows = []
    with PdfExtractor() as extractor:
        for path in pdfs:
            t_pdfium, texts_pdfium = best_time(lambda path=path: pdfium_texts(path), args.repeat)
            t_geom, _ = best_time(lambda path=path: pdfium_geometry(path), args.repeat)
            t_pypdf, texts_pypdf = best_time(lambda path=path: pypdf_texts(path), args.repeat)
            t_cairn, result = best_time(lambda path=path: extractor.extract(path), args.repeat)
            n = len(texts_pdfium)
            print(
                f"{path.name[:34]:34} {n:5d}  {n / t_pdfium:10.0f} {n / t_geom:9.0f} {n / t_pypdf:9.0f} "
                f"{t_pypdf / t_pdfium:7.1f}x  {n / t_cairn:9.0f}"
            )
            rows.append((path, texts_pdfium, texts_pypdf, result))
        start_ms = extractor.last_start_ms

    print(f"\nworker start (spawn python, import pypdfium2, ready): {start_ms:.0f} ms")
    with PdfExtractor() as cold:
        first = time.perf_counter()
        cold.extract(pdfs[0])
        print(
            f"first extract on a cold extractor ({pdfs[0].name}): {(time.perf_counter() - first) * 1000:.0f} ms "
            f"(of which worker start {cold.last_start_ms:.0f} ms)"
        )

    print(
        "\nquality (tokens | alphabetic-word share | tokens with ligatures | words split by '-\\n' | "
        "U+FFFE hyphen marks)"
    )
    for path, texts_pdfium, texts_pypdf, result in rows:
        for name, texts in (
            ("pypdfium2", texts_pdfium),
            ("pypdf", texts_pypdf),
            ("Cairn (tidied)", [p.text for p in result.pages]),
        ):
            q = quality(texts)
            print(
                f"  {path.name[:30]:30} {name:15} {q['tokens']:7d} | {q['alpha_share']:6.1%} | "
                f"{q['ligatures']:4d} | {q['split_hyphens']:4d} | {q['fffe_marks']:4d}"
            )
        print(f"    sample pypdfium2: {sample(texts_pdfium)!r}")
        print(f"    sample pypdf:     {sample(texts_pypdf)!r}")
        headings = [p.heading for p in result.pages if p.heading][:6]
        print(f"    Cairn headings:   {headings}")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Writes small test PDFs with known content (fpdf2 for text and images, plain byte surgery for damage).

Every function writes into the given path (a file path; its folder must exist) and returns that path.
Output is deterministic: fpdf2's creation date is fixed (so its /ID, an MD5 of the content and that date,
is fixed too); the encrypted files use fpdf2's RC4 handler, whose key is derived from that /ID.

Fonts are fpdf2's core Helvetica (WinAnsi / Latin-1 text only; enough for these tests). Page size A4,
portrait, 15 mm margins; body text 11 pt, headings 16 pt bold, running header/footer 9 pt.

Used by tests/test_pdf.py (extraction), the indexer's PDF tests, and tests/bench/bench_pdf_libs.py
(``big_pdf``).
"""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from fpdf import FPDF

#: Fixed so the output (and fpdf2's /ID, derived from content + date) never changes between runs.
FIXED_DATE = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


#: A sentence unique to page ``n`` (1-based), for tests that check text lands on the right page.
def page_sentence(n: int) -> str:
    """``"The marker for page N is <word>N."`` — a sentence that occurs on page ``n`` only."""
    return f"The marker for page {n} is {_WORDS[n % len(_WORDS)]}{n}."


_WORDS = [
    "amber",
    "basalt",
    "cobalt",
    "dolomite",
    "emerald",
    "feldspar",
    "garnet",
    "hematite",
    "iolite",
    "jasper",
    "kyanite",
    "lapis",
    "malachite",
    "nephrite",
    "obsidian",
    "peridot",
    "quartz",
    "rhodonite",
    "sapphire",
    "topaz",
    "umber",
    "variscite",
    "wavellite",
    "xenotime",
    "yttrium",
    "zircon",
]

_SENTENCES = [
    "Granite tors stand above the moor where walkers stack loose stones into cairns that mark the path.",
    "Each cairn is a small promise that someone passed this way before and found the route sound.",
    "The stones are chosen for weight and shape, and a good builder places the widest at the base.",
    "A well built pile survives the winter gales that sweep across the high ground from the west.",
    "In thick fog the next cairn appears only when the last one fades from sight behind the walker.",
    "Shepherds once used them to count their flocks, adding a stone for every hundred sheep brought down.",
    "Some summit cairns are centuries old and have grown as every visitor added a pebble of their own.",
    "Rangers ask walkers not to build new cairns near the trail, because false markers lead people astray.",
    "On the coast, fishermen read the cairns on the headlands as landmarks when bringing boats home.",
    "Moss and lichen creep over the lower stones first, so the oldest layers turn green and then grey.",
    "After a storm the volunteers walk the ridge and set fallen stones back in their proper places.",
    "Maps from the last century mark the larger cairns by name, and many of those names are still used.",
]


def prose(n: int, sentences: int = 4) -> str:
    """``sentences`` sentences of English prose about cairns, starting at a place that depends on ``n``.

    Different ``n`` give differently wrapped lines, so that no body line repeats at the same place on many pages
    (which would look like a running header).
    """
    return " ".join(_SENTENCES[(n * 5 + i) % len(_SENTENCES)] for i in range(sentences))


class _Doc(FPDF):
    """FPDF with an optional running header ("<text>") and footer ("Page N of M") on every page."""

    def __init__(self, running_header: str | None = None) -> None:
        super().__init__(orientation="P", unit="mm", format="A4")
        self.running_header = running_header
        self.set_creation_date(FIXED_DATE)
        self.set_margins(15, 20, 15)
        self.set_auto_page_break(True, margin=20)
        self.alias_nb_pages()

    def header(self) -> None:  # called by fpdf2 at the start of each page
        if self.running_header:
            self.set_font("Helvetica", size=9)
            self.set_y(8)
            self.cell(0, 5, self.running_header, align="C")
            self.set_y(20)

    def footer(self) -> None:  # called by fpdf2 at the end of each page
        if self.running_header:
            self.set_y(-14)
            self.set_font("Helvetica", size=9)
            self.cell(0, 5, f"Page {self.page_no()} of {{nb}}", align="C")


def _body(pdf: FPDF, text: str) -> None:
    """Write ``text`` at 11 pt; blank lines in ``text`` separate paragraphs (a 4 mm gap)."""
    pdf.set_font("Helvetica", size=11)
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
    for i, para in enumerate(paragraphs):
        if i:
            pdf.ln(4)
        pdf.multi_cell(0, 5.5, para, new_x="LMARGIN", new_y="NEXT")


def _heading(pdf: FPDF, heading: str) -> None:
    pdf.set_font("Helvetica", style="B", size=16)
    pdf.multi_cell(0, 9, heading, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(2)


def text_pdf(
    path: Path,
    pages: Sequence[str] | Sequence[tuple[str | None, str]],
    title: str | None = None,
    running_header: str | None = None,
) -> Path:
    """A PDF with a real text layer: one page per item of ``pages``.

    An item is either the page's body text, or ``(heading, body)``: the heading in 16 pt bold at the top of
    the page, then the body at 11 pt (blank lines in a body separate paragraphs). A body longer than a page
    flows onto extra pages — keep bodies short when page numbers matter. ``title`` becomes the /Title
    metadata. ``running_header`` (e.g. ``"Cairn Field Guide"``) is printed at the top of every page, and a
    footer ``"Page N of M"`` at the bottom of every page.
    """
    pdf = _Doc(running_header)
    if title is not None:
        pdf.set_title(title)
    for item in pages:
        heading, body = item if isinstance(item, tuple) else (None, item)
        pdf.add_page()
        if heading:
            _heading(pdf, heading)
        _body(pdf, body)
    pdf.output(str(path))
    return Path(path)


def numbered_pages(count: int, *, headings: bool = False) -> list:
    """Page contents for :func:`text_pdf`: page ``n`` holds :func:`page_sentence` (n) plus a filler paragraph.

    With ``headings``, each item is ``(f"{n}. Section {word}", body)``.
    """
    items: list = []
    for n in range(1, count + 1):
        body = f"{page_sentence(n)}\n\n{prose(n)}"
        items.append((f"{n}. Section {_WORDS[n % len(_WORDS)].title()}", body) if headings else body)
    return items


def encrypted_pdf(path: Path, user_password: str = "secret") -> Path:
    """A 2-page text PDF encrypted with a user password (RC4-128): nothing can be read without it."""
    pdf = _Doc()
    for n in (1, 2):
        pdf.add_page()
        _body(pdf, f"{page_sentence(n)} This text is locked behind a password.")
    pdf.set_encryption(owner_password="owner-" + user_password, user_password=user_password)
    pdf.output(str(path))
    return Path(path)


def owner_only_encrypted_pdf(path: Path) -> Path:
    """A 2-page text PDF encrypted with an owner password only (empty user password, RC4-128).

    Viewers open it without asking; only editing/printing permissions are restricted. Page n holds
    :func:`page_sentence` (n).
    """
    pdf = _Doc()
    for n in (1, 2):
        pdf.add_page()
        _body(pdf, f"{page_sentence(n)} Anyone may read this page without a password.")
    pdf.set_encryption(owner_password="owner-only", user_password="")
    pdf.output(str(path))
    return Path(path)


def _scan_image(n: int):
    """A grey-ish raster 'scan' (PIL image, 600×800) with some dark bars standing in for printed lines."""
    from PIL import Image, ImageDraw

    img = Image.new("L", (600, 800), 235)
    draw = ImageDraw.Draw(img)
    for row in range(12):
        y = 60 + row * 55
        draw.rectangle([50, y, 550 - (row * 37 + n * 13) % 200, y + 14], fill=40)
    return img


def _image_page(pdf: FPDF, n: int) -> None:
    pdf.add_page()
    buf = io.BytesIO()
    _scan_image(n).save(buf, format="PNG")
    buf.seek(0)
    pdf.image(buf, x=15, y=20, w=180)


def image_only_pdf(path: Path, pages: int = 3) -> Path:
    """A PDF of ``pages`` pages, each only a raster image (a fake scan): no text layer at all."""
    pdf = _Doc()
    for n in range(1, pages + 1):
        _image_page(pdf, n)
    pdf.output(str(path))
    return Path(path)


#: Pages of :func:`mixed_pdf` that are image-only (1-based); the others have text.
MIXED_IMAGE_PAGES = (2, 4, 5)


def mixed_pdf(path: Path) -> Path:
    """A 6-page PDF: pages 1, 3, 6 have text (:func:`page_sentence` (n) and :func:`prose` (n));
    pages 2, 4, 5 (:data:`MIXED_IMAGE_PAGES`) are image-only scans."""
    pdf = _Doc()
    for n in range(1, 7):
        if n in MIXED_IMAGE_PAGES:
            _image_page(pdf, n)
        else:
            pdf.add_page()
            _body(pdf, f"{page_sentence(n)}\n\n{prose(n)}")
    pdf.output(str(path))
    return Path(path)


def truncated_pdf(path: Path) -> Path:
    """A 3-page text PDF cut off after its first page's objects: no page tree, no catalog, no xref, no trailer.

    Nothing in it can be opened as a document (the way a half-finished download or copy looks).
    """
    full = Path(path).with_suffix(".full.tmp")
    text_pdf(full, [page_sentence(n) for n in (1, 2, 3)])
    data = full.read_bytes()
    full.unlink()
    # fpdf2 writes the page objects first and the /Pages tree, catalog, xref and trailer last; cut right after
    # the first page's content stream so none of those survive.
    cut = data.index(b"endstream") + len(b"endstream")
    Path(path).write_bytes(data[:cut] + b"\n")
    return Path(path)


def broken_xref_pdf(path: Path) -> Path:
    """A 3-page text PDF whose xref table offsets all point at the wrong bytes and whose ``startxref`` is wrong.

    The objects themselves are intact, so a lenient reader rebuilds the xref by scanning them (pdfium does):
    page n still holds :func:`page_sentence` (n).
    """
    full = Path(path).with_suffix(".full.tmp")
    text_pdf(full, [page_sentence(n) for n in (1, 2, 3)])
    data = full.read_bytes()
    full.unlink()
    xref = data.rindex(b"\nxref\n")
    tail = re.sub(rb"(?m)^\d{10} 00000 n", b"0000000999 00000 n", data[xref:])
    tail = re.sub(rb"startxref\n\d+", b"startxref\n12", tail)
    Path(path).write_bytes(data[:xref] + tail)
    return Path(path)


def not_a_pdf(path: Path) -> Path:
    """A file named like a PDF that is really a short UTF-8 text note."""
    Path(path).write_text("# Meeting notes\n\nThis was saved with a .pdf extension by mistake.\n", encoding="utf-8")
    return Path(path)


def big_pdf(path: Path, pages: int = 300) -> Path:
    """A ``pages``-page text PDF written fast: heading "Chapter N <Word> Ridge", :func:`page_sentence` (n), prose.

    Each page has the heading (16 pt bold), page n's sentence and ~330 words of English prose in 4 paragraphs
    (about a printed page), a running header "Cairn Field Guide" and a "Page N of M" footer; /Title is
    "The Cairn Field Guide". Lines are pre-wrapped and placed with ``FPDF.text`` (no layout engine):
    about 4 ms per page to write.
    """
    pdf = _Doc("Cairn Field Guide")
    pdf.set_title("The Cairn Field Guide")
    for n in range(1, pages + 1):
        pdf.add_page()
        pdf.set_font("Helvetica", style="B", size=16)
        pdf.text(15, 30, f"Chapter {n} {_WORDS[n % len(_WORDS)].title()} Ridge")
        pdf.set_font("Helvetica", size=11)
        y = 42.0
        pdf.text(15, y, page_sentence(n))
        for para in range(4):
            y += 9.5
            for line in textwrap.wrap(prose(n * 7 + para * 3, 5), 95):
                pdf.text(15, y, line)
                y += 5.5
    pdf.output(str(path))
    return Path(path)


#: A TrueType font with ligature and accented glyphs, where the system has it (Debian/Ubuntu: fonts-dejavu-core).
DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")


def unicode_pdf(path: Path, pages: Sequence[str], font: Path = DEJAVU) -> Path:
    """A text PDF in an embedded TrueType font (default DejaVu Sans), so any Unicode text can be written:
    ligature characters (ﬁ, ﬂ), decomposed accents (``e`` + U+0301), non-Latin scripts. One page per item."""
    pdf = _Doc()
    pdf.add_font("Uni", "", str(font))
    for text in pages:
        pdf.add_page()
        pdf.set_font("Uni", size=11)
        pdf.multi_cell(0, 5.5, text, new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(path))
    return Path(path)


#: Page 3 of the field guide answers the test question; the other pages are about something else.
GUIDE_PAGES = [
    (
        "Introduction",
        "This field guide describes the upland walking routes of the northern moor.\n\n"
        "It was written by the volunteer rangers over three summers.",
    ),
    (
        "Equipment",
        "Carry a map, a compass and waterproof clothing on every walk.\n\n"
        "Boots with a stiff sole make the scree slopes much safer.",
    ),
    (
        "Building a cairn",
        "To build a cairn that lasts the winter, set the three widest flat stones as the base "
        "and lean every stone above slightly inward toward the centre.\n\n"
        "Never take stones from walls or from an existing cairn.",
    ),
    ("Weather", "Fog can fall in minutes; turn back when you cannot see the next marker post."),
]

"""Tidying of the text PDFium gives, page by page (pure: no I/O, no PDF library).

:func:`tidy_pages` turns each page's raw lines (:class:`RawPage`) into a :class:`PdfPage`: running
headers/footers and bare page numbers removed, end-of-line hyphenation re-joined, paragraphs kept, a
heading-like line found per page. The rules: running headers repeat at the top or bottom of many pages; bare
page numbers stand alone on an edge line; a heading is short, unpunctuated, numbered or Title Case or in a
bigger font. PDFium itself marks the end-of-line hyphens it joined (U+FFFE), and gives each line's position
and font size, which the paragraph, running-header and heading rules use.
"""

from __future__ import annotations

import math
import re
import statistics
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PdfPage",
    "RawLine",
    "RawPage",
    "clean_line",
    "format_pages",
    "human_bytes",
    "looks_like_text",
    "tidy_pages",
    "tidy_title",
]

_MB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class PdfPage:
    """One page's text.

    ``number`` is 1-based. ``text`` is NFC, whitespace tidied, ligatures (ﬁ, ﬂ, …) spelled out, end-of-line
    hyphenation re-joined, running headers/footers and bare page numbers removed; paragraphs are separated by
    ``"\\n\\n"`` (detected from vertical gaps), lines by ``"\\n"``; ``""`` when the page has no text.
    ``heading`` is the heading-like line nearest the top of the page (``"3.2 Results"``, ``"Chapter 4
    Installation"``), never a running header, else ``None``.
    """

    number: int
    text: str
    heading: str | None


@dataclass(frozen=True, slots=True)
class RawLine:
    """One line as PDFium gives it: ``text`` (raw, may hold U+FFFE hyphen marks), ``top`` = distance of the
    line's first character's top from the page's top edge in points (``math.nan`` when unknown), ``size`` =
    its font size in points (0 when unknown)."""

    text: str
    top: float = math.nan
    size: float = 0.0


@dataclass(frozen=True, slots=True)
class RawPage:
    """One page before tidying: 1-based ``number``, ``lines`` in content order, page ``height`` in points."""

    number: int
    lines: tuple[RawLine, ...]
    height: float = 0.0


_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st", "ﬆ": "st"})
#: PDFium marks a hyphen it removed at a line break with U+FFFE (older builds: U+0002); soft hyphen U+00AD.
_HYPHEN_MARKS = "\ufffe\x02\xad"
_CONTROL = re.compile(r"[\x00\x01\x03-\x08\x0b-\x1f\x7f\ufeff\u200b]")  # \x02 is a hyphen mark
_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200a\u202f\u205f\u3000]+")
_ROMAN = re.compile(r"^(?=[mdclxvi])m{0,3}(cm|cd|d?c{0,3})(xc|xl|l?x{0,3})(ix|iv|v?i{0,3})$", re.I)
_PAGE_NUMBER = re.compile(
    r"^(?:[-–—\[(|]\s*)?\d{1,5}(?:\s*[-–—\])|])?$"  # 12, - 12 -, [12], (12)
    r"|^(?:page|p\.|pg\.?|seite|pagina|página)\s*\d{1,5}(?:\s*(?:of|/|von|de)\s*\d{1,5})?$"  # Page 12 (of 40)
    r"|^\d{1,5}\s*(?:/|of)\s*\d{1,5}$",  # 12 / 40, 12 of 40
    re.I,
)
_DIGITS = re.compile(r"\d+")
_NUMBERED = re.compile(r"^(?:\d{1,3}(?:\.\d{1,3})*\.?|[A-Z]\.|[IVXLC]{1,6}\.)\s+\S")
_CHAPTER = re.compile(
    r"^(?:chapter|section|part|appendix|annex|lesson|unit|kapitel|chapitre|teil)\s+"
    r"(?:\d{1,3}(?:\.\d{1,3})*|[IVXLC]{1,6}|[A-Z])\b",
    re.I,
)
_CODE_LIKE = re.compile(r"[{}<>=;|\\@#$%^*_~`]|://")
_ONE_WORD_HEADINGS = {
    "abstract",
    "introduction",
    "contents",
    "conclusion",
    "conclusions",
    "references",
    "summary",
    "preface",
    "foreword",
    "acknowledgements",
    "acknowledgments",
    "index",
    "glossary",
    "bibliography",
    "overview",
    "background",
    "discussion",
    "results",
    "methods",
    "methodology",
    "appendix",
    "notes",
    "prologue",
    "epilogue",
    "afterword",
    "installation",
    "usage",
    "examples",
    "license",
    "licence",
    "troubleshooting",
}
_SMALL_WORDS = {
    "a",
    "an",
    "and",
    "as",
    "at",
    "but",
    "by",
    "for",
    "in",
    "of",
    "on",
    "or",
    "the",
    "to",
    "vs",
    "via",
    "with",
    "from",
    "into",
    "over",
    "per",
    "de",
    "la",
    "le",
    "und",
    "der",
    "die",
    "das",
}
#: Lines peeled from each end of a page when looking for running headers/footers and page numbers.
_EDGE_DEPTH = 3


def clean_line(text: str) -> tuple[str, bool, int]:
    """``(tidy line, ends with a hyphenation break, line breaks PDFium already joined inside it)``.

    NFC, ligatures spelled out, control characters dropped, runs of spaces collapsed.
    """
    text = unicodedata.normalize("NFC", text).translate(_LIGATURES)
    text = _CONTROL.sub("", text)
    stripped = text.rstrip()
    hyphen_break = bool(stripped) and stripped[-1] in _HYPHEN_MARKS
    joined = stripped[:-1].count("\ufffe") + stripped[:-1].count("\x02") if stripped else 0
    for mark in _HYPHEN_MARKS:  # inside a line PDFium has already joined the two halves: drop the mark
        stripped = stripped.replace(mark, "")
    return _SPACES.sub(" ", stripped).strip(), hyphen_break, joined


def _edge_key(line: _Line) -> str:
    """Key under which a top/bottom line counts as 'the same' on every page: its text with digits and case
    ignored, and its height on the page (3-point bands) when known."""
    key = _DIGITS.sub("#", " ".join(line.text.lower().split()))
    return key if math.isnan(line.top) else f"{key}@{round(line.top / 3)}"


def _is_page_number(text: str) -> bool:
    t = text.strip()
    return bool(_PAGE_NUMBER.match(t) or (len(t) <= 8 and (t.islower() or t.isupper()) and _ROMAN.match(t)))


@dataclass(slots=True)
class _Line:
    text: str
    top: float
    size: float
    hyphen_break: bool
    joined: int = 0  # physical line breaks inside this line (PDFium joined a hyphenated word across them)


def _page_lines(raw: RawPage) -> list[_Line]:
    out = []
    for line in raw.lines:
        text, hyphen, joined = clean_line(line.text)
        if text:
            out.append(_Line(text, line.top, line.size, hyphen, joined))
    return out


def _edges(lines: list[_Line]) -> tuple[list[int], list[int]]:
    """Indices of the lines nearest the top (first) and the bottom (first = lowest), ``_EDGE_DEPTH`` each.

    Uses positions when known (a footer may come first in the content stream), else content order.
    """
    order = list(range(len(lines)))
    if lines and all(not math.isnan(ln.top) for ln in lines):
        order.sort(key=lambda i: (round(lines[i].top, 1), i))
    return order[:_EDGE_DEPTH], order[::-1][:_EDGE_DEPTH]


def _running_keys(pages: list[list[_Line]]) -> set[str]:
    """Keys of lines repeated at the top or bottom of many pages (running headers/footers).

    A key is running when it sits among the ``_EDGE_DEPTH`` lines nearest an edge on at least 3 pages and
    either on at least half the pages with text, or on 3 pages each at most 2 pages after the previous one
    (chapter-wise headers: a different running title per chapter).
    """
    where: dict[str, list[int]] = {}
    with_text = 0
    for index, lines in enumerate(pages):
        if not lines:
            continue
        with_text += 1
        top, bottom = _edges(lines)
        for key in {_edge_key(lines[i]) for i in (*top, *bottom)}:
            # only lines with letters (bare page numbers are handled apart)
            if re.search(r"[^\W\d_]", key.rpartition("@")[0] or key):
                where.setdefault(key, []).append(index)
    running = set()
    for key, seen in where.items():
        if len(seen) < 3:
            continue
        if len(seen) * 2 >= with_text:
            running.add(key)
            continue
        run = 1
        for a, b in zip(seen, seen[1:]):
            run = run + 1 if b - a <= 2 else 1
            if run >= 3:
                running.add(key)
                break
    return running


_LEADING_NUMBER = re.compile(r"^(\d{1,5})(?![.,:\d])")
_TRAILING_NUMBER = re.compile(r"(?<![.,\d])(\d{1,5})$")


def _edge_numbers(text: str) -> set[tuple[str, int]]:
    """Integers that open or close a line, as ``("lead"|"trail", n)`` ("3 Chapter …", "… Results 12")."""
    found = set()
    for side, pattern in (("lead", _LEADING_NUMBER), ("trail", _TRAILING_NUMBER)):
        m = pattern.search(text)
        if m:
            found.add((side, int(m.group(1))))
    return found


def _page_number_offset(pages: list[list[_Line]], numbers: list[int]) -> tuple[str, int] | None:
    """Where headers/footers print the page number and its constant (printed − PDF page number).

    E.g. "Chapter 2: ASN.1 structure handling 3" on PDF page 6 gives ``("trail", -3)``. Counted over the
    lines nearest the edges; the pair seen on at least 3 pages and on at least 30 % of the pages with text wins.
    """
    seen: dict[tuple[str, int], int] = {}
    with_text = 0
    for lines, number in zip(pages, numbers):
        if not lines:
            continue
        with_text += 1
        top, bottom = _edges(lines)
        offsets = {
            (side, value - number)
            for i in (*top, *bottom)
            if len(lines[i].text.split()) <= 12
            for side, value in _edge_numbers(lines[i].text)
        }
        for offset in offsets:
            seen[offset] = seen.get(offset, 0) + 1
    if not seen:
        return None
    best, count = max(seen.items(), key=lambda kv: (kv[1], -abs(kv[0][1])))
    return best if count >= 3 and count >= 0.3 * with_text else None


def _strip_edges(lines: list[_Line], running: set[str], printed: tuple[str, int] | None = None) -> list[_Line]:
    """Drop running headers/footers and bare page numbers from the top and bottom edges of one page.

    ``printed``: where and which page number this page's header/footer prints (see
    :func:`_page_number_offset`); a short edge line, not in a heading's bigger font, that opens or closes
    with it is a header/footer too.
    """
    body_size = _body_size(lines)
    drop: set[int] = set()
    for _ in range(_EDGE_DEPTH):  # peel: after a header goes, the next line down is the new top edge
        kept = [i for i in range(len(lines)) if i not in drop]
        if not kept:
            break
        sub = [lines[i] for i in kept]
        top, bottom = _edges(sub)
        changed = False
        for edge in (top[:1], bottom[:1]):
            for j in edge:
                line = sub[j]
                if (
                    _edge_key(line) in running
                    or _is_page_number(line.text)
                    or (
                        printed is not None
                        and len(line.text.split()) <= 12
                        and printed in _edge_numbers(line.text)
                        and not (body_size > 0 and line.size > 1.15 * body_size)
                    )
                ):
                    drop.add(kept[j])
                    changed = True
        if not changed:
            break
    return [ln for i, ln in enumerate(lines) if i not in drop]


def _body_size(lines: list[_Line]) -> float:
    sizes = [ln.size for ln in lines if ln.size > 0 for _ in range(max(1, len(ln.text) // 10))]
    return statistics.median(sizes) if sizes else 0.0


def _looks_like_heading(line: _Line, body_size: float) -> bool:
    """A heading is short, has letters, no final sentence punctuation, no code symbols, and is numbered
    ("3.2 Results"), a chapter line ("Chapter 4 Installation"), in a font ≥ 1.15× the body's, ALL CAPS,
    Title Case, or one of the usual one-word section names."""
    t = line.text
    words = t.split()
    if not 2 <= len(t) <= 90 or len(words) > 12 or t[-1] in ".,;:!?" or _is_page_number(t):
        return False
    letters = sum(ch.isalpha() for ch in t)
    if letters < 2 or letters < 0.5 * len(t.replace(" ", "")) or _CODE_LIKE.search(t):
        return False
    if _NUMBERED.match(t) and any(ch.isupper() for ch in t.split(None, 1)[-1][:1]):
        return True
    if _CHAPTER.match(t):
        return True
    if body_size > 0 and line.size >= body_size * 1.15 and len(words) <= 10:
        return True
    alpha = [w for w in words if any(ch.isalpha() for ch in w)]
    if len(alpha) == 1:
        word = alpha[0].strip("“”\"'()").lower()
        return word in _ONE_WORD_HEADINGS and alpha[0][:1].isupper()
    if letters >= 4 and t.upper() == t and len(words) <= 8:
        return True
    significant = [w for w in alpha if w.lower() not in _SMALL_WORDS]
    return (
        2 <= len(alpha) <= 8
        and bool(significant)
        and all(w[:1].isupper() for w in significant)
        and alpha[0][:1].isupper()
    )


def _heading(lines: list[_Line], height: float) -> str | None:
    """The first heading-like line among the top 6 lines (and, when positions are known, in the top 45 %)."""
    body = _body_size(lines)
    for line in lines[:6]:
        if height > 0 and not math.isnan(line.top) and line.top > 0.45 * height:
            break
        if _looks_like_heading(line, body):
            return line.text
    return None


def _join_lines(lines: list[_Line]) -> str:
    """Lines → text: hyphenated breaks re-joined, ``\\n\\n`` where the vertical gap to the next line is over
    1.45× the page's line pitch (the lower quartile of the gaps; 1.2× the font size when there are too few)."""
    gaps = []
    for a, b in zip(lines, lines[1:]):
        gap = (b.top - a.top) / (1 + a.joined)
        if not math.isnan(gap) and 0 < gap < 3 * max(a.size, b.size, 1.0):
            gaps.append(gap)
    pitch = sorted(gaps)[len(gaps) // 4] if len(gaps) >= 2 else 0.0  # most gaps are plain line breaks
    out: list[str] = []
    for i, line in enumerate(lines):
        text = line.text
        if i:
            prev = lines[i - 1]
            if prev.hyphen_break or (re.search(r"[^\W\d_]{2}-$", out[-1]) and text[:1].islower()):
                if not prev.hyphen_break:
                    out[-1] = out[-1][:-1]  # "extrac-" + "tion of" → "extraction" + "\nof"
                first, _, rest = text.partition(" ")
                out[-1] += first
                if rest:
                    out.append("\n" + rest)
                continue
            step = pitch or 1.2 * max(prev.size, line.size)
            gap = line.top - prev.top - prev.joined * step
            paragraph = step > 0 and not math.isnan(gap) and (gap > 1.45 * step or gap < -step)
            out.append("\n\n" if paragraph else "\n")
        out.append(text)
    joined = "".join(out)
    return re.sub(r"\n{3,}", "\n\n", joined).strip()


def tidy_pages(raw_pages: Sequence[RawPage]) -> list[PdfPage]:
    """Raw PDFium lines → :class:`PdfPage` list (same order): the rules of the module docstring.

    Running headers/footers are found across all ``raw_pages`` given (so pass the whole document).
    """
    lines_by_page = [_page_lines(raw) for raw in raw_pages]
    running = _running_keys(lines_by_page)
    offset = _page_number_offset(lines_by_page, [raw.number for raw in raw_pages])
    out = []
    for raw, lines in zip(raw_pages, lines_by_page):
        body = _strip_edges(lines, running, None if offset is None else (offset[0], raw.number + offset[1]))
        out.append(PdfPage(number=raw.number, text=_join_lines(body), heading=_heading(body, raw.height)))
    return out


def format_pages(numbers: Iterable[int], *, limit: int = 12) -> str:
    """``[4, 7, 8, 9]`` → ``"pages 4, 7–9"``; ``[3]`` → ``"page 3"``; more than ``limit`` ranges are elided."""
    nums = sorted(set(numbers))
    spans: list[list[int]] = []  # [first, last] of each run of consecutive numbers
    for n in nums:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    ranges = [str(first) if first == last else f"{first}–{last}" for first, last in spans]
    if len(ranges) > limit:
        ranges = ranges[:limit] + [f"… ({len(nums)} pages in all)"]
    word = "page" if len(nums) == 1 else "pages"
    return f"{word} {', '.join(ranges)}"


def looks_like_text(head: bytes) -> bool:
    """True when ``head`` decodes as UTF-8 (allowing a character cut at the end) without control bytes."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:
            return False
        text = head[: exc.start].decode("utf-8")
    return not any(ord(c) < 32 and c not in "\t\r\n\f" for c in text)


def human_bytes(n: int) -> str:
    """A byte count for people: ``"1024 MB"``, ``"1.5 MB"``, ``"2.0 KB"``, ``"1000 bytes"``."""
    if n >= 10 * _MB:
        return f"{n / _MB:.0f} MB"
    if n >= _MB:
        return f"{n / _MB:.1f} MB"
    if n >= 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n} bytes"


def tidy_title(title: Any) -> str | None:
    """The PDF's /Title metadata, whitespace tidied, or ``None`` when it is empty, a placeholder
    ("untitled", "document", …) or a file name."""
    if not isinstance(title, str):
        return None
    t = " ".join(unicodedata.normalize("NFC", title).split())
    t = re.sub(r"^(microsoft (word|powerpoint|excel) - )", "", t, flags=re.I)
    if (
        len(t) < 2
        or not any(ch.isalpha() for ch in t)
        or t.lower() in {"untitled", "(anonymous)", "title", "document", "unknown"}
    ):
        return None
    if re.fullmatch(r"[\w .()\[\]-]+\.(pdf|docx?|odt|tex|dvi|ps|rtf|txt|pptx?|xlsx?|indd|qxp)", t, re.I):
        return None
    return t

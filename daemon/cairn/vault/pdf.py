"""Text of PDF attachments, page by page, read in a worker subprocess (layer 1, issue 8).

:class:`PdfExtractor` hands each PDF to a long-lived worker process that runs pypdfium2 (PDFium) and streams
the pages back one by one; this side tidies the text (:func:`tidy_pages`): running headers/footers and bare
page numbers removed, end-of-line hyphenation re-joined, paragraphs kept, a heading-like line found per page.

Why a subprocess: PDFium is C++ fed with untrusted files. A crash (segfault), a hang or a memory bomb in it
must cost one file, not the daemon. The worker's address space is capped (``RLIMIT_AS``, 2 GiB by default, on
Linux; best effort elsewhere), a per-file time limit is enforced by killing the worker (the pages that came
back before the limit are kept), and a fresh worker serves the next file. The worker never writes to this
process's stdout (the MCP stdio wire): its stdout is a private pipe that carries only the protocol, and its
file descriptor 1 is pointed at stderr as soon as it starts. pypdfium2 is not thread-safe; the worker makes
every PDFium call from its one main thread, and :meth:`PdfExtractor.extract` holds a lock.

Library choice, measured by ``tests/bench/bench_pdf_libs.py`` on this machine (2 cores shared with other
work, best of 3; two runs, load average ~2.9 then ~1.4), pages/s; "+geometry" is pypdfium2 with the per-line
position and font size this module reads; "Cairn" is the whole :meth:`PdfExtractor.extract` (worker process,
pipe, tidying):

=============================  =====  =========  ==========  =======  ========  =======
PDF                            pages  pypdfium2  +geometry   pypdf    speed-up  Cairn
=============================  =====  =========  ==========  =======  ========  =======
libtasn1.pdf (pdfTeX manual)      36    606-768     396-617    32-41  19x        232-330
shared-mime-info-spec.pdf          17    567-771     400-641    34-47  12-23x     283-339
generated 300 pages (pdfgen)      300   927-1194    727-1132  195-309  4-5x       357-449
=============================  =====  =========  ==========  =======  ========  =======

Quality is on par for words: the same token counts (12,719 / 5,234 / 109,900) and the same share of plain
alphabetic tokens (70.7 / 84.7 / 98.6 %); neither leaves ligature characters in these PDFs. Hyphenation
differs: PDFium marks an end-of-line hyphen itself (U+FFFE) and joins the word — all 31 in libtasn1.pdf come
back whole — while pypdf leaves 23 words split as ``manip-\nulation`` for a heuristic to guess. PDFium also
gives each line's position and font size cheaply, which the paragraph, running-header and heading rules use.
So: pypdfium2 (4-23x faster, better hyphenation, geometry). The worker's start (spawn Python, import
pypdfium2, "ready") costs ~130-250 ms: once per daemon, after each killed or crashed worker, and every 200 files.

Where the rules come from: issue 8 and its brief (running headers repeat at the top/bottom of many pages;
bare page numbers; a heading is short, unpunctuated, numbered or Title Case or in a bigger font).
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import re
import statistics
import subprocess
import sys
import threading
import time
import unicodedata
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.errors import PdfReadError

__all__ = ["PdfPage", "PdfText", "PdfExtractor", "RawLine", "RawPage", "tidy_pages", "format_pages", "TEST_HOOK_ENV"]

log = logging.getLogger(__name__)

#: Test hook, read by :meth:`PdfExtractor.extract` from the environment at each call and passed to the
#: worker: ``stall:N`` (the worker hangs on page N), ``crash:N`` (the worker exits abruptly on page N;
#: N = 0 while opening), ``hog`` (the worker tries to allocate 8 GiB while opening), ``shout`` (the worker
#: prints to its stdout while opening). Tests only.
TEST_HOOK_ENV = "CAIRN_PDF_TEST_HOOK"

_MB = 1024 * 1024
#: Seconds a fresh worker may take to import pypdfium2 and say it is ready.
_START_TIMEOUT_S = 30.0
#: A worker is replaced by a fresh one after this many files (bounds whatever PDFium leaks or caches).
_FILES_PER_WORKER = 200


# ------------------------------------------------------------------------------------------------ results


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
class PdfText:
    """What could be read of one PDF.

    ``pages``: every page extracted, in order, pages without text included (``text == ""``); fewer than
    ``page_count`` when a page or time limit was reached or the reader crashed part-way. ``page_count``: pages
    in the document. ``title``: the /Title metadata when present and non-trivial (not empty, not
    "untitled", not a file name), else ``None``. ``problems``: human-readable reasons for what was NOT indexed
    (pages without a text layer, page/time limit, unreadable pages), each naming the pages; empty when
    everything was indexed. ``elapsed_ms``: wall time of the extraction in milliseconds (worker start excluded).
    """

    pages: tuple[PdfPage, ...]
    page_count: int
    title: str | None
    problems: tuple[str, ...]
    elapsed_ms: float = 0.0


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


# ------------------------------------------------------------------------------------------------ tidying

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


def _clean_line(text: str) -> tuple[str, bool, int]:
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
        text, hyphen, joined = _clean_line(line.text)
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
    ranges: list[str] = []
    start = prev = None
    for n in [*nums, None]:
        if start is not None and (n is None or n != prev + 1):
            ranges.append(str(start) if start == prev else f"{start}–{prev}")
            start = None
        if n is not None and start is None:
            start = n
        prev = n
    if len(ranges) > limit:
        ranges = ranges[:limit] + [f"… ({len(nums)} pages in all)"]
    word = "page" if len(nums) == 1 else "pages"
    return f"{word} {', '.join(ranges)}"


def _looks_like_text(head: bytes) -> bool:
    """True when ``head`` decodes as UTF-8 (allowing a character cut at the end) without control bytes."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:
            return False
        text = head[: exc.start].decode("utf-8")
    return not any(ord(c) < 32 and c not in "\t\r\n\f" for c in text)


def _human_bytes(n: int) -> str:
    if n >= 10 * _MB:
        return f"{n / _MB:.0f} MB"
    if n >= _MB:
        return f"{n / _MB:.1f} MB"
    if n >= 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n} bytes"


def _tidy_title(title: Any) -> str | None:
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


# ------------------------------------------------------------------------------------------------ worker side


def _limit_memory(limit_bytes: int) -> None:
    """Cap the worker's address space (Linux: RLIMIT_AS; other Unixes: best effort; Windows: none)."""
    try:
        import resource
    except ImportError:  # Windows
        return
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = limit_bytes if hard == resource.RLIM_INFINITY else min(limit_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ValueError, OSError, AttributeError):
        pass


def _worker_main() -> None:
    """Entry point of the worker process: JSON requests on stdin, JSON messages on the private pipe.

    Started by :class:`PdfExtractor` as ``python -c "from cairn.vault.pdf import _worker_main; _worker_main()"``
    with its stdout a pipe to the parent. That pipe is moved to a private descriptor at once and descriptor 1
    pointed at stderr, so nothing PDFium or Python prints can reach the protocol or the parent's stdout.
    """
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
    os.dup2(2, 1)
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the daemon's terminal: the daemon decides
    parent = os.getppid()

    def orphan_watch() -> None:  # the daemon died (even by SIGKILL) while a file hangs PDFium: go too
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=orphan_watch, name="orphan-watch", daemon=True).start()
    limit = int(os.environ.get("CAIRN_PDF_WORKER_MEMORY", str(2 * 1024 * _MB)))
    _limit_memory(limit)

    def send(msg: dict) -> None:
        proto.write(json.dumps(msg) + "\n")
        proto.flush()

    import pypdfium2  # noqa: F401  (imported before "ready" so the start cost is paid once, up front)

    send({"t": "ready", "pid": os.getpid()})
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        request = json.loads(raw)
        try:
            _serve(request, send, limit)
        except MemoryError:
            send({"t": "error", "kind": "memory", "detail": f"over the reader's memory limit ({_human_bytes(limit)})"})
            os._exit(3)  # the heap may be in a bad state: the parent starts a fresh worker
        except BrokenPipeError:
            os._exit(0)


def _hook(request: dict, point: str, page: int) -> None:
    hook = str(request.get("hook") or "")
    kind, _, arg = hook.partition(":")
    at = int(arg) if arg.isdigit() else 0
    if kind == "stall" and point == "page" and page == at:
        time.sleep(3600)
    if kind == "crash" and ((point == "open" and at == 0) or (point == "page" and page == at)):
        os._exit(70)
    if kind == "hog" and point == "open":
        bytearray(8 * 1024 * _MB)
    if kind == "shout" and point == "open":  # what a chatty C library would do: must not reach the protocol
        os.write(1, b"pdf worker: raw write to fd 1\n")


def _serve(request: dict, send, memory_limit: int) -> None:
    """Extract one PDF: an ``open`` message, then one ``page`` message per page, then ``done`` (or ``error``)."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    _hook(request, "open", 0)
    try:
        doc = pdfium.PdfDocument(request["path"])
    except pdfium.PdfiumError as exc:
        code = getattr(exc, "err_code", None)
        kind = {
            pdfium_c.FPDF_ERR_PASSWORD: "password",
            pdfium_c.FPDF_ERR_SECURITY: "security",
            pdfium_c.FPDF_ERR_FILE: "file",
        }.get(code, "damaged")
        send({"t": "error", "kind": kind, "detail": str(exc)})
        return
    except (OSError, ValueError) as exc:
        send({"t": "error", "kind": "file", "detail": str(exc)})
        return
    except Exception as exc:  # noqa: BLE001 — anything else PDFium's wrapper throws: this file only
        send({"t": "error", "kind": "damaged", "detail": f"{type(exc).__name__}: {exc}"})
        return
    try:
        count = len(doc)
        try:
            title = doc.get_metadata_dict().get("Title")
        except Exception:  # noqa: BLE001 — metadata is optional
            title = None
        send({"t": "open", "pages": count, "title": title})
        for index in range(min(count, int(request["max_pages"]))):
            _hook(request, "page", index + 1)
            try:
                lines, height = _read_page(doc, index, pdfium_c)
            except MemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 — a bad page costs that page only
                send({"t": "page", "n": index + 1, "error": f"{type(exc).__name__}: {exc}"})
                continue
            send({"t": "page", "n": index + 1, "h": height, "lines": lines})
        send({"t": "done"})
    finally:
        doc.close()


_BREAK = re.compile(r"\r\n|\r|\n")


def _read_page(doc, index: int, pdfium_c) -> tuple[list[list], float]:
    """``([[text, top, size], ...], page height)`` for page ``index`` (0-based); top/size from the first
    non-space character of each line (PDFium's text index → char index → box and font size)."""
    page = doc[index]
    try:
        height = float(page.get_height())
        textpage = page.get_textpage()
        try:
            text = textpage.get_text_range()
            lines: list[list] = []
            start = 0
            for m in [*_BREAK.finditer(text), None]:
                end = m.start() if m else len(text)
                segment = text[start:end]
                top, size = math.nan, 0.0
                offset = len(segment) - len(segment.lstrip())
                if segment.strip():
                    char = pdfium_c.FPDFText_GetCharIndexFromTextIndex(textpage, start + offset)
                    if char >= 0:
                        box = textpage.get_charbox(char)
                        top = round(height - box[3], 2)
                        size = round(float(pdfium_c.FPDFText_GetFontSize(textpage, char)), 2)
                    lines.append([segment, top, size])
                if m:
                    start = m.end()
            return lines, height
        finally:
            textpage.close()
    finally:
        page.close()


# ------------------------------------------------------------------------------------------------ parent side


class _Worker:
    """One worker process and the thread that reads its messages into a queue (``None`` = it exited)."""

    def __init__(self, memory_limit: int) -> None:
        started = time.perf_counter()
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])  # .../daemon (holds the cairn package)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        env["CAIRN_PDF_WORKER_MEMORY"] = str(memory_limit)
        flags = getattr(subprocess, "CREATE_NO_WINDOW", 0) if os.name == "nt" else 0
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from cairn.vault.pdf import _worker_main; _worker_main()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,
                env=env,
                creationflags=flags,
            )
        except OSError as exc:
            raise PdfReadError(f"cannot start the PDF reader process ({sys.executable}): {exc}") from None
        self.messages: queue.Queue[dict | None] = queue.Queue()
        self.files = 1  # files handed to this worker (counting the one it is started for)
        self._reader = threading.Thread(target=self._read, name=f"pdf-worker-{self.proc.pid}", daemon=True)
        self._reader.start()
        try:
            msg: dict | None | str = self.get(_START_TIMEOUT_S)
        except queue.Empty:
            msg = "timeout"
        if not isinstance(msg, dict) or msg.get("t") != "ready":
            self.kill()
            said = (
                "exited before it was ready"
                if msg is None
                else f"was not ready after {_START_TIMEOUT_S:g} s"
                if msg == "timeout"
                else f"said {msg!r}"
            )
            raise PdfReadError(
                f"cannot start the PDF reader: its process {said} (is pypdfium2 installed? "
                "its error is in Cairn's log/stderr)"
            )
        self.start_ms = (time.perf_counter() - started) * 1000

    def _read(self) -> None:
        try:
            for raw in self.proc.stdout:
                try:
                    self.messages.put(json.loads(raw))
                except ValueError:
                    log.warning("pdf worker: unreadable message %r", raw[:200])
        except (OSError, ValueError):
            pass
        finally:
            self.messages.put(None)

    def get(self, timeout: float) -> dict | None:
        """The next message; ``None`` when the worker exited; raises ``queue.Empty`` after ``timeout`` s."""
        return self.messages.get(timeout=max(0.0, timeout))

    def send(self, request: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(request) + "\n").encode("utf-8"))
        self.proc.stdin.flush()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover — SIGKILL does not wait on the child
            log.warning("pdf worker %s did not exit after kill", self.proc.pid)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass

    def stop(self) -> None:
        """Ask politely (close stdin: the worker's loop ends), then kill after 2 s."""
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


def _stop_worker(holder: dict) -> None:
    worker = holder.pop("worker", None)
    if worker is not None:
        worker.stop()


def _exit_reason(returncode: int | None) -> str:
    if returncode is None:
        return "exited"
    if returncode < 0:
        import signal

        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


class PdfExtractor:
    """Extracts PDFs in a worker subprocess: a crash or hang in the PDF library cannot take the daemon down,
    and the per-file time limit is enforced by killing the worker (then a fresh one serves the next file).

    ``max_pages``: pages read per file (the rest are named in ``problems``); ``max_bytes``: larger files are
    refused; ``timeout_s``: wall seconds per file, worker start not included; ``memory_limit_bytes``: the
    worker's address-space cap (Linux RLIMIT_AS; a PDF bomb fails that file only). The config keys are
    ``pdf_max_pages``, ``pdf_max_bytes``, ``pdf_timeout_s``. The worker starts on the first :meth:`extract`
    (~130-250 ms) and stays for the next files. Thread-safe (one extraction at a time). Use as a context
    manager or call :meth:`close`; a forgotten extractor's worker is stopped when it is garbage-collected
    or at interpreter exit.
    """

    def __init__(
        self,
        *,
        max_pages: int = 2000,
        max_bytes: int = 200 * 1024 * 1024,
        timeout_s: float = 120.0,
        memory_limit_bytes: int = 2 * 1024 * _MB,
    ) -> None:
        if max_pages < 1 or max_bytes < 1 or not timeout_s > 0:
            raise ValueError(
                f"max_pages, max_bytes and timeout_s must be positive, got {max_pages}, {max_bytes}, {timeout_s}"
            )
        self.max_pages = int(max_pages)
        self.max_bytes = int(max_bytes)
        self.timeout_s = float(timeout_s)
        self.memory_limit_bytes = int(memory_limit_bytes)
        self._lock = threading.Lock()  # one extraction at a time
        self._state = threading.Lock()  # guards _holder and _busy (close() must not wait for an extraction)
        self._holder: dict[str, _Worker] = {}
        self._busy = False
        self._interrupted = False
        self._finalizer = weakref.finalize(self, _stop_worker, self._holder)
        #: Milliseconds the most recent worker took to start (None before the first start).
        self.last_start_ms: float | None = None
        #: How many workers were started (1 + one per killed or crashed worker).
        self.workers_started = 0

    def __enter__(self) -> PdfExtractor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker process at once (idempotent); a later :meth:`extract` starts a new one.

        An extraction under way in another thread ends with :class:`~cairn.errors.PdfReadError` ("stopped: …")
        within moments; its caller should not record that as the file's reason.
        """
        with self._state:
            worker = self._holder.pop("worker", None)
            busy = self._busy
            if busy:
                self._interrupted = True
        if worker is not None:
            if busy:
                worker.kill()
            else:
                worker.stop()

    @property
    def busy(self) -> bool:
        """True while an :meth:`extract` call is under way."""
        return self._busy

    @property
    def worker_pid(self) -> int | None:
        """The current worker's process id (None when none is running)."""
        worker = self._holder.get("worker")
        return worker.proc.pid if worker is not None and worker.alive() else None

    def _worker(self) -> _Worker:
        with self._state:
            worker = self._holder.get("worker")
        if worker is not None and worker.alive() and worker.files < _FILES_PER_WORKER:
            worker.files += 1
            return worker
        if worker is not None:
            worker.stop()
        worker = _Worker(self.memory_limit_bytes)
        with self._state:
            self._holder["worker"] = worker
        self.last_start_ms = worker.start_ms
        self.workers_started += 1
        log.debug("pdf worker %s started in %.0f ms", worker.proc.pid, worker.start_ms)
        return worker

    def _discard(self, worker: _Worker) -> int | None:
        worker.kill()
        with self._state:
            if self._holder.get("worker") is worker:
                del self._holder["worker"]
        return worker.proc.returncode

    def extract(self, path: Path) -> PdfText:
        """Read ``path``'s text page by page; see :class:`PdfText`.

        Raises :class:`~cairn.errors.PdfReadError` when nothing can be indexed: the file cannot be read, is
        over ``max_bytes``, is not a PDF, needs a password, is damaged beyond repair, has no text on any page,
        hit the time limit before the first page, or the reader crashed or ran out of memory before it.
        Partial results (page or time limit, reader crash part-way, pages without text) come back with
        ``problems`` set.
        """
        path = Path(path)
        with self._lock:
            try:
                size = path.stat().st_size
                with path.open("rb") as fh:
                    head = fh.read(1024)
            except OSError as exc:
                raise PdfReadError(f"cannot read the file: {exc.strerror or exc}") from None
            if size > self.max_bytes:
                raise PdfReadError(
                    f"too big: {_human_bytes(size)}, over pdf_max_bytes {_human_bytes(self.max_bytes)}"
                    f"; raise pdf_max_bytes in the config to index it"
                )
            if b"%PDF-" not in head:  # the reason goes to logs and /index/stats: never quote the file's bytes
                kind = "text" if _looks_like_text(head) else "binary data"
                raise PdfReadError(
                    f"not a PDF: the file holds {kind}, not a PDF header (%PDF-); is it another kind "
                    "of file with a .pdf name?"
                    if head
                    else "not a PDF: the file is empty"
                )
            request = {
                "path": str(path.resolve()),
                "max_pages": self.max_pages,
                "hook": os.environ.get(TEST_HOOK_ENV) or None,
            }
            with self._state:
                self._busy, self._interrupted = True, False
            try:
                worker = self._worker()
                try:
                    worker.send(request)
                except OSError:  # the idle worker died (killed from outside): one fresh try
                    self._discard(worker)
                    worker = self._worker()
                    worker.send(request)
                return self._collect(worker)
            finally:
                with self._state:
                    self._busy = False

    def _collect(self, worker: _Worker) -> PdfText:
        started = time.monotonic()
        deadline = started + self.timeout_s
        page_count: int | None = None
        title = None
        raw_pages: list[RawPage] = []
        failed: dict[int, str] = {}
        stopped: str | None = None  # why reading stopped early
        while True:
            try:
                msg = worker.get(deadline - time.monotonic())
            except queue.Empty:
                self._discard(worker)
                stopped = "timeout"
                break
            if msg is None:
                code = self._discard(worker)
                if self._interrupted:
                    raise PdfReadError("stopped: the PDF reader was closed while reading this file")
                stopped = f"crash:{_exit_reason(code)}"
                break
            kind = msg.get("t")
            if kind == "open":
                page_count, title = int(msg["pages"]), msg.get("title")
            elif kind == "page":
                number = int(msg["n"])
                if "error" in msg:
                    failed[number] = str(msg["error"])
                    raw_pages.append(RawPage(number, (), 0.0))
                else:
                    lines = tuple(
                        RawLine(t, math.nan if top is None else float(top), float(size or 0))
                        for t, top, size in msg["lines"]
                    )
                    raw_pages.append(RawPage(number, lines, float(msg.get("h") or 0.0)))
            elif kind == "done":
                break
            elif kind == "error":
                if msg.get("kind") == "memory":
                    self._discard(worker)
                    if not raw_pages:
                        raise PdfReadError(
                            f"the PDF reader went {msg.get('detail')} (a PDF bomb?); the file is skipped"
                        )
                    stopped = f"memory:{msg.get('detail')}"
                    break
                raise self._open_error(msg)
        elapsed_ms = (time.monotonic() - started) * 1000
        return self._result(raw_pages, page_count, title, failed, stopped, elapsed_ms)

    @staticmethod
    def _open_error(msg: dict) -> PdfReadError:
        kind, detail = msg.get("kind"), str(msg.get("detail") or "")
        detail = re.sub(r"^Failed to load document \((.*)\)\.?$", r"\1", detail)
        if kind == "password":
            return PdfReadError("encrypted: needs a password; Cairn cannot index it")
        if kind == "security":
            return PdfReadError(
                f"encrypted with a security handler PDFium does not support ({detail}); Cairn cannot index it"
            )
        if kind == "file":
            return PdfReadError(f"cannot open: the PDF reader could not read the file ({detail})")
        return PdfReadError(f"cannot open: damaged or truncated PDF ({detail})")

    def _result(
        self,
        raw_pages: list[RawPage],
        page_count: int | None,
        title: Any,
        failed: dict[int, str],
        stopped: str | None,
        elapsed_ms: float,
    ) -> PdfText:
        limit_s = f"{self.timeout_s:g} s"
        if page_count is None or not raw_pages:
            if stopped == "timeout":
                raise PdfReadError(
                    f"time limit {limit_s} reached before the first page was read; "
                    "raise pdf_timeout_s in the config to index it"
                )
            if stopped and stopped.startswith("crash:"):
                where = "opening the file" if page_count is None else "reading page 1"
                raise PdfReadError(f"the PDF reader crashed while {where} (it {stopped[6:]}); the file is skipped")
            if page_count == 0:
                raise PdfReadError("the PDF has no pages")
        assert page_count is not None
        pages = tidy_pages(raw_pages)
        problems: list[str] = []
        wanted = min(page_count, self.max_pages)
        got = max((p.number for p in raw_pages), default=0)
        if stopped and got < wanted:
            missing = format_pages(range(got + 1, wanted + 1))
            if stopped == "timeout":
                problems.append(
                    f"time limit {limit_s} reached: {missing} not indexed "
                    f"(raise pdf_timeout_s in the config to index them)"
                )
            elif stopped.startswith("memory:"):
                problems.append(f"the PDF reader went {stopped[7:]} on page {got + 1}: {missing} not indexed")
            else:
                problems.append(f"the PDF reader crashed on page {got + 1} (it {stopped[6:]}): {missing} not indexed")
        if page_count > self.max_pages:
            beyond = format_pages(range(self.max_pages + 1, page_count + 1))
            problems.append(
                f"page limit {self.max_pages} reached: {beyond} not indexed "
                f"(raise pdf_max_pages in the config to index them)"
            )
        if failed:
            first = next(iter(failed.values()))
            problems.append(f"{format_pages(failed)} could not be read by the PDF reader ({first})")
        no_text = [
            raw.number
            for raw in raw_pages
            if raw.number not in failed and not any(_clean_line(ln.text)[0] for ln in raw.lines)
        ]
        if raw_pages and len(no_text) + len(failed) == len(raw_pages):
            if len(no_text) == page_count:
                reason = f"no text layer on any of the {page_count} pages (scanned images?); OCR is not supported"
            elif no_text:
                reason = f"no text layer on {format_pages(no_text)} (scanned images?); OCR is not supported"
            else:
                reason = "no page could be read"
            raise PdfReadError("; ".join([reason, *problems]))
        if no_text:
            verb = "has" if len(no_text) == 1 else "have"
            problems.insert(0, f"{format_pages(no_text)} {verb} no text layer (scanned images?); OCR is not supported")
        return PdfText(
            pages=tuple(pages),
            page_count=page_count,
            title=_tidy_title(title),
            problems=tuple(problems),
            elapsed_ms=round(elapsed_ms, 1),
        )

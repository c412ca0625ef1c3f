"""Where a note's code and Obsidian comments are, so they yield no tags or links (layer 0, pure).

Block structure comes from markdown-it-py (CommonMark with GFM tables, as Obsidian renders them); code spans are
found with CommonMark's backtick-string rule inside each inline block, because markdown-it-py's inline tokens carry
no column positions.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from functools import lru_cache

from markdown_it.token import Token

_BACKTICKS_RE = re.compile(r"`+")
_MAYBE_INDENTED_RE = re.compile(r"^(?: {0,3}\t| {4})", re.MULTILINE)


def line_starts(text: str) -> list[int]:
    starts = [0]
    for m in re.finditer("\n", text):
        starts.append(m.end())
    return starts


@lru_cache(maxsize=1)
def _block_parser():  # -> MarkdownIt (import kept local: no work at import time)
    from markdown_it import MarkdownIt

    # Only block structure is needed; inline parsing is most of the cost.
    return MarkdownIt("commonmark").enable("table").disable(["inline", "text_join"])


#: The last body parsed by :func:`block_tokens` and its tokens, one tuple so that a thread reads both at once.
_last: tuple[str, list[Token]] | None = None


def block_tokens(text: str) -> list[Token]:
    """markdown-it-py's block tokens of ``text`` (CommonMark and tables; inline content not parsed). Read only.

    A note's body is parsed once for its code ranges (:func:`strip_comments`) and once more for its chunks
    (:class:`cairn.chunking.blocks.Blocks`) unless the same string object comes back: the last call's tokens are
    kept for it (the identity check costs nothing; an equal but distinct string is parsed again).
    """
    global _last
    last = _last
    if last is not None and last[0] is text:
        return last[1]
    tokens = _block_parser().parse(text)
    _last = (text, tokens)
    return tokens


def _code_ranges(text: str) -> list[tuple[int, int]]:
    """Character ranges of code in ``text``: fenced/indented blocks and inline code spans."""
    if "`" not in text and "~~~" not in text and not _MAYBE_INDENTED_RE.search(text):
        return []  # no fence, code span or indented line: nothing for markdown-it to find
    starts = line_starts(text)
    n_lines = len(starts)

    def offset(line: int) -> int:
        return starts[line] if line < n_lines else len(text)

    ranges: list[tuple[int, int]] = []
    scanned = None  # a table row's cells share the row's line map: each row is scanned once
    for tok in block_tokens(text):
        if tok.map is None:
            continue
        if tok.type in ("fence", "code_block"):
            ranges.append((offset(tok.map[0]), offset(tok.map[1])))
        elif tok.type == "inline" and tok.map != scanned:
            scanned = tok.map
            a, b = offset(tok.map[0]), offset(tok.map[1])
            ranges.extend(_code_spans(text, a, b))
    ranges.sort()
    return ranges


def _code_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """CommonMark code spans in text[start:end]: a backtick run closed by a run of the same length."""
    spans: list[tuple[int, int]] = []
    runs = [(m.start(), m.end()) for m in _BACKTICKS_RE.finditer(text, start, end)]
    i = 0
    while i < len(runs):
        a, b = runs[i]
        # A backslash-escaped first backtick is literal (backslashes count outside spans only).
        k, slashes = a - 1, 0
        while k >= start and text[k] == "\\":
            slashes += 1
            k -= 1
        if slashes % 2 == 1:
            a += 1
            if a == b:
                i += 1
                continue
        length = b - a
        for j in range(i + 1, len(runs)):
            if runs[j][1] - runs[j][0] == length:
                spans.append((a, runs[j][1]))
                i = j + 1
                break
        else:
            i += 1
    return spans


def _in_ranges(pos: int, ranges: list[tuple[int, int]], starts: list[int]) -> bool:
    k = bisect.bisect_right(starts, pos) - 1
    return k >= 0 and ranges[k][0] <= pos < ranges[k][1]


def strip_comments(body: str) -> tuple[str, list[tuple[int, int]]]:
    """Blank Obsidian comments; return (blanked body, code ranges).

    In document order, whichever comes first wins: a ``%%`` inside code is
    literal, and inside a comment nothing is parsed (a code fence in a comment
    does not hide the text after it). A comment runs to the next ``%%``; an
    unclosed one hides the rest of the note, as in Obsidian's reading view.

    Code structure is taken from the text as written (a line holding only a
    comment is not a blank line, so it does not turn a following indented line
    into a code block). Only when a comment contains backticks or tildes, which
    could open a fence, is the structure found again, on a copy where the
    comment is a run of ``x`` of the same shape.
    """
    code = _code_ranges(body)
    if "%%" not in body:
        return body, code
    structure = body
    comments: list[tuple[int, int]] = []
    starts = [r[0] for r in code]
    pos = 0
    while True:
        i = body.find("%%", pos)
        if i < 0:
            break
        if _in_ranges(i, code, starts):
            pos = i + 1
            continue
        close = body.find("%%", i + 2)
        end = len(body) if close < 0 else close + 2
        comments.append((i, end))
        if "`" in body[i:end] or "~" in body[i:end]:
            structure = blank(structure, [(i, end)], "x")
            code = _code_ranges(structure)
            starts = [r[0] for r in code]
        pos = end
    return blank(body, comments), code


_NOT_NEWLINE_RE = re.compile(r"[^\n]")


def blank(text: str, ranges: Iterable[tuple[int, int]], fill: str = " ") -> str:
    """Replace every character in ``ranges`` with ``fill`` (a space), keeping newlines."""
    parts: list[str] = []
    last = 0
    for a, b in sorted(ranges):
        a = max(a, last)
        if b <= a:
            continue
        parts.append(text[last:a])
        parts.append(_NOT_NEWLINE_RE.sub(fill, text[a:b]))
        last = b
    parts.append(text[last:])
    return "".join(parts)


#: An Obsidian block id: ``^`` and letters, digits or dashes ending a line, after a space (``text ^d1``) or alone
#: on its line under the block it names.
_BLOCK_ID_RE = re.compile(r"(?:^|[ \t]+)\^[A-Za-z0-9-]+[ \t]*$", re.MULTILINE)


def strip_block_ids(text: str) -> str:
    """``text`` without Obsidian block-id markers (``We chose option B. ^d1`` → ``We chose option B.``), for text
    shown to a reader (answers, snippets). The ids stay in the index: ``[[Note#^d1]]`` still resolves."""
    return _BLOCK_ID_RE.sub("", text) if "^" in text else text

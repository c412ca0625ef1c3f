"""Where a note's code and Obsidian comments are, so they yield no tags or links (layer 0, pure).

Code blocks and code spans come from one pulldown-cmark parse of the body (:mod:`cairn.notes.markdown`: CommonMark
with GFM tables, as Obsidian renders them), which the chunker reads too.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable

from cairn.notes.markdown import BlockToken, ParsedBlocks, parse_blocks

_MAYBE_INDENTED_RE = re.compile(r"^(?: {0,3}\t| {4})", re.MULTILINE)


def line_starts(text: str) -> list[int]:
    starts = [0]
    for m in re.finditer("\n", text):
        starts.append(m.end())
    return starts


#: The last body parsed by :func:`parsed_blocks` and its parse, one tuple so that a thread reads both at once.
_last: tuple[str, ParsedBlocks] | None = None


def parsed_blocks(text: str) -> ParsedBlocks:
    """The block tokens and code spans of ``text`` (:func:`cairn.notes.markdown.parse_blocks`). Read only.

    A note's body is parsed once for its code ranges (:func:`strip_comments`) and once more for its chunks
    (:class:`cairn.chunking.blocks.Blocks`) unless the same string object comes back: the last call's parse is
    kept for it (the identity check costs nothing; an equal but distinct string is parsed again).
    """
    global _last
    last = _last
    if last is not None and last[0] is text:
        return last[1]
    parsed = parse_blocks(text)
    _last = (text, parsed)
    return parsed


def block_tokens(text: str) -> list[BlockToken]:
    """The block tokens of ``text`` (:class:`cairn.notes.markdown.BlockToken`, in document order). Read only."""
    return parsed_blocks(text).tokens


def code_ranges(text: str) -> list[tuple[int, int]]:
    """Character ranges of code in ``text``, in order: fenced and indented code blocks (their whole lines) and
    inline code spans (backticks included)."""
    if "`" not in text and "~~~" not in text and not _MAYBE_INDENTED_RE.search(text):
        return []  # no fence, code span or indented line: nothing to find
    parsed = parsed_blocks(text)
    starts = line_starts(text)
    n_lines = len(starts)

    def offset(line: int) -> int:
        return starts[line] if line < n_lines else len(text)

    ranges = list(parsed.code_spans)
    for tok in parsed.tokens:
        if tok.type in ("fence", "code_block") and tok.map is not None:
            ranges.append((offset(tok.map[0]), offset(tok.map[1])))
    ranges.sort()
    return ranges


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
    code = code_ranges(body)
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
            code = code_ranges(structure)
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

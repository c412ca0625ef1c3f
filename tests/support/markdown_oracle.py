"""The markdown-it-py path Cairn parsed with before pulldown-cmark (pyromark): the fidelity oracle of
tests/test_markdown_fidelity.py, kept as it was (block tokens, code ranges by a backtick rescan, heading text).

:func:`oracle_path` swaps it in for :mod:`cairn.notes.markdown` (what :mod:`cairn.notes.markup` and
:mod:`cairn.chunking.blocks` read), so the same note can be parsed and chunked both ways and compared.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

from markdown_it import MarkdownIt

import cairn.chunking.blocks as blocks_module
import cairn.notes.markup as markup_module
from cairn.notes.markup import line_starts

_BACKTICKS_RE = re.compile(r"`+")
_MAYBE_INDENTED_RE = re.compile(r"^(?: {0,3}\t| {4})", re.MULTILINE)


@lru_cache(maxsize=1)
def _block_parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table").disable(["inline", "text_join"])


@lru_cache(maxsize=1)
def _inline_parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("strikethrough")


def block_tokens(text: str) -> list:
    """markdown-it-py's block tokens of ``text`` (CommonMark and tables; inline content not parsed)."""
    return _block_parser().parse(text)


def code_ranges(text: str) -> list[tuple[int, int]]:
    """Character ranges of code in ``text``: fenced/indented blocks and inline code spans."""
    if "`" not in text and "~~~" not in text and not _MAYBE_INDENTED_RE.search(text):
        return []
    starts = line_starts(text)
    n_lines = len(starts)

    def offset(line: int) -> int:
        return starts[line] if line < n_lines else len(text)

    ranges: list[tuple[int, int]] = []
    scanned = None
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
    spans: list[tuple[int, int]] = []
    runs = [(m.start(), m.end()) for m in _BACKTICKS_RE.finditer(text, start, end)]
    i = 0
    while i < len(runs):
        a, b = runs[i]
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


def heading_text(raw: str) -> str:
    """The plain text of a heading's inline content by markdown-it-py's inline parser (the old clean_heading's
    parse step, after its wikilink, highlight and block-id rewrites)."""
    tokens = _inline_parser().parseInline(raw)
    parts: list[str] = []
    for tok in tokens[0].children or () if tokens else ():
        if tok.type in ("text", "code_inline"):
            parts.append(tok.content)
        elif tok.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif tok.type == "image":
            parts.append("".join(c.content for c in tok.children or ()))
    return "".join(parts)


@contextmanager
def oracle_path() -> Iterator[None]:
    """Within the block, :mod:`cairn.notes.markup` and :mod:`cairn.chunking.blocks` parse with markdown-it-py."""
    saved = markup_module.code_ranges, blocks_module.block_tokens, blocks_module.heading_text
    markup_module.code_ranges = code_ranges
    blocks_module.block_tokens = block_tokens
    blocks_module.heading_text = heading_text
    try:
        yield
    finally:
        markup_module.code_ranges, blocks_module.block_tokens, blocks_module.heading_text = saved

"""The markdown block structure of a note body: sections, block trees and their smallest cuts (layer 0, pure).

The block tokens of :mod:`cairn.notes.markdown` (their line maps, in markdown-it-py's shape) tell where
paragraphs, lists, list items, quotes, code and tables start; :class:`Blocks` turns them into sections (heading
path + content blocks) and, for a section too long for one chunk, into a tree of :class:`Node` down to
:class:`Unit` cuts (sentences, lines, table rows).
Counting tokens and packing pieces is :mod:`cairn.chunking.assembly`'s job.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice

from cairn.notes.markdown import heading_text
from cairn.notes.markup import block_tokens

_WIKILINK = re.compile(r"!?\[\[([^\[\]|#^]*)(?:#\^?([^\[\]|]*))?(?:\|([^\[\]]*))?\]\]")
_HIGHLIGHT = re.compile(r"==(?=\S)(.+?)(?<=\S)==")
_STRIKETHROUGH = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_BLOCK_ID = re.compile(r"\s+\^[A-Za-z0-9-]+\s*$")
_MARKUP_CHARS = re.compile(r"[*_`\[\]<>\\=!~&]")
_SPACES = re.compile(r"\s+")


def _wikilink_display(m: re.Match[str]) -> str:
    target, sub, alias = m.group(1).strip(), (m.group(2) or "").strip(), m.group(3)
    if alias is not None and alias.strip():
        return alias.strip()
    if target and sub:
        return f"{target} > {sub}"
    return target or sub


def clean_heading(raw: str) -> str:
    """Return a heading's plain text: markup removed, whitespace collapsed.

    ``raw`` is the heading content without its ``#`` markers (the parser already
    drops the closing ``#`` run). Links become their text, wikilinks their alias
    or target (``[[Note#Part]]`` → ``Note > Part``), images their alt text;
    emphasis, code ticks, ``==highlight==`` and ``~~strikethrough~~`` markers, HTML
    tags and a trailing ``^block-id`` are removed. Inline ``#tags`` are kept as written.
    """
    text = _BLOCK_ID.sub("", raw)
    if _MARKUP_CHARS.search(text):
        text = _WIKILINK.sub(_wikilink_display, text)
        text = _HIGHLIGHT.sub(r"\1", text)
        text = _STRIKETHROUGH.sub(r"\1", text)
        text = heading_text(text)
    return _SPACES.sub(" ", text).strip()


@dataclass(slots=True)
class Unit:
    """A smallest cut of a long section (sentence, line, code line, table row), counted once."""

    start: int  # char offsets into the (normalised) body, end exclusive
    end: int
    tokens: int | None  # None: certainly over the budget, not counted


@dataclass(slots=True)
class Node:
    """A block of a long section: either children blocks or, for a leaf, its units."""

    start: int
    end: int
    kind: str  # prose | code | table (leaves); containers are "prose"
    children: list[Node]
    units: list[Unit]
    table: tuple[int, int, int] | None = None  # header rows (start, end, tokens) of a table leaf

    def all_units(self) -> list[Unit]:
        if not self.children:
            return self.units
        return [u for c in self.children for u in c.all_units()]


_SENTENCE_OR_LINE = re.compile(r"(?:(?<=[.!?…。！？])[\"')\]]*[ \t]+|\n[ \t]*)(?=\S)")
#: A word: a run of non-space characters.
WORD = re.compile(r"\S+")
_PUNCT = re.compile(r"[!-/:-@\[-`{-~]")
_PIECE = re.compile(r"[!-/:-@\[-`{-~]|[^\s!-/:-@\[-`{-~]+")


#: A content block of a section: ``(start, end, token_index | None)``, char offsets (top-level
#: blocks from :meth:`Blocks._top_blocks` are line ranges in the same shape).
Block = tuple[int, int, int | None]
#: ``(heading_path, start, end, blocks, glue_until)``: see :meth:`Blocks.sections`.
Section = tuple[tuple[str, ...], int, int, list[Block], int]


@dataclass(slots=True)
class _SectionWalk:
    """The sections found so far while :meth:`Blocks.sections` walks the top-level blocks in order."""

    sections: list[Section] = field(default_factory=list)
    stack: list[tuple[int, str]] = field(default_factory=list)  # open headings (level, text)
    path: tuple[str, ...] = ()
    start: int | None = None  # char offset where the current section (its heading) starts
    glue: int = 0  # end of the current heading line(s)
    blocks: list[Block] = field(default_factory=list)
    pending: int | None = None  # start of folded heading-only sections

    def heading(self, level: int, text: str, start: int, end: int) -> None:
        """A heading opens a section: it pops every open heading of the same or deeper level."""
        self.flush()
        self.blocks = []
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, text))
        self.path = tuple(h for _, h in self.stack)
        self.start = start
        self.glue = end

    def block(self, start: int, end: int, index: int | None) -> None:
        if not self.blocks and self.start is not None:
            start = self.start  # first block of a section carries the heading
        self.blocks.append((start, end, index))

    def flush(self) -> None:
        """Close the current section; one without content is folded into the next (``pending``)."""
        blocks = self.blocks
        if blocks:
            start = self.pending if self.pending is not None else blocks[0][0]
            first = (start, blocks[0][1], blocks[0][2])
            self.sections.append((self.path, start, blocks[-1][1], [first, *blocks[1:]], self.glue))
            self.pending = None
        elif self.start is not None and self.pending is None:
            self.pending = self.start


class Blocks:
    """The block structure of one normalised note body (LF line endings): offsets, block tokens, sections."""

    def __init__(self, body: str, body_line: int) -> None:
        self.body = body
        self.body_line = body_line
        self.line_starts = [0]
        self.line_starts.extend(m.end() for m in re.finditer("\n", body))
        self.tokens = block_tokens(body)
        self.close_of = self._match_closers()
        self.special = self._special_intervals()
        self.special_ends = [b for _, b, _ in self.special]
        self.trailing_heading: tuple[int, int] | None = None

    # ----- offsets

    def _line_char(self, line: int) -> int:
        """Char offset of the start of 0-based ``line`` (len(body) past the end)."""
        if line < len(self.line_starts):
            return self.line_starts[line]
        return len(self.body)

    def _rstrip(self, start: int, end: int) -> int:
        """``end`` moved back over trailing whitespace (not before ``start``)."""
        if end <= start or not self.body[end - 1].isspace():
            return end
        return start + len(self.body[start:end].rstrip())

    def _lstrip(self, start: int, end: int) -> int:
        while start < end and self.body[start].isspace():
            start += 1
        return start

    def _line_of(self, offset: int) -> int:
        """1-based file line of char ``offset``."""
        return bisect_right(self.line_starts, offset) + self.body_line - 1

    # ----- token structure

    def _match_closers(self) -> dict[int, int]:
        close_of: dict[int, int] = {}
        stack: list[int] = []
        for i, tok in enumerate(self.tokens):
            if tok.nesting == 1:
                stack.append(i)
            elif tok.nesting == -1 and stack:
                close_of[stack.pop()] = i
        return close_of

    def _special_intervals(self) -> list[tuple[int, int, str]]:
        """Char intervals of code blocks and tables at any depth, in order (they never overlap)."""
        out = []
        for tok in self.tokens:
            if tok.map is None:
                continue
            if tok.type in ("fence", "code_block"):
                kind = "code"
            elif tok.type == "table_open":
                kind = "table"
            else:
                continue
            out.append((self._line_char(tok.map[0]), self._line_char(tok.map[1]), kind))
        return out

    def _kind(self, spans: Sequence[tuple[int, int]]) -> str:
        """``code``/``table`` when more than half the spans' characters are inside one, else ``prose``."""
        total = sum(e - s for s, e in spans)
        if total <= 0:
            return "prose"
        share = {"code": 0, "table": 0}
        for s, e in spans:
            for a, b, kind in self.special[bisect_right(self.special_ends, s) :]:
                if a >= e:
                    break
                share[kind] += min(b, e) - max(a, s)
        for kind in ("code", "table"):
            if share[kind] * 2 > total:
                return kind
        return "prose"

    def _map(self, index: int) -> list[int]:
        """The line map of block token ``index``, one that has one (:meth:`_children` gives only those)."""
        line_map = self.tokens[index].map
        assert line_map is not None
        return line_map

    def _children(self, index: int) -> list[int]:
        """Indices of the direct child block tokens (with a line map) of opening token ``index``."""
        tok = self.tokens[index]
        end = self.close_of.get(index, index)
        level = tok.level + 1
        return [
            j
            for j in range(index + 1, end)
            if self.tokens[j].level == level and self.tokens[j].nesting >= 0 and self.tokens[j].map is not None
        ]

    # ----- sections

    def sections(self) -> list[Section]:
        """Split the body into sections.

        Returns ``(heading_path, start, end, blocks, glue_until)`` per section:
        ``start``/``end`` are char offsets (end stripped), ``blocks`` are
        ``(start, end, token_index | None)`` content blocks in order (the first
        starts at ``start`` so it carries the heading lines), and ``glue_until``
        is the end of the heading line(s), inside which no split may happen.
        Heading-only sections are already folded into the next section; a
        trailing one is left in :attr:`trailing_heading` (``(start, end)`` or ``None``).
        """
        walk = _SectionWalk()
        for a, b, index in self._top_blocks():
            s = self._line_char(a)
            e = self._rstrip(s, self._line_char(b))
            if e <= s:
                continue  # blank gap
            heading = self._heading(index)
            if heading is not None:
                walk.heading(*heading, s, e)
            else:
                walk.block(s, e, index)
        walk.flush()
        pending = walk.pending
        self.trailing_heading = (pending, self._rstrip(pending, len(self.body))) if pending is not None else None
        return walk.sections

    def _top_blocks(self) -> list[Block]:
        """Top-level blocks as consecutive ``(line_start, line_end, token_index | None)`` line ranges.

        Non-blank lines that no token maps (e.g. link reference definitions) become their own block.
        """
        top: list[Block] = []
        covered = 0
        for i, tok in enumerate(self.tokens):
            if tok.level != 0 or tok.nesting == -1 or tok.map is None:
                continue
            a, b = tok.map
            if a > covered:
                top.append((covered, a, None))
            top.append((a, b, i))
            covered = max(covered, b)
        n_lines = len(self.line_starts)
        if covered < n_lines:
            top.append((covered, n_lines, None))
        return top

    def _heading(self, index: int | None) -> tuple[int, str] | None:
        """``(level, cleaned text)`` when block token ``index`` is a heading with text, else ``None``."""
        tok = self.tokens[index] if index is not None else None
        if tok is None or index is None or tok.type != "heading_open":
            return None
        heading = clean_heading(self.tokens[index + 1].content)
        return (int(tok.tag[1]), heading) if heading else None

    def _surely_over(self, start: int, end: int, budget: int) -> bool:
        """True when ``[start, end)`` certainly has more than ``budget`` tokens, without tokenizing.

        Lower bound: every ASCII punctuation mark and every run of other
        non-space characters is at least one token (true of WordPiece, whose
        pre-tokenizer splits at whitespace and punctuation). It spares the
        tokenizer the long spans that get split anyway; with a tokenizer for
        which the bound is wrong, chunks only come out smaller than needed.
        """
        return next(islice(_PIECE.finditer(self.body, start, end), budget, None), None) is not None

    # ----- structure of a long section

    def _node(self, start: int, end: int, index: int | None, glue: int) -> Node:
        """The block tree of ``[start, end)`` (block token ``index``) down to leaves cut into units.

        Containers (lists, list items, quotes/callouts) descend into their child
        blocks; child k spans from its first line to the next child's, and what
        precedes the first child (a heading carried in, a marker line) rides with it.
        """
        tok = self.tokens[index] if index is not None else None
        if tok is not None and tok.type in ("fence", "code_block"):
            return Node(start, end, "code", [], self._units(start, end, "code", glue, fence=tok.type == "fence"))
        if tok is not None and tok.type == "table_open":
            return self._table_node(start, end, tok, glue)
        if tok is not None and index is not None and tok.nesting == 1 and tok.type != "paragraph_open":
            kids = self._children(index)
            if len(kids) == 1:
                return self._node(start, end, kids[0], glue)
            if kids:
                bounds = [start, *(self._line_char(self._map(j)[0]) for j in kids[1:]), end]
                children = []
                for k, j in enumerate(kids):
                    s = bounds[k] if k == 0 else self._lstrip(bounds[k], bounds[k + 1])
                    e = self._rstrip(s, bounds[k + 1])
                    if e > s:
                        children.append(self._node(s, e, j, glue))
                return Node(start, end, "prose", children, [])
        return Node(start, end, "prose", [], self._units(start, end, "prose", glue))

    def _table_node(self, start: int, end: int, tok, glue: int) -> Node:
        """A table leaf: the header + delimiter rows as one unit, then one unit per row."""
        a, b = tok.map
        rows = [self._line_char(line) for line in range(a, b)]
        if len(rows) < 3:
            return Node(start, end, "table", [], self._units(start, end, "table", glue))
        h_end = self._rstrip(rows[0], rows[2])
        units = [Unit(start, h_end, None)]
        for k in range(2, len(rows)):
            s = rows[k]
            e = self._rstrip(s, rows[k + 1] if k + 1 < len(rows) else end)
            if e > s:
                units.append(Unit(s, e, None))
        if units[-1].end < end:  # lines the table map does not cover (should not happen)
            units.append(Unit(self._lstrip(units[-1].end, end), end, None))
        # header tokens for repetition: counted separately only when a heading rides on the header unit
        node = Node(start, end, "table", [], units)
        node.table = (rows[0], h_end, -1)
        return node

    def _units(self, start: int, end: int, kind: str, glue: int, fence: bool = False) -> list[Unit]:
        """Cut a leaf at sentence ends and line breaks (prose) or lines (code, table)."""
        bounds = self._boundaries(start, end, "sentences" if kind == "prose" else "lines", glue)
        if fence and len(bounds) >= 2:
            bounds = bounds[1:-1]  # keep the opening fence with the first code line, the closing with the last
        edges = [start, *bounds, end]
        units = []
        for k in range(len(edges) - 1):
            e = self._rstrip(edges[k], edges[k + 1])
            if e > edges[k]:
                units.append(Unit(edges[k], e, None))
        return units

    def _boundaries(self, start: int, end: int, level: str, glue: int) -> list[int]:
        if level == "lines":
            found = [m.end() for m in re.finditer("\n", self.body[start:end])]
            found = [start + b for b in found]
        elif level == "sentences":
            found = [m.end() for m in _SENTENCE_OR_LINE.finditer(self.body, start, end)]
        elif level == "words":
            found = [m.start() for m in WORD.finditer(self.body, start, end)]
        else:  # after each ASCII punctuation mark: WordPiece splits there too, so counts stay additive
            found = [m.end() for m in _PUNCT.finditer(self.body, start, end)]
        # no cut between a heading and the first content after it
        floor = self._lstrip(glue, end) if start < glue else start
        return [b for b in found if floor < b < end]

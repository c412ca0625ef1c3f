"""A note body's block structure and code spans from pulldown-cmark (pyromark): layer 0, pure.

One parse (CommonMark with GFM tables, as Obsidian renders them) gives both what :mod:`cairn.notes.markup` needs
(where code is, so it yields no tags or links) and what :class:`cairn.chunking.blocks.Blocks` needs (where
paragraphs, lists, list items, quotes, code, tables and headings start and end). The blocks come as
:class:`BlockToken`, in the shape of markdown-it-py's block tokens (``type``, ``nesting``, ``level``, line
``map``, ``tag``, ``content``), which the chunker was written against and the tests still compare with; code spans
come with their own ranges, so no backtick rescan is needed.

pulldown-cmark reports UTF-8 byte ranges; they become line numbers (block maps) and character offsets (code).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

import pyromark

#: CommonMark and GFM tables; no other extension changes what is a block or a code span in Obsidian's reading view.
_OPTIONS = pyromark.Options.ENABLE_TABLES
_NEWLINE_B = re.compile(b"\n")

#: pulldown-cmark's container blocks → markdown-it-py's token type stem (``<stem>_open`` / ``<stem>_close``).
_CONTAINERS = {"Paragraph": "paragraph", "BlockQuote": "blockquote", "Item": "list_item"}
#: Blocks whose inner events make no token: a table (one ``table_open``/``table_close`` pair) and leaves.
_SKIPPED = frozenset({"Table", "CodeBlock", "HtmlBlock"})
#: Inline events (and the starts of inline containers): inside a list item they are a tight item's paragraph.
_INLINE = frozenset(
    {"Text", "Code", "InlineHtml", "SoftBreak", "HardBreak", "Emphasis", "Strong", "Strikethrough", "Link", "Image"}
)


@dataclass(slots=True)
class BlockToken:
    """One block token, as markdown-it-py would give it (its attributes have the same names and meanings).

    ``type``: ``paragraph_open``, ``heading_open``, ``blockquote_open``, ``bullet_list_open``,
    ``ordered_list_open``, ``list_item_open``, ``table_open`` (each with its ``_close``), ``inline`` (a heading's
    text), ``fence``, ``code_block``, ``html_block``, ``hr``. ``nesting``: 1 opens, -1 closes, 0 is a leaf.
    ``level``: how many blocks it is inside. ``map``: ``[first line, line after the last]``, 0-based lines of the
    body (``None`` on closing tokens). ``tag``: ``h1``…``h6`` on a heading. ``content``: a heading's text as
    written, without its ``#`` markers or underline.
    """

    type: str
    nesting: int
    level: int
    map: list[int] | None
    tag: str = ""
    content: str = ""


@dataclass(slots=True)
class ParsedBlocks:
    """A body's block tokens (in document order) and the character ranges of its inline code spans (backticks
    included, in order)."""

    tokens: list[BlockToken]
    code_spans: list[tuple[int, int]]


class _Offsets:
    """UTF-8 byte offsets of one text → its lines and characters."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.ascii = text.isascii()
        self.raw = text.encode()
        self.line_bytes = [0, *(m.end() for m in _NEWLINE_B.finditer(self.raw))]
        self._line_chars: list[int] | None = None

    def line(self, byte: int) -> int:
        """0-based line of ``byte``."""
        return bisect_right(self.line_bytes, byte) - 1

    def line_map(self, start: int, end: int) -> list[int]:
        """``[first line, line after the last]`` of the bytes ``[start, end)``; blank lines around it left out
        (pulldown-cmark starts a nested list item's range at the end of the line before)."""
        raw = self.raw
        while end > start + 1 and raw[end - 1] in b" \t\n":
            end -= 1
        while start < end - 1 and raw[start] in b" \t\n":
            start += 1
        first = self.line(start)
        return [first, max(first, self.line(max(start, end - 1))) + 1]

    def char(self, byte: int) -> int:
        """Character offset of ``byte`` (a character boundary)."""
        if self.ascii:
            return byte
        if self._line_chars is None:
            starts = [0]
            starts.extend(m.end() for m in re.finditer("\n", self.text))
            self._line_chars = starts
        k = self.line(byte)
        line_start = self.line_bytes[k]
        return self._line_chars[k] + len(self.raw[line_start:byte].decode())


def parse_blocks(text: str) -> ParsedBlocks:
    """The block tokens and code spans of ``text`` (a note body, LF line endings). Never raises for any text."""
    walk = _Walk(_Offsets(text))
    for event, span in pyromark.events_with_range(text, options=_OPTIONS, merge_text=True):
        walk.event(event, span["start"], span["end"])
    walk.close_tight_paragraph(walk.last_end)
    return ParsedBlocks(walk.tokens, walk.code_spans)


class _Walk:
    """State of :func:`parse_blocks` while it reads pulldown-cmark's events in order."""

    def __init__(self, offsets: _Offsets) -> None:
        self.at = offsets
        self.tokens: list[BlockToken] = []
        self.code_spans: list[tuple[int, int]] = []
        self.stack: list[str] = []  # open block containers, markdown-it type stems
        self.skip = 0  # depth inside a table or a code block (their inner events make no token)
        self.heading: BlockToken | None = None  # the inline token of the heading being read
        self.heading_span: list[int] = []  # byte range of that heading's inline events so far
        self.tight: int | None = None  # byte start of a tight list item's paragraph being read
        self.tight_end = 0
        self.last_end = 0

    def emit(self, type_: str, nesting: int, line_map: list[int] | None, tag: str = "") -> BlockToken:
        """Append a token: an opening or closing one sits at its container's level (pushed before, popped after)."""
        level = len(self.stack) - (1 if nesting else 0)
        tok = BlockToken(type_, nesting, level, line_map, tag)
        self.tokens.append(tok)
        return tok

    def open(self, stem: str, start: int, end: int, tag: str = "") -> None:
        self.stack.append(stem)
        self.emit(f"{stem}_open", 1, self.at.line_map(start, end), tag)

    def close(self, stem: str) -> None:
        self.emit(f"{stem}_close", -1, None)
        self.stack.pop()

    def close_tight_paragraph(self, end: int) -> None:
        """Close the paragraph made for a tight list item's text (markdown-it-py makes a hidden one)."""
        if self.tight is None:
            return
        start, self.tight = self.tight, None
        self.stack.append("paragraph")
        self.emit("paragraph_open", 1, self.at.line_map(start, max(end, start + 1)))
        self.close("paragraph")

    def event(self, event: Any, start: int, end: int) -> None:
        self.last_end = end
        if type(event) is str:  # SoftBreak, HardBreak, Rule
            if event == "Rule" and not self.skip:
                self.close_tight_paragraph(start)
                self.emit("hr", 0, self.at.line_map(start, end))
            else:
                self.inline(event, start, end)
            return
        ((kind, value),) = event.items()
        if kind == "Start":
            self.start(value, start, end)
        elif kind == "End":
            self.end(value, start, end)
        elif kind == "Code":
            self.code_spans.append((self.at.char(start), self.at.char(end)))
            self.inline(kind, start, end)
        else:
            self.inline(kind, start, end)

    def inline(self, kind: str, start: int, end: int) -> None:
        if self.skip:
            return
        if self.heading is not None:
            self.heading_span.extend((start, end))
        elif self.stack and self.stack[-1] == "list_item" and kind in _INLINE:
            if self.tight is None:
                self.tight, self.tight_end = start, end
            else:
                self.tight_end = max(self.tight_end, end)

    def start(self, value: Any, start: int, end: int) -> None:
        arg: Any
        name, arg = (value, None) if type(value) is str else next(iter(value.items()))
        if self.skip:
            self.skip += name in _SKIPPED
            return
        if name in _INLINE:
            self.inline(name, start, end)
            return
        self.close_tight_paragraph(self.tight_end)
        if name == "CodeBlock":
            self.emit("code_block" if arg == "Indented" else "fence", 0, self.at.line_map(start, end))
            self.skip = 1
        elif name == "HtmlBlock":
            self.emit("html_block", 0, self.at.line_map(start, end))
            self.skip = 1
        elif name == "Table":
            self.open("table", start, end)
            self.skip = 1
        elif name == "Heading":
            self.open("heading", start, end, "h" + str(arg["level"])[1])
            self.heading = self.emit("inline", 0, self.tokens[-1].map)
            self.heading_span = []
        elif name == "List":
            self.open("bullet_list" if arg is None else "ordered_list", start, end)
        elif name in _CONTAINERS:
            self.open(_CONTAINERS[name], start, end)
        else:  # a block this parser's options never produce (footnotes, metadata): kept as a container
            self.open(name.lower(), start, end)

    def end(self, value: Any, start: int, end: int) -> None:
        name = value if type(value) is str else next(iter(value))
        if self.skip:
            self.skip -= name in _SKIPPED
            if self.skip or name != "Table":
                return
        if name in _INLINE:
            return
        self.close_tight_paragraph(self.tight_end)
        if name == "Heading" and self.heading is not None:
            if self.heading_span:
                a, b = self.at.char(min(self.heading_span)), self.at.char(max(self.heading_span))
                self.heading.content = self.at.text[a:b].strip()
            self.heading = None
        self.close(self.stack[-1])


def heading_text(raw: str) -> str:
    """The text a reader sees of a heading's content ``raw`` (as written, without its ``#`` markers): emphasis,
    code ticks, link and image syntax and inline HTML removed, entities and escapes resolved; line breaks become
    spaces. Never raises."""
    parts: list[str] = []
    event: Any
    for event in pyromark.events("# " + raw.replace("\n", " "), options=_OPTIONS):
        if type(event) is str:
            if event in ("SoftBreak", "HardBreak"):
                parts.append(" ")
            continue
        ((kind, value),) = event.items()
        if kind in ("Text", "Code"):
            parts.append(str(value))
    return "".join(parts)

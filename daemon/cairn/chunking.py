"""Heading-aware chunking of a note body into embedding-sized pieces (layer 0, pure).

A note body (the text after front-matter, comments already blanked) is cut into
:class:`Chunk` objects, each small enough that its *embedding text*
(:func:`embed_text`: the note title, the heading path and the chunk text) fits
the embedding model's window: ``count_tokens(embed_text(title, path, text)) <=
max_tokens`` holds for every chunk, title and heading prefix included. The
default ``max_tokens=254`` is all-MiniLM-L6-v2's 256-token window minus
``[CLS]`` and ``[SEP]`` (DESIGN.md, Flows → Index: "≤ 256 tokens of the
embedding tokenizer, with overlap").

Rules (in order of precedence):

1. **Blocks come from markdown-it-py** (CommonMark + tables): its token line
   maps tell where paragraphs, lists, list items, block quotes (and so Obsidian
   callouts), fenced/indented code and tables start, so a ``#`` line inside a
   fence is never a heading and a fence or table is only ever cut between lines.
2. **Sections.** A section is a heading (ATX or setext) plus everything up to
   the next heading of any level. The heading path is a stack: a heading pops
   every open heading of the same or deeper level, so an H2 after an H3 replaces
   both. Text before the first heading has the path ``()``.
3. **One chunk per section when it fits** (heading line included at the start).
   Tiny sections are *not* merged with their neighbours: without a retrieval
   measurement showing it helps, a chunk stays one section with one symbol.
4. **No heading-only chunks.** A heading with no content of its own is folded
   into the next chunk (whose text then starts at that heading); a trailing
   empty heading is appended to the previous chunk if that still fits, and
   dropped otherwise. A note with nothing but headings yields ``[]``.
5. **Long sections are split** at block boundaries (top-level blocks, then the
   items of a list / the blocks of a quote or callout, recursively), then a
   paragraph at sentence ends and line breaks, then at spaces, and as a last
   resort inside a word. Pieces are packed greedily, in order, up to the budget.
   A code block is split by lines; a table by rows, the header row and its
   delimiter row repeated at the start of every continuation piece.
6. **Overlap.** When a prose piece follows a prose piece of the same section,
   the next chunk starts with up to ``overlap_tokens`` of the previous piece's
   tail: its last whole sentences/lines when at least one fits, else the
   longest word-aligned tail of its last sentence. Never for code or tables.
7. **Kind.** ``"code"`` or ``"table"`` when more than half of the chunk's
   characters lie inside fenced/indented code or a table, else ``"prose"``.
8. **Coverage.** Pieces are consecutive spans of the body, so every non-blank
   line belongs to at least one chunk (except a dropped trailing empty heading,
   rule 4).

Text and line numbers: ``Chunk.text`` is a contiguous slice of the body (only a
table continuation piece adds the table's header rows in front of the slice),
without leading blank lines or trailing whitespace; a piece that starts inside
indented code or a nested list keeps its first line's indentation. Line endings ``\\r\\n`` and lone ``\\r`` are
read as one line break each and become ``\\n`` in ``Chunk.text``. Line numbers
count those breaks (not ``str.splitlines``' extra separators such as form feed),
1-based, plus ``body_line - 1``.

Cost: a section that fits is tokenized once (its final count). A long section
is cut into units (sentences/lines, code lines, table rows) that are counted
once each; block and piece sizes are sums of unit counts, and every emitted
piece is then counted for real, so roughly twice its text. Spans that
certainly exceed the budget (by a punctuation/word lower bound) are never sent
to the tokenizer.

The module does no I/O and imports no model runtime; the caller supplies
``count_tokens`` (see :func:`chunk_note`). Output is deterministic.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice

__all__ = ["Chunk", "chunk_note", "clean_heading", "embed_text", "SYMBOL_SEPARATOR"]

#: Separator between title and headings in :func:`embed_text` and :attr:`Chunk.symbol`.
SYMBOL_SEPARATOR = " › "


@dataclass(frozen=True, slots=True)
class Chunk:
    """One retrievable piece of a note.

    Attributes:
        ordinal: 0-based position of the chunk in the note.
        heading_path: cleaned heading texts from the outermost heading to the
            chunk's own section, e.g. ``("Callouts", "Foldable callouts")``;
            ``()`` before the first heading. Components may be shortened (with
            ``…``) in the pathological case where the path alone would not leave
            room for text in the embedding window.
        text: the chunk's markdown as in the note (a table continuation piece
            starts with the table's header and delimiter rows).
        line_start: first file line (1-based, inclusive) of the chunk's text.
        line_end: last file line (1-based, inclusive).
        kind: ``"prose"``, ``"code"`` or ``"table"``.
        token_count: ``count_tokens(embed_text(title, heading_path, text))``,
            always ``<= max_tokens`` of the :func:`chunk_note` call.
    """

    ordinal: int
    heading_path: tuple[str, ...]
    text: str
    line_start: int
    line_end: int
    kind: str
    token_count: int

    @property
    def symbol(self) -> str:
        """The heading path joined with ``" › "`` (``""`` before the first heading)."""
        return SYMBOL_SEPARATOR.join(self.heading_path)


def embed_text(title: str, heading_path: Sequence[str], text: str) -> str:
    """Return the string that is embedded (and token-counted) for a chunk.

    Format: ``"<title> › <h1> › <h2>\\n<text>"``; the title alone on the first
    line when there are no headings; empty parts are skipped; without text the
    result is the first line only. The indexer must embed exactly this string so
    that the :attr:`Chunk.token_count` guarantee holds.
    """
    head = SYMBOL_SEPARATOR.join(p for p in (title, *heading_path) if p)
    if not text:
        return head
    if not head:
        return text
    return f"{head}\n{text}"


# --------------------------------------------------------------------------- markdown


@lru_cache(maxsize=1)
def _block_parser():  # -> MarkdownIt (import kept local: no work at import time)
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    # Only block structure is needed; inline parsing is most of the cost.
    md.disable(["inline", "text_join"])
    return md


@lru_cache(maxsize=1)
def _inline_parser():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("strikethrough")


_WIKILINK = re.compile(r"!?\[\[([^\[\]|#^]*)(?:#\^?([^\[\]|]*))?(?:\|([^\[\]]*))?\]\]")
_HIGHLIGHT = re.compile(r"==(?=\S)(.+?)(?<=\S)==")
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

    ``raw`` is the heading content without its ``#`` markers (markdown-it already
    drops the closing ``#`` run). Links become their text, wikilinks their alias
    or target (``[[Note#Part]]`` → ``Note > Part``), images their alt text;
    emphasis, code ticks, ``==highlight==`` markers, HTML tags and a trailing
    ``^block-id`` are removed. Inline ``#tags`` are kept as written.
    """
    text = _BLOCK_ID.sub("", raw)
    if _MARKUP_CHARS.search(text):
        text = _WIKILINK.sub(_wikilink_display, text)
        text = _HIGHLIGHT.sub(r"\1", text)
        tokens = _inline_parser().parseInline(text)
        parts: list[str] = []
        for tok in tokens[0].children or () if tokens else ():
            if tok.type in ("text", "code_inline"):
                parts.append(tok.content)
            elif tok.type in ("softbreak", "hardbreak"):
                parts.append(" ")
            elif tok.type == "image":
                parts.append("".join(c.content for c in tok.children or ()))
        text = "".join(parts)
    return _SPACES.sub(" ", text).strip()


# --------------------------------------------------------------------------- chunking


@dataclass(slots=True)
class _Unit:
    """A smallest cut of a long section (sentence, line, code line, table row), counted once."""

    start: int  # char offsets into the (normalised) body, end exclusive
    end: int
    tokens: int | None  # None: certainly over the budget, not counted


@dataclass(slots=True)
class _Node:
    """A block of a long section: either children blocks or, for a leaf, its units."""

    start: int
    end: int
    kind: str  # prose | code | table (leaves); containers are "prose"
    children: list[_Node]
    units: list[_Unit]
    table: tuple[int, int, int] | None = None  # header rows (start, end, tokens) of a table leaf

    def all_units(self) -> list[_Unit]:
        if not self.children:
            return self.units
        return [u for c in self.children for u in c.all_units()]


@dataclass(slots=True)
class _Atom:
    """A span of the body that fits the text budget on its own; the packing unit."""

    start: int
    end: int
    tokens: int
    kind: str  # prose | code | table
    units: list[_Unit]  # its counted cuts, for sentence-aligned overlap
    table: tuple[int, int, int] | None = None  # header to repeat when a piece starts with this (table row) atom


_SENTENCE_OR_LINE = re.compile(r"(?:(?<=[.!?…。！？])[\"')\]]*[ \t]+|\n[ \t]*)(?=\S)")
_WORD = re.compile(r"\S+")
_PUNCT = re.compile(r"[!-/:-@\[-`{-~]")
_SPLIT_LEVELS = ("words", "punct")
_PIECE = re.compile(r"[!-/:-@\[-`{-~]|[^\s!-/:-@\[-`{-~]+")


class _Chunker:
    """State for one :func:`chunk_note` call (body, offsets, token counter)."""

    def __init__(
        self,
        body: str,
        title: str,
        body_line: int,
        count_tokens: Callable[[str], int],
        max_tokens: int,
        overlap_tokens: int,
        count_tokens_batch: Callable[[list[str]], Sequence[int]] | None = None,
    ) -> None:
        self.count_batch = count_tokens_batch
        self.body = body
        self.title = title
        self.body_line = body_line
        self.count = count_tokens
        self.max_tokens = max_tokens
        self.overlap_tokens = overlap_tokens
        self.line_starts = [0]
        self.line_starts.extend(m.end() for m in re.finditer("\n", body))
        self.tokens = _block_parser().parse(body)
        self.close_of = self._match_closers()
        self.special = self._special_intervals()
        self.special_ends = [b for _, b, _ in self.special]

    def _count_many(self, texts: list[str]) -> list[int]:
        """Token counts of several strings: one batch call when a batch counter was given."""
        if self.count_batch is not None and len(texts) > 1:
            counts = list(self.count_batch(texts))
            if len(counts) != len(texts):
                raise ValueError(f"count_tokens_batch returned {len(counts)} counts for {len(texts)} texts")
            return counts
        return [self.count(t) for t in texts]

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

    def sections(self) -> list[tuple[tuple[str, ...], int, int, list[tuple[int, int, int | None]], int]]:
        """Split the body into sections.

        Returns ``(heading_path, start, end, blocks, glue_until)`` per section:
        ``start``/``end`` are char offsets (end stripped), ``blocks`` are
        ``(start, end, token_index | None)`` content blocks in order (the first
        starts at ``start`` so it carries the heading lines), and ``glue_until``
        is the end of the heading line(s), inside which no split may happen.
        Heading-only sections are already folded into the next section.
        """
        # Top-level blocks as consecutive line ranges; non-blank lines that no
        # token maps (e.g. link reference definitions) become their own block.
        top: list[tuple[int, int, int | None]] = []  # (line_start, line_end, token index)
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

        sections = []
        stack: list[tuple[int, str]] = []
        path: tuple[str, ...] = ()
        sec_start: int | None = None  # char offset where the current section starts
        glue = 0
        blocks: list[tuple[int, int, int | None]] = []
        pending: int | None = None  # start of folded heading-only sections

        def flush() -> None:
            nonlocal pending
            if blocks:
                start = pending if pending is not None else blocks[0][0]
                first = (start, blocks[0][1], blocks[0][2])
                sections.append((path, start, blocks[-1][1], [first, *blocks[1:]], glue))
                pending = None
            elif sec_start is not None and pending is None:
                pending = sec_start

        for a, b, index in top:
            s = self._line_char(a)
            e = self._rstrip(s, self._line_char(b))
            if e <= s:
                continue  # blank gap
            tok = self.tokens[index] if index is not None else None
            if tok is not None and tok.type == "heading_open":
                inline = self.tokens[index + 1]
                heading = clean_heading(inline.content)
                if heading:
                    flush()
                    blocks = []
                    level = int(tok.tag[1])
                    while stack and stack[-1][0] >= level:
                        stack.pop()
                    stack.append((level, heading))
                    path = tuple(h for _, h in stack)
                    sec_start = s
                    glue = e
                    continue
            if not blocks and sec_start is not None:
                s = sec_start  # first block of a section carries the heading
            blocks.append((s, e, index))
        flush()
        if pending is not None:
            self.trailing_heading = (pending, self._rstrip(pending, len(self.body)))
        else:
            self.trailing_heading = None
        return sections

    # ----- atoms

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

    def _node(self, start: int, end: int, index: int | None, glue: int) -> _Node:
        """The block tree of ``[start, end)`` (block token ``index``) down to leaves cut into units.

        Containers (lists, list items, quotes/callouts) descend into their child
        blocks; child k spans from its first line to the next child's, and what
        precedes the first child (a heading carried in, a marker line) rides with it.
        """
        tok = self.tokens[index] if index is not None else None
        if tok is not None and tok.type in ("fence", "code_block"):
            return _Node(start, end, "code", [], self._units(start, end, "code", glue, fence=tok.type == "fence"))
        if tok is not None and tok.type == "table_open":
            return self._table_node(start, end, tok, glue)
        if tok is not None and tok.nesting == 1 and tok.type != "paragraph_open":
            kids = self._children(index)
            if len(kids) == 1:
                return self._node(start, end, kids[0], glue)
            if kids:
                bounds = [start, *(self._line_char(self.tokens[j].map[0]) for j in kids[1:]), end]
                children = []
                for k, j in enumerate(kids):
                    s = bounds[k] if k == 0 else self._lstrip(bounds[k], bounds[k + 1])
                    e = self._rstrip(s, bounds[k + 1])
                    if e > s:
                        children.append(self._node(s, e, j, glue))
                return _Node(start, end, "prose", children, [])
        return _Node(start, end, "prose", [], self._units(start, end, "prose", glue))

    def _table_node(self, start: int, end: int, tok, glue: int) -> _Node:
        """A table leaf: the header + delimiter rows as one unit, then one unit per row."""
        a, b = tok.map
        rows = [self._line_char(line) for line in range(a, b)]
        if len(rows) < 3:
            return _Node(start, end, "table", [], self._units(start, end, "table", glue))
        h_end = self._rstrip(rows[0], rows[2])
        units = [_Unit(start, h_end, None)]
        for k in range(2, len(rows)):
            s = rows[k]
            e = self._rstrip(s, rows[k + 1] if k + 1 < len(rows) else end)
            if e > s:
                units.append(_Unit(s, e, None))
        if units[-1].end < end:  # lines the table map does not cover (should not happen)
            units.append(_Unit(self._lstrip(units[-1].end, end), end, None))
        # header tokens for repetition: counted separately only when a heading rides on the header unit
        node = _Node(start, end, "table", [], units)
        node.table = (rows[0], h_end, -1)
        return node

    def _units(self, start: int, end: int, kind: str, glue: int, fence: bool = False) -> list[_Unit]:
        """Cut a leaf at sentence ends and line breaks (prose) or lines (code, table)."""
        bounds = self._boundaries(start, end, "sentences" if kind == "prose" else "lines", glue)
        if fence and len(bounds) >= 2:
            bounds = bounds[1:-1]  # keep the opening fence with the first code line, the closing with the last
        edges = [start, *bounds, end]
        units = []
        for k in range(len(edges) - 1):
            e = self._rstrip(edges[k], edges[k + 1])
            if e > edges[k]:
                units.append(_Unit(edges[k], e, None))
        return units

    def _boundaries(self, start: int, end: int, level: str, glue: int) -> list[int]:
        if level == "lines":
            found = [m.end() for m in re.finditer("\n", self.body[start:end])]
            found = [start + b for b in found]
        elif level == "sentences":
            found = [m.end() for m in _SENTENCE_OR_LINE.finditer(self.body, start, end)]
        elif level == "words":
            found = [m.start() for m in _WORD.finditer(self.body, start, end)]
        else:  # after each ASCII punctuation mark: WordPiece splits there too, so counts stay additive
            found = [m.end() for m in _PUNCT.finditer(self.body, start, end)]
        # no cut between a heading and the first content after it
        floor = self._lstrip(glue, end) if start < glue else start
        return [b for b in found if floor < b < end]

    def _count_units(self, units: list[_Unit], budget: int) -> None:
        """Count every unit that could fit (one tokenizer call each)."""
        todo = [u for u in units if not self._surely_over(u.start, u.end, budget)]
        for u, t in zip(todo, self._count_many([self.body[u.start : u.end] for u in todo])):
            u.tokens = t

    # ----- atoms

    def _atomize(self, node: _Node, budget: int, glue: int) -> list[_Atom]:
        """Atoms (each ≤ ``budget`` tokens, counts summed from units) covering ``node`` in order.

        A block that fits stays whole; otherwise its children, then its units;
        a unit over budget is cut at spaces, then inside words.
        """
        units = node.all_units()
        total = 0
        for u in units:
            if u.tokens is None:
                total = budget + 1
                break
            total += u.tokens
        if total <= budget:
            return [_Atom(node.start, node.end, total, self._node_kind(node), units)]
        if node.children:
            return [a for child in node.children for a in self._atomize(child, budget, glue)]
        header = None
        if node.table is not None:
            h_start, h_end, _ = node.table
            if units[0].start == h_start and units[0].tokens is not None:
                header = (h_start, h_end, units[0].tokens)
            else:
                header = (h_start, h_end, self.count(self.body[h_start:h_end]))
        atoms = []
        for k, u in enumerate(units):
            if u.tokens is not None and u.tokens <= budget:
                pieces = [_Atom(u.start, u.end, u.tokens, node.kind, [u])]
            else:
                pieces = self._split(u.start, u.end, node.kind, budget, glue, u.tokens)
            if header is not None and k > 0:
                for a in pieces:
                    a.table = header
            atoms.extend(pieces)
        return atoms

    def _node_kind(self, node: _Node) -> str:
        if not node.children:
            return node.kind if node.kind != "prose" else self._kind([(node.start, node.end)])
        return self._kind([(node.start, node.end)])

    def _split(
        self, start: int, end: int, kind: str, budget: int, glue: int, tokens: int | None, level: int = 0
    ) -> list[_Atom]:
        """Cut a span over budget at spaces, then after punctuation marks, then inside words.

        Each level cuts the span into runs of at most ``budget // 2`` pieces,
        counted once each (so a long run is never re-encoded piece by piece);
        a run still over budget goes to the next level.
        """
        if tokens is None and not self._surely_over(start, end, budget):
            tokens = self.count(self.body[start:end])
        if tokens is not None and tokens <= budget:
            return [_Atom(start, end, tokens, kind, [_Unit(start, end, tokens)])]
        for lvl in range(level, len(_SPLIT_LEVELS)):
            cuts = self._boundaries(start, end, _SPLIT_LEVELS[lvl], glue)
            if not cuts:
                continue
            step = max(1, budget // 2)
            edges = [start, *cuts[step - 1 :: step], end] if len(cuts) >= step else [start, *cuts, end]
            out: list[_Atom] = []
            for k in range(len(edges) - 1):
                s = edges[k]
                e = self._rstrip(s, edges[k + 1])
                if e > s:
                    out.extend(self._split(s, e, kind, budget, glue, None, lvl if len(edges) > 2 else lvl + 1))
            return out
        return self._split_chars(start, end, kind, budget)

    def _split_chars(self, start: int, end: int, kind: str, budget: int) -> list[_Atom]:
        """Last resort: the longest prefixes that fit, by galloping then binary search on characters.

        Galloping keeps the cost near-linear on a long unbroken run (say a
        base64 data URI): no count ever spans more than twice the piece found.
        """
        out = []
        s = start
        while s < end:
            best, best_t = s, 0
            size = max(1, budget * 4)
            hi = end
            while True:  # gallop: grow the window while it fits
                m = min(end, s + size)
                t = self.count(self.body[s:m])
                if t > budget:
                    hi = m - 1
                    break
                best, best_t = m, t
                if m == end:
                    hi = m
                    break
                size *= 2
            lo = best + 1
            while lo <= hi:
                mid = (lo + hi) // 2
                t = self.count(self.body[s:mid])
                if t <= budget:
                    best, best_t, lo = mid, t, mid + 1
                else:
                    hi = mid - 1
            if best == s:  # a single character over budget: cannot happen with a sane counter
                best = s + 1
                best_t = self.count(self.body[s:best])
            out.append(_Atom(s, best, best_t, kind, [_Unit(s, best, best_t)]))
            s = self._lstrip(best, end)
        return out

    # ----- packing

    def _overlap(self, units: list[_Unit], piece_start: int, limit: int) -> tuple[int, int] | None:
        """Start and token count (an upper bound) of the overlap taken from the tail of a prose piece.

        Whole trailing sentences/lines when they fit in ``limit`` tokens; else
        the longest word-aligned tail of the last one. Never the whole piece
        (``piece_start`` is where its own content, after any overlap, starts).
        """
        if limit <= 0 or not units:
            return None
        total, k = 0, len(units)
        while k > 0 and units[k - 1].tokens is not None and total + units[k - 1].tokens <= limit:
            k -= 1
            total += units[k].tokens
        while k < len(units) and units[k].start > 0 and not self.body[units[k].start - 1].isspace():
            total -= units[k].tokens  # a unit cut inside a word: start at a word instead
            k += 1
        if k < len(units) and units[k].start > piece_start:
            return units[k].start, total
        last = units[-1]
        return self._overlap_words(max(last.start, piece_start), last.end, limit)

    def _overlap_words(self, start: int, end: int, limit: int) -> tuple[int, int] | None:
        words = [m.start() for m in _WORD.finditer(self.body, start, end)][1:]
        words = words[-limit:]  # each word is at least one token
        if not words:
            return None
        k = 0
        t = self.count(self.body[words[0] : end])
        while t > limit:
            # jump to the estimated start (tokens per word from the last count), then step on
            left = len(words) - k
            keep = min(left - 1, int(left * limit / t))
            if keep <= 0:
                return None
            k = len(words) - keep
            t = self.count(self.body[words[k] : end])
        return words[k], t

    def pack(self, atoms: list[_Atom], budget: int) -> list[tuple[int, int, int, tuple[int, int, int] | None]]:
        """Greedily pack atoms into pieces of at most ``budget`` tokens (by summed counts).

        Returns ``(text_start, content_start, end, header)`` per piece:
        ``text_start`` includes the overlap, ``header`` is a table header to put in front.
        """
        pieces = []
        i = 0
        prev_units: list[_Unit] | None = None  # trailing prose units of the previous piece
        prev_start = 0
        while i < len(atoms):
            first = atoms[i]
            text_start = first.start
            extra = 0
            header = None
            if first.table is not None and first.table[2] + first.tokens <= budget:
                header = first.table
                extra = header[2]
            elif prev_units and first.kind == "prose" and self.overlap_tokens > 0:
                ov = self._overlap(prev_units, prev_start, min(self.overlap_tokens, budget - first.tokens))
                if ov is not None:
                    text_start, extra = ov
            used = extra + first.tokens
            j = i + 1
            while j < len(atoms) and used + atoms[j].tokens <= budget:
                used += atoms[j].tokens
                j += 1
            pieces.append((text_start, first.start, atoms[j - 1].end, header))
            prev_units = []
            k = j - 1
            while k >= i and atoms[k].kind == "prose":
                prev_units[:0] = atoms[k].units
                k -= 1
            prev_start = first.start
            i = j
        return pieces

    # ----- driver

    def _fit_heading_path(self, path: tuple[str, ...]) -> tuple[tuple[str, ...], int]:
        """Return the heading path to use when splitting, and its prefix's token count.

        The title + heading prefix may take at most half the window; longer heading
        components are cut to 8 words (then only the innermost heading is kept).
        """
        limit = self.max_tokens // 2
        t = self.count(embed_text(self.title, path, ""))
        if t <= limit:
            return path, t
        shortened = tuple(_shorten(h, 8) for h in path)
        t = self.count(embed_text(self.title, shortened, ""))
        if t <= limit:
            return shortened, t
        for candidate in (shortened[-1:], tuple(_shorten(h, 3) for h in shortened[-1:]), ()):
            t = self.count(embed_text(self.title, candidate, ""))
            if t <= limit:
                return candidate, t
        raise ValueError(
            f"note title {self.title[:80]!r} is {t} tokens; it must leave room for text in the "
            f"{self.max_tokens}-token embedding window (expected at most {limit}); shorten the title"
        )

    def _final(self, path: tuple[str, ...], text: str) -> tuple[bool, int]:
        t = self.count(embed_text(self.title, path, text))
        return t <= self.max_tokens, t

    def run(self) -> list[Chunk]:
        raw: list[tuple[tuple[str, ...], str, int, int, str, int]] = []  # path, text, start, end, kind, tokens
        sections = self.sections()
        # Whole-section candidates, counted in one batch. A section whose lower bound is
        # already near the cap almost never fits (tokens run ~1.3x the bound in prose);
        # it goes straight to the split path, which yields the same single chunk if it does fit.
        near = self.max_tokens * 85 // 100
        maybe = [not self._surely_over(start, end, near) for _, start, end, _, _ in sections]
        counts = iter(
            self._count_many(
                [
                    embed_text(self.title, path, self.body[start:end])
                    for (path, start, end, _, _), m in zip(sections, maybe)
                    if m
                ]
            )
        )
        for (path, start, end, blocks, glue), m in zip(sections, maybe):
            t = next(counts) if m else self.max_tokens + 1
            if t <= self.max_tokens:
                raw.append((path, self.body[start:end], start, end, self._kind([(start, end)]), t))
                continue
            path, prefix_t = self._fit_heading_path(path)
            budget = self.max_tokens - prefix_t
            nodes = [self._node(s, e, index, glue) for s, e, index in blocks]
            self._count_units([u for n in nodes for u in n.all_units()], budget)
            atoms = [a for n in nodes for a in self._atomize(n, budget, glue)]
            pieces = self.pack(atoms, budget)
            texts = [
                (self.body[h[0] : h[1]] + "\n" if h is not None else "") + self.body[ts:e] for ts, _, e, h in pieces
            ]
            finals = self._count_many([embed_text(self.title, path, t) for t in texts])
            for (text_start, content_start, p_end, header), text, t in zip(pieces, texts, finals):
                if t <= self.max_tokens:
                    raw.append((path, text, text_start, p_end, self._kind([(content_start, p_end)]), t))
                else:
                    self._emit(raw, path, text_start, content_start, p_end, header)
        if self.trailing_heading is not None and raw:
            path, text, start, end, kind, _ = raw[-1]
            h_start, h_end = self.trailing_heading
            longer = text + self.body[end:h_end]
            ok, t = self._final(path, longer)
            if ok:
                raw[-1] = (path, longer, start, h_end, kind, t)
        return [
            Chunk(
                ordinal=n,
                heading_path=path,
                text=text,
                line_start=self._line_of(start),
                line_end=self._line_of(end - 1),
                kind=kind,
                token_count=t,
            )
            for n, (path, text, start, end, kind, t) in enumerate(raw)
        ]

    def _emit(self, raw, path, text_start, content_start, end, header) -> None:
        """Append one packed piece, verifying the real count and splitting further if the estimate was off."""
        text = self.body[text_start:end]
        kind = self._kind([(content_start, end)])
        if header is not None:
            text = self.body[header[0] : header[1]] + "\n" + text
        ok, t = self._final(path, text)
        if ok:
            raw.append((path, text, text_start, end, kind, t))
            return
        # The counter was not additive over whitespace (or the overlap/header pushed it over):
        # drop the extras, then halve at a word boundary until every part fits.
        if header is not None or text_start != content_start:
            self._emit(raw, path, content_start, content_start, end, None)
            return
        words = [m.start() for m in _WORD.finditer(self.body, text_start, end)]
        if len(words) >= 2:
            mid = words[len(words) // 2]
            self._emit(raw, path, text_start, text_start, self._rstrip(text_start, mid), None)
            self._emit(raw, path, mid, mid, end, None)
            return
        budget = self.max_tokens - self.count(embed_text(self.title, path, ""))
        for atom in self._split_chars(text_start, end, kind, budget):
            ok, t = self._final(path, self.body[atom.start : atom.end])
            if ok:
                raw.append((path, self.body[atom.start : atom.end], atom.start, atom.end, kind, t))
            else:  # pragma: no cover - only with a counter that is not monotone in the text
                raise ValueError(f"cannot fit text at offset {atom.start} into {self.max_tokens} tokens")


def _shorten(text: str, words: int) -> str:
    parts = text.split()
    return text if len(parts) <= words else " ".join(parts[:words]) + "…"


def chunk_note(
    body: str,
    *,
    title: str,
    body_line: int = 1,
    count_tokens: Callable[[str], int],
    max_tokens: int = 254,
    overlap_tokens: int = 32,
    count_tokens_batch: Callable[[list[str]], Sequence[int]] | None = None,
) -> list[Chunk]:
    """Cut a note body into heading-aware chunks that fit the embedding window.

    Args:
        body: note text after front-matter (comments blanked, newlines kept).
        title: the note's title, part of every chunk's :func:`embed_text`.
        body_line: file line number (1-based) of the body's first line.
        count_tokens: number of content tokens of the embedding tokenizer for a
            string, *without* special tokens, truncation or padding (a
            ``tokenizers.Tokenizer`` loaded from a model's ``tokenizer.json``
            truncates and pads by default: call ``no_truncation()`` and
            ``no_padding()`` first). Splitting assumes counts are additive over
            whitespace-joined pieces, as for WordPiece; every chunk's count is
            still measured for real and a piece is re-split if it is over.
        max_tokens: hard cap on ``count_tokens(embed_text(title, path, text))``.
        overlap_tokens: about how many tokens of a split prose section's
            previous piece are repeated at the start of the next.
        count_tokens_batch: optional, the same count for a list of strings at
            once (e.g. ``tokenizers``' ``encode_batch_fast``, which runs on all
            cores); must agree with ``count_tokens``. Used for whole sections,
            sentence/line units and final pieces; results are identical.

    Returns:
        Chunks in note order (``ordinal`` 0, 1, …); ``[]`` for an empty or
        whitespace-only body, or one with nothing but headings. See the module
        docstring for the rules.

    Raises:
        ValueError: ``max_tokens`` < 16, ``overlap_tokens`` negative or not
            below ``max_tokens // 2``, ``body_line`` < 1, or a title so long
            that no text fits next to it.
    """
    if max_tokens < 16:
        raise ValueError(f"max_tokens is {max_tokens}; expected at least 16")
    if overlap_tokens < 0 or overlap_tokens >= max_tokens // 2:
        raise ValueError(f"overlap_tokens is {overlap_tokens}; expected 0 <= overlap_tokens < {max_tokens // 2}")
    if body_line < 1:
        raise ValueError(f"body_line is {body_line}; expected a 1-based line number")
    if not body or body.isspace():
        return []
    if "\r" in body:
        body = body.replace("\r\n", "\n").replace("\r", "\n")
    return _Chunker(body, title, body_line, count_tokens, max_tokens, overlap_tokens, count_tokens_batch).run()

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
   the next chunk starts with about ``overlap_tokens`` of the previous piece's
   tail (snapped to a sentence start when one is near, else a word start).
7. **Kind.** ``"code"`` or ``"table"`` when more than half of the chunk's
   characters lie inside fenced/indented code or a table, else ``"prose"``.
8. **Coverage.** Pieces are consecutive spans of the body, so every non-blank
   line belongs to at least one chunk (except a dropped trailing empty heading,
   rule 4).

Text and line numbers: ``Chunk.text`` is a contiguous slice of the body (only a
table continuation piece adds the table's header rows in front of the slice),
stripped of surrounding whitespace. Line endings ``\\r\\n`` and lone ``\\r`` are
read as one line break each and become ``\\n`` in ``Chunk.text``. Line numbers
count those breaks (not ``str.splitlines``' extra separators such as form feed),
1-based, plus ``body_line - 1``.

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
class _Atom:
    """A span of the body that fits the text budget on its own."""

    start: int  # char offsets into the (normalised) body, end exclusive
    end: int
    tokens: int
    kind: str  # prose | code | table
    table: tuple[int, int, int] | None = None  # (header start, header end, header tokens) for a table row


_SENTENCE_OR_LINE = re.compile(r"(?:(?<=[.!?…。！？])[\"')\]]*[ \t]+|\n[ \t]*)(?=\S)")
_WORD = re.compile(r"\S+")
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
    ) -> None:
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

    # ----- offsets

    def _line_char(self, line: int) -> int:
        """Char offset of the start of 0-based ``line`` (len(body) past the end)."""
        if line < len(self.line_starts):
            return self.line_starts[line]
        return len(self.body)

    def _rstrip(self, start: int, end: int) -> int:
        while end > start and self.body[end - 1].isspace():
            end -= 1
        return end

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
        """Char intervals of code blocks and tables at any depth, in order."""
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
            for a, b, kind in self.special:
                if b <= s:
                    continue
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

    def _fits_text(self, start: int, end: int, budget: int) -> tuple[bool, int | None]:
        if self._surely_over(start, end, budget):
            return False, None
        t = self.count(self.body[start:end])
        return t <= budget, t

    def _atomize_block(self, start: int, end: int, index: int | None, budget: int, glue: int) -> list[_Atom]:
        """Atoms (each ≤ ``budget`` tokens) covering the block span ``[start, end)``."""
        fits, t = self._fits_text(start, end, budget)
        if fits:
            return [_Atom(start, end, t, self._kind([(start, end)]))]
        tok = self.tokens[index] if index is not None else None
        if tok is not None and tok.type in ("fence", "code_block"):
            return self._atomize_leaf(start, end, "code", budget, glue, t)
        if tok is not None and tok.type == "table_open":
            return self._atomize_table(start, end, tok, budget, glue, t)
        if tok is not None and tok.nesting == 1 and tok.type != "paragraph_open":
            kids = self._children(index)
            if len(kids) == 1:
                return self._atomize_block(start, end, kids[0], budget, glue)
            if kids:
                # Child k spans from its first line to the next child's; whatever precedes
                # the first child (a heading carried in, a marker line) rides with it.
                bounds = [start, *(self._line_char(self.tokens[j].map[0]) for j in kids[1:]), end]
                out: list[_Atom] = []
                for k, j in enumerate(kids):
                    s = bounds[k] if k == 0 else self._lstrip(bounds[k], bounds[k + 1])
                    e = self._rstrip(s, bounds[k + 1])
                    if e > s:
                        out.extend(self._atomize_block(s, e, j, budget, glue))
                return out
        return self._atomize_leaf(start, end, "prose", budget, glue, t)

    def _atomize_table(self, start: int, end: int, tok, budget: int, glue: int, total: int) -> list[_Atom]:
        """Rows of a table; the header + delimiter rows form the first atom and ride along later pieces."""
        a, b = tok.map
        rows = [self._line_char(line) for line in range(a, b)]
        if len(rows) < 3:
            return self._atomize_leaf(start, end, "table", budget, glue, total)
        h_start = rows[0]
        h_end = self._rstrip(h_start, rows[2])
        header_tokens = self.count(self.body[h_start:h_end])
        header = (h_start, h_end, header_tokens)
        out = self._atomize_leaf(start, h_end, "table", budget, glue, None)
        for k in range(2, len(rows)):
            s = rows[k]
            e = self._rstrip(s, rows[k + 1] if k + 1 < len(rows) else end)
            if e <= s:
                continue
            for atom in self._atomize_leaf(s, e, "table", budget, glue, None):
                atom.table = header
                out.append(atom)
        return out

    def _atomize_leaf(
        self, start: int, end: int, kind: str, budget: int, glue: int, tokens: int | None
    ) -> list[_Atom]:
        """Split a leaf span at lines (code, table) or sentence ends/line breaks (prose), then spaces, then characters."""
        levels = ["lines", "words"] if kind != "prose" else ["sentences", "words"]
        return self._split(start, end, kind, budget, glue, levels, tokens)

    def _boundaries(self, start: int, end: int, level: str, glue: int) -> list[int]:
        text = self.body[start:end]
        if level == "lines":
            found = [start + m.end() for m in re.finditer("\n", text)]
        elif level == "sentences":
            found = [start + m.end() for m in _SENTENCE_OR_LINE.finditer(text)]
        else:
            found = [start + m.start() for m in _WORD.finditer(text)]
        # no cut between a heading and the first content after it
        floor = self._lstrip(glue, end) if start < glue else start
        return [b for b in found if floor < b < end]

    def _split(
        self, start: int, end: int, kind: str, budget: int, glue: int, levels: list[str], tokens: int | None
    ) -> list[_Atom]:
        if tokens is None and not self._surely_over(start, end, budget):
            tokens = self.count(self.body[start:end])
        if tokens is not None and tokens <= budget:
            return [_Atom(start, end, tokens, kind)]
        for i, level in enumerate(levels):
            bounds = self._boundaries(start, end, level, glue)
            if bounds:
                out: list[_Atom] = []
                edges = [start, *bounds, end]
                for k in range(len(edges) - 1):
                    s = edges[k]
                    e = self._rstrip(s, edges[k + 1])
                    if e > s:
                        out.extend(self._split(s, e, kind, budget, glue, levels[i + 1 :] or levels[-1:], None))
                return out
        return self._split_chars(start, end, kind, budget)

    def _split_chars(self, start: int, end: int, kind: str, budget: int) -> list[_Atom]:
        """Last resort: the longest prefixes that fit, by binary search on characters."""
        out = []
        s = start
        while s < end:
            lo, hi = s + 1, end
            best = s + 1
            best_t = self.count(self.body[s:best])
            while lo <= hi:
                mid = (lo + hi) // 2
                t = self.count(self.body[s:mid])
                if t <= budget:
                    best, best_t, lo = mid, t, mid + 1
                else:
                    hi = mid - 1
            out.append(_Atom(s, best, best_t, kind))
            s = self._lstrip(best, end)
        return out

    # ----- packing

    def _overlap_start(self, start: int, end: int, limit: int) -> tuple[int, int] | None:
        """Where the overlap taken from the tail of ``[start, end)`` starts, and an upper bound of its tokens.

        The longest word-aligned tail within ``limit`` tokens, moved forward to a
        sentence or line start when one keeps at least a third of its words.
        Never the whole span (the first word is never repeated).
        """
        if limit <= 0:
            return None
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
        n = len(words) - k
        for j in range(k + 1, len(words) - max(1, n // 3) + 1):
            if self._starts_sentence(words[j]):
                return words[j], t  # t is an upper bound for the shorter tail
        return words[k], t

    def _starts_sentence(self, offset: int) -> bool:
        k = offset - 1
        while k > 0 and self.body[k] in " \t":
            k -= 1
        return self.body[k] == "\n" or self.body[k] in ".!?…。！？"

    def pack(self, atoms: list[_Atom], budget: int) -> list[tuple[int, int, int, tuple[int, int, int] | None, int]]:
        """Greedily pack atoms into pieces.

        Returns ``(text_start, content_start, end, header, est_tokens)`` per
        piece: ``text_start`` includes any overlap, ``header`` is a table header
        to put in front.
        """
        pieces = []
        i = 0
        prev: tuple[int, int, str] | None = None  # (prose run start, end, last kind) of the previous piece
        while i < len(atoms):
            first = atoms[i]
            text_start = first.start
            extra = 0
            header = None
            if first.table is not None and first.table[2] + first.tokens <= budget:
                header = first.table
                extra = header[2]
            elif prev is not None and prev[2] == "prose" and first.kind == "prose" and self.overlap_tokens > 0:
                room = min(self.overlap_tokens, budget - first.tokens)
                ov = self._overlap_start(prev[0], prev[1], room)
                if ov is not None:
                    text_start, extra = ov
            used = extra + first.tokens
            j = i + 1
            while j < len(atoms) and used + atoms[j].tokens <= budget:
                used += atoms[j].tokens
                j += 1
            last = atoms[j - 1]
            # trailing run of prose atoms in this piece, for the next piece's overlap
            k = j - 1
            while k > i and atoms[k - 1].kind == "prose" and atoms[k].kind == "prose":
                k -= 1
            run_start = text_start if k == i else atoms[k].start
            pieces.append((text_start, first.start, last.end, header, used))
            prev = (run_start, last.end, last.kind)
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
        for path, start, end, blocks, glue in self.sections():
            text = self.body[start:end]
            ok, t = (False, 0) if self._surely_over(start, end, self.max_tokens) else self._final(path, text)
            if ok:
                raw.append((path, text, start, end, self._kind([(start, end)]), t))
                continue
            path, prefix_t = self._fit_heading_path(path)
            budget = self.max_tokens - prefix_t
            atoms: list[_Atom] = []
            for s, e, index in blocks:
                atoms.extend(self._atomize_block(s, e, index, budget, glue))
            for text_start, content_start, p_end, header, _est in self.pack(atoms, budget):
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
    return _Chunker(body, title, body_line, count_tokens, max_tokens, overlap_tokens).run()

"""Chunk assembly: token counts, splitting a long section into atoms and packing them into chunks (layer 0, pure).

See :mod:`cairn.chunking` for the rules; :class:`~cairn.chunking.blocks.Blocks` gives the sections and block trees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from cairn.chunking.blocks import WORD, Blocks, Node, Unit
from cairn.chunking.chunk import Chunk, embed_text

#: How :meth:`_Chunker._split` cuts a span over budget, in order, before cutting inside words.
_SPLIT_LEVELS = ("words", "punct")


@dataclass(slots=True)
class _Atom:
    """A span of the body that fits the text budget on its own; the packing unit."""

    start: int
    end: int
    tokens: int
    kind: str  # prose | code | table
    units: list[Unit]  # its counted cuts, for sentence-aligned overlap
    table: tuple[int, int, int] | None = None  # header to repeat when a piece starts with this (table row) atom


class _Chunker(Blocks):
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
        super().__init__(body, body_line)
        self.count_batch = count_tokens_batch
        self.title = title
        self.count = count_tokens
        self.max_tokens = max_tokens
        self.overlap_tokens = overlap_tokens

    def _count_many(self, texts: list[str]) -> list[int]:
        """Token counts of several strings: one batch call when a batch counter was given."""
        if self.count_batch is not None and len(texts) > 1:
            counts = list(self.count_batch(texts))
            if len(counts) != len(texts):
                raise ValueError(f"count_tokens_batch returned {len(counts)} counts for {len(texts)} texts")
            return counts
        return [self.count(t) for t in texts]

    def _count_units(self, units: list[Unit], budget: int) -> None:
        """Count every unit that could fit (one tokenizer call each)."""
        todo = [u for u in units if not self._surely_over(u.start, u.end, budget)]
        for u, t in zip(todo, self._count_many([self.body[u.start : u.end] for u in todo])):
            u.tokens = t

    # ----- atoms

    def _atomize(self, node: Node, budget: int, glue: int) -> list[_Atom]:
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

    def _node_kind(self, node: Node) -> str:
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
            return [_Atom(start, end, tokens, kind, [Unit(start, end, tokens)])]
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
            out.append(_Atom(s, best, best_t, kind, [Unit(s, best, best_t)]))
            s = self._lstrip(best, end)
        return out

    # ----- packing

    def _overlap(self, units: list[Unit], piece_start: int, limit: int) -> tuple[int, int] | None:
        """Start and token count (an upper bound) of the overlap taken from the tail of a prose piece.

        Whole trailing sentences/lines when they fit in ``limit`` tokens; else
        the longest word-aligned tail of the last one. Never the whole piece
        (``piece_start`` is where its own content, after any overlap, starts).
        """
        if limit <= 0 or not units:
            return None
        total, k = 0, len(units)
        while k > 0 and (t := units[k - 1].tokens) is not None and total + t <= limit:
            k -= 1
            total += t
        while k < len(units) and units[k].start > 0 and not self.body[units[k].start - 1].isspace():
            total -= cast(int, units[k].tokens)  # a unit cut inside a word: start at a word instead
            k += 1
        if k < len(units) and units[k].start > piece_start:
            return units[k].start, total
        last = units[-1]
        return self._overlap_words(max(last.start, piece_start), last.end, limit)

    def _overlap_words(self, start: int, end: int, limit: int) -> tuple[int, int] | None:
        words = [m.start() for m in WORD.finditer(self.body, start, end)][1:]
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
        prev_units: list[Unit] | None = None  # trailing prose units of the previous piece
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
        # already near the cap almost never fits (prose has well more tokens than the bound);
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
        words = [m.start() for m in WORD.finditer(self.body, text_start, end)]
        if len(words) >= 2:
            mid = words[len(words) // 2]
            self._emit(raw, path, text_start, text_start, self._rstrip(text_start, mid), None)
            self._emit(raw, path, mid, mid, end, None)
            return
        budget = self.max_tokens - self.count(embed_text(self.title, path, ""))
        for atom in self._split_chars(text_start, end, kind, budget):
            ok, t = self._final(path, self.body[atom.start : atom.end])


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

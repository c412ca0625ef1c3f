"""Heading-aware chunking of a note body into embedding-sized pieces (layer 0, pure).

A note body (the text after front-matter, comments already blanked) is cut into
:class:`Chunk` objects, each small enough that its *embedding text*
(:func:`embed_text`: the note title, the heading path and the chunk text) fits
the embedding model's window: ``count_tokens(embed_text(title, path, text)) <=
max_tokens`` holds for every chunk, title and heading prefix included. The
default ``max_tokens=254`` is all-MiniLM-L6-v2's 256-token window minus
``[CLS]`` and ``[SEP]`` (docs/design.md, "Flows" → Index: "≤ 256 tokens of the
embedding tokenizer, with overlap").

Rules (in order of precedence):

1. **Blocks come from pulldown-cmark** (CommonMark + tables, :mod:`cairn.notes.markdown`): its block
   line maps tell where paragraphs, lists, list items, block quotes (and so Obsidian
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

from cairn.chunking.assembly import chunk_note
from cairn.chunking.blocks import clean_heading
from cairn.chunking.chunk import SYMBOL_SEPARATOR, Chunk, embed_text

__all__ = ["Chunk", "chunk_note", "clean_heading", "embed_text", "SYMBOL_SEPARATOR"]

"""A note, or a PDF's pages, parsed and cut into chunk records ready to write (pure: CPU only, no I/O).

A note is parsed (:mod:`cairn.notes`) and chunked heading-aware (:mod:`cairn.chunking`); a PDF page's text (from
:class:`cairn.vault.pdf.PdfExtractor`) is reflowed and cut like a note's section, never across pages, every chunk
carrying its 1-based ``page`` and the ``symbol`` ``page N`` (``page N › <heading>`` when a heading-like line was
found on the page). Both within the embedding window: at most :data:`CHUNK_MAX_TOKENS` tokens of the model's
tokenizer, :data:`CHUNK_OVERLAP_TOKENS` repeated at the start of the next piece of a split section.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.chunking import chunk_note
from cairn.embedding import chunk_embed_text, content_hash, embedding_texts
from cairn.notes import ParsedNote, parse_note
from cairn.store import ChunkRecord

if TYPE_CHECKING:  # imported when the first PDF is read: a vault without PDFs never loads the PDF library
    from cairn.vault.pdf import PdfText

#: Content tokens per chunk: the model's 256 minus [CLS] and [SEP].
CHUNK_MAX_TOKENS = 254
#: Tokens of trailing context repeated at the start of the next piece of a split section.
CHUNK_OVERLAP_TOKENS = 32


@dataclass(frozen=True, slots=True)
class PreparedNote:
    """A parsed note and its chunk records, ready to write (pure result of :func:`prepare_note`)."""

    note: ParsedNote
    chunks: list[ChunkRecord]


def prepare_note(
    text: str,
    path: str,
    count_tokens: Callable[[str], int],
    count_tokens_batch: Callable[[list[str]], Sequence[int]] | None = None,
) -> PreparedNote:
    """Parse a note and chunk it (CPU only, no I/O). Raises whatever the parser or chunker raises."""
    note = parse_note(text, path)
    pieces = chunk_note(
        note.body,
        title=note.title,
        body_line=note.body_line,
        count_tokens=count_tokens,
        count_tokens_batch=count_tokens_batch,
        max_tokens=CHUNK_MAX_TOKENS,
        overlap_tokens=CHUNK_OVERLAP_TOKENS,
    )
    chunks = [
        ChunkRecord(
            ordinal=c.ordinal,
            symbol=c.symbol,
            text=c.text,
            line_start=c.line_start,
            line_end=c.line_end,
            page=None,
            token_count=c.token_count,
            kind=c.kind,
            content_hash=content_hash(chunk_embed_text(c.symbol, c.text)),
            units=tuple((u, content_hash(u)) for u in embedding_texts(c.symbol, c.text, c.kind)),
        )
        for c in pieces
    ]
    return PreparedNote(note, chunks)


_HYPHEN_BREAK = re.compile(r"(?<=[a-z])-\n(?=[a-z])")
#: A line of at most this many words, without closing punctuation, under half as long as the longest line of its
#: block and followed by one starting with a capital, is a title or heading of its own ("Findings" above "The most
#: common rootstock …"), not the start of a wrapped sentence (wrapped lines run to about the block's width).
SHORT_LINE_WORDS = 6


def reflow(text: str) -> str:
    """Page text with the lines of each paragraph joined by spaces (paragraphs stay apart at blank lines), so a
    sentence wrapped over lines is one sentence to the chunker and the embedder; a word hyphenated at a line end
    is joined; a short unpunctuated line before a capitalised one stays a paragraph of its own. Idempotent."""
    text = _HYPHEN_BREAK.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    paragraphs = []
    for block in re.split(r"\n[ \t]*\n", text):
        lines = [ln.strip() for ln in block.split("\n") if ln.strip()]
        width = max((len(ln) for ln in lines), default=0)
        out: list[str] = []
        last = ""  # the previous line as it was on the page
        for line in lines:
            alone = (
                len(last.split()) <= SHORT_LINE_WORDS
                and len(last) < width / 2
                and last[-1:] not in (".", ",", ";", ":", "!", "?", ")", '"', "'", "’", "”")
                and line[:1].isupper()
            )
            if out and not alone:
                out[-1] = f"{out[-1]} {line}"
            else:
                out.append(line)
            last = line
        paragraphs.extend(out)
    return "\n\n".join(paragraphs)


def page_symbol(number: int, heading: str | None) -> str:
    """``page N`` or ``page N › <heading>`` (docs/design.md, "Contract" → Sources: ``symbol`` is ``page N`` for a
    PDF)."""
    heading = " ".join((heading or "").split())
    return f"page {number} › {heading}" if heading else f"page {number}"


def prepare_pdf(
    extracted: PdfText,
    path: str,
    count_tokens: Callable[[str], int],
    count_tokens_batch: Callable[[list[str]], Sequence[int]] | None = None,
) -> tuple[str, list[ChunkRecord]]:
    """(title, chunk records) of an extracted PDF (pure). Pages without text yield no chunk. Each chunk:
    kind ``pdf``, ``page`` set, ``symbol`` from :func:`page_symbol`, no line range, at most
    :data:`CHUNK_MAX_TOKENS` tokens with the title and symbol; units as for a note's prose."""
    title = " ".join((extracted.title or "").split()) or Path(path).stem
    chunks: list[ChunkRecord] = []
    for page in extracted.pages:
        text = page.text or ""
        if page.heading:  # the heading line stays a paragraph of its own, not the start of the first sentence
            text = re.sub(rf"(?m)^([ \t]*{re.escape(page.heading)}[ \t]*)\n(?!\n)", r"\1\n\n", text, count=1)
        text = reflow(text)
        if not text:
            continue
        symbol = page_symbol(page.number, page.heading)
        # The chunker sees the page as plain paragraphs; its title slot carries "title › page N › heading" so
        # the token cap holds with what is embedded beside the text.
        pieces = chunk_note(
            text,
            title=f"{title} › {symbol}",
            count_tokens=count_tokens,
            count_tokens_batch=count_tokens_batch,
            max_tokens=CHUNK_MAX_TOKENS,
            overlap_tokens=CHUNK_OVERLAP_TOKENS,
        )
        for piece in pieces:
            chunks.append(
                ChunkRecord(
                    ordinal=len(chunks),
                    symbol=symbol,
                    text=piece.text,
                    line_start=None,
                    line_end=None,
                    page=page.number,
                    token_count=piece.token_count,
                    kind="pdf",
                    content_hash=content_hash(chunk_embed_text(symbol, piece.text)),
                    units=tuple((u, content_hash(u)) for u in embedding_texts(symbol, piece.text, "prose")),
                )
            )
    return title, chunks

"""A chunk of a note and the text its token count is taken over (layer 0, pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    """Return the string a chunk's :attr:`Chunk.token_count` is measured on.

    Format: ``"<title> › <h1> › <h2>\\n<text>"``; the title alone on the first
    line when there are no headings; empty parts are skipped; without text the
    result is the first line only. The indexer embeds parts of it (the heading
    path and text, the chunk's sentences; the title has its own vector), so a
    chunk within the window leaves each of those within it too.
    """
    head = SYMBOL_SEPARATOR.join(p for p in (title, *heading_path) if p)
    if not text:
        return head
    if not head:
        return text
    return f"{head}\n{text}"

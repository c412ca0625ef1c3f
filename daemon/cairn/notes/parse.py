"""One Markdown note parsed into a :class:`ParsedNote` (layer 0, pure): see :mod:`cairn.notes`."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from cairn.notes.frontmatter import load_frontmatter, split_frontmatter
from cairn.notes.links import BARE_URL_RE, Link, find_links
from cairn.notes.markup import blank, strip_comments
from cairn.notes.tags import frontmatter_tags_and_aliases, inline_tags

#: Bumped whenever parsing changes what a note's tags, aliases, links, front-matter or body are: an index made
#: by another version re-reads every note at its next full run (``NoteIndexer.index``; vectors of unchanged text
#: come from the cache). 2: a repeated front-matter key keeps the union of tags/aliases and is reported. 3: a
#: tab-indented front-matter line is reported as invalid YAML, not read as some number of spaces. 4: code spans are
#: found in each table row (GFM tables), not across a table's lines. 5: blocks and code spans from pulldown-cmark
#: instead of markdown-it-py and a backtick rescan, and token counts summed over words (the same on every note of
#: both shared vaults; a code span inside an autolink or raw HTML, or a control character in a word, may differ).
PARSER_VERSION = 5


@dataclass(frozen=True, slots=True)
class ParsedNote:
    """Everything Cairn needs from one Markdown note.

    - ``title``: the file stem (Obsidian's note title).
    - ``frontmatter``: the YAML mapping, JSON-serialisable (dates become ISO
      strings, keys become strings); ``{}`` when absent, empty or invalid.
    - ``frontmatter_error``: why the front-matter was dropped (invalid YAML, not
      a mapping), or a warning about front-matter kept despite a problem (a
      repeated property: tags and aliases keep the union of the values), else
      ``None``. The body is parsed either way.
    - ``frontmatter_error_code``: the stable code of ``frontmatter_error``
      (``FRONTMATTER_INVALID``, ``FRONTMATTER_REPEATED_PROPERTY`` of
      :mod:`cairn.notes.frontmatter`), else ``None``: what withholding keys on, never the message.
    - ``tags``: front-matter and inline tags, normalised by
      :func:`normalise_tag`, deduplicated and sorted.
    - ``aliases``: from ``aliases``/``alias``, in written order, deduplicated.
    - ``links``: wikilinks, embeds and Markdown links to files, in document order.
    - ``body``: the text after the front-matter, LF line endings, with Obsidian
      comments replaced by spaces (newlines kept, so line numbers still match).
    - ``body_line``: 1-based file line of the first line of ``body``.
    """

    title: str
    frontmatter: dict
    frontmatter_error: str | None
    tags: tuple[str, ...]
    aliases: tuple[str, ...]
    links: tuple[Link, ...]
    body: str
    body_line: int
    frontmatter_error_code: str | None = None


def parse_note(text: str, path: str) -> ParsedNote:
    """Parse one note. ``path`` is vault-relative POSIX (used for the title only).

    ``text`` is decoded text; a leading BOM is stripped and CRLF/CR become LF.
    Never raises for malformed content: invalid front-matter is reported in
    ``frontmatter_error`` and the body is still parsed.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    title = posixpath.splitext(posixpath.basename(path))[0] if path else ""

    yaml_text, body, body_line = split_frontmatter(text)
    frontmatter: dict = {}
    fm_error: str | None = None
    fm_error_code: str | None = None
    if yaml_text is not None:
        frontmatter, fm_error, fm_error_code = load_frontmatter(yaml_text, 2)
    tags, aliases = frontmatter_tags_and_aliases(frontmatter)

    body, code = strip_comments(body)
    scan = blank(body, code) if code else body
    links, masked = find_links(scan, body_line)
    tag_scan = blank(scan, masked) if masked else scan
    tag_scan = BARE_URL_RE.sub(lambda mm: " " * len(mm.group(0)), tag_scan)
    tags |= inline_tags(tag_scan)

    return ParsedNote(
        title=title,
        frontmatter=frontmatter,
        frontmatter_error=fm_error,
        frontmatter_error_code=fm_error_code,
        tags=tuple(sorted(tags)),
        aliases=tuple(aliases),
        links=tuple(links),
        body=body,
        body_line=body_line,
    )

"""Obsidian note parsing: front-matter, tags, aliases, wikilinks and link resolution.

Layer 0 (pure core): no I/O. :func:`parse_note` turns the decoded text of one
Markdown file into a :class:`ParsedNote`; :class:`LinkResolver` maps a link
target to a vault-relative path the way Obsidian does.

Rules follow Obsidian's documentation (help.obsidian.md):

- *Properties*: YAML front-matter between a ``---`` first line and the next
  ``---`` line; ``tags``/``aliases`` as lists (the older comma-separated string
  forms and the singular ``tag``/``alias`` keys are still honoured).
- *Tags*: ``#`` then letters, digits, ``_``, ``-`` and ``/`` (nesting); at least
  one non-digit (``#1984`` is not a tag); case-insensitive. Unicode letters and
  emoji are accepted, as Obsidian does.
- *Comments*: ``%% ... %%`` (inline or multi-line) is hidden; its text is not
  indexed and its tags and links do not count.
- *Internal links*: ``[[target#heading|alias]]``, ``[[target#^block]]``,
  ``![[embed]]`` and Markdown links ``[text](Some%20Note.md)``.

Code (fenced and indented blocks, inline code spans) never yields tags or links.
Block structure and code spans come from one pulldown-cmark parse (pyromark:
CommonMark with GFM tables), which reports where each code span is.
"""

from cairn.notes.frontmatter import FRONTMATTER_ERROR_CODES, FRONTMATTER_INVALID, FRONTMATTER_REPEATED_PROPERTY
from cairn.notes.links import Link, LinkResolver
from cairn.notes.markup import strip_block_ids
from cairn.notes.parse import PARSER_VERSION, ParsedNote, parse_note
from cairn.notes.tags import normalise_tag, tag_in_scope

__all__ = [
    "FRONTMATTER_ERROR_CODES",
    "FRONTMATTER_INVALID",
    "FRONTMATTER_REPEATED_PROPERTY",
    "PARSER_VERSION",
    "Link",
    "LinkResolver",
    "ParsedNote",
    "normalise_tag",
    "parse_note",
    "strip_block_ids",
    "tag_in_scope",
]

"""Obsidian tags: normalising, scoping, and finding them in front-matter values and note text (layer 0, pure)."""

from __future__ import annotations

import re
import string
import unicodedata
from typing import Any

#: ASCII punctuation that ends a tag; ``-``, ``_`` and ``/`` belong to tags.
_TAG_STOP_ASCII = frozenset(string.punctuation) - {"-", "_", "/"}
#: An inline tag candidate: ``#`` at line start or after whitespace, then no
#: whitespace or ASCII stop character. Unicode punctuation is cut afterwards.
_INLINE_TAG_RE = re.compile(r"(?<!\S)#([^\s!\"#$%&'()*+,.:;<=>?@\[\\\]^`{|}~]+)")


def _tag_char_ok(ch: str) -> bool:
    if ch in "-_/":
        return True
    if ch.isspace() or ch in _TAG_STOP_ASCII:
        return False
    # Unicode punctuation (e.g. "。", "–", "«") ends a tag; letters, digits,
    # marks, symbols (emoji) and format characters (emoji ZWJ) belong to it.
    return not unicodedata.category(ch).startswith(("P", "Z", "Cc"))


def normalise_tag(raw: str) -> str | None:
    """Normalise a tag as Cairn stores it, or ``None`` when it is not a tag.

    Strips surrounding whitespace and leading ``#``, NFC-normalises, case-folds
    (Obsidian tags are case-insensitive), keeps nesting ``a/b`` while dropping
    leading/trailing and doubled ``/``. Returns ``None`` for an empty tag, one
    containing a character Obsidian does not allow (space, punctuation other than
    ``-``, ``_``, ``/``), or a purely numeric one (``#1984`` is not a tag,
    ``#y1984`` is: Obsidian help, "Tags").
    """
    if not isinstance(raw, str):
        return None
    tag = unicodedata.normalize("NFC", raw.strip()).lstrip("#").strip()
    if not tag or not all(_tag_char_ok(ch) for ch in tag):
        return None
    parts = [p for p in tag.split("/") if p]
    if not parts:
        return None
    tag = "/".join(parts).casefold()
    if all(ch.isdigit() or ch == "/" for ch in tag):
        return None
    return tag


def tag_in_scope(tag: str, scope: str) -> bool:
    """True when ``tag`` is ``scope`` or nested below it (``a/b`` is in ``a``; ``ab`` is not).

    Both are normalised first; an invalid tag or scope is never in scope.
    """
    t, s = normalise_tag(tag), normalise_tag(scope)
    if t is None or s is None:
        return False
    return t == s or t.startswith(s + "/")


def _split_tag_string(value: str) -> list[str]:
    return [p for p in re.split(r"[,\s]+", value) if p]


def _frontmatter_tags(value: Any) -> list[str]:
    """Tags from a front-matter ``tags`` value: list, comma/space-separated string, scalar or null."""
    out: list[str] = []
    if value is None:
        return out
    if isinstance(value, (list, tuple)):
        for item in value:
            out.extend(_frontmatter_tags(item))
        return out
    if isinstance(value, dict):
        return out
    if isinstance(value, bool):
        return out
    for piece in _split_tag_string(str(value)):
        tag = normalise_tag(piece)
        if tag:
            out.append(tag)
    return out


def _frontmatter_aliases(value: Any) -> list[str]:
    """Aliases from a front-matter ``aliases`` value: a list, or a (legacy comma-separated) string."""
    if value is None or isinstance(value, dict):
        return []
    items = value if isinstance(value, (list, tuple)) else [p for p in str(value).split(",")]
    out: list[str] = []
    for item in items:
        if item is None or isinstance(item, (dict, list, tuple)):
            continue
        text = str(item).strip()
        if text:
            out.append(unicodedata.normalize("NFC", text))
    return out


def frontmatter_tags_and_aliases(frontmatter: dict) -> tuple[set[str], list[str]]:
    """The normalised tags and the aliases (written order, deduplicated) of a front-matter mapping.

    Keys are matched case-insensitively: ``tags``/``tag`` and ``aliases``/``alias``.
    """
    tags: set[str] = set()
    aliases: list[str] = []
    for key, value in frontmatter.items():
        k = key.strip().casefold()
        if k in ("tags", "tag"):
            tags.update(_frontmatter_tags(value))
        elif k in ("aliases", "alias"):
            aliases.extend(_frontmatter_aliases(value))
    return tags, list(dict.fromkeys(aliases))


def inline_tags(text: str) -> set[str]:
    """The normalised inline ``#tags`` of ``text`` (code, links and URLs already blanked by the caller)."""
    tags: set[str] = set()
    for m in _INLINE_TAG_RE.finditer(text):
        raw = m.group(1)
        cut = next((i for i, ch in enumerate(raw) if not _tag_char_ok(ch)), len(raw))
        tag = normalise_tag(raw[:cut])
        if tag:
            tags.add(tag)
    return tags

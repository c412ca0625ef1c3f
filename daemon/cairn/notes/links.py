"""Links of a note (wikilinks, embeds, Markdown links to files) and their resolution to vault paths (layer 0, pure).

Forms (Obsidian help, "Internal links"): ``[[target#heading|alias]]``, ``[[target#^block]]``, ``![[embed]]``
and Markdown links ``[text](Some%20Note.md)``. :class:`LinkResolver` maps a target to a vault-relative path
the way Obsidian does.
"""

from __future__ import annotations

import bisect
import posixpath
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from cairn.notes.markup import blank, line_starts


@dataclass(frozen=True, slots=True)
class Link:
    """One outgoing link of a note, as written.

    ``target`` is the raw target without ``#heading``, ``#^block`` or ``|alias``
    (URL-decoded for Markdown links); it is ``""`` for a link to a heading or
    block of the same note (``[[#Heading]]``). ``is_embed`` is true for
    ``![[...]]`` and ``![](...)``. ``line`` is the 1-based line in the file
    (front-matter lines included).
    """

    target: str
    heading: str | None
    block_id: str | None
    alias: str | None
    is_embed: bool
    line: int


WIKILINK_RE = re.compile(r"(!?)\[\[([^\[\]\n]+?)\]\]")
#: [text](destination "title"): destination is <...> or a run without spaces with balanced parens.
MDLINK_RE = re.compile(
    r"(!?)\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]"
    r"\(\s*(<[^<>\n]*>|(?:[^\s()]|\([^\s()]*\))+)(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?\s*\)"
)
URL_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
BARE_URL_RE = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s<>]*|\bmailto:[^\s<>]*|\bwww\.[^\s<>]*")


def split_fragment(ref: str) -> tuple[str, str | None, str | None]:
    """``note#heading`` / ``note#^block`` -> (target, heading, block_id)."""
    target, sep, frag = ref.partition("#")
    heading = block = None
    if sep:
        frag = frag.strip()
        if frag.startswith("^"):
            block = frag[1:].strip() or None
        else:
            heading = frag or None
    return target.strip(), heading, block


def parse_wikilink(inner: str) -> tuple[str, str | None, str | None, str | None]:
    ref, bar, alias = inner.partition("|")
    if bar and ref.endswith("\\"):  # `[[a\|b]]` inside a table
        ref = ref[:-1]
    target, heading, block = split_fragment(ref)
    shown = alias.strip() if bar else None
    return target, heading, block, shown or None


def find_links(scan: str, body_line: int) -> tuple[list[Link], list[tuple[int, int]]]:
    """The links of a note body, in document order, and the spans they cover.

    ``scan`` is the body with comments and code blanked (same length and lines as the body);
    ``body_line`` is the file line of its first line. The spans (whole wikilinks, Markdown link
    destinations) are what tag scanning must skip.
    """
    starts = line_starts(scan)

    def line_of(pos: int) -> int:
        return body_line + bisect.bisect_right(starts, pos) - 1

    found: list[tuple[int, Link]] = []
    masked: list[tuple[int, int]] = []
    for m in WIKILINK_RE.finditer(scan):
        target, heading, block, alias = parse_wikilink(m.group(2))
        masked.append(m.span())
        if not target and not heading and not block:
            continue
        found.append((m.start(), Link(target, heading, block, alias, m.group(1) == "!", line_of(m.start()))))
    scan_md = blank(scan, masked) if masked else scan
    for m in MDLINK_RE.finditer(scan_md):
        masked.append((m.start(3), m.end(3)))
        parts = _markdown_link_target(m.group(3))
        if parts is None:
            continue
        target, heading, block = parts
        alias = m.group(2).strip() or None
        found.append((m.start(), Link(target, heading, block, alias, m.group(1) == "!", line_of(m.start()))))
    found.sort(key=lambda item: item[0])
    return [link for _, link in found], masked


def _markdown_link_target(dest: str) -> tuple[str, str | None, str | None] | None:
    """``(target, heading, block_id)`` of a Markdown link destination, ``None`` for a URL or an empty link."""
    if dest.startswith("<") and dest.endswith(">"):
        dest = dest[1:-1]
    dest = dest.strip()
    if not dest or URL_SCHEME_RE.match(dest) or dest.startswith("//") or "://" in dest:
        return None
    target, heading, block = split_fragment(unquote(dest))
    if not target and not heading and not block:
        return None
    return target, heading, block


# ---------------------------------------------------------------- link resolution


def _fold(s: str) -> str:
    return unicodedata.normalize("NFC", s).casefold()


def _strip_md(s: str) -> str:
    return s[:-3] if s.casefold().endswith(".md") else s


class LinkResolver:
    """Resolve link targets to vault-relative paths the way Obsidian does.

    Built from ``(path, aliases)`` for every file of the vault, attachments
    included (``aliases`` empty for them). :meth:`resolve` is case-insensitive
    and accepts targets with or without the ``.md`` extension.
    """

    def __init__(self, files: Iterable[tuple[str, Sequence[str]]]) -> None:
        self._by_path: dict[str, str] = {}
        self._by_name: dict[str, list[str]] = defaultdict(list)
        self._by_alias: dict[str, list[str]] = defaultdict(list)
        for path, aliases in files:
            path = unicodedata.normalize("NFC", path)
            key = _fold(path)
            self._by_path.setdefault(key, path)
            name = key.rsplit("/", 1)[-1]
            self._by_name[name].append(path)
            if name.endswith(".md"):
                self._by_path.setdefault(key[:-3], path)
                self._by_name[name[:-3]].append(path)
            for alias in aliases or ():
                if isinstance(alias, str) and alias.strip():
                    self._by_alias[_fold(alias.strip())].append(path)

    def replace_aliases(self, path: str, old: Sequence[str], new: Sequence[str]) -> None:
        """The note at ``path`` (a file this resolver was built with) now has the aliases ``new`` instead of
        ``old``: as if the resolver were built again with them, without going over every file."""
        path = unicodedata.normalize("NFC", path)
        for alias in old or ():
            if isinstance(alias, str) and alias.strip():
                key = _fold(alias.strip())
                paths = self._by_alias.get(key)
                if paths and path in paths:
                    paths.remove(path)
                    if not paths:
                        del self._by_alias[key]
        for alias in new or ():
            if isinstance(alias, str) and alias.strip():
                self._by_alias[_fold(alias.strip())].append(path)

    @staticmethod
    def _prefer(candidates: Sequence[str], source_path: str) -> str:
        """Same folder as the source first, else the shortest path (then alphabetical)."""
        unique = sorted(set(candidates), key=lambda p: (len(p), p))
        source_dir = posixpath.dirname(source_path)
        for path in unique:
            if posixpath.dirname(path) == source_dir:
                return path
        return unique[0]

    def resolve(self, target: str, source_path: str) -> str | None:
        """Vault-relative path the link ``target`` (written in ``source_path``) points to, or ``None``.

        Order (Obsidian's link resolution): ``""`` is the source note itself; a
        ``./``/``../`` target is relative to the source's folder; an exact
        vault path (with or without ``.md``, leading ``/`` allowed); a
        path-qualified target (``folder/note``) matches files whose path ends
        with it; a bare name matches by file name; among several matches the
        one in the source's folder wins, else the shortest path; finally note
        aliases. Unresolvable targets give ``None``.
        """
        target = unicodedata.normalize("NFC", (target or "").strip()).replace("\\", "/")
        if not target:
            return source_path
        source_dir = posixpath.dirname(source_path)
        if target.startswith(("./", "../")):
            joined = posixpath.normpath(posixpath.join(source_dir, target))
            if joined.startswith("../") or joined == "..":
                return None
            return self._by_path.get(_fold(joined))
        target = target.lstrip("/")
        while target.startswith("./"):
            target = target[2:]
        if not target:
            return None
        key = _fold(target)
        hit = self._by_path.get(key)
        if hit is not None:
            return hit
        if "/" in key:
            # A Markdown link written relative to the source's folder.
            if source_dir:
                hit = self._by_path.get(_fold(posixpath.join(source_dir, target)))
                if hit is not None:
                    return hit
            name = key.rsplit("/", 1)[-1]
            suffix = "/" + key
            candidates = [
                p
                for p in self._by_name.get(name, ())
                if _fold(p).endswith(suffix) or _fold(_strip_md(p)).endswith(suffix)
            ]
            return self._prefer(candidates, source_path) if candidates else None
        by_name = self._by_name.get(key)
        if by_name:
            return self._prefer(by_name, source_path)
        by_alias = self._by_alias.get(key) or self._by_alias.get(_fold(_strip_md(target)))
        if by_alias:
            return self._prefer(by_alias, source_path)
        return None

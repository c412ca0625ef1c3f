"""Withholding: which notes a client never sees, and masking links to them in what it does see (layer 0, pure)."""

from __future__ import annotations

import posixpath
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote

from cairn.notes import normalise_tag
from cairn.notes.links import MDLINK_RE, URL_SCHEME_RE, WIKILINK_RE, parse_wikilink, split_fragment


def _fold_path(path: str) -> str:
    return unicodedata.normalize("NFC", path).casefold()


@dataclass(frozen=True)
class Withhold:
    """What a client must never see. ``tags``: normalised like ``note_tags`` (no ``#``, case-folded,
    nested kept as ``a/b``); a tag nested below one of them counts too. ``folders``: vault-relative
    POSIX folder prefixes without surrounding ``/``, compared case-insensitively (``Private`` withholds
    ``private/x.md`` and ``Private/a/b.md``, not ``Private.md`` nor ``Privateer/x.md``).
    ``Withhold()`` withholds nothing and is falsy."""

    tags: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()

    @classmethod
    def of(cls, tags: Iterable[str] = (), folders: Iterable[str] = ()) -> Withhold:
        """A Withhold from raw tags (``#Personal`` → ``personal``) and folders (``/Private/`` → ``Private``).
        Raises :class:`ValueError` for a string that is not a tag, or a folder that is absolute or holds ``..``."""
        norm_tags = []
        for t in tags:
            n = normalise_tag(str(t))
            if n is None:
                raise ValueError(f"{t!r} is not a tag; expected e.g. 'personal' or 'personal/health'")
            norm_tags.append(n)
        return cls(tuple(dict.fromkeys(norm_tags)), tuple(dict.fromkeys(norm_folder(f) for f in folders)))

    def tag_withheld(self, tags: Iterable[str]) -> bool:
        """True when any of ``tags`` (raw or normalised) is a withheld tag or nested below one."""
        if not self.tags:
            return False
        for raw in tags:
            t = normalise_tag(str(raw))
            if t is None:
                continue
            for w in self.tags:
                if t == w or t.startswith(w + "/"):
                    return True
        return False

    def path_withheld(self, path: str) -> bool:
        """True when the vault-relative ``path`` lies under a withheld folder (case-insensitive)."""
        if not self.folders:
            return False
        p = _fold_path(path.lstrip("/"))
        return any(p.startswith(_fold_path(f) + "/") for f in self.folders)

    def note_withheld(self, path: str, tags: Iterable[str]) -> bool:
        """True when the note at ``path`` with ``tags`` is withheld (by folder or by tag)."""
        return self.path_withheld(path) or self.tag_withheld(tags)

    def __bool__(self) -> bool:
        return bool(self.tags or self.folders)


NOTHING_WITHHELD = Withhold()


@dataclass
class WithheldTally:
    """Out-parameter of the withholding use-case calls: the distinct withheld notes a call would
    otherwise have touched (search candidates removed, a withheld note asked for, links and list
    entries dropped). For the audit log only — never shown to the client (a count is a leak too)."""

    paths: set[str] = field(default_factory=set)

    def add(self, paths: Iterable[str]) -> None:
        self.paths.update(paths)

    @property
    def count(self) -> int:
        return len(self.paths)


#: What a link to a withheld note becomes in returned content, snippets and prompts.
WITHHELD_LINK = "[withheld link]"


class LinkRedactor:
    """Replaces wikilinks, embeds and Markdown links that point to a withheld note by
    :data:`WITHHELD_LINK`. Built from the withheld notes' ``(path, aliases)``; a link matches when its
    target (without ``#heading``, ``|alias``, ``.md``, leading ``./``/``../``/``/``; case-insensitive) is a
    withheld note's path, ends in its file name, or is one of its aliases. That errs on the side of
    redacting: a link to an allowed note with the same file name as a withheld one is redacted too."""

    def __init__(self, notes: Iterable[tuple[str, Iterable[str]]]) -> None:
        self.names: set[str] = set()
        self.aliases: set[str] = set()
        #: what a link to a withheld note shows once its brackets are gone: file names (with and without
        #: ``.md``), vault paths without ``.md``, aliases — as written (NFC), for :meth:`redact_symbol`
        self.phrases: set[str] = set()
        for path, aliases in notes:
            folded = _fold_path(path)
            base = folded.rsplit("/", 1)[-1]
            self.names.update({folded, base})
            if folded.endswith(".md"):
                self.names.update({folded[:-3], base[:-3]})
            self.aliases.update(_fold_path(a).strip() for a in aliases or () if isinstance(a, str) and a.strip())
            written = unicodedata.normalize("NFC", path)
            stem = written[:-3] if written.lower().endswith(".md") else written
            self.phrases.update({stem, stem.rsplit("/", 1)[-1]})
            self.phrases.update(
                unicodedata.normalize("NFC", a).strip() for a in aliases or () if isinstance(a, str) and a.strip()
            )
        self.phrases.discard("")
        self._phrase_re: re.Pattern[str] | None | bool = False  # built on first use

    def __bool__(self) -> bool:
        return bool(self.names)

    def matches(self, target: str) -> bool:
        """True when the link target ``target`` (as written, fragment already removed) may name a withheld note."""
        t = _fold_path(target.strip()).replace("\\", "/")
        if not t:
            return False
        if t in self.aliases:
            return True
        t = t.lstrip("/")
        while t.startswith(("./", "../")):
            t = t.split("/", 1)[1]
        base = t.rsplit("/", 1)[-1]
        return t in self.names or base in self.names

    def redact(self, text: str) -> str:
        """``text`` with every link to a withheld note replaced by :data:`WITHHELD_LINK`."""
        if not self.names or not text or ("[" not in text):
            return text

        def wiki(m: re.Match[str]) -> str:
            target = parse_wikilink(m.group(2))[0]
            return WITHHELD_LINK if target and self.matches(target) else m.group(0)

        def md(m: re.Match[str]) -> str:
            dest = m.group(3)
            if dest.startswith("<") and dest.endswith(">"):
                dest = dest[1:-1]
            dest = dest.strip()
            if not dest or URL_SCHEME_RE.match(dest) or dest.startswith("//"):
                return m.group(0)
            target = split_fragment(unquote(dest))[0]
            return WITHHELD_LINK if target and self.matches(target) else m.group(0)

        return MDLINK_RE.sub(md, WIKILINK_RE.sub(wiki, text))

    def redact_symbol(self, symbol: str, displays: Iterable[str] = ()) -> str:
        """A heading path (``symbol``, ``A › B``) with every mention of a withheld note replaced by
        :data:`WITHHELD_LINK`. A stored heading has lost its link brackets (``## Meeting with [[Dr Smith]]``
        is stored as ``Meeting with Dr Smith``; ``[[Dr Smith#Plan]]`` as ``Dr Smith > Plan``), so link syntax
        cannot be relied on: every withheld note's file name, vault path (without ``.md``) and alias is
        masked as a whole phrase, case-insensitively, with a folder prefix, a ``.md`` suffix and a
        ``> heading`` part that follows it; ``displays`` adds the shown texts of links to withheld notes
        (``[[Dr Smith|my doctor]]`` is stored as ``my doctor``: the note's links know it). Remaining link
        syntax is redacted first, as in :meth:`redact`. Errs on the side of masking: a plain word equal to a
        withheld note's name is masked too (only in headings: body text keeps its plain words)."""
        if not symbol or not (self.phrases or displays):
            return symbol
        text = self.redact(unicodedata.normalize("NFC", symbol))
        extra = sorted(
            {unicodedata.normalize("NFC", d).strip() for d in displays if d and d.strip()}, key=len, reverse=True
        )
        if extra:
            text = re.compile(r"(?<!\w)(?:" + "|".join(map(_phrase, extra)) + r")(?!\w)", re.IGNORECASE).sub(
                WITHHELD_LINK, text
            )
        if self._phrase_re is False:
            names = sorted(self.phrases, key=len, reverse=True)
            self._phrase_re = (
                re.compile(
                    r"(?<!\w)(?:[^\s›/]+/)*(?:"
                    + "|".join(map(_phrase, names))
                    + r")(?:\.md)?(?:\s+>\s+[^›]*[^\s›])?(?!\w)",
                    re.IGNORECASE,
                )
                if names
                else None
            )
        if self._phrase_re is not None:
            text = self._phrase_re.sub(WITHHELD_LINK, text)  # type: ignore[union-attr]
        return text


def _phrase(text: str) -> str:
    """A regex for ``text`` as written, any run of whitespace matching any other."""
    return r"\s+".join(re.escape(part) for part in text.split())


def norm_folder(raw: str) -> str:
    folder = unicodedata.normalize("NFC", str(raw).strip()).strip("/")
    if not folder or "\\" in folder or "\x00" in folder:
        raise ValueError(
            f"{raw!r} is not a vault folder; expected a vault-relative path such as 'Private' or 'Journal/2024'"
        )
    parts = folder.split("/")
    if any(p in ("", ".", "..") for p in parts) or (len(folder) > 1 and folder[1] == ":"):
        raise ValueError(
            f"{raw!r} is not a vault folder; expected a vault-relative path without '..' such as "
            "'Private' or 'Journal/2024'"
        )
    return posixpath.normpath(folder)

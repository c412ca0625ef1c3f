"""A chunk's markdown read as quotable units: sentences, list items, table rows, callout titles and FAQ questions,
each with the paragraph and the FAQ entry it belongs to. Pure: no I/O.

The extractive answer (:mod:`cairn.answers.extractive`) quotes these units, and uses the structure so that an answer
never runs a callout title or a list into the next sentence, never quotes a sentence that refers back ("These
callouts start out collapsed.") without what it refers to, and never mixes the entries of a FAQ. (The embedding
recipe still reads a chunk with :func:`cairn.prompt.candidate_sentences`, as the indexes' vectors were made; most
units are the same text, and their vectors come from the embedding cache.)

Markdown is cleaned the way Obsidian shows it: a link shows its display text (``[[Note|alias]]`` → ``alias``,
``[[Note]]`` → ``Note``, ``[[#Heading]]`` → ``Heading``, ``[text](url)`` → ``text``); an embedded file (``![[a.png]]``,
``![alt](b.png)``) shows nothing in a sentence, an embedded note its name; a line holding only embeds or only tags
is not prose. Code spans are quoted as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Literal

#: What a unit is. ``sentence`` (prose), ``item`` (a list item or table row: quoted on a line of its own),
#: ``title`` (a callout's title: a heading, never quoted as a sentence), ``question`` (a FAQ question: a bold line or
#: ``Q:`` line ending in ``?``; it opens an entry), ``heading`` (a heading that asks a question: it opens an entry
#: too), ``fragment`` (the cut-off start of a chunk that begins inside a sentence).
UnitKind = Literal["sentence", "item", "title", "question", "heading", "fragment"]

_CODE_FENCE = re.compile(r"^\s*(?:>\s*)*(```|~~~)")
_WIKILINK = re.compile(r"(!?)\[\[([^\]|#^]*)([#^][^\]|]*)?(?:\|([^\]]*))?\]\]")
_MDLINK = re.compile(r"(!?)\[([^\]]*)\]\([^)]*\)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+")
_BULLET = re.compile(r"^\s*(?:>\s*)*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?")
_QUOTE = re.compile(r"^\s*(?:>\s*)+")
_CALLOUT = re.compile(r"^\s*(?:>\s*)+\[![\w-]+\][-+]?\s*")
_CALLOUT_TYPE = re.compile(r"\[!([\w-]+)\]")
_EMPH = re.compile(r"(\*\*|__|==|~~)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")
_HTML = re.compile(r"<[^>]{1,200}>")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_TAG = re.compile(r"(?<![\w&/#])#[A-Za-z_][\w/-]*")
#: A line of a FAQ: its question in bold (``**How do I …?**``), or after ``Q:``.
_FAQ_QUESTION = re.compile(r"^\s*(?:\*\*[^*]+\?\*\*|__[^_]+\?__|(?:Q|Question)\s*[:.]\s+.+\?)\s*$")
#: A line that is all bold and asks nothing: a title over what follows ("**Linking to a heading**").
_BOLD_TITLE = re.compile(r"^\s*(?:\*\*[^*]+\*\*|__[^_]+__)\s*$")
#: Tags closing a paragraph ("… goes on the beds in November. #garden"): the note's metadata, not its prose.
_TRAILING_TAGS = re.compile(r"(?:\s+#[A-Za-z_][\w/-]*)+\s*$")
_ANSWER_LABEL = re.compile(r"^\s*(?:A|Answer)\s*[:.]\s+")
_HEADING_QUESTION = re.compile(r"^\s{0,3}#{1,6}\s+.+\?\s*$")
#: Files an embed shows as itself (an image, a PDF, audio, video), not as text.
_FILE_EMBED = re.compile(r"\.(?!md\b)[A-Za-z0-9]{2,5}$")
#: Openers that refer back to what was said before ("These callouts…", "It…", "However, …", "No, …").
_BACK_REFERENCE = re.compile(
    r"^(?:(?:This|These|That|Those|It|Its|They|Them|Their|Such|He|She|His|Her)\b"
    r"|(?:However|Otherwise|Instead|Therefore|Thus|Hence|Also|Yes|No)\b[,.!]?)"
)


#: Phrases inside a sentence that point at what came before it ("we do not offer refunds in such cases").
_BACK_PHRASE = re.compile(r"\b(?:in|for|with) (?:such|these|those|this|that) (?:cases?|situations?)\b|\bthat period\b")


def refers_back(sentence: str) -> bool:
    """Whether ``sentence`` refers to what came before it — opens with This, These, It, They, Such, However, Yes,
    No…, or says "in such cases", "that period": quoted alone it does not make sense."""
    return bool(_BACK_REFERENCE.match(sentence) or _BACK_PHRASE.search(sentence))


def _link_text(m: re.Match[str]) -> str:
    embed, target, anchor, alias = m.group(1), m.group(2).strip(), m.group(3) or "", m.group(4)
    if embed and _FILE_EMBED.search(target):
        return ""  # an embedded image, PDF or media file shows as itself, not as words
    if alias is not None and not embed:
        return alias.strip()
    if target:
        return target
    return anchor.lstrip("#^").strip() if anchor.startswith("#") else ""


def _clean_prose(text: str) -> str:
    text = _WIKILINK.sub(_link_text, text)
    text = _MDLINK.sub(lambda m: "" if m.group(1) else m.group(2), text)
    text = _HTML.sub("", text)
    return _EMPH.sub("", text)


def clean_markdown_line(line: str) -> str:
    """Plain text of one markdown line as Obsidian shows it: links to their display text, embedded files left out,
    markers and emphasis removed; code spans kept as written."""
    line = _HEADING.sub("", line)
    line = _CALLOUT.sub("", line)
    line = _QUOTE.sub("", line)
    line = _BULLET.sub("", line)
    parts = _CODE_SPAN.split(line)  # [prose, ticks, code, prose, ticks, code, …, prose]
    out = []
    for i in range(0, len(parts), 3):
        out.append(_clean_prose(parts[i]))
        if i + 2 < len(parts):
            out.append(f"{parts[i + 1]}{parts[i + 2]}{parts[i + 1]}")
    return re.sub(r"\s{2,}", " ", "".join(out)).strip()


def _not_prose(cleaned: str) -> bool:
    """A line that shows no words once embeds are left out, or holds only tags."""
    return not _TAG.sub("", cleaned).strip(" ,;")


def _starts_in_code(text: str) -> bool:
    """Whether a chunk begins inside a code block (its overlap with the chunk before cut one): it does not begin like
    prose, its first fence is a bare one (a closing fence: an opening one often names a language), and nothing before
    that fence ends a sentence."""
    if re.match(r"\s*(?:[A-Z0-9\"'(\[*_#>|!-])", text):
        return False
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if _CODE_FENCE.match(line)), None)
    if first is None or _CODE_FENCE.sub("", lines[first]).strip():
        return False
    return not any(re.search(r"[.!?:](?:\s|$)", line) for line in lines[:first])


@dataclass(frozen=True, slots=True)
class Unit:
    """One quotable unit of a chunk. ``paragraph`` and ``entry`` number the paragraph and the FAQ entry it is in
    (0-based, in reading order; entry 0 is what comes before the chunk's first FAQ question).

    Where it sits in the note's structure: ``block`` numbers the list or table it belongs to (-1 for none; the items
    of one list, nested ones included, share it), ``marker`` is the list marker of the item it opens as the note
    writes it (``"3."``, ``"-"``; ``"|"`` for a table row; ``""`` for prose and for an item's later sentences),
    ``depth`` its nesting (0 for a top-level item), ``heading`` the last heading read before it in the chunk (``""``
    before the first: the chunk's heading path says it) and ``label`` the title over it within that heading (a bold
    line such as "Desktop/Tablet", or a callout's title; ``""`` for none)."""

    text: str
    kind: UnitKind
    paragraph: int
    entry: int
    block: int = -1
    marker: str = ""
    depth: int = 0
    heading: str = ""
    label: str = ""

    @property
    def refers_back(self) -> bool:
        return refers_back(self.text)

    @property
    def ordered(self) -> bool:
        """Whether it opens an item of a numbered list (a step of a procedure)."""
        return self.marker[:1].isdigit()


def passage_units(
    text: str,
    *,
    min_words: int = 4,
    max_chars: int = 400,
    attach_code: bool = False,
    max_code_chars: int = 160,
    all_items: bool = False,
) -> list[Unit]:
    """The units of a chunk worth quoting (code fences, table rules and headings skipped; units under ``min_words``
    words left out, longer than ``max_chars`` cut at a word with ``…``). Prose is split at sentence ends within a
    paragraph; list items, table rows and callout titles are units of their own. With ``attach_code``, a sentence
    ending in ``:`` right before a short code block ("To embed a note:" + `![[Internal links]]`) gets the code
    appended in backticks, since the code is the answer. With ``all_items``, every list item is a unit whatever its
    length (a step "Open **Settings**." is part of its procedure); else short items are appended to the sentence
    ending in ``:`` that introduces them (with ``attach_code``) or left out."""
    scan = _Scan(min_words, max_chars, attach_code, max_code_chars, all_items)
    scan.in_code = _starts_in_code(text)
    for raw in text.splitlines():
        scan.line(raw)
    scan.flush()
    scan._close_list()
    units = scan.out
    if units and text[:1].islower() and units[0].text[:1].islower() and units[0].kind == "sentence":
        units[0] = replace(units[0], kind="fragment")
    return units


#: Words of a title that names what follows (a bold line, a callout's title); a longer one is said, not a name.
_LABEL_WORDS = 6
_EMBED = re.compile(r"!\[\[[^\]]*\]\]|!\[[^\]]*\]\([^)]*\)")
_INDENT = re.compile(r"^((?:\s*>)*)(\s*)")


def _indent(raw: str) -> int:
    """Columns of white space before a line's content, after its ``>`` markers (a tab counts 4)."""
    m = _INDENT.match(raw)
    return len(m.group(2).replace("\t", "    ")) if m else 0


@dataclass(slots=True)
class _Scan:
    """The state of :func:`passage_units` while it reads a chunk line by line."""

    min_words: int
    max_chars: int
    attach_code: bool
    max_code_chars: int
    all_items: bool = False
    out: list[Unit] = field(default_factory=list)
    in_code: bool = False
    code: list[str] = field(default_factory=list)  # lines of the code block being read
    colon_at: int | None = None  # index in ``out`` of the sentence ending in ":" before that block
    fence_quote: str = ""  # the ``>`` markers before the fence that opened the code block
    lines: list[str] = field(default_factory=list)  # cleaned lines of the paragraph or item being read
    kind: UnitKind = "sentence"  # of the lines being read: sentence (a paragraph) or item
    paragraph: int = 0
    entry: int = 0
    question: bool = False  # the lines being read began with a FAQ question
    intro: int | None = None  # index in ``out`` of a sentence ending in ":" that short list items are appended to
    listed: list[str] = field(default_factory=list)  # those items
    heading: str = ""  # the last heading read
    label: str = ""  # the bold line or callout title read since that heading
    block: int = -1  # the list or table being read (-1: none)
    blocks: int = 0  # lists and tables read so far
    marker: str = ""  # the marker of the item being read
    depth: int = 0  # its nesting
    indents: list[int] = field(default_factory=list)  # the indents of the open list levels

    def line(self, raw: str) -> None:
        if _CODE_FENCE.match(raw):
            self._fence(raw)
        elif self.in_code:
            self.code.append(raw[len(self.fence_quote) :] if raw.startswith(self.fence_quote) else raw)
        elif _TABLE_RULE.match(raw):
            self.flush()
        elif _HEADING.match(raw):
            self.flush()
            self._close_list()
            self._end_block()
            self.heading, self.label = clean_markdown_line(raw), ""
            if _HEADING_QUESTION.match(raw):  # a question heading opens a FAQ entry
                self.entry += 1
                self.out.append(self._unit(self._cut(self.heading), "heading"))
                self.paragraph += 1
        elif raw.strip().startswith("|"):
            self._row(raw)
        elif _CALLOUT.match(raw):
            self._callout_title(raw)
        else:
            self._prose(raw)

    def _unit(self, text: str, kind: UnitKind, marker: str = "") -> Unit:
        block = self.block if kind == "item" else -1
        depth = self.depth if kind == "item" else 0
        return Unit(text, kind, self.paragraph, self.entry, block, marker, depth, self.heading, self.label)

    def _end_block(self) -> None:
        self.block, self.marker, self.depth = -1, "", 0
        self.indents.clear()

    def _start_item(self, raw: str) -> None:
        """A list item begins: the marker as written, its nesting from the indents of the open levels."""
        bare = _QUOTE.sub("", raw)
        self.marker = bare.split(None, 1)[0] if bare.strip() else "-"
        indent = _indent(raw)
        if self.block < 0:
            self.block, self.blocks = self.blocks, self.blocks + 1
        while self.indents and indent < self.indents[-1]:
            self.indents.pop()
        if not self.indents or indent > self.indents[-1]:
            self.indents.append(indent)
        self.depth = len(self.indents) - 1

    def _prose(self, raw: str) -> None:
        bullet = bool(_BULLET.match(raw))
        if not raw.strip() or bullet:
            self.flush()
        cleaned = _ANSWER_LABEL.sub("", clean_markdown_line(raw))
        if not cleaned or _not_prose(cleaned):
            if not _QUOTE.sub("", raw).strip():
                self.flush()  # an empty quoted line ends a paragraph inside a callout
            return
        bare = _QUOTE.sub("", raw)
        if _FAQ_QUESTION.match(bare):
            self.flush()
            self._end_block()
            self.entry += 1
            self.question = True
        elif _BOLD_TITLE.match(_EMBED.sub("", bare)) and not self.lines:
            self._end_block()
            self._title(cleaned)
            return
        elif self.question and self.lines:
            self._emit()  # the question is a unit of its own; its answer follows in the same paragraph
            self.question = False
        if bullet:
            self.kind = "item"
            self._start_item(raw)
        elif not self.lines and self.block >= 0:
            if _indent(raw) >= 2 and self.indents:  # a later paragraph of the item being read
                self.kind, self.marker = "item", ""
            else:
                self._end_block()
        if not self.lines and self.block < 0 and not _QUOTE.match(raw):
            self.label = ""  # prose outside a callout: the title over the last list or callout no longer applies
        self.lines.append(cleaned)

    def _row(self, raw: str) -> None:
        self.flush()
        self._close_list()
        if self.block < 0 or self.marker != "|":
            self._end_block()
            self.block, self.blocks, self.marker = self.blocks, self.blocks + 1, "|"
        cells = [clean_markdown_line(c) for c in raw.strip().strip("|").split("|")]
        row = " — ".join(c for c in cells if c)
        if re.search(r"\w", row) and len(row.split()) >= (1 if self.all_items else self.min_words):
            self.out.append(self._unit(row, "item", "|"))
        self.paragraph += 1

    def _callout_title(self, raw: str) -> None:
        """A callout's first line: its title is a unit of its own (``title``), never run into its body. A callout
        without a title shows its type identifier as one, in title case (``> [!abstract]-`` → "Abstract")."""
        self.flush()
        self._end_block()
        title = clean_markdown_line(raw)
        if not title and self.all_items and (kind := _CALLOUT_TYPE.search(raw)):
            title = kind.group(1)[:1].upper() + kind.group(1)[1:]
        self._title(title)

    def _title(self, title: str) -> None:
        self._close_list()
        if len(title.split()) <= _LABEL_WORDS and not title.endswith("."):
            self.label = title  # a title over what follows; a callout whose title is a sentence says it instead
        if title and (self.all_items or len(title.split()) >= self.min_words):
            self.out.append(self._unit(self._cut(title), "title"))
        self.paragraph += 1

    def _fence(self, raw: str) -> None:
        """A fence line opens a code block, or closes one (attaching a short snippet to a preceding ``:``)."""
        if not self.in_code:
            self._close_list()
            quote = _QUOTE.match(raw)
            self.fence_quote = quote.group(0) if quote else ""
            self.flush()
            if self.block >= 0 and _indent(raw) < 2:
                self._end_block()  # a code block inside an item is indented; one that is not ends the list
            out = self.out
            self.colon_at = len(out) - 1 if self.attach_code and out and out[-1].text.endswith(":") else None
            self.code = []
        else:
            snippet = " ".join(line.strip() for line in self.code if line.strip())
            at = self.colon_at
            if at is not None and snippet and len(snippet) <= self.max_code_chars and "`" not in snippet:
                u = self.out[at]
                self.out[at] = replace(u, text=f"{u.text} `{snippet}`")
            self.colon_at = None
        self.in_code = not self.in_code

    def _cut(self, s: str) -> str:
        return s if len(s) <= self.max_chars else s[: self.max_chars - 1].rsplit(" ", 1)[0] + "…"

    def _emit(self) -> None:
        """The sentences (at least ``min_words`` words; any item with ``all_items``) of the lines read, as units of the
        current paragraph. With ``attach_code`` (and not ``all_items``), list items too short to be units ("Obsidian
        Sync") are appended to the sentence ending in ":" that introduces them: "… for the following services:
        Obsidian Publish, Obsidian Sync."."""
        joined = _TRAILING_TAGS.sub("", " ".join(self.lines))
        self.lines.clear()
        item = self.kind == "item"
        short = len(joined.split()) < self.min_words
        if item and short and not self.all_items and self.attach_code and self.intro is not None:
            self.listed.append(joined.rstrip(".;,"))
            return
        self._close_list()
        kind: UnitKind = "question" if self.question else self.kind
        marker = self.marker if item else ""
        least = 1 if item and self.all_items else self.min_words
        for s in [joined] if self.question or (item and self.all_items and short) else _SENTENCE_END.split(joined):
            s = s.strip()
            if len(s.split()) >= least:
                self.out.append(self._unit(self._cut(s), kind, marker))
                marker = ""
        last = self.out[-1] if self.out else None
        self.intro = len(self.out) - 1 if last and last.kind == "sentence" and last.text.endswith(":") else None

    def _close_list(self) -> None:
        """Append the short list items read to the sentence that introduced them."""
        if self.intro is not None and self.listed:
            u = self.out[self.intro]
            self.out[self.intro] = replace(u, text=self._cut(f"{u.text} {', '.join(self.listed)}."))
        self.intro = None
        self.listed = []

    def flush(self) -> None:
        """End the paragraph or list item being read."""
        if self.lines:
            self._emit()
            self.paragraph += 1
        self.kind = "sentence"
        self.question = False

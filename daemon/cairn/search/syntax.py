"""Obsidian's core search syntax, parsed into a structured query (:class:`ParsedQuery`).

The meaning is Obsidian's (Search core plugin): words separated by spaces must all be in a note (AND); ``OR``
between expressions is either, and binds loosest (``meeting work OR meetup personal`` is ``(meeting work) OR
(meetup personal)``); parentheses group; ``"exact phrase"`` (``\\"`` inside is a quote); ``-word``, ``-"phrase"``,
``-(…)`` exclude every note matching it; ``tag:#x`` (nested tags ``#x/y`` match; ``tag:x`` too), ``path:text`` (the
vault-relative path contains the text), ``file:text`` (the file name contains it), ``content:…`` (the text itself).
An operator followed by a group reads each term of the group: ``path:(Recipes OR -"Daily notes")`` is
``path:Recipes OR -path:"Daily notes"``.
Words match as FTS5 tokenizes them (case, diacritics and word endings ignored), not as substrings.

Parsing never fails: an unbalanced quote reads the rest as words, a lone ``-`` or an unmatched parenthesis is
ignored (so are parentheses nested deeper than :data:`MAX_DEPTH`), an unknown ``name:value`` is plain words, and
so is a word starting with ``--`` (``--background-primary``, a command-line flag: not an exclusion). A query that
is only words (parentheses that only group them included) is ``plain``: a question in words, not syntax. Nothing
here reaches FTS5: the matcher (:mod:`cairn.search.lexical`) builds its own quoted phrases from the words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The operators understood; any other ``name:`` is read as words.
FIELDS = ("tag", "path", "file", "content")
#: Parentheses nested deeper than this are ignored (their words still count): the parser recurses per level.
MAX_DEPTH = 32


@dataclass(frozen=True, slots=True)
class Word:
    """A bare word as typed; ``prefix``: the query's last bare word (search-as-you-type: it also matches as a
    prefix)."""

    text: str
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class Phrase:
    """An exact phrase (its words, in order)."""

    text: str


@dataclass(frozen=True, slots=True)
class Field:
    """``tag:``, ``path:`` or ``file:`` and its value (the text after the colon, unquoted)."""

    name: str
    value: str


@dataclass(frozen=True, slots=True)
class Not:
    node: Node


@dataclass(frozen=True, slots=True)
class And:
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    items: tuple[Node, ...]


Node = Word | Phrase | Field | Not | And | Or


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """``root``: the expression (an :class:`And` or an :class:`Or`, possibly with no items); ``plain``: the text used
    no syntax (no quote, exclusion, ``OR``, parenthesis or operator); ``text``: the words and phrases a note should
    hold, operators and exclusions removed (what the dense leg embeds)."""

    root: And | Or
    plain: bool
    text: str


_TOKEN = re.compile(
    r'(?P<space>\s+)|(?P<open>\()|(?P<close>\))|(?P<quote>"(?:\\.|[^"\\])*")|(?P<word>[^\s()"]+)', re.UNICODE
)


def _lex(text: str) -> list[tuple[str, str, bool]]:
    """(kind, value, glued) tokens: kind open, close, phrase, word; ``glued``: no space before it. An unbalanced
    quote is dropped (the rest reads as words)."""
    out: list[tuple[str, str, bool]] = []
    pos, glued = 0, False
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:  # a lone '"': dropped
            pos += 1
            glued = True
            continue
        kind = m.lastgroup or "space"
        pos = m.end()
        if kind == "space":
            glued = False
            continue
        value = m.group(0)
        if kind == "quote":
            kind, value = "phrase", re.sub(r"\\(.)", r"\1", value[1:-1])
        out.append((kind, value, glued))
        glued = True
    return out


class _Parser:
    """Recursive descent over :func:`_lex`'s tokens: or := and ('OR' and)*; and := unary+; unary := '-'? atom."""

    def __init__(self, tokens: list[tuple[str, str, bool]]) -> None:
        self.tokens = tokens
        self.i = 0
        self.depth = 0
        self.operators = False  # a ``content:`` was read (its words are plain words, but the text is syntax)

    def peek(self) -> tuple[str, str, bool] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def parse_or(self) -> And | Or:
        branches = [self.parse_and()]
        while (t := self.peek()) is not None and t[0] == "word" and t[1] == "OR":
            self.i += 1
            branches.append(self.parse_and())
        branches = [b for b in branches if b.items]
        if len(branches) == 1:
            return branches[0]
        return Or(tuple(branches)) if branches else And(())

    def parse_and(self) -> And:
        items: list[Node] = []
        while (t := self.peek()) is not None:
            if t[0] == "close":
                if self.depth:
                    break
                self.i += 1  # an unmatched ')': ignored
                continue
            if t[0] == "word" and t[1] == "OR":
                break
            node = self.parse_unary()
            if node is not None:
                items.append(node)
        return And(tuple(items))

    def parse_unary(self) -> Node | None:
        kind, value, _ = self.tokens[self.i]
        if kind == "word" and value.startswith("-") and not value.startswith("--"):
            if value == "-":  # '-' alone, or before a phrase or a group
                nxt = self.tokens[self.i + 1] if self.i + 1 < len(self.tokens) else None
                self.i += 1
                if nxt is None or not nxt[2] or nxt[0] == "close":
                    return None  # a lone '-': ignored
                atom = self.parse_atom()
            else:
                self.tokens[self.i] = (kind, value[1:], False)
                atom = self.parse_atom()
            return Not(atom) if atom is not None else None
        return self.parse_atom()

    def parse_atom(self) -> Node | None:
        kind, value, _ = self.tokens[self.i]
        self.i += 1
        if kind == "phrase":
            return Phrase(value) if value.strip() else None
        if kind == "open":
            if self.depth >= MAX_DEPTH:
                return None  # too deep: this parenthesis is ignored, what follows is read at this level
            self.depth += 1
            inner = self.parse_or()
            self.depth -= 1
            if (t := self.peek()) is not None and t[0] == "close":
                self.i += 1
            return inner if inner.items else None
        if kind == "close":
            return None
        return self.field_or_word(value)

    def field_or_word(self, value: str) -> Node | None:
        name, colon, rest = value.partition(":")
        if colon and name.lower() in FIELDS:
            if not rest and (t := self.peek()) is not None and t[2] and t[0] in ("phrase", "open"):
                inner = self.parse_atom()  # path:"Daily notes" or content:(a OR b)
                self.operators = True
                if name.lower() == "content" or inner is None:
                    return inner
                return _under(name.lower(), inner)
            if name.lower() == "content":
                self.operators = True
                return Word(rest) if rest else None
            return Field(name.lower(), rest) if rest else None
        return Word(value)


def _under(name: str, node: Node) -> Node:
    """``node`` (an operator's phrase or group) with each of its words and phrases read by operator ``name``:
    ``file:(a OR -"b c")`` is ``file:a OR -file:"b c"``, as Obsidian nests a search term under an operator. An
    operator inside the group keeps its own (``path:(a file:b)`` is ``path:a file:b``); a group of one term is that
    term."""
    if isinstance(node, Phrase | Word):
        return Field(name, node.text)
    if isinstance(node, Not):
        return Not(_under(name, node.node))
    if isinstance(node, And | Or):
        items = tuple(_under(name, n) for n in node.items)
        return items[0] if len(items) == 1 else type(node)(items)
    return node


def _positive_text(node: Node, out: list[str]) -> None:
    if isinstance(node, Word | Phrase):
        out.append(node.text)
    elif isinstance(node, And | Or):
        for n in node.items:
            _positive_text(n, out)


def _mark_last_word(node: And | Or) -> And | Or:
    """``node`` with its last bare word (not negated, not in a phrase) marked as a prefix."""
    items = list(node.items)
    for k in range(len(items) - 1, -1, -1):
        item = items[k]
        if isinstance(item, Word):
            items[k] = Word(item.text, prefix=True)
            return type(node)(tuple(items))
        if isinstance(item, And | Or):
            items[k] = _mark_last_word(item)
            return type(node)(tuple(items))
        if isinstance(item, Phrase | Not | Field):
            return node
    return node


def parse(text: str) -> ParsedQuery:
    """``text`` (a user's query) as a :class:`ParsedQuery`; never raises (module docstring)."""
    parser = _Parser(_lex(text))
    root = parser.parse_or()
    while parser.i < len(parser.tokens):  # after an unmatched ')' at the top: the rest, ANDed
        rest = parser.parse_or()
        root = And((root, rest)) if rest.items else root
    root = _mark_last_word(_flatten(root))
    words: list[str] = []
    _positive_text(root, words)
    plain = not parser.operators and isinstance(root, And) and all(isinstance(n, Word) for n in root.items)
    return ParsedQuery(root=root, plain=plain, text=" ".join(words))


def _flatten(node: And | Or) -> And | Or:
    """``node`` with groups of the same kind merged into it (``a (b c)`` is ``a b c``)."""
    items: list[Node] = []
    for n in node.items:
        if isinstance(n, And | Or):
            n = _flatten(n)
            if type(n) is type(node) or len(n.items) == 1:
                items.extend(n.items)
                continue
        items.append(n)
    return type(node)(tuple(items))

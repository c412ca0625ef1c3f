"""A search request's text, parsed once (:class:`Query`): its terms, its Obsidian syntax tree and the terms of each
of its words. Every step of a search, the not-found rule and the extractive answer read the terms from here; this
module is the one place a user's text is split into terms (:func:`query_terms`).

Terms are what the keyword leg looks up: lower-cased words (NFKC), stopwords left out, order kept, de-duplicated;
``e-mail`` gives ``e`` and ``mail``, ``Bob's`` gives ``bob``. FTS5 then tokenizes each term as the index does
(:meth:`cairn.store.Store.fts_tokens`: Porter stemming, diacritics folded), which needs the store, so that part
is read where a step meets the index.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cairn.ranking import STOPWORDS, fts_phrase
from cairn.search.syntax import And, Node, Not, Or, ParsedQuery, Phrase, Word, parse

_WORD = re.compile(r"[\w][\w'’-]*", re.UNICODE)


def query_terms(text: str) -> list[str]:
    """Lower-cased word terms of a user's text, stopwords removed, order kept, de-duplicated."""
    return list(_query_terms(text))


@functools.lru_cache(maxsize=256)
def _query_terms(text: str) -> tuple[str, ...]:
    text = unicodedata.normalize("NFKC", text)
    seen: dict[str, None] = {}
    for m in _WORD.finditer(text.lower()):
        word = m.group(0).strip("'’-").replace("’", "'")
        if not word or word in STOPWORDS:
            continue
        if word.endswith("'s"):
            word = word[:-2]
        for part in re.split(r"[-']", word):
            if part and part not in STOPWORDS and (len(part) > 1 or part.isdigit()):
                seen.setdefault(part, None)
    return tuple(seen)


def fts_match_expression(text: str) -> str | None:
    """An FTS5 MATCH expression for user text: each term double-quoted (no user text is ever read as FTS5 syntax:
    AND/OR/NEAR/*/column filters are plain words), OR-ed together. None when the text has no searchable term."""
    terms = query_terms(text)
    if not terms:
        return None
    return " OR ".join(fts_phrase(t) for t in terms)


def _words(node: Node) -> Iterable[Word]:
    if isinstance(node, Word):
        yield node
    elif isinstance(node, Not):
        yield from _words(node.node)
    elif isinstance(node, And | Or):
        for item in node.items:
            yield from _words(item)


@dataclass(frozen=True)
class Query:
    """One request's text, parsed once. ``text``: stripped, as checked by the edge contract; ``terms``: its
    :func:`query_terms`; ``parsed``: Obsidian's syntax tree (:func:`cairn.search.syntax.parse`); ``keyword_base``:
    the terms of what the keyword leg looks up before expansions (the text's own for a plain query; for one with
    syntax, those of its positive words and phrases); ``word_terms``: the terms of each word of the tree, by its
    text."""

    text: str
    terms: tuple[str, ...]
    parsed: ParsedQuery
    keyword_base: tuple[str, ...]
    word_terms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Query:
        parsed = parse(text)
        base = _query_terms(text) if parsed.plain else _query_terms(parsed.text)
        words = {w.text: _query_terms(w.text) for w in _words(parsed.root)}
        return cls(text, _query_terms(text), parsed, base, words)

    def terms_of(self, word: Word | Phrase) -> tuple[str, ...]:
        """The terms of one word (or phrase) of the tree."""
        held = self.word_terms.get(word.text)
        return held if held is not None else _query_terms(word.text)

    def keyword_terms(self, expansions: Iterable[str] = ()) -> tuple[str, ...]:
        """The keyword leg's terms: :attr:`keyword_base`, then the terms of each expansion (prefix and typo tokens
        drawn from the caller's vocabulary), de-duplicated in that order."""
        out = dict.fromkeys(self.keyword_base)
        for token in expansions:
            out.update(dict.fromkeys(_query_terms(token)))
        return tuple(out)

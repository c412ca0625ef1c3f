"""What a search returns (:class:`Hit`, :class:`SearchResult`) and its snippets."""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cairn.contract import IndexCoverage, hit_json, search_json
from cairn.notes import strip_block_ids


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved chunk. ``score`` is the fused ranking score (higher is better);
    ``cosine`` the cosine similarity of the chunk to the query (the floor is applied to it)."""

    chunk_id: int
    file_path: str
    title: str
    symbol: str
    score: float
    cosine: float
    snippet: str
    text: str
    tags: tuple[str, ...] = ()
    lines: tuple[int, int] | None = None
    page: int | None = None
    kind: str = "prose"
    indexed_at: float = 0.0
    #: An upper bound on the tokens of ``text`` (the chunk's indexed ``token_count``: title, heading path and text),
    #: 0 when unknown (text masked for a caller); not part of the JSON.
    token_bound: int = 0
    #: The share (0..1) of the query's terms the chunk holds as the keyword leg matches them;
    #: read by the JSON's ``relevance`` (:func:`cairn.relevance.relevance`), not part of it.
    matched: float = 0.0
    #: The share (0..1) of the query's words the passage holds as typed (case-folded, punctuation included:
    #: :mod:`cairn.search.literal`); not part of the JSON.
    exact: float = 0.0
    #: The hit ranked first for a question (a query of more words than one types into a search box); not part of
    #: the JSON.
    first: bool = False
    #: When the note's file was last modified (unix seconds); set for the notes of a recent-notes listing only
    #: (:mod:`cairn.search.recent`), 0 otherwise.
    modified_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """camelCase JSON as in docs/design.md, "Interfaces" (`search` results): :func:`cairn.contract.hit_json`."""
        return hit_json(self)


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Ranked hits (at most top_k), or the recent notes (``recent``), and the time taken in ms. ``withheld``: how
    many withheld notes were removed from the candidates (for the audit log; not part of :meth:`to_json`)."""

    hits: list[Hit]
    elapsed_ms: float
    preference: str | None = None
    withheld: int = 0
    #: the notes indexed and those still waiting for vectors, as this caller sees them (None: not counted)
    coverage: IndexCoverage | None = None
    #: True for the most recently modified notes an empty query lists (:mod:`cairn.search.recent`): one hit per note,
    #: its first passage, newest first; nothing ranked
    recent: bool = False

    def to_json(self) -> dict[str, Any]:
        return search_json(self)


_SNIP_WORD = re.compile(r"\w+", re.UNICODE)


@functools.lru_cache(maxsize=64)
def _prefixes(terms: tuple[str, ...]) -> tuple[str, ...]:
    """The first 5 characters of each of ``terms`` that are all word characters (``\\w``): what a word of the text
    must begin with to count as a query term in a snippet."""
    return tuple(sorted({t[:5] for t in terms if _SNIP_WORD.fullmatch(t[:5])}))


def _word_starts(text: str, prefixes: tuple[str, ...]) -> list[int]:
    """Ascending positions in ``text`` where a word (a run of ``\\w``) begins with one of ``prefixes``. Found with
    ``str.find`` rather than a pattern built per query: compiling one costs more than the search itself."""
    found: set[int] = set()
    for prefix in prefixes:
        at = text.find(prefix)
        while at >= 0:
            before = text[at - 1] if at else " "
            if not (before.isalnum() or before == "_"):  # \w is exactly str.isalnum() or "_"
                found.add(at)
            at = text.find(prefix, at + 1)
    return sorted(found)


def make_snippet(text: str, terms: Sequence[str], width: int = 220) -> str:
    """A one-line excerpt of ``text`` (≤ ``width`` chars) around the densest run of query terms; block-id
    markers (``^d1``) are left out."""
    flat = " ".join(strip_block_ids(text).split())
    if len(flat) <= width:
        return flat
    positions = _word_starts(flat.lower(), _prefixes(tuple(terms)))
    if not positions:
        return flat[: width - 1].rsplit(" ", 1)[0] + "…"
    best, best_count = positions[0], 0
    for i, p in enumerate(positions):  # ascending: the terms in [p, p + width) are positions[i:j]
        count = bisect.bisect_left(positions, p + width, i) - i
        if count > best_count:
            best, best_count = p, count
    start = max(0, best - width // 4)
    if start:
        start = flat.find(" ", start) + 1 or start
    piece = flat[start : start + width]
    if start + width < len(flat):
        piece = piece.rsplit(" ", 1)[0] + "…"
    return ("…" if start else "") + piece

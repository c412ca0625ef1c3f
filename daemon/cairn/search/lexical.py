"""Lexical evidence for search: which notes hold a query's clauses, and the tiers that put them first.

Obsidian matches at file level (a note matches ``meeting work`` when it holds both words anywhere), so coverage is
counted per note: a note holds a clause when any of its chunks does. The tiers (:class:`Coverage`): notes holding
every clause rank above notes holding some, and those above purely semantic matches; a note holding a rare clause
(held by at most :data:`RARE_NOTES` notes: a name, a code, a tool) ranks above all of them. Tiers apply to
queries of at most :data:`TIERED_CLAUSES` clauses. A chunk that holds a clause is lexical evidence: search never
drops it for its cosine (the floor applies to purely semantic hits only); within a tier the chunks that pass the
floor come first, in the fused order of the floor-passing candidates (the order an ask ranks them in), then the
others.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from cairn.errors import BadRequestError
from cairn.notes import normalise_tag
from cairn.search.cache import NotesSnapshot
from cairn.search.names import NameMatch, NameTerm, name_terms
from cairn.search.query import Query
from cairn.search.syntax import And, Field, Node, Not, Or, Phrase, Word
from cairn.search.view import CallerView
from cairn.search.vocabulary import Vocabularies
from cairn.store import Store

#: (chunk ids (k,) int64, BM25 (k,) float64 < 0) of the chunks holding a term or phrase.
Matches = tuple[np.ndarray, np.ndarray]

#: A clause held by at most this many notes is rare: its notes rank first.
RARE_NOTES = 5
#: Queries of at most this many clauses are ranked by tier (what one types into a search box: ``banneton``,
#: ``garden -tomato``, a title); longer ones are questions in words, whose terms are mostly common words: tiers by
#: which of them a note holds, or by one odd word of the question, would put notes holding them above the
#: semantically closest ones, so those keep the fused order.
TIERED_CLAUSES = 3


@dataclass(frozen=True)
class NoteMap:
    """Chunk → note of every indexed note at one store epoch. ``note_of`` (max chunk id + 1,) int64: the note id of
    each chunk id, -1 for ids that are not chunks of an indexed note; ``paths``: note id → vault-relative path."""

    note_of: np.ndarray
    paths: dict[int, str]

    @classmethod
    def read(cls, store: Store) -> NoteMap:
        chunk_ids, note_ids, paths = store.chunk_note_map()
        note_of = np.full(int(chunk_ids.max()) + 1 if len(chunk_ids) else 0, -1, dtype=np.int64)
        note_of[chunk_ids] = note_ids
        return cls(note_of, paths)

    def notes(self, chunk_ids: np.ndarray) -> np.ndarray:
        """The note ids (k,) of ``chunk_ids`` (k,), -1 for a chunk not in the map (added since it was read)."""
        ids = np.asarray(chunk_ids, dtype=np.int64)
        return self._padded[np.minimum(ids, len(self.note_of))]

    @cached_property
    def _padded(self) -> np.ndarray:
        """``note_of`` and one more -1 (for every id beyond it): one lookup per chunk, no mask."""
        return np.r_[self.note_of, -1]

    @cached_property
    def slots(self) -> int:
        """Note ids are below this; :meth:`slot_of` gives it to a chunk not in the map."""
        top = int(self.note_of.max()) if len(self.note_of) else -1
        return max(top, max(self.paths, default=-1)) + 1

    @cached_property
    def _slot_padded(self) -> np.ndarray:
        padded = self._padded.copy()
        padded[padded < 0] = self.slots
        return padded

    def slot_of(self, chunk_ids: np.ndarray) -> np.ndarray:
        """:meth:`notes` with :attr:`slots` in place of -1: an index into arrays of ``slots + 1`` per note."""
        ids = np.asarray(chunk_ids, dtype=np.int64)
        return self._slot_padded[np.minimum(ids, len(self.note_of))]

    def chunks_of(self, note_ids: Sequence[int]) -> np.ndarray:
        """Chunk ids (ascending) of the notes ``note_ids``."""
        if not len(note_ids):
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(np.isin(self.note_of, np.asarray(list(note_ids), dtype=np.int64)))


class NoteMaps:
    """The :class:`NoteMap` of the store's notes now, read again after a commit that changed a note's chunks (one
    query of two columns; not after a commit of vectors), a moment late during a whole-vault run
    (:class:`~cairn.search.cache.NotesSnapshot`)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._snapshot = NotesSnapshot(store, lambda: NoteMap.read(store))

    def get(self) -> NoteMap:
        return self._snapshot.get()


@dataclass(frozen=True)
class Coverage:
    """The lexical evidence of one query. ``lexical``: per term, the chunk ids holding it, ascending (a chunk holding
    one is never dropped for its cosine in search); ``tier`` (notes,) int8 by note id: 2 when the note matches the
    whole query (every term, as Obsidian), 1 when it holds some term, 0 none; ``rare`` (notes,) int32 by note id:
    how many rare terms it holds; ``extra``: chunk ids to add to the keyword candidates, best BM25 first: the best
    chunk of each note of tier 2 or holding a rare term, or named by the query, that the keyword top lacks;
    ``tiered``: whether :meth:`rank_key` ranks by tier. A note id beyond the arrays (a note added since the note
    map was read) has tier 0 and no rare term."""

    lexical: tuple[np.ndarray, ...]
    tier: np.ndarray
    rare: np.ndarray
    extra: list[int]
    tiered: bool = True
    #: note id → how its closest name (title or alias) matches the query, for the notes the query names
    #: (:mod:`cairn.search.names`)
    named: dict[int, NameMatch] = field(default_factory=dict)

    def tier_of(self, note_id: int) -> int:
        """The tier of note ``note_id`` (0, 1 or 2: see the class docstring)."""
        return int(self.tier[note_id]) if 0 <= note_id < len(self.tier) else 0

    def lexical_among(self, chunk_ids: Collection[int]) -> set[int]:
        """The chunks of ``chunk_ids`` that hold a term of the query."""
        ids = np.asarray(list(chunk_ids), dtype=np.int64)
        held = np.zeros(len(ids), dtype=bool)
        for sorted_ids in self.lexical:  # bisection: the candidates are few, a term's chunks may be many
            if len(sorted_ids):
                at = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
                held |= sorted_ids[at] == ids
        return set(ids[held].tolist())

    def rank_key(self, note_id: int) -> tuple[int, ...]:
        """Sort key (descending) of a chunk of note ``note_id``: (rare terms held, named by the query, query tokens its
        closest name holds, minus the tokens that name holds beyond the query's, tier). A query that is not tiered
        (a question in words) keeps the fused order but for the notes it names (every word of it in the title or an
        alias: what one types to find a note by its name)."""
        match = self.named.get(note_id)
        name = (1, *match.key()) if match is not None else (0, 0, 0)
        if not self.tiered:
            return 0, *name, 0
        rare = int(self.rare[note_id]) if 0 <= note_id < len(self.rare) else 0
        return rare, *name, self.tier_of(note_id)


_EMPTY = np.zeros(0, dtype=np.int64)


def coverage(
    leaves: Sequence[Matches],
    notes: NoteMap,
    keyword_top: Sequence[int],
    *,
    within: Sequence[int] | None,
    excluding: Sequence[int],
    max_extra: int,
    full: set[int] | None = None,
    tiered: bool = True,
    names: Callable[[Collection[int]], dict[int, NameMatch]] | None = None,
) -> Coverage:
    """The :class:`Coverage` of a query whose terms (words, phrases) match ``leaves``: per term, (chunk ids (k,)
    int64, BM25 (k,) float64 < 0) of the chunks holding it. ``full``: the notes matching the whole query (None:
    those holding every term). Only chunks in ``within`` (None: all) and not in ``excluding`` count.
    ``keyword_top``: the keyword candidates already held; at most ``max_extra`` chunks are added. A query that is
    not ``tiered`` gets the lexical evidence and the notes it names alone (no tier or rare term: they would not be
    used). ``names``: note ids → {note id: its :class:`~cairn.search.names.NameMatch`} of those the query names (a
    query of small words only has no term: the notes it names are its lexical evidence). Notes are counted in arrays
    by note id (:meth:`NoteMap.slot_of`): no sort of a common term's chunks."""
    lexical = tuple(ids if _ascending(ids) else np.sort(ids) for ids, _ in leaves)
    kept = _kept(leaves, within, excluding)
    slots = notes.slots
    if not kept:
        named = names(set(notes.paths)) if names is not None else {}
        return _named_only(named, notes, within, excluding, max_extra, tiered)
    owners = [notes.slot_of(ids) for ids, _ in kept]
    held_by = []
    count = np.zeros(slots + 1, dtype=np.int32)
    for owner in owners:
        held = np.zeros(slots + 1, dtype=bool)
        held[owner] = True
        held[slots] = False  # chunks not in the map
        count += held
        held_by.append(held)
    if full is None:
        whole = count == len(kept)
        full = set(np.flatnonzero(whole).tolist())
    else:
        whole = np.zeros(slots + 1, dtype=bool)
        whole[[n for n in full if 0 <= n < slots]] = True
    named = names(full) if names is not None else {}
    best = _BestChunks(kept, owners, notes, keyword_top)
    if not tiered:
        extra = best.of(named, np.zeros(slots + 1, dtype=bool), max_extra)
        return Coverage(lexical, np.zeros(slots, dtype=np.int8), np.zeros(slots, dtype=np.int32), extra, tiered, named)
    tier = (count > 0).astype(np.int8)
    tier[whole & (count > 0)] = 2
    rare = np.zeros(slots + 1, dtype=np.int32)
    for held in held_by:
        if np.count_nonzero(held) <= RARE_NOTES:
            rare += held
    extra = best.of(named, (tier == 2) | (rare > 0), max_extra)
    return Coverage(lexical, tier[:slots], rare[:slots], extra, tiered, named)


def _named_only(
    named: dict[int, NameMatch],
    notes: NoteMap,
    within: Sequence[int] | None,
    excluding: Sequence[int],
    max_extra: int,
    tiered: bool,
) -> Coverage:
    """The :class:`Coverage` of a query with no term (small words only) that names the notes ``named``: their chunks
    in ``within`` and not in ``excluding`` hold its words (in the title column) and are its lexical evidence; the
    first such chunk of each note is a candidate, closest names first."""
    chunks = notes.chunks_of(sorted(named))
    chunks = _kept([(chunks, np.zeros(len(chunks)))], within, excluding)[0][0]
    owner = notes.notes(chunks)
    firsts = np.r_[True, owner[1:] != owner[:-1]] if len(owner) else np.zeros(0, dtype=bool)
    first_of = dict(zip(owner[firsts].tolist(), chunks[firsts].tolist()))
    named = {n: m for n, m in named.items() if n in first_of}
    ranked = sorted(named, key=lambda n: (-named[n].held, named[n].extra, n))[:max_extra]
    empty = np.zeros(notes.slots, dtype=np.int8), np.zeros(notes.slots, dtype=np.int32)
    return Coverage((chunks,), *empty, [first_of[n] for n in ranked], tiered, named)


def _kept(leaves: Sequence[Matches], within: Sequence[int] | None, excluding: Sequence[int]) -> list[Matches]:
    """``leaves`` restricted to the chunks in ``within`` (None: all) and not in ``excluding``."""
    if within is None and not len(excluding):
        return list(leaves)
    kept: list[Matches] = []
    for ids, scores in leaves:
        mask = np.ones(len(ids), dtype=bool)
        if within is not None:
            mask &= np.isin(ids, np.asarray(within, dtype=np.int64))
        if len(excluding):
            mask &= ~np.isin(ids, np.asarray(excluding, dtype=np.int64))
        kept.append((ids[mask], scores[mask]))
    return kept


def _ascending(ids: np.ndarray) -> bool:
    return bool(np.all(ids[1:] > ids[:-1]))


class _BestChunks:
    """The chunk with the best summed BM25 (over the terms ``kept``, in term order) of each note that has no chunk in
    the keyword top ``held``: the candidates coverage adds. ``owners``: the note slot of each of ``kept``'s chunks."""

    def __init__(
        self, kept: Sequence[Matches], owners: Sequence[np.ndarray], notes: NoteMap, held: Sequence[int]
    ) -> None:
        self.kept, self.owners, self.notes = kept, owners, notes
        self.have = notes.slot_of(np.asarray(list(held), dtype=np.int64))

    def of(self, named: dict[int, NameMatch], wanted: np.ndarray, limit: int) -> list[int]:
        """Chunk ids, best BM25 first (ties by chunk id), at most ``limit``: those of every note the query names
        (the closest names first when they are more than ``limit``), then of the notes ``wanted`` ((notes + 1,) bool
        by note slot) as the limit allows."""
        slots = self.notes.slots
        by_name = np.zeros(slots + 1, dtype=bool)
        by_name[[n for n in named if 0 <= n < slots]] = True
        ids, acc = self._best(by_name)
        if len(ids) > limit:
            close = [named[int(n)].key() for n in self.notes.notes(ids).tolist()]
            order = sorted(range(len(ids)), key=lambda i: (-close[i][0], -close[i][1], acc[i], ids[i]))[:limit]
            ids, acc = ids[order], acc[order]
        more_ids, more_acc = self._best(wanted & ~by_name)
        ids, acc = np.r_[ids, more_ids[: max(0, limit - len(ids))]], np.r_[acc, more_acc[: max(0, limit - len(ids))]]
        return ids[np.lexsort((ids, acc))].tolist()

    def _best(self, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, summed BM25) of the best chunk of each note ``wanted`` lacking from the keyword top, best
        first, ties by chunk id."""
        missing = wanted.copy()
        missing[self.have] = False
        missing[self.notes.slots] = False
        if not missing.any():
            return _EMPTY, np.zeros(0)
        top = max((int(ids.max()) for ids, _ in self.kept if len(ids)), default=-1) + 1
        acc = np.zeros(top)
        touched = np.zeros(top, dtype=bool)
        for (ids, scores), owner in zip(self.kept, self.owners):  # a term's chunk ids are distinct: one += each
            inside = missing[owner]
            acc[ids[inside]] += scores[inside]
            touched[ids[inside]] = True
        chunk_ids = np.flatnonzero(touched)
        order = np.argsort(acc[chunk_ids], kind="stable")  # best BM25 first, ties by chunk id (ascending ids)
        owner = self.notes.slot_of(chunk_ids[order])
        first = np.full(self.notes.slots + 1, len(order))
        np.minimum.at(first, owner, np.arange(len(order)))  # each note's first place in that order: its best chunk
        best = order[np.sort(first[first < len(order)])]
        return chunk_ids[best], acc[chunk_ids][best]


#: The query's last bare word also matches the tokens it begins when it has at least this many characters (fewer
#: would match a good part of the vocabulary while one is still typing); at most PREFIX_EXPANSIONS of them, the most
#: frequent.
PREFIX_MIN = 3
PREFIX_EXPANSIONS = 16
#: A word matching nothing matches the tokens within one edit when it has at least TYPO_ONE_EDIT characters, two
#: from TYPO_TWO_EDITS (MiniSearch's fuzzy 0.2 × length, rounded, as Omnisearch uses it); at most TYPO_EXPANSIONS.
TYPO_ONE_EDIT = 5
TYPO_TWO_EDITS = 8
TYPO_EXPANSIONS = 4


@dataclass(frozen=True)
class Plan:
    """What search does with a query's words and syntax. ``keyword_terms``: the terms of the BM25 leg (those of the
    positive words and phrases, plus prefix and typo expansions); ``dense_text``: what the dense leg embeds;
    ``allowed``: the note ids the filters (``tag:``, ``path:``, ``file:``) and exclusions allow (None: all);
    ``leaves``: the matches of each positive word or phrase; ``full``: the notes matching the whole expression
    (None: those holding every leaf); ``tiered``: rank by tier (:class:`Coverage`); ``name_terms``: see
    :mod:`cairn.search.names`."""

    keyword_terms: tuple[str, ...]
    dense_text: str
    allowed: set[int] | None
    leaves: list[Matches]
    full: set[int] | None
    tiered: bool
    #: the tokens of the positive words and phrases that a note's name holds to be named
    name_terms: tuple[NameTerm, ...] = ()
    #: the paths of the withheld notes the query's operators matched (for the audit log only)
    withheld: frozenset[str] = frozenset()


def _merge(parts: Sequence[Matches]) -> Matches:
    """The union of several matches, each chunk with its best (lowest) BM25: ids ascending. Accumulated in arrays by
    chunk id (each part's ids are distinct), not sorted."""
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return _EMPTY, np.zeros(0, dtype=np.float64)
    if len(parts) == 1:
        return parts[0]
    top = max(int(ids.max()) for ids, _ in parts) + 1
    best = np.full(top, np.inf)
    for ids, scores in parts:
        best[ids] = np.minimum(best[ids], scores)
    ids = np.flatnonzero(best < np.inf)
    return ids, best[ids]


class Matcher:
    """Evaluates one query against the index as one caller sees it now: each word and phrase → the chunks holding
    it (FTS5's tokens, phrases quoted by us), each operator → notes, the expression → notes, as Obsidian's search
    (:mod:`cairn.search.syntax`). Everything is read through the caller's ``view``: a word's matches, whether it
    "matches nothing" (typo expansion), the vocabulary its prefix and typo expansions are drawn from, and the notes
    an operator (``tag:``, ``path:``, ``file:``) or an exclusion can match: a withheld note's words, names and paths
    never change what the caller gets (the withheld notes an operator matched are counted for the audit log)."""

    def __init__(self, view: CallerView, notes: NoteMap) -> None:
        self.view = view
        self.keyword = view.keyword
        self.store = view.store
        self.notes = notes
        self.expansions: list[str] = []
        #: query term that matched nothing → the nearest token it was expanded to (what the dense leg embeds)
        self.corrections: dict[str, str] = {}
        self._leaves: dict[tuple[Node, bool], Matches | None] = {}
        self._vocabularies: Sequence[Vocabularies] | None = None
        self._query: Query | None = None
        self._withheld: set[int] = set()

    @cached_property
    def _paths(self) -> dict[int, str]:
        """Note id → path of the notes the caller may see."""
        hidden = self.view.withheld.notes
        return {n: p for n, p in self.notes.paths.items() if n not in hidden} if hidden else self.notes.paths

    def _seen(self, notes: set[int]) -> set[int]:
        """``notes`` without the withheld ones (noted for the audit log)."""
        hidden = self.view.withheld.notes
        if not hidden:
            return notes
        withheld = {n for n in notes if n in hidden}
        self._withheld |= withheld
        return notes - withheld

    def plan(self, query: Query) -> Plan:
        """The :class:`Plan` of ``query``. A query without syntax is its terms, tiered (and expanded) only when it
        has at most :data:`TIERED_CLAUSES` terms; a query with syntax is always tiered."""
        self._query = query
        parsed = query.parsed
        if parsed.plain:
            terms = query.terms
            # clauses are the words as typed: ``publish-main.obsidian.md`` is one, though four terms
            tiered = sum(bool(query.terms_of(w)) for w in _positive_leaves(parsed.root)) <= TIERED_CLAUSES
            found = [self.leaf(Word(t, prefix=i == len(terms) - 1), expand=tiered) for i, t in enumerate(terms)]
            leaves = [m for m in found if m is not None]
            names = self._name_terms(_positive_leaves(parsed.root))
            keyword = query.keyword_terms(self.expansions)
            return Plan(keyword, self._corrected(query.text), None, leaves, None, tiered, names)
        positive = _positive_leaves(parsed.root)
        leaves = [m for m in (self.leaf(n, expand=True) for n in positive) if m is not None]
        dense = self._corrected(parsed.text) or " ".join(_field_values(parsed.root)) or query.text
        keyword = query.keyword_terms(self.expansions)  # before the exclusions' words are matched (and expanded)
        allowed, full = self.hard(parsed.root), self.notes_of(parsed.root)
        return Plan(
            keyword,
            dense,
            allowed,
            leaves,
            full,
            True,
            self._name_terms(positive),
            self.view.withheld_paths(self._withheld),
        )

    def _terms(self, word: Word | Phrase) -> tuple[str, ...]:
        return self._query.terms_of(word) if self._query is not None else Query.parse(word.text).terms

    def _name_terms(self, leaves: Sequence[Word | Phrase]) -> tuple[NameTerm, ...]:
        """The :func:`~cairn.search.names.name_terms` of the words and phrases of ``leaves``."""
        words = [
            (leaf.text, self._terms(leaf) if isinstance(leaf, Word) else None, isinstance(leaf, Word) and leaf.prefix)
            for leaf in leaves
        ]
        return name_terms(words, self.store.fts_tokens, PREFIX_MIN)

    def _corrected(self, text: str) -> str:
        """``text`` with each word that matched nothing replaced by the token it was expanded to (a typo embeds as
        something else entirely: ``garlik`` is not near garlic for the model)."""
        for term, token in self.corrections.items():
            text = re.sub(rf"(?<!\w){re.escape(term)}(?!\w)", token, text, flags=re.IGNORECASE)
        return text

    def leaf(self, node: Word | Phrase, *, expand: bool) -> Matches | None:
        """The chunks holding a word (or its prefix and typo expansions when ``expand``) or a phrase; None for a word
        that is only stopwords or a phrase with no token (no constraint)."""
        key = (node, expand)
        if key not in self._leaves:
            self._leaves[key] = self._phrase(node.text) if isinstance(node, Phrase) else self._word(node, expand)
        return self._leaves[key]

    def _phrase(self, text: str) -> Matches | None:
        if not self.store.fts_tokens(text):
            return None
        return self.keyword.phrase_matches(text)

    def _term(self, term: str) -> Matches:
        return self.keyword.term_matches(term)

    def _word(self, word: Word, expand: bool) -> Matches | None:
        terms = self._terms(word)
        if not terms:
            return None
        if len(terms) > 1:  # e.g. "e-mail": its words in order
            return self._phrase(word.text)
        tokens = self.store.fts_tokens(terms[0])
        if len(tokens) != 1:
            return self._phrase(terms[0])
        found = self._term(terms[0])
        if not expand:
            return found
        token = tokens[0]
        more: list[tuple[str, Matches]] = []
        if word.prefix and len(token) >= PREFIX_MIN:
            more += self._expand(
                token, [(t, 0) for v in self._vocab() for t, _ in v.with_prefix(token, PREFIX_EXPANSIONS)]
            )
        if not len(found[0]) and len(token) >= TYPO_ONE_EDIT:
            edits = 2 if len(token) >= TYPO_TWO_EDITS else 1
            near = sorted((n for v in self._vocab() for n in v.near(token, edits, TYPO_EXPANSIONS)), key=_nearest)
            typos = self._expand(token, [(t, d) for t, _, d in near[:TYPO_EXPANSIONS]])
            if typos:
                self.corrections[terms[0]] = typos[0][0]
            more += typos
        chosen = dict(more)  # token → its matches, in the order drawn
        self.expansions.extend(t for t in chosen if t not in self.expansions)
        return _merge([found, *chosen.values()])

    def _expand(self, token: str, candidates: Sequence[tuple[str, int]]) -> list[tuple[str, Matches]]:
        """(expansion, its matches) of ``token`` from ``candidates`` ((token, edit distance), best first, drawn from
        the caller's vocabulary) that FTS5 reads back as themselves."""
        return [
            (t, self._term(t)) for t, _ in dict.fromkeys(candidates) if t != token and self.store.fts_tokens(t) == [t]
        ]

    def _vocab(self) -> Sequence[Vocabularies]:
        if self._vocabularies is None:
            self._vocabularies = self.keyword.vocabularies()
        return self._vocabularies

    def notes_of(self, node: Node) -> set[int] | None:
        """The notes matching ``node`` that the caller may see (None: no constraint, e.g. a word that is only
        stopwords)."""
        if isinstance(node, Word | Phrase):
            found = self.leaf(node, expand=not isinstance(node, Phrase))
            return None if found is None else set(self.notes.notes(np.unique(found[0])).tolist()) - {-1}
        if isinstance(node, Field):
            return self._seen(self._field(node))
        if isinstance(node, Not):
            inner = self.notes_of(node.node)
            return None if inner is None else set(self._paths) - inner
        sets = [s for s in (self.notes_of(n) for n in node.items) if s is not None]
        if not sets:
            return None
        return set.intersection(*sets) if isinstance(node, And) else set.union(*sets)

    def hard(self, node: Node) -> set[int] | None:
        """The notes the filters and exclusions of ``node`` allow: in a conjunction, every operator and exclusion
        must hold; in a disjunction, those of one branch (None: no restriction)."""
        if isinstance(node, Field | Not):
            return self.notes_of(node)
        if isinstance(node, And):
            sets = [s for s in (self.hard(n) for n in node.items) if s is not None]
            return set.intersection(*sets) if sets else None
        if isinstance(node, Or):
            branches = [self.hard(n) for n in node.items]
            return None if any(b is None for b in branches) else set.union(*branches)  # type: ignore[arg-type]
        return None

    def _field(self, field: Field) -> set[int]:
        value = field.value.strip().lower()
        if field.name == "tag":
            tag = normalise_tag(field.value)
            if tag is None:
                raise BadRequestError(
                    f"tag:{field.value} names no valid tag; expected e.g. tag:#project or tag:#project/alpha."
                )
            chunks = np.asarray(self.store.scoped_chunk_ids([tag], []), dtype=np.int64)
            return set(self.notes.notes(chunks).tolist()) - {-1}
        if field.name == "file":
            return {n for n, p in self.notes.paths.items() if value in p.rsplit("/", 1)[-1].lower()}
        return {n for n, p in self.notes.paths.items() if value in p.lower()}


def _nearest(found: tuple[str, int, int]) -> tuple[int, int, str]:
    return found[2], -found[1], found[0]


def _positive_leaves(node: Node) -> list[Word | Phrase]:
    """The words and phrases a matching note may hold (not under an exclusion)."""
    if isinstance(node, Word | Phrase):
        return [node]
    if isinstance(node, And | Or):
        return [leaf for n in node.items for leaf in _positive_leaves(n)]
    return []


def _field_values(node: Node) -> list[str]:
    if isinstance(node, Field):
        return [node.value.lstrip("#")]
    if isinstance(node, And | Or):
        return [v for n in node.items for v in _field_values(n)]
    return []

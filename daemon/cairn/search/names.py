"""Which notes a query names: its words in a note's title or in one of its aliases, as one finds a note by its name
in Obsidian's quick switcher.

A query's name terms (:func:`name_terms`) are the FTS5 tokens of its positive words and phrases (case, diacritics
and word endings ignored). The tokens of its content words (its terms, :mod:`cairn.search.query`: stopwords left out)
are *required*: a name holds each of them (the last word also as a prefix). Its small words (``for``, ``your``,
``the``) are *optional*: a name holding them too is the closer one (``Plugins for Chess`` for ``for chess``, before
``chess-study``). A query of small words only (``About``) requires them all.

A named note ranks by how many of the query's tokens its closest name holds exactly (a prefix match counts less:
``Uni`` names ``Shiba Uni`` before ``Universitario``), then by how few tokens that name holds beyond the query's.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from cairn.search.cache import NotesSnapshot
from cairn.store import Store


@dataclass(frozen=True)
class NameTerm:
    """One token of a query for name matching: ``prefix``: it also matches the name tokens it begins;
    ``required``: every name must hold it (else it only makes a name closer)."""

    token: str
    prefix: bool
    required: bool


@dataclass(frozen=True, order=True)
class NameMatch:
    """How closely a note's closest name matches a query: ``held``: query tokens the name holds exactly; ``extra``:
    name tokens the query does not account for (exactly or as a prefix). Closer: more held, then fewer extra."""

    held: int
    extra: int

    def key(self) -> tuple[int, int]:
        """Sort key, larger is closer."""
        return self.held, -self.extra


def name_terms(
    words: Sequence[tuple[str, Sequence[str] | None, bool]], tokenize: Callable[[str], list[str]], prefix_min: int
) -> tuple[NameTerm, ...]:
    """The :class:`NameTerm` of each token of ``words``: (text, its terms for a word (None for a phrase), the word is
    the query's last bare word, matched as a prefix). A phrase's tokens are all required; a word's content tokens
    are required, its stopword tokens optional; the last content token of a prefix word also matches as a prefix
    (when it has at least ``prefix_min`` characters). With no required token, every token is required."""
    out: dict[str, NameTerm] = {}
    for text, terms, prefix in words:
        is_word = terms is not None
        content = [t for w in terms for t in tokenize(w)] if terms is not None else tokenize(text)
        for i, t in enumerate(content):
            last = is_word and prefix and i == len(content) - 1 and len(t) >= prefix_min
            held = out.get(t)
            out[t] = NameTerm(t, last or (held is not None and held.prefix), True)
        if is_word:
            for t in tokenize(text):
                out.setdefault(t, NameTerm(t, False, False))
    if out and not any(n.required for n in out.values()):
        tokens = list(out)
        out = {t: NameTerm(t, i == len(tokens) - 1 and len(t) >= prefix_min, True) for i, t in enumerate(tokens)}
    return tuple(out.values())


class Names:
    """The notes a query names (module docstring). Holds an inverted index name token → notes, read again after a
    commit that changed a note's row (:class:`~cairn.search.cache.NotesSnapshot`: a moment late during a whole-vault
    run; names are tokenized once per text: such a commit costs one read of the titles, a commit of vectors
    nothing)."""

    MAX_NAMES = 200_000

    def __init__(self, store: Store) -> None:
        self.store = store
        self._tokens: dict[str, frozenset[str]] = {}
        self._snapshot = NotesSnapshot(store, self._read)

    def tokens(self, name: str) -> frozenset[str]:
        held = self._tokens.get(name)
        if held is None:
            if len(self._tokens) >= self.MAX_NAMES:
                self._tokens.clear()
            held = self._tokens[name] = frozenset(self.store.fts_tokens(name))
        return held

    def warm(self) -> None:
        """Read the index now (at start-up) rather than at the first question."""
        self._index()

    def _index(self) -> tuple[dict[str, set[int]], list[str], dict[int, list[frozenset[str]]]]:
        """(token → note ids whose names hold it, the tokens sorted, note id → its names' tokens) now."""
        return self._snapshot.get()

    def _read(self) -> tuple[dict[str, set[int]], list[str], dict[int, list[frozenset[str]]]]:
        by_token: dict[str, set[int]] = {}
        names: dict[int, list[frozenset[str]]] = {}
        every = self.store.note_names()
        held = self._tokens
        new = list({t: None for texts in every.values() for t in texts if t not in held})
        if len(held) + len(new) > self.MAX_NAMES:
            held.clear()
            new = list({t: None for texts in every.values() for t in texts})
        held.update(zip(new, map(frozenset, self.store.fts_tokens_of(new))))
        for note_id, texts in every.items():
            names[note_id] = [held[t] for t in texts]
            for tokens in names[note_id]:
                for t in tokens:
                    by_token.setdefault(t, set()).add(note_id)
        return by_token, sorted(by_token), names

    def named(
        self,
        note_ids: Collection[int],
        wanted: Sequence[NameTerm],
        replaced: Mapping[int, list[frozenset[str]]] | None = None,
    ) -> dict[int, NameMatch]:
        """{note id: its closest name's :class:`NameMatch`} for the notes of ``note_ids`` named by ``wanted`` (every
        required term in one of its names; no required term: no note is named). ``replaced``: note id → its names'
        tokens as the caller sees them (aliases linking to a withheld note redacted), read instead of the index's."""
        required = [w for w in wanted if w.required]
        if not required or not note_ids:
            return {}
        by_token, ordered, names = self._index()
        if replaced:
            names = {**names, **replaced}
        found: set[int] | None = None
        for w in required:
            notes = set(by_token.get(w.token, ()))
            if w.prefix:
                at = bisect.bisect_left(ordered, w.token)
                while at < len(ordered) and ordered[at].startswith(w.token):
                    notes |= by_token[ordered[at]]
                    at += 1
            found = notes if found is None else found & notes
            if not found and not replaced:
                return {}
        out: dict[int, NameMatch] = {}
        for note_id in (found or set()) | set(replaced or ()):
            if note_id not in note_ids:
                continue
            matches = [m for m in (_match(tokens, wanted) for tokens in names.get(note_id, [])) if m is not None]
            if matches:
                out[note_id] = max(matches, key=NameMatch.key)
        return out


def _match(tokens: frozenset[str], wanted: Sequence[NameTerm]) -> NameMatch | None:
    """How the name of ``tokens`` matches ``wanted`` (None: it lacks a required term)."""
    accounted: set[str] = set()
    held = 0
    for w in wanted:
        if w.token in tokens:
            held += 1
            accounted.add(w.token)
        elif w.prefix and (begun := {n for n in tokens if n.startswith(w.token)}):
            accounted |= begun
        elif w.required:
            return None
    return NameMatch(held, len(tokens) - len(accounted))

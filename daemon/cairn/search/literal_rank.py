"""How a query's words as typed (:mod:`cairn.search.literal`) weigh in the ranking of a search: their BM25 with
the note as the document, the fusion weights of a query made of codes, the keyword terms scored, and the search of
their holders in a caller's view."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

import numpy as np

from cairn.ranking import FusionWeights
from cairn.search.keyword import Corpus, KeywordIndex, fts5_bm25
from cairn.search.lexical import NoteMap
from cairn.search.literal import LiteralFinder, Literals, punctuated
from cairn.search.pipeline import Terms
from cairn.search.syntax import Phrase, Word
from cairn.search.view import CallerView
from cairn.search.visible import VisibleKeyword
from cairn.store import Store

_PLAIN_WORD = re.compile(r"\w+")
#: Words and phrases of one query checked as typed, the first ones (a short search has at most three words; a query
#: in Obsidian's syntax may have many).
MAX_CHECKED_WORDS = 4

#: Weight of a chunk's own BM25 of a literal beside its note's (:func:`literal_bm25`): it orders the passages of one
#: note and barely moves a note against another.
PASSAGE_LITERAL_WEIGHT = 0.1


def literal_bm25(found: Mapping[int, int], corpus: Corpus, notes: NoteMap, n_notes: int) -> dict[int, float]:
    """The score (> 0) of one literal for each chunk of ``found`` ({chunk id: occurrences}): FTS5's BM25 formula
    with the chunk's note as the document (the note's occurrences over its length in tokens, the notes holding it
    among the ``n_notes`` notes), plus :data:`PASSAGE_LITERAL_WEIGHT` × that with the chunk as the document
    (``corpus``: the rows the caller sees). Obsidian matches a note, not a passage: the note holding a literal most
    densely (the note about it) ranks first."""
    ids = np.fromiter(found, dtype=np.int64, count=len(found))
    tf = np.fromiter(found.values(), dtype=np.float64, count=len(found))
    n_rows = max(corpus.n_rows, len(ids))
    size = np.maximum(corpus.sizes(ids), 1).astype(np.float64)
    passage = -fts5_bm25(tf, size, len(ids), n_rows, corpus.n_tokens / n_rows)
    owner = notes.notes(ids)
    note_tf: dict[int, float] = {}
    for note, n in zip(owner.tolist(), tf.tolist()):
        if note >= 0:
            note_tf[note] = note_tf.get(note, 0.0) + n
    held = list(note_tf)
    score: dict[int, float] = {}
    if held:
        n_notes = max(n_notes, len(held))
        chunks = notes.chunks_of(held)  # only the holders' chunks: sizes may be read from FTS5 row by row
        sizes = np.bincount(notes.note_of[chunks], weights=corpus.sizes(chunks).clip(min=0), minlength=notes.slots)
        lengths = np.maximum(sizes[held], 1.0)
        values = -fts5_bm25(
            np.asarray([note_tf[n] for n in held]), lengths, len(held), n_notes, corpus.n_tokens / n_notes
        )
        score = dict(zip(held, values.tolist()))
    return {
        c: score.get(n, 0.0) + PASSAGE_LITERAL_WEIGHT * p
        for c, p, n in zip(ids.tolist(), passage.tolist(), owner.tolist())
    }


def literal_weights(weights: FusionWeights, literal: Literals | None) -> FusionWeights:
    """The fusion weights of a search: ``weights``, but the keyword leg's alone (with the note aggregation)
    when every word of the query is a code (punctuation in it: ``.obsidian``, ``[!info]``, ``C++``) that the
    index holds as typed. Obsidian's search matches such text, not its meaning, and the embedding model reads
    ``[!info]`` as the word "info": its cosines then only break ties."""
    if literal is None or not literal.counts or punctuated(literal.literals) != literal.literals:
        return weights
    held = {i for counts in literal.counts.values() for i, n in enumerate(counts) if n}
    if len(held) < len(literal.literals):
        return weights
    return dataclasses.replace(weights, method="convex", alpha=0.0)


def scored_terms(terms: Terms, literal: Literals | None) -> tuple[str, ...]:
    """The terms whose BM25 scores the keyword leg: its terms, but without the prefix and typo expansions when
    the index holds every word of the query as typed (a longer word a query word begins does not rank one of
    the notes holding that word above another)."""
    if literal is None or not literal.counts:
        return terms.keyword
    held = {i for counts in literal.counts.values() for i, n in enumerate(counts) if n}
    return terms.query.keyword_base if len(held) == len(literal.literals) else terms.keyword


def checked_literals(store: Store, terms: Terms) -> tuple[tuple[Word | Phrase, str], ...]:
    """The query's words and phrases whose literal says more than their index token: not a word that the index
    reads back unchanged (``garden``: a chunk holding the token holds the word), whose holders are its
    token's and cost a read of every one of them to confirm. At most :data:`MAX_CHECKED_WORDS`, the first ones: each
    costs up to :data:`~cairn.search.literal.MAX_CHECKED` texts read (a pasted log line in quotes holds dozens)."""
    return tuple(
        (w, lit) for w, lit in terms.literals if not (_PLAIN_WORD.fullmatch(lit) and store.fts_tokens(lit) == [lit])
    )[:MAX_CHECKED_WORDS]


def find_literals(
    store: Store,
    keyword_index: KeywordIndex,
    notes: NoteMap,
    words: Sequence[tuple[Word | Phrase, str]],
    within: list[int] | None,
    view: CallerView,
) -> Literals:
    """The chunks holding the query's words as typed (:mod:`cairn.search.literal`), in the caller's view: among
    the chunks in ``within`` (None: all), withheld ones never, redacted ones by the text the caller is shown;
    each literal scored by :func:`literal_bm25`."""
    inside = None if within is None else np.asarray(within, dtype=np.int64)

    def candidates(text: str) -> tuple[np.ndarray, np.ndarray]:
        if not store.fts_tokens(text):
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        ids, values = view.keyword.phrase_matches(text)
        if inside is None:
            return ids, values
        keep = np.isin(ids, inside)
        return ids[keep], values[keep]

    mask = view.symbol_masker()
    redact = view.redact if view.redactor else None

    def texts(ids: Sequence[int]) -> dict[int, str]:
        """Each chunk's title, heading path and text as the caller is shown them (:func:`~cairn.search.pipeline.
        make_hit`): text redacted, heading path masked (a withheld note's name in it never counts)."""
        rows = store.chunk_texts(ids)
        owners = dict(zip(rows, notes.notes(np.fromiter(rows, dtype=np.int64, count=len(rows))).tolist()))
        out: dict[int, str] = {}
        for c, (title, raw_symbol, raw_text) in rows.items():
            text, symbol = (redact(raw_text), redact(raw_symbol)) if redact else (raw_text, raw_symbol)
            if mask is not None:  # a chunk missing from the note map (added since): no heading path at all
                path = notes.paths.get(owners[c])
                symbol = mask(path, raw_symbol) if path is not None else ""
            out[c] = f"{title}\n{symbol}\n{text}"
        return out

    keyword = view.keyword
    corpus = keyword.corpus() if isinstance(keyword, VisibleKeyword) else keyword_index.corpus()
    hidden = view.withheld.notes if view.withheld else {}
    n_notes = len(notes.paths) - sum(1 for n in hidden if n in notes.paths)
    return LiteralFinder(candidates, texts, lambda found: literal_bm25(found, corpus, notes, n_notes)).find(
        words, view.hidden
    )

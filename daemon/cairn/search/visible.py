"""What one caller not declared local may see of the index: BM25 over its visible rows, and the rows that hold a
link to a note withheld from it scored on their redacted text (:class:`Visible`).

Two kinds of full-text rows differ from the index for such a caller. The chunks of withheld notes are left out:
never matched, and not counted in the collection statistics (rows N, rows holding a term n, average row length).
The chunks of allowed notes holding a link, embed or heading that names a withheld note (*redacted rows*,
:class:`RedactedRow`) are matched, counted and embedded as the text the caller is shown (links replaced by
``[withheld link]``, heading paths masked): a withheld note's name never makes them match, by keyword or by
meaning, while their own words still do. Names (title, aliases) of allowed notes whose aliases link to a withheld
note are read redacted too. So two vaults that differ only in notes withheld from a caller rank the same for it.

Exactness: each term's value is FTS5's ``bm25()`` for the visible rows. The term frequency of a row is recovered
from its FTS5 value (an integer: the formula inverted, then rounded), and the value recomputed with the visible
statistics by :func:`~cairn.search.keyword.fts5_bm25` (FTS5's own double operations).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from cairn.embedding import (
    TITLE_WEIGHT,
    VectorCache,
    chunk_embed_text,
    chunk_vector,
    content_hash,
    embedding_texts,
    title_hash,
    whole_chunk_hash,
    whole_chunk_text,
)
from cairn.search.cache import EpochLRU, StoreEpoch
from cairn.search.keyword import K1, B, Corpus, KeywordIndex, fts5_bm25, top_chunks
from cairn.search.vocabulary import VisibleVocabulary
from cairn.search.withheld import WithheldSet
from cairn.store import ChunkRow, Store
from cairn.store.reads import chunk_notes, link_sources, note_names_of

log = logging.getLogger(__name__)

Matches = tuple[np.ndarray, np.ndarray]
_NO_IDS = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class RedactedRow:
    """A chunk as the caller sees it: ``text`` and ``symbol`` redacted (the note's ``title`` as stored), and
    ``columns`` the tokens of its full-text columns (text, symbol, title) as FTS5 tokenizes them."""

    row: ChunkRow
    text: str
    symbol: str
    columns: tuple[tuple[str, ...], ...]

    @property
    def length(self) -> int:
        return sum(map(len, self.columns))

    def count(self, tokens: Sequence[str]) -> int:
        """Instances of the phrase ``tokens`` (its tokens in a row within one column), as FTS5 counts them."""
        k = len(tokens)
        if not k:
            return 0
        want = tuple(tokens)
        return sum(1 for col in self.columns for i in range(len(col) - k + 1) if col[i : i + k] == want)

    @property
    def vector_key(self) -> str:
        return content_hash("\x1fredacted\x1f" + self.row.title + "\x1f" + chunk_embed_text(self.symbol, self.text))


@dataclass(frozen=True)
class Visible:
    """One caller's view of the store at one epoch: ``hidden`` {chunk id: note id} of withheld notes, ``redacted``
    {chunk id: :class:`RedactedRow`}, ``names`` {note id: its names' token sets, redacted} for the allowed notes
    whose aliases link to a withheld note."""

    hidden: Mapping[int, int]
    redacted: Mapping[int, RedactedRow]
    names: Mapping[int, list[frozenset[str]]] = field(default_factory=dict)
    #: token → {chunk id: instances} over the redacted rows
    postings: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    #: (rows not counted per token, rows counted per token) for :meth:`vocabulary_rows`, once read
    _rows: list[tuple[dict[str, int], dict[str, int]]] = field(default_factory=list, compare=False, repr=False)

    def vocabulary_rows(self, store: Store, live: Callable[[np.ndarray], np.ndarray]) -> tuple[dict, dict]:
        """(token → rows to take from the index's vocabulary, token → rows to add): the withheld rows and the
        redacted rows by their stored tokens, the redacted rows by the tokens the caller is shown. ``live``: a
        mask of the chunk ids (k,) that are rows of the keyword index now. Tokenized once per view."""
        if self._rows:
            return self._rows[0]
        minus: dict[str, int] = {}
        plus: dict[str, int] = {}
        ids = np.asarray(sorted(set(self.hidden) | set(self.redacted)), dtype=np.int64)
        ids = ids[live(ids)] if len(ids) else ids
        for cid, row in store.chunk_rows(ids.tolist()).items():
            for t in {t for part in (row.text, row.symbol, row.title) for t in store.fts_tokens(part)}:
                minus[t] = minus.get(t, 0) + 1
            red = self.redacted.get(cid)
            if red is not None:
                for t in {t for col in red.columns for t in col}:
                    plus[t] = plus.get(t, 0) + 1
        self._rows.append((minus, plus))
        return minus, plus

    def keyword(self, keyword: KeywordIndex, store: Store) -> VisibleKeyword:
        return VisibleKeyword(keyword, store, self)

    def holding(self, tokens: Sequence[str]) -> list[tuple[int, int]]:
        """(chunk id, instances) of the redacted rows holding the phrase ``tokens``, by chunk id."""
        if not tokens:
            return []
        first = self.postings.get(tokens[0], {})
        if len(tokens) == 1:
            return sorted(first.items())
        return [(c, n) for c in sorted(first) if (n := self.redacted[c].count(tokens))]


class VisibleKeyword:
    """BM25 of the rows a caller sees (module docstring), with :class:`~cairn.search.keyword.KeywordIndex`'s
    interface for the search: :meth:`term_matches`, :meth:`phrase_matches`, :meth:`ranking`,
    :meth:`vocabularies`. Built per query (the statistics read once); thread-confined."""

    def __init__(self, keyword: KeywordIndex, store: Store, view: Visible) -> None:
        self.keyword = keyword
        self.store = store
        self._view = view
        hidden, redacted = view.hidden, view.redacted
        self._redacted = redacted
        self._removed = np.asarray(sorted(set(hidden) | set(redacted)), dtype=np.int64)
        corpus = keyword.corpus()
        self._corpus = corpus
        gone = corpus.sizes(np.asarray(sorted(set(hidden) - set(redacted)), dtype=np.int64))
        gone = gone[gone >= 0]
        red_ids = np.asarray(sorted(redacted), dtype=np.int64)
        red_sizes = corpus.sizes(red_ids)
        live = red_sizes >= 0
        self._live_redacted = set(red_ids[live].tolist())
        self.n_rows = corpus.n_rows - len(gone)
        self.n_tokens = (
            corpus.n_tokens
            - int(gone.sum())
            - int(red_sizes[live].sum())
            + sum(redacted[c].length for c in self._live_redacted)
        )
        self._held: dict[tuple[str, bool], Matches] = {}

    def corpus(self) -> Corpus:
        """The statistics of the rows the caller sees: its row and token counts, and each row's size as it is shown
        (a redacted row's redacted length; -1 for a withheld row)."""
        base, removed, redacted = self._corpus, self._removed, self._redacted

        def sizes(ids: np.ndarray) -> np.ndarray:
            out = base.sizes(ids)
            if len(removed) and len(ids):
                out = np.where(np.isin(ids, removed), -1, out)
            for i, c in enumerate(ids.tolist()):
                if c in self._live_redacted:
                    out[i] = redacted[c].length
            return out

        return Corpus(self.n_rows, self.n_tokens, sizes)

    def term_matches(self, term: str) -> Matches:
        """(chunk ids ascending, bm25 < 0) of the visible rows holding ``term`` (a phrase when it has several
        tokens), with the visible statistics."""
        return self._matches(term, phrase=False)

    def phrase_matches(self, text: str) -> Matches:
        """As :meth:`KeywordIndex.phrase_matches`, over the visible rows."""
        return self._matches(text, phrase=True)

    def ranking(
        self, terms: Sequence[str], limit: int, *, within: Sequence[int] | None = None, excluding: Sequence[int] = ()
    ) -> list[int]:
        """As :meth:`KeywordIndex.ranking`, over the visible rows (withheld chunks never ranked)."""
        if not terms:
            return []
        return top_chunks([self.term_matches(t) for t in terms], limit, within, excluding)

    def vocabularies(self) -> list[VisibleVocabulary]:
        """The index's vocabularies as the caller sees them (:class:`~cairn.search.vocabulary.VisibleVocabulary`):
        prefix and typo expansions are drawn from its rows alone."""
        minus, plus = self._view.vocabulary_rows(self.store, lambda ids: self._corpus.sizes(ids) >= 0)
        return [VisibleVocabulary(self.keyword.vocabularies(), minus, plus)]

    def _matches(self, text: str, *, phrase: bool) -> Matches:
        key = (text, phrase)
        held = self._held.get(key)
        if held is None:
            raw = self.keyword.phrase_matches(text) if phrase else self.keyword.term_matches(text)
            held = self._held[key] = self._rescored(raw, tuple(self.store.fts_tokens(text)))
        return held

    def _rescored(self, raw: Matches, tokens: tuple[str, ...]) -> Matches:
        """``raw`` (FTS5's values over every row) without the withheld and redacted rows, plus the redacted rows
        holding ``tokens``, each valued with the visible statistics."""
        ids, scores = raw
        tf = _term_frequencies(scores, self._corpus.sizes(ids), len(ids), self._corpus) if len(ids) else scores
        sizes = self._corpus.sizes(ids) if len(ids) else _NO_IDS
        if len(self._removed) and len(ids):
            keep = ~np.isin(ids, self._removed)
            ids, tf, sizes = ids[keep], tf[keep], sizes[keep]
        extra = [(c, n) for c, n in self._view.holding(tokens) if c in self._live_redacted]
        if extra:
            ids = np.concatenate([ids, np.asarray([c for c, _ in extra], dtype=np.int64)])
            tf = np.concatenate([tf, np.asarray([n for _, n in extra], dtype=np.float64)])
            more = np.asarray([self._redacted[c].length for c, _ in extra], dtype=np.int64)
            sizes = np.concatenate([sizes, more])
            order = np.argsort(ids, kind="stable")
            ids, tf, sizes = ids[order], tf[order], sizes[order]
        if not len(ids) or self.n_rows <= 0:
            return _NO_IDS, np.zeros(0, dtype=np.float64)
        avgdl = float(self.n_tokens) / float(self.n_rows)
        return ids, fts5_bm25(tf, sizes.astype(np.float64), len(ids), self.n_rows, avgdl)


def _term_frequencies(scores: np.ndarray, sizes: np.ndarray, n_hit: int, corpus: Corpus) -> np.ndarray:
    """The term frequency (k,) float64 (whole numbers) of each row from its FTS5 ``scores`` (k,) computed with
    ``corpus``'s statistics and ``n_hit`` rows holding the term: ``bm25 = -idf·tf·(k1+1) / (tf + K)``, solved
    for ``tf``."""
    n_rows = corpus.n_rows
    idf = math.log((n_rows - n_hit + 0.5) / (n_hit + 0.5)) if n_rows else 1e-6
    if idf <= 0.0:
        idf = 1e-6
    avgdl = float(corpus.n_tokens) / float(n_rows) if n_rows else 1.0
    k = K1 * ((1 - B) + (B * np.maximum(sizes, 0).astype(np.float64)) / avgdl)
    x = -scores / idf
    return np.maximum(np.rint(x * k / np.maximum(K1 + 1.0 - x, 1e-12)), 1.0)


def load_visible(store: Store, hidden: WithheldSet) -> Visible:
    """The :class:`Visible` of ``hidden`` now: the chunks of allowed notes linking to a withheld note whose text or
    heading path the caller is shown redacted, tokenized as FTS5 does; the redacted names of such notes."""
    redactor = hidden.redactor
    if not redactor:
        return Visible(hidden.chunks, {})
    sources = link_sources(
        store, lambda raw, target: (target is not None and hidden.hides_path(target)) or redactor.matches(raw or "")
    )
    sources -= set(hidden.notes)
    if not sources:
        return Visible(hidden.chunks, {})
    mask = hidden.symbol_masker(store)
    redacted: dict[int, RedactedRow] = {}
    for cid, row in store.chunk_rows(list(chunk_notes(store, sources))).items():
        text, symbol = hidden.redact(row.text), hidden.redact(row.symbol)
        if row.kind != "pdf":
            symbol = mask(row.path, row.symbol)
        if text != row.text or symbol != row.symbol:
            cols = tuple(tuple(store.fts_tokens(part)) for part in (text, symbol, row.title))
            redacted[cid] = RedactedRow(row, text, symbol, cols)
    names: dict[int, list[frozenset[str]]] = {}
    for nid, texts in note_names_of(store, sources).items():
        shown = [texts[0], *(hidden.redact(a) for a in texts[1:])]
        if shown != texts:
            names[nid] = [frozenset(store.fts_tokens(t)) for t in shown]
    postings: dict[str, dict[int, int]] = {}
    for cid, red in redacted.items():
        for col in red.columns:
            for t in col:
                held = postings.setdefault(t, {})
                held[cid] = held.get(cid, 0) + 1
    return Visible(hidden.chunks, redacted, names, postings)


class VisibleViews:
    """The search service's :class:`Visible` per withholding (kept while the store is unchanged) and the vectors
    of redacted rows, kept by redacted text: embedded once, on a background thread when a view is read (one
    at a time), and at most :attr:`EMBED_PER_QUERY` rows by a query that needs them first. A row without its
    vectors yet is left out of the dense leg this time, never scored on its raw text."""

    MAX_VIEWS = 32
    #: Redacted rows whose vectors are kept, and their bytes at most (a row's sentences' vectors: 1.5 KB each).
    MAX_VECTORS = 4096
    MAX_VECTOR_BYTES = 16 << 20
    EMBED_PER_QUERY = 4

    def __init__(
        self, store: Store, epoch: StoreEpoch, vector_cache: VectorCache, title_weight: float = TITLE_WEIGHT
    ) -> None:
        self.store = store
        self.epoch = epoch
        self.vector_cache = vector_cache
        self.title_weight = title_weight
        self._views: EpochLRU[tuple, Visible] = EpochLRU(self.MAX_VIEWS)
        self._vectors: EpochLRU[str, tuple[np.ndarray, np.ndarray]] = EpochLRU(
            self.MAX_VECTORS, max_bytes=self.MAX_VECTOR_BYTES
        )
        self._lock = threading.Lock()
        self._warming: threading.Thread | None = None

    def get(self, hidden: WithheldSet) -> Visible | None:
        """The view of ``hidden`` (None when it withholds nothing: the owner's searches are unchanged)."""
        if not hidden or not hidden.notes:
            return None
        key = (hidden.withhold.tags, hidden.withhold.folders)
        epoch = self.epoch.value
        held = self._views.get(key, epoch)
        if held is None:
            held = load_visible(self.store, hidden)
            if self.epoch.value == epoch:
                self._views.put(key, held, epoch)
            self._warm(held)
        return held

    def dense(
        self,
        view: Visible | None,
        qvec: np.ndarray,
        ids: np.ndarray,
        allowed: np.ndarray | None,
        sentence_weight: float,
    ) -> tuple[np.ndarray | None, list[int], dict[int, tuple[float, float]]]:
        """For the dense leg over a snapshot's chunk ``ids``: (``allowed`` (a mask of ``ids``, None: all) without the
        redacted rows; the allowed redacted rows by their redacted dense score (max(chunk cosine, ``sentence_weight``
        × best sentence cosine)), best first; their (chunk, best sentence) cosines)."""
        if view is None or not view.redacted:
            return allowed, [], {}
        red = np.isin(ids, np.asarray(list(view.redacted), dtype=np.int64))
        inside = ids[red & allowed] if allowed is not None else ids[red]
        cosines = self.cosines(view, qvec, inside.tolist())
        ranked = sorted(cosines, key=lambda c: (-max(cosines[c][0], sentence_weight * cosines[c][1]), c))
        return (~red if allowed is None else allowed & ~red), ranked, cosines

    def redacted_cosines(
        self,
        view: Visible | None,
        qvec: np.ndarray,
        candidates: Sequence[int],
        known: Mapping[int, tuple[float, float]],
    ) -> dict[int, tuple[float, float]]:
        """The (chunk, best sentence) cosines of the redacted ``candidates`` by their redacted vectors (those in
        ``known`` reused); (-1, -1) for one without them yet (it passes no cosine floor)."""
        if view is None or not view.redacted:
            return {}
        red = [c for c in candidates if c in view.redacted]
        found = {**known, **self.cosines(view, qvec, [c for c in red if c not in known])}
        return {c: found.get(c, (-1.0, -1.0)) for c in red}

    def nbytes(self) -> int:
        """Bytes held: the views kept and the redacted rows' vectors (approximate: :mod:`cairn.memory`)."""
        return self._views.nbytes() + self._vectors.nbytes()

    def cache_usage(self) -> dict[str, dict[str, int | None]]:
        """``{withheldViews, withheldVectors}``: each cache's :meth:`~cairn.search.cache.EpochLRU.usage`."""
        return {"withheldViews": self._views.usage(), "withheldVectors": self._vectors.usage()}

    def _warm(self, view: Visible) -> None:
        """Embed ``view``'s redacted rows that have no vectors yet on a background thread (none when one runs)."""
        missing = [red for red in view.redacted.values() if self._held(red.vector_key) is None]
        with self._lock:
            if not missing or (self._warming is not None and self._warming.is_alive()):
                return
            self._warming = threading.Thread(
                target=self._embed_all, args=(missing,), name="cairn-redacted", daemon=True
            )
            self._warming.start()

    def _embed_all(self, rows: list[RedactedRow]) -> None:
        try:
            for red in rows:
                if self._held(red.vector_key) is None:
                    self._embed(red)
        except Exception:  # never fatal: a row without vectors is only left out of the dense leg
            log.exception("embedding redacted chunks failed")
        finally:
            self.store.close_thread_connection()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the background embedding of redacted rows, if one runs."""
        thread = self._warming
        if thread is not None:
            thread.join(timeout)

    def cosines(self, view: Visible, qvec: np.ndarray, ids: Collection[int]) -> dict[int, tuple[float, float]]:
        """{chunk id: (cosine of its redacted chunk vector, best cosine of its redacted sentences or -1)} of the
        redacted rows among ``ids`` whose vectors are held or embedded now (budget: class docstring)."""
        held = self.vectors(view, ids)
        if not held:
            return {}
        chunk = (np.stack([v[0] for v in held.values()]) @ qvec).tolist()
        sizes = [len(v[1]) for v in held.values()]
        sentences = np.concatenate([v[1] for v in held.values() if len(v[1])] or [np.zeros((0, len(qvec)))]) @ qvec
        starts = np.cumsum([0, *sizes[:-1]])
        best = [float(sentences[s : s + n].max()) if n else -1.0 for s, n in zip(starts.tolist(), sizes)]
        return {cid: (c, b) for cid, c, b in zip(held, chunk, best)}

    def vectors(self, view: Visible, ids: Collection[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """{chunk id: (chunk vector (384,), sentence vectors (m, 384))} of the redacted rows among ``ids``, made
        from their redacted text; those beyond this call's embedding budget are absent."""
        out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        budget = self.EMBED_PER_QUERY
        for cid in sorted(c for c in ids if c in view.redacted):
            red = view.redacted[cid]
            vecs = self._held(red.vector_key)
            if vecs is None:
                if budget <= 0:
                    continue
                budget -= 1
                vecs = self._embed(red)
            out[cid] = vecs
        return out

    def _held(self, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        return self._vectors.get(key)

    def _embed(self, red: RedactedRow) -> tuple[np.ndarray, np.ndarray]:
        """The chunk vector and sentence vectors of ``red``, made as the indexer makes a chunk's (unchanged
        sentences and the title come from the embedding caches)."""
        row = red.row
        texts = embedding_texts(red.symbol, red.text, row.kind)
        whole = whole_chunk_text(row.title, red.symbol, texts)
        whole_key = whole_chunk_hash(row.title, content_hash(chunk_embed_text(red.symbol, red.text)))
        vecs = self.vector_cache.stored_or_embedded(
            [*texts, row.title, whole], [*map(content_hash, texts), title_hash(row.title), whole_key]
        )
        sentences = vecs[: len(texts)].copy()  # not a view: the title's and whole chunk's rows are not kept
        chunk = chunk_vector(sentences, vecs[len(texts)], vecs[len(texts) + 1], self.title_weight)
        self._vectors.put(red.vector_key, (chunk, sentences))
        return chunk, sentences

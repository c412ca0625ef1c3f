"""The one query service: search for the CLI, HTTP, MCP and the answers.

Flow (DESIGN.md): classify → scope filter → FTS5 BM25 top-N and vector top-N → fusion → cosine floor → per-note
de-duplication → top_k.

Two purposes (:meth:`SearchService.retrieve`): ``"ask"`` (the answers' sources) applies the cosine floor to every
candidate, as the DESIGN.md contract says. ``"search"`` (CLI, HTTP, MCP, the plugin's Search) applies it to purely
semantic candidates only: a chunk holding a query term is always a candidate, and the notes holding a rare term,
then every term, then some, rank first (:mod:`cairn.search.lexical`), each tier in the fused order.

Withholding: every entry point takes ``withhold`` (see :mod:`cairn.search.withheld`); ``tally`` (a
:class:`~cairn.policy.WithheldTally`) receives the withheld notes the unfiltered top-N lists held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from cairn.config import COSINE_FLOOR, DEFAULT_TOP_K
from cairn.embedder import Embedder
from cairn.embedding import TITLE_WEIGHT, VectorCache
from cairn.errors import BadRequestError
from cairn.policy import WithheldTally, Withhold
from cairn.ranking import FusionWeights, QueryClassifier, limit_per_group, query_terms
from cairn.search.cache import EpochLRU, StoreEpoch
from cairn.search.dense import DenseQuery
from cairn.search.fusion import add_second_best, bm25_scores, fuse
from cairn.search.hits import Hit, SearchResult, check_query, make_snippet, scope_folders, scope_tags
from cairn.search.indexed import IndexedCounts
from cairn.search.keyword import KeywordIndex, KeywordLookup
from cairn.search.lexical import Coverage, Matcher, NoteMaps, Plan, coverage
from cairn.search.names import Names
from cairn.search.stored import stored_cosines
from cairn.search.syntax import parse
from cairn.search.vectors import Vectors, VectorSnapshot
from cairn.search.visible import Visible, VisibleViews
from cairn.search.withheld import WithheldSet
from cairn.store import ChunkKey, ChunkRow, Store

log = logging.getLogger(__name__)

MODES = ("hybrid", "bm25", "dense")
PURPOSES = ("search", "ask")
_DEFAULT_WEIGHTS = FusionWeights()

_blas_limited: set[int] = set()


def _limit_blas_threads(threads: int) -> None:
    """Limit numpy's BLAS to ``threads`` threads in this process (once per value; see SearchService.BLAS_THREADS)."""
    if threads not in _blas_limited:
        from threadpoolctl import threadpool_limits  # noqa: PLC0415  (inspects the loaded libraries: not at import)

        threadpool_limits(limits=threads, user_api="blas")
        _blas_limited.add(threads)


@dataclass
class _Ranking:
    """The state of one ranking (:meth:`SearchService._rank`) shared by its steps."""

    query: str
    mode: str
    purpose: str
    within: list[int] | None
    hidden: WithheldSet
    qvec: np.ndarray
    snap: VectorSnapshot
    dense: DenseQuery
    #: withheld chunks among the unfiltered candidates (for the tally)
    touched: set[int] = field(default_factory=set)
    keyword: list[int] = field(default_factory=list)
    pool: list[int] = field(default_factory=list)
    #: the query's words and syntax (search purpose; None for ask)
    plan: Plan | None = None
    #: the notes holding the query's terms (search purpose with a keyword leg; None otherwise)
    coverage: Coverage | None = None
    #: fused candidates that pass only as lexical evidence (below the cosine floor)
    below_floor: set[int] = field(default_factory=set)
    #: what the caller sees (search/visible; None: nothing withheld), its keyword index, redacted rows' cosines
    view: Visible | None = None
    lookup: KeywordLookup | None = None
    redacted_cos: dict[int, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Similarities:
    """Per candidate chunk: its chunk cosine, best sentence cosine (-1 without one), and the scores derived."""

    chunk: dict[int, float]
    sentence: dict[int, float]
    dense: dict[int, float]  # the dense ranking score: max(chunk, SENTENCE_WEIGHT × sentence)
    cosine: dict[int, float]  # the hit's cosine: that of its best vector
    floor: dict[int, float]  # what the floor is applied to: max(chunk, FLOOR_SENTENCE_WEIGHT × sentence)


class SearchService:
    """Search over one vault's index. The one query path for CLI, HTTP, MCP and answers: every result passes the
    scope filter and the cosine floor (DESIGN.md contract).

    Blocking (SQLite + ONNX); call it from a worker thread in async code. Thread-safe (the store gives each thread
    its own connection; onnxruntime sessions are thread-safe). Its collaborators hold the state: :attr:`vectors`
    (the in-memory vectors and their reloads), :attr:`keyword` (BM25), :attr:`vector_cache` (text → vector),
    :attr:`epoch` and :attr:`results` (ranked results by query text and every parameter, while the store is
    unchanged)."""

    #: Candidates taken from each ranked list before fusion.
    CANDIDATES = 60
    #: Weight of the best sentence cosine in the dense ranking score (tuned on the dev set).
    SENTENCE_WEIGHT = 0.9
    #: Weight of the best sentence cosine against the floor (tuned on the dev set): lower than the ranking's, so
    #: an off-corpus question's one loosely matching sentence does not pass, while a relevant chunk whose one
    #: matching sentence sits in a long chunk does.
    FLOOR_SENTENCE_WEIGHT = 0.8
    #: At most this many chunks of one note in search results / in an answer's sources.
    PER_NOTE_SEARCH = 2
    PER_NOTE_ASK = 3
    #: BLAS threads for the dense scores, set process-wide when a search service is built: the scores are bound by
    #: memory bandwidth and requests already run on parallel worker threads, so more threads only cost CPU.
    BLAS_THREADS = 1
    #: Ranked results kept in memory.
    RESULT_CACHE_MAX = 256
    #: At most this many model tokens (one full-length model input) embedded by one query for keyword candidates that
    #: have no vectors yet (their sentences, title and whole-chunk text); texts the embedding cache holds cost nothing.
    #: What is left out is ranked by its keyword evidence alone until the indexer embeds it.
    SIMILARITY_EMBED_TOKENS = 256

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        *,
        floor: float = COSINE_FLOOR,
        weights: FusionWeights = _DEFAULT_WEIGHTS,
        title_weight: float = TITLE_WEIGHT,
        classifier: QueryClassifier | None = None,
        vector_cache: VectorCache | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.floor = floor
        self.weights = weights
        self.title_weight = title_weight
        self.sentence_weight = self.SENTENCE_WEIGHT
        self.classifier = classifier or QueryClassifier()
        self.vector_cache = vector_cache or VectorCache(store, embedder)
        self.epoch = StoreEpoch(store)
        self.vectors = Vectors(store)
        self.keyword = KeywordIndex(store, self.epoch)
        self.note_maps = NoteMaps(store, self.epoch)
        self.names = Names(store, self.epoch)
        self.visible = VisibleViews(store, self.epoch, self.vector_cache, title_weight)
        self.indexed = IndexedCounts(store, self.epoch)
        self.results: EpochLRU[tuple, tuple[tuple[Hit, ...], str | None, frozenset[str]]] = EpochLRU(
            self.RESULT_CACHE_MAX
        )
        _limit_blas_threads(self.BLAS_THREADS)

    def start_keyword_index(self) -> threading.Thread | None:
        """:meth:`KeywordIndex.start`: the in-memory BM25, for long-lived processes."""
        return self.keyword.start()

    # ------------------------------------------------------------------ entry points
    def search(
        self,
        query: str,
        *,
        top_k: int = DEFAULT_TOP_K,
        tags: Sequence[str] = (),
        folders: Sequence[str] = (),
        mode: str = "hybrid",
        withhold: Withhold | None = None,
        tally: WithheldTally | None = None,
    ) -> SearchResult:
        """Ranked chunks for a query. Raises :class:`BadRequestError` for an empty or over-long query,
        a bad top_k or tag. ``withhold``/``tally``: see :meth:`retrieve`; ``SearchResult.withheld``
        is the number of withheld notes removed from the candidates; ``.coverage``: :mod:`cairn.search.indexed`."""
        started = time.perf_counter()
        tally = tally if tally is not None else WithheldTally()
        hits, preference = self.retrieve(
            query, top_k=top_k, tags=tags, folders=folders, mode=mode, withhold=withhold, tally=tally
        )
        elapsed_ms, coverage = (time.perf_counter() - started) * 1000, self.indexed.now(withhold)
        return SearchResult(
            hits=hits, elapsed_ms=elapsed_ms, preference=preference, withheld=tally.count, coverage=coverage
        )

    def retrieve(
        self,
        query: str,
        *,
        top_k: int = DEFAULT_TOP_K,
        tags: Sequence[str] = (),
        folders: Sequence[str] = (),
        mode: str = "hybrid",
        per_note: int | None = None,
        withhold: Withhold | None = None,
        tally: WithheldTally | None = None,
        purpose: str = "search",
    ) -> tuple[list[Hit], str | None]:
        """Ranked hits for ``query`` (at most ``top_k``, at most ``per_note`` chunks per note). ``purpose``:
        ``"ask"`` keeps only hits with cosine similarity ≥ the floor (an answer's sources); ``"search"`` keeps a
        purely semantic hit only above the floor but every chunk holding a query term, and ranks first the notes
        holding a rare term, then all terms, then some (module docstring). ``mode`` picks the ranked lists fused:
        ``hybrid`` (BM25 + dense), ``bm25`` or ``dense`` (for evaluation). Returns (hits, preference).
        ``withhold``: notes never returned, removed before ranking (:mod:`cairn.search.withheld`); ``tally``
        receives the withheld notes that the unfiltered candidate lists held."""
        query = check_query(query, top_k)
        if mode not in MODES:
            raise BadRequestError(f"mode must be one of {', '.join(MODES)}, got {mode!r}.")
        if purpose not in PURPOSES:
            raise BadRequestError(f"purpose must be one of {', '.join(PURPOSES)}, got {purpose!r}.")
        per_note = per_note or self.PER_NOTE_SEARCH
        tags_in, folders_in = scope_tags(tags), scope_folders(folders)
        withheld_key = (withhold.tags, withhold.folders) if withhold else None
        key = (query, top_k, tuple(tags_in), tuple(folders_in), mode, per_note, withheld_key, purpose)
        epoch = self.epoch.now()
        cached = self.results.get(key, epoch)
        if cached is not None:
            held, held_preference, withheld_paths = cached
            if tally is not None:
                tally.add(withheld_paths)
            return list(held), held_preference
        own_tally = WithheldTally()
        hits, preference = self._rank(query, top_k, tags_in, folders_in, mode, purpose, per_note, withhold, own_tally)
        if tally is not None:
            tally.add(own_tally.paths)
        if self.epoch.value == epoch:  # nothing committed meanwhile (else the result may mix both states)
            self.results.put(key, (tuple(hits), preference, frozenset(own_tally.paths)), epoch)
        return hits, preference

    def keyword_ranking(
        self,
        query: str,
        limit: int = CANDIDATES,
        *,
        within: Sequence[int] | None = None,
        excluding: Sequence[int] = (),
    ) -> list[int]:
        """The keyword (BM25) leg of :meth:`retrieve` on its own: the ids of the ``limit`` chunks with the best BM25
        for ``query``'s terms, best first, as the store is now (no cosine floor, no withholding: for benchmarks and
        checks, not for serving). ``within``/``excluding``: see :meth:`KeywordIndex.ranking`."""
        self.epoch.now()
        return self.keyword.ranking(query, limit, within=within, excluding=excluding)

    # ------------------------------------------------------------------ ranking, step by step
    def _rank(
        self,
        query: str,
        top_k: int,
        tags: list[str],
        folders: list[str],
        mode: str,
        purpose: str,
        per_note: int,
        withhold: Withhold | None,
        tally: WithheldTally,
    ) -> tuple[list[Hit], str | None]:
        """:meth:`retrieve` on validated arguments, without the result cache."""
        within = self.store.scoped_chunk_ids(tags, folders) if (tags or folders) else None
        plan = None
        hidden = WithheldSet.load(self.store, withhold)
        view, lookup = self.visible.lookup(hidden, self.keyword)
        if purpose == "search" and (within is None or within):
            plan, within = self._plan(query, within, hidden, lookup)
        if within is not None and not within:
            return [], None
        text = plan.dense_text if plan is not None else query
        qvec = self.vector_cache.embed([text])[0]
        preference = self.classifier.classify(query)
        snap = self.vectors.for_query()
        r = _Ranking(query, mode, purpose, within, hidden, qvec, snap, self.vectors.query_scores(snap, text, qvec))
        r.plan, r.view, r.lookup = plan, view, lookup
        if mode in ("hybrid", "bm25"):
            r.keyword = self._keyword_leg(r)
            if plan is not None:
                r.coverage = self._coverage(r, plan)
        newer = self._embedded_since(r)
        if mode in ("hybrid", "dense"):
            r.pool = self._dense_leg(r) + newer
        candidates = list(dict.fromkeys(r.keyword + r.pool))
        keys = self._keys(candidates, mapped=plan is not None)  # chunks deleted since the snapshot are absent here
        sims = self._similarities(r, candidates, keys)
        fused = self._fuse(r, candidates, keys, sims, preference)
        order = self._order(r, fused, sims, keys)
        chosen = limit_per_group(order, {c: keys[c].path for c in order}, per_note, top_k)
        rows = self.store.chunk_rows(chosen)
        chosen = [c for c in chosen if c in rows]  # deleted since the keys were read
        tags_by_note = self.store.tags_of_notes(rows[c].note_id for c in chosen)
        if hidden:  # defence in depth: a note tagged since the withheld set was read
            chosen = [c for c in chosen if not hidden.withhold.tag_withheld(tags_by_note.get(rows[c].note_id, []))]
            self._tally_withheld(r, tally)
        terms = query_terms(plan.keyword_text if plan is not None else query)
        mask = hidden.symbol_masker(self.store) if hidden.redactor else None
        redact = hidden.redact if hidden.redactor else None
        matched = self._matched(r, terms, chosen, keys)
        hits = [
            self._hit(
                rows[c],
                fused[c],
                sims.cosine.get(c, 0.0),
                tags_by_note.get(rows[c].note_id, []),
                terms,
                matched[c],
                redact,
                mask,
            )
            for c in chosen
        ]
        return hits, preference

    def _keys(self, candidates: list[int], *, mapped: bool) -> dict[int, ChunkKey]:
        """The :class:`~cairn.store.ChunkKey` of each candidate that exists. ``mapped`` (a search, whose plan read the
        epoch's note map): from that map, no SQL, and from the store for the chunks it lacks (added since it was
        read); otherwise (an ask, which needs no note map) from the store."""
        if not mapped:
            return self.store.chunk_keys(candidates)
        notes = self.note_maps.get()
        note_ids = notes.notes(np.asarray(candidates, dtype=np.int64)).tolist()
        paths = notes.paths
        keys = {c: ChunkKey(c, n, paths[n]) for c, n in zip(candidates, note_ids) if n >= 0}
        unknown = [c for c, n in zip(candidates, note_ids) if n < 0]
        if unknown:
            keys.update(self.store.chunk_keys(unknown))
        return keys

    def _matched(
        self, r: _Ranking, terms: Sequence[str], chosen: list[int], keys: dict[int, ChunkKey]
    ) -> dict[int, float]:
        """Per chosen chunk, the share (0..1) of the query's ``terms`` it holds as the keyword leg matches them
        (:meth:`KeywordIndex.term_matches`), or 1 when its note holds every term (the search's coverage): what the
        hit's relevance label reads (:func:`cairn.relevance.relevance`)."""
        if not terms or not chosen:
            return dict.fromkeys(chosen, 0.0)
        ids = np.asarray(chosen, dtype=np.int64)
        held = np.zeros(len(ids))
        lookup = r.lookup or self.keyword  # the keyword index as the caller sees it
        for t in terms:
            holding = lookup.term_matches(t)[0]  # ascending chunk ids (rowid order, in memory and in FTS5)
            if len(holding):
                at = np.minimum(np.searchsorted(holding, ids), len(holding) - 1)
                held += holding[at] == ids
        out = dict(zip(chosen, (held / len(terms)).tolist()))
        if r.coverage is None:
            return out
        tier_of = r.coverage.tier_of
        return {c: 1.0 if tier_of(keys[c].note_id) == 2 else share for c, share in out.items()}

    def _keyword_leg(self, r: _Ranking) -> list[int]:
        """The BM25 candidates (withheld chunks left out before the top is taken); the withheld chunks the
        unfiltered list held are noted in ``r.touched``."""
        excluded = list(r.hidden.chunks)
        text = r.plan.keyword_text if r.plan is not None else r.query
        found = (r.lookup or self.keyword).ranking(text, self.CANDIDATES, within=r.within, excluding=excluded)
        if excluded:
            unfiltered = self.keyword.ranking(text, self.CANDIDATES, within=r.within)
            r.touched.update(c for c in unfiltered if c in r.hidden.chunks)
        return found

    def _plan(
        self, query: str, within: list[int] | None, hidden: WithheldSet, lookup: KeywordLookup
    ) -> tuple[Plan, list[int] | None]:
        """The search :class:`~cairn.search.lexical.Plan` of ``query`` (Obsidian's syntax,
        :mod:`cairn.search.syntax`), and the scope ``within`` narrowed to the notes its filters and exclusions
        allow. The chunks ``hidden`` withholds count for nothing in it (nor in its expansions)."""
        notes = self.note_maps.get()
        plan = Matcher(lookup, self.store, notes, hidden.chunks).plan(query, parse(query))
        if plan.allowed is not None:
            allowed = notes.chunks_of(sorted(plan.allowed))
            if within is not None:
                allowed = allowed[np.isin(allowed, np.asarray(within, dtype=np.int64))]
            within = allowed.tolist()
        return plan, within

    def _coverage(self, r: _Ranking, plan: Plan) -> Coverage:
        """Which notes hold the query's terms (:func:`cairn.search.lexical.coverage`); the best chunk of each note
        matching the whole query or holding a rare term is added to the keyword candidates when the BM25 top lacks
        it."""
        found = coverage(
            plan.leaves,
            self.note_maps.get(),
            r.keyword,
            within=r.within,
            excluding=list(r.hidden.chunks),
            max_extra=self.CANDIDATES,
            full=plan.full,
            tiered=plan.tiered,
            names=lambda notes: self.names.named(notes, plan.name_terms, r.view.names if r.view else None),
        )
        r.keyword = r.keyword + found.extra
        return found

    def _embedded_since(self, r: _Ranking) -> list[int]:
        """Chunks embedded after the snapshot, in scope and not withheld, at most ``Vectors.MAX_NEWER`` (a bulk
        (re-)index starts a reload: the rest join when it lands)."""
        newer = self.vectors.embedded_since(r.snap)
        if len(newer) > self.vectors.MAX_NEWER:
            self.vectors.reload(wait=False, bulk=True)
            newer = newer[: self.vectors.MAX_NEWER]
        if r.within is not None and newer:
            scope = set(r.within)
            newer = [c for c in newer if c in scope]
        if r.hidden.chunks and newer:
            newer = [c for c in newer if c not in r.hidden.chunks]
        return newer

    def _dense_leg(self, r: _Ranking) -> list[int]:
        """The dense top chunks of the snapshot, in scope, withheld ones left out before the top is taken (noted in
        ``r.touched`` when the unfiltered top held them)."""
        ids = r.snap.chunk_ids
        allowed = None if r.within is None else np.isin(ids, np.asarray(r.within, dtype=np.int64))
        if r.hidden.chunks:
            hide = np.isin(ids, np.asarray(list(r.hidden.chunks), dtype=np.int64))
            if hide.any():
                top_all = r.dense.top(self.CANDIDATES, self.sentence_weight, ids, allowed)
                r.touched.update(int(ids[i]) for i in top_all if hide[i])
            allowed = ~hide if allowed is None else allowed & ~hide
        allowed, extra = self.visible.dense(r.view, r.qvec, ids, allowed, self.sentence_weight, r.redacted_cos)
        top = r.dense.top(self.CANDIDATES, self.sentence_weight, ids, allowed)
        return [int(ids[i]) for i in top] + extra[: self.CANDIDATES]

    def _similarities(self, r: _Ranking, candidates: list[int], keys: dict[int, ChunkKey]) -> _Similarities:
        """Exact cosines of every candidate: from the snapshot when it holds the chunk, else from the store (and
        for keyword candidates not embedded yet, computed now: :func:`~cairn.search.stored.stored_cosines`)."""
        chunk_cos: dict[int, float] = {}
        sentence_cos: dict[int, float] = {}
        held = [(cid, r.snap.row_of[cid]) for cid in candidates if cid in r.snap.row_of]
        if held:
            exact_cos, exact_sentence = r.dense.exact(np.asarray([row for _, row in held], dtype=np.int64))
            for (cid, _), c, s in zip(held, exact_cos.tolist(), exact_sentence.tolist()):
                chunk_cos[cid], sentence_cos[cid] = c, s
        missing = [cid for cid in candidates if cid not in chunk_cos]
        if missing:  # embedded after the snapshot, or not embedded yet (keyword-ready index)
            more_cos, more_sentence = stored_cosines(
                self.store,
                self.embedder,
                r.qvec,
                list(self.store.chunk_rows([c for c in missing if c in keys]).values()),
                compute=set(r.keyword),
                title_weight=self.title_weight,
                budget=self.SIMILARITY_EMBED_TOKENS,
            )
            chunk_cos.update(more_cos)
            sentence_cos.update(more_sentence)
        self.visible.override(r.view, r.qvec, candidates, r.redacted_cos, (chunk_cos, sentence_cos))  # redacted rows
        w, fw = self.sentence_weight, self.FLOOR_SENTENCE_WEIGHT
        return _Similarities(
            chunk=chunk_cos,
            sentence=sentence_cos,
            dense={c: max(cos, w * sentence_cos[c]) for c, cos in chunk_cos.items()},
            cosine={c: max(cos, sentence_cos[c]) for c, cos in chunk_cos.items()},
            floor={c: max(cos, fw * sentence_cos[c]) for c, cos in chunk_cos.items()},
        )

    def _fuse(
        self,
        r: _Ranking,
        candidates: list[int],
        keys: dict[int, ChunkKey],
        sims: _Similarities,
        preference: str | None,
    ) -> dict[int, float]:
        """Fusion of the ranked lists (:func:`cairn.search.fusion.fuse`) over the candidates that pass the floor (and
        are not withheld), each score boosted by the query classifier's preference for the chunk's kind, then, when
        two lists are fused, each note's second best chunk added (:func:`~cairn.search.fusion.add_second_best`). In
        search (``r.coverage`` set) a chunk holding a query term passes whatever its cosine."""
        rankings: dict[str, list[int]] = {}
        if r.mode in ("hybrid", "bm25"):
            rankings["bm25"] = r.keyword
        if r.mode in ("hybrid", "dense"):
            dense = sims.dense
            rankings["dense"] = sorted((c for c in r.pool if c in dense), key=lambda c: (-dense[c], c))[
                : self.CANDIDATES
            ]
        hidden = r.hidden
        visible = {c for c in candidates if c in keys and not (hidden and hidden.hides(keys[c].note_id, keys[c].path))}
        passing = {c for c in visible if sims.floor.get(c, -1.0) >= self.floor}
        scores = self._leg_scores(r, rankings, candidates, sims)

        def fused_among(kept: set[int]) -> dict[int, float]:
            return fuse(
                {name: [c for c in ranked if c in kept] for name, ranked in rankings.items()}, scores, self.weights
            )

        fused = fused_among(passing)
        if r.coverage is not None:  # lexical evidence below the floor: fused among every candidate kept
            only_filters = r.plan is not None and r.plan.allowed is not None and not r.plan.leaves
            # tag:, path:, file: or exclusions alone: every note they allow matches, as in Obsidian
            r.below_floor = (visible - passing) if only_filters else r.coverage.lexical_among(visible - passing)
            if r.below_floor:
                wider = fused_among(passing | r.below_floor)
                fused.update({c: wider[c] for c in r.below_floor if c in wider})
        if preference is not None:
            kinds = self.store.chunk_kinds(list(fused))
            for cid in fused:
                fused[cid] *= self.classifier.boost(preference, kinds.get(cid, ""))
        if len(rankings) < 2:  # one list alone (bm25, dense modes): ranked as that leg ranks
            return fused
        return add_second_best(fused, {c: keys[c].note_id for c in fused}, self.weights.second)

    def _leg_scores(
        self, r: _Ranking, rankings: dict[str, list[int]], candidates: list[int], sims: _Similarities
    ) -> dict[str, dict[int, float]]:
        """The legs' raw scores of the candidates, for a fusion of scores (:mod:`cairn.search.fusion`): the dense
        ranking score, and the BM25 of the keyword leg's terms (positive); none for RRF."""
        if self.weights.method == "rrf":
            return {}
        scores = {"dense": sims.dense}
        if "bm25" in rankings:
            text = r.plan.keyword_text if r.plan is not None else r.query
            scores["bm25"] = bm25_scores(r.lookup or self.keyword, query_terms(text), candidates)
        return scores

    @staticmethod
    def _order(r: _Ranking, fused: dict[int, float], sims: _Similarities, keys: dict[int, ChunkKey]) -> list[int]:
        """The fused candidates best first: by fused score (then cosine, then chunk id); in search, by the tier of
        the chunk's note first (:meth:`Coverage.rank_key`), then the chunks that pass the floor before the others."""
        cos = sims.cosine
        if r.coverage is None:
            return sorted(fused, key=lambda c: (-fused[c], -cos.get(c, 0.0), c))
        key, below = r.coverage.rank_key, r.below_floor
        by_note = {n: tuple(-x for x in key(n)) for n in {keys[c].note_id for c in fused}}
        tiers = {c: by_note[keys[c].note_id] for c in fused}
        return sorted(fused, key=lambda c: (tiers[c], c in below, -fused[c], -cos.get(c, 0.0), c))

    def _tally_withheld(self, r: _Ranking, tally: WithheldTally) -> None:
        """Add to ``tally`` the withheld notes with a candidate chunk that would have passed the floor (a chunk not
        in the in-memory vectors counts, to err on the side of reporting)."""
        if not r.touched:
            return

        def would_pass(cid: int) -> bool:
            row = r.snap.row_of.get(cid)
            if row is None:
                return True
            c, s = r.dense.exact(np.asarray([row], dtype=np.int64))
            return max(float(c[0]), self.FLOOR_SENTENCE_WEIGHT * float(s[0])) >= self.floor

        tally.add(r.hidden.notes[r.hidden.chunks[c]] for c in r.touched if would_pass(c))

    @staticmethod
    def _hit(
        row: ChunkRow,
        score: float,
        cosine: float,
        tags: Sequence[str],
        terms: Sequence[str],
        matched: float,
        redact: Callable[[str], str] | None = None,
        mask_symbol: Callable[[str, str], str] | None = None,
    ) -> Hit:
        text, symbol = (redact(row.text), redact(row.symbol)) if redact else (row.text, row.symbol)
        if mask_symbol is not None and row.kind != "pdf":  # a PDF's symbol is "page N"
            symbol = mask_symbol(row.path, row.symbol)
        return Hit(
            chunk_id=row.chunk_id,
            file_path=row.path,
            title=row.title,
            symbol=symbol,
            score=score,
            cosine=cosine,
            snippet=make_snippet(text, terms),
            text=text,
            tags=tuple(tags),
            lines=cast("tuple[int, int]", (row.line_start, row.line_end)) if row.line_start is not None else None,
            page=row.page,
            kind=row.kind,
            indexed_at=row.indexed_at,
            token_bound=row.token_count if text == row.text else 0,
            matched=matched,
        )

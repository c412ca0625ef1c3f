"""The one query service: search for the CLI, HTTP, MCP and the answers.

Flow (docs/design.md, "Flows"): classify → scope filter → FTS5 BM25 top-N and vector top-N → fusion → cosine floor →
per-note de-duplication → top_k. :meth:`SearchService._rank` is that flow as a pipeline of steps, each returning a
value (:mod:`cairn.search.pipeline`); every step reads the request's parsed :class:`~cairn.search.query.Query` and
the caller's :class:`~cairn.search.view.CallerView` and nothing else of the caller.

Two purposes (:meth:`SearchService.ranked`): ``"ask"`` (the answers' sources) applies the cosine floor to every
candidate, as the design's contract says. ``"search"`` (CLI, HTTP, MCP, the plugin's Search) applies it to purely
semantic candidates only: a chunk holding a query term is always a candidate, and the notes holding a rare term,
then every term, then some, rank first (:mod:`cairn.search.lexical`), each tier in the fused order.

Requests: :meth:`SearchService.search` takes a :class:`~cairn.contract.SearchRequest` whole, checked once by the edge
contract and trusted here, and the caller's view (:class:`~cairn.search.view.CallerView`, made by :attr:`views` for
the caller's withholding rule). The view leaves the withheld notes out of every step, its scope included; the paths
of the withheld notes a request touched come back in :attr:`Ranked.withheld <cairn.search.pipeline.Ranked.withheld>`
and go to the view's tally, for the audit log.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence

import numpy as np

from cairn.config import COSINE_FLOOR, DEFAULT_TOP_K
from cairn.contract import IndexCoverage, SearchRequest
from cairn.embedder import Embedder
from cairn.embedding import TITLE_WEIGHT, VectorCache
from cairn.errors import BadRequestError
from cairn.ranking import FusionWeights, QueryClassifier, limit_per_group
from cairn.search.cache import EpochLRU, StoreEpoch
from cairn.search.fusion import add_second_best, bm25_scores, fuse
from cairn.search.hits import Hit, SearchResult
from cairn.search.indexed import IndexedCounts
from cairn.search.keyword import KeywordIndex
from cairn.search.lexical import Coverage, Matcher, NoteMaps, Plan, coverage
from cairn.search.literal import Literals, names_hold, passage_share, punctuated
from cairn.search.literal_rank import checked_literals, find_literals, literal_weights, scored_terms
from cairn.search.names import NameMatch, Names
from cairn.search.pipeline import (
    Candidates,
    DenseContext,
    Fused,
    Ranked,
    Similarities,
    Terms,
    make_hit,
    matched_shares,
    order,
)
from cairn.search.query import Query
from cairn.search.recent import recent
from cairn.search.stored import stored_cosines
from cairn.search.vectors import Vectors
from cairn.search.view import CallerView, Scope, Views
from cairn.search.visible import VisibleViews
from cairn.store import ChunkKey, Store
from cairn.store.reads import note_names_of

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


class SearchService:
    """Search over one vault's index. The one query path for CLI, HTTP, MCP and answers: every result passes the
    scope filter and the cosine floor (docs/design.md, "Contract").

    Blocking (SQLite + ONNX); call it from a worker thread in async code. Thread-safe (the store gives each thread
    its own connection; onnxruntime sessions are thread-safe). Its collaborators hold the state: :attr:`vectors`
    (the in-memory vectors and their reloads), :attr:`keyword` (BM25), :attr:`vector_cache` (text → vector),
    :attr:`epoch` and :attr:`results` (ranked results by query text and every parameter, while the store is
    unchanged). Every cache a question fills has a bound in bytes (dense scores 16 MiB, text vectors 16 MiB,
    values per term and per phrase 8 MiB each, ranked results 8 MiB), so that questions never asked before, however
    many, leave the daemon's memory level (``make bench``, query-soak)."""

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
    #: Ranked results kept in memory, and their bytes at most (hits hold their chunks' text).
    RESULT_CACHE_MAX = 256
    RESULT_CACHE_BYTES = 8 << 20
    #: At most this many model tokens (half a model input) embedded by one query for keyword candidates that have no
    #: vectors yet (their whole-chunk texts: tier-1 vectors); texts the embedding cache holds cost nothing. What is
    #: left out is ranked by its keyword evidence alone until the indexer embeds it.
    SIMILARITY_EMBED_TOKENS = 128

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
        self.note_maps = NoteMaps(store)
        self.names = Names(store)
        self.visible = VisibleViews(store, self.epoch, self.vector_cache, title_weight)
        self.views = Views(store, self.epoch, self.keyword, self.visible)
        self.indexed = IndexedCounts(store, self.epoch)
        self.results: EpochLRU[tuple, Ranked] = EpochLRU(self.RESULT_CACHE_MAX, max_bytes=self.RESULT_CACHE_BYTES)
        _limit_blas_threads(self.BLAS_THREADS)

    def start_keyword_index(self, *, when_needed: bool = False) -> threading.Thread | None:
        """:meth:`KeywordIndex.start`: the in-memory BM25, for long-lived processes (``when_needed``:
        :meth:`KeywordIndex.start_when_needed`)."""
        return self.keyword.start_when_needed() if when_needed else self.keyword.start()

    def warm_up(self) -> threading.Thread:
        """Read on a thread of its own what a process's first question reads (the names index, the chunk → note
        map: seconds at 40,000 notes), so that a question just after start-up finds them read. Returns the
        thread."""

        def read() -> None:
            try:
                self.names.warm()
                self.note_maps.get()
            except Exception:  # never fatal: the first question reads them instead
                log.exception("reading the names index at start-up failed")
            finally:
                self.store.close_thread_connection()

        thread = threading.Thread(target=read, name="cairn-warm-up", daemon=True)
        thread.start()
        return thread

    # ------------------------------------------------------------------ entry points
    def coverage(self, view: CallerView) -> IndexCoverage:
        """The notes indexed and those still waiting for vectors, as ``view``'s caller sees them."""
        return self.indexed.now(view)

    def search(
        self, request: SearchRequest | str, caller: CallerView | None = None, *, mode: str = "hybrid"
    ) -> SearchResult:
        """Ranked chunks for ``request`` (checked by the edge contract: trusted here; a plain string, as a script in
        the same process passes one, is parsed by that contract first) as ``caller`` sees the index
        (None: the owner); for an empty query, the most recently modified notes (``.recent``,
        :mod:`cairn.search.recent`). The withheld notes the request touched go to ``caller.tally``
        (:attr:`Ranked.withheld <cairn.search.pipeline.Ranked.withheld>`) and their count to
        ``SearchResult.withheld``; ``.coverage``: :mod:`cairn.search.indexed`. ``mode``: see :meth:`ranked`."""
        started = time.perf_counter()
        if isinstance(request, str):
            request = SearchRequest.parse({"query": request})
        view = caller if caller is not None else self.views.of(None)
        if request.recent:  # no words: the recent notes
            ranked = recent(view, request)
        else:
            ranked = self.ranked(Query.parse(request.query), view, request, mode=mode)
        view.tally.add(ranked.withheld)
        elapsed_ms, coverage = (time.perf_counter() - started) * 1000, self.coverage(view)
        return SearchResult(
            hits=list(ranked.hits),
            elapsed_ms=elapsed_ms,
            preference=ranked.preference,
            withheld=len(ranked.withheld),
            coverage=coverage,
            recent=request.recent,
        )

    def retrieve(
        self,
        text: str,
        *,
        top_k: int = DEFAULT_TOP_K,
        mode: str = "hybrid",
        per_note: int | None = None,
        purpose: str = "search",
    ) -> tuple[list[Hit], str | None]:
        """:meth:`ranked` for ``text`` as the owner sees the index, for in-process callers (evaluation, benchmarks):
        (hits, preference). The text and ``top_k`` are checked as the edges check a search
        (:class:`BadRequestError`)."""
        request = SearchRequest.parse({"query": text, "top_k": top_k})
        ranked = self.ranked(
            Query.parse(request.query), self.views.of(None), request, mode=mode, per_note=per_note, purpose=purpose
        )
        return list(ranked.hits), ranked.preference

    def ranked(
        self,
        query: Query,
        view: CallerView,
        request: SearchRequest,
        *,
        per_note: int | None = None,
        purpose: str = "search",
        mode: str = "hybrid",
    ) -> Ranked:
        """Ranked hits for ``query`` (a follow-up's may be another text than the request's) in ``request``'s scope as
        ``view``'s caller sees the index (at most ``request.top_k``, at most ``per_note`` chunks per note). The request
        is trusted (checked once, by the edge contract). ``purpose``: ``"ask"`` keeps only hits with cosine similarity
        ≥ the floor (an answer's sources); ``"search"`` keeps a purely semantic hit only above the floor but every
        chunk holding a query term, and ranks first the notes holding a rare term, then all terms, then some (module
        docstring). ``mode`` picks the ranked lists fused: ``hybrid`` (BM25 + dense), ``bm25`` or ``dense`` (for
        evaluation). Raises :class:`BadRequestError` for a bad mode or purpose."""
        if mode not in MODES:
            raise BadRequestError(f"mode must be one of {', '.join(MODES)}, got {mode!r}.")
        if purpose not in PURPOSES:
            raise BadRequestError(f"purpose must be one of {', '.join(PURPOSES)}, got {purpose!r}.")
        per_note = per_note or self.PER_NOTE_SEARCH
        top_k, tags, folders = request.top_k, request.tags, request.folders
        key = (query.text, top_k, tags, folders, mode, per_note, view.key, purpose)
        epoch = self.epoch.now()
        cached = self.results.get(key, epoch)
        if cached is not None:
            return cached
        with self.embedder.foreground():  # the index's bulk embedding gives way while a question is ranked
            ranked = self._rank(query, view, view.scope(tags, folders), top_k, mode, purpose, per_note)
        if self.epoch.value == epoch:  # nothing committed meanwhile (else the result may mix both states)
            self.results.put(key, ranked, epoch)
        return ranked

    def keyword_ranking(
        self,
        query: str,
        limit: int = CANDIDATES,
        *,
        within: Sequence[int] | None = None,
        excluding: Sequence[int] = (),
    ) -> list[int]:
        """The keyword (BM25) leg on its own: the ids of the ``limit`` chunks with the best BM25 for ``query``'s terms,
        best first, as the store is now (no cosine floor, no withholding: for benchmarks and checks, not for
        serving). ``within``/``excluding``: see :meth:`KeywordIndex.ranking`."""
        self.epoch.now()
        return self.keyword.ranking(Query.parse(query).terms, limit, within=within, excluding=excluding)

    # ------------------------------------------------------------------ the pipeline
    def _rank(
        self, query: Query, view: CallerView, scope: Scope, top_k: int, mode: str, purpose: str, per_note: int
    ) -> Ranked:
        """:meth:`ranked` on validated arguments, without the result cache: plan → candidates → similarities →
        fused → ordered → hits. A scope empty in the caller's view ends it before any ranking work, whether the
        scope matched withheld notes or none."""
        plan = self._plan(query, view) if purpose == "search" and not scope.empty else None
        within = self._within(scope, plan)
        withheld = scope.withheld | (plan.withheld if plan is not None else frozenset())
        if within is not None and not within:
            return Ranked((), None, withheld)
        terms = Terms(query, plan)
        preference = self.classifier.classify(query.text)
        dense = self._dense_context(terms.dense)
        found = self._candidates(mode, terms, within, view, dense)
        keys = self._keys(found.ids, mapped=plan is not None)  # chunks deleted since the snapshot are absent here
        sims = self._similarities(found, keys, view, dense)
        fused = self._fuse(mode, found, terms, keys, sims, preference, view)
        ordered = order(fused, found.coverage, sims, keys, self._literal_notes(found.literal))
        chosen = limit_per_group(ordered, {c: keys[c].path for c in ordered}, per_note, top_k)
        hits = self._hits(chosen, fused, sims, terms, found.coverage, keys, view)
        if view.withheld:
            withheld |= self._touched_passing(found.touched, view, dense)
        return Ranked(tuple(hits), preference, withheld)

    def _literal_notes(self, literal: Literals | None) -> dict[int, int]:
        """Note id → how many of the query's words as typed the note holds (none without literal evidence)."""
        if literal is None:
            return {}
        return literal.by_note(self.note_maps.get().notes)

    def _plan(self, query: Query, view: CallerView) -> Plan:
        """The search :class:`~cairn.search.lexical.Plan` of ``query`` (Obsidian's syntax) in the caller's view."""
        return Matcher(view, self.note_maps.get()).plan(query)

    def _within(self, scope: Scope, plan: Plan | None) -> list[int] | None:
        """The chunks the ranking may return (None: all): the scope narrowed to the notes the plan's filters and
        exclusions allow."""
        within = scope.chunks
        if plan is None or plan.allowed is None:
            return within
        allowed = self.note_maps.get().chunks_of(sorted(plan.allowed))
        if within is not None:
            allowed = allowed[np.isin(allowed, np.asarray(within, dtype=np.int64))]
        return allowed.tolist()

    def _dense_context(self, text: str) -> DenseContext:
        qvec = self.vector_cache.embed([text])[0]
        snap = self.vectors.for_query()
        return DenseContext(qvec, snap, self.vectors.query_scores(snap, text, qvec))

    def _candidates(
        self, mode: str, terms: Terms, within: list[int] | None, view: CallerView, dense: DenseContext
    ) -> Candidates:
        """Both legs' candidates (:class:`~cairn.search.pipeline.Candidates`)."""
        keyword: list[int] = []
        touched: set[int] = set()
        found: Coverage | None = None
        literal: Literals | None = None
        if mode in ("hybrid", "bm25"):
            keyword, touched = self._keyword_leg(terms.keyword, within, view)
            if terms.plan is not None:
                found = self._coverage(terms, keyword, within, view)
                keyword = keyword + found.extra
                words = checked_literals(self.store, terms) if terms.plan.tiered else ()
                if words:
                    literal = find_literals(self.store, self.keyword, self.note_maps.get(), words, within, view)
                    held = set(keyword)
                    keyword = keyword + [c for c in literal.best_first() if c not in held][: self.CANDIDATES]
        newer = self._embedded_since(dense, within, view)
        pool: list[int] = []
        redacted: dict[int, tuple[float, float]] = {}
        if mode in ("hybrid", "dense"):
            top, more, redacted = self._dense_leg(dense, within, view)
            pool, touched = top + newer, touched | more
        return Candidates(keyword, pool, found, frozenset(touched), redacted, literal)

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

    def _keyword_leg(
        self, terms: Sequence[str], within: list[int] | None, view: CallerView
    ) -> tuple[list[int], set[int]]:
        """The BM25 candidates as the caller sees them, and the withheld chunks the unfiltered list held."""
        excluded = list(view.hidden)
        found = view.keyword.ranking(terms, self.CANDIDATES, within=within, excluding=excluded)
        if not excluded:
            return found, set()
        unfiltered = self.keyword.ranking(terms, self.CANDIDATES, within=within)
        return found, {c for c in unfiltered if c in view.hidden}

    def _coverage(self, terms: Terms, keyword: list[int], within: list[int] | None, view: CallerView) -> Coverage:
        """Which notes hold the query's terms (:func:`cairn.search.lexical.coverage`), and the best chunk of each note
        matching the whole query or holding a rare term that the BM25 top lacks."""
        plan = terms.plan
        assert plan is not None
        names = view.names()
        return coverage(
            plan.leaves,
            self.note_maps.get(),
            keyword,
            within=within,
            excluding=list(view.hidden),
            max_extra=self.CANDIDATES,
            full=plan.full,
            tiered=plan.tiered,
            names=lambda notes: self._named_literally(self.names.named(notes, plan.name_terms, names), terms, view),
        )

    def _named_literally(self, named: dict[int, NameMatch], terms: Terms, view: CallerView) -> dict[int, NameMatch]:
        """``named`` without the notes none of whose names (title, aliases; as the caller sees them: redacted) holds
        the query's punctuated words as typed: ``.obsidian`` names no note called "How Obsidian stores data"."""
        wanted = punctuated(lit for _, lit in terms.literals)
        if not wanted or not named:
            return named
        texts = note_names_of(self.store, named)
        if view.redactor:
            texts = {n: [view.redact(t) for t in names] for n, names in texts.items()}
        return {n: m for n, m in named.items() if names_hold(texts.get(n, []), wanted)}

    def _embedded_since(self, dense: DenseContext, within: list[int] | None, view: CallerView) -> list[int]:
        """Chunks embedded after the snapshot, in scope and not withheld, at most ``Vectors.MAX_NEWER`` (a bulk
        (re-)index starts a reload: the rest join when it lands)."""
        newer = self.vectors.embedded_since(dense.snap)
        if len(newer) > self.vectors.MAX_NEWER:
            self.vectors.reload(wait=False, bulk=True)
            newer = newer[: self.vectors.MAX_NEWER]
        if within is not None and newer:
            inside = set(within)
            newer = [c for c in newer if c in inside]
        return view.visible_chunks(newer)

    def _dense_leg(
        self, dense: DenseContext, within: list[int] | None, view: CallerView
    ) -> tuple[list[int], set[int], dict[int, tuple[float, float]]]:
        """The dense top chunks of the snapshot in scope as the caller sees them (withheld ones left out before the
        top is taken, redacted rows by their redacted vectors), the withheld chunks the unfiltered top held, and the
        redacted rows' cosines."""
        ids = dense.snap.chunk_ids
        allowed = None if within is None else np.isin(ids, np.asarray(within, dtype=np.int64))
        touched: set[int] = set()
        if view.hidden:
            hide = np.isin(ids, np.asarray(list(view.hidden), dtype=np.int64))
            if hide.any():
                top_all = dense.scores.top(self.CANDIDATES, self.sentence_weight, ids, allowed)
                touched = {int(ids[i]) for i in top_all if hide[i]}
            allowed = ~hide if allowed is None else allowed & ~hide
        allowed, extra, redacted = view.dense(dense.qvec, ids, allowed, self.sentence_weight)
        top = dense.scores.top(self.CANDIDATES, self.sentence_weight, ids, allowed)
        return [int(ids[i]) for i in top] + extra[: self.CANDIDATES], touched, redacted

    def _similarities(
        self, found: Candidates, keys: dict[int, ChunkKey], view: CallerView, dense: DenseContext
    ) -> Similarities:
        """Exact cosines of every candidate: from the snapshot when it holds the chunk, else from the store (and
        for keyword candidates not embedded yet, computed now: :func:`~cairn.search.stored.stored_cosines`); a
        redacted row's by its redacted vectors."""
        candidates = found.ids
        chunk_cos: dict[int, float] = {}
        sentence_cos: dict[int, float] = {}
        row_of = dense.snap.row_of
        held = [(cid, row_of[cid]) for cid in candidates if cid in row_of]
        if held:
            exact_cos, exact_sentence = dense.scores.exact(np.asarray([row for _, row in held], dtype=np.int64))
            for (cid, _), c, s in zip(held, exact_cos.tolist(), exact_sentence.tolist()):
                chunk_cos[cid], sentence_cos[cid] = c, s
        missing = [cid for cid in candidates if cid not in chunk_cos]
        if missing:  # embedded after the snapshot, or not embedded yet (keyword-ready index)
            more_cos, more_sentence = stored_cosines(
                self.store,
                self.embedder,
                dense.qvec,
                list(self.store.chunk_rows([c for c in missing if c in keys]).values()),
                compute=set(found.keyword),
                title_weight=self.title_weight,
                budget=self.SIMILARITY_EMBED_TOKENS,
            )
            chunk_cos.update(more_cos)
            sentence_cos.update(more_sentence)
        for c, (chunk, sentence) in view.redacted_cosines(dense.qvec, candidates, found.redacted).items():
            chunk_cos[c], sentence_cos[c] = chunk, sentence
        return Similarities.of(chunk_cos, sentence_cos, self.sentence_weight, self.FLOOR_SENTENCE_WEIGHT)

    def _fuse(
        self,
        mode: str,
        found: Candidates,
        terms: Terms,
        keys: dict[int, ChunkKey],
        sims: Similarities,
        preference: str | None,
        view: CallerView,
    ) -> Fused:
        """Fusion of the ranked lists (:func:`cairn.search.fusion.fuse`) over the candidates that pass the floor (and
        are not withheld), each score boosted by the query classifier's preference for the chunk's kind, then, when
        two lists are fused, each note's second best chunk added (:func:`~cairn.search.fusion.add_second_best`). In
        search (``found.coverage`` set) a chunk holding a query term passes whatever its cosine."""
        rankings: dict[str, list[int]] = {}
        if mode in ("hybrid", "bm25"):
            rankings["bm25"] = found.keyword
        if mode in ("hybrid", "dense"):
            ranked = sorted((c for c in found.dense if c in sims.dense), key=lambda c: (-sims.dense[c], c))
            rankings["dense"] = ranked[: self.CANDIDATES]
        candidates = found.ids
        visible = {c for c in candidates if c in keys and not view.hides(keys[c].note_id, keys[c].path)}
        passing = {c for c in visible if sims.floor.get(c, -1.0) >= self.floor}
        scores = self._leg_scores(rankings, terms, candidates, sims, view, found.literal)
        weights = literal_weights(self.weights, found.literal) if "bm25" in scores else self.weights

        def fused_among(kept: set[int]) -> dict[int, float]:
            return fuse({name: [c for c in ranked if c in kept] for name, ranked in rankings.items()}, scores, weights)

        fused = fused_among(passing)
        below: set[int] = set()
        if found.coverage is not None:  # lexical evidence below the floor: fused among every candidate kept
            plan = terms.plan
            only_filters = plan is not None and plan.allowed is not None and not plan.leaves
            # tag:, path:, file: or exclusions alone: every note they allow matches, as in Obsidian
            below = (visible - passing) if only_filters else found.coverage.lexical_among(visible - passing)
            if found.literal is not None:
                below |= {c for c in visible - passing if c in found.literal.counts}
            if below and found.literal is not None:  # words as typed: one ranking, whatever the cosines
                fused = fused_among(passing | below)
                below -= set(found.literal.counts)
            elif below:
                wider = fused_among(passing | below)
                fused.update({c: wider[c] for c in below if c in wider})
        if preference is not None:
            kinds = self.store.chunk_kinds(list(fused))
            for cid in fused:
                fused[cid] *= self.classifier.boost(preference, kinds.get(cid, ""))
        if len(rankings) >= 2:  # one list alone (bm25, dense modes): ranked as that leg ranks
            fused = add_second_best(fused, {c: keys[c].note_id for c in fused}, self.weights.second)
        return Fused(fused, frozenset(below))

    def _leg_scores(
        self,
        rankings: dict[str, list[int]],
        terms: Terms,
        candidates: list[int],
        sims: Similarities,
        view: CallerView,
        literal: Literals | None = None,
    ) -> dict[str, dict[int, float]]:
        """The legs' raw scores of the candidates, for a fusion of scores (:mod:`cairn.search.fusion`): the dense
        ranking score, and the BM25 of the keyword leg's terms (positive) plus that of the query's words as typed
        (``literal``); none for RRF."""
        if self.weights.method == "rrf":
            return {}
        scores = {"dense": sims.dense}
        if "bm25" in rankings:
            scores["bm25"] = bm25_scores(view.keyword, scored_terms(terms, literal), candidates)
            if literal is not None:  # each literal counts as one more term of the query
                bm25 = scores["bm25"]
                for c, value in literal.bm25.items():
                    if c in bm25:
                        bm25[c] += value
        return scores

    def _hits(
        self,
        chosen: list[int],
        fused: Fused,
        sims: Similarities,
        terms: Terms,
        found: Coverage | None,
        keys: dict[int, ChunkKey],
        view: CallerView,
    ) -> list[Hit]:
        """The :class:`Hit` of each chosen chunk that still exists, as the caller is shown it."""
        rows = self.store.chunk_rows(chosen)
        chosen = [c for c in chosen if c in rows]  # deleted since the keys were read
        tags_by_note = self.store.tags_of_notes(rows[c].note_id for c in chosen)
        if view.withheld:  # defence in depth: a note tagged since the withheld set was read
            rule = view.withheld.withhold
            chosen = [c for c in chosen if not rule.tag_withheld(tags_by_note.get(rows[c].note_id, []))]
        words = terms.keyword
        mask = view.symbol_masker()
        redact = view.redact if view.redactor else None
        matched = matched_shares(view.keyword.term_matches, words, chosen, found, keys)
        literals = [lit for _, lit in terms.literals]
        lead = terms.question  # the first-hit rule of the labels is calibrated on questions
        hits = [
            make_hit(
                rows[c],
                fused.scores[c],
                sims.cosine.get(c, 0.0),
                tags_by_note.get(rows[c].note_id, []),
                words,
                matched[c],
                redact,
                mask,
            )
            for c in chosen
        ]
        return [
            dataclasses.replace(
                h, exact=passage_share(f"{h.title}\n{h.symbol}\n{h.text}", literals), first=lead and i == 0
            )
            for i, h in enumerate(hits)
        ]

    def _touched_passing(self, touched: frozenset[int], view: CallerView, dense: DenseContext) -> frozenset[str]:
        """The withheld notes with a candidate chunk in ``touched`` that would have passed the floor (a chunk not in
        the in-memory vectors counts, to err on the side of reporting)."""

        def would_pass(cid: int) -> bool:
            row = dense.snap.row_of.get(cid)
            if row is None:
                return True
            c, s = dense.scores.exact(np.asarray([row], dtype=np.int64))
            return max(float(c[0]), self.FLOOR_SENTENCE_WEIGHT * float(s[0])) >= self.floor

        notes = view.withheld.notes
        return frozenset(notes[view.hidden[c]] for c in touched if would_pass(c))

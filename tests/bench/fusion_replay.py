"""Replay of the search's fusion step for experiments: capture every question's evidence once, then rank it again
under other fusion functions, note aggregations, candidate depths or dense feedback without re-running the search.

:func:`capture` runs ``SearchService.retrieve`` (hybrid, search purpose, one chunk per note, top 10: as
``eval_retrieval.py`` ranks) for each question with a spy on ``SearchService._fuse``, and keeps what fusion sees:
the question vector, the plan and coverage (the tiers and the notes the query names), the candidates and the
ranking the service returned. :class:`Replay` then has, per question, every chunk's exact dense scores (chunk and
best sentence cosine) and BM25 sum (the keyword leg's terms), so any candidate depth can be taken;
:meth:`Replay.rank` rebuilds the ordering of ``SearchService._fuse`` / ``_order`` with a fusion function given.
With plain weighted RRF at the service's depth it gives the service's rankings exactly (:meth:`Replay.check`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))

from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.embedder import Embedder  # noqa: E402
from cairn.embedding import title_hash  # noqa: E402
from cairn.search.service import SearchService  # noqa: E402

#: fusion(lists, leg scores, passing set) -> {chunk id: fused}; lists: {"dense"|"bm25": ranked chunk ids}
Fuse = Callable[["QuestionEvidence", dict[str, list[int]], set[int]], dict[int, float]]


@dataclass
class QuestionEvidence:
    """What one question's fusion step saw, plus every chunk's leg scores (arrays indexed by snapshot row)."""

    question: dict
    qvec: np.ndarray
    preference: str | None
    coverage: object  # cairn.search.lexical.Coverage
    extra: list[int]
    ranked: list[str]  # the service's top 10 notes
    dense: np.ndarray  # (n,) max(chunk cos, SENTENCE_WEIGHT * best sentence cos)
    cosine: np.ndarray  # (n,) max(chunk cos, best sentence cos)
    floor: np.ndarray  # (n,) max(chunk cos, FLOOR_SENTENCE_WEIGHT * best sentence cos)
    bm25: np.ndarray  # (n,) BM25 sum of the keyword terms, positive (0: no term)
    title: np.ndarray  # (n,) cosine of the question with the title of each row's note
    cache: dict = field(default_factory=dict)


class Replay:
    """One vault's captured questions and the snapshot arrays needed to rank them again."""

    def __init__(self, vault: str, service: SearchService, questions: Sequence[dict]) -> None:
        self.vault = vault
        self.service = service
        snap = service.vectors.for_query()
        self.snap = snap
        self.chunk_ids = snap.chunk_ids
        rows = service.store.chunk_rows(snap.chunk_ids.tolist())
        self.path = np.asarray([rows[int(c)].path for c in snap.chunk_ids])
        self.note = np.asarray([rows[int(c)].note_id for c in snap.chunk_ids], dtype=np.int64)
        self.kind = np.asarray([rows[int(c)].kind for c in snap.chunk_ids])
        self.row_of = snap.row_of
        self.titles = self._title_vectors(rows)
        self.items = [self._capture(q) for q in questions]

    def _title_vectors(self, rows: dict) -> np.ndarray:  # noqa: ANN001
        """(n, 384) the title vector of each snapshot row's note (from the embedding cache, else embedded now)."""
        titles = sorted({rows[int(c)].title for c in self.chunk_ids})
        keys = {title_hash(t): t for t in titles}
        found = self.service.store.cached_vectors(keys, self.service.embedder.model_id)
        missing = [t for h, t in keys.items() if h not in found]
        vecs = {keys[h]: v for h, v in found.items()}
        if missing:
            vecs.update(zip(missing, self.service.embedder.embed(missing)))
        order = {t: i for i, t in enumerate(titles)}
        mat = np.stack([vecs[t] for t in titles]).astype(np.float32)
        self.title_row = np.asarray([order[rows[int(c)].title] for c in self.chunk_ids], dtype=np.int64)
        return mat

    # ------------------------------------------------------------------ capture
    def _capture(self, q: dict) -> QuestionEvidence:
        seen: dict = {}
        original = SearchService._fuse

        def spy(svc, mode, found, terms, keys, sims, preference, view):  # noqa: ANN001, ANN202
            seen.update(found=found, terms=terms, preference=preference)
            return original(svc, mode, found, terms, keys, sims, preference, view)

        SearchService._fuse = spy  # type: ignore[method-assign]
        try:
            self.service.results.clear()
            hits, _ = self.service.retrieve(q["question"], top_k=10, mode="hybrid", per_note=1)
        finally:
            SearchService._fuse = original  # type: ignore[method-assign]
        return self._evidence(q, seen["found"], seen["terms"], seen["preference"], [h.file_path for h in hits])

    def _evidence(self, q: dict, found, terms, preference: str | None, ranked: list[str]) -> QuestionEvidence:  # noqa: ANN001
        qvec = self.service.vector_cache.embed([terms.dense])[0]
        cos, sentence = self.snap.dense.exact_scores(qvec)
        w, fw = self.service.sentence_weight, self.service.FLOOR_SENTENCE_WEIGHT
        return QuestionEvidence(
            question=q,
            qvec=qvec,
            preference=preference,
            coverage=found.coverage,
            extra=list(found.coverage.extra) if found.coverage is not None else [],
            ranked=ranked,
            dense=np.maximum(cos, w * sentence),
            cosine=np.maximum(cos, sentence),
            floor=np.maximum(cos, fw * sentence),
            bm25=self.bm25_of(terms.keyword),
            title=(self.titles @ qvec)[self.title_row],
        )

    def bm25_of(self, terms: Sequence[str]) -> np.ndarray:
        """(n,) positive BM25 sum of ``terms`` per snapshot row (as ``KeywordIndex.ranking`` sums them)."""
        out = np.zeros(len(self.chunk_ids))
        rows = np.full(int(self.chunk_ids.max()) + 1, -1, dtype=np.int64)
        rows[self.chunk_ids] = np.arange(len(self.chunk_ids))
        for t in terms:
            ids, scores = self.service.keyword.term_matches(t)
            inside = ids < len(rows)
            at = rows[ids[inside]]
            ok = at >= 0
            np.add.at(out, at[ok], -scores[inside][ok])
        return out

    def dense_scores(self, qvec: np.ndarray) -> np.ndarray:
        cos, sentence = self.snap.dense.exact_scores(qvec)
        return np.maximum(cos, self.service.sentence_weight * sentence)

    # ------------------------------------------------------------------ ranking again
    def legs(
        self,
        ev: QuestionEvidence,
        depth_bm25: int,
        depth_dense: int,
        dense: np.ndarray | None = None,
        depth_title: int = 0,
    ) -> dict[str, list[int]]:
        """The ranked lists as snapshot rows: BM25 top (ties by chunk id) plus the coverage extras, dense top, and
        with ``depth_title`` the best dense chunk of each of the notes whose titles are nearest the question."""
        key = ("legs", depth_bm25, depth_dense, id(dense), depth_title)
        if key in ev.cache and dense is None:
            return ev.cache[key]
        d = ev.dense if dense is None else dense
        held = np.flatnonzero(ev.bm25 > 0)
        kw = held[np.lexsort((self.chunk_ids[held], -ev.bm25[held]))][:depth_bm25].tolist()
        kw += [self.row_of[c] for c in ev.extra if c in self.row_of and self.row_of[c] not in set(kw)]
        top = np.argpartition(-d, depth_dense)[:depth_dense] if depth_dense < len(d) else np.arange(len(d))
        dn = top[np.lexsort((self.chunk_ids[top], -d[top].astype(np.float64)))].tolist()
        out = {"bm25": kw, "dense": dn}
        if depth_title:
            out["title"] = self._title_list(ev, d, depth_title)
        if dense is None:
            ev.cache[key] = out
        return out

    def _title_list(self, ev: QuestionEvidence, dense: np.ndarray, depth: int) -> list[int]:
        order = np.lexsort((-dense.astype(np.float64), -ev.title.astype(np.float64)))
        out: list[int] = []
        seen: set[int] = set()
        for c in order:
            n = int(self.note[c])
            if n not in seen:
                seen.add(n)
                out.append(int(c))
                if len(out) >= depth:
                    break
        return out

    def rank(
        self,
        ev: QuestionEvidence,
        fuse: Fuse,
        *,
        depth_bm25: int = 60,
        depth_dense: int = 60,
        second: float = 0.0,
        dense: np.ndarray | None = None,
        below_last: bool = True,
        depth_title: int = 0,
        limit: int = 10,
    ) -> list[str]:
        """The top ``limit`` notes under ``fuse`` (``SearchService._fuse`` then ``_order``, one chunk per note).
        ``second``: each chunk's fused score gains ``second`` × the fused score of its note's second best chunk.
        ``dense``: other dense scores (n,) than the question's (feedback). ``below_last``: lexical evidence below
        the floor after the chunks that pass it (the service), else among them by fused score."""
        legs = self.legs(ev, depth_bm25, depth_dense, dense, depth_title)
        cands = list(dict.fromkeys(c for lst in legs.values() for c in lst))
        floor = self.service.floor
        passing = {c for c in cands if ev.floor[c] >= floor}
        fused = fuse(ev, {n: [c for c in lst if c in passing] for n, lst in legs.items()}, passing)
        below: set[int] = set()
        cov = ev.coverage
        if cov is not None:
            others = [c for c in cands if c not in passing]
            held = cov.lexical_among([int(self.chunk_ids[c]) for c in others])
            below = {c for c in others if int(self.chunk_ids[c]) in held}
            kept = passing | below
            wider = fuse(ev, {n: [c for c in lst if c in kept] for n, lst in legs.items()}, kept)
            fused.update({c: wider[c] for c in below if c in wider})
        boost = self.service.classifier.BOOST
        for c in fused:
            if ev.preference is not None and self.kind[c] == ev.preference:
                fused[c] *= boost
        if second:
            fused = self._with_second(fused, second)
        cosine = ev.cosine

        def key(c: int) -> tuple:
            tier = tuple(-x for x in cov.rank_key(int(self.note[c]))) if cov is not None else ()
            return (tier, below_last and c in below, -fused[c], -float(cosine[c]), int(self.chunk_ids[c]))

        out: list[str] = []
        for c in sorted(fused, key=key):
            p = str(self.path[c])
            if p not in out:
                out.append(p)
                if len(out) >= limit:
                    break
        return out

    def _with_second(self, fused: dict[int, float], weight: float) -> dict[int, float]:
        by_note: dict[int, list[float]] = {}
        for c, s in fused.items():
            by_note.setdefault(int(self.note[c]), []).append(s)
        bonus = {n: sorted(v, reverse=True)[1] if len(v) > 1 else 0.0 for n, v in by_note.items()}
        return {c: s + weight * bonus[int(self.note[c])] for c, s in fused.items()}

    def check(self, fuse: Fuse) -> list[str]:
        """Ids of the questions whose replayed ranking differs from the service's (none expected for its RRF)."""
        return [ev.question["id"] for ev in self.items if self.rank(ev, fuse) != ev.ranked]


def open_vault(vault: str, vaults: Path, data_dir: Path, embedder: Embedder) -> Cairn:
    """An up-to-date Cairn on ``vaults/vault`` with its index in ``data_dir``, in-memory BM25 built."""
    config = load_config({"vault": str(vaults / vault), "data_dir": str(data_dir)}, env={})
    cairn = Cairn(config, embedder=embedder)
    cairn.indexing.index()
    thread = cairn.query.start_keyword_index()
    if thread is not None:
        thread.join()
    return cairn

"""Dense scores of a question against every chunk: an int8 first pass that bounds each cosine, then exact float32
cosines for the chunks that can rank — the same top chunks as scoring every vector in float32.

Why: the dense leg compares a question with every chunk vector and every distinct sentence vector; in float32 that
is a matrix-vector product bound by memory bandwidth. Here each stored vector ``v`` is also held as int8 with a
per-row scale (a quarter of the bytes), the question ``q`` is written as two 7-bit integer vectors
(``q ≈ s1·q1 + s2·q2``), and onnxruntime's integer kernels give the exact integer products
(:class:`cairn.embedder.Int8Dot`). From them each cosine is known within a proven bound (Cauchy-Schwarz):

    |q·v − q̂·v̂| ≤ ‖q̂‖·‖v − v̂‖ + ‖q − q̂‖·‖v‖       (v̂: v's int8 copy, q̂ = s1·q1 + s2·q2)

plus :data:`SLACK` for float rounding. A chunk's dense score is ``max(cos(chunk), w · best cos(sentence))``
(:mod:`cairn.search.service`), so it has a lower and an upper bound too. The top ``k`` by exact score are then found
exactly: with ``τ`` the ``k``-th largest lower bound, every chunk whose exact score could reach the ``k``-th is one
whose upper bound is ≥ ``τ``; only those (a small fraction of the chunks) are scored exactly in float32. Any chunk's
exact cosines are available on request (:meth:`DenseQuery.exact`), so everything downstream (fusion, the floor)
sees exact values. Only the int8 copies are scanned, so only they are held in memory: the float32 rows of those few
chunks and their sentences are read when needed (:mod:`cairn.search.float_rows`).

Exact values are computed row by row (``np.einsum``), so a chunk's cosine does not depend on which other chunks
were scored with it (a BLAS product's rounding can depend on the matrix shape). The ranking is therefore a
function of the question and the index alone. Ties are broken by chunk id.

When the int8 graph is unavailable or not exact on this machine (:class:`~cairn.errors.ModelError` from
:class:`Int8Dot`), every cosine is computed in float32 at once and the bounds are the values themselves: same
results, at the float32 cost (every float32 row in memory).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from cairn.embedder import INT8_QUERY_LIMIT, Int8Dot
from cairn.errors import ModelError
from cairn.search.float_rows import HeldRows, RowSource

log = logging.getLogger(__name__)

#: Added to every bound: float32 rounding of an exact 384-term cosine (≤ 384 · 2⁻²⁴ ≈ 2.3e-5 for L2-normalised
#: vectors) and float64 rounding of the bounds, with room to spare; the bounds are stored as float32 (2⁻²⁴ relative)
#: too.
SLACK = 1e-4
#: Rows quantised at a time when a snapshot is made (float64 temporaries of 1,024 × 384 × 8 bytes = 3 MB each).
_BLOCK = 1024
#: Bytes of a numpy array object beyond its data, and of a :class:`DenseQuery` beyond its arrays (the object, its
#: attribute dict and scalars; CPython 3.11, measured with tracemalloc).
_ARRAY_BYTES = 112
_OBJECT_BYTES = 1024


def quantize_rows(*mats: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """int8 copies of the rows of ``mats`` (each (r, 384) float32) one after the other, n rows in all: (values
    (n, 384) int8 in -127..127, scale (n,) float64 with row ≈ scale · values, residual norm ‖row − scale · values‖
    (n,) float64, row norm (n,) float64). Several matrices are quantised without concatenating them."""
    n = sum(len(m) for m in mats)
    values = np.empty((n, mats[0].shape[1] if mats else 0), dtype=np.int8)
    scale, resid, norm = np.empty(n), np.empty(n), np.empty(n)
    at = 0
    for mat in mats:
        for start in range(0, len(mat), _BLOCK):
            block = mat[start : start + _BLOCK].astype(np.float64)
            end = at + len(block)
            amax = np.abs(block).max(axis=1)
            s = np.where(amax > 0, amax / 127.0, 1.0)
            v = np.rint(block / s[:, None])
            values[at:end] = v
            scale[at:end] = s
            resid[at:end] = np.linalg.norm(block - s[:, None] * v, axis=1)
            norm[at:end] = np.linalg.norm(block, axis=1)
            at = end
    return values, scale, resid, norm


def quantize_query(qvec: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
    """``qvec`` (384,) as two integer vectors in -63..63: (q (2, 384) int32, steps (2,) float64, ‖q̂‖, ‖q − q̂‖)
    with q̂ = steps[0]·q[0] + steps[1]·q[1] (the second vector holds the first one's rounding error)."""
    q = np.asarray(qvec, dtype=np.float64)
    steps = np.ones(2)
    ints = np.zeros((2, len(q)), dtype=np.int32)
    rest = q
    for i in range(2):
        amax = float(np.abs(rest).max()) if len(rest) else 0.0
        if amax > 0:
            steps[i] = amax / INT8_QUERY_LIMIT
            ints[i] = np.rint(rest / steps[i])
            rest = rest - steps[i] * ints[i]
    approx = steps[0] * ints[0] + steps[1] * ints[1]
    return ints, steps, float(np.linalg.norm(approx)), float(np.linalg.norm(q - approx))


def _exact(source: RowSource, rows: np.ndarray, qvec: np.ndarray) -> np.ndarray:
    """(k,) float32 cosines of ``source``'s rows ``rows`` with ``qvec``, row by row (independent of which rows come
    along)."""
    if not len(rows):
        return np.zeros(0, dtype=np.float32)
    return np.einsum("ij,j->i", source.read(rows), qvec)


def _source(rows: RowSource | np.ndarray) -> RowSource:
    """``rows`` as a :class:`~cairn.search.float_rows.RowSource` (a matrix: held in memory)."""
    return HeldRows(rows) if isinstance(rows, np.ndarray) else rows


def _reuse_quantized(
    old: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    src: np.ndarray,
    chunks: RowSource,
    sentences: RowSource,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`quantize_rows` of ``[chunks; sentences]``: row ``i`` copied from ``old``'s row ``src[i]``, quantised now
    where ``src[i]`` is -1."""
    fresh = np.flatnonzero(src < 0)
    kept = np.flatnonzero(src >= 0)
    n = len(chunks)
    fresh_chunks, fresh_sentences = fresh[fresh < n], fresh[fresh >= n] - n
    values = np.empty((len(src), old[0].shape[1]), dtype=np.int8)
    scale, resid, norm = np.empty(len(src)), np.empty(len(src)), np.empty(len(src))
    targets: tuple[np.ndarray, ...] = (values, scale, resid, norm)
    for target, source in zip(targets, old):
        target[kept] = source[src[kept]]
    if len(fresh):
        for target, source in zip(targets, quantize_rows(chunks.read(fresh_chunks), sentences.read(fresh_sentences))):
            target[fresh] = source
    return values, scale, resid, norm


class DenseIndex:
    """One snapshot's vectors for dense scoring: chunk vectors (n, 384) float32, distinct sentence vectors (d, 384)
    float32 (:class:`~cairn.search.float_rows.RowSource`, e.g. rows in a file; a matrix is held in memory), and
    each chunk row's run ``[sentence_start, sentence_end)`` in ``sentence_order`` (rows of ``sentences``; an empty
    run: no sentences). Made when the search service loads a snapshot; the int8 rows with their scales and norms are
    kept in memory, so that a reload quantises only new rows (:meth:`derived`), and the float32 rows are read only
    for the chunks that can rank. ``dot_factory`` makes the integer kernel (tests pass a failing one to get the
    float32 path, which holds every float32 row in memory); ``quantized`` is :func:`quantize_rows` of ``chunks,
    sentences`` when already known."""

    def __init__(
        self,
        chunks: RowSource | np.ndarray,
        sentences: RowSource | np.ndarray,
        sentence_order: np.ndarray,
        sentence_start: np.ndarray,
        sentence_end: np.ndarray,
        *,
        dot_factory: Callable[[np.ndarray], Int8Dot] | None = Int8Dot,
        quantized: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.chunks, self.sentences = _source(chunks), _source(sentences)
        self.sentence_order, self.sentence_start, self.sentence_end = sentence_order, sentence_start, sentence_end
        self.n, self.d = len(chunks), len(sentences)
        has = sentence_end > sentence_start
        self._has_sentences = has
        # For the per-chunk maximum over its sentences: positions in sentence_order of the chunks that have sentences.
        self._runs = sentence_start[has]
        self._dot: Int8Dot | None = None
        #: What makes the integer kernel; None once it failed (later snapshots are float32 only, without retrying).
        self._dot_factory = dot_factory
        #: quantize_rows of [chunks; sentences] (None without chunks or kernel), kept for :meth:`derived`.
        self._quantized: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        if not self.n or dot_factory is None:
            self._hold_floats()
            return
        if quantized is None:
            quantized = quantize_rows(self.chunks.matrix(), self.sentences.matrix())
        values, scale, resid, norm = quantized
        try:
            self._dot = dot_factory(values)
        except ModelError as exc:
            log.warning("dense scores in float32 only: %s", exc)
            self._dot_factory = None
            self._hold_floats()
            return
        # The int8 values are kept once, as the kernel's own matrix (a view), not a second copy.
        held = getattr(self._dot, "rows", None)
        self._quantized = (held if held is not None else values, scale, resid, norm)
        # float32 from here: every product below is within 2^-24 relatively of its float64 value (int32 sums
        # up to 384 · 127 · 63 < 2^24 are exact in float32), far inside SLACK.
        self._scale = scale.astype(np.float32)
        self._resid, self._norm = resid[: self.n].astype(np.float32), norm[: self.n].astype(np.float32)
        if self.d:
            # A chunk's sentences' worst residual and largest norm: max over sentences of (a_u ± b_u) lies within
            # max a_u ± max b_u, and b_u grows with both, so one maximum per query bounds the best sentence cosine.
            self._sentence_resid = self._sentence_best(resid[self.n :]).astype(np.float32)
            self._sentence_norm = self._sentence_best(norm[self.n :]).astype(np.float32)

    def _hold_floats(self) -> None:
        """The float32-only path scores every row for every question: the rows held in memory."""
        if not isinstance(self.chunks, HeldRows):
            self.chunks = HeldRows(self.chunks.matrix())
        if not isinstance(self.sentences, HeldRows):
            self.sentences = HeldRows(self.sentences.matrix())

    def derived(
        self,
        chunks: RowSource,
        sentences: RowSource,
        sentence_order: np.ndarray,
        sentence_start: np.ndarray,
        sentence_end: np.ndarray,
        chunk_from: np.ndarray,
        sentence_from: np.ndarray,
    ) -> DenseIndex:
        """A DenseIndex for new matrices (same arguments as the constructor) whose rows are partly this one's:
        ``chunk_from`` (n',) int64 gives each new chunk row's row in this index, ``sentence_from`` (d',) int64 each
        new sentence row's row in this index's ``sentences``; -1 marks a row not held here, the only ones quantised
        now. The int8 values, scales, residual and row norms of the others are copied, so the result equals
        ``DenseIndex(chunks, sentences, ...)`` (quantisation is row by row) without its cost; the integer kernel is
        made anew. The caller vouches that a row taken from here holds the same vector in the new matrices. Raises
        ValueError when the shapes disagree."""
        chunk_from = np.asarray(chunk_from, dtype=np.int64)
        sentence_from = np.asarray(sentence_from, dtype=np.int64)
        if len(chunk_from) != len(chunks) or len(sentence_from) != len(sentences):
            raise ValueError(
                f"derived() needs one source row per row: {len(chunk_from)} for {len(chunks)} chunks, "
                f"{len(sentence_from)} for {len(sentences)} sentences"
            )
        old = self._quantized
        if old is None or not len(chunks):  # float32 only, or nothing held: nothing to reuse
            return DenseIndex(
                chunks, sentences, sentence_order, sentence_start, sentence_end, dot_factory=self._dot_factory
            )
        if (
            len(sentence_from)
            and int(sentence_from.max(initial=-1)) >= self.d
            or int(chunk_from.max(initial=-1)) >= self.n
        ):
            raise ValueError("derived(): a source row beyond this index's rows")
        src = np.concatenate([chunk_from, np.where(sentence_from >= 0, sentence_from + self.n, -1)])
        values, scale, resid, norm = _reuse_quantized(old, src, chunks, sentences)
        return DenseIndex(
            chunks,
            sentences,
            sentence_order,
            sentence_start,
            sentence_end,
            dot_factory=self._dot_factory,
            quantized=(values, scale, resid, norm),
        )

    @property
    def quantized(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """:func:`quantize_rows` of ``[chunks; sentences]`` as held (the int8 values a view of the kernel's matrix),
        or None on the float32-only path."""
        return self._quantized

    def nbytes(self) -> tuple[int, int]:
        """(bytes of the float32 vectors and their row maps, bytes of the int8 copies: values, scales, bounds and the
        integer kernel's matrices)."""
        floats = self.chunks.nbytes + self.sentences.nbytes
        floats += sum(a.nbytes for a in (self.sentence_order, self.sentence_start, self.sentence_end))
        floats += self._has_sentences.nbytes + self._runs.nbytes
        ints = 0
        if self._quantized is not None:
            values = self._quantized[0]
            ints += sum(a.nbytes for a in self._quantized[1:]) + (values.nbytes if values.base is None else 0)
            ints += sum(a.nbytes for a in (self._scale, self._resid, self._norm))
            ints += sum(getattr(self, a).nbytes for a in ("_sentence_resid", "_sentence_norm") if hasattr(self, a))
        if self._dot is not None:
            ints += self._dot.nbytes
        return floats, ints

    @property
    def exact_only(self) -> bool:
        """True when every query scores all vectors in float32 (no int8 kernel)."""
        return self._dot is None

    def query(self, qvec: np.ndarray) -> DenseQuery:
        """Bounds on every chunk's cosines to ``qvec`` (384,) float32 L2-normalised (float32 only: the exact
        values)."""
        return DenseQuery(self, np.asarray(qvec, dtype=np.float32))

    def exact_scores(self, qvec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk's exact (cosine to ``qvec``, best cosine among its sentences or -1), both (n,) float32, row by
        row (as :meth:`DenseQuery.exact`: a BLAS product's last bit can depend on a row's position). The float32-only
        path, and the reference the int8 path is tested against."""
        cos = np.einsum("ij,j->i", self.chunks.matrix(), qvec) if self.n else np.zeros(0, np.float32)
        sentence = (
            self._sentence_best(np.einsum("ij,j->i", self.sentences.matrix(), qvec))
            if self.d
            else np.full(self.n, -1.0, np.float32)
        )
        return cos, sentence

    def _sentence_best(self, per_sentence: np.ndarray) -> np.ndarray:
        """(n,) the maximum of ``per_sentence`` (d,) over each chunk's sentences; -1 for a chunk without sentences."""
        best = np.full(self.n, -1.0, dtype=per_sentence.dtype)
        if len(self._runs):
            best[self._has_sentences] = np.maximum.reduceat(per_sentence[self.sentence_order], self._runs)
        return best


class DenseQuery:
    """One question's dense scores against a :class:`DenseIndex` (module docstring). Thread-safe for reads; the
    exact values found are kept (a question's later calls reuse them)."""

    def __init__(self, index: DenseIndex, qvec: np.ndarray) -> None:
        self.index, self.qvec = index, qvec
        #: q̂ · v̂ of every sentence row (d,), for :meth:`_may_be_best` (None on the float32 path or without any).
        self._sentence_approx: np.ndarray | None = None
        n = index.n
        if index._dot is None or not n:
            # Row by row as the exact values of the int8 path: both paths give the same cosines and ranking.
            cos, sentence = index.exact_scores(qvec)
            self.cos_lo = self.cos_hi = cos
            self.sentence_lo = self.sentence_hi = sentence
            self._exact_all: tuple[np.ndarray, np.ndarray] | None = (cos, sentence)
            self._found = self._exact_all
            return
        self._exact_all = None
        #: The exact (cosine, best sentence cosine) of each chunk row found so far, NaN until found: (n,) float32
        #: each, made here so that what a question holds does not grow after it is cached.
        self._found = (np.full(n, np.nan, dtype=np.float32), np.full(n, np.nan, dtype=np.float32))
        ints, steps, qhat_norm, err_norm = quantize_query(qvec)
        y = index._dot.dot(ints).astype(np.float32)  # (2, n + d): exact integers
        approx = y[0]
        approx *= np.float32(steps[0])
        approx += np.float32(steps[1]) * y[1]
        approx *= index._scale  # q̂ · v̂ for every row
        qn, en, slack = np.float32(qhat_norm), np.float32(err_norm), np.float32(SLACK)
        self._qn, self._en = qn, en
        bound = qn * index._resid + en * index._norm + slack
        self.cos_lo, self.cos_hi = approx[:n] - bound, approx[:n] + bound
        if index.d:
            self._sentence_approx = approx[n:].copy()
            best = index._sentence_best(self._sentence_approx)
            sentence_bound = qn * index._sentence_resid + en * index._sentence_norm + slack
            none = ~index._has_sentences
            self.sentence_lo, self.sentence_hi = best - sentence_bound, best + sentence_bound
            self.sentence_lo[none] = self.sentence_hi[none] = -1.0
        else:
            self.sentence_lo = self.sentence_hi = np.full(n, -1.0, np.float32)

    @property
    def nbytes(self) -> int:
        """Bytes this question's scores hold: its vector, bounds and exact cosines (not its index's). Fixed when it
        is made: the exact cosines found later fill arrays made then."""
        held = (self.qvec, self.cos_lo, self.cos_hi, self.sentence_lo, self.sentence_hi, self._sentence_approx)
        arrays = {id(a): a for a in (*held, *self._found) if a is not None}
        return sum(a.nbytes + _ARRAY_BYTES for a in arrays.values()) + _OBJECT_BYTES

    def exact(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact (cosine of the chunk vector, best cosine among its sentences or -1), each (k,) float32, for chunk rows
        ``rows`` (k,) int64."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._exact_all is not None:
            return self._exact_all[0][rows], self._exact_all[1][rows]
        found_cos, found_sentence = self._found
        # Both checked: another thread may be filling the same rows (with the same values) meanwhile.
        todo = np.unique(rows[np.isnan(found_cos[rows]) | np.isnan(found_sentence[rows])])
        if len(todo):
            ix = self.index
            cos = _exact(ix.chunks, todo, self.qvec)
            starts, ends = ix.sentence_start[todo], ix.sentence_end[todo]
            lengths = ends - starts
            best = np.full(len(todo), -1.0, dtype=np.float32)
            with_sentences = lengths > 0
            if with_sentences.any():
                offsets = np.cumsum(lengths[with_sentences]) - lengths[with_sentences]
                positions = np.repeat(starts[with_sentences] - offsets, lengths[with_sentences]) + np.arange(
                    lengths.sum()
                )
                sentence_rows = ix.sentence_order[positions]
                keep = self._may_be_best(todo[with_sentences], sentence_rows, offsets, lengths[with_sentences])
                values = _exact(ix.sentences, sentence_rows[keep], self.qvec)
                kept = np.add.reduceat(keep.astype(np.int64), offsets)  # at least one per chunk
                best[with_sentences] = np.maximum.reduceat(values, np.cumsum(kept) - kept)
            found_sentence[todo] = best
            found_cos[todo] = cos
        return found_cos[rows], found_sentence[rows]

    def _may_be_best(
        self, chunk_rows: np.ndarray, sentence_rows: np.ndarray, offsets: np.ndarray, lengths: np.ndarray
    ) -> np.ndarray:
        """(s,) bool: which of the sentence rows ``sentence_rows`` (s,) — the sentences of chunk rows ``chunk_rows``
        (c,), chunk ``i``'s at ``offsets[i]`` for ``lengths[i]`` — can be their chunk's best: upper bound ≥ the
        largest lower bound among the chunk's sentences. The best one always is (its exact cosine lies between),
        so the maximum over the kept ones is the maximum over all, to the bit; only they are read and scored."""
        if self._sentence_approx is None:
            return np.ones(len(sentence_rows), dtype=bool)
        ix = self.index
        approx = self._sentence_approx[sentence_rows]
        # The chunk's bound, as for sentence_lo/hi: its sentences' worst residual and largest norm.
        bound = self._qn * ix._sentence_resid[chunk_rows] + self._en * ix._sentence_norm[chunk_rows]
        bound = np.repeat(bound + np.float32(SLACK), lengths)
        floor = np.repeat(np.maximum.reduceat(approx - bound, offsets), lengths)
        return approx + bound >= floor

    def top(self, k: int, weight: float, chunk_ids: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
        """Rows of the ``k`` best chunks by ``max(cos, weight · best sentence cos)`` (``weight`` > 0), exact, best
        first, ties by chunk id (``chunk_ids`` (n,) int64 by row); ``allowed`` (n,) bool limits the rows considered.
        Rows with an exact score of -inf never appear (none have: cosines are finite)."""
        w = np.float32(weight)
        lo = np.maximum(self.cos_lo, w * self.sentence_lo)
        if allowed is not None:
            lo[~allowed] = -np.inf
        n_allowed = self.index.n if allowed is None else int(np.count_nonzero(allowed))
        k = min(k, n_allowed)
        if k <= 0:
            return np.zeros(0, dtype=np.int64)
        if self._exact_all is not None:
            candidates = np.flatnonzero(lo > -np.inf) if allowed is not None else np.arange(self.index.n)
            scores = lo[candidates]
        else:
            hi = np.maximum(self.cos_hi, w * self.sentence_hi)
            tau = np.partition(lo, len(lo) - k)[len(lo) - k]  # the k-th largest lower bound (finite: k ≤ allowed)
            candidates = np.flatnonzero(hi >= tau) if allowed is None else np.flatnonzero((hi >= tau) & allowed)
            cos, sentence = self.exact(candidates)
            scores = np.maximum(cos, w * sentence)
        order = np.lexsort((chunk_ids[candidates], -scores.astype(np.float64)))[:k]
        return candidates[order]

"""Dense scores of a question against every chunk: an int8 first pass that bounds each cosine, then exact float32
cosines for the chunks that can rank — the same top chunks as scoring every vector in float32.

Why: the dense leg compares a question with every chunk vector and every distinct sentence (unit) vector
(obsidian-hub: 19.6k + 25.9k = 45.5k × 384 float32, 70 MB). In float32 that is a matrix-vector product bound by
memory bandwidth, 4.2-6.8 ms a question and the largest part of a new question's CPU after embedding it. Here each
stored vector ``v`` is also held as int8 with a per-row scale (a quarter of the bytes), the question ``q`` is
written as two 7-bit integer vectors (``q ≈ s1·q1 + s2·q2``), and onnxruntime's integer kernels give the exact
integer products (:class:`cairn.embedder.Int8Dot`, 1.2-1.5 ms). From them each cosine is known within a proven
bound (Cauchy-Schwarz):

    |q·v − q̂·v̂| ≤ ‖q̂‖·‖v − v̂‖ + ‖q − q̂‖·‖v‖       (v̂: v's int8 copy, q̂ = s1·q1 + s2·q2)

plus :data:`SLACK` for float rounding. A chunk's dense score is ``max(cos(chunk), w · best cos(unit))``
(cairn.query), so it has a lower and an upper bound too. The top ``k`` by exact score are then found exactly: with
``τ`` the ``k``-th largest lower bound, every chunk whose exact score could reach the ``k``-th is one whose upper
bound is ≥ ``τ``; only those (obsidian-hub, bench_http's 30 questions: 86 at the median, at most 151 of 19.6k)
are scored exactly in float32. Any chunk's exact cosines are available on request (:meth:`DenseQuery.exact`), so
everything downstream (fusion, the floor) sees exact values.

Exact values are computed row by row (``np.einsum``), so a chunk's cosine does not depend on which other chunks
were scored with it (a BLAS product's rounding can depend on the matrix shape). The ranking is therefore a
function of the question and the index alone. Ties are broken by chunk id.

When the int8 graph is unavailable or not exact on this machine (:class:`~cairn.errors.ModelError` from
:class:`Int8Dot`), every cosine is computed in float32 at once and the bounds are the values themselves: same
results, the old cost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from cairn.embedder import INT8_QUERY_LIMIT, Int8Dot
from cairn.errors import ModelError

log = logging.getLogger(__name__)

#: Added to every bound: float32 rounding of an exact 384-term cosine (≤ 384 · 2⁻²⁴ ≈ 2.3e-5 for unit vectors) and
#: float64 rounding of the bounds, with room to spare; the bounds are stored as float32 (2⁻²⁴ relative) too.
SLACK = 1e-4
#: Rows quantised at a time when a snapshot is made (float64 temporaries: 4,096 × 384 × 8 = 12.6 MB).
_BLOCK = 4096


def quantize_rows(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """int8 copies of ``mat``'s rows, (n, 384) float32: (values (n, 384) int8 in -127..127, scale (n,) float64 with
    row ≈ scale · values, residual norm ‖row − scale · values‖ (n,) float64, row norm (n,) float64)."""
    n = len(mat)
    values = np.empty(mat.shape, dtype=np.int8)
    scale, resid, norm = np.empty(n), np.empty(n), np.empty(n)
    for start in range(0, n, _BLOCK):
        block = mat[start : start + _BLOCK].astype(np.float64)
        amax = np.abs(block).max(axis=1)
        s = np.where(amax > 0, amax / 127.0, 1.0)
        v = np.rint(block / s[:, None])
        values[start : start + _BLOCK] = v
        scale[start : start + _BLOCK] = s
        resid[start : start + _BLOCK] = np.linalg.norm(block - s[:, None] * v, axis=1)
        norm[start : start + _BLOCK] = np.linalg.norm(block, axis=1)
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


def _exact(mat: np.ndarray, rows: np.ndarray, qvec: np.ndarray) -> np.ndarray:
    """(k,) float32 cosines of ``mat[rows]`` with ``qvec``, row by row (independent of which rows come along)."""
    if not len(rows):
        return np.zeros(0, dtype=np.float32)
    return np.einsum("ij,j->i", mat[rows], qvec)


class DenseIndex:
    """One snapshot's vectors for dense scoring: chunk vectors (n, 384) float32, distinct unit vectors (d, 384)
    float32, and each chunk row's run ``[unit_start, unit_end)`` in ``unit_order`` (rows of ``units``; an empty run:
    no units). Made when the query service loads a snapshot (obsidian-hub: ~0.3 s, +17.5 MB int8 for the kernel,
    +~18 MB packed by onnxruntime, and the int8 rows with their scales and norms kept, +18 MB, so that a reload
    quantises only new rows: :meth:`derived`). ``dot_factory`` makes the integer kernel (tests pass a failing one to
    get the float32 path); ``quantized`` is :func:`quantize_rows` of ``[chunks; units]`` when already known."""

    def __init__(
        self,
        chunks: np.ndarray,
        units: np.ndarray,
        unit_order: np.ndarray,
        unit_start: np.ndarray,
        unit_end: np.ndarray,
        *,
        dot_factory: Callable[[np.ndarray], Int8Dot] | None = Int8Dot,
        quantized: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.chunks, self.units = chunks, units
        self.unit_order, self.unit_start, self.unit_end = unit_order, unit_start, unit_end
        self.n, self.d = len(chunks), len(units)
        has = unit_end > unit_start
        self._has_units = has
        # For the per-chunk maximum over its units: positions in unit_order of the chunks that have units.
        self._runs = unit_start[has]
        self._dot: Int8Dot | None = None
        #: What makes the integer kernel; None once it failed (later snapshots are float32 only, without retrying).
        self._dot_factory = dot_factory
        #: quantize_rows of [chunks; units] (None without chunks or kernel), kept for :meth:`derived`.
        self._quantized: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        if not self.n or dot_factory is None:
            return
        if quantized is None:
            quantized = quantize_rows(np.concatenate([chunks, units]) if self.d else chunks)
        values, scale, resid, norm = quantized
        try:
            self._dot = dot_factory(values)
        except ModelError as exc:
            log.warning("dense scores in float32 only: %s", exc)
            self._dot_factory = None
            return
        self._quantized = quantized
        # float32 from here: every product below is within 2^-24 relatively of its float64 value (int32 sums
        # up to 384 · 127 · 63 < 2^24 are exact in float32), far inside SLACK.
        self._scale = scale.astype(np.float32)
        self._resid, self._norm = resid[: self.n].astype(np.float32), norm[: self.n].astype(np.float32)
        if self.d:
            # A chunk's units' worst residual and largest norm: max over units of (a_u ± b_u) lies within
            # max a_u ± max b_u, and b_u grows with both, so one maximum per query bounds the best unit cosine.
            self._unit_resid = self._unit_best(resid[self.n :]).astype(np.float32)
            self._unit_norm = self._unit_best(norm[self.n :]).astype(np.float32)

    def derived(
        self,
        chunks: np.ndarray,
        units: np.ndarray,
        unit_order: np.ndarray,
        unit_start: np.ndarray,
        unit_end: np.ndarray,
        chunk_from: np.ndarray,
        unit_from: np.ndarray,
    ) -> DenseIndex:
        """A DenseIndex for new matrices (same arguments as the constructor) whose rows are partly this one's:
        ``chunk_from`` (n',) int64 gives each new chunk row's row in this index, ``unit_from`` (d',) int64 each new
        unit row's row in this index's ``units``; -1 marks a row not held here, the only ones quantised now. The
        int8 values, scales, residual and row norms of the others are copied, so the result equals
        ``DenseIndex(chunks, units, ...)`` (quantisation is row by row) without its cost (obsidian-hub: ~0.26 s for
        45.5k rows); the integer kernel is made anew (~50 ms for 45k rows). The caller vouches that a row taken from
        here holds the same vector in the new matrices. Raises ValueError when the shapes disagree."""
        chunk_from = np.asarray(chunk_from, dtype=np.int64)
        unit_from = np.asarray(unit_from, dtype=np.int64)
        if len(chunk_from) != len(chunks) or len(unit_from) != len(units):
            raise ValueError(
                f"derived() needs one source row per row: {len(chunk_from)} for {len(chunks)} chunks, "
                f"{len(unit_from)} for {len(units)} units"
            )
        old = self._quantized
        if old is None or not len(chunks):  # float32 only, or nothing held: nothing to reuse
            return DenseIndex(chunks, units, unit_order, unit_start, unit_end, dot_factory=self._dot_factory)
        if len(unit_from) and int(unit_from.max(initial=-1)) >= self.d or int(chunk_from.max(initial=-1)) >= self.n:
            raise ValueError("derived(): a source row beyond this index's rows")
        src = np.concatenate([chunk_from, np.where(unit_from >= 0, unit_from + self.n, -1)])
        fresh = np.flatnonzero(src < 0)
        kept = np.flatnonzero(src >= 0)
        n = len(chunks)
        fresh_chunks, fresh_units = fresh[fresh < n], fresh[fresh >= n] - n
        values = np.empty((len(src), chunks.shape[1]), dtype=np.int8)
        scale, resid, norm = np.empty(len(src)), np.empty(len(src)), np.empty(len(src))
        for target, source in zip((values, scale, resid, norm), old):
            target[kept] = source[src[kept]]
        if len(fresh):
            mat = (
                np.concatenate([chunks[fresh_chunks], units[fresh_units]]) if len(fresh_units) else chunks[fresh_chunks]
            )
            for target, source in zip((values, scale, resid, norm), quantize_rows(mat)):
                target[fresh] = source
        return DenseIndex(
            chunks,
            units,
            unit_order,
            unit_start,
            unit_end,
            dot_factory=self._dot_factory,
            quantized=(values, scale, resid, norm),
        )

    @property
    def exact_only(self) -> bool:
        """True when every query scores all vectors in float32 (no int8 kernel)."""
        return self._dot is None

    def query(self, qvec: np.ndarray) -> DenseQuery:
        """Bounds on every chunk's cosines to ``qvec`` (384,) float32 L2-normalised: ~1.9 ms on obsidian-hub, then
        ~0.5 ms for :meth:`top` (float32 only: the exact values, 4-7 ms)."""
        return DenseQuery(self, np.asarray(qvec, dtype=np.float32))

    def exact_scores(self, qvec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk's exact (cosine to ``qvec``, best cosine among its units or -1), both (n,) float32, row by row
        (as :meth:`DenseQuery.exact`: a BLAS product's last bit can depend on a row's position): 4-7 ms on
        obsidian-hub. The float32-only path, and the reference the int8 path is tested against."""
        cos = np.einsum("ij,j->i", self.chunks, qvec) if self.n else np.zeros(0, np.float32)
        unit = self._unit_best(np.einsum("ij,j->i", self.units, qvec)) if self.d else np.full(self.n, -1.0, np.float32)
        return cos, unit

    def _unit_best(self, per_unit: np.ndarray) -> np.ndarray:
        """(n,) the maximum of ``per_unit`` (d,) over each chunk's units; -1 for a chunk without units."""
        best = np.full(self.n, -1.0, dtype=per_unit.dtype)
        if len(self._runs):
            best[self._has_units] = np.maximum.reduceat(per_unit[self.unit_order], self._runs)
        return best


class DenseQuery:
    """One question's dense scores against a :class:`DenseIndex` (module docstring). Thread-safe for reads; the
    exact values found are kept (a question's later calls reuse them)."""

    def __init__(self, index: DenseIndex, qvec: np.ndarray) -> None:
        self.index, self.qvec = index, qvec
        self._cos: dict[int, float] = {}
        self._unit: dict[int, float] = {}
        n = index.n
        if index._dot is None or not n:
            # Row by row as the exact values of the int8 path: both paths give the same cosines and ranking.
            cos, unit = index.exact_scores(qvec)
            self.cos_lo = self.cos_hi = cos
            self.unit_lo = self.unit_hi = unit
            self._exact_all = (cos, unit)
            return
        self._exact_all = None
        ints, steps, qhat_norm, err_norm = quantize_query(qvec)
        y = index._dot.dot(ints).astype(np.float32)  # (2, n + d): exact integers
        approx = y[0]
        approx *= np.float32(steps[0])
        approx += np.float32(steps[1]) * y[1]
        approx *= index._scale  # q̂ · v̂ for every row
        qn, en, slack = np.float32(qhat_norm), np.float32(err_norm), np.float32(SLACK)
        bound = qn * index._resid + en * index._norm + slack
        self.cos_lo, self.cos_hi = approx[:n] - bound, approx[:n] + bound
        if index.d:
            best = index._unit_best(approx[n:])
            unit_bound = qn * index._unit_resid + en * index._unit_norm + slack
            none = ~index._has_units
            self.unit_lo, self.unit_hi = best - unit_bound, best + unit_bound
            self.unit_lo[none] = self.unit_hi[none] = -1.0
        else:
            self.unit_lo = self.unit_hi = np.full(n, -1.0, np.float32)

    def exact(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact (cosine of the chunk vector, best cosine among its units or -1), each (k,) float32, for chunk rows
        ``rows`` (k,) int64."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._exact_all is not None:
            return self._exact_all[0][rows], self._exact_all[1][rows]
        todo = np.asarray([r for r in dict.fromkeys(rows.tolist()) if r not in self._cos], dtype=np.int64)
        if len(todo):
            ix = self.index
            cos = _exact(ix.chunks, todo, self.qvec)
            starts, ends = ix.unit_start[todo], ix.unit_end[todo]
            lengths = ends - starts
            best = np.full(len(todo), -1.0, dtype=np.float32)
            with_units = lengths > 0
            if with_units.any():
                offsets = np.cumsum(lengths[with_units]) - lengths[with_units]
                positions = np.repeat(starts[with_units] - offsets, lengths[with_units]) + np.arange(lengths.sum())
                values = _exact(ix.units, ix.unit_order[positions], self.qvec)
                best[with_units] = np.maximum.reduceat(values, offsets)
            for r, c, u in zip(todo.tolist(), cos.tolist(), best.tolist()):
                self._cos[r], self._unit[r] = c, u
        return (
            np.asarray([self._cos[r] for r in rows.tolist()], dtype=np.float32),
            np.asarray([self._unit[r] for r in rows.tolist()], dtype=np.float32),
        )

    def top(self, k: int, weight: float, chunk_ids: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
        """Rows of the ``k`` best chunks by ``max(cos, weight · best unit cos)`` (``weight`` > 0), exact, best first,
        ties by chunk id (``chunk_ids`` (n,) int64 by row); ``allowed`` (n,) bool limits the rows considered.
        Rows with an exact score of -inf never appear (none have: cosines are finite)."""
        w = np.float32(weight)
        lo = np.maximum(self.cos_lo, w * self.unit_lo)
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
            hi = np.maximum(self.cos_hi, w * self.unit_hi)
            tau = np.partition(lo, len(lo) - k)[len(lo) - k]  # the k-th largest lower bound (finite: k ≤ allowed)
            candidates = np.flatnonzero(hi >= tau) if allowed is None else np.flatnonzero((hi >= tau) & allowed)
            cos, unit = self.exact(candidates)
            scores = np.maximum(cos, w * unit)
        order = np.lexsort((chunk_ids[candidates], -scores.astype(np.float64)))[:k]
        return candidates[order]

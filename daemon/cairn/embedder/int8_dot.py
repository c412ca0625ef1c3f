"""Exact integer dot products on onnxruntime's int8 kernels (part of :mod:`cairn.embedder`, layer 1): the query
service's dense scores (:class:`Int8Dot`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cairn.embedder.model_files import DIM
from cairn.errors import ModelError

#: The integer dot-product graph (``packaging/build_model.py dot8``): one MatMulInteger node, no weights (519 bytes),
#: shipped inside the package (package data), so every install has it whatever ``CAIRN_MODEL_DIR`` says.
INT8_DOT_MODEL = Path(__file__).resolve().parent.parent / "int8_dot.onnx"
#: Query values are 7-bit (-63..63, sent as uint8 with zero point 64): on AVX2, onnxruntime's u8×s8 kernel adds
#: pairs of products in int16 (``vpmaddubsw``), which saturates for 8-bit queries (127 × 127 × 2 > 32,767) and is
#: exact for 7-bit ones (127 × 63 × 2 = 16,002).
INT8_QUERY_LIMIT = 63
INT8_ZERO = 64


class Int8Dot:
    """Exact integer dot products of 7-bit queries with a fixed int8 matrix, on onnxruntime's int8 kernels.

    ``Int8Dot(rows)`` with ``rows`` (n, 384) int8 (values -127..127) makes one single-threaded session holding the
    matrix (pre-packed by onnxruntime: ~n × 384 bytes); ``dot(q)`` with ``q`` (m, 384) integers in -63..63 returns
    (m, n) int32, ``q @ rows.T`` exactly, several times faster than the float32 matrix-vector product (a quarter of
    the bytes read).
    Thread-safe (onnxruntime's ``run``); releases the GIL.

    Exactness is checked when made: the products of a probe query with up to 4,096 rows are compared with numpy's
    int32 ones. Raises :class:`ModelError` when the graph is missing or fails to load, or the check fails (a kernel
    that saturates): the caller then scores in float32.
    """

    PROBE_ROWS = 4096

    def __init__(self, rows: np.ndarray, model_path: Path | None = None) -> None:
        path = model_path or INT8_DOT_MODEL
        rows = np.ascontiguousarray(rows, dtype=np.int8)
        if rows.ndim != 2 or rows.shape[1] != DIM:
            raise ModelError(f"Int8Dot needs an (n, {DIM}) int8 matrix, got shape {rows.shape}.")
        self.n = len(rows)
        self._matrix_bytes = rows.nbytes
        try:
            import onnxruntime as ort  # noqa: PLC0415

            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1  # requests already run on parallel worker threads
            opts.inter_op_num_threads = 1
            opts.log_severity_level = 3
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self._columns = np.ascontiguousarray(rows.T)  # (384, n): onnxruntime reads it in place (kept alive)
            self._matrix = ort.OrtValue.ortvalue_from_numpy(self._columns)
            opts.add_initializer("B", self._matrix)
            self._session = ort.InferenceSession(
                path.read_bytes(), sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own types; a missing file is OSError
            raise ModelError(f"The int8 dot-product graph {path} could not be loaded: {exc}.") from exc
        probe = np.resize(np.arange(-INT8_QUERY_LIMIT, INT8_QUERY_LIMIT + 1, dtype=np.int32), (1, DIM))
        sample = rows[:: max(1, self.n // self.PROBE_ROWS)][: self.PROBE_ROWS]
        got = self.dot(probe)[0, :: max(1, self.n // self.PROBE_ROWS)][: self.PROBE_ROWS]
        if not np.array_equal(got, sample.astype(np.int32) @ probe[0]):
            raise ModelError("onnxruntime's int8 dot products are not exact on this machine; scoring in float32.")

    @property
    def rows(self) -> np.ndarray:
        """The (n, 384) int8 matrix, a view of the copy handed to onnxruntime (not contiguous): callers need not
        keep their own."""
        return self._columns.T

    @property
    def nbytes(self) -> int:
        """Bytes held: the (384, n) matrix handed to onnxruntime and the packed copy its kernel makes of it (about
        as large)."""
        return 2 * self._matrix_bytes

    def dot(self, q: np.ndarray) -> np.ndarray:
        """(m, n) int32: ``q @ rows.T`` for ``q`` (m, 384) integers in -63..63 (ValueError outside)."""
        q = np.asarray(q)
        if q.ndim != 2 or q.shape[1] != DIM or (q.size and np.abs(q).max() > INT8_QUERY_LIMIT):
            raise ValueError(f"queries must be (m, {DIM}) integers in -{INT8_QUERY_LIMIT}..{INT8_QUERY_LIMIT}")
        if self.n == 0:
            return np.zeros((len(q), 0), dtype=np.int32)
        return self._session.run(None, {"q": (q + INT8_ZERO).astype(np.uint8)})[0]

"""Where a vector snapshot's float32 rows (chunk vectors, distinct sentence vectors) are read from for exact
cosines: the file kept beside the index for the next start (:mod:`cairn.search.vector_file`) or a private temporary
file there, read back row by row (:class:`FileRows`), or, where no file can be written, memory (:class:`HeldRows`).

Why a file: a question needs exact float32 cosines for a few hundred rows only (the candidates the int8 bounds
leave: :mod:`cairn.search.dense`), while holding every row costs 1.5 KB a vector of resident memory. The rows are
written once when a snapshot is made and read with ``pread``: the kernel's page cache keeps them (reclaimable, not
the daemon's resident set) and a row read back is the bytes written, so cosines are bit for bit those of rows held
in memory. The sentence and chunk tables of the index (sqlite-vec) hold the same vectors, but a point read there
walks a megabyte-sized blob's overflow pages: tens of microseconds a row instead of one or two.

A temporary file is unlinked as it is made (nothing is left behind by a crash) and only grows: a snapshot refreshed
from another appends its new rows and keeps the old rows' positions, so both read the one file while both live; the
file is closed when the last snapshot using it is dropped. Rows read from a kept file are read-only: rows added to
them go to a temporary file behind them (:class:`RowFile` with a ``base``); the kept file replaced meanwhile is
still read through the descriptor opened before.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np

from cairn.embedder import DIM

log = logging.getLogger(__name__)

#: Bytes of one float32 row.
ROW_BYTES = DIM * 4
#: Rows written with one system call at most (bounds the bytes passed at once).
_WRITE_ROWS = 4096


class RowSource(Protocol):
    """(r, 384) float32 rows by row number."""

    def __len__(self) -> int: ...

    def read(self, rows: np.ndarray) -> np.ndarray:
        """(k, 384) float32: the rows ``rows`` (k,) int64, in that order (repeats allowed)."""
        ...

    def matrix(self) -> np.ndarray:
        """Every row, (r, 384) float32 (read in full: the float32-only path and references)."""
        ...

    def extended(self, kept: np.ndarray, new: np.ndarray) -> RowSource:
        """A source of this one's rows ``kept`` (k,) int64, then the rows ``new`` (a, 384) float32. Raises OSError
        when the rows cannot be written."""
        ...

    @property
    def nbytes(self) -> int:
        """Resident bytes it holds (the rows themselves in memory, or only their positions in the file)."""
        ...

    @property
    def stored_rows(self) -> int:
        """Rows in what backs it (a file shared with other sources counts its every row)."""
        ...


class HeldRows:
    """Rows held in memory: ``mat`` (r, 384) float32."""

    def __init__(self, mat: np.ndarray) -> None:
        self.mat = np.ascontiguousarray(mat, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.mat)

    def read(self, rows: np.ndarray) -> np.ndarray:
        return self.mat[rows]

    def matrix(self) -> np.ndarray:
        return self.mat

    def extended(self, kept: np.ndarray, new: np.ndarray) -> HeldRows:
        return HeldRows(np.concatenate([self.mat[kept], new]))

    @property
    def nbytes(self) -> int:
        return int(self.mat.nbytes)

    @property
    def stored_rows(self) -> int:
        return len(self.mat)


class RowFile:
    """Append-only float32 rows: a private temporary file in ``folder`` (0600, unlinked at once), after the read-only
    rows of ``base`` when given ((an open file, byte offset, rows): rows kept in a file beside the index,
    :mod:`cairn.search.persisted`), whose temporary file is made at the first append. Thread-safe: appends are
    serialised, reads take positions already written. Raises OSError when the temporary file cannot be made."""

    def __init__(self, folder: Path, base: tuple[BinaryIO, int, int] | None = None) -> None:
        self._folder = folder
        self._base = base[0] if base is not None else None  # kept open while rows are read from it
        self._base_fd = base[0].fileno() if base is not None else -1
        self._base_offset = base[1] if base is not None else 0
        self.base_rows = base[2] if base is not None else 0
        self._file: Any = None
        self.fd = -1
        self.rows = self.base_rows
        self._lock = threading.Lock()
        if base is None:
            self._open_temporary()

    def _open_temporary(self) -> None:
        self._file = tempfile.TemporaryFile(dir=self._folder, prefix=".cairn-vectors-")
        self.fd = self._file.fileno()

    def append(self, mat: np.ndarray) -> np.ndarray:
        """Write ``mat`` (a, 384) float32 at the end; (a,) int64 positions of its rows. Raises OSError (disk full)."""
        mat = np.ascontiguousarray(mat, dtype="<f4")
        with self._lock:
            if self._file is None:
                self._open_temporary()
            first = self.rows
            for start in range(0, len(mat), _WRITE_ROWS):
                view = mat[start : start + _WRITE_ROWS].data.cast("B")
                offset = (first - self.base_rows + start) * ROW_BYTES
                while len(view):
                    written = os.pwrite(self.fd, view, offset)
                    view, offset = view[written:], offset + written
            self.rows = first + len(mat)
        return np.arange(first, first + len(mat), dtype=np.int64)

    def read(self, positions: np.ndarray) -> np.ndarray:
        """(k, 384) float32 rows at ``positions`` (k,) int64, one ``pread`` each (the rows a question needs are
        scattered: runs are rare, and one call per row costs less than finding them). Raises OSError when the file
        cannot be read."""
        fd, base, base_fd, at = self.fd, self.base_rows, self._base_fd, self._base_offset
        pread = os.pread
        data = b"".join(
            [
                pread(base_fd, ROW_BYTES, at + p * ROW_BYTES)
                if p < base
                else pread(fd, ROW_BYTES, (p - base) * ROW_BYTES)
                for p in positions.tolist()
            ]
        )
        if len(data) != len(positions) * ROW_BYTES:
            raise OSError(f"the vector rows' file ended before row {int(positions.max())}")
        return np.frombuffer(data, dtype="<f4").reshape(len(positions), DIM)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._base is not None:
            self._base.close()


class FileRows:
    """Rows of a :class:`RowFile`: row ``i`` is the file's row ``positions[i]``."""

    def __init__(self, file: RowFile, positions: np.ndarray) -> None:
        self.file, self.positions = file, positions

    def __len__(self) -> int:
        return len(self.positions)

    def read(self, rows: np.ndarray) -> np.ndarray:
        return self.file.read(self.positions[rows])

    def matrix(self) -> np.ndarray:
        return self.file.read(self.positions)

    def extended(self, kept: np.ndarray, new: np.ndarray) -> FileRows:
        positions = self.positions[kept]
        if len(new):
            positions = np.concatenate([positions, self.file.append(new)])
        return FileRows(self.file, positions)

    @property
    def nbytes(self) -> int:
        return int(self.positions.nbytes)

    @property
    def stored_rows(self) -> int:
        return self.file.rows


def row_sources(folder: Path, *mats: np.ndarray) -> tuple[RowSource, ...]:
    """One source per matrix of ``mats`` (each (r, 384) float32): all written to one new :class:`RowFile` in
    ``folder``, or held in memory where the system has no ``pread`` or the file cannot be made or written (logged:
    the same results, at the memory cost)."""
    if hasattr(os, "pread"):
        try:
            file = RowFile(folder)
            try:
                return tuple(FileRows(file, file.append(m)) for m in mats)
            except OSError:
                file.close()
                raise
        except OSError as exc:
            log.warning("vectors held in memory: cannot write them to a temporary file in %s: %s", folder, exc)
    return tuple(HeldRows(m.copy() if m.base is not None else m) for m in mats)  # a view: not its whole base


def file_sources(folder: Path, base: tuple[BinaryIO, int, int], *counts: int) -> tuple[FileRows, ...]:
    """One source per count of ``counts``, their rows one after the other in ``base`` ((an open file, byte offset,
    rows), e.g. rows kept beside the index: :mod:`cairn.search.persisted`); rows added later go to a temporary file
    in ``folder`` (:class:`RowFile`). Raises ValueError when ``base`` holds fewer rows than ``counts`` add up to."""
    if sum(counts) > base[2]:
        raise ValueError(f"{sum(counts)} rows asked of a file holding {base[2]}")
    file = RowFile(folder, base)
    out, at = [], 0
    for count in counts:
        out.append(FileRows(file, np.arange(at, at + count, dtype=np.int64)))
        at += count
    return tuple(out)

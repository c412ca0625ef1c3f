"""A vector snapshot's arrays kept in a private file beside the index (``<index file>.vectors``,
:mod:`cairn.search.persisted`), so that a daemon started on an existing index reads them back instead of reading
every vector from the store and quantising it again (:meth:`cairn.search.vectors.Vectors.current`).

What the file was made from is its key: the store's vectors generation and vector recipe when the vectors were
read, and the database file's identity (device, inode). A file of another database file, or of a generation the
store has not reached (an older copy of the database put back), is not used. One of an earlier generation of the
same file is used as the base of a refresh that reads only the chunks changed since
(:meth:`~cairn.search.vectors.VectorSnapshot.refresh`), as a snapshot held in memory would be: the file holds each
chunk's vector tier, so a chunk whose vector changed under its id (its tier rose) is read again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from cairn.search import persisted
from cairn.search.float_rows import RowSource
from cairn.store import Store

log = logging.getLogger(__name__)

SUFFIX = ".vectors"
KIND = "vector-snapshot"
#: Rows read back and written at a time when a snapshot's rows are in a file.
_BLOCK = 4096
#: Index arrays of a snapshot kept in the file (besides the int8 copies and the float32 rows).
INDEX_ARRAYS = ("chunk_ids", "sentence_order", "group_starts", "group_rows", "sentence_keys", "tiers")


@dataclass(frozen=True)
class SnapshotArrays:
    """A snapshot as kept: ``generation``, ``recipe``, ``file_id`` (the key), ``index`` (:data:`INDEX_ARRAYS` and any
    other (k,) arrays the snapshot holds, by name), each chunk row's run in ``sentence_order`` (``sentence_start``,
    ``sentence_end``), the int8 copies ``quantized`` of :func:`~cairn.search.dense.quantize_rows` for the ``n``
    chunk rows then the ``d`` sentence rows, and ``rows``: (open file, byte offset, row count) of the float32 rows in
    the same order."""

    generation: int
    recipe: str | None
    file_id: tuple[int, int]
    index: dict[str, np.ndarray]
    sentence_start: np.ndarray
    sentence_end: np.ndarray
    quantized: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    n: int
    d: int
    rows: tuple[BinaryIO, int, int]


def path_of(store: Store) -> Path:
    return persisted.path_beside(store.path, SUFFIX)


def save(
    store: Store,
    key: tuple[int, str | None, tuple[int, int]],
    index: dict[str, np.ndarray],
    runs: tuple[np.ndarray, np.ndarray],
    quantized: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    rows: tuple[np.ndarray | RowSource, np.ndarray | RowSource],
) -> tuple[BinaryIO, int, int] | None:
    """Write a snapshot's arrays beside ``store``'s file: ``key`` (generation, recipe, file identity), ``index``
    (name → (k,) array), ``runs`` (sentence_start, sentence_end), ``quantized`` and ``rows`` (chunk rows, sentence
    rows: matrices or :class:`RowSource`). Returns the written file's float32 rows (:func:`persisted.write`), or None
    when the store is read-only or the file cannot be written (logged: the caller keeps its rows elsewhere)."""
    if store.readonly:
        return None
    generation, recipe, file_id = key
    n, d = len(rows[0]), len(rows[1])
    values, scale, resid, norm = quantized
    # A view of the int8 kernel's matrix (a refreshed snapshot's) is copied a block at a time, never whole.
    int8 = values if values.flags.c_contiguous else _streamed(values)
    arrays: dict[str, np.ndarray | persisted.Blocks] = {f"index.{k}": v for k, v in index.items()}
    arrays.update(
        sentence_start=runs[0], sentence_end=runs[1], values=int8, scale=scale, resid=resid, norm=norm,
        rows=persisted.Blocks("<f4", (n + d, values.shape[1]), _row_blocks(rows)),
    )  # fmt: skip
    meta = {"generation": generation, "recipe": recipe, "file_id": list(file_id), "n": n, "d": d}
    try:
        return persisted.write(path_of(store), KIND, meta, arrays, open_rows="rows")
    except (OSError, ValueError) as exc:
        log.warning("cannot keep the vectors in %s (the next start reads them from the index): %s", path_of(store), exc)
        return None


def _streamed(values: np.ndarray) -> persisted.Blocks:
    """``values`` as blocks of :data:`_BLOCK` contiguous rows, with their CRC (read once more to compute it)."""

    def blocks() -> Iterator[np.ndarray]:
        return (np.ascontiguousarray(values[s : s + _BLOCK]) for s in range(0, len(values), _BLOCK))

    return persisted.Blocks(values.dtype.str, values.shape, blocks(), persisted.crc_of_blocks(blocks()))


def _row_blocks(rows: tuple[np.ndarray | RowSource, ...]) -> Iterator[np.ndarray]:
    for source in rows:
        if isinstance(source, np.ndarray):
            yield from (source[s : s + _BLOCK] for s in range(0, len(source), _BLOCK))
        else:
            yield from (source.read(np.arange(s, min(s + _BLOCK, len(source)))) for s in range(0, len(source), _BLOCK))


def read(store: Store) -> SnapshotArrays | None:
    """The arrays kept beside ``store``'s file when they are of this database file and of a generation it has
    reached (module docstring); None otherwise, or when the file is missing or damaged."""
    found = persisted.read(path_of(store), KIND, unchecked=("rows",))
    if found is None:
        return None
    key: dict[str, Any] = found.key
    try:
        file_id = (int(key["file_id"][0]), int(key["file_id"][1]))
        generation, n, d = int(key["generation"]), int(key["n"]), int(key["d"])
        recipe = key["recipe"]
        arrays = found.arrays
        quantized = (arrays["values"], arrays["scale"], arrays["resid"], arrays["norm"])
        index = {name.removeprefix("index."): a for name, a in arrays.items() if name.startswith("index.")}
        if any(name not in index for name in INDEX_ARRAYS) or len(quantized[0]) != n + d:
            return None
        if len(index["chunk_ids"]) != n or len(index["tiers"]) != n:
            return None
        if file_id != store.file_identity() or generation > store.vectors_generation():
            log.debug("not using %s: made for another database file or a later state of it", found.path)
            return None
        rows = found.open_rows("rows")
    except (KeyError, TypeError, ValueError, IndexError, OSError) as exc:
        log.debug("not using %s: %s", found.path, exc)
        return None
    if rows[2] != n + d:
        rows[0].close()
        return None
    return SnapshotArrays(
        generation, recipe, file_id, index, arrays["sentence_start"], arrays["sentence_end"], quantized, n, d, rows
    )

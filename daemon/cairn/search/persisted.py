"""Arrays the search side keeps in private files beside the index, so that a daemon started on an existing index
reads its in-memory structures back instead of rebuilding them from every row (the vector snapshot:
:mod:`cairn.search.vectors`; the in-memory BM25: :mod:`cairn.search.keyword`).

One file holds named numpy arrays and a JSON header saying what they were made from (``key``: the store's
generation counters, the database file's identity, the vector recipe...). The caller compares the key with the
store before using anything read; a file that is missing, of another format, truncated or damaged (a CRC-32 of the
header and of every array but the ``unchecked`` ones) reads as None, and the caller rebuilds as without it.

Layout: ``MAGIC`` (8 bytes), format version and header length (two little-endian uint32), the header (UTF-8 JSON:
``kind``, ``key``, ``arrays`` [[name, dtype, shape, offset, crc]]), then each array's bytes at a 64-byte aligned
offset. Written to a private temporary file in the same folder (0600), flushed to disk, then renamed over the old
one: a reader sees the old file or the new one, never a part of one.

Arrays listed ``unchecked`` are not read into memory by :func:`read`: the caller reads their rows where they are
(:meth:`Persisted.open_rows`: the float32 vector rows, read a few at a time with ``pread``).
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

log = logging.getLogger(__name__)

MAGIC = b"CAIRNARR"
VERSION = 1
_ALIGN = 64
_PREFIX = struct.Struct("<8sII")
#: Largest header accepted (a damaged length is not allocated).
_MAX_HEADER = 1 << 20
#: Bytes written with one system call at most.
_WRITE_BYTES = 8 << 20


@dataclass(frozen=True)
class Blocks:
    """An array written block by block (not held in memory at once): ``dtype``, ``shape``, and ``blocks`` yielding
    C-ordered arrays of that dtype whose bytes, one after the other, are the array's. ``crc``: their CRC-32 when the
    caller computed it (:func:`crc_of_blocks`), else none is recorded and the reader must not check it (see
    ``unchecked``)."""

    dtype: str
    shape: tuple[int, ...]
    blocks: Iterable[np.ndarray]
    crc: int | None = None


def crc_of_blocks(blocks: Iterable[np.ndarray]) -> int:
    """The CRC-32 that :func:`read` checks of an array written as ``blocks`` (little-endian, C order)."""
    crc = 0
    for block in blocks:
        crc = zlib.crc32(_bytes_of(_little(block)), crc)
    return crc & 0xFFFFFFFF


@dataclass(frozen=True)
class Persisted:
    """What :func:`read` found: the header's ``key``, the ``arrays`` read into memory, and where the unchecked ones
    are (``offsets``: name → (byte offset, shape, dtype))."""

    path: Path
    key: dict[str, Any]
    arrays: dict[str, np.ndarray]
    offsets: dict[str, tuple[int, tuple[int, ...], str]]

    def open_rows(self, name: str) -> tuple[BinaryIO, int, int]:
        """(the file opened for reading, byte offset, rows) of the unchecked 2-D array ``name``. Raises OSError
        when the file is gone, KeyError when it holds no such array."""
        offset, shape, _ = self.offsets[name]
        return open(self.path, "rb", buffering=0), offset, shape[0]  # noqa: SIM115  (kept open by the caller)


def path_beside(db_path: Path, suffix: str) -> Path:
    """The file ``<index file name><suffix>`` in the index's folder."""
    return db_path.with_name(db_path.name + suffix)


def file_identity(path: Path) -> tuple[int, int]:
    """(device, inode) of ``path`` ((0, 0) when missing)."""
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0)
    return (st.st_dev, st.st_ino)


def write(
    path: Path,
    kind: str,
    key: Mapping[str, Any],
    arrays: Mapping[str, np.ndarray | Blocks],
    *,
    open_rows: str | None = None,
) -> tuple[BinaryIO, int, int] | None:
    """Write ``arrays`` (name → array, or :class:`Blocks` for one written block by block) and ``key`` (JSON values)
    to ``path``, replacing it atomically (module docstring). Returns, for ``open_rows`` (the name of a 2-D array),
    what :meth:`Persisted.open_rows` returns, opened before the rename (the file written, whatever replaces it
    later); else None. Raises OSError (folder not writable, disk full), and ValueError when a :class:`Blocks` yields
    another number of bytes than its shape says; nothing is left behind."""
    specs: list[list[Any]] = []
    for name, value in arrays.items():
        dtype = np.dtype(value.dtype).newbyteorder("<").str
        crc = value.crc if isinstance(value, Blocks) else _crc(_little(value))
        specs.append([name, dtype, [int(x) for x in value.shape], 0, crc])
    # Room for the offsets' digits, filled in below (each at most 20 characters more than the "0" written here).
    offset = _aligned(_PREFIX.size + len(_header(kind, key, specs)) + 20 * len(specs))
    end = offset
    for spec in specs:
        spec[3] = offset
        end = offset + int(np.prod(spec[2], dtype=np.int64)) * np.dtype(spec[1]).itemsize
        offset = _aligned(end)
    header = _header(kind, key, specs)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    try:
        try:
            _write_all(fd, _PREFIX.pack(MAGIC, VERSION, len(header)) + header, 0)
            for spec, value in zip(specs, arrays.values()):
                end = _write_array(fd, spec[3], value)
                expected = spec[3] + int(np.prod(spec[2], dtype=np.int64)) * np.dtype(spec[1]).itemsize
                if end != expected:
                    raise ValueError(f"array {spec[0]!r}: {end - spec[3]} bytes written, its shape says otherwise")
            os.ftruncate(fd, max(end, _PREFIX.size + len(header)))
            os.fsync(fd)
        finally:
            os.close(fd)
        reader = None
        if open_rows is not None:
            spec = next(s for s in specs if s[0] == open_rows)
            reader = (open(tmp, "rb", buffering=0), int(spec[3]), int(spec[2][0]))  # noqa: SIM115
        try:
            os.replace(tmp, path)
        except BaseException:
            if reader is not None:
                reader[0].close()
            raise
        return reader
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read(path: Path, kind: str, *, unchecked: Iterable[str] = ()) -> Persisted | None:
    """The file at ``path`` if it is a complete, undamaged file of ``kind``: every array but the ``unchecked`` ones
    read into memory and checked against its CRC. None (logged at debug level) when it is missing, of another kind
    or format version, or damaged."""
    skip = set(unchecked)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            magic, version, length = _PREFIX.unpack(f.read(_PREFIX.size))
            if magic != MAGIC or version != VERSION or length > _MAX_HEADER:
                return _unusable(path, "another format")
            header = json.loads(f.read(length).decode("utf-8"))
            if header.get("kind") != kind or header.get("crc") != _crc(_header_body(header)):
                return _unusable(path, "another kind, or a damaged header")
            arrays: dict[str, np.ndarray] = {}
            offsets: dict[str, tuple[int, tuple[int, ...], str]] = {}
            for name, dtype, shape, offset, crc in header["arrays"]:
                shape_t = tuple(int(x) for x in shape)
                nbytes = int(np.prod(shape_t, dtype=np.int64)) * np.dtype(dtype).itemsize
                if offset < 0 or offset + nbytes > size:
                    return _unusable(path, f"array {name!r} beyond the end of the file")
                offsets[name] = (int(offset), shape_t, dtype)
                if name in skip:
                    continue
                arr = np.empty(shape_t, dtype=np.dtype(dtype))
                f.seek(offset)
                if f.readinto(_bytes_of(arr)) != nbytes or _crc(arr) != crc:
                    return _unusable(path, f"array {name!r} damaged")
                arrays[name] = arr.astype(arr.dtype.newbyteorder("="), copy=False)
            return Persisted(path, dict(header.get("key") or {}), arrays, offsets)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, struct.error, UnicodeDecodeError) as exc:
        return _unusable(path, str(exc))


def remove(path: Path) -> None:
    """Delete ``path`` if it exists (a file that no longer matches anything); errors are logged, not raised."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.debug("cannot delete %s: %s", path, exc)


def _unusable(path: Path, why: str) -> Persisted | None:
    log.debug("not using %s: %s", path, why)
    return None


def _header_body(header: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in header.items() if k != "crc"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _header(kind: str, key: Mapping[str, Any], specs: list[list[Any]]) -> bytes:
    header: dict[str, Any] = {"kind": kind, "key": dict(key), "arrays": specs}
    header["crc"] = _crc(_header_body(header))
    return json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _crc(data: bytes | np.ndarray) -> int:
    return zlib.crc32(_bytes_of(data) if isinstance(data, np.ndarray) else data) & 0xFFFFFFFF


def _bytes_of(arr: np.ndarray) -> memoryview:
    """The bytes of ``arr`` (C order; a copy only when it is not contiguous), also of an empty array."""
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


def _little(arr: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))


def _blocks(value: np.ndarray | Blocks) -> Iterator[np.ndarray]:
    if isinstance(value, Blocks):
        for block in value.blocks:
            yield np.ascontiguousarray(block, dtype=np.dtype(value.dtype))
        return
    flat = _little(value).reshape(-1)
    step = max(1, _WRITE_BYTES // max(1, flat.itemsize))
    for start in range(0, len(flat), step):
        yield flat[start : start + step]


def _write_array(fd: int, offset: int, value: np.ndarray | Blocks) -> int:
    """Write ``value``'s bytes at ``offset``; returns the offset after them."""
    for block in _blocks(value):
        data = _bytes_of(block)
        _write_all(fd, data, offset)
        offset += len(data)
    return offset


def _write_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while len(view):
        step = view[:_WRITE_BYTES]
        written = os.pwrite(fd, step, offset) if hasattr(os, "pwrite") else _seek_write(fd, step, offset)
        view, offset = view[written:], offset + written


def _seek_write(fd: int, data: memoryview, offset: int) -> int:
    os.lseek(fd, offset, os.SEEK_SET)
    return os.write(fd, data)

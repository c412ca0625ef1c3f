"""The daemon's resident memory by part, approximate: what ``cairn status --json`` and ``/index/stats`` show as
``memory`` and the benchmarks print (layer 1: it reads the system's
figures; :mod:`cairn.search.memory` adds up the search side's parts, :func:`daemon_memory` the daemon's).

Each part is the bytes of the arrays and objects it holds (``nbytes`` of numpy arrays, ``sys.getsizeof`` of the
Python objects around them), or, for the ONNX sessions and the MCP HTTP server, the growth of the resident set
measured when they were made. ``other`` is what is left of the process's resident set: the interpreter, the
libraries, SQLite's page cache, the allocators' free lists, onnxruntime's work buffers. Worker processes (the PDF
reader) are separate processes: their resident sets are listed beside the daemon's, not in it. Figures in MB
(2**20 bytes).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

MB = float(1 << 20)
#: The parts of the daemon's own resident set, in the order shown.
PARTS = ("vectors", "int8", "bm25", "onnx", "caches", "mcpHttp", "other")


def process_memory(pid: int | None = None) -> dict[str, int | None]:
    """``{rss, peak}`` in bytes of process ``pid`` (default this one) from ``/proc/<pid>/status`` (VmRSS, VmHWM);
    None for a figure the system does not give (no /proc: then the peak of this process from ``getrusage``)."""
    out: dict[str, int | None] = {"rss": None, "peak": None}
    try:
        text = Path(f"/proc/{pid or os.getpid()}/status").read_text(encoding="ascii", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out["rss" if key == "VmRSS" else "peak"] = int(value.split()[0]) * 1024
    if out["peak"] is None and pid is None:
        try:
            import resource  # noqa: PLC0415  (not on Windows)

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            out["peak"] = peak if sys.platform == "darwin" else peak * 1024
        except (ImportError, OSError):
            pass
    return out


def rss_bytes() -> int | None:
    """This process's resident set now, in bytes (None where the system does not say)."""
    return process_memory()["rss"]


def trim_heap() -> None:
    """Give the C heap's free memory back to the system (glibc's ``malloc_trim``; nothing elsewhere). Freed
    blocks of onnxruntime's work buffers otherwise stay resident in the heap's free lists after a bulk of
    embeddings, though nothing uses them."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


_TRIM: list[Any] = []


#: glibc's ``mallopt`` parameter for the mmap threshold, and the value set: its default (128 KiB), fixed.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024


def fix_mmap_threshold() -> bool:
    """Keep glibc's mmap threshold at 128 KiB for the process's life (``mallopt``; nothing elsewhere). Left to
    itself, glibc raises the threshold to the size of each large block freed (up to 32 MiB), after which numpy arrays
    and onnxruntime buffers of a few MiB come from the heap, whose free space fragments and stays resident; with it
    fixed they are mapped and unmapped, so the memory goes back to the system when they are freed. True when set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes  # noqa: PLC0415

        return bool(ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):
        return False


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim`` (looked up once), or None where there is none."""
    if not _TRIM:
        found = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes  # noqa: PLC0415

                found = ctypes.CDLL("libc.so.6").malloc_trim
            except (OSError, AttributeError):
                found = None
        _TRIM.append(found)
    return _TRIM[0]


def deep_nbytes(obj: Any, depth: int = 4) -> int:
    """Approximate bytes held by ``obj``: numpy arrays by ``nbytes`` (a view counts its base's bytes once it owns
    none), containers and dataclass-like objects by their own size plus their items', ``depth`` levels down.
    Shared objects reached twice are counted twice (an upper bound)."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes) + 112 if obj.base is None else 112
    own = getattr(type(obj), "nbytes", None)
    if isinstance(own, property):  # an object that says what it holds (a DenseQuery: not its index)
        return int(obj.nbytes)
    size = sys.getsizeof(obj)
    if depth <= 0 or isinstance(obj, (str, bytes, int, float, bool)) or obj is None:
        return size
    items: Iterable[Any]
    if isinstance(obj, dict):
        items = (x for kv in obj.items() for x in kv)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = obj
    else:
        slots = getattr(type(obj), "__slots__", ())
        fields = getattr(obj, "__dict__", None)
        items = list(fields.values()) if fields is not None else [getattr(obj, s, None) for s in slots]
    return size + sum(deep_nbytes(x, depth - 1) for x in items)


def breakdown(parts: dict[str, int], workers: dict[str, int | None] | None = None) -> dict[str, Any]:
    """The JSON view: ``{rssMB, peakMB, parts: {vectors, int8, bm25, onnx, caches, mcpHttp, other} (MB, one
    decimal), workers: {name: MB or None}}`` from ``parts`` (bytes by name; names outside :data:`PARTS` raise
    KeyError) and ``workers`` (a worker process's resident bytes, None when it is not running). ``other`` is the
    resident set less the parts (never below 0)."""
    mem = process_memory()
    rss = mem["rss"]
    known = {name: int(parts.get(name, 0)) for name in PARTS if name != "other"}
    unknown = set(parts) - set(known)
    if unknown:
        raise KeyError(f"unknown memory parts: {sorted(unknown)}")
    other = max(0, rss - sum(known.values())) if rss is not None else 0
    shown = {**known, "other": other}
    return {
        "rssMB": _mb(rss),
        "peakMB": _mb(mem["peak"]),
        "parts": {name: _mb(value) for name, value in shown.items()},
        "workers": {name: _mb(value) for name, value in (workers or {}).items()},
    }


def _mb(value: int | None) -> float | None:
    return None if value is None else round(value / MB, 1)


def daemon_memory(
    search: dict[str, int],
    *,
    onnx: int,
    mcp_http: int,
    pdf_worker_pid: int | None,
    caches: dict[str, dict[str, int | None]] | None = None,
) -> dict[str, Any]:
    """The daemon's :func:`breakdown`: the search side's parts (``search``: :func:`cairn.search.search_parts`), the
    embedding model's session (``onnx`` bytes), the MCP HTTP server's share (``mcp_http`` bytes, measured when it
    started), and the PDF reader's worker process beside it (``pdf_worker_pid``, None when it is not running); with
    ``caches`` (:func:`cairn.search.search_caches`: each cache's entries and bytes against its bounds) as is."""
    parts = {**search, "onnx": onnx, "mcpHttp": mcp_http}
    out = breakdown(parts, {"pdfWorker": process_memory(pdf_worker_pid)["rss"] if pdf_worker_pid is not None else None})
    if caches is not None:
        out["caches"] = caches
    return out

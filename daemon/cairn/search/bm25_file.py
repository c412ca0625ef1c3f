"""The in-memory BM25's postings kept in a private file beside the index (``<index file>.bm25``,
:mod:`cairn.search.persisted`), so that a daemon started on an existing index reads them back instead of tokenizing
every full-text row again (:meth:`cairn.search.keyword.Bm25Index.build`).

The file holds what a build read: every term's postings, each row's size and live flag, FTS5's counts and the
deletion log's last entry at that moment, and the database file's identity. A file of another database file is
not used; one of this file is brought up to date exactly as a build held in memory is after commits (the rows
added since, the deletions logged since; dropped when FTS5's counts do not add up), so what is served is what a
fresh build would serve.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cairn.search import persisted
from cairn.store import Store

log = logging.getLogger(__name__)

SUFFIX = ".bm25"
KIND = "bm25"


@dataclass(frozen=True)
class KeptBm25:
    """A build as kept: ``terms`` (term → (chunk ids (k,) int64 ascending, frequencies (k,) float64)), ``alive`` and
    ``length`` by chunk id, FTS5's ``n_rows`` and ``n_tokens``, the highest chunk id read ``last_id`` and the
    deletion log's last entry ``deletion_seq`` (None: no log)."""

    terms: dict[str, tuple[np.ndarray, np.ndarray]]
    alive: np.ndarray
    length: np.ndarray
    n_rows: int
    n_tokens: int
    last_id: int
    deletion_seq: int | None


def path_of(store: Store) -> Path:
    return persisted.path_beside(store.path, SUFFIX)


def flatten(terms: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """``terms`` as flat arrays: ``names`` (the terms' UTF-8 bytes one after the other), ``name_ends``, ``post_ends``
    (cumulative ends), ``ids`` and ``tf`` (every term's postings one after the other)."""
    names = [t.encode("utf-8") for t in terms]
    values = list(terms.values())
    counts = np.fromiter((len(v[0]) for v in values), dtype=np.int64, count=len(values))
    return {
        "names": np.frombuffer(b"".join(names), dtype=np.uint8),
        "name_ends": np.cumsum([len(b) for b in names], dtype=np.int64),
        "post_ends": np.cumsum(counts, dtype=np.int64),
        "ids": np.concatenate([v[0] for v in values]) if values else np.zeros(0, np.int64),
        "tf": np.concatenate([v[1] for v in values]) if values else np.zeros(0, np.float64),
    }


def unflatten(flat: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """:func:`flatten`'s inverse (the postings are views of ``flat``'s two arrays). Raises ValueError when the arrays
    do not fit together."""
    blob, name_ends, post_ends = flat["names"].tobytes(), flat["name_ends"].tolist(), flat["post_ends"].tolist()
    ids, tf = flat["ids"], flat["tf"]
    if len(name_ends) != len(post_ends) or len(ids) != len(tf) or (post_ends and post_ends[-1] != len(ids)):
        raise ValueError("postings arrays of different lengths")
    terms: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    name_at = post_at = 0
    for name_end, post_end in zip(name_ends, post_ends):
        terms[blob[name_at:name_end].decode("utf-8")] = (ids[post_at:post_end], tf[post_at:post_end])
        name_at, post_at = name_end, post_end
    return terms


def save(store: Store, kept: KeptBm25, flat: dict[str, np.ndarray] | None = None) -> None:
    """Write ``kept`` (its terms as ``flat`` when the caller has them: :func:`flatten`) beside ``store``'s file
    (nothing for a read-only store); a failure is logged (the next start builds from FTS5 again)."""
    if store.readonly:
        return
    arrays: dict[str, np.ndarray | persisted.Blocks] = dict(flat if flat is not None else flatten(kept.terms))
    arrays.update(alive=kept.alive.astype(np.uint8), length=kept.length)
    key = {
        "file_id": list(store.file_identity()),
        "n_rows": kept.n_rows,
        "n_tokens": kept.n_tokens,
        "last_id": kept.last_id,
        "deletion_seq": kept.deletion_seq,
    }
    try:
        persisted.write(path_of(store), KIND, key, arrays)
    except (OSError, ValueError) as exc:
        log.warning(
            "cannot keep the keyword statistics in %s (the next start reads them again): %s", path_of(store), exc
        )


def read(store: Store) -> KeptBm25 | None:
    """What :func:`save` kept for this database file, or None (missing, damaged, another database file)."""
    found = persisted.read(path_of(store), KIND)
    if found is None:
        return None
    key: dict[str, Any] = found.key
    try:
        if (int(key["file_id"][0]), int(key["file_id"][1])) != store.file_identity():
            return None
        a = found.arrays
        terms = unflatten(a)
        seq = key["deletion_seq"]
        return KeptBm25(
            terms,
            a["alive"].astype(bool),
            a["length"],
            int(key["n_rows"]),
            int(key["n_tokens"]),
            int(key["last_id"]),
            None if seq is None else int(seq),
        )
    except (KeyError, TypeError, ValueError, IndexError, UnicodeDecodeError) as exc:
        log.debug("not using %s: %s", found.path, exc)
        return None

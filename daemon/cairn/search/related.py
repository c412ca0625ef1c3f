"""Similar notes (``GET /related``'s ``similar``, MCP ``get_related_notes``): the notes whose chunks are nearest to
one note's centre, the normalised mean of its chunk vectors, under the search's cosine floor
(:data:`~cairn.config.COSINE_FLOOR`, the one :class:`~cairn.search.SearchService` applies) and the caller's
view (:class:`~cairn.search.view.CallerView`). Blocking (SQLite): call from a worker thread in async code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cairn.config import COSINE_FLOOR
from cairn.relevance import relevance
from cairn.search.view import CallerView
from cairn.store import Store

#: Nearest chunks read per call (withheld ones are read on top, so the allowed pool stays this size).
SIMILAR_CANDIDATES = 60


def note_centre(store: Store, rel: str, redacted: Mapping[int, np.ndarray] | None = None) -> np.ndarray | None:
    """The L2-normalised mean of the chunk vectors of the note at ``rel`` ((384,) float32); ``None`` when it has
    no vectors yet or they cancel out. ``redacted``: chunk id → the vector of its redacted text, used instead."""
    vectors = store.vectors([chunk.chunk_id for chunk in store.chunks_of_note(rel)])
    if redacted:
        vectors = {c: redacted.get(c, v) for c, v in vectors.items()}
    if not vectors:
        return None
    centre = np.mean(np.stack(list(vectors.values())), axis=0)
    norm = float(np.linalg.norm(centre))
    if norm == 0.0:
        return None
    return (centre / norm).astype(np.float32)


def similar_notes(
    store: Store,
    rel: str,
    limit: int,
    view: CallerView | None = None,
    *,
    floor: float = COSINE_FLOOR,
) -> list[dict[str, Any]]:
    """Up to ``limit`` other notes ``[{filePath, title, score, relevance}]``, best first (ties by path): ``score`` is
    each note's best chunk cosine to the centre of ``rel`` among the :data:`SIMILAR_CANDIDATES` nearest allowed
    chunks, at least ``floor``; ``relevance`` its label (:func:`cairn.relevance.relevance`, from the cosine alone).
    Notes withheld from ``view``'s caller (None: the owner) are left out (and added to its tally); the chunks holding
    a link to a withheld note count by the vectors of their redacted text (:mod:`cairn.search.visible`), in the
    centre and as candidates."""
    redacted = view.redacted_vectors() if view is not None else {}
    centre = note_centre(store, rel, {c: v[0] for c, v in redacted.items()})
    if centre is None:
        return []
    shown = view.visible if view is not None else None
    extra = (len(view.hidden) if view is not None else 0) + (len(shown.redacted) if shown is not None else 0)
    hits = [(n[0], n[1]) for n in store.knn(centre, SIMILAR_CANDIDATES + extra)]
    if shown is not None:  # a redacted chunk by its redacted vector, or not at all
        hits = [(cid, cos) for cid, cos in hits if cid not in shown.redacted]
        hits += [(cid, float(v[0] @ centre)) for cid, v in redacted.items()]
        hits.sort(key=lambda h: (-h[1], h[0]))
    rows = store.chunk_rows([cid for cid, _ in hits])
    best: dict[str, tuple[float, str]] = {}
    for cid, cosine in hits:
        row = rows.get(cid)
        if row is None or row.path == rel or cosine < floor:
            continue
        if view is not None and view.hides(row.note_id, row.path):
            view.tally.add([row.path])
            continue
        if row.path not in best or cosine > best[row.path][0]:
            best[row.path] = (cosine, row.title)
    ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[:limit]
    return [
        {"filePath": path, "title": title, "score": round(score, 4), "relevance": relevance(score)}
        for path, (score, title) in ranked
    ]

"""The most recently modified notes: what a search with an empty query lists (docs/design.md, "Contract" → Recent
notes), the first screen of the plugin's Search tab, ``GET /search`` without ``q``, ``cairn search ""`` and MCP
``search_notes`` without a query.

One hit per note, newest first by its file's modification time (ties by path), showing its first passage; nothing
is ranked, so a hit's ``score`` and ``cosine`` are 0 and the JSON views leave them out. The caller's view applies as
to a search: a withheld note is skipped before the ``top_k`` are taken (so they are still filled with notes the caller
may see, and neither their number nor their order depends on the withheld ones), its name is masked in the passages
shown, and the withheld notes that were skipped come back in :attr:`Ranked.withheld
<cairn.search.pipeline.Ranked.withheld>` for the audit log only.
"""

from __future__ import annotations

import dataclasses

from cairn.contract import SearchRequest
from cairn.search.hits import Hit
from cairn.search.pipeline import Ranked, make_hit
from cairn.search.view import CallerView
from cairn.store.reads import RecentNote, recent_notes


def recent(view: CallerView, request: SearchRequest) -> Ranked:
    """The ``request.top_k`` most recently modified notes ``view``'s caller may see, under the request's scope: its
    ``tags`` (any of, nested included) and ``folders`` (any of). The request is trusted (checked once, by the edge
    contract)."""
    top_k, tags_in, folders_in = request.top_k, request.tags, request.folders
    hidden = view.withheld
    # Enough rows that ``top_k`` visible ones are among them however many withheld notes are newer.
    rows = recent_notes(view.store, tags=tags_in, folders=folders_in, limit=top_k + len(hidden.notes))
    tags_of = view.store.tags_of_notes(r.note_id for r in rows)
    shown: list[RecentNote] = []
    skipped: set[str] = set()
    for row in rows:
        if len(shown) == top_k:
            break
        if view.hides(row.note_id, row.path) or (
            hidden and hidden.withhold.note_withheld(row.path, tags_of[row.note_id])
        ):
            skipped.add(row.path)
        else:
            shown.append(row)
    return Ranked(hits=tuple(_hits(view, shown, tags_of)), withheld=frozenset(skipped))


def _hits(view: CallerView, notes: list[RecentNote], tags_of: dict[int, list[str]]) -> list[Hit]:
    """Each note's :class:`Hit`: its first passage as the caller is shown it (links to withheld notes masked), or its
    title alone for a note without text."""
    chunks = view.store.chunk_rows([n.first_chunk for n in notes if n.first_chunk is not None])
    redact = view.redact if view.redactor else None
    mask = view.symbol_masker()
    hits = []
    for note in notes:
        modified = note.mtime_ns / 1e9
        row = chunks.get(note.first_chunk) if note.first_chunk is not None else None
        if row is None:
            hits.append(
                Hit(
                    chunk_id=0,
                    file_path=note.path,
                    title=note.title,
                    symbol="",
                    score=0.0,
                    cosine=0.0,
                    snippet="",
                    text="",
                    tags=tuple(tags_of[note.note_id]),
                    kind=note.kind,
                    indexed_at=note.indexed_at,
                    modified_at=modified,
                )
            )
            continue
        hit = make_hit(row, 0.0, 0.0, tags_of[note.note_id], (), 0.0, redact, mask)
        hits.append(dataclasses.replace(hit, modified_at=modified))
    return hits

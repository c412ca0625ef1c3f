"""Read-only queries for the API's browse views (kept apart from ``store/__init__.py``, which the
search work changes): all SQL still lives in ``store/``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cairn.store import Store


def chunk_ids_of_note(store: "Store", path: str) -> list[int]:
    """Ids of the chunks of the note at vault-relative ``path``, in order ([] when none)."""
    return [r[0] for r in store.conn.execute(
        "SELECT c.id FROM chunks c JOIN notes n ON n.id=c.note_id WHERE n.path=? ORDER BY c.ordinal", (path,))]

"""Read-side views of one vault's index for the API (layer 2): a note, its related notes, the tags.

Every client-supplied path is confined to the vault before anything is read: absolute paths,
``..`` segments, backslashes, NUL and symlinks leading out of the vault raise
:class:`~cairn.errors.PathOutsideVault` (400); a path that is not an indexed note raises
:class:`~cairn.errors.NotFoundError` (404). Only notes the index holds are read from disk.

Blocking (SQLite and file reads): call from a worker thread in async code.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from cairn.config import COSINE_FLOOR, Config
from cairn.errors import NotFoundError, PathOutsideVault
from cairn.store import Store
from cairn.store.reads import chunk_ids_of_note
from cairn.vault import normalise_rel_path, read_note_text, resolve_in_vault

MAX_PATH_CHARS = 1024
_DRIVE = re.compile(r"^[A-Za-z]:")


def checked_rel_path(raw: Any) -> str:
    """A vault-relative note path from a client, or :class:`PathOutsideVault`. Refuses what is never
    a vault-relative POSIX path: non-strings, empty, too long, NUL, backslashes, absolute, ``..``."""
    if not isinstance(raw, str) or not raw.strip():
        raise PathOutsideVault("The note path is empty; expected a vault-relative path such as 'folder/note.md'.")
    if len(raw) > MAX_PATH_CHARS:
        raise PathOutsideVault(f"The note path is {len(raw)} characters long; the limit is {MAX_PATH_CHARS}.")
    shown = raw[:120]
    if "\x00" in raw or "\\" in raw:
        raise PathOutsideVault(f"Path {shown!r} holds a NUL or a backslash; expected a vault-relative path with '/'.")
    if raw.startswith("/") or _DRIVE.match(raw):
        raise PathOutsideVault(f"Path {shown!r} is absolute; expected a path relative to the vault root.")
    if ".." in raw.split("/"):
        raise PathOutsideVault(f"Path {shown!r} contains '..'; expected a path inside the vault.")
    return normalise_rel_path(raw)


class Library:
    """``note``, ``related`` and ``tags`` over ``store`` for the vault in ``config``."""

    SIMILAR_CANDIDATES = 60

    def __init__(self, config: Config, store: Store) -> None:
        self.config = config
        self.store = store

    def _indexed(self, raw: Any) -> tuple[str, dict]:
        rel = checked_rel_path(raw)
        resolve_in_vault(self.config.require_vault(), rel)  # symlinks out of the vault → PathOutsideVault
        note = self.store.note_by_path(rel)
        if note is None or note.get("status") != "ok":
            raise NotFoundError(f"No indexed note {rel!r} in the vault; paths are vault-relative, e.g. 'folder/note.md'.")
        return rel, note

    def note(self, raw: Any) -> dict[str, Any]:
        """``{filePath, title, tags, aliases, frontmatter, content, links, backlinks, indexedAt}``."""
        rel, note = self._indexed(raw)
        path = resolve_in_vault(self.config.require_vault(), rel)
        try:
            content, _ = read_note_text(path, max_bytes=self.config.max_note_bytes)
        except Exception as exc:
            raise NotFoundError(f"Note {rel!r} is indexed but cannot be read now ({getattr(exc, 'message', exc)}); "
                                "it may have been moved or deleted.") from None
        return {"filePath": rel, "title": note["title"], "tags": self.store.note_tags(rel), "aliases": note["aliases"],
                "frontmatter": note["frontmatter"], "content": content, "links": self.store.links_of_note(rel),
                "backlinks": self.store.backlinks(rel), "indexedAt": note["indexedAt"]}

    def related(self, raw: Any, limit: int = 10) -> dict[str, Any]:
        """``{filePath, links, backlinks, similar: [{filePath, title, score}]}``; ``similar`` are the
        notes whose chunks are nearest (cosine ≥ the floor) to the mean of this note's chunk vectors."""
        rel, _ = self._indexed(raw)
        links = self.store.links_of_note(rel)
        return {"filePath": rel, "links": links, "backlinks": self.store.backlinks(rel),
                "similar": self._similar(rel, limit)}

    def _similar(self, rel: str, limit: int) -> list[dict[str, Any]]:
        ids = chunk_ids_of_note(self.store, rel)
        vectors = self.store.vectors(ids)
        if not vectors:
            return []  # not embedded yet
        centre = np.mean(np.stack(list(vectors.values())), axis=0)
        norm = float(np.linalg.norm(centre))
        if norm == 0.0:
            return []
        centre = (centre / norm).astype(np.float32)
        hits = self.store.knn(centre, self.SIMILAR_CANDIDATES)
        rows = self.store.chunk_rows([cid for cid, _ in hits])
        best: dict[str, tuple[float, str]] = {}
        for cid, cosine in hits:
            row = rows.get(cid)
            if row is None or row.path == rel or cosine < COSINE_FLOOR:
                continue
            if row.path not in best or cosine > best[row.path][0]:
                best[row.path] = (cosine, row.title)
        ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[:limit]
        return [{"filePath": path, "title": title, "score": round(score, 4)} for path, (score, title) in ranked]

    def tags(self) -> dict[str, Any]:
        """``{tags: [{tag, count}]}`` sorted by tag."""
        return {"tags": [{"tag": tag, "count": count} for tag, count in self.store.tag_counts()]}

"""Read-only queries for withholding and the library's views: the notes a caller is withheld (by tag,
front-matter problem code or path, and the PDFs they link to), chunk owners, note listings and tag counts."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from cairn.notes import FRONTMATTER_ERROR_CODES
from cairn.store.base import scalar
from cairn.store.fts import fts_row_sizes as _row_sizes
from cairn.store.records import NoteListing, TagCount
from cairn.store.schema import LEGACY_FRONTMATTER_ERROR

if TYPE_CHECKING:
    from cairn.store import Store


# ------------------------------------------------------------------------ withholding
def _tag_clause(tags: Sequence[str], column: str = "t.tag") -> tuple[str, list]:
    """SQL matching ``column`` to any of the normalised ``tags`` or a tag nested below one."""
    ors, args = [], []
    for t in tags:
        ors.append(f"({column} = ? OR substr({column}, 1, ?) = ?)")
        args += [t, len(t) + 1, t + "/"]
    return " OR ".join(ors), args


def _frontmatter_problem_clause(store: Store) -> tuple[str, list]:
    """SQL matching the notes whose front-matter had a problem, by their stable ``error_code``; an index older than
    that column (schema version < 4, opened read-only so not migrated) by the messages written then."""
    if store.schema_version < 4:
        return LEGACY_FRONTMATTER_ERROR, []
    return "n.error_code IN (SELECT value FROM json_each(?))", [json.dumps(FRONTMATTER_ERROR_CODES)]


def withheld_notes(
    store: Store, tags: Sequence[str], path_withheld: Callable[[str], bool] | None = None
) -> dict[int, tuple[str, list[str]]]:
    """``{note_id: (path, aliases)}`` of every known file carrying one of the normalised ``tags`` (or a
    tag nested below one: ``note_tags`` holds case-folded tags, nested kept as ``a/b``), or — when
    ``tags`` is not empty — whose front-matter could not be read (its tags are unknown), or whose path
    ``path_withheld`` accepts; and every PDF that one of those links to or embeds. Any status (skipped files
    included). Cost: one indexed query for the
    tags; the path test reads every path."""
    out: dict[int, tuple[str, list[str]]] = {}
    if tags:
        clause, args = _tag_clause(tags)
        # A note whose front-matter could not be read has unknown properties: it might carry a
        # withheld tag there, so it is withheld too (fail closed; the error is in /index/stats).
        unreadable, unreadable_args = _frontmatter_problem_clause(store)
        for nid, path, aliases in store.conn.execute(
            f"SELECT n.id, n.path, n.aliases FROM notes n WHERE n.id IN "
            f"(SELECT t.note_id FROM note_tags t WHERE {clause}) OR {unreadable}",
            [*args, *unreadable_args],
        ):
            out[nid] = (path, json.loads(aliases or "[]"))
    if path_withheld is not None:
        for nid, path, aliases in store.conn.execute("SELECT id, path, aliases FROM notes"):
            if nid not in out and path_withheld(path):
                out[nid] = (path, json.loads(aliases or "[]"))
    if out:
        # A PDF cannot carry tags: one that a withheld note links to or embeds (a scan filed with a private
        # note) is withheld with it, even when an allowed note links to it too (fail closed).
        for nid, path, aliases in store.conn.execute(
            "SELECT n.id, n.path, n.aliases FROM notes n WHERE n.kind='pdf' AND n.path IN "
            "(SELECT l.target_path FROM links l WHERE l.note_id IN (SELECT value FROM json_each(?)))",
            (json.dumps(list(out)),),
        ):
            out.setdefault(nid, (path, json.loads(aliases or "[]")))
    return out


def link_sources(store: Store, match: Callable[[str, str | None], bool]) -> set[int]:
    """Ids of the notes holding a link (wikilink, embed, Markdown link; body or front-matter) whose
    ``(raw target, resolved vault-relative path or None)`` ``match`` accepts. Reads every link once."""
    seen: dict[tuple[str, str | None], bool] = {}
    out: set[int] = set()
    for nid, raw, target in store.conn.execute("SELECT note_id, raw_target, target_path FROM links"):
        key = (raw, target)
        if key not in seen:
            seen[key] = match(raw, target)
        if seen[key]:
            out.add(int(nid))
    return out


def note_names_of(store: Store, note_ids: Iterable[int]) -> dict[int, list[str]]:
    """{note id: [title, *aliases]} of the given notes."""
    ids = list(note_ids)
    if not ids:
        return {}
    rows = store.conn.execute(
        "SELECT id, title, aliases FROM notes WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(ids),)
    )
    return {int(i): [str(t), *(str(a) for a in json.loads(a or "[]"))] for i, t, a in rows}


def fts_row_sizes(store: Store, ids: np.ndarray) -> np.ndarray:
    """(k,) int64: the size in tokens (all columns) of the full-text rows ``ids`` (k,), FTS5's own figures
    (:func:`cairn.store.fts.fts_row_sizes`), -1 for an id without a row."""
    id_list = np.asarray(ids, dtype=np.int64).tolist()
    sizes = _row_sizes(store.conn, id_list)
    return np.fromiter((sizes.get(i, -1) for i in id_list), dtype=np.int64, count=len(id_list))


def chunk_notes(store: Store, note_ids: Iterable[int]) -> dict[int, int]:
    """``{chunk_id: note_id}`` for every chunk of the given notes."""
    ids = list(note_ids)
    if not ids:
        return {}
    return {
        cid: nid
        for cid, nid in store.conn.execute(
            "SELECT id, note_id FROM chunks WHERE note_id IN (SELECT value FROM json_each(?))", (json.dumps(ids),)
        )
    }


def list_notes(
    store: Store,
    *,
    tags: Sequence[str] = (),
    folder: str | None = None,
    exclude_ids: Iterable[int] = (),
    limit: int = 50,
) -> tuple[list[NoteListing], int]:
    """Indexed notes sorted by path, optionally only those carrying any of the normalised ``tags``
    (nested included) and under ``folder`` (a vault-relative prefix, case-sensitive like search's
    folder scope), never those in ``exclude_ids``. Returns (at most ``limit`` notes, the total number matching)."""
    where: list[str] = ["n.status = 'ok'"]
    args: list[object] = []
    excluded = list(exclude_ids)
    if excluded:
        where.append("n.id NOT IN (SELECT value FROM json_each(?))")
        args.append(json.dumps(excluded))
    if tags:
        clause, targs = _tag_clause(tags)
        where.append(f"n.id IN (SELECT t.note_id FROM note_tags t WHERE {clause})")
        args += targs
    if folder:
        where.append("substr(n.path, 1, ?) = ?")
        args += [len(folder) + 1, folder + "/"]
    sql_where = " AND ".join(where)
    total = scalar(store.conn, f"SELECT count(*) FROM notes n WHERE {sql_where}", args)
    rows = list(
        store.conn.execute(
            f"SELECT n.id, n.path, n.title, n.indexed_at FROM notes n WHERE {sql_where} ORDER BY n.path LIMIT ?",
            [*args, int(limit)],
        )
    )
    tags_by_note = store.tags_of_notes(r[0] for r in rows)
    notes = [
        NoteListing(path=path, title=title, tags=tuple(tags_by_note.get(nid, [])), indexed_at=indexed_at)
        for nid, path, title, indexed_at in rows
    ]
    return notes, int(total)


def tag_counts(store: Store, exclude_ids: Iterable[int] = ()) -> list[TagCount]:
    """(tag, number of notes) sorted by tag, not counting the notes in ``exclude_ids``."""
    excluded = list(exclude_ids)
    if not excluded:
        return store.tag_counts()
    return [
        TagCount(*r)
        for r in store.conn.execute(
            "SELECT tag, count(*) FROM note_tags WHERE note_id NOT IN (SELECT value FROM json_each(?)) "
            "GROUP BY tag ORDER BY tag",
            (json.dumps(excluded),),
        )
    ]


class RecentNote(NamedTuple):
    """An indexed note as the recent-notes listing reads it: ``mtime_ns`` its file's modification time
    (nanoseconds since the epoch), ``first_chunk`` the id of its first chunk (None: a note with no text)."""

    note_id: int
    path: str
    title: str
    kind: str
    mtime_ns: int
    indexed_at: float
    first_chunk: int | None


def recent_notes(
    store: Store, *, tags: Sequence[str] = (), folders: Sequence[str] = (), limit: int = 8
) -> list[RecentNote]:
    """The indexed notes most recently modified first (ties by path), at most ``limit``, optionally only those
    carrying any of the normalised ``tags`` (nested included) and under any of ``folders`` (vault-relative, ASCII
    letter case ignored: the scope :meth:`~cairn.store.Store.scoped_chunk_ids` applies to a search)."""
    where: list[str] = ["n.status = 'ok'"]
    args: list[object] = []
    if tags:
        clause, targs = _tag_clause(tags)
        where.append(f"n.id IN (SELECT t.note_id FROM note_tags t WHERE {clause})")
        args += targs
    if folders:
        where.append("(" + " OR ".join("substr(n.path, 1, ?) = ? COLLATE NOCASE" for _ in folders) + ")")
        for f in folders:
            args += [len(f.strip("/")) + 1, f.strip("/") + "/"]
    rows = list(
        store.conn.execute(
            "SELECT n.id, n.path, n.title, n.kind, n.mtime_ns, n.indexed_at FROM notes n "
            f"WHERE {' AND '.join(where)} ORDER BY n.mtime_ns DESC, n.path LIMIT ?",
            [*args, int(limit)],
        )
    )
    first = "SELECT id FROM chunks WHERE note_id = ? ORDER BY ordinal LIMIT 1"  # one index lookup per note
    out = []
    for note_id, path, title, kind, mtime_ns, indexed_at in rows:
        chunk = store.conn.execute(first, (note_id,)).fetchone()
        out.append(RecentNote(note_id, path, title, kind, mtime_ns, indexed_at, chunk[0] if chunk else None))
    return out


# ------------------------------------------------------------------------ coverage
def coverage_counts(store: Store, hidden: Iterable[int] = ()) -> tuple[int, int, int]:
    """``(notes, pending, refining)``: the indexed notes (status ``ok``), those of them with a chunk not yet embedded,
    and those with every chunk embedded but one still at vector tier 1, leaving out the notes ``hidden`` (ids). One
    statement, so the counts come from one snapshot; the note ids are read from the partial indexes
    ``chunks_pending_notes`` and ``chunks_unrefined_notes`` alone (schema 6; nothing to read once every chunk is
    complete), or through ``chunks_pending`` and ``chunks_unrefined`` on an older index opened read-only."""
    left_out = json.dumps(sorted(set(hidden)))
    pending, unrefined = ("INDEXED BY chunks_pending_notes ", "INDEXED BY chunks_unrefined_notes ")
    if store.schema_version < 6:
        pending = unrefined = ""
    row = store.conn.execute(
        "SELECT (SELECT count(*) FROM notes WHERE status='ok' AND id NOT IN (SELECT value FROM json_each(?1))), "
        f"(SELECT count(DISTINCT c.note_id) FROM chunks c {pending}WHERE c.embedded=0 "
        "AND c.note_id NOT IN (SELECT value FROM json_each(?1))), "
        f"(SELECT count(DISTINCT c.note_id) FROM chunks c {unrefined}WHERE c.embedded < 2 "
        "AND c.note_id NOT IN (SELECT value FROM json_each(?1)))",
        (left_out,),
    ).fetchone()
    assert row is not None  # three aggregates: always one row
    return int(row[0]), int(row[1]), int(row[2]) - int(row[1])

#!/usr/bin/env python3
"""Benchmark: where an index's bytes on disk go, by part (a figure, not a test).

For one index file (``<data dir>/indexes/<vault>-<key>.sqlite3``, e.g. the one ``make eval`` keeps in
``.eval-cache``), SQLite's ``dbstat`` virtual table gives the pages of every table and index; they are summed by
part: the full-text index (FTS5 and its shadow tables), chunk text (``chunks``, ``chunk_units`` and their indexes),
chunk vectors and sentence vectors (sqlite-vec's tables and their shadow tables), the embedding cache, notes
and links, the rest, and the free pages. The files beside the index (the kept vector snapshot ``.vectors``, the
write-ahead log) are listed with their sizes. Read only: the index is opened read-only.

Usage: bench_disk.py INDEX.sqlite3 [INDEX.sqlite3 ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import apsw

#: Parts, in order: (label, table-name prefixes). A table goes to the first part one of whose prefixes it has.
PARTS = (
    ("full-text index (FTS5 + shadow tables)", ("chunks_fts",)),
    ("chunk vectors (sqlite-vec)", ("chunk_vectors",)),
    ("sentence vectors (sqlite-vec)", ("unit_vectors",)),
    ("embedding cache", ("embedding_cache", "sqlite_autoindex_embedding_cache")),
    ("chunk text and sentences", ("chunks", "chunk_units", "chunk_deletions")),
    ("notes, tags, links", ("notes", "note_tags", "links", "sqlite_autoindex_notes")),
)


def part_of(name: str) -> str:
    for label, prefixes in PARTS:
        if name.startswith(prefixes):
            return label
    return "other (schema, meta, sequences)"


def breakdown(path: Path) -> tuple[int, list[tuple[str, int]]]:
    """The schema version of the database file ``path`` and its (part, bytes), free pages last."""
    conn = apsw.Connection(f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    try:
        sizes: dict[str, int] = {}
        for name, size in conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"):
            sizes[part_of(name)] = sizes.get(part_of(name), 0) + int(size)
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        free = int(conn.execute("PRAGMA freelist_count").fetchone()[0]) * page_size
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()
    order = [label for label, _ in PARTS] + ["other (schema, meta, sequences)"]
    rows = [(label, sizes[label]) for label in order if label in sizes]
    rows.append(("free pages", free))
    return version, rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("indexes", type=Path, nargs="+")
    args = ap.parse_args(argv)
    print("| index | part | MB | share |")
    print("| --- | --- | --- | --- |")
    for path in args.indexes:
        version, rows = breakdown(path)
        beside = [
            (f"beside: `{p.name[len(path.name) :]}`", p.stat().st_size)
            for p in sorted(path.parent.glob(path.name + "?*"))
        ]
        total = sum(b for _, b in rows) + sum(b for _, b in beside)
        name = f"{path.name.rsplit('-', 1)[0]} (schema {version})"
        for label, size in [*rows, *beside]:
            print(f"| {name} | {label} | {size / 1e6:.1f} | {100 * size / total:.0f} % |")
        print(f"| {name} | **total** | **{total / 1e6:.1f}** | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

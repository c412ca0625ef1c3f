"""FTS5's own statistics of ``chunks_fts``, read through FTS5's extension API (apsw's :class:`apsw.FTS5ExtensionApi`)
rather than by decoding its private records: the figures ``bm25()`` itself uses, for the in-memory BM25 of
:mod:`cairn.search.keyword`.

Two auxiliary functions are registered on every connection (:func:`register`): :data:`TOTALS` (the row count and
the tokens in all columns of all rows) and :data:`ROW_SIZE` (the tokens in all columns of one row). An auxiliary
function runs only inside a query of the FTS5 table, hence the ``SELECT … FROM chunks_fts`` below.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import apsw

#: ``cairn_fts_totals(chunks_fts)`` → ``"[rows, tokens]"`` (JSON) for the whole table.
TOTALS = "cairn_fts_totals"
#: ``cairn_fts_row_size(chunks_fts)`` → the tokens in all columns of the current row.
ROW_SIZE = "cairn_fts_row_size"


def _totals(api: apsw.FTS5ExtensionApi, *args: apsw.SQLiteValue) -> str:
    return json.dumps([api.row_count, api.column_total_size()])


def _row_size(api: apsw.FTS5ExtensionApi, *args: apsw.SQLiteValue) -> int:
    return api.column_size()


def register(conn: apsw.Connection) -> None:
    """Register :data:`TOTALS` and :data:`ROW_SIZE` on ``conn`` (once per connection)."""
    conn.register_fts5_function(TOTALS, _totals)
    conn.register_fts5_function(ROW_SIZE, _row_size)


def fts_totals(conn: apsw.Connection) -> tuple[int, int]:
    """``chunks_fts``'s (rows, tokens in all columns of all rows); (0, 0) for an empty table."""
    got = conn.execute(f"SELECT {TOTALS}(chunks_fts) FROM chunks_fts LIMIT 1").fetchone()
    if got is None:
        return 0, 0
    rows, tokens = json.loads(got[0])
    return int(rows), int(tokens)


def fts_row_sizes(conn: apsw.Connection, ids: Sequence[int]) -> dict[int, int]:
    """``{row id: tokens in all its columns}`` for the rows of ``chunks_fts`` among ``ids`` (an id without a row is
    left out); one statement whatever the number of ids (bound as one JSON array)."""
    if not len(ids):
        return {}
    rows = conn.execute(
        f"SELECT rowid, {ROW_SIZE}(chunks_fts) FROM chunks_fts WHERE rowid IN (SELECT value FROM json_each(?))",
        (json.dumps([int(i) for i in ids]),),
    )
    return {int(rowid): int(size) for rowid, size in rows}

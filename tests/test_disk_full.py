"""A full disk while indexing: ``/health`` says so, and indexing resumes by itself once space is freed.

The disk is filled for real SQLite: every connection of the store gets ``PRAGMA max_page_count`` at the
file's current size, so the next write that needs a page fails with SQLite's own ``SQLITE_FULL`` (the error a
full disk gives); raising the limit on every connection is the space coming back.
"""

from __future__ import annotations

import apsw
import pytest

from cairn.store import Store
from support import embedders
from support.cairns import open_cairn
from support.waits import wait_until

embedder = embedders.stand_in  # the fixture: the stand-in model, these tests only move data

#: Seconds indexing may take to resume once space is back (a bound on a hang: the first retry is due in a few).
RESUME_DEADLINE_S = 120
PAGE_PRAGMAS = ("page_count", "freelist_count", "page_size")


class Disk:
    """The store's connections, each opened with ``PRAGMA max_page_count`` = :attr:`pages` (None: no limit)."""

    def __init__(self) -> None:
        self.pages: int | None = None
        self.conns: list[apsw.Connection] = []

    def limit(self, conn: apsw.Connection) -> None:
        conn.execute(f"PRAGMA max_page_count={self.pages or 2**31 - 2}")

    def fill(self, pages: int) -> None:
        self.pages = pages
        for conn in self.conns:
            self.limit(conn)

    def free(self) -> None:
        self.fill(0)


@pytest.fixture
def disk(monkeypatch) -> Disk:
    disk = Disk()
    opened = Store._open

    def open_limited(self: Store) -> apsw.Connection:
        conn = opened(self)
        disk.conns.append(conn)
        disk.limit(conn)
        return conn

    monkeypatch.setattr(Store, "_open", open_limited)
    return disk


@pytest.mark.slow  # indexes a note big enough to fill the disk, then again once space returns
def test_a_full_disk_degrades_health_and_indexing_resumes_when_space_returns(tmp_path, embedder, disk):
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "First.md").write_text("# First\n\nThe ferry leaves at noon.\n", encoding="utf-8")
    cairn = open_cairn(vault, tmp_path / "data", embedder)
    try:
        cairn.indexing.index()
        assert cairn.indexing.health()["status"] == "ok"
        conn = cairn.store.conn
        conn.execute("VACUUM")  # no free page left inside the file: the next note needs new pages
        pages, free, page_size = (conn.execute(f"PRAGMA {name}").fetchone()[0] for name in PAGE_PRAGMAS)
        disk.fill(pages)
        words = " ".join(f"lantern{n}" for n in range((free + 8) * page_size // 10))  # its text alone: 8 pages
        (vault / "Big.md").write_text(f"# Big\n\nThe harbour log: {words}.\n", encoding="utf-8")
        try:
            cairn.indexing.index()
        except Exception:  # the run fails for lack of space (what it raises is not the point)
            pass
        health = cairn.indexing.health()
        assert health["status"] == "degraded"
        assert health["store"] == {"ok": False, "reason": "disk_full"}
        assert "Big.md" not in {p for p, s in cairn.store.note_states().items() if s.status == "ok"}
        disk.free()  # space is back; nobody asks for a re-index
        wait_until(
            "indexing to resume by itself",
            lambda: (s := cairn.store.note_states().get("Big.md")) is not None and s.status == "ok",
            RESUME_DEADLINE_S,
        )
        wait_until("/health to be ok again", lambda: cairn.indexing.health()["status"] == "ok", RESUME_DEADLINE_S)
        assert cairn.indexing.health()["store"] == {"ok": True, "reason": None}
    finally:
        cairn.close()

"""The vault folder disappears (moved, renamed, a drive unmounted) and comes back while the daemon runs:
``/index/stats`` says it is missing (``watching`` false, ``indexError`` naming it) while it is gone, and once it
is back a reconcile runs by itself and its success clears ``indexError`` (no one has to ask for a full re-index).

Real Cairn (SQLite + ONNX model) over a writable copy of the sample vault; no watcher (the background re-index
path), waits on the re-index thread with a timeout.
"""

from __future__ import annotations

import pytest

from support import embedders
from support.requests import search_request

embedder = embedders.stand_in  # the fixture: the stand-in model, these tests only move data


def test_index_error_clears_by_itself_once_the_vault_folder_is_back(fresh_cairn):
    cairn = fresh_cairn
    cairn.indexing.index()
    vault = cairn.config.vault
    away = vault.with_name(vault.name + ".away")
    vault.rename(away)
    try:
        gone = cairn.indexing.stats()
        assert gone["watching"] is False and "missing" in gone["indexError"]
        with pytest.raises(FileNotFoundError):
            cairn.indexing.index()  # the reconcile a reindex request would run
        assert cairn.indexing.stats()["indexError"] and cairn.indexing.wait_for_indexing(30)
    finally:
        away.rename(vault)
    (vault / "Back.md").write_text("# Back\nzqbackword is here again.\n", encoding="utf-8")
    cairn.indexing.stats()  # a poll of /index/stats sees the folder back and queues the reconcile
    assert cairn.indexing.wait_for_indexing(60)
    back = cairn.indexing.stats()
    assert back["indexError"] is None
    assert cairn.query.search(search_request("zqbackword")).hits[0].file_path == "Back.md"

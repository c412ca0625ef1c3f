"""Freshness of the daemon's save lane (SaveLane.save) while a long vector phase runs, on the real model
and a real SQLite file. The figures (keyword/dense freshness p95 under load) are in tests/bench/bench_freshness.py."""

from __future__ import annotations

import pytest

import cairn.index.lanes as lanes_module
from support import embedders
from support.cairns import open_cairn
from support.requests import search_request

embedder = embedders.stand_in  # the fixture: the stand-in model, these tests only move data


@pytest.mark.slow  # a vector phase long enough to change a note during it
def test_a_change_waiting_during_a_long_vector_phase_is_applied_before_the_rest_of_those_vectors(
    tmp_path, embedder, monkeypatch
):
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Home.md").write_text("# Home\n\nStart here.\n", encoding="utf-8")
    cairn = open_cairn(vault, tmp_path / "data", embedder)
    try:
        cairn.indexing.index()
        hints = cairn.indexing.hints  # no watcher follows them: the test hands hints over itself
        monkeypatch.setattr(lanes_module, "WATCH_EMBED_BATCH", 4)
        paragraphs = [
            f"## Part {i}\n\n"
            + " ".join(f"Field note {i}.{j} records stone number {i * 10 + j} of the cairn." for j in range(8))
            for i in range(24)
        ]
        (vault / "Big.md").write_text("# Big\n\n" + "\n\n".join(paragraphs) + "\n", encoding="utf-8")

        slices = []
        real_embed_batch = cairn.vectors.embed_batch

        def embed_batch(*args, **kw):
            out = real_embed_batch(*args, **kw)
            slices.append(out)
            if len(slices) == 1:  # the user saves another note while Big.md's vectors are being computed
                (vault / "New.md").write_text("# New\n\nThe quillwort grows by the lake.\n", encoding="utf-8")
                hints.add(["New.md"])
            return out

        monkeypatch.setattr(cairn.vectors, "embed_batch", embed_batch)
        first = cairn.indexing.save_lane.save({"Big.md"})
        assert first.added == 1 and len(slices) == 1  # it gave way after one slice...
        left = cairn.store.count_pending()
        assert left > 0  # ...with Big.md's other vectors still to do

        hints.pause()  # drops the hint: this test applies it itself, as the watcher's next batch would
        second = cairn.indexing.save_lane.save({"New.md"})
        assert second.added == 1
        assert [h.file_path for h in cairn.query.search(search_request("quillwort lake", top_k=3)).hits][:1] == [
            "New.md"
        ]
        assert cairn.store.count_pending() == 0  # and the remaining vectors followed in that batch
        assert second.vectors_written == left + 1
    finally:
        cairn.close()

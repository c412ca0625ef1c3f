"""The daemon's memory breakdown (:mod:`cairn.memory`): ``cairn status --json`` shows it for the running daemon,
by part, adding up to its resident set; the parts count what the search side holds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cairn.embedder import DEFAULT_MODEL_DIR
from cairn.memory import PARTS, process_memory
from cairn.search.memory import search_parts
from support.cairns import open_cairn
from support.cli import cairn_executable
from support.daemons import INDEX_DEADLINE_S, NOTES, running_daemon
from support.requests import search_request
from support.vaults import SAMPLE_VAULT, write_vault
from support.waits import wait_until

MB = float(1 << 20)


def _status(daemon_env: dict[str, str], vault: Path) -> dict:
    proc = subprocess.run(
        [cairn_executable(), "status", "--vault", str(vault), "--json"],
        env=daemon_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.e2e
def test_cairn_status_json_shows_the_running_daemons_memory_by_part(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    with running_daemon(home, write_vault(tmp_path / "vault", NOTES)) as daemon:

        def indexed():
            status, stats = daemon.get_json("/index/stats", token=daemon.token)
            done = status == 200 and stats["pending"] == 0 and not stats["indexing"] and stats["notes"]
            return stats if done else None

        wait_until("the first index", indexed, INDEX_DEADLINE_S, proc=daemon.proc, log=home / "serve.stderr")
        status, _ = daemon.get_json("/search", token=daemon.token, params={"q": "boiler pressure", "topK": 3})
        assert status == 200
        out = _status(daemon.env, daemon.vault)
        rss_now = process_memory(daemon.proc.pid)["rss"]
        memory = out["memory"]
        assert set(memory) == {"rssMB", "peakMB", "parts", "workers", "caches"}
        assert list(memory["parts"]) == list(PARTS)
        assert set(memory["workers"]) == {"pdfWorker"}
        assert memory["workers"]["pdfWorker"] is None  # no PDF in the vault: no reader process
        # The parts add up to the resident set (each rounded to 0.1 MB), which is the daemon's own.
        assert sum(memory["parts"].values()) == pytest.approx(memory["rssMB"], abs=0.1 * len(PARTS))
        assert rss_now is not None and memory["rssMB"] == pytest.approx(rss_now / MB, rel=0.25)
        assert memory["peakMB"] >= memory["rssMB"]
        # The embedding model's weights are resident: at least half the ONNX file.
        assert memory["parts"]["onnx"] >= 0.5 * (DEFAULT_MODEL_DIR / "model.onnx").stat().st_size / MB
        text = subprocess.run(
            [cairn_executable(), "status", "--vault", str(daemon.vault)],
            env=daemon.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "Memory:" in text.stdout and "MB resident" in text.stdout


def test_cairn_status_json_without_a_daemon_shows_no_memory(tmp_path):
    vault = write_vault(tmp_path / "vault", NOTES)
    from support.cli import cairn_env

    out = _status(cairn_env(tmp_path / "home"), vault)
    assert out["daemon"]["running"] is False and out["memory"] is None


def test_the_vectors_part_counts_the_snapshot_searches_load(tmp_path, embedder):

    cairn = open_cairn(write_vault(tmp_path / "vault", NOTES), tmp_path / "data", embedder)
    try:
        cairn.indexing.index()
        before = search_parts(cairn.query)
        assert before["vectors"] == 0 and before["int8"] == 0  # nothing loaded before the first dense search
        cairn.query.search(search_request("boiler pressure", top_k=3))
        after = search_parts(cairn.query)
        stats = cairn.store.stats()
        # Every chunk vector is held as an int8 copy (384 bytes) at least; its float32 row (384 × 4 bytes) is not
        # held: only the row maps are.
        assert after["int8"] >= stats.vectors * 384
        assert 0 < after["vectors"] < stats.vectors * 384
        assert after["caches"] > before["caches"]  # the ranked result and its dense scores are kept
        assert cairn.indexing.stats()["memory"]["parts"]["onnx"] > 0
    finally:
        cairn.close()


def _hits(service, question: str) -> list[tuple]:
    return [(h.file_path, h.symbol, h.score, h.cosine) for h in service.search(search_request(question, top_k=5)).hits]


def test_float32_vectors_read_from_a_file_give_the_results_of_vectors_held_in_memory(
    tmp_path, embedder, monkeypatch, caplog
):
    """The float32 rows live in a temporary file that nothing sees in the index folder; where no file can be
    written there, they are held in memory (said in the log) and every result is the same, to the last bit."""
    from cairn.search import SearchService
    from cairn.search.float_rows import RowFile

    cairn = open_cairn(write_vault(tmp_path / "vault", NOTES), tmp_path / "data", embedder)
    try:
        cairn.indexing.index()
        folder = cairn.store.path.parent
        kept = (cairn.store.path.name + ".vectors", cairn.store.path.name + ".bm25")  # kept for the next start

        def names() -> list[str]:
            return sorted(p.name for p in folder.iterdir() if p.name not in kept)

        listed = names()
        questions = ["boiler pressure", "queen cells in the hive", "tyre pressure for touring", "summer honey"]
        from_file = {q: _hits(cairn.query, q) for q in questions}
        assert names() == listed  # the rows' temporary file is never a name in the folder
        assert search_parts(cairn.query)["vectors"] < cairn.store.stats().vectors * 384

        def cannot_write(self, folder, base=None):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(RowFile, "__init__", cannot_write)
        held = SearchService(cairn.store, embedder)
        with caplog.at_level("WARNING", logger="cairn.search.float_rows"):
            assert {q: _hits(held, q) for q in questions} == from_file
        assert "vectors held in memory" in caplog.text and "No space left on device" in caplog.text
        assert search_parts(held)["vectors"] >= cairn.store.stats().vectors * 384 * 4
    finally:
        cairn.close()


_EMBED_SCRIPT = """
import json, sys
from cairn.embedder import Embedder
from cairn.memory import rss_bytes
e = Embedder(threads=2)
loaded = rss_bytes()
words = "hive inspection queen cells honey harvest boiler pressure touring bike tyre".split()
texts = [" ".join(words[(i + j) % len(words)] for j in range(300)) for i in range(64)]
e.embed(texts)
print(json.dumps({"loaded": loaded, "after": rss_bytes()}))
"""


@pytest.mark.slow  # a subprocess loads the model and embeds 64 long texts
def test_embedding_a_bulk_of_long_chunks_gives_its_work_memory_back(tmp_path):
    """After indexing-sized batches of long chunks, the process holds about what it held with the model loaded:
    onnxruntime's attention buffers are not kept for the daemon's lifetime."""
    import os
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "daemon")}
    proc = subprocess.run(
        [sys.executable, "-c", _EMBED_SCRIPT], env=env, capture_output=True, text=True, timeout=600, check=True
    )
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (figures["after"] - figures["loaded"]) / MB < 60, figures


@pytest.mark.slow  # embeds 40 long texts
def test_the_text_vector_cache_is_bounded_in_bytes_whatever_the_texts_lengths(tmp_path, embedder):
    from cairn.embedding import VectorCache
    from cairn.store import Store

    store = Store(tmp_path / "index.sqlite3")
    try:
        cache = VectorCache(store, embedder, max_bytes=64 << 10)
        long_texts = [f"note {i}: " + "the boiler pressure should sit at 1.3 bar " * 40 for i in range(40)]
        vectors = cache.embed(long_texts)
        assert vectors.shape == (40, embedder.dim)
        # Entries of ~3.3 KB of text and 1.5 KB of vector: far fewer than 40 fit in 64 KB.
        assert cache.nbytes() <= 64 << 10 and 0 < len(cache) < 40
        assert np.array_equal(cache.embed(long_texts[-1:])[0], vectors[-1])  # the newest is held, unchanged
    finally:
        store.close()


def test_the_dense_scores_kept_per_question_are_bounded_in_bytes(tmp_path, embedder, monkeypatch):
    from cairn.search.cache import ENTRY_BYTES
    from cairn.search.vectors import Vectors

    cairn = open_cairn(write_vault(tmp_path / "vault", NOTES), tmp_path / "data", embedder)
    try:
        cairn.indexing.index()
        snap = cairn.query.vectors.current()
        per_question = snap.dense.query(embedder.embed_query("boiler pressure")).nbytes  # the same for any question
        # Room for three entries: each question's scores, its key (a short question) and the entry's slot.
        monkeypatch.setattr(Vectors, "SCORES_CACHE_BYTES", 3 * (per_question + ENTRY_BYTES + 100), raising=False)
        bounded = Vectors(cairn.store)
        snap = bounded.current()
        questions = ["hive", "queen cells", "honey", "tyre pressure", "boiler", "summer", "bikes"]
        for question in questions:
            bounded.query_scores(snap, question, embedder.embed_query(question))
        assert len(bounded.scores) == 3  # the three newest, whatever the entry count allowed before
        assert bounded.query_scores(snap, "bikes", embedder.embed_query("bikes")) is not None
    finally:
        cairn.close()


@pytest.mark.slow  # indexes the sample vault and runs 600 searches with the real model
def test_the_search_caches_stay_within_their_bounds_after_many_unique_searches(tmp_path, embedder, monkeypatch):
    """A client that keeps asking what it never asked before (search-as-you-type, an agent) does not grow the
    daemon's memory: after 600 unique searches the dense scores, the keyword values and the ranked results kept
    each hold at most their bound, counted by what their entries hold now, and the dense scores' accounted size is
    what they hold (sized once: nothing grows after it is cached)."""
    import gc
    import random
    import re

    from cairn.search.dense import DenseQuery
    from cairn.search.keyword import KeywordIndex
    from cairn.search.service import SearchService
    from cairn.search.vectors import Vectors

    dense_bound, term_bound, result_bound = 256 << 10, 128 << 10, 128 << 10
    monkeypatch.setattr(Vectors, "SCORES_CACHE_BYTES", dense_bound)
    monkeypatch.setattr(KeywordIndex, "TERM_CACHE_BYTES", term_bound, raising=False)
    monkeypatch.setattr(SearchService, "RESULT_CACHE_BYTES", result_bound, raising=False)
    words = sorted({w.lower() for p in SAMPLE_VAULT.rglob("*.md") for w in re.findall(r"[A-Za-z]{5,}", p.read_text())})
    rng = random.Random(5)
    cairn = open_cairn(SAMPLE_VAULT, tmp_path / "data", embedder)
    try:
        cairn.indexing.index()
        query = cairn.query
        gc.collect()
        # Other tests' Cairns in this process keep their own dense scores (each cache with its default bound):
        # held here, so their ids stay theirs, and only the ones this test's searches left alive are counted.
        earlier = [o for o in gc.get_objects() if isinstance(o, DenseQuery)]
        theirs = {id(o) for o in earlier}
        for _ in range(600):  # a vault word (dense and keyword hits to rank) and a word never seen before
            nonce = "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(8))
            assert query.search(search_request(f"{rng.choice(words)} {nonce}")).hits is not None
        gc.collect()
        alive = [o for o in gc.get_objects() if isinstance(o, DenseQuery) and id(o) not in theirs]
        assert len(alive) > 1 and sum(q.nbytes for q in alive) <= dense_bound
        assert query.vectors.scores.held_bytes == query.vectors.scores.nbytes() <= dense_bound
        # Both keyword caches (values per term, per phrase) together; terms matching nothing count too.
        assert 0 < query.keyword.memory()["caches"] <= 2 * term_bound
        assert 0 < query.results.nbytes() <= result_bound
    finally:
        cairn.close()


def _word_vault(folder: Path, notes: int) -> Path:
    """``notes`` notes of ten sentences drawn from fifteen words (fixed seed): many chunks and sentences to score."""
    import random

    rng = random.Random(1)
    words = "garden lease bread monday compost basil tomato physics river stone lamp chair window paper music".split()
    folder.mkdir(parents=True)
    for i in range(notes):
        sentences = (" ".join(rng.choice(words) for _ in range(12)) for _ in range(10))
        (folder / f"Note {i}.md").write_text(f"# Note {i}\n" + ". ".join(sentences) + ".\n", encoding="utf-8")
    return folder


@pytest.mark.e2e
@pytest.mark.slow  # 1,200 searches through a real daemon
def test_a_daemon_asked_only_new_questions_keeps_every_cache_within_its_bound(tmp_path):
    """Any client can ask what it never asked before (search-as-you-type, an agent probing): after 1,200 unique
    searches over HTTP, ``/index/stats`` shows every cache within its bounds, and what it accounts is what its
    entries hold now (each sized once, from what it holds: nothing grows once cached). Before, the dense scores of
    each question kept growing after they were cached, past the 16 MiB bound, while the count said otherwise."""
    import random
    import threading

    home = tmp_path / "home"
    home.mkdir()
    rng = random.Random(3)
    questions = {f"garden {''.join(rng.choice('bcdfghjklmnpqrstvwxz') for _ in range(8))}" for _ in range(1200)}
    with running_daemon(home, _word_vault(tmp_path / "vault", 200)) as daemon:

        def indexed():
            status, stats = daemon.get_json("/index/stats", token=daemon.token)
            done = status == 200 and stats["pending"] == 0 and not stats["indexing"] and stats["vectors"] == 200
            return stats if done else None

        wait_until("the first index", indexed, INDEX_DEADLINE_S, proc=daemon.proc, log=home / "serve.stderr")
        todo, failed, lock = iter(sorted(questions)), [], threading.Lock()

        def client() -> None:
            while (q := next(todo, None)) is not None:
                status, body = daemon.get_json("/search", token=daemon.token, params={"q": q, "topK": 5})
                if status != 200 or not body.get("results"):
                    with lock:
                        failed.append((q, status))

        threads = [threading.Thread(target=client) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failed, failed[:3]
        status, stats = daemon.get_json("/index/stats", token=daemon.token)
    assert status == 200
    memory = stats["memory"]
    caches = memory["caches"]
    assert set(caches) == {
        "results",
        "denseScores",
        "termValues",
        "phraseValues",
        "textVectors",
        "withheldViews",
        "withheldVectors",
    }
    for name, cache in caches.items():
        assert cache["entries"] <= cache["maxEntries"], name
        assert cache["maxBytes"] is None or cache["bytes"] <= cache["maxBytes"], name
    # Every question left its dense scores, vector and ranked result, up to each cache's bounds.
    assert caches["denseScores"]["entries"] >= min(1000, caches["denseScores"]["maxEntries"])
    assert caches["results"]["entries"] == caches["results"]["maxEntries"]
    assert caches["textVectors"]["entries"] >= len(questions)
    # Honest: the bytes accounted when the entries were put are the bytes their entries hold now (the caches'
    # part of the breakdown measures them again; each figure rounded to 0.1 MB there).
    accounted = sum(cache["bytes"] for cache in caches.values())
    assert memory["parts"]["caches"] == pytest.approx(accounted / MB, abs=0.1)

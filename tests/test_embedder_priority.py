"""Questions before bulk work: Embedder.embed_background gives way to foreground calls (real ONNX model)."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest

from cairn.embedder import Embedder
from cairn.embedding import embed_in_slices

TEXTS = [f"note {i}: " + "backlinks and graph view " * (i % 5) + f"item {i}" for i in range(40)]


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder(variant="int8", threads=2)


def _in_thread(fn) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def run() -> None:
        try:
            box["out"] = fn()
        except BaseException as exc:  # surfaced by the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def test_background_vectors_are_the_foreground_ones_in_input_order(embedder):
    np.testing.assert_allclose(embedder.embed_background(TEXTS, batch_size=4), embedder.embed(TEXTS, batch_size=4))
    assert embedder.embed_background([]).shape == (0, 384)


def test_bulk_work_waits_while_a_question_is_in_flight_and_resumes_after(embedder):
    runs = threading.Event()

    def stop(_done: list[int]) -> bool:
        runs.set()
        return False

    with embedder.foreground():
        t, box = _in_thread(lambda: embedder.embed_background(TEXTS, batch_size=4, stop=stop))
        assert not runs.wait(0.3), "a bulk ONNX run started while a question was in flight"
    assert runs.wait(10)
    t.join(30)
    assert box["out"].shape == (len(TEXTS), 384)


def test_a_question_is_answered_while_a_bulk_run_is_still_in_progress(embedder):
    inside, release = threading.Event(), threading.Event()

    def stop(_done: list[int]) -> bool:
        if not inside.is_set():
            inside.set()
            release.wait(30)  # holds a bulk lane, as a long ONNX run would
        return False

    t, box = _in_thread(lambda: embedder.embed_background(TEXTS, batch_size=4, stop=stop))
    try:
        assert inside.wait(10)
        q = embedder.embed_query("how do I link notes?")  # must not queue behind the held lane
        assert q.shape == (384,)
        np.testing.assert_allclose(q, embedder.embed(["how do I link notes?"])[0])
    finally:
        release.set()
        t.join(30)
    assert "error" not in box


@pytest.mark.skipif(sys.platform != "linux", reason="thread niceness is per thread on Linux only")
def test_bulk_runs_on_threads_nicer_than_the_caller(embedder):
    seen: list[tuple[int, int]] = []

    def stop(_done: list[int]) -> bool:
        tid = threading.get_native_id()
        seen.append((tid, os.getpriority(os.PRIO_PROCESS, tid)))
        return False

    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    embedder.embed_background(TEXTS, batch_size=4, stop=stop)
    assert seen and all(tid != threading.get_native_id() for tid, _ in seen)
    assert all(nice > mine or nice == 19 for _, nice in seen)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine


def test_progress_is_reported_on_the_callers_thread_up_to_every_text(embedder):
    calls: list[tuple[int, int]] = []
    caller = threading.get_ident()

    def on_slice(done: int, total: int) -> None:
        assert threading.get_ident() == caller
        calls.append((done, total))

    vecs = embed_in_slices(embedder, TEXTS, 16, on_slice=on_slice)
    assert sorted(vecs) == list(range(len(TEXTS)))
    assert calls[-1] == (len(TEXTS), len(TEXTS))
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_a_stop_keeps_the_texts_embedded_so_far(embedder):
    runs = 0

    def should_stop() -> bool:
        nonlocal runs
        runs += 1
        return runs > 1  # the first run goes ahead, every later one is skipped

    vecs = embed_in_slices(embedder, TEXTS, 16, should_stop=should_stop)
    assert 0 < len(vecs) < len(TEXTS)
    alone = embedder.embed([TEXTS[i] for i in sorted(vecs)])  # int8: other batches, other activation scales
    assert ((np.stack([vecs[i] for i in sorted(vecs)]) * alone).sum(axis=1) > 0.98).all()


@pytest.mark.skipif(sys.platform != "linux", reason="thread niceness is per thread on Linux only")
def test_a_foreground_slice_call_runs_at_the_callers_priority(embedder):
    """background=False (a save's vectors): the model runs as nice as the caller, not on the nicer bulk lanes."""
    nice: list[int] = []

    def should_stop() -> bool:
        nice.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return False

    vecs = embed_in_slices(embedder, TEXTS, 16, should_stop=should_stop, background=False)
    assert sorted(vecs) == list(range(len(TEXTS)))
    assert nice and set(nice) == {os.getpriority(os.PRIO_PROCESS, threading.get_native_id())}

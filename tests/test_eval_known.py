"""The pieces of make eval's naive pipeline and known-item checks that need no index (tests/bench)."""

from __future__ import annotations

import hashlib
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))

from eval_known import Vocabulary, _link_scores, rare_terms, title_words  # noqa: E402
from eval_naive import NaivePipeline, WholeChunks, text_key, whole_chunk_text  # noqa: E402


def test_whole_chunk_text_puts_title_and_heading_path_in_front() -> None:
    assert whole_chunk_text("Sourdough", "Bake › Proof", "Cold proof overnight.") == (
        "Sourdough\nBake › Proof\nCold proof overnight."
    )
    assert whole_chunk_text("Sourdough", "", "Cold proof overnight.") == "Sourdough\nCold proof overnight."
    assert text_key("Sourdough\nx") == hashlib.sha256(b"Sourdough\nx").hexdigest()


class _Lists(NaivePipeline):
    """The naive pipeline with fixed BM25 and dense lists (chunk ids), to check the fusion alone."""

    def __init__(self, bm25: list[int], dense: list[int], paths: dict[int, str]) -> None:
        ids = np.array(sorted(paths), dtype=np.int64)
        super().__init__(None, WholeChunks(ids, paths, np.zeros((len(ids), 384), np.float32)), None)
        self._bm25, self._dense = bm25, dense

    def bm25(self, question: str, limit: int = 60) -> list[int]:
        return self._bm25[:limit]

    def dense(self, question: str, limit: int = 60) -> list[int]:
        return self._dense[:limit]


def test_naive_fusion_is_plain_rrf_and_a_note_ranks_at_its_best_chunk() -> None:
    paths = {1: "a.md", 2: "b.md", 3: "c.md", 4: "a.md", 5: "d.md"}
    naive = _Lists(bm25=[1, 2, 3], dense=[3, 4, 5], paths=paths)
    # 3: 1/63 + 1/61 (in both lists) > 1: 1/61 > 4: 1/62 = 2: 1/62 (tie by chunk id) > 5: 1/63
    assert naive.chunk_ranking("q") == [3, 1, 2, 4, 5]
    assert naive.note_ranking("q") == ["c.md", "a.md", "b.md", "d.md"]
    assert naive.note_ranking("q", "naive-dense") == ["c.md", "a.md", "d.md"]
    assert naive.note_ranking("q", limit=2) == ["c.md", "a.md"]


def _vocab(terms: dict[str, tuple[set[str], str]]) -> Vocabulary:
    return Vocabulary(
        notes={t: notes for t, (notes, _) in terms.items()},
        spellings={t: Counter({word: 1}) for t, (_, word) in terms.items()},
    )


def test_rare_terms_are_those_of_one_to_three_notes_minus_numbers_short_words_and_split_words() -> None:
    vocab = _vocab(
        {
            "banneton": ({"Sourdough.md"}, "banneton"),
            "okafor": ({"People.md", "Notes.md", "Trip.md"}, "Okafor"),
            "common": ({"a.md", "b.md", "c.md", "d.md"}, "common"),  # four notes: not rare
            "2024": ({"a.md"}, "2024"),
            "abc": ({"a.md"}, "abc"),
            "about": ({"a.md"}, "about"),  # a stopword: the query parser drops it
        }
    )
    sample, counts = rare_terms(vocab, n=10, seed=1)
    assert sorted(sample) == [("banneton", "banneton"), ("okafor", "Okafor")]
    assert counts == {
        "rare words eligible": 2,
        "skipped (not kept whole by the query parser)": 1,
        "skipped (pure number)": 1,
        "skipped (shorter than 4)": 1,
    }
    assert rare_terms(vocab, n=1, seed=1)[0] == rare_terms(vocab, n=1, seed=1)[0]


def test_title_words_and_link_scores() -> None:
    assert title_words("T - Author") == ["T", "Author"]
    assert title_words("Cards view") == ["Cards", "view"]
    linked = {"a.md", "b.md", "c.md"}
    assert _link_scores(linked, ["a.md", "x.md", "c.md"]) == (pytest.approx(0.2), pytest.approx(2 / 3))
    many = {f"{i}.md" for i in range(20)}
    assert _link_scores(many, [f"{i}.md" for i in range(10)]) == (1.0, 1.0)

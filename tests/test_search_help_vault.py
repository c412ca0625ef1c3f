"""cairn.search over the real Obsidian help vault (../shared/vaults/obsidian-help): every note indexed, callouts and
embeds found, off-corpus questions not found, re-indexing embeds nothing, the keyword ranking is FTS5's own, the
in-memory dense scores are every stored vector's, the context budget is exact when it matters, a question asking for
code boosts the code chunks."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import numpy as np
import pytest

from cairn.answers import AnswerService
from cairn.config import NOT_FOUND_ANSWER
from cairn.ranking import FusionWeights, QueryClassifier
from cairn.search import SearchService
from support.answers import ask
from support.requests import ask_request, search_request


def test_help_vault_indexes_every_note(help_cairn):
    stats = help_cairn.indexing.stats()
    assert stats["notes"] == 173 and stats["skipped"] == 0 and stats["pending"] == 0


def test_help_vault_callout_question_cites_callouts(help_cairn):
    answer = ask(help_cairn.query, "How do I make a callout?")
    assert not answer.not_found
    assert answer.sources[0].hit.file_path == "Editing and formatting/Callouts.md"
    assert re.search(r"\[1\]", answer.text)


def test_help_vault_off_corpus_question_is_not_found(help_cairn):
    answer = ask(help_cairn.query, "What is the capital of France?")
    assert answer.not_found and answer.text == NOT_FOUND_ANSWER


def test_help_vault_embed_question_finds_embed_files(help_cairn):
    hits = help_cairn.query.search(search_request("how do I embed a note in another note")).hits
    assert hits[0].file_path == "Linking notes and files/Embed files.md"


def test_help_vault_reindex_embeds_nothing(help_cairn):
    report = help_cairn.indexing.index()
    assert report.texts_embedded == 0 and report.added == report.updated == 0


def test_searching_for_a_sentence_of_a_long_section_finds_it(help_cairn):
    # One sentence in the middle of a long chunk: the chunk's mean vector is far from it, the sentence is not.
    hits = help_cairn.query.search(search_request("Right-click a property to rename it globally")).hits
    assert any(h.file_path == "Plugins/Properties view.md" for h in hits[:3])


def _fts5_ranked(store, match: str, limit: int, excluding: Sequence[int] = ()) -> list[int]:
    """The chunk ids FTS5 itself ranks best by BM25 for ``match``, leaving out ``excluding``, at most ``limit``."""
    return [
        cid
        for cid, _ in store.conn.execute(
            "SELECT rowid, bm25(chunks_fts) AS s FROM chunks_fts WHERE chunks_fts MATCH ? "
            "AND rowid NOT IN (SELECT value FROM json_each(?)) ORDER BY s LIMIT ?",
            (match, json.dumps(list(excluding)), limit),
        )
    ]


@pytest.mark.parametrize(
    "question",
    [
        "How do I embed a note in another note?",
        "callout types and folding",
        "What is a vault?",
        "keyboard shortcut for the command palette",
        "sync between devices with end-to-end encryption",
    ],
)
def test_keyword_ranking_from_cached_terms_is_fts5s_own(help_cairn, question):
    # The BM25 list is summed from per-term results kept in memory; it must be the list FTS5 ranks itself.
    from cairn.search.query import fts_match_expression

    query = SearchService(help_cairn.query.store, help_cairn.query.embedder)
    expected = _fts5_ranked(query.store, fts_match_expression(question), 60)
    assert expected and query.keyword_ranking(question, 60) == expected
    assert query.keyword_ranking(question, 60) == expected  # again, from the cached terms
    half = expected[::2]
    assert query.keyword_ranking(question, 20, within=half) == [c for c in expected if c in set(half)][:20]
    assert query.keyword_ranking(question, 20, excluding=half) == _fts5_ranked(
        query.store, fts_match_expression(question), 20, excluding=half
    )


def test_in_memory_dense_scores_equal_every_stored_vector_scored_one_by_one(help_cairn):
    # The in-memory matrix holds each distinct sentence vector once (repeated sentences share one row);
    # each chunk's best sentence cosine must still be the best over all of its own stored sentence vectors.
    query = SearchService(help_cairn.query.store, help_cairn.query.embedder)
    snap = query.vectors.current()
    qvec = query.embedder.embed_query("How do I embed a note in another note?")
    cos, best = snap.scores(qvec)
    ids = [int(c) for c in snap.chunk_ids]
    chunk_vecs, unit_vecs = query.store.vectors(ids), query.store.unit_vectors(ids)
    assert len(snap.sentences) < sum(len(v) for v in unit_vecs.values())  # the help vault repeats sentences too
    for row, cid in enumerate(ids):
        assert abs(cos[row] - float(chunk_vecs[cid] @ qvec)) < 1e-5
        expected = float(np.max(unit_vecs[cid] @ qvec)) if cid in unit_vecs else -1.0
        assert abs(best[row] - expected) < 1e-5


@pytest.mark.shared_data("eval/dev.jsonl")
def test_the_context_budget_is_the_exact_count_whenever_it_matters(help_cairn):
    """The budget check uses each source's indexed token count as an upper bound and counts exactly only when the
    bounds do not fit: so every bound must be ≥ the exact count, and a block's tokens its header's plus its text's."""
    import json

    from support.vaults import SHARED

    query = help_cairn.query
    count = help_cairn.embedder.count_tokens
    questions = [
        json.loads(line)["question"]
        for line in (SHARED / "eval" / "dev.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line)["vault"] == "obsidian-help"
    ]
    checked = 0
    for q in questions:
        for i, h in enumerate(query.retrieve(q, per_note=SearchService.PER_NOTE_ASK)[0], 1):
            header = f"[{i}] {h.file_path} › {h.symbol}\n"
            assert count(header + h.text) == count(header) + count(h.text)
            assert h.token_bound >= count(h.text) > 0, (h.file_path, h.symbol)
            checked += 1
    assert checked > 100
    # Bounds that do not fit: exact counts decide, lowest-scored dropped first, as before.
    sources = AnswerService(query).context(ask_request(questions[0]))
    hits = [s.hit for s in sources]
    exact = [count(f"[{i}] {h.file_path} › {h.symbol}\n{h.text}") for i, h in enumerate(hits, 1)]
    assert sum(exact) <= 6000


class _NoPreference(QueryClassifier):
    """The contract's classifier with every preference turned off: the same search, no kind boosted."""

    def classify(self, question: str) -> str | None:
        return None


def test_a_question_asking_for_code_boosts_exactly_the_code_chunks(help_cairn):
    """docs/design.md, "Contract" → Query classifier: "code", "snippet", "script" → code blocks are preferred (a
    boost of the fused score), nothing excluded. With note aggregation off, each code hit's score is the unboosted
    one × BOOST and every other hit's is unchanged."""
    store, embedder, weights = help_cairn.store, help_cairn.query.embedder, FusionWeights(second=0.0)
    plain = SearchService(store, embedder, weights=weights, classifier=_NoPreference())
    preferring = SearchService(store, embedder, weights=weights)
    question = "code snippet for a dataview query in a callout"
    boosted, preference = preferring.retrieve(question, top_k=30)
    unboosted = {h.chunk_id: h for h in plain.retrieve(question, top_k=30)[0]}
    assert preference == "code"
    both = [h for h in boosted if h.chunk_id in unboosted]
    assert any(h.kind == "code" for h in both) and any(h.kind != "code" for h in both), [h.kind for h in both]
    for h in both:
        factor = QueryClassifier.BOOST if h.kind == "code" else 1.0
        assert h.score == pytest.approx(unboosted[h.chunk_id].score * factor, rel=1e-9), (h.file_path, h.kind)

"""cairn.search (answers through cairn.answers): the one query service, on real indexes (the sample vault and
the Obsidian help vault)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Sequence

import numpy as np
import pytest

from cairn.answers import AnswerService, Source, sources_text
from cairn.config import NOT_FOUND_ANSWER
from cairn.errors import BadRequestError
from cairn.prompt import cited_numbers
from cairn.ranking import FusionWeights, QueryClassifier
from cairn.search import SearchService

SAMPLE_QUESTIONS = [
    ("How long do I proof the sourdough in the fridge?", "Kitchen/Sourdough.md"),
    ("When should I plant garlic, and how deep?", "Garden/Garlic.md"),
    ("What ratio of greens to browns goes in the compost?", "Garden/Compost.md"),
    ("How much lemon juice goes into each jar of tomato sauce?", "Kitchen/Tomato sauce.md"),
    ("What is in the brine for the pickled cucumbers?", "Kitchen/Pickled cucumbers.md"),
]


def snap_now(search):
    """The in-memory vectors in force."""
    return search.vectors.current()


def ask(search, question, **kw):
    """The one ask path without a model: the extractive answer (as the CLI and MCP get it)."""
    return asyncio.run(AnswerService(search).answer(question, **kw))


OFF_TOPIC = [
    "What is the capital of Mongolia?",
    "Who won the 1998 football World Cup?",
    "What is the capital of France?",
]


@pytest.mark.parametrize("question,note", SAMPLE_QUESTIONS)
def test_answers_cite_the_note_that_holds_the_fact(sample_cairn, question, note):
    answer = ask(sample_cairn.query, question)
    assert not answer.not_found and answer.grounded is False
    assert answer.sources[0].hit.file_path == note
    cited = cited_numbers(answer.text.split("\n\nSources:")[0])
    assert cited, answer.text
    listed = {s.n for s in answer.sources}
    assert set(cited) <= listed and set(cited_numbers(answer.text)) <= listed
    assert [s.n for s in answer.sources] == list(range(1, len(answer.sources) + 1))
    shown = answer.text + "\n\n" + sources_text(answer.sources)  # as `cairn ask` and the MCP text show it
    for s in answer.sources:
        assert f"[{s.n}] {s.hit.file_path}" in shown


@pytest.mark.parametrize("question", OFF_TOPIC)
def test_off_topic_questions_get_the_fixed_not_found_answer(sample_cairn, question):
    answer = ask(sample_cairn.query, question)
    assert answer.not_found and answer.text == NOT_FOUND_ANSWER and answer.sources == []


def test_every_hit_for_an_answer_passes_the_cosine_floor_in_every_mode(sample_cairn):
    for mode in ("bm25", "dense", "hybrid"):
        hits, _ = sample_cairn.query.retrieve(
            "watering tomatoes in the polytunnel", top_k=20, mode=mode, per_note=5, purpose="ask"
        )
        assert hits
        assert all(h.cosine >= 0.35 for h in hits)


def test_search_keeps_below_the_floor_only_chunks_holding_a_query_term(sample_cairn):
    query = "watering tomatoes in the polytunnel"
    terms = {t for w in ("watering", "tomatoes", "polytunnel") for t in sample_cairn.store.fts_tokens(w)}
    for mode in ("bm25", "hybrid"):
        hits, _ = sample_cairn.query.retrieve(query, top_k=20, mode=mode, per_note=5)
        below = [h for h in hits if h.cosine < 0.35]
        assert below  # the floor would have dropped them
        for h in below:
            tokens = set(sample_cairn.store.fts_tokens(f"{h.text} {h.symbol} {h.title}"))
            assert tokens & terms, h.file_path
    dense, _ = sample_cairn.query.retrieve(query, top_k=20, mode="dense", per_note=5)
    assert all(h.cosine >= 0.35 for h in dense)


def test_tag_scope_any_of_with_nested_tags(sample_cairn):
    store = sample_cairn.store
    personal_notes = {
        p
        for p, state in store.note_states().items()
        if state.status == "ok" and any(t == "personal" or t.startswith("personal/") for t in store.note_tags(p))
    }
    assert "Personal/Health notes.md" in personal_notes  # tagged personal/health: nested matches the scope
    hits = sample_cairn.query.search("notes about health and allergies", tags=["personal"], top_k=8).hits
    assert hits and {h.file_path for h in hits} <= personal_notes
    assert all(
        h.file_path not in personal_notes
        for h in sample_cairn.query.search("notes about health and allergies", tags=["garden"], top_k=8).hits
    )


def test_folder_scope(sample_cairn):
    hits = sample_cairn.query.search("tomatoes", folders=["Kitchen"], top_k=8).hits
    assert hits and all(h.file_path.startswith("Kitchen/") for h in hits)


def test_folder_scope_ignores_letter_case_like_obsidians_path_search(sample_cairn):
    exact = [h.file_path for h in sample_cairn.query.search("tomatoes", folders=["Kitchen"], top_k=8).hits]
    assert [h.file_path for h in sample_cairn.query.search("tomatoes", folders=["kitchen/"], top_k=8).hits] == exact
    assert not sample_cairn.query.search("tomatoes", folders=["Kitch"], top_k=8).hits  # whole folder names only


def test_results_are_deduplicated_per_note_and_respect_top_k(sample_cairn):
    hits = sample_cairn.query.search("sourdough starter feeding and baking", top_k=3).hits
    assert len(hits) <= 3
    per_note = {}
    for h in hits:
        per_note[h.file_path] = per_note.get(h.file_path, 0) + 1
    assert max(per_note.values()) <= sample_cairn.query.PER_NOTE_SEARCH


@pytest.mark.parametrize("query", ['sourdough" OR "x', "NEAR(sourdough starter)", "title:garlic", "garlic*", "(", '"'])
def test_fts5_syntax_in_user_text_is_harmless(sample_cairn, query):
    sample_cairn.query.search(query)  # no error, whatever it finds


@pytest.mark.parametrize("bad", ["", "   ", "x" * 2001])
def test_bad_questions_are_clear_errors(sample_cairn, bad):
    with pytest.raises(BadRequestError):
        ask(sample_cairn.query, bad)


def test_bad_top_k_and_tags_are_clear_errors(sample_cairn):
    with pytest.raises(BadRequestError, match="top_k"):
        sample_cairn.query.search("garlic", top_k=0)
    with pytest.raises(BadRequestError, match="tag"):
        sample_cairn.query.search("garlic", tags=["#"])


def test_hits_carry_lines_snippet_and_indexed_at(sample_cairn):
    hit = sample_cairn.query.search("garlic planting depth").hits[0]
    data = hit.to_json()
    assert set(data) >= {"filePath", "symbol", "score", "snippet", "tags", "lines", "indexedAt"}
    start, end = data["lines"]
    lines = (sample_cairn.config.vault / hit.file_path).read_text(encoding="utf-8").splitlines()
    assert 1 <= start <= end <= len(lines)
    assert data["indexedAt"] > 0 and len(data["snippet"]) <= 230


# ------------------------------------------------------------------ the real help vault
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
    hits = help_cairn.query.search("how do I embed a note in another note").hits
    assert hits[0].file_path == "Linking notes and files/Embed files.md"


def test_help_vault_reindex_embeds_nothing(help_cairn):
    report = help_cairn.indexing.index()
    assert report.texts_embedded == 0 and report.added == report.updated == 0


def test_searching_for_a_sentence_of_a_long_section_finds_it(help_cairn):
    # One sentence in the middle of a long chunk: the chunk's mean vector is far from it, the sentence is not.
    hits = help_cairn.query.search("Right-click a property to rename it globally").hits
    assert any(h.file_path == "Plugins/Properties view.md" for h in hits[:3])


def test_a_repeated_question_embeds_nothing_again_and_gets_the_same_answer(sample_cairn):
    # The extractive answer scores each candidate sentence in its note's context; those vectors and
    # the question's are kept in memory, so asking again (or asking another question that lands on
    # the same notes) costs no model run for them.
    query, embedder = sample_cairn.query, sample_cairn.query.embedder
    question = "How deep and how far apart should the garlic cloves be planted?"
    first = ask(query, question)
    assert not first.not_found
    before = embedder.embeddings_computed
    again = ask(query, question)
    assert embedder.embeddings_computed == before
    assert again.text == first.text
    related = ask(query, "When should I plant garlic?")
    assert embedder.embeddings_computed - before <= 1  # only the new question; its sentences are cached
    assert related.sources[0].hit.file_path == "Garden/Garlic.md"


def test_the_vector_cache_stays_bounded(sample_cairn):
    from cairn.embedding import VectorCache

    store, embedder = sample_cairn.query.store, sample_cairn.query.embedder
    cache = VectorCache(store, embedder, max_items=5)
    query = SearchService(store, embedder, vector_cache=cache)
    ask(query, "What ratio of greens to browns goes in the compost?")
    ask(query, "What is in the brine for the pickled cucumbers?")
    assert len(cache) <= 5


def test_an_answer_over_indexed_notes_embeds_only_the_question(sample_cairn):
    # The sentences and titles the extractive answer scores were embedded by the indexer: their vectors
    # come from the store, so a never-seen question over indexed notes runs the model once.
    query = SearchService(sample_cairn.query.store, sample_cairn.query.embedder)  # empty in-memory cache
    embedder = query.embedder
    before = embedder.embeddings_computed
    answer = ask(query, "At what depth do garlic cloves go into the soil, and in which month?")
    assert embedder.embeddings_computed - before == 1
    assert answer.sources[0].hit.file_path == "Garden/Garlic.md"
    assert "5 cm" in answer.text.split("\n\nSources:")[0]


def test_a_sentence_the_index_never_embedded_is_embedded_for_the_answer(sample_cairn):
    # A source whose text differs from the indexed chunk (here: a sentence edited after indexing)
    # still gets every sentence scored: the unknown one is embedded, the rest read from the store.
    query = SearchService(sample_cairn.query.store, sample_cairn.query.embedder)
    embedder = query.embedder
    answers = AnswerService(query)
    sources = answers.context("At what depth do garlic cloves go into the soil?")
    hit = sources[0].hit
    extra = "Mulch the garlic bed with straw after the first hard frost."
    edited = Source(n=1, hit=dataclasses.replace(hit, text=hit.text + "\n\n" + extra))
    before = embedder.embeddings_computed
    text = answers.extractive_answer("What goes on the garlic bed after the first frost?", [edited])
    assert embedder.embeddings_computed - before == 2  # the question and the new sentence
    assert "straw" in text.split("\n\nSources:")[0]


def _counting_reads(query, monkeypatch, name: str) -> list[tuple]:
    """Record calls of one of the real store's read functions (the results are the store's own)."""
    calls: list[tuple] = []
    real = getattr(query.store, name)

    def spy(*args, **kw):
        calls.append(args)
        return real(*args, **kw)

    monkeypatch.setattr(query.store, name, spy)
    return calls


def test_a_repeated_search_is_answered_from_memory_while_the_index_is_unchanged(sample_cairn, monkeypatch):
    query = SearchService(sample_cairn.query.store, sample_cairn.query.embedder)
    ranked = _counting_reads(query, monkeypatch, "chunk_rows")  # read once per ranking
    terms = _counting_reads(query, monkeypatch, "fts_phrase_scores")
    first = query.search("garlic planting depth")
    again = query.search("garlic planting depth")
    assert len(ranked) == 1 and len(terms) == 3
    assert [h.to_json() for h in again.hits] == [h.to_json() for h in first.hits]
    query.search("garlic planting depth", top_k=1)  # other parameters: ranked again, from the cached terms
    assert len(ranked) == 2 and len(terms) == 3
    query.search("garlic depth in clay")
    assert len(terms) == 4  # only the new term "clay" is looked up


@pytest.mark.slow
def test_a_note_written_by_another_connection_is_found_by_a_repeated_search(fresh_cairn, tmp_path, embedder):
    # The daemon's query service holds results in memory; a note indexed meanwhile by another process
    # (`cairn index` beside `cairn serve`: another SQLite connection) must show up at once.
    from cairn.app import Cairn
    from support.cairns import make_config

    fresh_cairn.indexing.index()
    question = "Which tool sharpens the quenched hoe blade?"
    before = fresh_cairn.query.search(question)
    assert all(h.file_path != "Garden/Hoe.md" for h in before.hits)
    (fresh_cairn.config.vault / "Garden" / "Hoe.md").write_text(
        "# Hoe\n\nSharpen the quenched hoe blade with a mill file, pushing away from the edge.\n", encoding="utf-8"
    )
    other = Cairn(make_config(fresh_cairn.config.vault, tmp_path / "data"), embedder=embedder)
    try:
        other.indexing.index()
    finally:
        other.close()
    after = fresh_cairn.query.search(question)
    assert after.hits and after.hits[0].file_path == "Garden/Hoe.md"


@pytest.mark.slow
def test_a_note_indexed_on_the_same_connection_is_found_by_a_repeated_search(fresh_cairn):
    fresh_cairn.indexing.index()
    question = "Which tool sharpens the quenched hoe blade?"
    fresh_cairn.query.search(question)
    (fresh_cairn.config.vault / "Garden" / "Hoe.md").write_text(
        "# Hoe\n\nSharpen the quenched hoe blade with a mill file, pushing away from the edge.\n", encoding="utf-8"
    )
    fresh_cairn.indexing.index()  # same thread, so the same connection as the searches
    assert fresh_cairn.query.search(question).hits[0].file_path == "Garden/Hoe.md"


def test_a_query_service_scores_on_one_blas_thread(sample_cairn):
    # Requests run on parallel worker threads already; numpy's default (a BLAS thread per core) only costs CPU
    # there (SearchService.BLAS_THREADS).
    from threadpoolctl import threadpool_info

    SearchService(sample_cairn.query.store, sample_cairn.query.embedder)
    blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
    assert blas and all(lib["num_threads"] == SearchService.BLAS_THREADS == 1 for lib in blas)


def test_a_snippet_is_centred_on_the_densest_run_of_query_terms():
    from cairn.search.hits import make_snippet

    filler = "lorem ipsum dolor sit amet " * 20
    text = filler + "garlic once here. " + filler + "garlic cloves, garlic bulbs and garlic scapes. " + filler
    snippet = make_snippet(text, ["garlic"], width=120)
    assert snippet.count("garlic") == 3 and "once here" not in snippet and len(snippet) <= 122


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


def test_a_question_searched_then_asked_is_scored_against_every_vector_once(sample_cairn, monkeypatch):
    from cairn.search.dense import DenseIndex

    calls = []
    real = DenseIndex.query

    def spy(self, qvec):
        calls.append(qvec)
        return real(self, qvec)

    monkeypatch.setattr(DenseIndex, "query", spy)
    query = SearchService(sample_cairn.query.store, sample_cairn.query.embedder)
    question = "How long do I proof the sourdough in the fridge?"
    hits = query.search(question).hits
    answer = ask(query, question)
    assert len(calls) == 1
    assert answer.sources[0].hit.file_path == hits[0].file_path == "Kitchen/Sourdough.md"
    ask(query, "What ratio of greens to browns goes in the compost?")
    assert len(calls) == 2


@pytest.mark.slow
def test_a_bulk_change_reloads_the_vectors_in_the_background_and_then_serves_every_new_note(fresh_cairn, vault_copy):
    """More chunks embedded since the in-memory vectors were loaded than are scored one by one: the query goes on
    with what it has (no full reload in a request's thread) while a reload runs; once it lands, the dense leg
    ranks every new note."""
    cairn = fresh_cairn
    cairn.indexing.index()
    query = cairn.query
    query.search("anything at all")  # the first load
    query.vectors.MAX_NEWER, query.vectors.REFRESH_S = 1, 3600.0
    topics = {
        "Volcano.md": "Basaltic lava flows from the shield volcano erupted for weeks.",
        "Glacier.md": "The glacier calved huge icebergs into the fjord every summer.",
        "Desert.md": "Sand dunes in the desert migrate several metres with each storm.",
    }
    for name, text in topics.items():
        (vault_copy / name).write_text(f"# {name[:-3]}\n\n{text}\n", encoding="utf-8")
    cairn.indexing.index()
    held = query.vectors.current()
    query.search("icebergs breaking off a glacier into the fjord", mode="dense")
    assert query.vectors.wait(timeout=60)  # a reload was started, not done in this request
    assert query.vectors.current() is not held and not query.vectors.embedded_since(snap_now(query))
    for name, text in topics.items():
        hits = query.search(text, mode="dense").hits
        assert hits and hits[0].file_path == name, (name, [h.file_path for h in hits])


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
    sources = AnswerService(query).context(questions[0])
    hits = [s.hit for s in sources]
    exact = [count(f"[{i}] {h.file_path} › {h.symbol}\n{h.text}") for i, h in enumerate(hits, 1)]
    assert sum(exact) <= 6000


@pytest.mark.slow
def test_while_the_vectors_wait_for_a_reload_the_note_saved_last_is_still_ranked(fresh_cairn, vault_copy, monkeypatch):
    """More chunks embedded since the in-memory vectors were loaded than a query scores one by one: those it leaves
    out must be the older ones, not the note just saved."""
    cairn = fresh_cairn
    cairn.indexing.index()
    query = cairn.query
    query.search("anything at all")  # the first load
    monkeypatch.setattr(query.vectors, "reload", lambda **_: None)  # the reload has not landed yet
    query.vectors.MAX_NEWER, query.vectors.REFRESH_S = 2, 3600.0
    for i in range(4):
        (vault_copy / f"Older {i}.md").write_text(
            f"# Older {i}\n\nA note about tidal pools number {i}.\n", encoding="utf-8"
        )
    cairn.indexing.index()
    (vault_copy / "Latest.md").write_text(
        "# Latest\n\nThe glacier calved huge icebergs into the fjord.\n", encoding="utf-8"
    )
    cairn.indexing.index()
    assert len(query.vectors.embedded_since(snap_now(query))) > query.vectors.MAX_NEWER
    hits = query.search("icebergs breaking off a glacier into the fjord", mode="dense").hits
    assert hits and hits[0].file_path == "Latest.md", [h.file_path for h in hits]


@pytest.mark.slow
def test_replaced_in_memory_vectors_are_freed_once_questions_are_asked_on_the_new_ones(fresh_cairn, vault_copy):
    """The per-question dense scores hold their snapshot's vectors (int8 copies, an onnxruntime session): a cache
    entry of a replaced snapshot must not keep it in memory."""
    import gc
    import weakref

    cairn = fresh_cairn
    cairn.indexing.index()
    query = cairn.query
    query.search("How do I proof sourdough?")
    held = []
    for i in range(3):
        held.append(weakref.ref(query.vectors.current().dense))
        (vault_copy / f"New {i}.md").write_text(
            f"# New {i}\n\nA note about lighthouses number {i}.\n", encoding="utf-8"
        )
        cairn.indexing.index()
        query.vectors.reload()  # the reload (a background thread in the daemon)
        query.search(f"lighthouse keepers, question {i}")
    gc.collect()
    assert [r() is None for r in held] == [True, True, True]
    assert query.vectors.current().dense is not None and len(query.vectors.scores) == 1


@pytest.mark.slow
def test_saved_notes_join_the_in_memory_vectors_by_cheap_reloads_and_a_full_load_waits(fresh_cairn, vault_copy):
    """While notes change, the vectors reload every Vectors.REFRESH_S reading only the changed chunks; a change
    that needs a full load waits for Vectors.FULL_REFRESH_S after the last one."""
    cairn = fresh_cairn
    cairn.indexing.index()
    query = cairn.query
    query.search("anything at all")  # the first (full) load
    query.vectors.REFRESH_S = 0.0
    (vault_copy / "Lighthouse.md").write_text(
        "# Lighthouse\n\nThe keeper trimmed the lamp's wick at dusk.\n", encoding="utf-8"
    )
    cairn.indexing.index()
    first = query.vectors.current()
    query.search("who trims the lamp in a lighthouse", mode="dense")
    query.vectors.wait(timeout=60)
    assert query.vectors.current() is not first and not query.vectors.embedded_since(
        snap_now(query)
    )  # an incremental reload
    query.vectors.INCREMENTAL_MAX = 0.0  # from now on every change needs a full load
    (vault_copy / "Harbour.md").write_text(
        "# Harbour\n\nFishing boats moor in the harbour at night.\n", encoding="utf-8"
    )
    cairn.indexing.index()
    held = query.vectors.current()
    hits = query.search("where do fishing boats moor", mode="dense").hits
    assert hits and hits[0].file_path == "Harbour.md"  # scored from the store meanwhile
    query.vectors.wait(timeout=60)  # the load decides to wait
    assert query.vectors.current() is held  # the full load waits
    query.vectors.FULL_REFRESH_S = 0.0
    query.search("boats in a harbour at night", mode="dense")
    query.vectors.wait(timeout=60)
    assert query.vectors.current() is not held and not query.vectors.embedded_since(snap_now(query))


@pytest.mark.slow
def test_vector_reloads_and_keyword_index_builds_leave_no_connection_open(fresh_cairn, vault_copy):
    """Each reload runs on a thread of its own (every few seconds while notes change): its SQLite connection must
    be closed when it ends, or an editing session runs the daemon out of file descriptors."""
    cairn = fresh_cairn
    cairn.indexing.index()
    query, store = cairn.query, cairn.store
    query.search("anything at all")
    query.start_keyword_index().join(timeout=60)
    query.vectors.REFRESH_S = 0.0
    before = len(store._all)
    for i in range(5):
        (vault_copy / f"Reload {i}.md").write_text(
            f"# Reload {i}\n\nWindmills grind grain, note {i}.\n", encoding="utf-8"
        )
        cairn.indexing.index()
        held = query.vectors.current()
        query.search(f"windmills grinding grain {i}")
        query.vectors.wait(timeout=60)
        assert query.vectors.current() is not held
    query.keyword.reset()  # dropped: built again from scratch
    query.start_keyword_index().join(timeout=60)
    assert len(store._all) == before


@pytest.mark.slow
def test_a_bulk_change_is_loaded_at_once_even_while_full_loads_wait(fresh_cairn, vault_copy):
    """A reload that would need a full load waits (Vectors.FULL_REFRESH_S), unless more chunks were embedded than a
    query scores one by one: then the first question after the bulk change starts the full load (a waiting
    reload must not swallow that request)."""
    cairn = fresh_cairn
    cairn.indexing.index()
    query = cairn.query
    query.search("anything at all")
    query.vectors.REFRESH_S, query.vectors.FULL_REFRESH_S = 0.0, 3600.0
    query.vectors.INCREMENTAL_MAX, query.vectors.MAX_NEWER = 0.0, 1
    for i in range(3):
        (vault_copy / f"Bulk {i}.md").write_text(
            f"# Bulk {i}\n\nGlassblowers shape molten glass, {i}.\n", encoding="utf-8"
        )
    cairn.indexing.index()
    held = query.vectors.current()
    query.search("how is molten glass shaped")
    for _ in range(3):  # the waiting reload, then the bulk one (or one load that saw both)
        query.vectors.wait(timeout=60)
    assert query.vectors.current() is not held and not query.vectors.embedded_since(snap_now(query))


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


def test_an_excluded_words_expansions_are_not_searched_for(sample_cairn):
    """``garden -tomat``: the notes holding "tomato" are left out, and "tomato" is no keyword term of the query (it
    would lower the other hits' share of the query's words and move their snippets)."""
    from cairn.search import Query
    from cairn.search.lexical import Matcher

    for text in ("garden -tomat", "garden -tomatxo", "bread -(sourdoug)"):
        plan = Matcher(sample_cairn.query.view(), sample_cairn.query.note_maps.get()).plan(Query.parse(text))
        assert plan.keyword_terms == (text.split()[0],), (text, plan.keyword_terms)
    hits = sample_cairn.query.search("garden -tomat", top_k=8).hits
    assert hits and not any("tomato" in h.text.lower() for h in hits)

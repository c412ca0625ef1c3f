"""What a search or a question costs again: a repeated question embeds nothing and gets the same answer, the vector
cache stays bounded, an answer over indexed notes embeds only the question, a repeated search is answered from
memory while the index is unchanged (and not once it changed, on this connection or another), a question searched
then asked is scored against every vector once, the dense scores run on one BLAS thread."""

from __future__ import annotations

import dataclasses

import pytest

from cairn.answers import AnswerService, Source
from cairn.search import SearchService
from support.answers import ask
from support.cairns import build_index
from support.requests import ask_request, search_request


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
    sources = answers.context(ask_request("At what depth do garlic cloves go into the soil?"))
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
    first = query.search(search_request("garlic planting depth"))
    again = query.search(search_request("garlic planting depth"))
    assert len(ranked) == 1 and len(terms) == 3
    assert [h.to_json() for h in again.hits] == [h.to_json() for h in first.hits]
    query.search(
        search_request("garlic planting depth", top_k=1)
    )  # other parameters: ranked again, from the cached terms
    assert len(ranked) == 2 and len(terms) == 3
    query.search(search_request("garlic depth in clay"))
    assert len(terms) == 4  # only the new term "clay" is looked up


@pytest.mark.slow
def test_a_note_written_by_another_connection_is_found_by_a_repeated_search(fresh_cairn, tmp_path, embedder):
    # The daemon's query service holds results in memory; a note indexed meanwhile by another process
    # (`cairn index` beside `cairn serve`: another SQLite connection) must show up at once.

    fresh_cairn.indexing.index()
    question = "Which tool sharpens the quenched hoe blade?"
    before = fresh_cairn.query.search(search_request(question))
    assert all(h.file_path != "Garden/Hoe.md" for h in before.hits)
    (fresh_cairn.config.vault / "Garden" / "Hoe.md").write_text(
        "# Hoe\n\nSharpen the quenched hoe blade with a mill file, pushing away from the edge.\n", encoding="utf-8"
    )
    build_index(fresh_cairn.config.vault, tmp_path / "data", embedder)
    after = fresh_cairn.query.search(search_request(question))
    assert after.hits and after.hits[0].file_path == "Garden/Hoe.md"


@pytest.mark.slow
def test_a_note_indexed_on_the_same_connection_is_found_by_a_repeated_search(fresh_cairn):
    fresh_cairn.indexing.index()
    question = "Which tool sharpens the quenched hoe blade?"
    fresh_cairn.query.search(search_request(question))
    (fresh_cairn.config.vault / "Garden" / "Hoe.md").write_text(
        "# Hoe\n\nSharpen the quenched hoe blade with a mill file, pushing away from the edge.\n", encoding="utf-8"
    )
    fresh_cairn.indexing.index()  # same thread, so the same connection as the searches
    assert fresh_cairn.query.search(search_request(question)).hits[0].file_path == "Garden/Hoe.md"


def test_a_query_service_scores_on_one_blas_thread(sample_cairn):
    # Requests run on parallel worker threads already; numpy's default (a BLAS thread per core) only costs CPU
    # there (SearchService.BLAS_THREADS).
    from threadpoolctl import threadpool_info

    SearchService(sample_cairn.query.store, sample_cairn.query.embedder)
    blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
    assert blas and all(lib["num_threads"] == SearchService.BLAS_THREADS == 1 for lib in blas)


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
    hits = query.search(search_request(question)).hits
    answer = ask(query, question)
    assert len(calls) == 1
    assert answer.sources[0].hit.file_path == hits[0].file_path == "Kitchen/Sourdough.md"
    ask(query, "What ratio of greens to browns goes in the compost?")
    assert len(calls) == 2

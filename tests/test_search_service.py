"""cairn.search (answers through cairn.answers): the one query service on the sample vault's index: answers cite the
note holding the fact, off-topic questions are not found, the cosine floor, tag and folder scopes, per-note
de-duplication and top_k, bad input, what a hit carries. Elsewhere: the help vault (test_search_help_vault.py), what
a repeated search costs (test_search_caches.py), the in-memory vectors' loads (test_search_vector_loads.py)."""

from __future__ import annotations

import pytest

from cairn.answers import sources_text
from cairn.config import NOT_FOUND_ANSWER
from cairn.errors import BadRequestError
from cairn.prompt import cited_numbers
from support.answers import ask
from support.requests import search_request

SAMPLE_QUESTIONS = [
    ("How long do I proof the sourdough in the fridge?", "Kitchen/Sourdough.md"),
    ("When should I plant garlic, and how deep?", "Garden/Garlic.md"),
    ("What ratio of greens to browns goes in the compost?", "Garden/Compost.md"),
    ("How much lemon juice goes into each jar of tomato sauce?", "Kitchen/Tomato sauce.md"),
    ("What is in the brine for the pickled cucumbers?", "Kitchen/Pickled cucumbers.md"),
]


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
    hits = sample_cairn.query.search(
        search_request("notes about health and allergies", top_k=8, tags=["personal"])
    ).hits
    assert hits and {h.file_path for h in hits} <= personal_notes
    assert all(
        h.file_path not in personal_notes
        for h in sample_cairn.query.search(
            search_request("notes about health and allergies", top_k=8, tags=["garden"])
        ).hits
    )


def test_folder_scope(sample_cairn):
    hits = sample_cairn.query.search(search_request("tomatoes", top_k=8, folders=["Kitchen"])).hits
    assert hits and all(h.file_path.startswith("Kitchen/") for h in hits)


def test_folder_scope_ignores_letter_case_like_obsidians_path_search(sample_cairn):
    exact = [
        h.file_path for h in sample_cairn.query.search(search_request("tomatoes", top_k=8, folders=["Kitchen"])).hits
    ]
    assert [
        h.file_path for h in sample_cairn.query.search(search_request("tomatoes", top_k=8, folders=["kitchen/"])).hits
    ] == exact
    assert not sample_cairn.query.search(
        search_request("tomatoes", top_k=8, folders=["Kitch"])
    ).hits  # whole folder names only


def test_results_are_deduplicated_per_note_and_respect_top_k(sample_cairn):
    hits = sample_cairn.query.search(search_request("sourdough starter feeding and baking", top_k=3)).hits
    assert len(hits) <= 3
    per_note = {}
    for h in hits:
        per_note[h.file_path] = per_note.get(h.file_path, 0) + 1
    assert max(per_note.values()) <= sample_cairn.query.PER_NOTE_SEARCH


@pytest.mark.parametrize("query", ['sourdough" OR "x', "NEAR(sourdough starter)", "title:garlic", "garlic*", "(", '"'])
def test_fts5_syntax_in_user_text_is_harmless(sample_cairn, query):
    sample_cairn.query.search(search_request(query))  # no error, whatever it finds


@pytest.mark.parametrize("bad", ["", "   ", "x" * 2001])
def test_bad_questions_are_clear_errors(sample_cairn, bad):
    with pytest.raises(BadRequestError):
        ask(sample_cairn.query, bad)


def test_bad_top_k_and_tags_are_clear_errors(sample_cairn):
    with pytest.raises(BadRequestError, match="top_k"):
        sample_cairn.query.search(search_request("garlic", top_k=0))
    with pytest.raises(BadRequestError, match="tag"):
        sample_cairn.query.search(search_request("garlic", tags=["#"]))


def test_hits_carry_lines_snippet_and_indexed_at(sample_cairn):
    hit = sample_cairn.query.search(search_request("garlic planting depth")).hits[0]
    data = hit.to_json()
    assert set(data) >= {"filePath", "symbol", "score", "snippet", "tags", "lines", "indexedAt"}
    start, end = data["lines"]
    lines = (sample_cairn.config.vault / hit.file_path).read_text(encoding="utf-8").splitlines()
    assert 1 <= start <= end <= len(lines)
    assert data["indexedAt"] > 0 and len(data["snippet"]) <= 230


# ------------------------------------------------------------------ the real help vault


def test_a_snippet_is_centred_on_the_densest_run_of_query_terms():
    from cairn.search.hits import make_snippet

    filler = "lorem ipsum dolor sit amet " * 20
    text = filler + "garlic once here. " + filler + "garlic cloves, garlic bulbs and garlic scapes. " + filler
    snippet = make_snippet(text, ["garlic"], width=120)
    assert snippet.count("garlic") == 3 and "once here" not in snippet and len(snippet) <= 122


def test_an_excluded_words_expansions_are_not_searched_for(sample_cairn):
    """``garden -tomat``: the notes holding "tomato" are left out, and "tomato" is no keyword term of the query (it
    would lower the other hits' share of the query's words and move their snippets)."""
    from cairn.search import Query
    from cairn.search.lexical import Matcher

    for text in ("garden -tomat", "garden -tomatxo", "bread -(sourdoug)"):
        plan = Matcher(sample_cairn.query.views.of(None), sample_cairn.query.note_maps.get()).plan(Query.parse(text))
        assert plan.keyword_terms == (text.split()[0],), (text, plan.keyword_terms)
    hits = sample_cairn.query.search(search_request("garden -tomat", top_k=8)).hits
    assert hits and not any("tomato" in h.text.lower() for h in hits)

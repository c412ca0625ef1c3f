"""Search finds every note that contains the words, with Obsidian's search syntax.

On the sample vault (examples/vault) through the query service, the real ``cairn search`` CLI, the HTTP
``/search`` and MCP ``search_notes``; the parser on its own; a note added after the index was built, found before
it has vectors; the in-memory BM25's vocabulary and FTS5's give the same prefix and typo expansions.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cairn.search.syntax import And, Field, Not, Or, Phrase, Word, parse
from cairn.search.vocabulary import Vocabulary, edit_distance
from support.cairns import build_index, open_cairn
from support.cli import cairn_env, cairn_executable
from support.requests import caller_of, search_request
from support.vaults import SAMPLE_VAULT

SOURDOUGH = "Kitchen/Sourdough.md"
TIMEOUT_S = 180


def notes_holding(word: str) -> set[str]:
    """The sample vault's notes whose text holds ``word`` as a word (any case)."""
    pattern = re.compile(rf"\b{re.escape(word)}\b", re.IGNORECASE)
    return {
        p.relative_to(SAMPLE_VAULT).as_posix()
        for p in SAMPLE_VAULT.rglob("*.md")
        if pattern.search(p.read_text(encoding="utf-8"))
    }


def rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def paths(query, text: str, **fields) -> list[str]:
    return [h.file_path for h in query.search(search_request(text, **fields)).hits]


# -- the parser -------------------------------------------------------------------------------------------------------


def test_words_phrases_exclusions_and_operators_parse_as_obsidian_reads_them():
    assert parse("garden -tomato").root == And((Word("garden"), Not(Word("tomato"))))
    assert parse('"cold proof"').root == And((Phrase("cold proof"),))
    assert parse('-"cold proof" bread').root == And((Not(Phrase("cold proof")), Word("bread", prefix=True)))
    assert parse("tag:#kitchen bread").root == And((Field("tag", "#kitchen"), Word("bread", prefix=True)))
    assert parse('path:"Daily notes/2022" x').root.items[0] == Field("path", "Daily notes/2022")
    assert parse("file:Sour").root == And((Field("file", "Sour"),))
    # OR binds loosest: (meeting work) OR (meetup personal)
    assert parse("meeting work OR meetup personal").root == Or(
        (And((Word("meeting"), Word("work"))), And((Word("meetup"), Word("personal", prefix=True))))
    )
    assert parse("meeting (work OR meetup) personal").root == And(
        (Word("meeting"), Or((Word("work"), Word("meetup"))), Word("personal", prefix=True))
    )
    assert parse("meeting -(work meetup)").root == And((Word("meeting"), Not(And((Word("work"), Word("meetup"))))))
    assert parse(r'"they said \"hello\""').root == And((Phrase('they said "hello"'),))


def test_an_operator_before_a_group_applies_to_each_term_of_it():
    """Obsidian: "operators allow a nested search term within parentheses"; OR, AND, exclusions and phrases inside."""
    assert parse("file:(Bread OR Garden)").root == And((Or((Field("file", "Bread"), Field("file", "Garden"))),))
    assert parse("tag:(#garden OR #kitchen)").root == And((Or((Field("tag", "#garden"), Field("tag", "#kitchen"))),))
    assert parse('path:("Daily notes" -Recipes) x').root == And(
        (Field("path", "Daily notes"), Not(Field("path", "Recipes")), Word("x", prefix=True))
    )
    assert parse("-file:(a OR b)").root == And((Not(Or((Field("file", "a"), Field("file", "b")))),))
    assert parse("path:(a (b OR c) file:d)").root == And(
        (Field("path", "a"), Or((Field("path", "b"), Field("path", "c"))), Field("file", "d"))
    )
    assert parse("file:(Bread)").root == And((Field("file", "Bread"),))
    assert not parse("file:(Bread OR Garden)").plain


@pytest.mark.parametrize(
    "text",
    ['"unbalanced quote', "lone - dash", "-", "((((", "a) b (c", "OR OR", "x OR", 'tag: "', "--flag value", '""'],
)
def test_malformed_syntax_degrades_to_words_without_failing(text):
    parsed = parse(text)
    words = [w for w in re.findall(r"[\w-]+", text) if w not in ("OR", "-")]
    for w in words:
        if w.startswith("--") or w.isalpha():
            assert w in parsed.text or w == "tag"


def test_parentheses_nested_too_deep_are_ignored_and_their_words_kept():
    parsed = parse("(" * 400 + "bread" + ")" * 3 + " OR rye")
    assert "bread" in parsed.text and "rye" in parsed.text


def test_a_question_in_words_is_plain_even_with_dashes_and_parentheses():
    assert parse("What colour does the theme use for --background-primary?").plain
    assert parse("Is there a plugin for YNAB (You Need A Budget)?").plain
    assert not parse("garden -tomato").plain and not parse('"cold proof"').plain


def test_edit_distance_counts_a_swap_as_one_edit_and_stops_at_the_limit():
    assert edit_distance("banneton", "banetton", 2) == 2
    assert edit_distance("compost", "compsot", 1) == 1
    assert edit_distance("garlic", "garden", 1) == 2  # limit + 1: more than the limit


def test_vocabulary_prefix_and_near_tokens():
    vocab = Vocabulary(["banneton", "banana", "bread", "bake", "banner"], [1, 5, 9, 3, 2])
    assert [t for t, _ in vocab.with_prefix("ban", 10)] == ["banana", "banner", "banneton"]  # most frequent first
    assert [t for t, _ in vocab.with_prefix("ban", 1)] == ["banana"]
    assert [t for t, _, _ in vocab.near("banetton", 2, 5)] == ["banneton"]
    assert vocab.near("brexd", 1, 5) == [("bread", 9, 1)]


# -- the query service on the sample vault ----------------------------------------------------------------------------


def test_a_rare_word_finds_its_note_first_whatever_its_cosine(sample_cairn):
    hits = sample_cairn.query.search(search_request("banneton")).hits
    assert hits and hits[0].file_path == SOURDOUGH == next(iter(notes_holding("banneton")))
    assert hits[0].cosine < 0.35  # the floor would have dropped it


def test_a_word_the_note_holds_ranks_it_above_notes_that_are_only_similar(sample_cairn):
    (holder,) = notes_holding("cornichons") | notes_holding("cornichon")
    assert paths(sample_cairn.query, "Cornichon", top_k=3)[0] == holder


@pytest.mark.parametrize("name", ["Okafor", "Margaret"])
def test_names_in_notes_are_found(sample_cairn, name):
    holders = notes_holding(name)
    assert holders
    assert set(paths(sample_cairn.query, name, top_k=3)[: len(holders)]) == holders


def test_an_exact_phrase_finds_the_note_that_holds_it(sample_cairn):
    for phrase in ("cold proof", "seam side up"):
        holders = {p for p in notes_holding(phrase.split()[0]) if phrase in (SAMPLE_VAULT / p).read_text().lower()}
        hits = sample_cairn.query.search(search_request(f'"{phrase}"')).hits
        assert holders == {SOURDOUGH} and hits[0].file_path == SOURDOUGH
        below = [h for h in hits if h.cosine < 0.35]  # kept only as lexical evidence: they hold the phrase
        assert all(phrase in " ".join(h.text.lower().split()) for h in below)


def test_an_excluded_word_removes_every_note_holding_it(sample_cairn):
    found = paths(sample_cairn.query, "garden -tomato", top_k=20)
    assert found
    assert not set(found) & (notes_holding("tomato") | notes_holding("tomatoes"))


def test_a_tag_operator_keeps_only_notes_with_the_tag(sample_cairn):
    hits = sample_cairn.query.search(search_request("tag:#kitchen bread", top_k=20)).hits
    assert hits
    assert all(any(t == "kitchen" or t.startswith("kitchen/") for t in h.tags) for h in hits)


def test_path_and_file_operators_match_the_path_and_the_file_name(sample_cairn):
    assert {p.split("/")[0] for p in paths(sample_cairn.query, "path:garden water", top_k=20)} == {"Garden"}
    assert set(paths(sample_cairn.query, "file:sourdough", top_k=20)) == {SOURDOUGH, "Kitchen/Sourdough starter.md"}


def test_filters_or_exclusions_alone_list_every_note_they_allow(sample_cairn):
    """As Obsidian lists every matching file: no note they allow is dropped for its cosine to the field's text."""
    store = sample_cairn.store
    kitchen = {p for p in notes_holding("") if any(t.split("/")[0] == "kitchen" for t in store.note_tags(p))}
    garden = {p for p in notes_holding("") if p.startswith("Garden/")}
    assert len(kitchen) >= 5 and len(garden) >= 5
    assert set(paths(sample_cairn.query, "tag:#kitchen", top_k=50)) == kitchen
    assert set(paths(sample_cairn.query, "path:Gard", top_k=50)) == garden
    every, tomato = notes_holding(""), notes_holding("tomato") | notes_holding("tomatoes")
    assert set(paths(sample_cairn.query, "-tomato", top_k=50)) == every - tomato


def test_grouped_operators_find_what_the_operators_one_by_one_find(sample_cairn):
    """``op:(a OR b)`` lists the notes of ``op:a`` and of ``op:b``; ``op:(a -b)`` those of ``op:a`` less ``op:b``."""
    store = sample_cairn.store

    def found(text: str) -> set[str]:
        return set(paths(sample_cairn.query, text, top_k=50))

    tagged = {
        t: {p for p in notes_holding("") if t in {x.split("/")[0] for x in store.note_tags(p)}}
        for t in ("garden", "kitchen")
    }
    assert tagged["garden"] and tagged["kitchen"]
    assert found("tag:(#garden OR #kitchen)") == tagged["garden"] | tagged["kitchen"]
    assert found("file:(Sourdough OR Garlic)") == {SOURDOUGH, "Kitchen/Sourdough starter.md", "Garden/Garlic.md"}
    assert found("path:(Journal OR Personal)") == {
        p for p in notes_holding("") if p.split("/")[0] in ("Journal", "Personal")
    }
    assert found("path:(Kitchen -Sourdough)") == found("path:Kitchen") - found("file:Sourdough") != set()
    assert found('file:("Sourdough starter" OR Garlic)') == {"Kitchen/Sourdough starter.md", "Garden/Garlic.md"}
    assert found("-path:(Garden OR Kitchen)") == notes_holding("") - found("path:Garden") - found("path:Kitchen")
    tomato = notes_holding("tomato") | notes_holding("tomatoes")
    assert found("tomato path:(Garden OR Kitchen)") == {p for p in tomato if p.split("/")[0] in ("Garden", "Kitchen")}


def test_a_bad_tag_in_a_group_is_named_as_typed(sample_cairn):
    from cairn.errors import BadRequestError  # noqa: PLC0415

    with pytest.raises(BadRequestError, match="tag:# names no valid tag"):
        sample_cairn.query.search(search_request("tag:(#garden OR #)"))


def test_a_misspelt_word_ranks_as_the_word_it_was_taken_for(sample_cairn):
    assert paths(sample_cairn.query, "garlik", top_k=5)[0] == paths(sample_cairn.query, "garlic", top_k=5)[0]
    assert paths(sample_cairn.query, "garlik", top_k=1) == ["Garden/Garlic.md"]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("calendar", "Garden/Planting calendar.md"),
        ("Pantry", "Kitchen/Pantry staples.md"),
        ("starter", "Kitchen/Sourdough starter.md"),
        ("plan", "Kitchen/Meal plan.md"),
        ("Pests and", "Garden/Pests and problems.md"),
    ],
)
def test_a_note_named_by_the_query_comes_first(sample_cairn, text, named):
    """Words of a title find the note so named first, above notes (an index page) that only mention them."""
    assert paths(sample_cairn.query, text, top_k=3)[0] == named


def test_content_operator_searches_the_text_alone(sample_cairn):
    assert parse("content:banneton").plain is False
    assert paths(sample_cairn.query, "content:banneton", top_k=10) == [SOURDOUGH]


def test_a_tag_operator_naming_no_tag_is_a_clear_error(sample_cairn):
    from cairn.errors import BadRequestError  # noqa: PLC0415

    with pytest.raises(BadRequestError, match="tag:# names no valid tag"):
        sample_cairn.query.search(search_request("tag:# bread"))


def test_the_last_word_matches_as_a_prefix_while_typing(sample_cairn):
    assert paths(sample_cairn.query, "bannet")[0] == SOURDOUGH


def test_a_misspelt_word_that_matches_nothing_finds_the_nearest_word(sample_cairn):
    assert paths(sample_cairn.query, "banetton")[0] == SOURDOUGH


@pytest.fixture(scope="module")
def sample_without_withheld(sample_cairn, tmp_path_factory, embedder):
    """A Cairn over a copy of the sample vault without the notes tagged ``personal``, fully indexed."""
    from cairn.policy import Withhold  # noqa: PLC0415

    withhold = Withhold(("personal",))
    base = tmp_path_factory.mktemp("sample-without-withheld")
    vault = base / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    withheld = [p for p in vault.rglob("*.md") if withhold.tag_withheld(sample_cairn.store.note_tags(rel(p, vault)))]
    assert withheld
    for path in withheld:
        path.unlink()
    without = open_cairn(vault, base / "data", embedder)
    try:
        without.indexing.index()
        yield without
    finally:
        without.close()


@pytest.mark.parametrize("text", ["crown", "crow", "rhubarb crown"])
def test_a_withheld_notes_words_change_nothing_a_withheld_caller_finds(sample_cairn, sample_without_withheld, text):
    """Whether a word matches, its typo and prefix expansions: decided without the withheld notes, so a caller
    cannot probe them: the results equal those of the same vault without the withheld notes."""
    from cairn.policy import Withhold  # noqa: PLC0415

    withhold = Withhold(("personal",))
    expected = [
        (h.file_path, h.symbol) for h in sample_without_withheld.query.search(search_request(text, top_k=20)).hits
    ]
    got = [
        (h.file_path, h.symbol)
        for h in sample_cairn.query.search(search_request(text, top_k=20), caller_of(sample_cairn, withhold)).hits
    ]
    assert got == expected


def test_an_answer_keeps_the_cosine_floor(sample_cairn):
    hits, _ = sample_cairn.query.retrieve("banneton", purpose="ask")
    assert all(h.cosine >= 0.35 for h in hits)


def test_the_in_memory_vocabulary_expands_as_fts5s_does(fresh_cairn):
    fresh_cairn.indexing.index()
    before = {q: paths(fresh_cairn.query, q) for q in ("bannet", "banetton", "sourdo bread")}
    assert fresh_cairn.query.start_keyword_index() is not None
    fresh_cairn.query.keyword.wait(60)
    assert fresh_cairn.query.keyword.terms.ready
    fresh_cairn.query.results.clear()
    assert {q: paths(fresh_cairn.query, q) for q in before} == before
    assert before["bannet"][0] == before["banetton"][0] == SOURDOUGH


def test_a_word_of_a_note_added_since_is_found_before_it_has_vectors(fresh_cairn, vault_copy):
    fresh_cairn.indexing.index()
    (vault_copy / "Garden" / "Seed swap.md").write_text(
        "# Seed swap\n\nTraded three packets of Quillwort beans at the village hall.\n", encoding="utf-8"
    )
    fresh_cairn.indexer.sync_text()  # keyword-ready: no vector for the new note yet
    fresh_cairn.query.SIMILARITY_EMBED_TOKENS = 0  # and none computed while searching
    assert paths(fresh_cairn.query, "quillwort")[:1] == ["Garden/Seed swap.md"]


# -- the adapters: CLI, HTTP, MCP -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("search-cli-home")
    run_cli(home, "index", "--vault", str(SAMPLE_VAULT), "--json")
    return home


def run_cli(home: Path, *args: str) -> dict:
    proc = subprocess.run(
        [cairn_executable(), *args], env=cairn_env(home), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


ACCEPTANCE = [
    ("banneton", SOURDOUGH),
    ("Cornichon", "Kitchen/Pickled cucumbers.md"),
    ('"cold proof"', SOURDOUGH),
    ("bannet", SOURDOUGH),
    ("banetton", SOURDOUGH),
]


@pytest.mark.slow
@pytest.mark.parametrize(("text", "first"), ACCEPTANCE)
def test_cairn_search_finds_the_note_holding_the_words(cli_home, text, first):
    out = run_cli(cli_home, "search", text, "--vault", str(SAMPLE_VAULT), "--json")
    assert out["results"][0]["filePath"] == first


@pytest.mark.slow
def test_cairn_search_excludes_and_filters(cli_home):
    out = run_cli(cli_home, "search", "garden -tomato", "--vault", str(SAMPLE_VAULT), "--top-k", "20", "--json")
    assert out["results"] and not {r["filePath"] for r in out["results"]} & notes_holding("tomato")
    out = run_cli(cli_home, "search", "tag:#kitchen bread", "--vault", str(SAMPLE_VAULT), "--json")
    assert out["results"] and all(any(t.split("/")[0] == "kitchen" for t in r["tags"]) for r in out["results"])


def test_http_search_takes_the_syntax_in_q(sample_cairn):
    from support.http_client import AUTH, running

    async def scenario():
        found = {}
        async with running(sample_cairn.query) as client:
            for text, _ in [*ACCEPTANCE, ("garden -tomato", None), ("-", None), ('"unbalanced', None)]:
                async with client.get("/search", params={"q": text, "topK": "10"}, headers=AUTH) as resp:
                    assert resp.status == 200, (text, await resp.text())
                    found[text] = [r["filePath"] for r in (await resp.json())["results"]]
        return found

    found = asyncio.run(asyncio.wait_for(scenario(), timeout=120))
    for text, first in ACCEPTANCE:
        assert found[text][0] == first, text
    assert found["garden -tomato"] and not set(found["garden -tomato"]) & notes_holding("tomato")


def test_http_search_reads_an_operator_before_a_group(sample_cairn):
    from support.http_client import AUTH, running

    async def scenario():
        found = {}
        async with running(sample_cairn.query) as client:
            for text in ("tag:(#garden OR #kitchen)", "tag:#garden", "tag:#kitchen", "file:(Sourdough OR Garlic)"):
                async with client.get("/search", params={"q": text, "topK": "50"}, headers=AUTH) as resp:
                    assert resp.status == 200, (text, await resp.text())
                    found[text] = {r["filePath"] for r in (await resp.json())["results"]}
        return found

    found = asyncio.run(asyncio.wait_for(scenario(), timeout=120))
    assert found["tag:#garden"] and found["tag:#kitchen"]
    assert found["tag:(#garden OR #kitchen)"] == found["tag:#garden"] | found["tag:#kitchen"]
    assert found["file:(Sourdough OR Garlic)"] == {SOURDOUGH, "Kitchen/Sourdough starter.md", "Garden/Garlic.md"}


def test_http_search_takes_a_non_ascii_query_up_to_the_length_limit(sample_cairn):
    from cairn.contract import LIMITS  # noqa: PLC0415
    from support.http_client import AUTH, running

    async def scenario():
        statuses = {}
        async with running(sample_cairn.query) as client:
            for n in (LIMITS.text_chars, LIMITS.text_chars + 1):
                async with client.get("/search", params={"q": "東" * n}, headers=AUTH) as resp:
                    statuses[n] = (resp.status, resp.content_type)
        return statuses

    statuses = asyncio.run(asyncio.wait_for(scenario(), timeout=120))
    assert statuses[LIMITS.text_chars] == (200, "application/json")
    assert statuses[LIMITS.text_chars + 1] == (400, "application/json")  # our limit, as a JSON error


@pytest.mark.e2e
def test_mcp_search_notes_uses_the_same_search(tmp_path, embedder):
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from support.mcp_client import POLICY, make_home

    home = make_home(tmp_path / "home", POLICY)
    vault = tmp_path / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    build_index(vault, home / "data", embedder, config_dir=home / "config")
    params = StdioServerParameters(
        command=cairn_executable(),
        args=["mcp", "--vault", str(vault), "--client", "claude-desktop", "--tool", "search_notes"],
        env=cairn_env(home),
    )

    async def scenario():
        async with Client(stdio_client(params), mode="legacy", read_timeout_seconds=120) as client:
            return await client.call_tool("search_notes", {"query": "banetton"})

    result = asyncio.run(asyncio.wait_for(scenario(), timeout=300))
    assert not result.is_error
    assert result.structured_content["results"][0]["filePath"] == SOURDOUGH


def test_the_syntax_is_documented_in_cairn_search_help_and_openapi():
    from importlib import resources

    from cairn.cli.parser import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    help_text = sub.choices["search"].format_help()
    spec = json.loads(resources.files("cairn").joinpath("openapi.json").read_text("utf-8"))
    (q,) = [p for p in spec["paths"]["/search"]["get"]["parameters"] if p["name"] == "q"]
    for text in (help_text, q["description"]):
        for example in ('"', "-", "tag:#", "path:", "file:", "OR", "prefix"):
            assert example in text, example

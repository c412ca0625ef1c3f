"""A model's answer that cannot be shown — citations and no words, or words that are not in the passages it
cites — is replaced by the answer built from the passages, and the stream, the JSON and the CLI say why.

The judgement on its own (:func:`cairn.answers.degenerate.unusable_reason`), then the one ask path with the
streaming stub of tests/test_answer_llm.py: over HTTP (``replace`` before ``sources``) and at once (what the CLI and
MCP read).
"""

from __future__ import annotations

import pytest

from cairn.answers.degenerate import unusable_reason
from cairn.app import build_services
from cairn.llm import OpenAIChatModel
from support.llm_stub import QUESTION, daemon, llm_config, stub_server, text_of
from support.requests import ask_request
from support.waits import run

GARLIC = "Garlic\nGarlic › Planting\nPlant garlic cloves 5 cm deep in October, pointy end up, 15 cm apart."
BOILER = "Boiler\n\nThe boiler pressure sits at 1.3 bar when cold."
PASSAGES = {1: GARLIC, 2: BOILER}


@pytest.mark.parametrize("text", ["1. [2] 2. [3] 4. [5]", "[1][2]", " [1].\n- [2]\n", "1. 2. 3."])
def test_an_answer_without_a_word_has_no_sentence(text):
    reason = unusable_reason(text, QUESTION, PASSAGES)
    assert reason is not None and reason.startswith("it has no sentence")
    assert ("only citations" in reason) == ("[" in text)


def test_an_answer_that_only_lists_its_sources_names_has_no_sentence():
    # What SmolLM2-135M wrote for "What do I feed the sourdough starter?" over the sample vault.
    listed = "1. [2] Kitchen/Sourdough\n2. [3] Kitchen/Meal plan\n4. [5] Kitchen/Kitchen\n6. [7] Kitchen/Meal plan"
    names = ["Kitchen/Sourdough.md", "Sourdough", "Kitchen/Meal plan.md", "Meal plan", "Home.md", "Home › Kitchen"]
    assert unusable_reason(listed, "What do I feed the sourdough starter?", PASSAGES, names) == (
        "it has no sentence, only citations and the names of notes"
    )
    # and for "When is the garlic harvested?"
    garlic = [
        "Garden/Garlic.md",
        "Garlic",
        "Garlic › Harvest",
        "Garden/Planting calendar.md",
        "Home.md",
        "Home › Garden",
    ]
    said_nothing = "The answer is: [1]. Harvest\n[2] Garden\n[3] Planting calendar\n[4] Home"
    assert unusable_reason(said_nothing, "When is the garlic harvested?", PASSAGES, garlic) is not None
    # a sentence that names a note is still a sentence
    said = "Feed it 50 g of flour as in Kitchen/Sourdough [2]."
    assert unusable_reason(said, "What do I feed the sourdough starter?", {2: "Feed it 50 g of flour."}, names) is None


def test_an_answer_whose_words_are_not_in_the_passages_it_cites_is_unusable():
    reason = unusable_reason("Bake the rye bread at 250 degrees for an hour [1].", QUESTION, PASSAGES)
    assert reason == "most of its words (5 of 5) are not in the passages it cites"
    # the same claims with no citation are judged against every passage the model was given
    uncited = unusable_reason("Bake the rye bread at 250 degrees for an hour.", QUESTION, PASSAGES)
    assert uncited == "most of its words (5 of 5) are not in the passages it was given"
    # words that are only in a passage it does not cite do not count for it
    assert unusable_reason("The boiler pressure sits at 1.3 bar when cold [1].", QUESTION, PASSAGES) is not None
    assert unusable_reason("The boiler pressure sits at 1.3 bar when cold [2].", QUESTION, PASSAGES) is None


@pytest.mark.parametrize(
    "text",
    [
        "Plant garlic cloves 5 cm deep [1].",  # the question's own words
        "In October [1].",  # a short answer is not judged on one word
        "Plant the cloves in October, pointy end up, about 15 cm apart [1].",
        "Planting: October, with the pointed end up [1].",  # other forms of the passage's words
        "The passages do not say how deep to plant garlic.",  # saying it does not know is what the prompt asks
        "Set cloves **5 cm** deep in `October` [1].",
    ],
)
def test_an_answer_from_the_passages_is_kept(text):
    assert unusable_reason(text, QUESTION, PASSAGES) is None


# -- the one ask path ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("citations_only", "it has no sentence, only citations"),
        ("unsupported", "most of its words (5 of 5) are not in the passages it cites"),
    ],
)
def test_over_http_an_unusable_answer_is_replaced_before_the_sources_and_done_says_why(sample_cairn, mode, why):
    extractive = run(build_services(sample_cairn).answers.answer(ask_request(QUESTION, top_k=8)))

    async def scenario():
        async with stub_server(mode) as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            return await c.ask()

    events = run(scenario())
    names = [n for n, _ in events]
    assert names[-3:] == ["replace", "sources", "done"] and set(names[:-3]) == {"token"}
    assert text_of(events)  # the model's tokens were streamed as they came
    replace = events[-3][1]
    assert replace == {"text": extractive.text, "reason": f"The language model's answer was set aside: {why}."}
    assert events[-2][1] == [s.to_json() for s in extractive.sources]  # the sources of the replacing text
    done = events[-1][1]
    assert done["grounded"] is False and done["notFound"] is False and done["fallback"] == replace["reason"]


def test_at_once_the_answer_is_the_replacing_text_and_its_json_says_it_fell_back(sample_cairn):
    """What the CLI and MCP ``ask`` read: the same ask path, collected."""
    extractive = run(build_services(sample_cairn).answers.answer(ask_request(QUESTION, top_k=8)))

    async def scenario():
        async with stub_server("citations_only") as stub:
            services = build_services(sample_cairn, model=OpenAIChatModel(llm_config(stub.url)))
            return await services.answers.answer(ask_request(QUESTION, top_k=8)), stub.requests

    answer, requests = run(scenario())
    assert len(requests) == 1
    assert answer.text == extractive.text and "[5]" not in answer.text
    assert answer.grounded is False and answer.fallback and "only citations" in answer.fallback
    out = answer.to_json()
    assert out["answer"] == extractive.text and out["fallback"] == answer.fallback
    assert [s["filePath"] for s in out["sources"]] == [s.hit.file_path for s in extractive.sources]
    assert "fallback" not in extractive.to_json()  # only an answer that fell back says so


def test_a_usable_model_answer_has_no_replace_and_no_fallback(sample_cairn):
    async def scenario():
        async with stub_server("normal") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            return await c.ask()

    events = run(scenario())
    assert "replace" not in [n for n, _ in events]
    assert events[-1][1]["grounded"] is True and "fallback" not in events[-1][1]

"""A model's answer checked sentence by sentence (:mod:`cairn.answers.grounding`): ``grounded: true`` only when every
sentence stating something is supported by a passage it cites; the others are listed in ``done.unsupported`` and the
JSON answer; an answer with no supported, cited sentence is replaced by the one built from the passages, saying why.

The reading of an answer into sentences on its own; the check with the real embedding model over the sample vault's
index; then the one ask path with the streaming stub of tests/test_answer_llm.py, over HTTP and at once (what the CLI
and MCP read). The real model (SmolLM2 through llama.cpp's server) is in tests/test_llm_e2e.py.
"""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest

from cairn.answers import AnswerService
from cairn.answers.grounding import Passage, answer_sentences
from cairn.app import build_services
from cairn.llm import OpenAIChatModel
from support.http_client import assert_stream_order
from support.llm_stub import QUESTION, daemon, llm_config, stub_server, text_of
from support.requests import ask_request
from support.waits import run

SUPPORTED = "Plant the cloves in October, pointy end up, 15 cm apart, in the bed that had beans [1]."
INVENTED = "Soak them in vodka overnight first [1]."


def test_an_answer_is_read_as_its_sentences_each_with_the_citations_it_carries():
    text = (
        "Here is how:\n"
        "1. Plant garlic 5 cm deep [1]. Then water it. [2]\n"
        "2. **Lift** it in July [1][3].\n"
        "## Storing\n"
        "```\nsome code [1]. More code.\n```\n"
        "- Visit https://example.com/export to export. Done!\n"
    )
    sentences = answer_sentences(text)
    assert [(s.text, s.cites) for s in sentences] == [
        ("Here is how:", ()),
        ("Plant garlic 5 cm deep [1].", (1,)),
        ("Then water it. [2]", (2,)),  # a citation after the full stop is the sentence's before it
        ("**Lift** it in July [1][3].", (1, 3)),
        ("Visit https://example.com/export to export.", ()),  # headings and code are not sentences
        ("Done!", ()),
    ]
    assert all(text[s.start : s.end] == s.text for s in sentences)


@pytest.fixture(scope="module")
def garlic(sample_cairn):
    """(the sentence check, the passages of QUESTION as the model is given them: Garlic as [1])."""
    answers = AnswerService(sample_cairn.query)
    sources = answers.context(ask_request(QUESTION, top_k=8))
    assert sources[0].hit.file_path == "Garden/Garlic.md" and sources[0].hit.symbol == "Garlic"
    passages = {s.n: Passage(s.hit.title, s.hit.symbol, s.hit.text, s.hit.kind) for s in sources}
    return answers.sentence_check, passages


def test_a_sentence_is_supported_only_by_a_passage_it_cites_that_says_it(garlic):
    check, passages = garlic
    other = next(n for n, p in passages.items() if "pointy" not in p.text)  # Garlic › Harvest
    said = {
        SUPPORTED: True,
        "Plant garlic cloves 5 cm deep [1].": True,
        INVENTED: False,  # words the passage does not hold
        "Visit https://example.com/garlic-guide and order the Music variety bulbs [1].": False,
        SUPPORTED.replace("[1]", f"[{other}]"): False,  # the right words, cited from a passage that does not say them
        SUPPORTED.replace(" [1]", ""): False,  # cites nothing
    }
    for sentence, supported in said.items():
        (checked,) = check.check(sentence, passages).sentences
        assert checked.states and checked.supported is supported, (sentence, checked)
    # an uncited sentence is still measured, against every passage the model was given
    (uncited,) = check.check(SUPPORTED.replace(" [1]", ""), passages).sentences
    assert uncited.cosine > 0.7 and uncited.share == 1.0


def test_grounded_means_every_sentence_stating_something_is_supported_and_cited(garlic):
    check, passages = garlic
    whole = check.check(f"Here is how:\n\n{SUPPORTED} Plant garlic cloves 5 cm deep [1].", passages)
    assert whole.grounded and not whole.unsupported  # "Here is how:" states nothing and is not judged
    mixed = check.check(f"{SUPPORTED} {INVENTED}", passages)
    assert not mixed.grounded and mixed.anchored
    assert [s.to_json() for s in mixed.unsupported] == [{"text": INVENTED, "cites": [1]}]
    uncited = check.check(SUPPORTED.replace(" [1]", ""), passages)
    assert not uncited.grounded and not uncited.anchored and not uncited.cites_anything


# -- the one ask path ---------------------------------------------------------------------------------------------


def assert_documented_done(done: dict) -> None:
    """``done`` as the published daemon/cairn/openapi.json describes it: every key it carries is a documented
    property, and it validates against the ``done`` event's schema (what a client generated from it reads)."""
    doc = json.loads(resources.files("cairn").joinpath("openapi.json").read_text("utf-8"))
    (event,) = [
        e for e in doc["components"]["schemas"]["AskEvent"]["oneOf"] if e["properties"]["event"]["const"] == "done"
    ]
    schema = event["properties"]["data"]["contentSchema"]
    assert set(done) <= set(schema["properties"]), set(done) - set(schema["properties"])
    jsonschema.validate(done, {**schema, "components": doc["components"]})


def test_over_http_a_sentence_no_cited_passage_supports_is_listed_in_done_and_grounded_is_false(sample_cairn):
    async def scenario():
        async with stub_server("mixed") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            return await c.ask()

    events = run(scenario())
    assert_stream_order(events)
    assert "replace" not in [n for n, _ in events]  # the model's answer stands, its sentences marked
    assert text_of(events) == f"{SUPPORTED} {INVENTED}"
    done = events[-1][1]
    assert done["grounded"] is False and "fallback" not in done
    assert done["unsupported"] == [{"text": INVENTED, "cites": [1]}]
    assert_documented_done(done)


def test_an_answer_citing_nothing_is_set_aside_for_the_passages_and_done_says_why(sample_cairn):
    """The passage's own words, but no sentence cites it: nothing in it is supported by a passage it cites."""
    extractive = run(build_services(sample_cairn).answers.answer(ask_request(QUESTION, top_k=8)))

    async def scenario():
        async with stub_server("uncited") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            return await c.ask()

    events = run(scenario())
    names = [n for n, _ in events]
    assert names[-3:] == ["replace", "sources", "done"]
    why = "The language model's answer was set aside: none of its sentences cites a passage."
    assert events[-3][1] == {"text": extractive.text, "reason": why}
    done = events[-1][1]
    assert done["grounded"] is False and done["fallback"] == why and "unsupported" not in done
    assert_documented_done(done)


def test_at_once_the_json_answer_lists_the_unsupported_sentences(sample_cairn):
    async def scenario():
        async with stub_server("mixed") as stub:
            services = build_services(sample_cairn, model=OpenAIChatModel(llm_config(stub.url)))
            return await services.answers.answer(ask_request(QUESTION, top_k=8))

    answer = run(scenario())
    assert answer.text == f"{SUPPORTED} {INVENTED}" and answer.grounded is False
    out = answer.to_json()
    assert out["grounded"] is False and out["unsupported"] == [{"text": INVENTED, "cites": [1]}]


def test_a_supported_cited_answer_is_grounded_and_lists_nothing(sample_cairn):
    async def scenario():
        async with stub_server("normal") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            return await c.ask()

    done = run(scenario())[-1][1]
    assert done["grounded"] is True and "unsupported" not in done and "fallback" not in done

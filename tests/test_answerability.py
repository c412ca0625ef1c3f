"""The answerability rule (cairn.answers.answerability): a question whose retrieved chunks pass the cosine floor but do
not hold what it asks about gets the fixed not-found answer, and the model is never called.

Real store, real ONNX model: the rule's evidence on a small vault written here, and the whole ask path over HTTP on
examples/vault with the local OpenAI-compatible stub of test_answer_llm.
"""

from __future__ import annotations

import pytest

from cairn.answers import AnswerService
from cairn.answers.answerability import Answerability, Evidence
from cairn.config import NOT_FOUND_ANSWER
from cairn.llm import OpenAIChatModel
from cairn.policy import Withhold
from cairn.search.withheld import WithheldSet
from conftest import indexed_cairn
from test_answer_llm import daemon, llm_config, stub_server, text_of
from test_http_api import assert_stream_order, run

NEAR_MISS = "What's a simple recipe for guacamole?"  # the Kitchen notes are recipes; none is about guacamole
IN_CORPUS = "How deep do I plant garlic cloves?"

NOTES = {
    "Orchard/Apricots.md": "# Apricots\n\nPrune the apricot trees in late summer, after the harvest. Cut out "
    "crossing branches and keep the centre open.\n",
    "Orchard/Pears.md": "# Pears\n\nPears ripen off the tree: pick them hard and keep them in a cool shed.\n",
    "Kitchen/Bread.md": "# Bread\n\nKnead the dough for ten minutes and let it rise in a warm place.\n",
    "Private/Orchard secrets.md": "---\ntags: [personal]\n---\n# Orchard secrets\n\nThe loppers are Zanzibarite "
    "brand, hidden in the shed.\n",
}


@pytest.fixture(scope="module")
def orchard(tmp_path_factory, embedder):
    vault = tmp_path_factory.mktemp("orchard-vault")
    for rel, text in NOTES.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(text, encoding="utf-8")
    yield from indexed_cairn(vault, tmp_path_factory.mktemp("orchard-data"), embedder)


def evidence_of(cairn, question: str, **kw) -> tuple[list, Evidence]:
    answers = AnswerService(cairn.query)
    hits = answers.retrieve(question)
    return hits, answers.answerability.evidence(question, hits, **kw)


# -- the rule on its own ----------------------------------------------------------------------------------------------


def test_without_unknown_terms_any_coverage_is_answerable():
    assert Answerability.answers(Evidence(coverage=0.0, unknown=0))
    assert Answerability.answers(Evidence(coverage=1.0, unknown=0))


def test_an_unknown_term_with_little_of_the_question_covered_is_not_answerable():
    penalty, least = Answerability.UNKNOWN_PENALTY, Answerability.COVERAGE_MIN
    assert not Answerability.answers(Evidence(coverage=0.0, unknown=1))
    assert not Answerability.answers(Evidence(coverage=least + penalty - 0.01, unknown=1))
    assert Answerability.answers(Evidence(coverage=least + penalty, unknown=1))
    assert Answerability.answers(Evidence(coverage=1.0, unknown=1))


def test_each_unknown_term_needs_more_coverage():
    for coverage in (0.3, 0.5, 0.7, 0.9):
        one, two = (Answerability.answers(Evidence(coverage, n)) for n in (1, 2))
        assert one or not two  # never answerable with two unknown terms but not with one
    assert not Answerability.answers(Evidence(coverage=0.5, unknown=2))


# -- evidence on a real index -----------------------------------------------------------------------------------------


def test_a_question_whose_terms_are_all_in_the_retrieved_chunks_is_fully_covered(orchard):
    hits, ev = evidence_of(orchard, "When should I prune the apricot trees?")
    assert hits and hits[0].file_path == "Orchard/Apricots.md"
    assert ev.coverage == pytest.approx(1.0) and ev.unknown == 0
    assert Answerability.answers(ev)


def test_a_name_the_vault_never_mentions_is_an_unknown_term_and_lowers_coverage(orchard):
    assert orchard.embedder.count_tokens("felco") >= Answerability.UNKNOWN_PIECES
    hits, ev = evidence_of(orchard, "When should I prune the apricot trees with my Felco?")
    assert hits and hits[0].file_path == "Orchard/Apricots.md"
    assert ev.unknown == 1 and 0.0 < ev.coverage < 1.0


def test_a_common_word_the_vault_does_not_use_is_not_unknown(orchard):
    assert orchard.embedder.count_tokens("bicycle") == 1
    _, ev = evidence_of(orchard, "Can I prune the apricot trees from my bicycle?")
    assert ev.unknown == 0 and ev.coverage < 1.0  # not unknown, but still not covered


def test_a_term_only_a_withheld_note_holds_counts_as_absent_for_that_caller(orchard):
    question = "Which pears are Zanzibarite?"
    _, owner = evidence_of(orchard, question)
    hidden = WithheldSet.load(orchard.store, Withhold(("personal",))).chunks
    assert hidden
    _, caller = evidence_of(orchard, question, hidden=hidden)
    assert owner.unknown == 0 and caller.unknown == 1


# -- the ask path over HTTP -------------------------------------------------------------------------------------------


def test_a_near_miss_question_gets_the_not_found_answer_and_the_model_is_never_called(sample_cairn):
    assert sample_cairn.query.retrieve(NEAR_MISS, per_note=3)[0]  # chunks pass the cosine floor

    async def scenario():
        async with stub_server("normal") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            events = await c.ask(NEAR_MISS)
        return stub, events

    stub, events = run(scenario())
    assert_stream_order(events)
    assert stub.requests == []
    assert text_of(events) == NOT_FOUND_ANSWER
    assert events[-2] == ("sources", [])
    assert events[-1][1]["notFound"] is True and events[-1][1]["grounded"] is False


def test_a_question_the_notes_answer_still_reaches_the_model(sample_cairn):
    async def scenario():
        async with stub_server("normal") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            events = await c.ask(IN_CORPUS)
        return stub, events

    stub, events = run(scenario())
    assert len(stub.requests) == 1
    assert events[-1][1]["notFound"] is False and events[-1][1]["grounded"] is True
    assert any(s["filePath"] == "Garden/Garlic.md" for s in events[-2][1])

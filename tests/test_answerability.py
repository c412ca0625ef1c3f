"""The answerability rule (cairn.answers.answerability): a question whose retrieved chunks pass the cosine floor but do
not hold what it asks about gets the fixed not-found answer, and the model is never called.

Real store, real ONNX model: the rule's evidence on a small vault written here, and the whole ask path over HTTP on
examples/vault with the local OpenAI-compatible stub of test_answer_llm.
"""

from __future__ import annotations

import re

import pytest

from cairn.answers import AnswerService
from cairn.answers.answerability import Answerability, Evidence, capitalised_runs
from cairn.app import build_services
from cairn.config import NOT_FOUND_ANSWER, WEAK_ANSWER_LEAD
from cairn.contract import agent_answer_json
from cairn.llm import OpenAIChatModel
from cairn.policy import Withhold
from support.cairns import indexed_cairn
from support.http_client import assert_stream_order
from support.llm_stub import daemon, llm_config, stub_server, text_of
from support.requests import ask_request, caller_of
from support.waits import run

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
    hits = answers.retrieve(ask_request(question))
    return hits, answers.answerability.evidence(question, hits, kw.get("view") or cairn.query.views.of(None))


# -- the rule on its own ----------------------------------------------------------------------------------------------

ANSWERED = Evidence(coverage=1.0, unknown=0, uncovered=0.0, top=0.8)


def test_a_question_wholly_found_in_a_close_passage_is_answerable():
    assert Answerability.answers(ANSWERED)


def test_no_coverage_and_a_distant_passage_is_not_answerable():
    assert not Answerability.answers(Evidence(coverage=0.0, unknown=0, uncovered=1.0, top=0.4))


def test_more_coverage_or_a_closer_passage_never_turns_an_answer_into_not_found():
    for coverage in (0.0, 0.3, 0.6):
        for top in (0.4, 0.55, 0.7):
            ev = Evidence(coverage, 0, 1.0, top)
            better = (Evidence(coverage + 0.3, 0, 1.0, top), Evidence(coverage, 0, 1.0, top + 0.1))
            assert all(Answerability.score(b) > Answerability.score(ev) for b in better)


def test_each_unknown_term_needs_more_evidence():
    for coverage in (0.3, 0.5, 0.7, 0.9):
        one, two = (Answerability.answers(Evidence(coverage, n, float(n), 0.6)) for n in (1, 2))
        assert one or not two  # never answerable with two unknown terms but not with one
    assert Answerability.score(Evidence(0.6, 1, 1.0, 0.6)) < Answerability.score(Evidence(0.6, 0, 1.0, 0.6))


def test_between_an_answer_and_a_refusal_lies_a_band_of_weak_evidence():
    assert Answerability.verdict(ANSWERED) == "answer"
    assert Answerability.verdict(Evidence(coverage=0.0, unknown=0, uncovered=1.0, top=0.4)) == "refuse"
    verdicts = [Answerability.verdict(Evidence(c / 20, 0, 0.5, 0.6)) for c in range(21)]
    assert "weak" in verdicts
    # more coverage never moves a question from answer back to weak, or from weak back to refuse
    order = {"refuse": 0, "weak": 1, "answer": 2}
    assert [order[v] for v in verdicts] == sorted(order[v] for v in verdicts)


def test_a_name_the_vault_never_holds_weighs_against_an_answer():
    plain = Evidence(0.8, 0, 0.5, 0.6)
    named = Evidence(0.8, 0, 0.5, 0.6, names_absent=1)
    assert Answerability.score(named) < Answerability.score(plain)


def test_names_are_the_runs_of_capitalised_words_inside_the_question():
    assert capitalised_runs("Is there a plugin that imports my Google Fit step counts?") == ["Google Fit"]
    assert capitalised_runs("I'm moving to Notion - how do I export from Obsidian?") == ["Notion", "Obsidian"]
    assert capitalised_runs("How do I plant garlic?") == []
    assert capitalised_runs("How do I make tomato sauce? How long does it keep?") == []  # sentences' first words


# -- evidence on a real index -----------------------------------------------------------------------------------------


def test_a_question_whose_terms_are_all_in_the_retrieved_chunks_is_fully_covered(orchard):
    hits, ev = evidence_of(orchard, "When should I prune the apricot trees?")
    assert hits and hits[0].file_path == "Orchard/Apricots.md"
    assert ev.coverage == pytest.approx(1.0) and ev.unknown == 0 and ev.uncovered == 0.0
    assert ev.top == pytest.approx(hits[0].cosine)
    assert Answerability.answers(ev)


def test_a_name_the_vault_never_mentions_is_an_unknown_term_and_lowers_coverage(orchard):
    assert orchard.embedder.count_tokens("felco") >= Answerability.UNKNOWN_PIECES
    hits, ev = evidence_of(orchard, "When should I prune the apricot trees with my Felco?")
    assert hits and hits[0].file_path == "Orchard/Apricots.md"
    assert ev.unknown == 1 and 0.0 < ev.coverage < 1.0
    assert ev.uncovered == pytest.approx(1.0)  # counted as a term of the largest idf


def test_a_common_word_the_vault_does_not_use_weighs_less_than_the_rarest_term(orchard):
    # "bicycle" is in no chunk: it lowers coverage, but as a common word, not as the rarest term of the vault
    _, found = evidence_of(orchard, "When should I prune the apricot trees?")
    _, ev = evidence_of(orchard, "Can I prune the apricot trees from my bicycle?")
    assert 0.5 < ev.coverage < found.coverage


def test_a_name_the_vault_never_holds_is_counted_even_when_its_words_are_common(orchard):
    _, ev = evidence_of(orchard, "Should I prune the apricot trees with Summer Branch shears?")
    assert ev.names_absent == 1  # "summer" and "branches" are in the notes, "Summer Branch" is not
    _, named = evidence_of(orchard, "When do I prune the trees of Apricots?")
    assert named.names_absent == 0  # the note's title holds it


def test_a_common_word_the_vault_does_not_use_is_not_unknown(orchard):
    assert orchard.embedder.count_tokens("bicycle") == 1
    _, ev = evidence_of(orchard, "Can I prune the apricot trees from my bicycle?")
    assert ev.unknown == 0 and ev.coverage < 1.0  # not unknown, but still not covered
    assert ev.uncovered == pytest.approx(Answerability.ABSENT_COMMON)


def test_a_vault_term_the_hits_lack_counts_by_its_rarity(orchard):
    question = "Should I knead the dough before I prune the apricot trees?"
    answers = AnswerService(orchard.query)
    hits = [h for h in answers.retrieve(ask_request(question)) if h.file_path == "Orchard/Apricots.md"]
    assert hits and not any("knead" in h.text.lower() for h in hits)
    ev = answers.answerability.evidence(question, hits, orchard.query.views.of(None))
    assert 0.0 < ev.uncovered < 1.0  # "knead" is in one chunk of four: rare, but not the rarest possible
    whole = answers.answerability.evidence(
        question, answers.retrieve(ask_request(question)), orchard.query.views.of(None)
    )
    assert whole.uncovered < ev.uncovered  # the Bread chunk, once among the hits, covers it


def test_a_term_only_a_withheld_note_holds_counts_as_absent_for_that_caller(orchard):
    question = "Which pears are Zanzibarite?"
    _, owner = evidence_of(orchard, question)
    view = caller_of(orchard, Withhold(("personal",)))
    assert view.hidden
    _, caller = evidence_of(orchard, question, view=view)
    assert owner.unknown == 0 and caller.unknown == 1


# -- the ask path on the Obsidian help vault -------------------------------------------------------------------------

#: Questions the help vault does not answer, as an owner would ask them: a near miss (the vault has a note on a tax,
#: not on filing an income tax return) and plainly off-topic ones.
HELP_OFF_CORPUS = (
    "How do I file my income tax return?",
    "What is the capital of France?",
    "Where do I find a guacamole recipe?",
)
#: Questions the help vault answers.
HELP_IN_CORPUS = (
    "How do I create a new note from a template?",
    "How can I see which notes link to the note I am reading?",
    "Can I sync my vault between my phone and my laptop?",
    "How do I embed an image in a note?",
    "How do I publish my notes as a website?",
)


@pytest.mark.parametrize("question", HELP_OFF_CORPUS)
def test_a_question_the_help_vault_does_not_answer_gets_the_not_found_answer(help_cairn, question):
    answer = run(build_services(help_cairn).answers.answer(ask_request(question)))
    assert answer.not_found and answer.text == NOT_FOUND_ANSWER and answer.sources == []


def test_a_question_in_other_words_than_the_note_uses_is_answered_from_it(help_cairn):
    # "cipher" is in no note: the question must not be refused for using the user's word for encryption
    answer = run(
        build_services(help_cairn).answers.answer(ask_request("Which cipher does Sync use to encrypt my vault?"))
    )
    assert not answer.not_found and not answer.weak and answer.text != NOT_FOUND_ANSWER
    paths = {s.hit.file_path for s in answer.sources}
    assert "Obsidian Sync/Security and privacy.md" in paths
    assert any(s.cited and s.hit.file_path.startswith("Obsidian Sync/") for s in answer.sources)


@pytest.mark.parametrize(
    "question", ["Which cipher does Sync use to encrypt my vault?", "What encryption does Sync use?"]
)
def test_the_passage_naming_the_cipher_reaches_the_model_with_the_sync_encryption_section(help_cairn, question):
    # the subsection under "What encryption do you use?" names AES-256 but neither "cipher" nor "Sync": it ranks far
    # below the sources, and comes with a chunk of its section
    async def scenario():
        async with stub_server("normal") as stub, daemon(help_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            events = await c.ask(question)
        return stub, events

    stub, events = run(scenario())
    sources = events[-2][1]
    assert 0 < len(sources) <= 8
    cipher = [s for s in sources if s["filePath"] == "Obsidian Sync/Security and privacy.md"]
    assert any(s["symbol"] == "Encryption › What encryption do you use?" for s in cipher)
    assert "AES-256" in stub.requests[0]["messages"][-1]["content"]


@pytest.mark.parametrize(
    "question", ["Which cipher does Sync use to encrypt my vault?", "What encryption does Sync use?"]
)
def test_the_answer_without_a_model_quotes_the_sentence_naming_the_cipher(help_cairn, question):
    # the answer a person expects names the cipher: the sentence under "What encryption do you use?", cited to the
    # Security and privacy note, though notes on upgrading Sync's encryption match the question's words better
    answer = run(build_services(help_cairn).answers.answer(ask_request(question)))
    assert not answer.not_found and not answer.weak and not answer.grounded
    cited = {s.n: s for s in answer.sources if s.cited}
    runs = re.findall(r"(.+?)\s*\[(\d+)\]", answer.text, flags=re.S)
    naming = [int(n) for text, n in runs if "AES-256" in text]
    assert naming, answer.text
    assert all(cited[n].hit.file_path == "Obsidian Sync/Security and privacy.md" for n in naming)
    assert any(cited[n].hit.symbol.endswith("What encryption do you use?") for n in naming)


@pytest.mark.parametrize("question", HELP_IN_CORPUS)
def test_a_question_the_help_vault_answers_gets_an_answer_from_its_notes(help_cairn, question):
    answer = run(build_services(help_cairn).answers.answer(ask_request(question)))
    assert not answer.not_found and answer.sources and answer.text != NOT_FOUND_ANSWER


# -- the ask path over HTTP -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("question", [NEAR_MISS, "What is the capital of France?"])
def test_a_near_miss_question_gets_the_not_found_answer_and_the_model_is_never_called(sample_cairn, question):
    if question == NEAR_MISS:
        assert sample_cairn.query.retrieve(question, per_note=3)[0]  # chunks pass the cosine floor

    async def scenario():
        async with stub_server("normal") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            events = await c.ask(question)
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


#: The Pests note says how to keep slugs off, nothing about lettuce: evidence on the topic, but weak.
WEAK = "How do I stop slugs eating my lettuce?"


def test_weak_evidence_shows_the_closest_passages_cited_and_never_calls_the_model(sample_cairn):
    async def scenario():
        async with stub_server("normal") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            events = await c.ask(WEAK)
        return stub, events

    stub, events = run(scenario())
    assert_stream_order(events)
    assert stub.requests == []
    text = text_of(events)
    assert text.startswith(WEAK_ANSWER_LEAD) and text != NOT_FOUND_ANSWER
    sources = events[-2][1]
    assert sources and any(s["filePath"] == "Garden/Pests and problems.md" for s in sources)
    cited = {s["n"] for s in sources if s["cited"]}
    assert cited and all(f"[{n}]" in text for n in cited)
    done = events[-1][1]
    assert done["weak"] is True and done["notFound"] is False and done["grounded"] is False


def test_weak_evidence_is_said_in_the_answer_an_agent_or_the_cli_gets(sample_cairn):
    answer = run(build_services(sample_cairn).answers.answer(ask_request(WEAK)))
    assert answer.weak and not answer.not_found and answer.text.startswith(WEAK_ANSWER_LEAD)
    out = agent_answer_json(answer)
    assert out["weak"] is True and out["notFound"] is False and out["sources"]
    found = agent_answer_json(run(build_services(sample_cairn).answers.answer(ask_request(IN_CORPUS))))
    assert "weak" not in found

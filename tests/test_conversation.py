"""Follow-up questions at the edge and in the prompt (cairn.conversation, cairn.contract, cairn.prompt): which
questions are retrieved with the previous one, how earlier turns are checked, and how a model is shown them."""

from __future__ import annotations

import pytest

from cairn import contract, tool_schemas
from cairn.contract import LIMITS
from cairn.conversation import Turn, refers_back, retrieval_text
from cairn.errors import BadRequestError
from cairn.prompt import HISTORY_RULE, SYSTEM_PROMPT, ContextBlock, build_messages, history_messages

FIRST = "How do I make a callout foldable?"


@pytest.mark.parametrize(
    "question",
    [
        "and give it a custom title?",
        "What about a setting?",
        "what if I host through Netlify?",
        "Can I change the format of its name?",
        "which types can they have?",
        "Are hidden files included?",
        "How long?",
    ],
)
def test_a_question_that_refers_back_is_retrieved_with_the_previous_one(question):
    assert refers_back(question)
    assert retrieval_text(question, [Turn(FIRST, "Add a + or - after the type [1].")], 2000) == f"{FIRST} {question}"


@pytest.mark.parametrize(
    "question",
    ["How do I restore an older version of a note with Sync?", "How do I give a note another name that I can link to?"],
)
def test_a_question_that_stands_on_its_own_is_retrieved_as_it_is(question):
    assert not refers_back(question)
    assert retrieval_text(question, [Turn(FIRST, "")], 2000) == question


def test_without_history_a_question_is_retrieved_as_it_is():
    assert retrieval_text("and give it a custom title?", [], 2000) == "and give it a custom title?"


def test_only_the_last_question_is_folded_in_and_the_text_stays_within_the_limit():
    history = [Turn("How do I embed an image?", "x"), Turn("q" * 1990 + " callouts", "y")]
    text = retrieval_text("and its title?", history, 2000)
    assert len(text) <= 2000 and text.endswith("callouts and its title?") and "embed" not in text


def test_earlier_answers_reach_a_model_without_their_citations():
    history = [Turn("How do I make a callout foldable?", "Add a minus sign [1][2] after the type [3].")]
    assert history_messages(history, 3) == [
        {"role": "user", "content": "How do I make a callout foldable?"},
        {"role": "assistant", "content": "Add a minus sign after the type."},
    ]


def test_the_prompt_carries_the_last_turns_as_conversation_and_numbers_only_this_turns_passages():
    block = ContextBlock(1, "Callouts.md", "Change the title", "Add text after the type.", 0.9, 0)
    history = [Turn(f"question {i}", f"answer {i} [1]") for i in range(5)]
    messages = build_messages("and give it a custom title?", [block], history)
    assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT + "\n" + HISTORY_RULE}
    assert [m["content"] for m in messages[1:-1]] == [
        "question 2",
        "answer 2",
        "question 3",
        "answer 3",
        "question 4",
        "answer 4",
    ]
    assert messages[-1]["role"] == "user" and messages[-1]["content"].startswith("Context passages:\n\n[1] Callouts.md")
    assert "answer 4" not in messages[-1]["content"]
    # Without history the prompt is what it always was.
    assert build_messages("q?", [block])[0] == {"role": "system", "content": SYSTEM_PROMPT}


# -- the edge contract: the same check and message over HTTP (AskRequest) and MCP (the ask tool) ----------------

TOO_LONG_ANSWER = "a" * (LIMITS.history_answer_chars + 1)
BAD_HISTORIES = [
    ("not a list", "history must be a list of earlier turns"),
    ([{"question": "q?", "answer": ""}] * (LIMITS.history_turns + 1), f"the limit is {LIMITS.history_turns}"),
    ([{"question": "x" * (LIMITS.text_chars + 1), "answer": ""}], f"history[0].question is {LIMITS.text_chars + 1} "),
    (
        [{"question": "q?", "answer": ""}, {"question": "q?", "answer": TOO_LONG_ANSWER}],
        f"history[1].answer is {LIMITS.history_answer_chars + 1} characters long; the limit is "
        f"{LIMITS.history_answer_chars}.",
    ),
    ([{"question": " ", "answer": ""}], "history[0].question is empty"),
    ([{"question": "q?"}], "history[0].answer must be a string, got nothing."),
    (["q?"], "history[0] must be an object with question and answer"),
    ([{"question": "q?", "answer": "", "sources": []}], "Unknown field 'sources' in history[0]"),
    ([{"question": "q?", "answer": "half \ud800"}], "history[0].answer holds U+D800, which is not a character"),
]


@pytest.mark.parametrize(("history", "message"), BAD_HISTORIES)
def test_a_bad_history_is_refused_with_one_message_naming_the_field_at_every_edge(history, message):
    with pytest.raises(BadRequestError) as http:
        contract.AskRequest.parse({"question": "and its title?", "history": history})
    with pytest.raises(BadRequestError) as mcp:
        tool_schemas.parse_tool_arguments("ask", {"question": "and its title?", "history": history})
    assert message in http.value.message
    assert mcp.value.message == http.value.message


def test_a_history_within_the_limits_is_accepted_at_every_edge():
    history = [{"question": "q?", "answer": "a" * LIMITS.history_answer_chars}] * LIMITS.history_turns
    wanted = contract.AskRequest.parse({"question": "and its title?", "history": history})
    assert wanted.history == (Turn("q?", "a" * LIMITS.history_answer_chars),) * LIMITS.history_turns
    assert tool_schemas.parse_tool_arguments("ask", {"question": "and its title?", "history": history}) == wanted
    assert contract.AskRequest.parse({"question": "q?"}).history == ()


def test_the_published_openapi_document_states_the_history_limits():
    import json
    from importlib import resources

    doc = json.loads(resources.files("cairn").joinpath("openapi.json").read_text("utf-8"))
    ask = doc["paths"]["/ask"]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]
    turn = doc["components"]["schemas"]["HistoryTurn"]
    assert ask["history"]["maxItems"] == LIMITS.history_turns == tool_schemas.HISTORY_SCHEMA["maxItems"]
    assert turn["properties"]["answer"]["maxLength"] == LIMITS.history_answer_chars
    assert turn["properties"]["question"] == {"$ref": "#/components/schemas/Text"}
    assert turn["required"] == ["question", "answer"] and turn["additionalProperties"] is False

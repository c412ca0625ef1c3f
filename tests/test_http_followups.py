"""Follow-up questions over HTTP: the real app on 127.0.0.1 over the sample vault's real index. A follow-up that
only makes sense after the previous question finds its note when ``POST /ask`` carries the earlier turns
(``history``) and not without them; the answer cites this turn's passages only, a model is shown the earlier
turns as the conversation (the local OpenAI-compatible stub of tests/test_answer_llm.py), and a bad history is a
400 naming the field and the limit while the daemon keeps answering."""

from __future__ import annotations

import aiohttp

from cairn.contract import LIMITS
from cairn.llm import OpenAIChatModel
from cairn.prompt import HISTORY_RULE
from support.http_client import AUTH, assert_error, assert_stream_order
from support.llm_stub import daemon, llm_config, stub_server, text_of
from support.waits import run

FIRST = "How do I make tomato sauce?"
FIRST_ANSWER = "Halve 3 kg of ripe tomatoes and roast them at 200 °C for 40 minutes [1]."
FOLLOW_UP = "How long does it keep?"
HISTORY = [{"question": FIRST, "answer": FIRST_ANSWER}]


def cited_paths(events) -> list[str]:
    sources = next(d for n, d in events if n == "sources")
    return [s["filePath"] for s in sources if s["cited"]]


def test_a_follow_up_finds_its_note_with_the_history_and_not_without(sample_cairn):
    async def scenario():
        async with daemon(sample_cairn, None) as c:
            return await c.ask(FOLLOW_UP), await c.ask(FOLLOW_UP, history=HISTORY)

    alone, followed = run(scenario())
    assert_stream_order(alone)
    assert alone[-1][1]["notFound"] is True  # "it" is nothing without the question before
    assert_stream_order(followed)
    assert followed[-1][1]["notFound"] is False
    assert cited_paths(followed) == ["Kitchen/Tomato sauce.md"]
    # The answer is to this question (how long it keeps), not the previous one again (how to make it).
    assert "Sealed jars keep for a year" in text_of(followed)
    assert "roast" not in text_of(followed).lower()


def test_a_question_that_changes_the_subject_is_answered_as_if_asked_first(sample_cairn):
    question = "How deep do I plant garlic cloves?"

    async def scenario():
        async with daemon(sample_cairn, None) as c:
            return await c.ask(question), await c.ask(question, history=HISTORY)

    alone, followed = run(scenario())
    assert followed[-2] == alone[-2] and text_of(followed) == text_of(alone)
    assert cited_paths(followed)[0] == "Garden/Garlic.md"


def test_a_model_sees_the_earlier_turns_as_conversation_and_cites_only_this_turns_passages(sample_cairn):
    async def scenario():
        # A model answering from this turn's context (its words): the answer is kept, not replaced.
        async with stub_server("quote") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            events = await c.ask(FOLLOW_UP, history=HISTORY)
        return stub, events

    stub, events = run(scenario())
    assert_stream_order(events)
    assert events[-1][1]["grounded"] is True
    messages = stub.requests[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert HISTORY_RULE in messages[0]["content"]
    assert messages[1]["content"] == FIRST
    assert messages[2]["content"] == FIRST_ANSWER.replace(" [1]", "")  # its [1] numbered another turn's sources
    context = messages[3]["content"]
    assert context.rstrip().endswith(f"Question: {FOLLOW_UP}") and FIRST_ANSWER not in context
    sources = events[-2][1]
    assert sources and sources[0]["filePath"] == "Kitchen/Tomato sauce.md"
    assert all(f"[{s['n']}] {s['filePath']}" in context for s in sources)
    assert f"[{len(sources) + 1}]" not in context  # numbered are exactly the sources sent: this turn's


BAD = [
    ({"history": "tomato sauce"}, "history must be a list of earlier turns"),
    (
        {"history": HISTORY * (LIMITS.history_turns + 1)},
        f"history has {LIMITS.history_turns + 1} turns; the limit is {LIMITS.history_turns}.",
    ),
    (
        {"history": [{"question": FIRST, "answer": "x" * (LIMITS.history_answer_chars + 1)}]},
        f"history[0].answer is {LIMITS.history_answer_chars + 1} characters long; the limit is "
        f"{LIMITS.history_answer_chars}.",
    ),
    (
        {"history": [*HISTORY, {"question": "q" * (LIMITS.text_chars + 1), "answer": ""}]},
        f"history[1].question is {LIMITS.text_chars + 1} characters long; the limit is {LIMITS.text_chars}.",
    ),
    ({"history": [{"answer": FIRST_ANSWER}]}, "history[0].question must be a string, got nothing."),
]


def test_a_bad_history_is_a_400_naming_the_field_and_the_limit_and_the_daemon_keeps_answering(sample_cairn):
    async def scenario():
        out = []
        async with daemon(sample_cairn, None) as c:
            for body, _ in BAD:
                async with c.session.post(c.url + "/ask", json={"question": FOLLOW_UP, **body}, headers=AUTH) as r:
                    out.append((r.status, r.content_type, await r.json()))
            after = await c.ask(FOLLOW_UP, history=HISTORY)
        return out, after

    refused, after = run(scenario())
    for (status, ctype, body), (_, message) in zip(refused, BAD, strict=True):
        assert (status, ctype) == (400, "application/json")
        assert_error(body, "bad_request")
        assert message in body["error"]["message"], body
    assert cited_paths(after) == ["Kitchen/Tomato sauce.md"]


def test_the_history_needs_the_token_like_every_ask(sample_cairn):
    async def scenario():
        async with daemon(sample_cairn, None) as c, aiohttp.ClientSession() as bare:
            async with bare.post(c.url + "/ask", json={"question": FOLLOW_UP, "history": HISTORY}) as r:
                return r.status

    assert run(scenario()) == 401

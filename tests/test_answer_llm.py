"""Model-written answers over HTTP: the real app on 127.0.0.1, the real query service over the sample
vault's index, the real LLM client (cairn.llm) talking to a local OpenAI-compatible STUB server
(aiohttp on 127.0.0.1) that streams ``data: {choices[0].delta.content}`` chunks then ``data: [DONE]``.

Stub modes: normal, invents [9], splits [1 ] across chunks, quotes passage [1], HTTP 500, error mid-stream, stalls
past the timeout, empty; plus ``hold`` modes that wait on an event (disconnects, heartbeats, shutdown).
Nothing sleeps: waits are on events with timeouts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket

import aiohttp
import pytest

import cairn.answers.service
from cairn.answers import AnswerService
from cairn.answers.citations import CitationFilter
from cairn.app import build_services
from cairn.config import NOT_FOUND_ANSWER, LLMConfig, is_loopback_url
from cairn.http import make_app, serve
from cairn.llm import OpenAIChatModel
from cairn.prompt import SYSTEM_PROMPT, select_within_budget
from cairn.relevance import RELEVANCE_LABELS
from support.cairns import services_of
from support.http_client import AUTH, TOKEN, assert_stream_order, read_events
from support.llm_stub import QUESTION, Client, Stub, daemon, llm_config, stub_server, text_of
from support.requests import ask_request
from support.waits import run

PERSONAL_QUESTION = "What gifts with tomato sauce or sourdough could I give?"  # Personal/Gift ideas.md + others
ONLY_PERSONAL_QUESTION = "What am I allergic to, and what did the blood test show?"  # Personal/Health notes.md


def expected_sources(sample_cairn, question=QUESTION, cited=()):
    """The ``sources`` event of a model's answer: the context's chunks, those numbered in ``cited`` marked cited."""
    return [
        {**s.to_json(), "cited": s.n in cited}
        for s in AnswerService(sample_cairn.query).context(ask_request(question, top_k=8))
    ]


# -- the model writes the answer ---------------------------------------------------------


def test_ask_streams_the_models_tokens_then_the_prompt_sources_then_done_grounded(sample_cairn):
    async def scenario():
        async with stub_server("normal") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            events = await c.ask()
        return stub, events

    stub, events = run(scenario())
    assert_stream_order(events)
    tokens = [d["text"] for n, d in events if n == "token"]
    assert tokens == Stub.PIECES["normal"]  # the model's own pieces, as they came
    assert events[-2][1] == expected_sources(sample_cairn, cited={1})
    done = events[-1][1]
    assert done["grounded"] is True and done["notFound"] is False and done["removedCitations"] == 0
    # the prompt: system rules, numbered blocks "[n] filePath › symbol", the question
    messages = stub.requests[0]["messages"]
    assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
    for s in events[-2][1]:
        assert f"[{s['n']}] {s['filePath']}" in messages[1]["content"]
    assert messages[1]["content"].rstrip().endswith(QUESTION)
    assert stub.requests[0]["stream"] is True and stub.requests[0]["model"] == "stub"


def test_an_invented_citation_never_reaches_the_client(sample_cairn):
    async def scenario():
        async with stub_server("invent") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            return await c.ask(topK=3)

    events = run(scenario())
    assert "[9]" not in json.dumps(events)
    assert text_of(events) == "Plant garlic in October [1]."
    assert events[-1][1]["removedCitations"] == 1 and events[-1][1]["grounded"] is True


def test_the_sources_say_which_ones_the_models_answer_cites_and_keep_the_others_given_to_it(sample_cairn):
    """``cited`` marks the sources the answer cites ([1]; the invented [9] is removed and marks nothing); the
    other chunks the model was given stay in the event, uncited, for clients to list under "Also retrieved"."""

    async def scenario():
        async with stub_server("invent") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            return await c.ask(topK=3)

    sources = run(scenario())[-2][1]
    assert [(s["n"], s["cited"]) for s in sources] == [(n, n == 1) for n in range(1, len(sources) + 1)]
    assert len(sources) > 1
    assert all(s["relevance"] in RELEVANCE_LABELS for s in sources)


def test_a_citation_split_across_tokens_is_kept_or_removed_whole(sample_cairn):
    async def scenario():
        async with stub_server("split") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            return await c.ask(topK=3)

    events = run(scenario())
    assert text_of(events) == "Plant garlic [1] and water."
    assert events[-1][1]["removedCitations"] == 1


@pytest.mark.parametrize("mode", ["error500", "stall", "empty", "refused"])
def test_a_model_that_fails_before_any_token_gives_the_extractive_answer(sample_cairn, mode):
    extractive = run(build_services(sample_cairn).answers.answer(ask_request(QUESTION, top_k=8)))

    async def scenario():
        async with stub_server("stall" if mode == "stall" else mode) as stub:
            url = stub.url
            if mode == "refused":  # a loopback port nobody listens on
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", 0))
                    url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
            model = OpenAIChatModel(llm_config(url, first_token_timeout_s=0.3))
            async with daemon(sample_cairn, model) as c:
                return await c.ask()

    events = run(scenario())
    assert_stream_order(events)
    assert text_of(events) == extractive.text
    assert events[-2][1] == [s.to_json() for s in extractive.sources]
    assert events[-1][1]["grounded"] is False and events[-1][1]["notFound"] is False


def test_a_model_that_fails_mid_stream_gives_error_then_sources_then_done(sample_cairn):
    async def scenario():
        async with stub_server("midstream") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            return await c.ask()

    events = run(scenario())
    names = [n for n, _ in events]
    assert names == ["token", "error", "sources", "done"]
    assert events[0][1]["text"] == "Plant garlic"
    assert events[1][1]["code"] == "llm_error" and "out of memory" in events[1][1]["message"]
    assert events[2][1] == expected_sources(sample_cairn)
    assert events[3][1]["grounded"] is False


def test_the_model_is_never_called_when_nothing_passes_the_floor(sample_cairn):
    async def scenario():
        async with stub_server("normal") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            events = await c.ask("What do my notes say?", tags=["no-such-tag-anywhere"])
        return stub, events

    stub, events = run(scenario())
    assert text_of(events) == NOT_FOUND_ANSWER and events[-2] == ("sources", [])
    assert events[-1][1]["notFound"] is True
    assert stub.requests == []


def test_a_tiny_budget_drops_the_lowest_scored_chunks_and_sources_list_the_rest(sample_cairn, monkeypatch):
    hits, _ = sample_cairn.query.retrieve(QUESTION, top_k=8, per_note=sample_cairn.query.PER_NOTE_ASK)
    assert len(hits) >= 3
    tokens = [
        sample_cairn.embedder.count_tokens(f"[{i}] {h.file_path} › {h.symbol}\n{h.text}") for i, h in enumerate(hits, 1)
    ]
    budget = sum(sorted(tokens)[:2]) + 1  # room for about two chunks
    kept = select_within_budget([h.score for h in hits], tokens, budget)
    assert 0 < len(kept) < len(hits)
    dropped = [k for k in range(len(hits)) if k not in kept]
    assert min(hits[k].score for k in kept) >= max(hits[k].score for k in dropped)
    monkeypatch.setattr(cairn.answers.service, "CONTEXT_TOKEN_BUDGET", budget)

    async def scenario():
        async with stub_server("normal") as stub, daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url))) as c:
            events = await c.ask()
        return stub, events

    stub, events = run(scenario())
    sources = events[-2][1]
    assert [(s["filePath"], s["symbol"]) for s in sources] == [(hits[k].file_path, hits[k].symbol) for k in kept]
    assert [s["n"] for s in sources] == list(range(1, len(kept) + 1))
    prompt = stub.requests[0]["messages"][1]["content"]
    for k in dropped:
        assert hits[k].text.strip()[:60] not in prompt


# -- privacy: a remote model never sees withheld notes ----------------------------------------


def test_withheld_notes_never_enter_a_remote_models_prompt_but_do_enter_a_local_ones(sample_cairn):
    local_sources = expected_sources(sample_cairn, PERSONAL_QUESTION)
    assert any(s["filePath"] == "Personal/Gift ideas.md" for s in local_sources), local_sources

    async def ask(remote: bool, question: str):
        async with stub_server("quote") as stub:
            async with daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url)), remote=remote) as c:
                events = await c.ask(question)
        return [r["messages"][1]["content"] for r in stub.requests], events

    (local_prompt,), _ = run(ask(False, PERSONAL_QUESTION))
    (remote_prompt,), remote_events = run(ask(True, PERSONAL_QUESTION))
    assert "Personal/Gift ideas.md" in local_prompt and "pruning saw" in local_prompt
    assert "Personal/" not in remote_prompt and "pruning saw" not in remote_prompt
    assert "Kitchen/Tomato sauce.md" in remote_prompt
    sources = remote_events[-2][1]
    assert sources and all(not s["filePath"].startswith("Personal/") for s in sources)
    assert [s["n"] for s in sources] == list(range(1, len(sources) + 1))
    assert remote_events[-1][1]["grounded"] is True

    # every passage withheld: the remote model is not called at all; the local extractive answer stands
    prompts, events = run(ask(True, ONLY_PERSONAL_QUESTION))
    assert prompts == []
    assert events[-1][1]["grounded"] is False and "penicillin" in text_of(events)


POLICY = """version: 1
withhold:
  tags: [personal]
  folders: [{folders}]
default_tools: [get_note, list_notes]
clients: {{}}
audit: {{enabled: false}}
"""


def test_a_remote_model_follows_the_mcp_policy_withheld_folders_and_gets_nothing_when_it_is_broken(
    sample_cairn, tmp_path
):
    from cairn.app import remote_model_withhold
    from cairn.policy_live import PolicyHolder

    async def ask(policy_text: str):
        policy = tmp_path / f"policy-{len(policy_text)}.yaml"
        policy.write_text(policy_text, encoding="utf-8")
        config = sample_cairn.config.replace(mcp_policy=policy)
        async with stub_server("quote") as stub:
            model = OpenAIChatModel(llm_config(stub.url))
            model.remote = True  # what a non-loopback base_url means, without leaving the machine
            holder = PolicyHolder(policy, strict=False)  # the daemon's holder over this policy file
            answers = AnswerService(sample_cairn.query, model, withhold_tags=remote_model_withhold(config, holder))
            services = dataclasses.replace(services_of(sample_cairn, answers=answers), config=config)
            app = make_app(services, token=TOKEN)
            server = await serve(app, "127.0.0.1", 0)
            try:
                async with aiohttp.ClientSession() as session:
                    events = await Client(server.url, session, server).ask(PERSONAL_QUESTION)
            finally:
                await server.close()
        return [r["messages"][1]["content"] for r in stub.requests], events

    (open_prompt,), _ = run(ask(POLICY.format(folders="")))
    assert "Kitchen/Tomato sauce.md" in open_prompt and "Personal/" not in open_prompt
    (prompt,), events = run(ask(POLICY.format(folders="kitchen")))  # folders match in any letter case
    assert "Kitchen/" not in prompt and "Personal/" not in prompt and events[-1][1]["grounded"] is True

    prompts, events = run(ask("version: 1\nwithhold: [unclosed\n"))  # unreadable policy: fail closed
    assert prompts == [] and events[-1][1]["grounded"] is False and text_of(events)


def test_a_non_loopback_base_url_is_remote():
    for url in ["http://127.0.0.1:11434/v1", "http://localhost:8080/v1", "http://[::1]:1234/v1"]:
        assert is_loopback_url(url) and not LLMConfig(base_url=url).remote
        assert OpenAIChatModel(LLMConfig(base_url=url)).remote is False
    for url in [
        "https://api.openai.com/v1",
        "http://192.168.1.5:11434/v1",
        "http://127.0.0.1.nip.io/v1",
        "http://ollama.localhost:11434/v1",
    ]:  # *.localhost: resolved by DNS on many systems
        assert LLMConfig(base_url=url).remote and OpenAIChatModel(LLMConfig(base_url=url)).remote


def test_health_says_the_llm_is_remote(sample_cairn):
    from cairn.llm_probe import LLMProbe

    indexing = sample_cairn.indexing
    remote = indexing.config.replace(llm=LLMConfig(base_url="https://llm.example.com/v1", model="m"))
    saved = indexing.config
    indexing.config = remote
    try:
        assert indexing.health()["llm"] == {"configured": True, "reachable": False, "remote": True}
    finally:
        indexing.config = saved

    async def scenario():
        async with stub_server("normal") as stub:
            model = OpenAIChatModel(llm_config(stub.url))
            model.remote = True
            return await LLMProbe(model).status(), await LLMProbe(None).status()

    status, none = run(scenario())
    assert status == {"configured": True, "reachable": True, "remote": True, "model": "stub"}
    assert none == {"configured": False, "reachable": False, "remote": False}


# -- SSE done right ------------------------------------------------------------------------


def test_a_client_that_leaves_cancels_the_llm_request(sample_cairn):
    async def scenario():
        async with stub_server("hold_after_first") as stub:
            async with daemon(sample_cairn, OpenAIChatModel(llm_config(stub.url, idle_timeout_s=30))) as c:
                resp = await c.session.post(c.url + "/ask", json={"question": QUESTION}, headers=AUTH)
                line = b""
                while not line.startswith(b"data:"):
                    line = await asyncio.wait_for(resp.content.readline(), 10)
                assert b"Plant" in line
                resp.close()  # the client goes away mid-answer
                await asyncio.wait_for(stub.cancelled.wait(), 10)
                return stub.cancelled.is_set()

    assert run(scenario())


def test_a_stream_waiting_for_the_model_sends_comment_heartbeats(sample_cairn):
    async def scenario():
        async with stub_server("hold_before_first") as stub:
            model = OpenAIChatModel(llm_config(stub.url, first_token_timeout_s=30))
            async with daemon(sample_cairn, model, heartbeat_s=0.05) as c:
                async with c.session.post(c.url + "/ask", json={"question": QUESTION}, headers=AUTH) as resp:
                    line = await asyncio.wait_for(resp.content.readline(), 10)
                    assert line == b": ping\n"
                    stub.release.set()
                    events = await read_events(resp)
        return events

    events = run(scenario())
    assert_stream_order(events)
    assert text_of(events) == "Plant garlic [1]." and events[-1][1]["grounded"] is True


def test_open_streams_end_cleanly_when_the_server_shuts_down(sample_cairn):
    async def scenario():
        async with stub_server("hold_before_first") as stub:
            model = OpenAIChatModel(llm_config(stub.url, first_token_timeout_s=30))
            async with daemon(sample_cairn, model) as c:
                resp = await c.session.post(c.url + "/ask", json={"question": QUESTION}, headers=AUTH)
                await asyncio.wait_for(_wait_until(lambda: stub.requests), 10)
                closing = asyncio.ensure_future(c.server.close())
                events = await asyncio.wait_for(read_events(resp), 10)
                await closing
                await asyncio.wait_for(stub.cancelled.wait(), 10)
                return events

    events = run(scenario())
    assert [n for n, _ in events] == ["error", "sources", "done"]
    assert events[0][1]["code"] == "shutting_down"


async def _wait_until(predicate) -> None:
    """Poll a condition on the event loop (yielding, never sleeping a fixed time)."""
    while not predicate():
        await asyncio.sleep(0)


def test_asks_beyond_the_stream_limit_get_503_with_retry_after(sample_cairn):
    config = sample_cairn.config.replace(max_ask_streams=1)

    async def scenario():
        async with stub_server("hold_before_first") as stub:
            model = OpenAIChatModel(llm_config(stub.url, first_token_timeout_s=30))
            async with daemon(sample_cairn, model, config=config) as c:
                first = await c.session.post(c.url + "/ask", json={"question": QUESTION}, headers=AUTH)
                await asyncio.wait_for(_wait_until(lambda: stub.requests), 10)
                async with c.session.post(c.url + "/ask", json={"question": QUESTION}, headers=AUTH) as second:
                    status, retry, body = second.status, second.headers.get("Retry-After"), await second.json()
                stub.release.set()
                events = await read_events(first)
                again = await c.ask()  # the slot is free again
                return status, retry, body, events, again

    status, retry, body, events, again = run(scenario())
    assert status == 503 and retry and int(retry) >= 1 and body["error"]["code"] == "busy"
    assert_stream_order(events)
    assert_stream_order(again)


# -- the citation filter on its own -----------------------------------------------------------


def test_the_citation_filter_handles_every_split_and_leaves_code_alone():
    text = "  Plant garlic [1] deep [9]. See [2][12]; code `a[0]` stays, x[3]."
    for cut in range(1, len(text)):
        for size in (1, 2, 3, cut):
            f = CitationFilter([1, 2, 3])
            out = "".join(f.feed(text[i : i + size]) for i in range(0, len(text), size)) + f.flush()
            assert out == "Plant garlic [1] deep. See [2]; code `a[0]` stays, x[3].", (size, out)
            assert f.removed == 2


# -- privacy: a remote model never sees a withheld note's name through the notes it is given ------------
TITLE_NOTES = {
    "HIV diagnosis 2026.md": "---\ntags: [personal]\naliases: [Chemo Schedule]\n---\n# HIV diagnosis 2026\n"
    "Results from the clinic.\n",
    "People/Dr Smith psychiatrist.md": "---\ntags: [personal]\n---\n# Dr Smith psychiatrist\nAppointments.\n",
    "plan.md": "# Weekly plan\n## Monday with [[Dr Smith psychiatrist#Viral load]] and the garden\n"
    "This week: gardening on Monday, see [[HIV diagnosis 2026]] and [[Chemo Schedule]] and "
    "[my doctor](People/Dr%20Smith%20psychiatrist.md) before the appointment.\n",
}
TITLE_QUESTION = "What is on my weekly plan for gardening on Monday?"
WITHHELD_NAMES = ("HIV", "diagnosis", "Chemo", "Smith", "psychiatrist", "Viral", "my doctor")


@pytest.fixture(scope="module")
def titles_cairn(tmp_path_factory, embedder):
    from support.cairns import indexed_cairn

    vault = tmp_path_factory.mktemp("titles-vault")
    for rel, text in TITLE_NOTES.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(text, encoding="utf-8")
    yield from indexed_cairn(vault, tmp_path_factory.mktemp("titles-data"), embedder)


def test_a_remote_models_prompt_masks_links_to_withheld_notes_and_their_names_in_headings(titles_cairn):
    async def ask(remote: bool):
        async with stub_server("quote") as stub:
            async with daemon(titles_cairn, OpenAIChatModel(llm_config(stub.url)), remote=remote) as c:
                events = await c.ask(TITLE_QUESTION)
        return [r["messages"][1]["content"] for r in stub.requests], events

    (remote_prompt,), remote_events = run(ask(True))
    assert "[1] plan.md › Weekly plan › Monday with [withheld link] and the garden" in remote_prompt, remote_prompt
    assert "see [withheld link] and [withheld link] and [withheld link] before" in remote_prompt, remote_prompt
    leaked = [name for name in WITHHELD_NAMES if name.lower() in remote_prompt.lower()]
    assert not leaked, remote_prompt
    # the owner's own sources event is not masked; the local model's prompt is not either
    sources = remote_events[-2][1]
    assert [s["symbol"] for s in sources] == [
        "Weekly plan › Monday with Dr Smith psychiatrist > Viral load and the garden"
    ]
    (local_prompt,), _ = run(ask(False))
    assert "see [[HIV diagnosis 2026]] and [[Chemo Schedule]]" in local_prompt
    assert "Monday with Dr Smith psychiatrist > Viral load" in local_prompt

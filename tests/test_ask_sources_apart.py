"""An answer's text is the answer alone: its sources travel apart, in the ``sources`` event (``POST /ask``) or field
(``cairn ask --json``, the MCP ``ask`` result's structured content), marked ``cited`` or not. Only the readers that
show an answer as one text render the list: ``cairn ask`` prints it after the answer, the MCP ``ask`` text holds
it after the answer (an agent that reads only the text still learns what each ``[n]`` is).

On the sample vault (examples/vault), with no model (the extractive answer): the real answer service, the real
aiohttp app on 127.0.0.1, the real MCP server with the SDK's in-memory client.
"""

from __future__ import annotations

import json
import re
from importlib import resources

from mcp import Client

from cairn.answers import AnswerService
from cairn.mcp_server import McpService, build_server
from cairn.policy import parse_policy
from support.cairns import services_of
from support.llm_stub import daemon, text_of
from support.policies import POLICY
from support.requests import ask_request
from support.waits import run

#: The extractive answer cites some of the passages it is given and not others (both lists are shown).
QUESTION = "How do I feed my sourdough starter?"
#: A line of a sources list: ``[n] filePath …``.
LIST_LINE = re.compile(r"^\[\d+\] ", re.M)


def assert_answer_alone(text: str, sources: list[dict]) -> None:
    """``text`` holds no sources list; every ``[n]`` it cites is a source marked cited, and some are not cited."""
    assert text.strip() and "Sources:" not in text and "Also retrieved:" not in text, text
    assert not LIST_LINE.search(text), text
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", text)}
    assert cited and cited == {s["n"] for s in sources if s["cited"]}, (text, sources)
    assert any(not s["cited"] for s in sources), sources


def test_the_ask_stream_tokens_carry_the_answer_and_the_sources_event_its_sources(sample_cairn):
    async def scenario():
        async with daemon(sample_cairn, None) as c:
            return await c.ask(QUESTION)

    events = run(scenario())
    assert [n for n, _ in events][-2:] == ["sources", "done"]
    sources = events[-2][1]
    assert_answer_alone(text_of(events), sources)
    whole = run(AnswerService(sample_cairn.query).answer(ask_request(QUESTION)))  # the CLI's and MCP's collected answer
    assert whole.text == text_of(events)
    assert [s.to_json() for s in whole.sources] == sources


def test_mcp_ask_structured_answer_is_the_answer_and_its_text_lists_the_sources(sample_cairn):
    policy = parse_policy(POLICY, "test-policy")
    service = McpService(
        services_of(sample_cairn),
        policy=lambda: policy,
        audit=None,
        transport="stdio",
    )
    server = build_server(service, lambda ctx: ("agent", ("ask",)))

    async def go():
        async with Client(server) as client:
            return await client.call_tool("ask", {"question": QUESTION})

    result = run(go())
    assert not result.is_error
    out = result.structured_content
    assert_answer_alone(out["answer"], out["sources"])
    (text,) = [c.text for c in result.content]
    framed = text.split("<note-content>\n", 1)[1].split("\n</note-content>", 1)[0]
    body, listed = framed.split("\n\nSources:\n", 1)
    cited, also = listed.split("\n\nAlso retrieved:\n", 1)
    assert body == out["answer"]
    assert re.findall(r"^\[(\d+)\] (.+?) › ", cited, re.M) == [
        (str(s["n"]), s["filePath"]) for s in out["sources"] if s["cited"]
    ]
    assert re.findall(r"^\[(\d+)\] (.+?) › ", also, re.M) == [
        (str(s["n"]), s["filePath"]) for s in out["sources"] if not s["cited"]
    ]


def test_openapi_says_the_tokens_carry_the_answer_alone():
    spec = json.loads(resources.files("cairn").joinpath("openapi.json").read_text("utf-8"))
    assert "never a list of its sources" in spec["paths"]["/ask"]["post"]["description"]

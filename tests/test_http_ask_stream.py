"""How ``POST /ask`` streams (cairn.http.sse.pump): the real app on 127.0.0.1 over the sample vault's
index, the real LLM client (cairn.llm) talking to a local OpenAI-compatible stub server that streams
``data: {choices[0].delta.content}`` chunks (the stub of tests/test_answer_llm.py, with one more mode).

What tests/test_answer_llm.py and tests/test_http_api.py already cover is not repeated here (order of
events, heartbeats before the first token, shutdown before the first token, a client that leaves after
the first token). This file covers the pump's waits between model tokens: each token is written as
soon as it arrives, heartbeats and shutdown mid-answer, and an answer longer than the pump's backlog.
Nothing sleeps: waits are on events with timeouts.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from cairn.answers.events import Done, Sources, Token, split_pieces
from cairn.http import PUMP_BACKLOG
from cairn.llm import OpenAIChatModel
from support.http_client import AUTH, assert_stream_order, read_events, running
from support.llm_stub import QUESTION, Stub, daemon, llm_config, stub_server, text_of
from support.stand_ins import EmptyQuery
from support.waits import run

WAIT_S = 10  # the longest any single step may take before the test fails (never a sleep)

#: A model answer sent one piece at a time, each only after the client has read the one before.
LOCKSTEP = ["Plant", " garlic", " cloves", " 5 cm", " deep", " [1]", "."]
#: An answer of more word pieces than the pump holds unwritten (all ready at once, as an extractive one is).
LONG_ANSWER = "Garlic" + "".join(f" w{i}" for i in range(PUMP_BACKLOG * 3 + 17)) + "."


@dataclass
class PacedStub(Stub):
    """The stub with one more mode, ``lockstep``: piece k+1 is sent only once ``read[k]`` is set, i.e.
    once the client has received piece k."""

    read: list[asyncio.Event] = field(default_factory=lambda: [asyncio.Event() for _ in LOCKSTEP])

    def let_go(self) -> None:
        super().let_go()
        for event in self.read:
            event.set()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.mode != "lockstep":
            return await super().handle(request)
        self.requests.append(await request.json())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for piece, read in zip(LOCKSTEP, self.read):
                await resp.write(self.chunk(piece))
                await read.wait()
            await resp.write(b"data: [DONE]\n\n")
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return resp


async def next_frame(resp: aiohttp.ClientResponse) -> tuple[str, object] | str:
    """The next SSE frame as it arrives: ``(event, data)``, or the comment text (``"ping"``)."""
    name = data = None
    while True:
        line = (await asyncio.wait_for(resp.content.readline(), WAIT_S)).decode("utf-8")
        assert line, "the stream ended mid-frame"
        line = line.rstrip("\n")
        if line.startswith(": "):
            return line[2:]
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data = json.loads(line[len("data: ") :])
        elif line == "" and name is not None:
            return name, data


def test_each_model_token_reaches_the_client_before_the_model_sends_the_next(sample_cairn):
    async def scenario():
        async with stub_server(stub=PacedStub(mode="lockstep")) as stub:
            model = OpenAIChatModel(llm_config(stub.url, idle_timeout_s=30))
            async with daemon(sample_cairn, model) as c:
                async with c.session.post(c.url + "/ask", json={"question": QUESTION}, headers=AUTH) as resp:
                    received = []
                    for k, piece in enumerate(LOCKSTEP):
                        # the stub holds piece k+1 until this one is read: a pump that kept model tokens
                        # back to write them together would never get here (the wait would time out)
                        frame = await next_frame(resp)
                        assert frame == ("token", {"text": piece})
                        assert all(not e.is_set() for e in stub.read[k:])
                        received.append(frame)
                        stub.read[k].set()
                    rest = await read_events(resp)
        return received + rest

    events = run(scenario())
    assert_stream_order(events)
    assert text_of(events) == "".join(LOCKSTEP)
    assert events[-1][1]["grounded"] is True


def test_a_stream_waiting_between_model_tokens_sends_heartbeats_then_the_rest(sample_cairn):
    async def scenario():
        async with stub_server("hold_after_first") as stub:
            model = OpenAIChatModel(llm_config(stub.url, idle_timeout_s=30))
            async with daemon(sample_cairn, model, heartbeat_s=0.05) as c:
                async with c.session.post(c.url + "/ask", json={"question": QUESTION}, headers=AUTH) as resp:
                    # Pings may come before the first token too (retrieval outlasting a 50 ms heartbeat on a busy
                    # machine); what matters is a ping after it, while the model holds.
                    frames = [await next_frame(resp)]
                    while not (frames[-1] == "ping" and any(f != "ping" for f in frames)):
                        frames.append(await next_frame(resp))
                    assert not stub.release.is_set()
                    stub.release.set()
                    rest = await read_events(resp)
        return frames, rest

    frames, rest = run(scenario())
    tokens = [f for f in frames if f != "ping"]
    assert tokens == [("token", {"text": "Plant"})]
    events = tokens + rest
    assert_stream_order(events)
    assert text_of(events) == "Plant cloves 5 cm deep [1]." and events[-1][1]["grounded"] is True


def test_a_server_shutdown_mid_answer_ends_the_stream_with_shutting_down_and_cancels_the_model(sample_cairn):
    async def scenario():
        async with stub_server("hold_after_first") as stub:
            model = OpenAIChatModel(llm_config(stub.url, idle_timeout_s=30))
            async with daemon(sample_cairn, model) as c:
                resp = await c.session.post(c.url + "/ask", json={"question": QUESTION}, headers=AUTH)
                first = await next_frame(resp)
                assert first == ("token", {"text": "Plant"})
                closing = asyncio.ensure_future(c.server.close())
                rest = await asyncio.wait_for(read_events(resp), WAIT_S)
                await asyncio.wait_for(closing, WAIT_S)
                await asyncio.wait_for(stub.cancelled.wait(), WAIT_S)
                return [first] + rest

    events = run(scenario())
    assert [n for n, _ in events] == ["token", "error", "sources", "done"]
    assert events[1][1]["code"] == "shutting_down"
    assert events[2][1] == [] and events[3][1]["grounded"] is False


class LongAnswers:
    """An answer service (the stand-in style of tests/test_http_api.py) whose answer is :data:`LONG_ANSWER`."""

    async def stream(self, request, caller=None):
        for piece in split_pieces(LONG_ANSWER):
            yield Token(piece)
        yield Sources()
        yield Done(False)


def test_an_answer_of_more_pieces_than_the_pump_backlog_streams_whole_and_in_order():
    async def scenario():
        async with running(EmptyQuery(), answers=LongAnswers()) as client:
            async with client.post("/ask", json={"question": "garlic?"}, headers=AUTH) as resp:
                return await read_events(resp)

    events = run(scenario())
    assert_stream_order(events)
    tokens = [d["text"] for n, d in events if n == "token"]
    assert tokens == split_pieces(LONG_ANSWER)  # each word piece its own event, in order, none merged
    assert len(tokens) > 3 * PUMP_BACKLOG

"""A local OpenAI-compatible chat-completions STUB (aiohttp on 127.0.0.1) that streams
``data: {choices[0].delta.content}`` chunks then ``data: [DONE]`` in a switchable mode, the model settings that
point at it, and the real HTTP app answering with it over a real Cairn (the one fake the rules allow: an LLM)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from cairn.answers import AnswerService
from cairn.config import LLMConfig
from cairn.http import make_app, serve
from support.cairns import services_of
from support.http_client import AUTH, TOKEN, read_events

QUESTION = "How deep do I plant garlic cloves?"


@dataclass
class Stub:
    """A local OpenAI-compatible chat-completions server with a switchable ``mode``."""

    mode: str = "normal"
    url: str = ""
    requests: list[dict] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    first_sent: asyncio.Event = field(default_factory=asyncio.Event)

    def let_go(self) -> None:
        """Let every answer held part-way finish (the server is about to stop)."""
        self.release.set()

    PIECES = {
        "normal": ["Plant", " garlic", " cloves", " 5 cm", " deep", " [1]", "."],
        "invent": ["Plant", " cloves", " [9]", " in", " October,", " pointy", " end", " up", " [1]", "."],
        "split": ["Plant", " garlic", " [", "1", "]", " and", " water [", "9", "]", "."],
        # unusable answers (tests/test_answer_degenerate.py): citations and no words; words from nowhere
        "citations_only": ["1", ".", " [", "2", "]", " 2. [3]", "\n", "4. [5]"],
        # a model's sentences checked one by one (tests/test_answer_grounding.py): one the passage says, one it
        # does not; the passage's words with no citation at all
        "mixed": [
            "Plant the cloves in October,",
            " pointy end up, 15 cm apart,",
            " in the bed that had beans [1].",
            " Soak them in vodka overnight first [1].",
        ],
        "uncited": ["Plant cloves in October,", " pointy end up,", " 5 cm deep and 15 cm apart."],
        "unsupported": [
            "Bake",
            " the",
            " rye",
            " bread",
            " at",
            " 250",
            " degrees",
            " for",
            " an",
            " hour",
            " [1]",
            ".",
        ],
    }

    @staticmethod
    def quote(prompt: str) -> list[str]:
        """The first sentence of passage [1]'s text in ``prompt`` (after its ``[1] path › heading`` line: its first
        line of text, list markers and markdown marks left out, at most twelve words), then `` [1].``, as word
        pieces."""
        passage = prompt.split("\n[1] ", 1)[1].split("\n", 1)[1].split("\n[2] ", 1)[0]
        line = next(x for x in passage.splitlines() if x.strip() and not x.lstrip().startswith("#"))
        line = re.sub(r"^\s*(?:[-*+>]|\d+\.)\s+", "", line)
        sentence = re.split(r"(?<=[.!?])\s", re.sub(r"[*_`>\[\]]", "", line), maxsplit=1)[0]
        words = sentence.rstrip(".!?").split()[:12]
        return [w + " " for w in words[:-1]] + [words[-1], " [1]."]

    @staticmethod
    def chunk(text: str) -> bytes:
        return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}).encode() + b"\n\n"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(await request.json())
        if self.mode == "error500":
            return web.json_response({"error": {"message": "model exploded"}}, status=500)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            if self.mode in self.PIECES:
                for piece in self.PIECES[self.mode]:
                    await resp.write(self.chunk(piece))
            elif self.mode == "quote":  # a model that answers from its context: passage [1]'s first sentence, cited
                for piece in self.quote(self.requests[-1]["messages"][-1]["content"]):  # this turn's context
                    await resp.write(self.chunk(piece))
            elif self.mode == "midstream":
                await resp.write(self.chunk("Plant garlic"))
                await resp.write(b'data: {"error": {"message": "out of memory"}}\n\n')
            elif self.mode == "stall":  # nothing until released (the client's timeout fires first)
                await self.release.wait()
            elif self.mode == "hold_after_first":
                await resp.write(self.chunk("Plant"))
                self.first_sent.set()
                await self.release.wait()
                await resp.write(self.chunk(" cloves 5 cm deep [1]."))
            elif self.mode == "hold_before_first":
                await self.release.wait()
                await resp.write(self.chunk("Plant cloves 5 cm deep [1]."))
            elif self.mode == "empty":
                await resp.write(b": keep-alive\n\n")
                await resp.write(self.chunk(""))
            await resp.write(b"data: [DONE]\n\n")
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return resp


@asynccontextmanager
async def stub_server(mode: str = "normal", stub: Stub | None = None):
    """``stub`` (else a :class:`Stub` in ``mode``) served on 127.0.0.1:<random port>; on leaving, every answer it
    holds back is let go (:meth:`Stub.let_go`) and the server stops."""
    stub = stub if stub is not None else Stub(mode=mode)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", stub.handle)

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "stub"}]})

    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    stub.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    try:
        yield stub
    finally:
        stub.let_go()
        await runner.cleanup()


def llm_config(url: str, **kw) -> LLMConfig:
    values = {
        "base_url": url,
        "model": "stub",
        "first_token_timeout_s": 1.0,
        "idle_timeout_s": 1.0,
        "connect_timeout_s": 1.0,
        "total_timeout_s": 10.0,
    }
    values.update(kw)
    return LLMConfig(**values)


@dataclass
class Client:
    url: str
    session: aiohttp.ClientSession
    server: Any

    async def ask(self, question: str = QUESTION, **body) -> list[tuple[str, Any]]:
        async with self.session.post(self.url + "/ask", json={"question": question, **body}, headers=AUTH) as resp:
            assert resp.status == 200
            return await read_events(resp)


@asynccontextmanager
async def daemon(sample_cairn, model, *, remote: bool | None = None, heartbeat_s: float = 15.0, config=None):
    if model is not None and remote is not None:
        model.remote = remote  # what a non-loopback base_url means, without leaving the machine
    answers = AnswerService(sample_cairn.query, model, withhold_tags=("personal",))
    services = dataclasses.replace(services_of(sample_cairn, answers=answers), config=config or sample_cairn.config)
    app = make_app(services, token=TOKEN, heartbeat_s=heartbeat_s)
    server = await serve(app, "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            yield Client(server.url, session, server)
    finally:
        await server.close()


def text_of(events) -> str:
    return "".join(d["text"] for n, d in events if n == "token")

"""The stub model of tests/test_plugin_e2e.py: a local OpenAI-compatible chat-completions server (aiohttp on
127.0.0.1, in its own thread) whose answer depends on the question, and the questions the sidebar is asked.

- a question about tomatoes streams a few words, holds until the test releases it, then finishes;
- a question about garlic (or the PDF) gets HTTP 500, so the daemon answers from passages (``grounded: false``);
- a question about sourdough streams a few words, then holds until the client goes away (Stop);
- the follow-up after the garlic question gets a short answer about storing garlic at once;
- a question about pickling gets a sentence the cited note says and one it does not (marked ⚠);
- a question about tomato sauce gets the recipe's steps in the model's words with no citation (set aside, saying why).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading

TOMATO_QUESTION = "When do I sow tomatoes, and when do they go into the polytunnel?"
GARLIC_QUESTION = "How deep do I plant garlic cloves?"
SOURDOUGH_QUESTION = "How do I feed my sourdough starter?"
#: Only meaningful after GARLIC_QUESTION: alone it is not found in the sample vault.
FOLLOW_UP_QUESTION = "And how do I store them after lifting?"
OFF_CORPUS_QUESTION = "What is the capital of France?"
#: Answered with one sentence the Pickled cucumbers note says and one it does not: the second is marked.
PICKLE_QUESTION = "How do I pickle cucumbers?"
PICKLE_SUPPORTED = "Bring the brine to the boil and pour it over the cucumbers packed with dill heads [1]."
PICKLE_MADE_UP = "Leave the jars on a sunny windowsill for a week before eating [1]."
#: Answered with steps in the Tomato sauce note's words that cite nothing: set aside for the note's own sentences.
SAUCE_QUESTION = "How do I make tomato sauce?"
SAUCE_UNCITED = [
    "1. Halve the ripe tomatoes and roast them at 200 °C with garlic.\n",
    "2. Pass everything through the food mill and simmer it with basil.\n",
]
#: The Pests note names the hedgehog, nothing about feeding it: weak evidence, answered with the closest passages.
WEAK_QUESTION = "What should I feed the hedgehog?"
#: Answered on page 3 of the PDF added to the vault copy; the stub model refuses it (HTTP 500), so the daemon
#: answers from passages and the citation is the daemon's own.
PDF_QUESTION = "What does the PDF say about building a cairn that lasts the winter?"


class StubModel:
    """An OpenAI-compatible chat-completions server on 127.0.0.1 (aiohttp, in its own thread)."""

    FIRST = ["Sow", " tomatoes", " indoors", " in", " the", " first", " week", " of", " March", " [1]", "."]
    REST = [
        " Plant",
        " them",
        " out",
        " in",
        " the",
        " polytunnel",
        " in",
        " mid-May",
        ",",
        " 45",
        " cm",
        " apart",
        " [1]",
        ",",
        " on",
        " plot",
        " 14",
        " [PLOT]",  # the number of the passage in the prompt that says it (the Tomatoes note's opening)
        ".",
    ]

    STORE = [
        "Dry",
        " them",
        " for",
        " two",
        " to",
        " three",
        " weeks",
        " in",
        " the",
        " shed",
        ",",
        " then",
        " store",
        " them",
        " somewhere",
        " cool",
        " and",
        " dry",
        " [2]",
        ".",
    ]

    def __init__(self) -> None:
        self.url = ""
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="stub-llm", daemon=True)
        self.held = threading.Event()  # the stream is paused part-way (set by the stub)
        self.cancelled = threading.Event()  # a held stream's client went away (set by the stub)
        self._release: asyncio.Event | None = None
        self._runner = None
        self.questions: list[str] = []
        self.messages: list[list[dict]] = []  # each request's chat messages
        self.plot_n = 0  # the tomato answer's second citation: the number of the Tomatoes note's opening in its prompt

    def start(self) -> StubModel:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=30)
        return self

    def release(self) -> None:
        """Let a held tomato answer finish."""
        self.loop.call_soon_threadsafe(self._release.set)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)

    async def _start(self) -> None:
        from aiohttp import web

        self._release = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)

        async def models(request):
            return web.json_response({"data": [{"id": "stub"}]})

        app.router.add_get("/v1/models", models)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"

    @staticmethod
    def _chunk(text: str) -> bytes:
        return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}).encode() + b"\n\n"

    async def _chat(self, request):
        from aiohttp import web

        body = await request.json()
        user = next((m["content"] for m in reversed(body["messages"]) if m["role"] == "user"), "")
        question = user.rpartition("Question:")[2].strip()  # cairn.prompt: context passages, then "Question: ..."
        self.questions.append(question)
        self.messages.append(body["messages"])
        if "garlic" in question.lower() or "pdf" in question.lower():
            return web.json_response({"error": {"message": "model exploded"}}, status=500)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if question in (PICKLE_QUESTION, SAUCE_QUESTION):
            pieces = (PICKLE_SUPPORTED, " ", PICKLE_MADE_UP) if question == PICKLE_QUESTION else SAUCE_UNCITED
            for piece in pieces:
                await resp.write(self._chunk(piece))
            await resp.write(b"data: [DONE]\n\n")
            return resp
        if question == FOLLOW_UP_QUESTION:
            for piece in self.STORE:
                await resp.write(self._chunk(piece))
            await resp.write(b"data: [DONE]\n\n")
            return resp
        try:
            for piece in self.FIRST:
                await resp.write(self._chunk(piece))
            self.held.set()
            if "sourdough" in question.lower():
                await asyncio.Event().wait()  # until the client leaves (Stop) and the daemon cancels us
            await self._release.wait()
            self._release.clear()
            plot = re.search(r"^\[(\d+)\] Garden/Tomatoes\.md › Tomatoes$", user, re.M)
            self.plot_n = int(plot.group(1)) if plot else 0
            for piece in self.REST:
                await resp.write(self._chunk(piece.replace("PLOT", str(self.plot_n))))
            await resp.write(b"data: [DONE]\n\n")
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return resp

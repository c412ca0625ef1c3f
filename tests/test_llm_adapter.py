"""cairn.llm.OpenAIChatModel against real local HTTP servers that fail the ways model servers do."""

from __future__ import annotations

import asyncio
import socket

from aiohttp import web

from cairn.config import LLMConfig
from cairn.errors import LLMError
from cairn.llm import OpenAIChatModel


def config(url: str) -> LLMConfig:
    return LLMConfig(
        base_url=url,
        model="stub",
        first_token_timeout_s=2.0,
        idle_timeout_s=2.0,
        connect_timeout_s=2.0,
        total_timeout_s=10.0,
    )


async def collect(model: OpenAIChatModel) -> tuple[list[str], LLMError | None]:
    pieces: list[str] = []
    try:
        async for piece in model.stream([{"role": "user", "content": "hi"}]):
            pieces.append(piece)
    except LLMError as exc:
        return pieces, exc
    return pieces, None


def test_a_model_server_that_drops_the_connection_mid_answer_is_said_to_have_broken_off():
    async def scenario():
        async def chat(request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b'data: {"choices": [{"delta": {"content": "Plant garlic"}}]}\n\n')
            request.transport.close()  # the model server dies mid-answer (chunked body never finished)
            return resp

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            return await collect(OpenAIChatModel(config(f"http://127.0.0.1:{runner.addresses[0][1]}/v1")))
        finally:
            await runner.cleanup()

    pieces, error = asyncio.run(scenario())
    assert pieces == ["Plant garlic"]
    assert error is not None and "broke off its answer" in str(error) and "Cannot reach" not in str(error)


def test_a_model_server_that_is_not_running_cannot_be_reached():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pieces, error = asyncio.run(collect(OpenAIChatModel(config(f"http://127.0.0.1:{port}/v1"))))
    assert pieces == [] and error is not None and "Cannot reach the language model" in str(error)

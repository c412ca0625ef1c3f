"""``cairn ask`` with a language model, through the real console script (subprocesses) against a local
OpenAI-compatible stub server (aiohttp on 127.0.0.1, in a thread) that streams ``data: {choices[0].delta.content}``
chunks then ``data: [DONE]``: the plain output always lists its sources; a base URL without a model name takes the
server's only model, or says to set one."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from support.cli import run_cairn
from support.vaults import small_vault

pytestmark = pytest.mark.slow  # a `cairn` subprocess per call

QUESTION = "How deep do I plant garlic cloves?"
PIECES = {
    "normal": ["Plant", " garlic", " cloves", " 5 cm", " deep", " [1]", "."],
    "uncited": ["Plant", " garlic", " in", " autumn", "."],
    "midstream": ["Plant", " garlic [1]"],
    "citations_only": ["1. [1]", " 2. [2]"],
}


@dataclass
class Stub:
    """What the stub server was asked: the chat request bodies."""

    mode: str
    models: list[str]
    url: str = ""
    requests: list[dict] = field(default_factory=list)


def _chunk(text: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}).encode() + b"\n\n"


def _app(stub: Stub) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        stub.requests.append(await request.json())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in PIECES[stub.mode]:
            await resp.write(_chunk(piece))
        if stub.mode == "midstream":
            await resp.write(b'data: {"error": {"message": "out of memory"}}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model"} for m in stub.models]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    return app


@contextmanager
def stub_server(mode: str = "normal", models: tuple[str, ...] = ("stub",)) -> Iterator[Stub]:
    """The stub on a free loopback port, served by its own event loop in a thread until the block ends."""
    stub = Stub(mode, list(models))
    loop = asyncio.new_event_loop()
    started = threading.Event()
    runner = web.AppRunner(_app(stub))

    async def start() -> None:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        stub.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)
    assert started.is_set()
    try:
        yield stub
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


def ask(home: Path, vault: Path, stub: Stub, *, model: str | None = "stub"):
    env = {"CAIRN_LLM_BASE_URL": stub.url, **({"CAIRN_LLM_MODEL": model} if model is not None else {})}
    return run_cairn(home, "ask", "--vault", str(vault), QUESTION, env=env)


def sources_section(stdout: str) -> list[str]:
    """The lines from ``Sources:`` to the end of the plain output."""
    lines = stdout.rstrip("\n").splitlines()
    assert "Sources:" in lines, stdout
    return lines[lines.index("Sources:") :]


@pytest.fixture
def indexed(tmp_path) -> Path:
    vault = small_vault(tmp_path)
    run_cairn(tmp_path, "index", "--vault", str(vault))
    return vault


# -- item 2: the plain output always lists its sources -------------------------------------------


def test_a_model_answer_ends_with_the_sources_it_cites(tmp_path, indexed):
    with stub_server("normal") as stub:
        proc = ask(tmp_path, indexed, stub)
    assert proc.stdout.startswith("Plant garlic cloves 5 cm deep [1].")
    section = sources_section(proc.stdout)
    assert section[1].startswith("[1] Garden/Garlic.md › Garlic")
    assert stub.requests and stub.requests[0]["model"] == "stub"


def test_a_model_answer_citing_nothing_still_lists_the_passages_it_was_given(tmp_path, indexed):
    with stub_server("uncited") as stub:
        proc = ask(tmp_path, indexed, stub)
    section = sources_section(proc.stdout)
    assert section[1] == "(the answer cites none of the passages below)"
    assert "Also retrieved:" in section and any(line.startswith("[1] Garden/Garlic.md") for line in section)


def test_a_model_that_stops_mid_answer_still_lists_its_sources_and_says_it_stopped(tmp_path, indexed):
    with stub_server("midstream") as stub:
        proc = ask(tmp_path, indexed, stub)
    assert proc.stdout.startswith("Plant garlic [1]")
    section = sources_section(proc.stdout)
    assert section[1].startswith("[1] Garden/Garlic.md › Garlic")
    assert "The language model stopped before the answer was complete" in proc.stderr
    assert "out of memory" in proc.stderr


def test_a_model_answer_of_citations_only_is_replaced_by_the_notes_own_sentences_saying_why(tmp_path, indexed):
    with stub_server("citations_only") as stub:
        proc = ask(tmp_path, indexed, stub)
        as_json = json.loads(
            run_cairn(
                tmp_path,
                "ask",
                "--vault",
                str(indexed),
                QUESTION,
                "--json",
                env={"CAIRN_LLM_BASE_URL": stub.url, "CAIRN_LLM_MODEL": "stub"},
            ).stdout
        )
    assert proc.stdout.startswith("Plant garlic cloves 5 cm deep in October, pointy end up. [1]"), proc.stdout
    assert "1. [1]" not in proc.stdout
    assert "The language model's answer was set aside: it has no sentence, only citations." in proc.stdout
    assert sources_section(proc.stdout)[1].startswith("[1] Garden/Garlic.md › Garlic")
    assert as_json["grounded"] is False and "only citations" in as_json["fallback"]
    assert as_json["answer"].startswith("Plant garlic cloves 5 cm deep")


# -- item 9: a base URL without a model ----------------------------------------------------------


def test_without_llm_model_the_servers_only_model_is_used(tmp_path, indexed):
    with stub_server("normal", models=("qwen2.5:3b",)) as stub:
        proc = ask(tmp_path, indexed, stub, model=None)
    assert [r["model"] for r in stub.requests] == ["qwen2.5:3b"]
    assert proc.stdout.startswith("Plant garlic cloves 5 cm deep [1].")


def test_without_llm_model_and_several_models_the_error_says_to_set_one(tmp_path, indexed):
    with stub_server("normal", models=("llama3", "mistral")) as stub:
        proc = ask(tmp_path, indexed, stub, model=None)
    assert stub.requests == []  # never a chat request with "model": ""
    assert "llm.model is not set" in proc.stderr and "offers 2 models (llama3, mistral)" in proc.stderr
    assert "set llm.model (CAIRN_LLM_MODEL)" in proc.stderr
    assert "Sources:" in proc.stdout  # the extractive answer, from the notes' own sentences

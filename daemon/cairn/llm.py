"""The optional language model: a client for any OpenAI-compatible chat-completions endpoint
with streaming (Ollama, llama.cpp server, LM Studio, vLLM, hosted APIs). Layer 3 adapter (aiohttp).

``POST {base_url}/chat/completions`` with ``stream: true``; the server answers
``text/event-stream`` lines ``data: {"choices": [{"delta": {"content": "..."}}]}`` and a final
``data: [DONE]``. :meth:`OpenAIChatModel.stream` yields the content pieces.

Every failure — connection refused, TLS, HTTP status >= 400, a malformed line, an ``error``
object in the stream, no first token within ``first_token_timeout_s``, no next token within
``idle_timeout_s``, the whole answer past ``total_timeout_s`` — is raised as
:class:`~cairn.errors.LLMError` (the answer service then falls back to the extractive answer,
or reports an ``error`` event when tokens were already streamed). Cancelling the consuming task
closes the HTTP connection, which is how the model's work is cancelled when a client leaves.

The API key (``cairn secret set llm-api-key``) is sent as ``Authorization: Bearer``; it is never
logged nor put in an error message. Proxy environment variables are ignored (``trust_env=False``):
the endpoint in the config is the one that is called.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import aiohttp

from cairn.config import Config, LLMConfig, is_loopback_url
from cairn.errors import LLMError

log = logging.getLogger(__name__)


class OpenAIChatModel:
    """A streaming chat model behind an OpenAI-compatible endpoint (implements :class:`cairn.answers.ChatModel`)."""

    def __init__(self, config: LLMConfig, *, api_key: str | None = None) -> None:
        if not config.base_url:
            raise LLMError("No llm.base_url configured.")
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self.model = config.model
        self._api_key = api_key
        #: A non-loopback endpoint counts as a remote client: withheld notes never reach its prompt.
        self.remote = not is_loopback_url(self.base_url)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _session(self, total: float | None) -> aiohttp.ClientSession:
        timeout = aiohttp.ClientTimeout(
            total=total, sock_connect=self.config.connect_timeout_s, connect=self.config.connect_timeout_s
        )
        return aiohttp.ClientSession(timeout=timeout, trust_env=False)

    async def stream(self, messages: Sequence[dict[str, str]]) -> AsyncIterator[str]:
        """Yield the answer's text pieces as the model streams them. Raises :class:`LLMError`."""
        if not self.model:
            self.model = await self._only_model()
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "stream": True,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }
        url = self.base_url + "/chat/completions"
        deadline = time.monotonic() + self.config.total_timeout_s
        answered = False  # the model's HTTP answer began: a later network error is a break, not "cannot reach"
        try:
            async with self._session(self.config.total_timeout_s) as session:
                async with session.post(url, json=body, headers=self._headers()) as resp:
                    answered = True
                    if resp.status >= 400:
                        detail = (await resp.content.read(300)).decode("utf-8", "replace").strip()
                        raise LLMError(
                            f"The language model at {self.base_url} answered HTTP {resp.status}"
                            + (f": {detail[:200]}" if detail else "")
                            + "; check llm.base_url and llm.model."
                        )
                    async with contextlib.aclosing(self._pieces(resp, deadline)) as pieces:
                        async for piece in pieces:
                            yield piece
        except LLMError:
            raise
        except TimeoutError:
            raise LLMError(
                f"The language model at {self.base_url} did not answer within the time limits "
                "(llm.connect_timeout_s / llm.total_timeout_s)."
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            if answered:
                raise LLMError(
                    f"The language model at {self.base_url} broke off its answer ({type(exc).__name__}); "
                    "it may have crashed or run out of memory: see its own log."
                ) from None
            raise LLMError(
                f"Cannot reach the language model at {self.base_url}: {type(exc).__name__}; "
                "is it running? Check llm.base_url."
            ) from None

    async def _pieces(self, resp: aiohttp.ClientResponse, deadline: float) -> AsyncGenerator[str, None]:
        """The content pieces of the streamed body ``resp`` (``data:`` lines up to ``[DONE]`` or the end),
        each within the first-token / idle timeout and before ``deadline`` (``time.monotonic()``)."""
        first = True
        while True:
            wait = self.config.first_token_timeout_s if first else self.config.idle_timeout_s
            wait = min(wait, max(0.0, deadline - time.monotonic()))
            try:
                raw = await asyncio.wait_for(resp.content.readline(), timeout=wait)
            except TimeoutError:
                what = "the first token" if first else "the next token"
                raise LLMError(
                    f"The language model at {self.base_url} sent nothing for {wait:.0f} s "
                    f"while waiting for {what}; raise llm.*_timeout_s or use a faster model."
                ) from None
            if not raw:
                return  # end of the body without [DONE]: what came is the answer
            line = raw.decode("utf-8", "replace").strip()
            if not line or line.startswith(":") or not line.startswith("data:"):
                continue  # blank separators, comments, `event:` lines
            payload = line[5:].strip()
            if payload == "[DONE]":
                return
            piece = _delta_text(payload, self.base_url)
            if piece:
                first = False
                yield piece

    async def _only_model(self) -> str:
        """The model to name when ``llm.model`` is not set: the one model ``GET {base_url}/models`` lists. Raises
        :class:`LLMError` saying to set ``llm.model`` when the server lists none or several (naming a few), or
        cannot be asked; an empty ``model`` is never sent (servers answer it with errors that do not say why)."""
        fix = "set llm.model (CAIRN_LLM_MODEL) to the model to use"
        try:
            async with self._session(self.config.connect_timeout_s + self.config.first_token_timeout_s) as session:
                async with session.get(self.base_url + "/models", headers=self._headers()) as resp:
                    listed = (await resp.json(content_type=None)).get("data") if resp.status < 400 else None
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError, AttributeError) as exc:
            raise LLMError(
                f"llm.model is not set and the models of {self.base_url} cannot be listed "
                f"({type(exc).__name__}); {fix}."
            ) from None
        names = [m["id"] for m in listed or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]
        if len(names) != 1:
            offered = f"offers {len(names)} models ({', '.join(names[:5])}{', …' if len(names) > 5 else ''})"
            raise LLMError(
                f"llm.model is not set and {self.base_url} "
                + (offered if names else "lists no model at /models")
                + f"; {fix}."
            )
        log.info("llm.model is not set: using %s, the one model %s offers", names[0], self.base_url)
        return names[0]

    async def probe(self, timeout: float = 2.0) -> bool:
        """True when the endpoint answers HTTP at all (``GET {base_url}/models``), within ``timeout`` seconds."""
        try:
            async with self._session(timeout) as session:
                async with session.get(self.base_url + "/models", headers=self._headers()) as resp:
                    return resp.status < 500
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False


def _delta_text(payload: str, base_url: str) -> str:
    """The ``choices[0].delta.content`` of one streamed chunk ('' when it has none)."""
    try:
        data = json.loads(payload)
    except ValueError:
        raise LLMError(
            f"The language model at {base_url} streamed a line that is not JSON; "
            "is llm.base_url an OpenAI-compatible /v1 endpoint?"
        ) from None
    if not isinstance(data, dict):
        raise LLMError(f"The language model at {base_url} streamed an unexpected JSON value.")
    if "error" in data:
        err = data["error"]
        message = err.get("message") if isinstance(err, dict) else err
        raise LLMError(f"The language model at {base_url} reported an error: {str(message)[:200]}")
    choices = data.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    delta = choices[0].get("delta") or choices[0].get("message") or {}
    content = delta.get("content") if isinstance(delta, dict) else None
    return content if isinstance(content, str) else ""


def answer_model(config: Config) -> OpenAIChatModel | None:
    """The configured language model (:class:`~cairn.llm.OpenAIChatModel`, its API key from the keyring:
    blocking), or ``None`` when none is configured (answers are then built from the cited passages)."""
    from cairn.secrets import LLM_API_KEY, get_secret

    if not config.llm.configured:
        return None
    return OpenAIChatModel(config.llm, api_key=get_secret(config, LLM_API_KEY))


def say_model(config: Config, model: OpenAIChatModel | None) -> None:
    """Log which model writes the daemon's answers, and what a remote one is not shown."""
    if model is None:
        return
    log.info(
        "answers are written by %s at %s (%s)",
        config.llm.model or "the default model",
        config.llm.base_url,
        "remote: what the MCP policy withholds and notes tagged "
        + ", ".join(config.llm.withhold_tags)
        + " are withheld from it"
        if model.remote
        else "local",
    )

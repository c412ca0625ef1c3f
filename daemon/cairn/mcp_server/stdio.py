"""MCP over this process's stdin/stdout (``cairn mcp``): line limits, and a JSON-RPC error for every input
line that is not a message (the server keeps serving). Nothing but the protocol reaches stdout."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from cairn.mcp_server.tools import MAX_MESSAGE_BYTES, McpService, build_server

log = logging.getLogger("cairn.mcp_server")


class _LimitedLines:
    """stdin as text lines for the SDK's stdio transport, each at most ``limit`` bytes: a longer line is
    read to its end and discarded (memory stays bounded) and replaced by a line that is not JSON, which
    the server answers with a JSON-RPC parse error."""

    OVERSIZED = "\x00oversized message\n"

    def __init__(self, raw: Any, limit: int = MAX_MESSAGE_BYTES) -> None:
        self._raw = raw
        self.limit = limit

    def __aiter__(self) -> _LimitedLines:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await anyio.to_thread.run_sync(self._raw.readline, self.limit + 1, abandon_on_cancel=True)
            if not line:
                raise StopAsyncIteration
            if len(line) > self.limit:
                dropped = len(line)
                while line and not line.endswith(b"\n"):
                    line = await anyio.to_thread.run_sync(self._raw.readline, self.limit, abandon_on_cancel=True)
                    dropped += len(line)
                log.warning("MCP stdio: dropped a %d-byte message (the limit is %d bytes)", dropped, self.limit)
                return self.OVERSIZED
            if line.strip():
                return line.decode("utf-8", errors="replace")


class _AnswerBadLines:
    """The read side of the stdio transport, answering every line that is not a JSON-RPC message with a
    JSON-RPC error (``id: null``: -32700 for what is not JSON, -32600 for JSON that is not a message)."""

    def __init__(self, inner: Any, write: Any) -> None:
        self._inner = inner
        self._write = write

    def __getattr__(self, name: str) -> Any:  # last_context, ...
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            not_json = any(e.get("type") == "json_invalid" for e in getattr(item, "errors", lambda: [])())
            code, message = (
                (types.PARSE_ERROR, "Parse error: a line that is not JSON (or over the size limit)")
                if not_json
                else (types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message")
            )
            log.warning("MCP stdio: answered a bad input line with %s", message)
            with contextlib.suppress(Exception):
                await self._write.send(
                    SessionMessage(
                        types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(code=code, message=message))
                    )
                )

    def __aiter__(self) -> _AnswerBadLines:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _AnswerBadLines:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


async def serve_stdio(service: McpService, client: str | None, requested: Sequence[str]) -> None:
    """Serve MCP on this process's stdin/stdout until stdin closes. While serving, fd 1 points at stderr
    (the SDK's stdio claim), so nothing but protocol reaches stdout."""
    fixed = (client, tuple(requested))
    server = build_server(service, lambda ctx: fixed)
    async with stdio_server(stdin=_LimitedLines(sys.stdin.buffer)) as (read, write):  # type: ignore[arg-type]
        await server.run(_AnswerBadLines(read, write), write, server.create_initialization_options())

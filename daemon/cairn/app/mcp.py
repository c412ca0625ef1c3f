"""``cairn mcp`` over stdio or HTTP (:func:`run_mcp_stdio`, :func:`run_mcp_http`) and the daemon's own MCP endpoint
(:func:`start_mcp_http`), each over a read-only or the daemon's :class:`~cairn.app.core.Cairn`."""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cairn.app.core import Cairn, build_services, require_index, stop_on_signals
from cairn.config import Config
from cairn.discovery import moves_off
from cairn.errors import CairnError
from cairn.loopback import require_loopback_host
from cairn.mcp_server.listener import LazyListener, McpHttp, listen
from cairn.memory import rss_bytes
from cairn.policy_live import PolicyHolder, daemon_policy, policy_holder

if TYPE_CHECKING:
    from cairn.mcp_server import McpService

log = logging.getLogger(__name__)


def mcp_service(cairn: Cairn, policy: PolicyHolder, transport: str) -> McpService:
    """The MCP service; its ``ask`` answers from the passages themselves (no model: ``grounded: false``)."""
    from cairn.audit import AuditLog, audit_path
    from cairn.mcp_server import McpService

    return McpService(
        build_services(cairn),
        policy=policy.current,
        audit=AuditLog(audit_path(cairn.config.data_dir)),
        transport=transport,
    )


async def start_mcp_http(config: Config, cairn: Cairn, policy: PolicyHolder | None = None) -> McpHttp:
    """Serve MCP over streamable HTTP on ``config.host``:``config.mcp_http_port`` (see cairn.mcp_server for
    why a second port) under ``policy`` (:func:`daemon_policy`, made when not given): it fails closed when
    missing or invalid (logged, and said in ``/health``). The port is bound here (CairnError when it cannot be);
    the MCP SDK and its server are loaded when the first client connects (:mod:`cairn.mcp_server.listener`)."""
    if policy is None:
        policy = await asyncio.to_thread(daemon_policy, config)

    async def start(sock: Any) -> Any:
        before = rss_bytes()
        # The SDK is slow to import: on a worker thread, so the plugin's API goes on answering meanwhile.
        await asyncio.to_thread(importlib.import_module, "cairn.mcp_server.streamable_http")
        from cairn.mcp_server import McpHttpServer
        from cairn.secrets import McpTokens

        service = mcp_service(cairn, policy, "http")
        server = await McpHttpServer.for_config(service, McpTokens(config).current, config).start(sock=sock)
        after = rss_bytes()
        cairn.mcp_http_bytes.value = max(0, after - before) if before is not None and after is not None else 0
        return server

    return McpHttp(policy, await _listen_mcp(config, lambda port: LazyListener(config.host, port, start).listen()))


async def _listen_mcp(config: Config, bind: Callable[[int], Any], *, recorded: bool = True) -> Any:
    """``await bind(port)`` on the MCP port; when it fails (the port in use) and
    :func:`~cairn.discovery.moves_off` says so, on a free port instead (``recorded``: in this daemon's service
    record). Raises the first attempt's CairnError otherwise."""
    port = config.mcp_http_port
    try:
        return await bind(port)
    except CairnError:
        move = moves_off(config, "MCP endpoint", config.mcp_port, recorded=recorded)
        if not port or not await asyncio.to_thread(move, port):
            raise
        return await bind(0)


async def run_mcp_stdio(config: Config, *, client: str | None, tools: list[str]) -> int:
    """``cairn mcp``: serve MCP on stdin/stdout from the existing index, read-only (no indexing, no watcher).

    Raises :class:`~cairn.policy.PolicyError` (``FILE:LINE: reason``) for a missing or invalid policy,
    :class:`~cairn.errors.BadRequestError` for an unknown ``--tool``, :class:`~cairn.errors.ConfigError` when the
    vault has no index yet. Nothing is written to stdout but the protocol."""
    from cairn.mcp_server import serve_stdio
    from cairn.secrets import check_mcp_client_name

    if client is not None:
        check_mcp_client_name(client)
    policy = policy_holder(config, strict=True)
    policy.current().served_tools(client, tools)  # an unknown --tool name fails here, before serving
    require_index(config)
    cairn = Cairn(config, readonly=True)
    cairn.query.start_keyword_index()  # a long-lived server: keyword ranking from memory once built
    try:
        service = mcp_service(cairn, policy, "stdio")
        served = service.served(client, tools)
        log.info(
            "MCP over stdio for client %s (%s): tools %s",
            policy.current().client(client).name,
            "local" if policy.current().is_local(client) else "not local",
            ", ".join(served),
        )
        await serve_stdio(service, client, tools)
    finally:
        cairn.close()
    return 0


async def run_mcp_http(
    config: Config, *, ready: Callable[[str], None] | None = None, stop: asyncio.Event | None = None
) -> int:
    """``cairn mcp --http``: the daemon's MCP endpoint alone, in the foreground, from the existing index (read-only:
    no indexing, no watcher, no plugin API), until SIGINT/SIGTERM or ``stop``. The policy is loaded strictly at
    start (as for stdio); a later invalid edit fails closed. Raises as :func:`run_mcp_stdio`."""
    from cairn.mcp_server import McpHttpServer
    from cairn.secrets import McpTokens

    require_loopback_host(config.host, "MCP over HTTP")  # before anything opens (the loader refuses it too)
    policy = policy_holder(config, strict=True)
    require_index(config)
    stop = stop or asyncio.Event()
    stop_on_signals(stop)
    cairn = await asyncio.to_thread(lambda: Cairn(config, readonly=True))
    cairn.query.start_keyword_index()
    try:
        server = McpHttpServer.for_config(mcp_service(cairn, policy, "http"), McpTokens(config).current, config)

        async def bind(port: int) -> Any:
            return listen(config.host, port)

        await server.start(sock=await _listen_mcp(config, bind, recorded=False))
        log.info("MCP (streamable HTTP) for %s at %s", config.vault, server.url)
        if ready:
            ready(server.url)
        try:
            await stop.wait()
        finally:
            await server.close()
    finally:
        cairn.close()
    return 0

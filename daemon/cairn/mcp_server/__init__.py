"""The governed MCP server (layer 3 adapter): the vault's notes for desktop agents, over stdio and HTTP.

The only module that imports the official ``mcp`` SDK (v2, the low-level
:class:`mcp.server.lowlevel.Server`: its ``tools/list`` handler answers per caller, so a client
sees exactly the tools served to it — :meth:`Policy.served_tools`).

Tools (docs/design.md, "Interfaces" → MCP tools): ``search_notes(query?, tags?, folder?, limit=8)``,
``get_note(path)``, ``get_related_notes(path, limit=10)``, ``list_notes(tag?, folder?, limit=50)``,
``ask(question, top_k=8, tags?)``. Arguments are parsed with :mod:`cairn.contract` (the same limits
and messages as HTTP and the CLI); every call goes through the one :class:`~cairn.services.Services`
with ``policy.withhold_for(client)``, so withheld notes are filtered before ranking and never named.

Results: ``structuredContent`` (JSON) plus a text rendering. Excerpts carry ``filePath``,
``symbol`` and ``score`` and are framed as note content — quoted data, not instructions
(:data:`DATA_NOTICE`; inside the text frame, ``</note`` is escaped so note text cannot close it).

Errors, translated once here:

- tool errors the model can read and act on — bad arguments (the contract's rules, then the JSON schema), a path
  outside the vault, a note that does not exist (or is withheld: the same answer), nothing
  found — are results with ``isError: true`` and ``structuredContent.error = {code, message}``;
- calling a known tool that is not served to this client → an ``isError`` result, audited ``denied``;
- protocol misuse (an unknown tool name, malformed params, unknown methods) → JSON-RPC errors
  (the SDK's, and ``-32602`` for an unknown tool);
- a line on stdin that is not JSON-RPC (or over :data:`MAX_MESSAGE_BYTES`) → a JSON-RPC
  ``-32700``/``-32600`` error with ``id: null``; the server keeps serving. Over HTTP the SDK
  answers 400 and a body over :data:`MAX_MESSAGE_BYTES` gets 413.

Every call is written to the audit log (:class:`~cairn.audit.AuditLog`) when the policy enables it:
client, transport, tool, an argument digest, the returned ``filePath``s, the withheld count, the decision.

Client identity comes from the owner, never from the client: over stdio the ``--client NAME``
in the agent's launch config; over HTTP the per-client bearer token (``cairn mcp token NAME``).
``clientInfo.name`` is ignored for every decision.

Modules: :mod:`~cairn.mcp_server.tools` (the tools and the policy check, transport-independent),
:mod:`~cairn.mcp_server.stdio` (``cairn mcp``), :mod:`~cairn.mcp_server.streamable_http` (the daemon's
``/mcp`` on a second loopback port, behind per-client bearer tokens), :mod:`~cairn.mcp_server.listener` (that
port bound when the daemon starts, the server started on the first connection; no SDK import).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.mcp_server.stdio import serve_stdio
    from cairn.mcp_server.streamable_http import McpHttpServer, build_http_app
    from cairn.mcp_server.tools import DATA_NOTICE, MAX_MESSAGE_BYTES, TOOL_SPECS, McpService, ToolOutcome, build_server

#: Where each name is defined: imported on first use (:func:`__getattr__`), so that importing
#: :mod:`cairn.mcp_server.listener` alone does not load the SDK.
_DEFINED_IN = {
    "serve_stdio": "stdio",
    "McpHttpServer": "streamable_http",
    "build_http_app": "streamable_http",
    "DATA_NOTICE": "tools",
    "MAX_MESSAGE_BYTES": "tools",
    "TOOL_SPECS": "tools",
    "McpService": "tools",
    "ToolOutcome": "tools",
    "build_server": "tools",
}


def __getattr__(name: str) -> Any:
    """The package's names, imported from their module when first asked for (PEP 562)."""
    module = _DEFINED_IN.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "DATA_NOTICE",
    "MAX_MESSAGE_BYTES",
    "McpHttpServer",
    "McpService",
    "TOOL_SPECS",
    "ToolOutcome",
    "build_http_app",
    "build_server",
    "serve_stdio",
]

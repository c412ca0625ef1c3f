"""The MCP tools' argument schemas and their one check (layer 0, beside :mod:`cairn.contract`): the JSON Schemas
advertised to clients (:data:`MCP_TOOL_SCHEMAS`), built from the edge limits (:data:`cairn.contract.LIMITS`), and
:func:`parse_tool_arguments`, which turns a call's arguments into the same request objects HTTP and the CLI use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.contract import (
    LIMITS,
    AskRequest,
    ListRequest,
    NoteRequest,
    RelatedRequest,
    SearchRequest,
    quote_value,
)
from cairn.conversation import history_schema
from cairn.errors import BadRequestError


def _scope_schema(what: str) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": LIMITS.scope_chars, "description": what}


def _count_schema(high: int, default: int, low: int = 1) -> dict[str, Any]:
    return {"type": "integer", "minimum": low, "maximum": high, "default": default}


_TAGS_SCHEMA = {
    "type": "array",
    "items": {"type": "string", "minLength": 1, "maxLength": LIMITS.scope_chars},
    "maxItems": LIMITS.scope_items,
    "description": "only notes carrying any of these tags (nested tags count: 'project' matches 'project/a')",
}
_TEXT_SCHEMA = {"type": "string", "minLength": 1, "maxLength": LIMITS.text_chars}
_PATH_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": LIMITS.path_chars,
    "description": "the note's vault-relative path, e.g. 'Projects/Garden plan.md'",
}


def _object(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    schema["properties"] = properties
    return schema


#: ``history`` of an ask: the earlier turns, oldest first (:mod:`cairn.conversation`).
HISTORY_SCHEMA = history_schema(LIMITS, _TEXT_SCHEMA)

#: Tool name → JSON schema of its arguments (docs/design.md, "Interfaces" → MCP tools).
MCP_TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "search_notes": _object(
        {
            "query": {
                "type": "string",
                "maxLength": LIMITS.text_chars,
                "description": "what to look for; empty or left out: the most recently modified notes",
            },
            "tags": _TAGS_SCHEMA,
            "folder": _scope_schema("only notes under this folder"),
            "limit": _count_schema(LIMITS.top_k_max, LIMITS.top_k_default, LIMITS.top_k_min),
        }
    ),
    "get_note": _object({"path": _PATH_SCHEMA}, "path"),
    "get_related_notes": _object(
        {"path": _PATH_SCHEMA, "limit": _count_schema(LIMITS.related_max, LIMITS.related_default)}, "path"
    ),
    "list_notes": _object(
        {
            "tag": {"type": "string", "minLength": 1, "maxLength": LIMITS.scope_chars},
            "folder": {"type": "string", "minLength": 1, "maxLength": LIMITS.scope_chars},
            "limit": _count_schema(LIMITS.list_max, LIMITS.list_default),
        }
    ),
    "ask": _object(
        {
            "question": _TEXT_SCHEMA,
            "top_k": _count_schema(LIMITS.top_k_max, LIMITS.top_k_default, LIMITS.top_k_min),
            "tags": _TAGS_SCHEMA,
            "history": HISTORY_SCHEMA,
        },
        "question",
    ),
}


def tool_signature(name: str) -> str:
    """``query: string, tags?: array, folder?: string, limit?: integer 1..50``: the arguments of MCP tool ``name``
    as its schema advertises them (``?``: optional)."""
    schema = MCP_TOOL_SCHEMAS[name]
    parts = []
    for arg, spec in schema["properties"].items():
        kind = spec["type"] + (f" {spec['minimum']}..{spec['maximum']}" if "minimum" in spec else "")
        parts.append(f"{arg}{'' if arg in schema.get('required', ()) else '?'}: {kind}")
    return ", ".join(parts)


def parse_tool_arguments(name: str, args: Mapping[str, Any]) -> Any:
    """The request of MCP tool ``name`` (a key of :data:`MCP_TOOL_SCHEMAS`) from its arguments, MCP names mapped
    onto the canonical keys: the one check of a tool call's arguments, enforcing everything the tool's advertised
    schema says (an argument the schema does not name is refused too). Raises :class:`~cairn.errors.BadRequestError`."""
    unknown = sorted(set(args) - set(MCP_TOOL_SCHEMAS[name]["properties"]))
    if unknown:
        raise BadRequestError(
            f"Unknown argument {quote_value(unknown[0])} for {name}; expected {name}({tool_signature(name)})."
        )
    if name == "search_notes":
        folder = args.get("folder")
        return SearchRequest.parse(
            {
                "query": args.get("query"),
                "top_k": args.get("limit"),
                "tags": args.get("tags"),
                "folders": None if folder is None else [folder],
            }
        )
    if name == "ask":
        keys = ("question", "top_k", "tags", "history")
        return AskRequest.parse({key: args.get(key) for key in keys})
    if name == "get_related_notes":
        return RelatedRequest.parse(args)
    if name == "list_notes":
        return ListRequest.parse(args)
    return NoteRequest.parse(args)

"""The edge contract (layer 0): the limits every edge enforces, request parsing, and the JSON views.

HTTP (:mod:`cairn.http`), MCP (:mod:`cairn.mcp_server`) and the CLI (:mod:`cairn.cli`) accept the same
requests under different field names (``topK`` / ``top_k`` / ``limit`` / ``--top-k``). Each edge maps its
names onto the canonical keys below and calls ``XRequest.parse(mapping)``, which raises
:class:`~cairn.errors.BadRequestError` with one message per rule, so the same bad request gets the same
``bad_request`` message at every edge. The views turn search hits, numbered sources and answers into the
JSON each edge sends (HTTP and the CLI's ``search --json``: everything; MCP results and the CLI's
``ask --json``: without the ranking internals ``cosine`` and ``kind``). A hit's ``symbol`` is its heading path,
or its note's title for a chunk above the note's first heading (a note without headings): never empty. Every
search and ask result carries one ``coverage`` (:class:`IndexCoverage`): how many notes are indexed and how many
still wait for their vectors, so a client can say that results may be incomplete while the first index runs.

The tag and folder rule (at most 64 entries of at most 512 characters each) is the one the HTTP API
publishes in ``openapi.json``; the MCP tool schemas advertised to clients (:mod:`cairn.tool_schemas`) are built
from the same :data:`LIMITS`, and :func:`cairn.tool_schemas.parse_tool_arguments` is the one check of a tool
call's arguments.
A parsed :class:`SearchRequest` or :class:`AskRequest` is checked once, here, and trusted after: the search and
answer services take it whole and check nothing of it again (its text stripped and made of characters, its tags
normalised, its folders vault-relative).
"""

from __future__ import annotations

from cairn.contract.requests import (
    LIMITS,
    NO_RECENT_TEXT,
    NO_RESULTS_TEXT,
    AskRequest,
    Limits,
    ListRequest,
    NoteRequest,
    RelatedRequest,
    SearchRequest,
    check_chars,
    empty_index_text,
    no_notes_text,
    parse_count,
    parse_limit,
    parse_path,
    parse_query,
    parse_scope,
    parse_scope_item,
    parse_text,
    parse_top_k,
    quote_value,
    scope_folders,
    scope_tags,
)
from cairn.contract.views import (
    INTERNAL_KEYS,
    AnswerView,
    HitView,
    IndexCoverage,
    SearchResultView,
    SourceView,
    agent_answer_json,
    agent_hit_json,
    agent_recent_hit_json,
    agent_search_json,
    answer_json,
    coverage_json,
    coverage_notice,
    hit_json,
    hit_relevance,
    hit_symbol,
    recent_hit_json,
    search_json,
    source_json,
)

__all__ = [
    "AnswerView",
    "AskRequest",
    "HitView",
    "INTERNAL_KEYS",
    "IndexCoverage",
    "LIMITS",
    "Limits",
    "ListRequest",
    "NO_RECENT_TEXT",
    "NO_RESULTS_TEXT",
    "NoteRequest",
    "RelatedRequest",
    "SearchRequest",
    "SearchResultView",
    "SourceView",
    "agent_answer_json",
    "agent_hit_json",
    "agent_recent_hit_json",
    "agent_search_json",
    "answer_json",
    "check_chars",
    "coverage_json",
    "coverage_notice",
    "empty_index_text",
    "hit_json",
    "hit_relevance",
    "hit_symbol",
    "no_notes_text",
    "parse_count",
    "parse_limit",
    "parse_path",
    "parse_query",
    "parse_scope",
    "parse_scope_item",
    "parse_text",
    "parse_top_k",
    "quote_value",
    "recent_hit_json",
    "scope_folders",
    "scope_tags",
    "search_json",
    "source_json",
]

"""The edge contract (cairn.contract) over the three edges: the same bad request gets the same ``bad_request``
message over HTTP (the real app on 127.0.0.1), MCP (the SDK's client in a real session with the server,
in process) and the CLI (``cairn.cli.main`` in process), and never reaches the query service.

Each row is one request in the contract's terms; each edge spells it its own way (``topK`` / ``limit`` /
``top_k`` / ``--top-k``). The CLI reports a bad ``--top-k`` as a usage error (exit 2, argparse), anything
else as ``Error: …`` (exit 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from cairn import cli, contract, tool_schemas
from cairn.contract import LIMITS
from cairn.errors import BadRequestError
from cairn.mcp_server import McpService, build_server
from cairn.policy import parse_policy
from support.http_client import AUTH, running
from support.policies import POLICY
from support.stand_ins import RecordingQuery, stand_in_services
from support.waits import run

TOO_MANY = [f"t{i}" for i in range(LIMITS.scope_items + 1)]
LONG_TEXT = "q" * (LIMITS.text_chars + 1)
LONG_TAG = "t" * (LIMITS.scope_chars + 1)
SHOWN_LONG_TAG = repr(LONG_TAG[:40] + "…")  # a value is shown cut at 40 characters, still quoted


@dataclass(frozen=True)
class Row:
    """One bad request: ``tool`` is ``search`` or ``ask``; ``text`` the query or question."""

    tool: str
    text: Any
    message: str
    top_k: Any = None
    tags: Any = None
    cli: bool = True  # the command line can say it (argv holds only strings)


def _top_k_message(shown: object) -> str:
    low, high = LIMITS.top_k_min, LIMITS.top_k_max
    return f"The number of results (top_k) must be an integer from {low} to {high}, got {shown}."


ROWS = [
    Row("search", "garlic", _top_k_message(0), top_k=0),
    Row("search", "garlic", _top_k_message(51), top_k=51),
    Row("ask", "garlic?", _top_k_message(0), top_k=0),
    Row("ask", "garlic?", _top_k_message(51), top_k=51),
    Row("ask", LONG_TEXT, f"The question is {len(LONG_TEXT)} characters long; the limit is {LIMITS.text_chars}."),
    Row("search", LONG_TEXT, f"The query is {len(LONG_TEXT)} characters long; the limit is {LIMITS.text_chars}."),
    Row("ask", "   ", "The question is empty; expected some words to search for."),
    Row("ask", "garlic?", f"{len(TOO_MANY)} tags given; the limit is {LIMITS.scope_items}.", tags=TOO_MANY),
    Row("search", "garlic", f"{len(TOO_MANY)} tags given; the limit is {LIMITS.scope_items}.", tags=TOO_MANY),
    Row(
        "ask",
        "garlic?",
        f"A tag must be a non-empty string of at most {LIMITS.scope_chars} characters, got 1.",
        tags=[1],
        cli=False,
    ),
    Row(
        "search",
        "garlic",
        f"A tag must be a non-empty string of at most {LIMITS.scope_chars} characters, got {SHOWN_LONG_TAG}.",
        tags=[LONG_TAG],
    ),
    Row(
        "search",
        "garlic",
        f"A tag must be a non-empty string of at most {LIMITS.scope_chars} characters, got ''.",
        tags=[""],
    ),
]
IDS = [f"{r.tool}-{i}" for i, r in enumerate(ROWS)]


def _parse(row: Row) -> None:
    """The contract itself, as the table's reference."""
    if row.tool == "search":
        contract.SearchRequest.parse({"query": row.text, "top_k": row.top_k, "tags": row.tags})
    else:
        contract.AskRequest.parse({"question": row.text, "top_k": row.top_k, "tags": row.tags})


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_the_contract_gives_the_rows_message(row):
    with pytest.raises(BadRequestError) as err:
        _parse(row)
    assert err.value.message == row.message


# -- HTTP --------------------------------------------------------------------------------------------


def _http(row: Row) -> tuple[int, Any, list]:
    query = RecordingQuery()

    async def scenario():
        async with running(query) as client:
            if row.tool == "search":
                params: list[tuple[str, str]] = [("q", row.text)]
                params += [("topK", str(row.top_k))] if row.top_k is not None else []
                params += [("tag", t) for t in row.tags or []]
                async with client.get("/search", params=params, headers=AUTH) as resp:
                    return resp.status, await resp.json()
            body: dict[str, Any] = {"question": row.text}
            body.update({"topK": row.top_k} if row.top_k is not None else {})
            body.update({"tags": row.tags} if row.tags is not None else {})
            async with client.post("/ask", json=body, headers=AUTH) as resp:
                return resp.status, await resp.json()

    status, body = run(scenario())
    return status, body, query.calls


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_http_answers_the_rows_bad_request_with_its_message(row):
    status, body, calls = _http(row)
    assert (status, body) == (400, {"error": {"code": "bad_request", "message": row.message}})
    assert calls == []


# -- MCP ---------------------------------------------------------------------------------------------


def _mcp(row: Row) -> tuple[Any, list]:
    query = RecordingQuery()
    policy = parse_policy(POLICY, "test-policy")
    service = McpService(stand_in_services(query), policy=lambda: policy, audit=None, transport="stdio")
    server = build_server(service, lambda ctx: ("agent", ("search_notes", "ask")))
    if row.tool == "search":
        name, args = "search_notes", {"query": row.text, "limit": row.top_k, "tags": row.tags}
    else:
        name, args = "ask", {"question": row.text, "top_k": row.top_k, "tags": row.tags}

    async def go():
        async with Client(server) as client:
            return await client.call_tool(name, {k: v for k, v in args.items() if v is not None})

    return run(go()), query.calls


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_mcp_answers_the_rows_bad_request_with_its_message(row):
    result, calls = _mcp(row)
    assert result.is_error
    assert result.structured_content == {"error": {"code": "bad_request", "message": row.message}}
    assert calls == []


def test_an_empty_or_absent_query_asks_every_edge_for_the_recent_notes():
    """docs/design.md, "Contract" → Recent notes: no words is not an error but the recent-notes listing; each edge
    hands the one search service the query ``""`` (an empty question is still refused: the rows above)."""

    query = RecordingQuery()

    async def http():
        async with running(query) as client:
            for params in ([], [("q", "")], [("q", "  ")]):
                async with client.get("/search", params=params, headers=AUTH) as resp:
                    assert resp.status == 200, await resp.text()

    run(http())
    policy = parse_policy(POLICY, "test-policy")
    service = McpService(stand_in_services(query), policy=lambda: policy, audit=None, transport="stdio")
    server = build_server(service, lambda ctx: ("agent", ("search_notes",)))

    async def mcp():
        async with Client(server) as client:
            for args in ({}, {"query": ""}, {"query": " "}):
                assert not (await client.call_tool("search_notes", args)).is_error

    run(mcp())
    assert [(kind, q) for kind, q, _, _ in query.calls] == [("search", "")] * 6
    assert contract.SearchRequest.parse({"query": None}).recent
    assert not contract.SearchRequest.parse({"query": "garlic"}).recent


# -- CLI ---------------------------------------------------------------------------------------------


def _cli(row: Row, tmp_path: Path, monkeypatch, capsys) -> tuple[int, str, str]:
    for name, sub in (("CAIRN_DATA_DIR", "data"), ("CAIRN_CONFIG_DIR", "config"), ("CAIRN_LOG_DIR", "log")):
        monkeypatch.setenv(name, str(tmp_path / sub))
    monkeypatch.setenv("CAIRN_KEYRING", "file")
    vault = tmp_path / "vault"
    vault.mkdir()
    argv = [row.tool, row.text, "--vault", str(vault)]
    argv += ["--top-k", str(row.top_k)] if row.top_k is not None else []
    for tag in row.tags or []:
        argv += ["--tag", tag]
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse: a usage error
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("row", [r for r in ROWS if r.cli], ids=[i for i, r in zip(IDS, ROWS, strict=True) if r.cli])
def test_the_cli_answers_the_rows_bad_request_with_its_message(row, tmp_path, monkeypatch, capsys):
    code, out, err = _cli(row, tmp_path, monkeypatch, capsys)
    assert out == ""
    if row.top_k is not None:
        assert code == 2 and "usage: cairn" in err
        assert err.rstrip().endswith(f"argument --top-k: {row.message}")
    else:
        assert (code, err) == (1, f"Error: {row.message}\n")
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("*.sqlite*"))  # nothing indexed


@pytest.mark.parametrize(
    ("value", "text", "shown"),
    [(True, False, "true"), (None, False, None), ("x", False, "'x'"), ("-1", True, "-1"), (2.5, False, "2.5")],
)
def test_a_bad_number_of_results_is_shown_as_the_client_wrote_it(value, text, shown):
    if shown is None:  # absent: the default, no error
        assert contract.parse_top_k(value, text=text) == LIMITS.top_k_default
        return
    with pytest.raises(BadRequestError) as raised:
        contract.parse_top_k(value, text=text)
    assert raised.value.message == _top_k_message(shown)


# -- the advertised MCP schemas and the one check of a tool call --------------------------------------


def _beyond(spec: dict[str, Any]) -> list[tuple[Any, Any]]:
    """(a value the schema ``spec`` accepts at its bound, one just beyond) pairs."""
    if spec["type"] == "integer":
        return [(spec["minimum"], spec["minimum"] - 1), (spec["maximum"], spec["maximum"] + 1), (1, "1")]
    if spec["type"] == "string":
        empty = [("x", "")] if spec.get("minLength") else []
        return [("x" * spec["maxLength"], "x" * (spec["maxLength"] + 1)), *empty, ("x", 1)]
    if spec["type"] == "object":
        good = {arg: _beyond(item)[0][0] for arg, item in spec["properties"].items()}
        wrong = [({**good, arg: bad}) for arg, item in spec["properties"].items() for _, bad in _beyond(item)]
        missing = [{k: v for k, v in good.items() if k != arg} for arg in spec.get("required", [])]
        return [(good, bad) for bad in [*wrong, *missing, {**good, "extra": 1}, "x"]]
    item = _beyond(spec["items"])[0]
    return [([item[0]] * spec["maxItems"], [item[0]] * (spec["maxItems"] + 1)), ([item[0]], [item[1]]), ([], "x")]


VALID = {"query": "garlic", "question": "garlic?", "path": "Garden/Garlic.md"}


@pytest.mark.parametrize("tool", sorted(tool_schemas.MCP_TOOL_SCHEMAS))
def test_each_mcp_tool_schema_says_what_the_contract_accepts_and_refuses(tool):
    schema = tool_schemas.MCP_TOOL_SCHEMAS[tool]
    base = {arg: VALID[arg] for arg in schema.get("required", [])}
    tool_schemas.parse_tool_arguments(tool, base)
    for arg in schema.get("required", []):
        with pytest.raises(BadRequestError):
            tool_schemas.parse_tool_arguments(tool, {k: v for k, v in base.items() if k != arg})
    for arg, spec in schema["properties"].items():
        for good, bad in _beyond(spec):
            tool_schemas.parse_tool_arguments(tool, {**base, arg: good})
            with pytest.raises(BadRequestError):
                tool_schemas.parse_tool_arguments(tool, {**base, arg: bad})
    with pytest.raises(BadRequestError) as unknown:
        tool_schemas.parse_tool_arguments(tool, {**base, "mode": "raw"})
    assert (
        unknown.value.message
        == f"Unknown argument 'mode' for {tool}; expected {tool}({tool_schemas.tool_signature(tool)})."
    )


def test_an_mcp_call_with_bad_arguments_gets_the_contracts_message_and_reaches_no_service():
    query = RecordingQuery()
    policy = parse_policy(POLICY, "test-policy")
    service = McpService(stand_in_services(query), policy=lambda: policy, audit=None, transport="stdio")
    server = build_server(service, lambda ctx: ("agent", ("search_notes", "ask", "get_related_notes")))
    calls = [
        ("search_notes", {"query": "garlic", "top_k": 3}),
        ("get_related_notes", {"path": "Garden/Garlic.md", "limit": 51}),
        ("get_note", {"path": "x" * (LIMITS.path_chars + 1)}),
        ("list_notes", {"limit": "many"}),
    ]

    async def go():
        async with Client(server) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    results = run(go())
    signature = f"query?: string, tags?: array, folder?: string, limit?: integer 1..{LIMITS.top_k_max}"
    assert [r.structured_content for r in results] == [
        {"error": {"code": "bad_request", "message": message}}
        for message in (
            f"Unknown argument 'top_k' for search_notes; expected search_notes({signature}).",
            f"limit must be an integer from 1 to {LIMITS.related_max}, got 51.",
            f"The note path is {LIMITS.path_chars + 1} characters long; the limit is {LIMITS.path_chars}.",
            f"limit must be an integer from 1 to {LIMITS.list_max}, got 'many'.",
        )
    ]
    assert query.calls == []


def test_the_published_openapi_document_states_the_contracts_limits():
    import json
    from importlib import resources

    doc = json.loads(resources.files("cairn").joinpath("openapi.json").read_text("utf-8"))
    schemas = doc["components"]["schemas"]
    assert (schemas["Text"]["maxLength"], schemas["ScopeItem"]["maxLength"], schemas["NotePath"]["maxLength"]) == (
        LIMITS.text_chars,
        LIMITS.scope_chars,
        LIMITS.path_chars,
    )
    ask = doc["paths"]["/ask"]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]
    search = {p["name"]: p["schema"] for p in doc["paths"]["/search"]["get"]["parameters"]}
    related = {p["name"]: p["schema"] for p in doc["paths"]["/related"]["get"]["parameters"]}
    assert ask["topK"]["maximum"] == search["topK"]["maximum"] == LIMITS.top_k_max
    assert ask["tags"]["maxItems"] == search["tag"]["maxItems"] == search["folder"]["maxItems"] == LIMITS.scope_items
    assert related["limit"]["maximum"] == LIMITS.related_max

"""A store error never gives a client not declared local the owner's paths.

The real Cairn over a copy of the canary vault, its index file replaced by another while served; real MCP
client sessions over the real MCP server. A non-local client's ``get_note`` gets the error's code and a generic
message (the detail goes to the log); the owner's local agent still gets the whole message.
"""

from __future__ import annotations

import asyncio
import logging
import shutil

import pytest
from mcp import Client

from cairn.policy_live import PolicyHolder
from support.cairns import open_cairn
from support.mcp_client import POLICY
from support.vaults import CANARY_VAULT

pytestmark = pytest.mark.e2e


def test_a_replaced_index_file_gives_a_non_local_client_its_code_not_the_owners_paths(tmp_path, embedder, caplog):
    from cairn.mcp_server import McpService, build_server
    from cairn.store import Store
    from support.cairns import services_of

    vault = tmp_path / "vault"
    shutil.copytree(CANARY_VAULT, vault)
    policy = tmp_path / "mcp-serve.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    cairn = open_cairn(vault, tmp_path / "data", embedder, config_dir=tmp_path / "config", mcp_policy=policy)
    config = cairn.config
    try:
        cairn.indexing.index()
        Store(tmp_path / "other.sqlite3").close()
        (tmp_path / "other.sqlite3").replace(config.db_path)  # another file at the index's path
        cairn.store.IDENTITY_CHECK_S = 0.0
        holder = PolicyHolder(policy, strict=True)
        service = McpService(
            services_of(cairn),
            policy=holder.current,
            audit=None,
            transport="stdio",
        )

        async def get_note(client: str):
            async with Client(build_server(service, lambda ctx: (client, ()))) as session:
                return await session.call_tool("get_note", {"path": "Reading list.md"})

        with caplog.at_level(logging.WARNING, logger="cairn.mcp_server"):
            remote = asyncio.run(asyncio.wait_for(get_note("claude-desktop"), 60))
            local = asyncio.run(asyncio.wait_for(get_note("my-local-agent"), 60))
    finally:
        cairn.close()

    shown = remote.content[0].text
    assert remote.is_error and shown.startswith("Error (index_file_changed):"), shown
    assert str(tmp_path) not in shown and ".sqlite3" not in shown, shown
    assert remote.structured_content["error"]["code"] == "index_file_changed"
    assert str(tmp_path) not in str(remote.structured_content)
    assert local.is_error and str(config.db_path) in local.content[0].text  # the owner's agent sees why
    assert any(str(config.db_path) in r.getMessage() for r in caplog.records)  # and the owner's log does

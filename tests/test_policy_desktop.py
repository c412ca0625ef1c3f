"""An agent started by a desktop app is governed by the owner's policy for the vault, or refuses.

A desktop app (Claude Desktop, the MCP SDK's ``stdio_client``) starts ``cairn mcp`` with almost no environment:
here only HOME and PATH, plus the client config's ``env``. The owner keeps Cairn's config folder, data folder,
or both somewhere else than the defaults under HOME, and withholds the folders ``Private`` and ``Journal``.
Launched without the ``env`` entries, ``cairn mcp`` must never serve a withheld note: it exits, naming the entry
to add, and creates no policy of its own. Launched with them (as docs/mcp.md's client config shows), it serves
under the owner's policy. The real ``cairn`` console script, driven by the SDK's own stdio client.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from support.cairns import build_index
from support.cli import cairn_executable
from support.vaults import CANARY_VAULT

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(sys.platform != "linux", reason="the default folders under HOME are Linux's here"),
]

#: The owner's policy: more than the shipped default withholds.
OWNERS_POLICY = """\
version: 1
withhold: {tags: [personal], folders: [Private, Journal]}
default_tools: [get_note, list_notes]
clients:
  claude-desktop: {local: false, tools: [search_notes, get_note, get_related_notes, list_notes, ask]}
audit: {enabled: true}
"""
WITHHELD = "Private/Salary.md"  # withheld by folder only: the shipped default would serve it
ARGS = ["mcp", "--vault", str(CANARY_VAULT), "--client", "claude-desktop"]
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_note", {"path": WITHHELD}),
    ("list_notes", {"folder": "Journal"}),
    ("get_note", {"path": "Recipes/Bread.md"}),
]


def defaults(home: Path) -> tuple[Path, Path]:
    """The config and data folders a `cairn mcp` with only HOME finds (platformdirs on Linux)."""
    return home / ".config" / "cairn", home / ".local" / "share" / "cairn"


def desktop_env(home: Path, **env: str) -> dict[str, str]:
    """What a desktop app passes: HOME and PATH, plus the client config's ``env``."""
    return {"HOME": str(home), "PATH": "/usr/bin:/bin", **env}


def index_as_owner(embedder: Any, config_dir: Path, data_dir: Path) -> None:
    """The owner's own shell: the policy in their config folder, the vault indexed into their data folder."""

    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "mcp-serve.yaml").write_text(OWNERS_POLICY, encoding="utf-8")
    build_index(CANARY_VAULT, data_dir, embedder, config_dir=config_dir)


def launch(home: Path, env: dict[str, str]) -> tuple[list[types.CallToolResult] | None, str]:
    """Start `cairn mcp` as a desktop app does and make CALLS; (results or None when no session opened, stderr)."""
    params = StdioServerParameters(command=cairn_executable(), args=ARGS, env=env)
    home.mkdir(parents=True, exist_ok=True)
    errpath = home / f"mcp-{len(list(home.glob('mcp-*.stderr')))}.stderr"

    async def go() -> list[types.CallToolResult] | None:
        with open(errpath, "w", encoding="utf-8") as errlog:
            try:
                async with Client(stdio_client(params, errlog=errlog), mode="legacy", read_timeout_seconds=120) as c:
                    return [await c.call_tool(name, args) for name, args in CALLS]
            except Exception:  # the server exited before the session opened
                return None

    results = asyncio.run(asyncio.wait_for(go(), 300))
    return results, errpath.read_text(encoding="utf-8")


def assert_owners_policy_served(results: list[types.CallToolResult] | None, stderr: str) -> None:
    assert results is not None, stderr
    withheld, journal, bread = results
    assert withheld.is_error and withheld.structured_content["error"]["code"] == "not_found"
    assert not journal.is_error and journal.structured_content["notes"] == []
    assert not bread.is_error and "500 g flour" in bread.structured_content["content"]


def assert_refused(results: list[types.CallToolResult] | None, stderr: str, *env_entries: str) -> None:
    assert results is None, "a session opened without the owner's policy"
    for entry in env_entries:
        assert entry in stderr, stderr


def test_a_moved_config_folder_refuses_naming_the_env_entry_then_serves_with_it(tmp_path, embedder):
    home, owner = tmp_path / "home", tmp_path / "elsewhere" / "config"
    default_config, default_data = defaults(home)
    index_as_owner(embedder, owner, default_data)

    results, stderr = launch(home, desktop_env(home))
    assert_refused(results, stderr, f'"env": {{"CAIRN_CONFIG_DIR": "{owner}"}}', str(owner / "mcp-serve.yaml"))
    assert not (default_config / "mcp-serve.yaml").exists()  # no policy of its own, made silently

    results, stderr = launch(home, desktop_env(home, CAIRN_CONFIG_DIR=str(owner)))
    assert_owners_policy_served(results, stderr)
    audit = [json.loads(line) for line in (default_data / "mcp-audit.jsonl").read_text().splitlines()]
    assert [(a["tool"], a["client"], a["withheld"]) for a in audit][:2] == [
        ("get_note", "claude-desktop", 1),
        ("list_notes", "claude-desktop", 2),
    ]


def test_a_moved_data_folder_refuses_naming_where_the_index_is_then_serves_with_it(tmp_path, embedder):
    home, data = tmp_path / "home", tmp_path / "elsewhere" / "data"
    default_config, default_data = defaults(home)
    index_as_owner(embedder, default_config, data)

    results, stderr = launch(home, desktop_env(home))
    assert_refused(results, stderr, "has no index yet", f'"env": {{"CAIRN_DATA_DIR": "{data}"}}')
    assert not default_data.joinpath("indexes").exists()

    results, stderr = launch(home, desktop_env(home, CAIRN_DATA_DIR=str(data)))
    assert_owners_policy_served(results, stderr)


def test_both_folders_moved_refuses_saying_how_to_point_at_them_and_creates_nothing(tmp_path, embedder):
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    default_config, _ = defaults(home)
    index_as_owner(embedder, elsewhere / "config", elsewhere / "data")

    results, stderr = launch(home, desktop_env(home))
    assert_refused(results, stderr, "CAIRN_DATA_DIR", "CAIRN_CONFIG_DIR", "cairn paths")
    assert not (default_config / "mcp-serve.yaml").exists()

    both = {"CAIRN_CONFIG_DIR": str(elsewhere / "config"), "CAIRN_DATA_DIR": str(elsewhere / "data")}
    assert_owners_policy_served(*launch(home, desktop_env(home, **both)))


def test_the_true_first_use_creates_the_default_policy_and_serves(tmp_path, embedder):
    """A new user: nothing moved, `cairn index` from a shell, then the desktop app's `cairn mcp`."""
    from cairn.policy import default_policy_text

    home = tmp_path / "home"
    default_config, default_data = defaults(home)

    build_index(CANARY_VAULT, default_data, embedder, config_dir=default_config)
    assert not (default_config / "mcp-serve.yaml").exists()

    results, stderr = launch(home, desktop_env(home))
    assert results is not None, stderr
    assert (default_config / "mcp-serve.yaml").read_text(encoding="utf-8") == default_policy_text()
    assert results[0].structured_content["content"]  # the default withholds `personal`, not Private/

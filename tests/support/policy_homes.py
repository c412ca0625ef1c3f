"""Builders shared by the governance tests: a small vault with one note tagged ``personal``, the owner's home
(config and data folders) with a policy and the vault's index, and one ``get_note`` call through a real
``cairn mcp`` subprocess driven by the MCP SDK's stdio client, as an agent launches it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from support.cairns import build_index
from support.cli import cairn_env, cairn_executable

#: The withheld note's own words: a leak would show them.
DIARY_CANARY = "DIARY-CANARY-51c2"
DIARY = "Private/Diary.md"
PUBLIC = "pub.md"
#: A policy that withholds ``personal`` from the non-local client ``remote-agent``.
STRICT = """\
version: 1
withhold: {tags: [personal], folders: []}
default_tools: [get_note, list_notes]
clients:
  remote-agent: {local: false, tools: all}
"""
#: The same policy withholding nothing.
LOOSE = STRICT.replace("tags: [personal]", "tags: []")
#: The same policy making ``remote-agent`` local.
AGENT_LOCAL = STRICT.replace("remote-agent: {local: false", "remote-agent: {local: true")
CALL_TIMEOUT_S = 120


def make_vault(base: Path) -> Path:
    """``base/vault``: ``Private/Diary.md`` tagged personal (holding :data:`DIARY_CANARY`) and a public note."""
    vault = base / "vault"
    (vault / ".obsidian").mkdir(parents=True)
    (vault / "Private").mkdir()
    (vault / DIARY).write_text(f"---\ntags: [personal]\n---\n# Diary\n\n{DIARY_CANARY} secret text.\n", "utf-8")
    (vault / PUBLIC).write_text("# Pub\n\nA public note about sourdough bread.\n", "utf-8")
    return vault


def owners_home(base: Path, embedder: Any, policy: str | None = STRICT) -> tuple[Path, Path]:
    """``(home, vault)``: ``home/config/mcp-serve.yaml`` holding ``policy`` (None: leave what is there) and the vault
    indexed into ``home/data`` in this process, as the owner's `cairn index` does (it records the policy)."""

    home, vault = base / "home", make_vault(base)
    (home / "config").mkdir(parents=True, exist_ok=True)
    if policy is not None:
        (home / "config" / "mcp-serve.yaml").write_text(policy, encoding="utf-8")
    build_index(vault, home / "data", embedder, config_dir=home / "config")
    return home, vault


@dataclass(frozen=True)
class Outcome:
    """One ``get_note`` through ``cairn mcp``: ``served`` (the note's text reached the client), ``text`` (what
    the client got, or the server's stderr when no session opened), ``session`` (False: the server exited)."""

    served: bool
    text: str
    session: bool


def mcp_get(home: Path, vault: Path, path: str, *, client: str = "remote-agent", **env: str) -> Outcome:
    """``get_note(path)`` as ``client`` through a real ``cairn mcp --vault VAULT --client CLIENT`` with ``home``'s
    folders (``env`` overrides, e.g. ``CAIRN_CONFIG_DIR``)."""
    params = StdioServerParameters(
        command=cairn_executable(),
        args=["mcp", "--vault", str(vault), "--client", client],
        env={**cairn_env(home), **env},
    )
    errpath = home / "mcp.stderr"

    async def go() -> Outcome:
        with open(errpath, "w", encoding="utf-8") as errlog:
            try:
                async with Client(
                    stdio_client(params, errlog=errlog), mode="legacy", read_timeout_seconds=CALL_TIMEOUT_S
                ) as c:
                    result = await c.call_tool("get_note", {"path": path})
            except Exception:  # the server exited before the session opened
                return Outcome(False, errpath.read_text(encoding="utf-8"), False)
        text = "\n".join(getattr(block, "text", "") for block in result.content)
        return Outcome(not result.is_error, text, True)

    return asyncio.run(asyncio.wait_for(go(), 300))


def cairn(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``cairn ARGS…`` with ``home``'s folders (``env`` overrides); never raises on a non-zero exit."""
    return subprocess.run(
        [cairn_executable(), *args],
        env={**cairn_env(home), **env},
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


def repoint(link: Path, target: Path) -> None:
    """Re-point the symbolic link ``link`` at ``target`` as a dotfiles manager does (``ln -sfn``)."""
    subprocess.run(["ln", "-sfn", os.fspath(target), os.fspath(link)], check=True)

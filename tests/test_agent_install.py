"""The one-line agent install: ``uvx --from <package> cairn mcp --vault V``, as agent catalogs launch a tool, run
against the wheel ``make wheel`` builds, in an environment holding only HOME and PATH (``env -i``), and spoken to
by the MCP SDK's own client over stdio. The command server.json gives MCP clients (``uvx cairn-notes mcp --vault
V``, the package's name as the command) is launched the same way.

uv comes from PyPI with the ``[test]`` extras; the uvx run resolves Cairn's dependencies from PyPI into the fresh
HOME's cache and takes the distribution's Python from /usr/bin, as on a user's machine. Skipped with one line when
uv is not installed or the package registry cannot be reached.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from support.vaults import REPO, SAMPLE_VAULT

pytestmark = [pytest.mark.slow, pytest.mark.e2e]  # uvx installs Cairn's dependencies from PyPI

UVX_TIMEOUT_S = 900  # the first run downloads onnxruntime, numpy, ... into an empty cache
CALL_TIMEOUT_S = 120
#: uv's words for "the package registry could not be reached".
OFFLINE = re.compile(
    r"dns error|error sending request|tcp connect error|Connection refused|Network is unreachable|"
    r"Failed to fetch|failed to lookup address",
    re.I,
)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> list[str]:
    """``env -i HOME=… PATH=…``: a fresh HOME, and a PATH with uv, uvx and the system's folders (/usr/bin:/bin)."""
    uvx = shutil.which("uvx", path=str(Path(sys.executable).parent)) or shutil.which("uvx")
    uv = shutil.which("uv", path=str(Path(uvx).parent)) if uvx else None
    if not uvx or not uv:
        pytest.skip("uv is not installed (make test-venv installs it, from PyPI)")
    base = tmp_path_factory.mktemp("agent")
    bin_dir = base / "bin"
    bin_dir.mkdir()
    for exe in (uv, uvx):
        (bin_dir / Path(exe).name).symlink_to(exe)
    (base / "home").mkdir()
    return ["/usr/bin/env", "-i", f"HOME={base / 'home'}", f"PATH={bin_dir}:/usr/bin:/bin"]


def uvx_run(clean: list[str], uvx: list[str], args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([*clean, *uvx, *args], capture_output=True, text=True, timeout=UVX_TIMEOUT_S)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, clean, cairn_wheel) -> tuple[Path, list[str]]:
    """A copy of the sample vault, indexed by ``uvx --from <wheel> cairn index`` (the MCP server reads the index
    ``cairn index`` or ``cairn serve`` built; it never indexes), and the ``uvx`` that worked: plain ``uvx``, or
    ``uvx --system-certs`` where TLS to PyPI passes through a proxy whose certificate authority is only in the
    system's store (uv trusts its own bundle of public roots unless told otherwise), as on this project's CI."""
    vault = tmp_path_factory.mktemp("vault") / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    args = ["--from", str(cairn_wheel), "cairn", "index", "--vault", str(vault)]
    uvx = ["uvx"]
    done = uvx_run(clean, uvx, args)
    if done.returncode != 0 and "invalid peer certificate" in done.stderr:
        uvx = ["uvx", "--system-certs"]
        done = uvx_run(clean, uvx, args)
    if done.returncode != 0 and OFFLINE.search(done.stderr):
        pytest.skip(f"uvx could not reach the package registry: {' / '.join(done.stderr.strip().splitlines()[-3:])}")
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    notes = sum(1 for p in vault.rglob("*.md") if ".obsidian" not in p.parts)
    assert f"{notes} files scanned — {notes} added" in done.stdout, done.stdout
    return vault, uvx


@asynccontextmanager
async def session(command: list[str], errlog: Path) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=command[0], args=command[1:])
    with open(errlog, "a", encoding="utf-8") as err:
        async with Client(stdio_client(params, errlog=err), mode="legacy", read_timeout_seconds=CALL_TIMEOUT_S) as c:
            yield c


def served(command: list[str], errlog: Path) -> tuple[set[str], types.CallToolResult, types.CallToolResult]:
    """Over one MCP session: the tools listed, ``list_notes`` and ``get_note`` of the tomato note."""

    async def go():
        async with session(command, errlog) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            listed = await client.call_tool("list_notes", {"limit": 100})
            note = await client.call_tool("get_note", {"path": "Garden/Tomatoes.md"})
            return tools, listed, note

    return asyncio.run(asyncio.wait_for(go(), UVX_TIMEOUT_S))


def assert_serves_the_vault(tools: set[str], listed: types.CallToolResult, note: types.CallToolResult) -> None:
    assert tools == {"get_note", "list_notes"}  # an unnamed client: the default tools of the shipped policy
    assert not listed.is_error and not note.is_error
    paths = {n["filePath"] for n in listed.structured_content["notes"]}
    assert "Garden/Tomatoes.md" in paths and "Kitchen/Sourdough.md" in paths
    assert not {p for p in paths if p.startswith("Personal/")}  # tagged personal: withheld from this client
    assert "polytunnel" in note.structured_content["content"]


def test_the_uvx_line_serves_the_vault_over_mcp_stdio_from_the_wheel(clean, indexed, cairn_wheel, tmp_path):
    vault, uvx = indexed
    line = [*uvx, "--from", str(cairn_wheel), "cairn", "mcp", "--vault", str(vault)]
    assert_serves_the_vault(*served([*clean, *line], tmp_path / "mcp.stderr"))


def server_json_command(package: dict, wheel: Path, vault: Path) -> list[str]:
    """What an MCP client runs for server.json's PyPI package: ``uvx <identifier> <packageArguments>``, the wheel
    standing in for the release on PyPI (``--from``), ``--vault`` given a value and optional arguments left out."""
    args = ["--from", str(wheel), package["identifier"]]
    for arg in package["packageArguments"]:
        if arg["type"] == "positional":
            args.append(arg["value"])
        elif arg.get("isRequired"):
            assert arg["name"] == "--vault", arg
            args += [arg["name"], str(vault)]
    return args


def test_the_command_server_json_gives_mcp_clients_serves_the_same_vault(clean, indexed, cairn_wheel, tmp_path):
    vault, uvx = indexed
    (package,) = json.loads((REPO / "server.json").read_text(encoding="utf-8"))["packages"]
    assert package["runtimeHint"] == "uvx" and package["transport"] == {"type": "stdio"}
    args = server_json_command(package, cairn_wheel, vault)
    assert args[2:] == ["cairn-notes", "mcp", "--vault", str(vault)]
    assert_serves_the_vault(*served([*clean, *uvx, *args], tmp_path / "mcp.stderr"))

"""``cairn doctor``'s MCP check: the desktop agents' config files that name Cairn, read where they exist on this OS
(:func:`client_configs`), each server entry checked as docs/mcp.md says to write it.

An stdio entry must launch ``cairn mcp`` by its absolute path (a desktop app does not read the shell's ``PATH``),
name a vault that has an index, give ``--client NAME`` declared in the policy, and point ``cairn mcp`` at this
shell's config and data folders (a desktop app passes almost no environment: the entry's ``env`` or the defaults);
otherwise ``cairn mcp`` serves nothing or only the default tools. An HTTP entry must name the MCP URL a running
daemon serves and carry a client's token (``cairn mcp token NAME``).
"""

from __future__ import annotations

import hmac
import json
import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cairn.cli.doctor_check import Check
from cairn.config import Config, load_config
from cairn.errors import CairnError

#: Loopback hosts an MCP URL of Cairn may name (it listens on nothing else).
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
#: Clients that launch a server without the shell's ``PATH`` (a relative command then fails).
NO_PATH = frozenset({"Claude Desktop"})


def client_configs(env: Mapping[str, str] | None = None, platform: str | None = None) -> list[tuple[str, Path, str]]:
    """``(client, config file, key of its servers table)`` for the MCP clients whose config files Cairn knows, on
    ``platform`` (``sys.platform``), from ``env``'s home folders (``os.environ``)."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    home = Path(env.get("HOME") or env.get("USERPROFILE") or Path.home())
    if platform == "darwin":
        support = home / "Library" / "Application Support"
    elif platform == "win32":
        support = Path(env["APPDATA"]) if env.get("APPDATA") else home / "AppData" / "Roaming"
    else:
        support = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    return [
        ("Claude Desktop", support / "Claude" / "claude_desktop_config.json", "mcpServers"),
        ("Claude Code", home / ".claude.json", "mcpServers"),
        ("Cursor", home / ".cursor" / "mcp.json", "mcpServers"),
        ("Windsurf", home / ".codeium" / "windsurf" / "mcp_config.json", "mcpServers"),
        ("VS Code", support / "Code" / "User" / "mcp.json", "servers"),
    ]


def _servers(data: Any, key: str) -> Iterator[tuple[str, dict]]:
    """The server entries of one config file: its ``key`` table, and (Claude Code) each project's."""
    if not isinstance(data, dict):
        return
    tables = [data.get(key)]
    projects = data.get("projects")
    if isinstance(projects, dict):
        tables += [p.get(key) for p in projects.values() if isinstance(p, dict)]
    for table in tables:
        if isinstance(table, dict):
            yield from ((name, entry) for name, entry in table.items() if isinstance(entry, dict))


def _names_cairn(name: str, entry: dict, mcp_ports: set[int]) -> bool:
    """Whether a server entry is Cairn's: its name, its program (``cairn``, ``uvx --from cairn-notes cairn``) or
    its URL (a running daemon's MCP port)."""
    words = [entry.get("command"), *(entry.get("args") or [])]
    programs = {Path(w).name.lower().removesuffix(".exe") for w in words if isinstance(w, str)}
    url = entry.get("url")
    port = _port(url) if isinstance(url, str) else None
    return (
        "cairn" in name.lower() or bool(programs & {"cairn", "cairn-notes"}) or (port is not None and port in mcp_ports)
    )


def _port(url: str) -> int | None:
    try:
        return urlsplit(url).port
    except ValueError:
        return None


def _option(args: list[str], name: str) -> str | None:
    """The value of ``--name VALUE`` (or ``--name=VALUE``) in ``args``."""
    for i, word in enumerate(args):
        if word == name and i + 1 < len(args):
            return args[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def check_mcp_clients(config: Config, policy: Any) -> list[Check]:
    """One line per problem of each entry naming Cairn in the known clients' configs (one ``ok`` line for an entry
    without any); one ``info`` line when no config names Cairn. ``policy``: the policy in force (None: unusable)."""
    from cairn.discovery import running_daemons

    daemons = running_daemons(config.data_dir)
    ports = {p for d in daemons if (p := _port(d.get("mcpUrl") or "")) is not None}
    checks: list[Check] = []
    looked = []
    for client, path, key in client_configs():
        if not path.is_file():
            continue
        looked.append(str(path))
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            checks.append(Check("mcp", "warn", f"{client}: {path} cannot be read as JSON ({exc})", "fix the file"))
            continue
        for name, entry in _servers(data, key):
            if not _names_cairn(name, entry, ports):
                continue
            where = f"{client} {name!r} ({path})"
            seen = _check_http(config, entry, daemons) if "url" in entry else _check_stdio(config, client, entry)
            found = seen.found + seen.hints(policy)
            problems = [(status, text, fix) for status, text, fix in found if status != "ok"]
            if problems:
                checks += [Check("mcp", status, f"{where}: {text}", fix) for status, text, fix in problems]
            else:
                checks.append(Check("mcp", "ok", f"{where}: " + "; ".join(text for _, text, _ in found)))
    if not checks:
        read = f" (read {', '.join(looked)})" if looked else ""
        checks.append(Check("mcp", "info", f"no MCP client's config names Cairn{read}", None))
    return checks


Finding = tuple[str, str, str | None]  # (status, text, fix)


@dataclass
class Seen:
    """What one server entry was found to be: ``found`` its findings, ``client`` the policy's client it runs as
    (None: not said) and the ``tools`` it asks for."""

    found: list[Finding] = field(default_factory=list)
    client: str | None = None
    tools: tuple[str, ...] = ()

    def hints(self, policy: Any) -> list[Finding]:
        """What ``policy`` says of the client (:meth:`cairn.policy.Policy.hints`: not declared, a tool not given)."""
        if policy is None or self.client is None:
            return []
        return [("warn", hint, None) for hint in policy.hints(self.client, self.tools)]


def _check_stdio(config: Config, client: str, entry: dict) -> Seen:
    """An entry that launches ``cairn mcp`` (see the module docstring)."""
    command, args = entry.get("command"), [str(a) for a in entry.get("args") or []]
    if not isinstance(command, str) or not command:
        return Seen([("fail", "has no command", 'give "command": the absolute path `command -v cairn` prints')])
    found: list[Finding] = []
    program = Path(command)
    on_path = shutil.which(command)
    if not program.is_absolute():
        fix = f'"command": "{on_path}"' if on_path else "the absolute path of cairn (`command -v cairn`)"
        status = "fail" if client in NO_PATH or on_path is None else "warn"
        found.append((status, f"runs {command!r} by name; a desktop app does not read your shell's PATH", fix))
    elif not (program.is_file() and os.access(program, os.X_OK)):
        found.append(("fail", f"runs {command}, which is not a program here", "the path `command -v cairn` prints"))
    if "mcp" not in args:
        found.append(
            ("fail", f"runs {Path(command).name} {' '.join(args)}, not `cairn mcp`", 'put "mcp" first in args')
        )
        return Seen(found)
    env = {k: str(v) for k, v in (entry.get("env") or {}).items()} if isinstance(entry.get("env"), dict) else {}
    vault = _option(args, "--vault") or env.get("CAIRN_VAULT")
    if not vault:
        return Seen([*found, ("fail", "names no vault", 'add "--vault", "/path/to/vault" to its args')])
    theirs = _their_config(vault, args, env)
    if isinstance(theirs, str):
        return Seen([*found, ("fail", theirs, None)])
    elsewhere = _folders(config, theirs, env)  # then whether that data folder holds an index is beside the point
    found += elsewhere
    if not elsewhere and not theirs.db_path.exists():
        found.append(
            ("fail", f"{vault} has no index in {theirs.data_dir}: `cairn mcp` exits 1", f"cairn index --vault {vault}")
        )
    elif not elsewhere:
        found.append(("ok", f"`cairn mcp` for {vault}", None))
    who = _option(args, "--client")
    tools = [args[i + 1] for i, w in enumerate(args[:-1]) if w == "--tool"]
    if who is None:
        found.append(("warn", "gives no --client: only the default tools, and not local", 'add "--client", "NAME"'))
    else:
        found.append(("ok", f"as the client {who}", None))
    return Seen(found, who, tuple(tools))


def _their_config(vault: str, args: list[str], env: dict[str, str]) -> Config | str:
    """The configuration the entry's ``cairn mcp`` reads: its ``env`` alone (a desktop app passes almost no
    environment), its ``--data-dir``; or why it cannot be read."""
    data_dir = _option(args, "--data-dir")
    try:
        theirs = load_config({"vault": vault, **({"data_dir": data_dir} if data_dir else {})}, env=env)
        if not Path(vault).is_dir():
            return f"its vault {vault} is not a folder"
        return theirs
    except CairnError as exc:
        return f"its settings cannot be read: {exc.message}"


def _folders(config: Config, theirs: Config, env: dict[str, str]) -> list[Finding]:
    """The entry's ``cairn mcp`` reads this shell's config and data folders, or says which env entry is missing."""
    wanted = {}
    if theirs.config_dir.resolve() != config.config_dir.resolve():
        wanted["CAIRN_CONFIG_DIR"] = str(config.config_dir)
    if theirs.data_dir.resolve() != config.data_dir.resolve():
        wanted["CAIRN_DATA_DIR"] = str(config.data_dir)
    if not wanted:
        return []
    text = (
        f"its `cairn mcp` reads {theirs.config_dir} and {theirs.data_dir}, not this shell's folders: it would find "
        "another policy or no index"
    )
    return [("fail", text, f'"env": {json.dumps({**env, **wanted})}')]


def _check_http(config: Config, entry: dict, daemons: list[dict]) -> Seen:
    """An entry that reaches the daemon's MCP endpoint over HTTP with a client's token."""
    from cairn.secrets import mcp_client_names, read_mcp_token

    url = str(entry.get("url"))
    if (urlsplit(url).hostname or "").lower() not in LOOPBACK:
        where = "the mcpUrl `cairn status` prints"
        return Seen([("fail", f"names {url}; Cairn serves MCP on this machine's loopback only", where)])
    serving = [d for d in daemons if _port(d.get("mcpUrl") or "") == _port(url)]
    if serving:
        found: list[Finding] = [("ok", f"the daemon for {serving[0]['vault']} serves {url}", None)]
    else:
        now = ", ".join(d["mcpUrl"] for d in daemons if d.get("mcpUrl")) or "none, no daemon runs"
        fix = "the mcpUrl `cairn status` prints, with `cairn serve` running"
        found = [("fail", f"no Cairn daemon serves MCP at {url} now (MCP URLs: {now})", fix)]
    headers = entry["headers"] if isinstance(entry.get("headers"), dict) else {}
    auth = next((str(v) for k, v in headers.items() if k.lower() == "authorization"), "")
    scheme, _, token = auth.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        fix = '"headers": {"Authorization": "Bearer <cairn mcp token NAME>"}'
        return Seen([*found, ("fail", "sends no bearer token", fix)])
    for name in mcp_client_names(config):
        known = read_mcp_token(config, name)
        if known and hmac.compare_digest(known.encode(), token.strip().encode()):
            tools = tuple(part[5:] for part in urlsplit(url).query.split("&") if part.startswith("tool="))
            return Seen([*found, ("ok", f"as the client {name}", None)], name, tools)
    fix = "`cairn mcp token NAME`, and put it in"
    return Seen([*found, ("fail", "its token is none of the MCP clients' (rotated?)", fix)])

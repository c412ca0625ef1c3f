"""The running daemons' discovery records (layer 1: files in the data folder): where the plugin, ``cairn status``
and MCP clients find the daemon of a vault, and how a starting daemon tells that the port it wants is held by
another vault's daemon (then it takes a free port and records that one). Mode 0600, written atomically; never a
token.

A record is believed only while its daemon proves it: its pid is alive and the ``/health`` at its URL names the
record's vault (``vaultId``, :func:`cairn.config.vault_id_of`). A record left by a daemon killed with ``kill -9``,
or whose port another program or another vault's daemon holds now, is stale and ignored (docs/design.md,
"Contract" → Several vaults)."""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cairn import __version__
from cairn.config import DEFAULT_PORT, Config, vault_id_of
from cairn.private_files import private_dir

#: How long a ``/health`` probe of a daemon waits (seconds): a daemon on this machine answers in far less.
PROBE_TIMEOUT_S = 3.0
#: A ``/health`` answer is a few hundred bytes; more is not read.
MAX_HEALTH_BYTES = 64 * 1024
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

log = logging.getLogger(__name__)


def write_service_file(config: Config, url: str, port: int, mcp_url: str | None = None) -> None:
    """The discovery record (mode 0600) ``{port, pid, version, startedAt, url, vault, index}`` of the running daemon
    for the plugin and ``cairn status``, plus ``mcpUrl`` (the streamable-HTTP MCP endpoint) when it serves MCP.
    Never a token. Written twice: ``service-<index>.json`` (``config.service_file``, this vault's; what
    ``cairn status --vault`` and the plugin read) and ``service.json`` (``config.shared_service_file``: the
    daemon started last, for readers that know no vault). ``vault`` is the resolved vault path."""
    private_dir(config.data_dir)
    info = {
        "port": port,
        "pid": os.getpid(),
        "version": __version__,
        "startedAt": time.time(),
        "url": url,
        "vault": str(config.vault),
        "index": config.index_id,
    }
    if mcp_url:
        info["mcpUrl"] = mcp_url
    data = json.dumps(info)
    for target in (config.service_file, config.shared_service_file):
        tmp = target.with_name(f".service.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, data.encode("utf-8"))
        finally:
            os.close(fd)
        os.replace(tmp, target)


def remove_service_file(config: Config) -> None:
    """Remove this daemon's discovery files (see :func:`write_service_file`): each only while it names this
    process's pid and vault, so a daemon never removes another one's (``service.json`` may be another vault's
    by now)."""
    for target in (config.service_file, config.shared_service_file):
        try:
            data = json.loads(target.read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("pid") == os.getpid() and data.get("vault") == str(config.vault):
                target.unlink()
        except (OSError, ValueError):
            pass


def read_records(data_dir: Path) -> list[dict[str, Any]]:
    """Every per-vault discovery record (``service-<index>.json``) in ``data_dir``, sorted by vault; unreadable
    or malformed files are left out. A record may be stale (its daemon killed): :func:`answering` tells."""
    records = []
    try:
        paths = sorted(data_dir.glob("service-*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(info, dict) and isinstance(info.get("url"), str) and isinstance(info.get("vault"), str):
            records.append(info)
    return sorted(records, key=lambda r: (r["vault"], r["url"]))


def health(url: str, timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any] | None:
    """``GET <url>/health`` of a Cairn daemon (no token needed) → its JSON, or ``None`` when nothing answers
    there or what answers is not a Cairn daemon (its ``/health`` has no ``version``, ``store`` and ``embedder``).
    ``url`` must be a loopback ``http://`` URL (anything else is ``None``: a record cannot send us elsewhere)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in LOOPBACK_HOSTS:
        return None
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout) as resp:
            body = json.loads(resp.read(MAX_HEALTH_BYTES))
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return body if isinstance(body, dict) and {"version", "store", "embedder"} <= set(body) else None


def pid_alive(pid: object) -> bool:
    """Whether process ``pid`` exists (POSIX: signal 0; another user's process counts); ``False`` for what is not
    a positive whole number. On other systems ``True`` for any pid: ``/health`` decides alone there."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if os.name != "posix":  # os.kill(pid, 0) would end the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, as another user's
        return True
    return True


def answering(record: dict[str, Any]) -> dict[str, Any] | None:
    """The ``/health`` of the daemon a record advertises, when it is that daemon: the record's pid is alive and
    the daemon answering at its URL serves the record's vault (``vaultId``). ``None`` for a stale record: its
    daemon is gone, or its port is another program's or another vault's daemon's now."""
    if not pid_alive(record.get("pid")):
        return None
    found = health(record["url"])
    if found is None or found.get("vaultId") != vault_id_of(Path(record["vault"])):
        return None
    return found


def own_daemon(config: Config) -> tuple[dict[str, Any] | None, str | None]:
    """This vault's running daemon: ``(record, None)`` when its ``service-<index>.json`` (else a ``service.json``
    naming this vault) advertises a daemon that proves it serves this vault (:func:`answering`); else ``(None,
    why)``, ``why`` saying what stale record was ignored, or ``None`` when there is no record."""
    why = None
    for path in (config.service_file, config.shared_service_file):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or not isinstance(record.get("url"), str):
            continue
        if record.get("vault") != str(config.vault):
            continue
        if answering(record) is not None:
            return record, None
        if why is None and not pid_alive(record.get("pid")):
            why = f"{path.name} names pid {record.get('pid')}, which is no longer running"
        elif why is None:
            why = f"{path.name} names {record['url']}, where this vault's daemon does not answer"
    return None, why


def running_daemons(data_dir: Path) -> list[dict[str, Any]]:
    """The daemons of every vault that advertise themselves in ``data_dir`` and prove it now (:func:`answering`):
    ``[{vault, url, port, pid, mcpUrl?, index}]`` (the record's fields), sorted by vault."""
    return [r for r in read_records(data_dir) if answering(r) is not None]


def port_of(url: str) -> int | None:
    try:
        return urlsplit(url).port
    except ValueError:
        return None


def daemon_holding(config: Config, port: int) -> str | None:
    """The vault of the Cairn daemon that holds loopback ``port`` (its API, or its MCP endpoint), when one does:
    found from the records in ``config.data_dir`` (a record naming the port whose daemon answers), else by asking
    ``/health`` on the port itself (a daemon keeping its records in another data folder). ``"another vault"``
    when it answers but no record names its vault; ``None`` when the holder is not a Cairn daemon, or nothing
    answers. Used at start-up to tell "another vault's daemon has the port" (take a free one) from "another
    program has it" (an error naming the port)."""
    for record in read_records(config.data_dir):
        ports = {record.get("port"), port_of(record.get("mcpUrl") or "")}
        if port in ports and answering(record) is not None:
            return record["vault"]
    host = "127.0.0.1" if config.host in ("localhost", "0.0.0.0") else config.host
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    return "another vault" if health(url) is not None else None


def moves_off(config: Config, what: str, chosen: int | None, *, recorded: bool = True) -> Callable[[int], bool]:
    """Whether this vault's daemon, finding ``port`` in use, takes a free port instead: when another Cairn daemon
    holds it (another vault's: several vaults are served side by side, each on its own ports), or when the owner
    never chose it (``chosen`` None or the default port). The port in use is then logged with who holds it; the
    free port is in ``service-<index>.json`` (``recorded``), where the plugin, ``cairn status`` and MCP clients find
    it."""

    def move(port: int) -> bool:
        holder = daemon_holding(config, port)
        if holder is None and chosen is not None and chosen != DEFAULT_PORT:
            return False  # the owner's port, held by another program: the error names it
        who = f"Cairn's daemon for {holder}" if holder else "another program"
        where = f"recorded in {config.service_file.name}" if recorded else "said below"
        log.warning(
            "the %s port %d is taken by %s; serving %s's %s on a free port instead (%s)",
            what,
            port,
            who,
            config.vault,
            what,
            where,
        )
        return True

    return move

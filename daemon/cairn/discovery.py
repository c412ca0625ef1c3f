"""The running daemon's discovery record (layer 1: files in the data folder): where the plugin and ``cairn status``
find the daemon of a vault. Mode 0600, written atomically; never a token."""

from __future__ import annotations

import json
import os
import time

from cairn import __version__
from cairn.config import Config
from cairn.private_files import private_dir


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

"""Loopback only: which hosts Cairn's servers may listen on and which endpoints count as on this machine.

Layer 0 (pure). The ``host`` setting is read through :func:`is_loopback_host` (:mod:`cairn.config`), and every
listener calls :func:`require_loopback_host` before it opens a socket (docs/design.md, "Interfaces" → HTTP).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from cairn.errors import ConfigError

__all__ = ["LOOPBACK_ONLY", "is_loopback_host", "is_loopback_url", "require_loopback_host"]


def is_loopback_url(url: str) -> bool:
    """True when ``url``'s host is a loopback address literal or ``localhost`` (anything else counts as remote).
    ``*.localhost`` names count as remote: RFC 6761 asks resolvers to map them to loopback, but many do not
    (this machine's does not), and a DNS answer could then send withheld notes off the machine."""
    try:
        return is_loopback_host(urlsplit(url).hostname or "")
    except ValueError:
        return False


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback address literals (``127.0.0.0/8``, ``::1``; brackets allowed)."""
    host = host.strip().lower()
    try:
        return host in ("localhost", "localhost.") or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


#: Why only a loopback host is taken: the one wording for the setting and every listener (checked before it binds).
LOOPBACK_ONLY = (
    "expected a loopback address (127.0.0.1, ::1 or localhost): Cairn's servers answer this machine only, so "
    "nothing elsewhere on the network can reach your notes"
)


def require_loopback_host(host: str, what: str) -> None:
    """Raise :class:`ConfigError` naming ``what`` (e.g. ``"MCP over HTTP"``) unless ``host`` is loopback."""
    if not is_loopback_host(host):
        raise ConfigError(
            f"Cannot serve {what} on {host!r}: {LOOPBACK_ONLY}. Set host = '127.0.0.1' in config.toml, or remove it."
        )

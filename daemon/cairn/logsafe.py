"""Text from a request made safe for one log line: control characters escaped, length bounded.

A request path, header or body ends up in log messages (the access log, error lines, the MCP SDK's own
messages). Raw ``\\n``/``\\r`` (from ``%0a``/``%0d%0a`` in a URL, reachable by any web page through an
``<img>``) would let a client write whole forged lines; C1 controls (``\\x85``), Unicode line and paragraph
separators and bidi overrides do the same for tools that split or render lines differently. They are
shown as ``\\xNN``/``\\uNNNN`` escapes instead.
"""

from __future__ import annotations

import logging
import re

#: C0 controls, DEL, C1 controls, the Unicode line/paragraph separators and the bidi embedding/override/isolate
#: characters.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, limit: int | None = None) -> str:
    """``text`` (``str()`` of anything) with every control character escaped; cut to ``limit`` characters
    (before escaping) with ``…`` when longer."""
    value = text if isinstance(text, str) else str(text)
    if limit is not None and len(value) > limit:
        value = value[:limit] + "…"
    return _UNSAFE.sub(_escape, value)


class SafeFormatter(logging.Formatter):
    """A :class:`logging.Formatter` whose message part is always one line: control characters in the
    formatted message (ours, aiohttp's, uvicorn's, the MCP SDK's) are escaped with :func:`printable`. The
    traceback of ``exc_info`` is appended unchanged (it is the daemon's own, multi-line by nature)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = printable(record.message)
        return super().formatMessage(record)

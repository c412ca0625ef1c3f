"""Citations a model writes for a number outside the included sources are removed from the streamed text (also when
``[``, the digits and ``]`` arrive in different tokens). Text inside backticks is left alone (``arr[0]`` is code,
not a citation)."""

from __future__ import annotations

import re
from collections.abc import Sequence


class CitationFilter:
    """Streaming filter that drops ``[n]`` citations whose ``n`` is not in ``allowed``.

    :meth:`feed` returns the text that is safe to send now; a tail that could still become a
    citation (``[``, ``[1``, with the whitespace before it) is held back until the next piece or
    :meth:`flush`. Leading whitespace of the whole answer is dropped. ``removed`` counts removals; ``kept`` holds
    the numbers of the citations let through (the sources the answer cites).
    """

    _HOLD = re.compile(r"[ \t]*(?:\[\d{0,3})?$")
    _CITE = re.compile(r"[ \t]*\[(\d{1,3})\]")
    _TICKS = re.compile(r"(`+)")

    def __init__(self, allowed: Sequence[int]) -> None:
        self.allowed = set(allowed)
        self.removed = 0
        self.kept: set[int] = set()
        self._buf = ""
        self._in_code = False
        self._started = False

    def feed(self, text: str) -> str:
        self._buf += text
        match = self._HOLD.search(self._buf)
        cut = match.start() if match else len(self._buf)
        ready, self._buf = self._buf[:cut], self._buf[cut:]
        return self._clean(ready)

    def flush(self) -> str:
        ready, self._buf = self._buf, ""
        return self._clean(ready)

    def _clean(self, text: str) -> str:
        out = []
        for part in self._TICKS.split(text):
            if part.startswith("`"):
                self._in_code = not self._in_code
                out.append(part)
            elif self._in_code:
                out.append(part)
            else:
                out.append(self._CITE.sub(self._keep_or_drop, part))
        cleaned = "".join(out)
        if not self._started:
            cleaned = cleaned.lstrip()
            self._started = bool(cleaned)
        return cleaned

    def _keep_or_drop(self, m: re.Match) -> str:
        n = int(m.group(1))
        if n in self.allowed:
            self.kept.add(n)
            return m.group(0)
        self.removed += 1
        return ""

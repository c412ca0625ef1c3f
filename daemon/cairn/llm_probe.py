"""``/health``'s cached view of the answer model's endpoint (layer 2): :class:`LLMProbe`."""

from __future__ import annotations

import asyncio
import time
from typing import Any


class LLMProbe:
    """``/health``'s ``llm`` entry: ``{configured, reachable, remote, model}``. The endpoint is asked at
    most every ``ttl_s`` seconds (``/health`` needs no token, so it must not drive traffic to the model).
    ``model``: an object with ``probe()`` (a coroutine → bool), ``remote`` and ``model``, or ``None``."""

    def __init__(self, model: Any, ttl_s: float = 10.0) -> None:
        self.model = model
        self.ttl_s = ttl_s
        self._at = -1e9
        self._reachable = False
        self._lock = asyncio.Lock()

    async def status(self) -> dict[str, Any]:
        if self.model is None:
            return {"configured": False, "reachable": False, "remote": False}
        async with self._lock:
            if time.monotonic() - self._at > self.ttl_s:
                self._reachable = await self.model.probe()
                self._at = time.monotonic()
        return {
            "configured": True,
            "reachable": self._reachable,
            "remote": self.model.remote,
            "model": self.model.model,
        }

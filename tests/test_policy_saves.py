"""A policy file saved in more than one write is never used half-written.

The first part of a two-write save (``version`` and ``withhold.tags``) is a valid policy on its own, without the
``folders:`` that follow. Clients not declared local call ``get_note`` on a folder-withheld note through the
real MCP service and the SDK's client while the file is rewritten; none of those calls may be served.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from mcp import Client

from cairn.policy_live import PolicyHolder
from support.policies import FIRST_WRITE, FULL, WITHHELD_BY_FOLDER

CLIENTS = 8
REWRITES = 20
#: get_note calls answered between the first and the second write of each save.
CALLS_BETWEEN_WRITES = 8


def test_the_first_write_alone_is_a_valid_policy_that_serves_the_folder():
    """The attack below is meaningful only if the half-written file is a usable, laxer policy."""
    from cairn.policy import parse_policy

    half = parse_policy(FIRST_WRITE, "half.yaml")
    assert half.withhold.folders == () and half.withhold.tags == ("personal",)
    assert parse_policy(FULL, "full.yaml").withhold.folders == ("Private",)


class Calls:
    """A count of answered get_note calls that a writer can wait on."""

    def __init__(self) -> None:
        self.done = 0
        self.served: list[str] = []
        self.changed = asyncio.Condition()

    async def answered(self, result: Any) -> None:
        async with self.changed:
            self.done += 1
            if not result.is_error:
                self.served.append(result.structured_content.get("filePath", "?"))
            self.changed.notify_all()

    async def reach(self, count: int, timeout_s: float = 60.0) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: self.done >= count), timeout_s)


async def save_in_two_writes(path: os.PathLike[str], calls: Calls) -> None:
    """Truncate, write the first part, let CALLS_BETWEEN_WRITES calls through, write the rest."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(FIRST_WRITE)
        fh.flush()
        await calls.reach(calls.done + CALLS_BETWEEN_WRITES)
        fh.write(FULL[len(FIRST_WRITE) :])
    await calls.reach(calls.done + CALLS_BETWEEN_WRITES)


def test_no_call_is_served_under_a_half_saved_policy(canary_cairn, tmp_path):
    from cairn.mcp_server import McpService, build_server
    from support.cairns import services_of

    path = tmp_path / "mcp-serve.yaml"
    path.write_text(FULL, encoding="utf-8")
    holder = PolicyHolder(path, strict=True, check_interval_s=0.0)  # checks the file on every call
    service = McpService(
        services_of(canary_cairn),
        policy=holder.current,
        audit=None,
        transport="stdio",
    )
    server = build_server(service, lambda ctx: ("claude-desktop", ()))

    async def client_loop(calls: Calls, stop: asyncio.Event) -> None:
        async with Client(server) as client:
            while not stop.is_set():
                await calls.answered(await client.call_tool("get_note", {"path": WITHHELD_BY_FOLDER}))

    async def go() -> Calls:
        calls, stop = Calls(), asyncio.Event()
        clients = [asyncio.create_task(client_loop(calls, stop)) for _ in range(CLIENTS)]
        try:
            await calls.reach(CLIENTS)
            for _ in range(REWRITES):
                await save_in_two_writes(path, calls)
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*clients), 60)
        return calls

    calls = asyncio.run(asyncio.wait_for(go(), 300))
    assert calls.done >= REWRITES * 2 * CALLS_BETWEEN_WRITES
    assert calls.served == [], f"{len(calls.served)} of {calls.done} calls were served under a half-saved policy"


def test_a_settled_edit_is_used_and_the_previous_policy_stays_until_then(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(FULL, encoding="utf-8")
    holder = PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=0.2)
    assert holder.current().withhold.folders == ("Private",)

    path.write_text(FULL.replace("folders: [Private]", "folders: [Private, Journal]"), encoding="utf-8")
    assert holder.current().withhold.folders == ("Private",)  # changed just now: not used yet
    assert holder.reload().withhold.folders == ("Private", "Journal")  # once it stayed the same 0.2 s

    path.write_text(FULL.replace("local: true", "local: maybe"), encoding="utf-8")
    assert holder.current().fail_closed_reason is None  # the previous policy meanwhile
    broken = holder.reload()
    assert broken.fail_closed_reason and f"{path}:8:" in broken.fail_closed_reason  # settled and invalid


def test_the_settle_time_is_a_config_value_of_0_to_60_seconds():
    import pytest

    from cairn.config import Config, load_config
    from cairn.errors import ConfigError

    assert Config().mcp_policy_settle_s == 1.0
    assert load_config({"mcp_policy_settle_s": "0.25"}, env={}).mcp_policy_settle_s == 0.25
    for bad in ("-1", "61", "soon"):
        with pytest.raises(ConfigError, match="mcp_policy_settle_s"):
            load_config({"mcp_policy_settle_s": bad}, env={})

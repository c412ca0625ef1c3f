"""A policy saved in two writes more than the settle time apart is never used half-written, and a change that
withholds less takes effect only when the owner confirms it (``cairn policy apply``).

The real :class:`~cairn.policy_file.PolicyHolder` over a real file, the real MCP service and the SDK's client:
the slow in-place save leaves the first part (a valid policy without ``folders:``) on disk for longer than the
settle time; no call to a folder-withheld note is served during the gap, after it, or by a server started in
the gap, until the owner confirms. A stricter change is in force at once. Waits are the holder's own
(``reload`` returns once a change has settled); nothing sleeps.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from mcp import Client

from cairn.policy_file import apply_policy, awaiting_confirmation
from cairn.policy_live import PolicyHolder
from support.policies import FIRST_WRITE, FULL, WITHHELD_BY_FOLDER

SETTLE_S = 0.2
CALLS = 5
#: The owner's intended end state in the second scenario: the Private folder is no longer withheld.
OPENED = FULL.replace("  folders: [Private]\n", "  folders: []\n")


class Server:
    """The MCP service under ``holder``, spoken to by the SDK's in-memory client as client ``claude-desktop``."""

    def __init__(self, canary_cairn: Any, holder: PolicyHolder) -> None:
        from cairn.mcp_server import McpService, build_server
        from support.cairns import services_of

        service = McpService(
            services_of(canary_cairn),
            policy=holder.current,
            audit=None,
            transport="stdio",
        )
        self.server = build_server(service, lambda ctx: ("claude-desktop", ()))

    def served(self, path: str = WITHHELD_BY_FOLDER) -> int:
        """How many of CALLS get_note calls for ``path`` were answered with the note."""

        async def go() -> int:
            async with Client(self.server) as client:
                results = [await client.call_tool("get_note", {"path": path}) for _ in range(CALLS)]
            return sum(not r.is_error for r in results)

        return asyncio.run(asyncio.wait_for(go(), 120))


def start_slow_save(path: Path, first: str):
    """Open the policy in place (truncated) and write ``first``; the caller writes the rest later."""
    fh = open(path, "w", encoding="utf-8")  # noqa: SIM115 - held open across the gap, as a slow editor does
    fh.write(first)
    fh.flush()
    return fh


def test_a_slow_save_never_serves_the_folder_during_or_after_the_gap(canary_cairn, tmp_path):
    path = tmp_path / "mcp-serve.yaml"
    path.write_text(FULL, encoding="utf-8")
    holder = PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=SETTLE_S)
    server = Server(canary_cairn, holder)
    assert server.served() == 0 and server.served("Recipes/Bread.md") == CALLS  # the check is not vacuous

    fh = start_slow_save(path, FIRST_WRITE)
    try:
        gap = holder.reload()  # the first part has stayed the same past the settle time
        assert gap.withhold.folders == ("Private",)
        assert holder.awaiting == ["folder Private"]
        assert server.served() == 0
        started_in_the_gap = PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=SETTLE_S)
        assert started_in_the_gap.current().withhold.folders == ("Private",)
        fh.write(FULL[len(FIRST_WRITE) :])
    finally:
        fh.close()
    after = holder.reload()
    assert after.withhold.folders == ("Private",) and holder.awaiting == []
    assert server.served() == 0


def test_a_change_that_withholds_less_waits_for_cairn_policy_apply(canary_cairn, tmp_path):
    from support.cli import run_cairn

    home = tmp_path / "home"
    path = home / "config" / "mcp-serve.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(FULL, encoding="utf-8")
    holder = PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=SETTLE_S)
    server = Server(canary_cairn, holder)

    fh = start_slow_save(path, FIRST_WRITE)  # the owner un-withholds Private, saving slowly
    try:
        holder.reload()
        assert server.served() == 0
        fh.write(OPENED[len(FIRST_WRITE) :])
    finally:
        fh.close()
    assert holder.reload().withhold.folders == ("Private",)  # complete, valid, withholding less: not yet
    assert server.served() == 0
    assert awaiting_confirmation(path) == ["folder Private"]
    check = run_cairn(home, "policy", "check")
    assert check.stdout == f"ok: {path}\n" and "cairn policy apply" in check.stderr, check.stderr

    applied = run_cairn(home, "policy", "apply")  # the owner confirms, from another process
    assert f"Applied {path}" in applied.stdout and "folder Private" in applied.stdout, applied.stdout
    assert holder.reload().withhold.folders == ()
    assert server.served() == CALLS
    assert awaiting_confirmation(path) == []


def test_a_stricter_change_is_in_force_at_once_and_becomes_the_baseline(tmp_path):
    path = tmp_path / "mcp-serve.yaml"
    path.write_text(FULL, encoding="utf-8")
    holder = PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=SETTLE_S)
    path.write_text(FULL.replace("folders: [Private]", "folders: [Private, Journal]"), encoding="utf-8")
    assert holder.reload().withhold.folders == ("Private", "Journal")
    path.write_text(FULL, encoding="utf-8")  # back to the policy before: now that withholds less
    assert holder.reload().withhold.folders == ("Private", "Journal")
    assert holder.awaiting == ["folder Journal"]


def test_making_a_client_local_waits_and_apply_names_what_changed(tmp_path):
    path = tmp_path / "mcp-serve.yaml"
    path.write_text(FULL, encoding="utf-8")
    holder = PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=SETTLE_S)
    path.write_text(FULL.replace("claude-desktop: {local: false", "claude-desktop: {local: true"), encoding="utf-8")
    waiting = holder.reload()
    assert not waiting.is_local("claude-desktop") and waiting.withhold.folders == ("Private",)
    _, less = apply_policy(path)
    assert less == ["client claude-desktop now local"]
    assert holder.reload().is_local("claude-desktop")


def test_a_broken_record_fails_closed_until_the_owner_confirms(tmp_path):
    """A record that is not JSON could have held a stricter policy than the file: nothing is served from the file
    alone, the error names the record and `cairn policy apply`, and confirming repairs it."""
    import pytest

    from cairn.policy import PolicyError
    from cairn.policy_file import confirmed_record_path

    path = tmp_path / "mcp-serve.yaml"
    path.write_text(OPENED, encoding="utf-8")
    record = confirmed_record_path(path)
    record.write_text("{not json", encoding="utf-8")
    with pytest.raises(PolicyError) as refused:
        PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=SETTLE_S)
    assert refused.value.file == str(record) and "is not valid JSON" in refused.value.reason
    assert "cairn policy apply" in refused.value.reason
    daemon = PolicyHolder(path, strict=False, check_interval_s=0.0, settle_s=SETTLE_S)
    assert daemon.current().fail_closed_reason and str(record) in daemon.current().fail_closed_reason
    assert record.read_text(encoding="utf-8") == "{not json"  # never silently rewritten from the file

    apply_policy(path)  # the owner looked at the file and confirms it
    assert daemon.reload().fail_closed_reason is None and daemon.current().withhold.folders == ()
    assert PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=SETTLE_S).current().withhold.folders == ()

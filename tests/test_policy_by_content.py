"""A policy that withholds less waits for ``cairn policy apply`` however it arrives (docs/design.md, "Contract" →
Governance): what is in force is compared with what was last confirmed by content (what it withholds, who is
local), never by which file holds it.

The owner keeps ``mcp-serve.yaml`` as a symbolic link into their dotfiles (stow, chezmoi) and re-points it with
``ln -sfn`` at a file that withholds less. A real ``cairn mcp`` over stdio, driven by the MCP SDK's client as an
agent launches it, must not hand the note tagged ``personal`` to a client not declared local until the owner
runs ``cairn policy apply``; ``cairn policy check`` names what waits. The daemon's live holder follows the same
rule while it runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.policy_homes import (
    AGENT_LOCAL,
    DIARY,
    DIARY_CANARY,
    LOOSE,
    PUBLIC,
    STRICT,
    cairn,
    mcp_get,
    owners_home,
    repoint,
)

pytestmark = pytest.mark.e2e  # `cairn mcp` subprocesses over a real index

#: Each looser file and what `cairn policy check` says it withholds less.
LOOSER = [(LOOSE, "tag personal"), (AGENT_LOCAL, "client remote-agent now local")]


def linked_home(tmp_path: Path, embedder) -> tuple[Path, Path, Path, Path]:
    """The owner's dotfiles: ``config/mcp-serve.yaml`` a link to ``dotfiles/strict.yaml``; the vault indexed.
    Returns (home, vault, link, dotfiles folder)."""
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "strict.yaml").write_text(STRICT, encoding="utf-8")
    link = tmp_path / "home" / "config" / "mcp-serve.yaml"
    link.parent.mkdir(parents=True)
    link.symlink_to(dotfiles / "strict.yaml")
    home, vault = owners_home(tmp_path, embedder, policy=None)
    return home, vault, link, dotfiles


@pytest.mark.parametrize(("looser", "less"), LOOSER, ids=["withholds-nothing", "agent-made-local"])
def test_a_link_repointed_at_a_looser_file_waits_for_cairn_policy_apply(tmp_path, embedder, looser, less):
    home, vault, link, dotfiles = linked_home(tmp_path, embedder)
    first = mcp_get(home, vault, DIARY)
    assert first.session and not first.served and DIARY_CANARY not in first.text, first.text
    assert mcp_get(home, vault, PUBLIC).served  # the check is not vacuous

    (dotfiles / "loose.yaml").write_text(looser, encoding="utf-8")
    repoint(link, dotfiles / "loose.yaml")
    after = mcp_get(home, vault, DIARY)
    assert after.session and not after.served and DIARY_CANARY not in after.text, after.text

    check = cairn(home, "policy", "check")
    assert check.returncode == 0 and check.stdout == f"ok: {link}\n", check.stderr
    assert f"Not in force yet: {link} (a link to {dotfiles / 'loose.yaml'}) withholds less" in check.stderr
    assert f"({less})" in check.stderr and "cairn policy apply" in check.stderr, check.stderr

    applied = cairn(home, "policy", "apply")
    assert applied.returncode == 0 and less in applied.stdout, applied.stderr
    confirmed = mcp_get(home, vault, DIARY)
    assert confirmed.served and DIARY_CANARY in confirmed.text, confirmed.text  # the owner's decision holds
    assert cairn(home, "policy", "check").stderr == ""


def test_a_looser_file_moved_over_the_policy_waits_too(tmp_path, embedder):
    home, vault = owners_home(tmp_path, embedder)
    policy = home / "config" / "mcp-serve.yaml"
    assert not mcp_get(home, vault, DIARY).served
    new = tmp_path / "downloaded.yaml"
    new.write_text(LOOSE, encoding="utf-8")
    new.replace(policy)  # another file, another inode, the same path
    assert not mcp_get(home, vault, DIARY).served
    assert "(tag personal)" in cairn(home, "policy", "check").stderr


def test_the_running_holder_keeps_the_stricter_policy_when_the_link_is_repointed(tmp_path):
    from cairn.policy_live import PolicyHolder

    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "strict.yaml").write_text(STRICT, encoding="utf-8")
    (dotfiles / "loose.yaml").write_text(LOOSE, encoding="utf-8")
    link = tmp_path / "config" / "mcp-serve.yaml"
    link.parent.mkdir()
    link.symlink_to(dotfiles / "strict.yaml")
    holder = PolicyHolder(link, strict=False, check_interval_s=0.0, settle_s=0.2)
    assert holder.current().withhold.tags == ("personal",)

    repoint(link, dotfiles / "loose.yaml")
    assert holder.reload().withhold.tags == ("personal",)
    assert holder.awaiting == ["tag personal"]
    fresh = PolicyHolder(link, strict=True, check_interval_s=0.0, settle_s=0.2)  # a server started now
    assert fresh.current().withhold.tags == ("personal",) and fresh.awaiting == ["tag personal"]

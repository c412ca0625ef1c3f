"""Damaged governance records fail closed (docs/design.md, "Contract" → Governance).

Two records decide what a client not declared local may see: which policy governs a vault
(``indexes/<index>.policy.json`` in the data folder) and the policy last confirmed
(``mcp-policy-confirmed.json`` beside the policy). When either is damaged (empty, unreadable, not JSON, naming
nothing) or was there and vanished, a real ``cairn mcp`` (the MCP SDK's stdio client, as an agent launches it)
refuses to serve, naming the file and the command that repairs it, and the daemon's holder fails closed. A
brand-new install has neither record and still works: the policy found on the first use is the one confirmed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.policy_homes import DIARY, DIARY_CANARY, LOOSE, PUBLIC, STRICT, cairn, mcp_get, owners_home

pytestmark = pytest.mark.e2e  # `cairn mcp` subprocesses over a real index


def damage(record: Path, how: str) -> None:
    """Damage ``record`` the way ``how`` says: emptied, broken JSON, an object naming nothing, bytes that are not
    text, a folder in its place (unreadable even to root, who reads any file), or deleted."""
    if how == "deleted":
        record.unlink()
    elif how == "folder":
        record.unlink()
        record.mkdir()
    else:
        text = {"empty": b"", "broken": b'{"', "nothing": b"{}", "not-text": b'{"\xff\xfe": 1}'}[how]
        record.write_bytes(text)


DAMAGE = ["empty", "broken", "nothing", "not-text", "deleted"]


def vault_record(home: Path) -> Path:
    (record,) = (home / "data" / "indexes").glob("*.policy.json")
    return record


@pytest.mark.parametrize("how", [*DAMAGE, "folder"])
def test_a_damaged_vault_record_refuses_a_server_reading_another_policy(tmp_path, embedder, how):
    home, vault = owners_home(tmp_path, embedder)
    other = tmp_path / "other-config"  # e.g. a desktop app's default folders, holding a looser policy
    other.mkdir()
    (other / "mcp-serve.yaml").write_text(LOOSE, encoding="utf-8")
    assert not mcp_get(home, vault, DIARY).served
    record = vault_record(home)
    damage(record, how)

    elsewhere = mcp_get(home, vault, DIARY, CAIRN_CONFIG_DIR=str(other))
    assert not elsewhere.session and DIARY_CANARY not in elsewhere.text, elsewhere.text
    assert f"Error: {record}: the record of which MCP policy governs the vault" in elsewhere.text
    assert f"`cairn policy apply --vault {vault}`" in elsewhere.text
    owners = mcp_get(home, vault, PUBLIC)  # the owner's own folders too: which policy applies is not known
    assert not owners.session and f"Error: {record}" in owners.text, owners.text
    check = cairn(home, "policy", "check", "--vault", str(vault))
    assert check.returncode == 1 and f"Error: {record}" in check.stderr, check.stderr


@pytest.mark.parametrize("how", ["broken", "deleted"])
def test_the_owners_shell_restores_the_vault_record_from_the_index(tmp_path, embedder, how):
    home, vault = owners_home(tmp_path, embedder)
    record = vault_record(home)
    policy = home / "config" / "mcp-serve.yaml"
    damage(record, how)
    refused = mcp_get(home, vault, PUBLIC)
    assert f"`cairn index --vault {vault}` restores it from the index's copy (governed by {policy})" in refused.text

    assert cairn(home, "index", "--vault", str(vault)).returncode == 0
    assert json.loads(record.read_text(encoding="utf-8"))["policy"] == str(policy)
    assert mcp_get(home, vault, PUBLIC).served and not mcp_get(home, vault, DIARY).served


def test_the_daemon_fails_closed_on_a_damaged_vault_record(tmp_path, embedder):
    from cairn.config import load_config
    from cairn.policy_live import daemon_policy

    home, vault = owners_home(tmp_path, embedder)
    record = vault_record(home)
    damage(record, "broken")
    config = load_config(
        {"vault": str(vault), "config_dir": str(home / "config"), "data_dir": str(home / "data")}, env={}
    )
    reason = daemon_policy(config).current().fail_closed_reason
    assert reason and str(record) in reason


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_confirmed_record_never_lets_a_looser_policy_through(tmp_path, embedder, how):
    home, vault = owners_home(tmp_path, embedder)
    assert not mcp_get(home, vault, DIARY).served  # the first use confirms the strict policy
    record = home / "config" / "mcp-policy-confirmed.json"
    policy = home / "config" / "mcp-serve.yaml"
    damage(record, how)
    policy.write_text(LOOSE, encoding="utf-8")  # the file loosened while the record is damaged

    refused = mcp_get(home, vault, DIARY)
    assert not refused.session and DIARY_CANARY not in refused.text, refused.text
    assert f"Error: {record}: the record of the MCP policy you last confirmed" in refused.text
    assert "`cairn policy apply`" in refused.text
    check = cairn(home, "policy", "check")
    assert check.returncode == 1 and f"Error: {record}" in check.stderr and check.stdout == "", check.stderr

    applied = cairn(home, "policy", "apply")  # the owner looked at the file and confirms it: repaired
    assert applied.returncode == 0, applied.stderr
    served = mcp_get(home, vault, DIARY)
    assert served.served and DIARY_CANARY in served.text, served.text


def test_the_daemon_fails_closed_when_the_confirmed_record_is_damaged_while_it_runs(tmp_path):
    from cairn.policy_file import apply_policy, confirmed_record_path
    from cairn.policy_live import PolicyHolder

    policy = tmp_path / "mcp-serve.yaml"
    policy.write_text(STRICT, encoding="utf-8")
    holder = PolicyHolder(policy, strict=False, check_interval_s=0.0, settle_s=0.2)
    assert holder.current().fail_closed_reason is None
    record = confirmed_record_path(policy)
    damage(record, "broken")
    assert str(record) in (holder.reload().fail_closed_reason or "")
    apply_policy(policy)
    assert holder.reload().fail_closed_reason is None and holder.current().withhold.tags == ("personal",)


def test_a_brand_new_install_with_a_policy_of_its_own_works_at_once(tmp_path, embedder):
    """No record yet, anywhere: the policy the owner wrote is the one confirmed on the first use."""
    home, vault = owners_home(tmp_path, embedder, policy=LOOSE)
    assert not (home / "config" / "mcp-policy-confirmed.json").exists()
    first = mcp_get(home, vault, DIARY)
    assert first.served and DIARY_CANARY in first.text, first.text
    assert (home / "config" / "mcp-policy-confirmed.json").exists()
    assert cairn(home, "policy", "check").returncode == 0

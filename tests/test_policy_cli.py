"""``cairn policy check [FILE]`` through the real console script (subprocesses): ``ok: FILE`` and exit 0,
or ``Error: FILE:LINE: reason`` on stderr and exit 1; without FILE, the owner's copy in the config
folder (created from the shipped default on first use)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from cairn.policy import default_policy_text
from support.cli import run_cairn

pytestmark = pytest.mark.slow  # a `cairn` subprocess per call


def test_without_a_file_the_owners_copy_is_created_from_the_default_and_checked(tmp_path):
    owner = tmp_path / "config" / "mcp-serve.yaml"
    assert not owner.exists()
    proc = run_cairn(tmp_path, "policy", "check")
    assert proc.stdout == f"ok: {owner}\n"
    assert owner.read_text(encoding="utf-8") == default_policy_text()
    assert stat.S_IMODE(owner.stat().st_mode) == 0o600


def test_the_owners_edited_copy_is_checked_not_replaced(tmp_path):
    owner = tmp_path / "config" / "mcp-serve.yaml"
    owner.parent.mkdir(parents=True, mode=0o700)  # private, as Cairn keeps it: no "made private" warning first
    owner.write_text(
        default_policy_text().replace("my-local-agent: {local: true", "my-local-agent: {local: yes please"),
        encoding="utf-8",
    )
    owner.chmod(0o600)
    proc = run_cairn(tmp_path, "policy", "check", check=False)
    line = next(i for i, text in enumerate(owner.read_text().splitlines(), 1) if "yes please" in text)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith(f"Error: {owner}:{line}: clients.my-local-agent.local must be true or false")
    assert "yes please" in owner.read_text(encoding="utf-8")


def test_a_valid_file_prints_ok_and_exits_0(tmp_path):
    proc = run_cairn(
        tmp_path, "policy", "check", str(Path(__file__).resolve().parents[1] / "governance" / "mcp-serve.yaml")
    )
    assert proc.stdout.startswith("ok: ") and proc.stdout.strip().endswith("governance/mcp-serve.yaml")


def test_an_invalid_file_names_the_file_the_line_and_the_reason_and_exits_1(tmp_path):
    bad = tmp_path / "team policy.yaml"
    bad.write_text(
        "version: 1\nwithhold: {tags: [personal]}\nclients:\n  claude-desktop:\n"
        "    local: false\n    tools: [search_notes, fetch_everything]\n",
        encoding="utf-8",
    )
    proc = run_cairn(tmp_path, "policy", "check", str(bad), check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (
        f"Error: {bad}:6: clients.claude-desktop.tools[1]: unknown tool 'fetch_everything'; "
        "expected one of: search_notes, get_note, get_related_notes, list_notes, ask\n"
    )


def test_a_newer_policy_version_is_refused_with_its_line(tmp_path):
    newer = tmp_path / "p.yaml"
    newer.write_text("# from the future\nversion: 7\nwithhold: {tags: [personal]}\nsandbox: strict\n", encoding="utf-8")
    proc = run_cairn(tmp_path, "policy", "check", str(newer), check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"Error: {newer}:2: policy version 7 is newer than this Cairn understands")


def test_a_missing_file_is_an_error_naming_it(tmp_path):
    missing = tmp_path / "nope.yaml"
    proc = run_cairn(tmp_path, "policy", "check", str(missing), check=False)
    assert proc.returncode == 1 and proc.stderr.startswith(f"Error: {missing}: no policy file here")
    assert not missing.exists()


def test_policy_without_an_action_is_a_usage_error(tmp_path):
    proc = run_cairn(tmp_path, "policy", check=False)
    assert proc.returncode == 2 and "check" in proc.stderr


def test_without_a_file_the_configured_mcp_policy_is_checked(tmp_path):
    policy = tmp_path / "team" / "policy.yaml"
    policy.parent.mkdir()
    policy.write_text("version: 1\nwithhold: {tags: [personal]}\naudit: {enabled: maybe}\n", encoding="utf-8")
    config = tmp_path / "cairn.toml"
    config.write_text(f'mcp_policy = "{policy}"\n', encoding="utf-8")
    proc = run_cairn(tmp_path, "policy", "check", "--config", str(config), check=False)
    assert proc.returncode == 1 and proc.stderr.startswith(f"Error: {policy}:3: audit.enabled must be true or false")
    assert not (tmp_path / "config" / "mcp-serve.yaml").exists()

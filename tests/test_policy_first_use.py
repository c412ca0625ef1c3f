"""A deleted policy is never silently replaced by the shipped default, through the real
``cairn`` console script: the policy is created only on the true first use and recorded in the data folder;
once created (or found, on an existing install), a missing policy keeps ``cairn mcp`` at exit 1 and the daemon's
holder failed closed, until the owner restores it or runs ``cairn policy init``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cairn.policy import default_policy_text
from support.cairns import build_index, make_config
from support.cli import cairn_env, cairn_executable
from support.mcp_client import make_home
from support.vaults import CANARY_VAULT

pytestmark = pytest.mark.e2e  # `cairn` subprocesses over a real index


@pytest.fixture
def indexed_home(tmp_path, embedder) -> Path:
    """An existing install: the owner's policy (withholding the Private folder) and the canary vault's index."""

    home = make_home(tmp_path)
    build_index(CANARY_VAULT, home / "data", embedder, config_dir=home / "config")
    return home


def cairn_mcp(home: Path) -> subprocess.CompletedProcess:
    """``cairn mcp`` as an agent launches it; stdin at EOF, so a working server exits 0 at once."""
    return subprocess.run(
        [cairn_executable(), "mcp", "--vault", str(CANARY_VAULT), "--client", "claude-desktop"],
        env=cairn_env(home),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_a_deleted_policy_stays_missing_and_cairn_mcp_exits_1_saying_so(indexed_home):
    from cairn.policy_live import daemon_policy

    home = indexed_home
    policy = home / "config" / "mcp-serve.yaml"
    owners = policy.read_text(encoding="utf-8")
    assert "Private" in owners and owners != default_policy_text()
    first = cairn_mcp(home)
    assert first.returncode == 0, first.stderr  # the owner's policy in place: served

    policy.unlink()
    again = cairn_mcp(home)
    assert again.returncode == 1, again.stderr
    assert again.stdout == ""
    assert f"Error: {policy}: the policy file is gone" in again.stderr
    assert "cairn policy init" in again.stderr
    assert not policy.exists()  # not replaced by the shipped default (which does not withhold Private/)

    # everywhere: the daemon's holder stays failed closed, and `cairn policy check` says so too
    config = make_config(CANARY_VAULT, home / "data").replace(config_dir=home / "config")
    assert daemon_policy(config).current().fail_closed_reason
    check = subprocess.run(
        [cairn_executable(), "policy", "check"], env=cairn_env(home), capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 1 and "the policy file is gone" in check.stderr and not policy.exists()

    # the owner starts again from the default on purpose
    init = subprocess.run(
        [cairn_executable(), "policy", "init"], env=cairn_env(home), capture_output=True, text=True, timeout=60
    )
    assert init.returncode == 0, init.stderr
    assert policy.read_text(encoding="utf-8") == default_policy_text()
    assert cairn_mcp(home).returncode == 0


def test_cairn_policy_init_never_overwrites_a_policy(tmp_path):
    home = make_home(tmp_path)
    policy = home / "config" / "mcp-serve.yaml"
    before = policy.read_text(encoding="utf-8")
    init = subprocess.run(
        [cairn_executable(), "policy", "init"], env=cairn_env(home), capture_output=True, text=True, timeout=60
    )
    assert init.returncode == 1 and f"{policy} already exists" in init.stderr
    assert policy.read_text(encoding="utf-8") == before

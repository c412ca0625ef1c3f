"""Which policy governs a vault: recorded beside its index by the commands that build it, checked by the daemon,
and re-pointed only by the owner (``cairn policy apply --vault``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cairns import opened_cairn
from support.cli import cairn_env, cairn_executable
from support.mcp_client import POLICY
from support.vaults import CANARY_VAULT


def config_for(base: Path):
    from cairn.config import load_config

    (base / "config").mkdir(parents=True, exist_ok=True)
    (base / "config" / "mcp-serve.yaml").write_text(POLICY, encoding="utf-8")
    return load_config(
        {"vault": str(CANARY_VAULT), "config_dir": str(base / "config"), "data_dir": str(base / "data")}, env={}
    )


def open_index(config, embedder, *, index: bool = False) -> None:
    """What `cairn index` (``index``) or any command that opens the index for writing does."""
    with opened_cairn(config.vault, config.data_dir, embedder, config_dir=config.config_dir) as cairn:
        if index:
            cairn.indexing.index()


def test_the_index_records_its_policy_and_a_daemon_reading_another_fails_closed_naming_the_env(tmp_path, embedder):
    from cairn.policy_live import daemon_policy
    from cairn.policy_vault import vault_policy_record_path

    owners = config_for(tmp_path / "owner")
    open_index(owners, embedder)
    record = json.loads(vault_policy_record_path(owners).read_text(encoding="utf-8"))
    assert record["policy"] == str(tmp_path / "owner" / "config" / "mcp-serve.yaml")
    assert daemon_policy(owners).current().fail_closed_reason is None

    other = owners.replace(config_dir=tmp_path / "other-config")  # the same index, another config folder
    open_index(other, embedder)  # building it again never re-points it
    closed = daemon_policy(other).current()
    assert closed.fail_closed_reason and f'"CAIRN_CONFIG_DIR": "{owners.config_dir}"' in closed.fail_closed_reason
    assert not (tmp_path / "other-config" / "mcp-serve.yaml").exists()


@pytest.mark.slow  # `cairn` subprocesses
def test_cairn_policy_apply_with_a_vault_re_points_it_to_the_policy_in_use(tmp_path, embedder):
    import subprocess

    old = config_for(tmp_path / "old")
    open_index(old, embedder, index=True)
    new_config = tmp_path / "new" / "config"
    new_config.mkdir(parents=True)
    (new_config / "mcp-serve.yaml").write_text(POLICY, encoding="utf-8")
    env = {**cairn_env(tmp_path / "old"), "CAIRN_CONFIG_DIR": str(new_config)}

    def cairn(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [cairn_executable(), *args, "--vault", str(CANARY_VAULT)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    refused = cairn("mcp")
    assert refused.returncode == 1 and "cairn policy apply --vault" in refused.stderr, refused.stderr
    applied = cairn("policy", "apply")
    assert applied.returncode == 0 and f"It governs {CANARY_VAULT}" in applied.stdout, applied.stderr
    served = cairn("mcp")
    assert served.returncode == 0, served.stderr

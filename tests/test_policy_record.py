"""Where "Cairn created this policy" is kept, how the policy is created, and a policy that is a dangling link,
through the real ``cairn`` console script and real files.

The record lives beside the policy (the config folder), so a command run with another data folder, or after the
data folder was deleted, still knows the policy existed and never writes the shipped default in its place. The
policy appears whole (temp file + hard link): a second process never reads it empty. A policy that is a link
to a missing file is named as such, by ``cairn mcp`` and by ``cairn policy init``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from cairn.policy import default_policy_text
from support.cli import cairn_env, cairn_executable, run_cairn
from support.vaults import CANARY_VAULT

pytestmark = pytest.mark.slow  # `cairn` subprocesses


def created_then_deleted(home: Path) -> Path:
    """The true first use (`cairn policy check` creates the default), then the owner deletes the policy."""
    first = run_cairn(home, "policy", "check")
    policy = home / "config" / "mcp-serve.yaml"
    assert first.stdout == f"ok: {policy}\n"
    policy.unlink()
    return policy


def test_another_data_folder_never_recreates_a_deleted_policy(tmp_path):
    home = tmp_path / "home"
    policy = created_then_deleted(home)
    other = tmp_path / "other-data"
    flag = run_cairn(home, "--data-dir", str(other), "policy", "check", check=False)
    assert flag.returncode == 1 and "the policy file is gone" in flag.stderr, flag.stderr
    assert not policy.exists()

    env = {**cairn_env(home), "CAIRN_DATA_DIR": str(tmp_path / "env-data")}
    by_env = subprocess.run(
        [cairn_executable(), "policy", "check"], env=env, capture_output=True, text=True, timeout=60
    )
    assert by_env.returncode == 1 and "the policy file is gone" in by_env.stderr, by_env.stderr
    assert not policy.exists()


def test_a_deleted_data_folder_never_recreates_a_deleted_policy(tmp_path):
    home = tmp_path / "home"
    policy = created_then_deleted(home)
    shutil.rmtree(home / "data", ignore_errors=True)
    again = run_cairn(home, "policy", "check", check=False)
    assert again.returncode == 1 and "the policy file is gone" in again.stderr, again.stderr
    assert not policy.exists()


def test_an_older_record_in_the_data_folder_still_counts(tmp_path):
    from cairn.errors import CairnError
    from cairn.policy_file import ensure_owner_policy, owner_policy_path

    config, data = tmp_path / "config", tmp_path / "data"
    data.mkdir()
    record = {str(owner_policy_path(config)): "2026-01-01T00:00:00+00:00"}
    (data / "mcp-policy-created.json").write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(CairnError, match="the policy file is gone"):
        ensure_owner_policy(config, data)
    assert not owner_policy_path(config).exists()


def test_a_second_process_never_reads_the_policy_empty_while_it_is_created(tmp_path, monkeypatch):
    """At the moment the first process produces the default's text, a second one reading the path must find
    either nothing or the whole policy: never an empty (or partial) file."""
    import cairn.policy_file as policy_file

    path = tmp_path / "config" / "mcp-serve.yaml"
    seen: list[bytes | None] = []
    real = policy_file.default_policy_text

    def text_while_racing() -> str:
        seen.append(path.read_bytes() if path.exists() else None)  # what a racing reader finds now
        return real()

    monkeypatch.setattr(policy_file, "default_policy_text", text_while_racing)
    assert policy_file.create_policy(path, tmp_path / "data")
    assert seen and all(s is None or s == real().encode() for s in seen), f"a reader saw {seen!r}"
    assert path.read_text(encoding="utf-8") == real()
    assert not [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert not policy_file.create_policy(path, tmp_path / "data")  # never overwrites


def test_a_policy_that_is_a_dangling_link_is_named_as_such(tmp_path):
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    target = home / "elsewhere" / "my-policy.yaml"
    link = home / "config" / "mcp-serve.yaml"
    link.symlink_to(target)
    words = f"a link to {target}, which is missing"

    mcp = subprocess.run(
        [cairn_executable(), "mcp", "--vault", str(CANARY_VAULT), "--client", "claude-desktop"],
        env=cairn_env(home),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert mcp.returncode == 1 and words in mcp.stderr, mcp.stderr
    assert "cairn policy init" not in mcp.stderr

    init = run_cairn(home, "policy", "init", check=False)
    assert init.returncode == 1 and words in init.stderr, init.stderr
    assert "already exists" not in init.stderr
    assert link.is_symlink() and not target.exists()
    assert default_policy_text()  # the shipped default was not written through the link

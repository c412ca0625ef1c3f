"""What a new user is told by the real ``cairn`` console script (subprocesses): policy mistakes named on stderr
with the line to add, the keyring notice once (and right when the file is chosen), a folder with no notes, an
empty index, ``index --full`` with nothing changed, a model URL without a model name."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.cli import run_cairn
from support.vaults import small_vault

pytestmark = pytest.mark.slow  # a `cairn` subprocess per call


def mcp_stdio(home: Path, vault: Path, *args: str) -> subprocess.CompletedProcess:
    """``cairn mcp`` over stdio with stdin at EOF: it starts, says what it serves on stderr, and exits."""
    return run_cairn(home, "mcp", "--vault", str(vault), *args, stdin=subprocess.DEVNULL)


# -- item 6: policy mistakes are named ----------------------------------------------------


def test_a_tool_the_policy_does_not_give_the_client_is_named_with_the_line_to_write(tmp_path):
    vault = small_vault(tmp_path)
    run_cairn(tmp_path, "index", "--vault", str(vault))
    policy = tmp_path / "config" / "mcp-serve.yaml"
    proc = mcp_stdio(tmp_path, vault, "--client", "claude-desktop", "--tool", "ask")
    warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, proc.stderr
    assert "'claude-desktop'" in warnings[0] and "'ask'" in warnings[0] and str(policy) in warnings[0]
    line = "claude-desktop: {local: false, tools: [search_notes, get_note, get_related_notes, list_notes, ask]}"
    assert warnings[0].endswith(line)
    assert proc.stdout == ""  # the protocol's channel stays clean


def test_a_client_the_policy_does_not_declare_is_named_with_the_line_to_add(tmp_path):
    vault = small_vault(tmp_path)
    run_cairn(tmp_path, "index", "--vault", str(vault))
    policy = tmp_path / "config" / "mcp-serve.yaml"
    proc = run_cairn(tmp_path, "mcp", "token", "not-in-policy")
    assert len(proc.stdout.strip()) >= 40  # the token itself, alone on stdout
    assert proc.stderr.startswith("Warning: MCP client 'not-in-policy' is not declared in the policy ")
    assert str(policy) in proc.stderr and proc.stderr.rstrip().endswith("not-in-policy: {local: false, tools: []}")
    proc = mcp_stdio(tmp_path, vault, "--client", "not-in-policy", "--tool", "search_notes")
    assert "so search_notes is not served" in proc.stderr
    assert "not-in-policy: {local: false, tools: [search_notes]}" in proc.stderr


def test_a_declared_client_with_its_tools_gets_no_warning(tmp_path):
    vault = small_vault(tmp_path)
    run_cairn(tmp_path, "index", "--vault", str(vault))
    proc = mcp_stdio(tmp_path, vault, "--client", "claude-desktop", "--tool", "search_notes")
    assert "WARNING" not in proc.stderr
    proc = run_cairn(tmp_path, "mcp", "token", "claude-desktop")
    assert "Warning" not in proc.stderr


# -- item 9: the keyring notice -------------------------------------------------------------

NO_KEYRING = {"CAIRN_KEYRING": "auto", "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}


def test_the_keyring_warning_is_shown_once_not_on_every_call(tmp_path):
    vault = {"CAIRN_VAULT": str(tmp_path)}
    first = run_cairn(tmp_path, "token", env={**NO_KEYRING, **vault})
    assert "not in the OS keyring" in first.stderr and "Install a keyring backend" in first.stderr
    for _ in range(2):
        again = run_cairn(tmp_path, "token", env={**NO_KEYRING, **vault})
        assert again.stdout == first.stdout and again.stderr == ""


def test_with_keyring_file_chosen_nothing_asks_to_install_a_keyring(tmp_path):
    proc = run_cairn(tmp_path, "token", env={"CAIRN_KEYRING": "file", "CAIRN_VAULT": str(tmp_path)})
    assert proc.stderr == ""
    proc = run_cairn(tmp_path, "--debug", "token", env={"CAIRN_KEYRING": "file", "CAIRN_VAULT": str(tmp_path)})
    assert 'as keyring = "file" asks' in proc.stderr and "Install" not in proc.stderr


# -- item 8: a folder with no notes; item 9: --full with nothing changed -----------------------------


def test_indexing_a_folder_without_notes_warns_and_search_says_the_index_is_empty(tmp_path):
    downloads = tmp_path / "Downloads"
    downloads.mkdir()
    (downloads / "invoice.txt").write_text("garlic invoice\n", encoding="utf-8")
    proc = run_cairn(tmp_path, "index", "--vault", str(downloads))
    assert f"Warning: no Markdown notes found in {str(downloads)!r} (and no .obsidian folder)" in proc.stderr
    assert "is this your vault?" in proc.stderr
    proc = run_cairn(tmp_path, "search", "--vault", str(downloads), "garlic")
    assert proc.stdout.startswith("The index is empty: no Markdown notes were found in ")
    assert "No note holds" not in proc.stdout
    proc = run_cairn(tmp_path, "ask", "--vault", str(downloads), "How deep do I plant garlic?")
    assert "The index is empty" in proc.stderr


def test_a_vault_with_notes_gets_no_such_warning_and_a_miss_is_a_plain_no_results(tmp_path):
    vault = small_vault(tmp_path)
    proc = run_cairn(tmp_path, "index", "--vault", str(vault))
    assert "Warning" not in proc.stderr
    proc = run_cairn(tmp_path, "search", "--vault", str(vault), "xylophone quasar")
    assert proc.stdout.strip() == "No note holds these words or comes close to them in meaning."


def test_index_full_with_nothing_changed_reports_every_note_unchanged(tmp_path):
    vault = small_vault(tmp_path)
    run_cairn(tmp_path, "index", "--vault", str(vault))
    proc = run_cairn(tmp_path, "index", "--full", "--vault", str(vault))
    assert "2 files scanned — 0 added, 0 updated, 2 unchanged, 0 removed" in proc.stdout
    (vault / "Boiler.md").write_text("# Boiler\n\nThe boiler pressure sits at 1.5 bar now.\n", encoding="utf-8")
    proc = run_cairn(tmp_path, "index", "--full", "--vault", str(vault))
    assert "0 added, 1 updated, 1 unchanged" in proc.stdout

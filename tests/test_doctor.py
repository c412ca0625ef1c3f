"""``cairn doctor``: each check's pass and fail line, with its fix, on real files: a real vault indexed with the real
model, ``cairn plugin install``, a running ``cairn serve`` and none (and one killed, its record left behind), a
policy edit waiting for ``cairn policy apply``, login entries written by ``cairn autostart enable``, MCP clients'
config files where docs/mcp.md says to put Cairn, and the tray backend on a real X server (Xvfb).

Every run is the real ``cairn doctor`` in a subprocess whose every folder (Cairn's, HOME, XDG_CONFIG_HOME) is inside
the test's home, never the user's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import tray as tray_harness
from support.cairns import make_config
from support.cli import cairn_env, cairn_executable
from support.daemons import Daemon, running_daemon
from support.tray import with_gi

xvfb = tray_harness.xvfb  # the fixtures: a private X display (skipped without Xvfb),
session_bus = tray_harness.session_bus  # a D-Bus session bus of its own,
system_gi = tray_harness.system_gi  # the distribution's PyGObject on a PYTHONPATH entry of its own

NOTES = {
    "Garden/Garlic.md": "# Garlic\n\nPlant the cloves 5 cm deep in October.\n",
    "Kitchen/Bread.md": "---\ntags: [kitchen]\n---\n# Bread\n\nA sourdough loaf at 75% hydration.\n",
    "Private/Diary.md": "---\ntags: [personal]\n---\n# Diary\n\nA withheld note.\n",
}
TIMEOUT_S = 180


def env_of(home: Path, **more: str) -> dict[str, str]:
    """Cairn's folders, HOME and XDG_CONFIG_HOME all inside ``home``; no display, no forced tray backend."""
    env = {k: v for k, v in cairn_env(home).items() if not k.startswith(("PYSTRAY_", "XDG_", "DBUS_"))}
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    env.update({"HOME": str(home / "h"), "XDG_CONFIG_HOME": str(home / "h" / ".config"), **more})
    return env


def cairn(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [cairn_executable(), *args],
        env=env_of(home, **env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


def doctor(home: Path, vault: Path | None, **env: str) -> tuple[int, dict[str, list[dict]], str]:
    """``cairn doctor --json`` → (exit status, {check name: its lines}, the plain report of a second run)."""
    where = ["--vault", str(vault)] if vault is not None else []
    proc = cairn(home, "doctor", "--json", *where, **env)
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] == (proc.returncode == 0)
    checks: dict[str, list[dict]] = {}
    for check in data["checks"]:
        checks.setdefault(check["name"], []).append(check)
    plain = cairn(home, "doctor", *where, **env)
    assert plain.returncode == proc.returncode, plain.stderr
    return proc.returncode, checks, plain.stdout


def only(checks: dict[str, list[dict]], name: str) -> dict:
    assert len(checks[name]) == 1, checks[name]
    return checks[name][0]


def make_vault(base: Path, *, obsidian: bool = True) -> Path:
    vault = base / "vault"
    for rel, text in NOTES.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(text, encoding="utf-8")
    if obsidian:
        (vault / ".obsidian").mkdir()
    return vault


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> tuple[Path, Path]:
    """(home, vault): a small Obsidian vault indexed by ``cairn index`` into the home's folders."""
    home = tmp_path_factory.mktemp("doctor")
    vault = make_vault(home)
    proc = cairn(home, "index", "--vault", str(vault))
    assert proc.returncode == 0, proc.stderr
    return home, vault


@pytest.fixture(scope="module")
def daemon(indexed) -> Iterator[Daemon]:
    home, vault = indexed
    with running_daemon(home, vault) as d:
        yield d


# -- the vault and the daemon ---------------------------------------------------------------------------


def test_a_folder_that_is_no_obsidian_vault_fails_and_says_to_open_it_in_obsidian(tmp_path):
    vault = make_vault(tmp_path, obsidian=False)
    code, checks, plain = doctor(tmp_path, vault)
    line = only(checks, "vault")
    assert (code, line["status"], line["fix"]) == (1, "fail", "open it in Obsidian once")
    assert "not an Obsidian vault" in line["text"]
    assert f"FAIL  vault      {vault} has no .obsidian folder" in plain


def test_with_no_daemon_the_daemon_fails_with_the_command_that_starts_it(indexed):
    home, vault = indexed
    code, checks, plain = doctor(home, vault)
    line = only(checks, "daemon")
    assert (code, line["status"]) == (1, "fail")
    assert line["text"] == f"not running for {vault}"
    assert line["fix"].startswith(f"{cairn_executable()} serve --vault {vault}")
    assert only(checks, "vault") == {"name": "vault", "status": "ok", "text": f"{vault}: 3 notes indexed", "fix": None}
    assert "FAIL  daemon     not running for" in plain and " — fix: " in plain


def test_a_record_left_by_a_killed_daemon_is_named_as_stale(indexed):
    home, vault = indexed
    config = make_config(vault, home / "data")
    record = config.service_file
    record.write_text(
        json.dumps({"port": 1, "pid": 2**22 + 12345, "url": "http://127.0.0.1:1", "vault": str(vault)}), "utf-8"
    )
    try:
        _, checks, _ = doctor(home, vault)
    finally:
        record.unlink()
    line = only(checks, "daemon")
    assert line["status"] == "fail"
    assert (
        f"a stale record was ignored: {record.name} names pid {2**22 + 12345}, which is no longer running"
        in line["text"]
    )


# -- the plugin, with the daemon running ----------------------------------------------------------------


def test_the_plugin_fails_until_installed_then_its_token_opens_the_running_daemon(indexed, daemon):
    home, vault = indexed
    code, checks, _ = doctor(home, vault)
    assert only(checks, "daemon")["status"] == "ok" and daemon.url in only(checks, "daemon")["text"]
    line = only(checks, "plugin")
    assert (code, line["status"]) == (1, "fail")
    assert line["text"] == f"not installed in {vault / '.obsidian' / 'plugins' / 'cairn'}"
    assert line["fix"] == f"{cairn_executable()} plugin install --vault {vault}"

    assert cairn(home, "plugin", "install", "--vault", str(vault)).returncode == 0
    code, checks, _ = doctor(home, vault)
    lines = {c["status"]: c for c in checks["plugin"]}
    assert lines["ok"]["text"].endswith(f"its token opens the daemon at {daemon.url}")
    assert lines["warn"]["text"] == "installed but not turned on in Obsidian"
    assert code == 0  # ok, warnings and information only: nothing fails

    (vault / ".obsidian" / "community-plugins.json").write_text('["cairn"]', encoding="utf-8")
    _, checks, plain = doctor(home, vault)
    assert [c["status"] for c in checks["plugin"]] == ["ok"]
    assert "ok    plugin     installed in" in plain


def test_a_rotated_token_fails_the_plugin_until_it_is_installed_again(indexed, daemon):
    home, vault = indexed
    assert cairn(home, "plugin", "install", "--vault", str(vault)).returncode == 0
    assert cairn(home, "token", "--rotate", "--vault", str(vault)).returncode == 0
    try:
        code, checks, _ = doctor(home, vault)
        line = next(c for c in checks["plugin"] if c["status"] != "ok")
        assert (code, line["status"]) == (1, "fail")
        assert "its token will be refused: it is not this vault's token" in line["text"]
        assert line["fix"] == f"{cairn_executable()} plugin install --vault {vault}"
        status, _, _ = daemon.request("GET", "/index/stats", token=_plugin_token(vault))
        assert status == 401  # what the doctor foretold, seen from the daemon
    finally:
        assert cairn(home, "plugin", "install", "--vault", str(vault)).returncode == 0


def _plugin_token(vault: Path) -> str:
    return json.loads((vault / ".obsidian" / "plugins" / "cairn" / "data.json").read_text("utf-8"))["token"]


def test_a_daemon_that_refuses_obsidians_origin_fails_the_plugins_real_request(tmp_path):
    vault = make_vault(tmp_path)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.toml").write_text('cors_origins = ["app://elsewhere.example"]\n', "utf-8")
    assert cairn(tmp_path, "plugin", "install", "--vault", str(vault)).returncode == 0
    with running_daemon(tmp_path, vault) as d:
        _, checks, _ = doctor(tmp_path, vault)
        line = next(c for c in checks["plugin"] if c["status"] == "fail")
    assert line["text"] == f"its token was tried at {d.url}: the daemon refuses Obsidian's origin app://obsidian.md"
    assert line["fix"].startswith('keep "app://obsidian.md" in cors_origins')


# -- keyring, autostart, policy ---------------------------------------------------------------------------


def test_the_keyring_line_says_where_the_tokens_are_and_fails_when_required_but_absent(indexed):
    home, vault = indexed
    _, checks, _ = doctor(home, vault)  # CAIRN_KEYRING=file, as the tests run
    line = only(checks, "keyring")
    assert (line["status"], line["text"]) == (
        "ok",
        f'tokens in 0600 files in {home / "config" / "api-tokens"}, as keyring = "file" asks',
    )
    # No OS keyring backend in this venv (keyring's fail backend): required refuses, auto falls back with a warning.
    backend = "keyring.backends.fail.Keyring"
    code, checks, _ = doctor(home, vault, CAIRN_KEYRING="required", PYTHON_KEYRING_BACKEND=backend)
    line = only(checks, "keyring")
    assert (code, line["status"]) == (1, "fail") and 'keyring = "required" but no OS keyring backend' in line["text"]
    _, checks, _ = doctor(home, vault, CAIRN_KEYRING="auto", PYTHON_KEYRING_BACKEND=backend)
    line = only(checks, "keyring")
    assert line["status"] == "warn" and line["text"].startswith("no OS keyring backend: tokens are kept in 0600 files")


def test_autostart_is_off_then_on_then_broken_when_its_enabling_link_goes(indexed):
    home, vault = indexed
    _, checks, _ = doctor(home, vault)
    line = only(checks, "autostart")
    assert (line["status"], line["fix"]) == ("warn", f"{cairn_executable()} autostart enable --vault {vault}")
    assert cairn(home, "autostart", "enable", "--vault", str(vault)).returncode == 0
    try:
        _, checks, _ = doctor(home, vault)
        line = only(checks, "autostart")
        assert line["status"] == "ok" and line["text"].startswith("on: ") and line["text"].endswith("at login")
        wants = home / "h" / ".config" / "systemd" / "user" / "default.target.wants"
        for link in wants.iterdir():
            link.unlink()
        code, checks, _ = doctor(home, vault)
        line = only(checks, "autostart")
        assert (line["status"], line["fix"]) == ("fail", f"{cairn_executable()} autostart enable --vault {vault}")
        assert line["text"].endswith("is there but not enabled")
    finally:
        assert cairn(home, "autostart", "disable").returncode == 0


def test_the_policy_line_names_what_it_withholds_and_what_waits_for_apply(tmp_path):
    vault = make_vault(tmp_path)
    _, checks, _ = doctor(tmp_path, vault)  # the first use: the shipped default, confirmed as it is
    policy = tmp_path / "config" / "mcp-serve.yaml"
    line = only(checks, "policy")
    assert line["status"] == "ok"
    assert line["text"] == f"{policy} withholds tag personal from clients not declared local; local: my-local-agent"

    policy.write_text(policy.read_text("utf-8").replace("tags: [personal]", "tags: []"), "utf-8")  # withholds less
    code, checks, _ = doctor(tmp_path, vault)
    line = only(checks, "policy")
    assert line["status"] == "warn" and line["fix"] == f"{cairn_executable()} policy apply"
    assert (
        f"Not in force yet: {policy} withholds less than the policy you last confirmed (tag personal)" in line["text"]
    )

    policy.write_text("version: 1\nwithhold: {tags: personal\n", "utf-8")
    code, checks, _ = doctor(tmp_path, vault)
    line = only(checks, "policy")
    assert (code, line["status"]) == (1, "fail") and line["text"].startswith(f"{policy}:")

    assert cairn(tmp_path, "policy", "init").returncode == 1  # never overwritten: put the default back by hand
    shutil.copy(Path(__file__).resolve().parents[1] / "governance" / "mcp-serve.yaml", policy)
    assert cairn(tmp_path, "policy", "apply").returncode == 0
    _, checks, _ = doctor(tmp_path, vault)
    assert only(checks, "policy")["status"] == "ok"


# -- the MCP clients' configs -------------------------------------------------------------------------------


def claude_desktop_config(home: Path, servers: dict) -> Path:
    path = home / "h" / ".config" / "Claude" / "claude_desktop_config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def test_an_mcp_entry_as_the_readme_writes_it_passes_and_each_mistake_fails_with_its_fix(indexed):
    home, vault = indexed
    _, checks, _ = doctor(home, vault)
    assert [c["status"] for c in checks["mcp"]] == ["info"]  # no agent set up: nothing to check
    args = ["mcp", "--vault", str(vault), "--client", "claude-desktop", "--tool", "search_notes"]
    folders = {"CAIRN_CONFIG_DIR": str(home / "config"), "CAIRN_DATA_DIR": str(home / "data")}
    path = claude_desktop_config(home, {"cairn": {"command": cairn_executable(), "args": args, "env": folders}})
    try:
        _, checks, plain = doctor(home, vault)
        line = only(checks, "mcp")
        assert line["status"] == "ok", line
        assert line["text"] == f"Claude Desktop 'cairn' ({path}): `cairn mcp` for {vault}; as the client claude-desktop"

        claude_desktop_config(home, {"cairn": {"command": "cairn", "args": args}})  # by name, and no env
        code, checks, _ = doctor(home, vault)
        lines = {c["text"].split(": ", 1)[1]: c for c in checks["mcp"]}
        assert code == 1 and all(c["status"] == "fail" for c in lines.values()), lines
        by_name = next(c for t, c in lines.items() if t.startswith("runs 'cairn' by name"))
        assert "a desktop app does not read your shell's PATH" in by_name["text"]
        folders_line = next(c for t, c in lines.items() if "not this shell's folders" in t)
        assert json.loads(folders_line["fix"].removeprefix('"env": ')) == folders

        claude_desktop_config(home, {"notes": {"command": cairn_executable(), "args": ["mcp"], "env": folders}})
        _, checks, _ = doctor(home, vault)
        line = only(checks, "mcp")
        assert (line["status"], line["fix"]) == ("fail", 'add "--vault", "/path/to/vault" to its args')

        undeclared = [*args[:3], "--client", "my-agent"]
        claude_desktop_config(home, {"cairn": {"command": cairn_executable(), "args": undeclared, "env": folders}})
        _, checks, _ = doctor(home, vault)
        line = only(checks, "mcp")
        assert line["status"] == "warn" and "MCP client 'my-agent' is not declared in the policy" in line["text"]
    finally:
        path.unlink()


def test_an_mcp_http_entry_needs_the_running_daemons_url_and_a_clients_token(indexed, daemon):
    home, vault = indexed
    mcp_url = json.loads(cairn(home, "status", "--json", "--vault", str(vault)).stdout)["daemons"][0]["mcpUrl"]
    token = cairn(home, "mcp", "token", "claude-desktop").stdout.strip()
    entry = {"type": "http", "url": mcp_url + "?tool=search_notes", "headers": {"Authorization": f"Bearer {token}"}}
    cursor = home / "h" / ".cursor" / "mcp.json"
    cursor.parent.mkdir(parents=True, exist_ok=True)
    cursor.write_text(json.dumps({"mcpServers": {"cairn": entry}}), encoding="utf-8")
    try:
        _, checks, _ = doctor(home, vault)
        line = only(checks, "mcp")
        assert line["status"] == "ok" and line["text"].endswith(f"serves {entry['url']}; as the client claude-desktop")
        entry["headers"] = {"Authorization": "Bearer not-a-token-cairn-made-000000"}
        cursor.write_text(json.dumps({"mcpServers": {"cairn": entry}}), encoding="utf-8")
        code, checks, _ = doctor(home, vault)
        line = only(checks, "mcp")
        assert (code, line["status"]) == (1, "fail") and "its token is none of the MCP clients'" in line["text"]
    finally:
        cursor.unlink()


# -- the tray, on a real X server -----------------------------------------------------------------------------


def test_the_tray_line_without_a_display_says_the_daemon_runs_without_an_icon(tmp_path):
    _, checks, _ = doctor(tmp_path, None)
    line = only(checks, "tray")
    assert line["status"] == "warn" and line["text"].startswith("no tray icon: no display")


def test_on_x11_without_pygobject_the_tray_has_no_menu_and_the_fix_says_how_to_get_one(tmp_path, xvfb):
    _, checks, _ = doctor(tmp_path, None, DISPLAY=xvfb)
    line = only(checks, "tray")
    assert (line["status"], line["text"]) == ("warn", "pystray's xorg backend shows the icon but no menu")
    assert "python3-gi" in line["fix"] and "--system-site-packages" in line["fix"]


def test_with_the_systems_pygobject_and_a_session_bus_the_tray_has_its_menu(tmp_path, xvfb, system_gi, session_bus):
    env = {"DISPLAY": xvfb, "DBUS_SESSION_BUS_ADDRESS": session_bus}
    env["PYTHONPATH"] = with_gi(dict(os.environ), system_gi)
    _, checks, _ = doctor(tmp_path, None, **env)
    line = only(checks, "tray")
    assert line["status"] == "ok" and line["text"].endswith("backend, with its menu"), line

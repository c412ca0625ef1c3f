"""Start at login: ``cairn autostart enable|disable|status`` and ``cairn paths``.

The generated file of every platform is checked for content here, whatever the platform the tests
run on (systemd user unit, macOS LaunchAgent plist, Windows Startup ``.cmd``). The installer of the
running platform is exercised for real on Linux: the written unit is checked with
``systemd-analyze --user verify`` when it exists, else structurally. HOME, XDG_CONFIG_HOME and
APPDATA point into the test's temp dir, so the real user's folders are never touched.
"""

from __future__ import annotations

import configparser
import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cairn import autostart
from cairn.cli import main
from cairn.config import load_config

ODD_NAME = 'Notes 100% $HOME "quoted" & <tags>'


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fake home: HOME, XDG_CONFIG_HOME and APPDATA inside tmp_path."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(h / ".config"))
    monkeypatch.setenv("APPDATA", str(h / "AppData" / "Roaming"))
    return h


@pytest.fixture
def vault(tmp_path):
    v = tmp_path / "My Vault"
    v.mkdir()
    (v / "Note.md").write_text("# Note\n\nHello.\n", encoding="utf-8")
    return v


def config_for(vault: Path):
    return load_config({"vault": str(vault)})


def unit_sections(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string(text)
    return parser


# -- what each platform's file says (checked on every platform) -------------------------------


def test_the_systemd_unit_runs_cairn_serve_with_the_vault_and_the_current_folders(home, vault):
    config = config_for(vault)
    entry = autostart.render("linux", config, entry_env={"CAIRN_DATA_DIR": "/data/100% cairn"})
    unit = unit_sections(entry.content)
    assert unit.sections() == ["Unit", "Service", "Install"]
    assert unit["Service"]["Type"] == "simple" and unit["Service"]["Restart"] == "on-failure"
    assert unit["Install"]["WantedBy"] == "default.target"
    assert unit["Unit"]["Description"].endswith("the Obsidian vault My Vault")
    assert autostart.command_in("linux", entry.content) == autostart.launch_command(config, "linux")
    assert autostart.command_in("linux", entry.content)[-3:] == ["serve", "--vault", str(vault)]
    assert unit["Service"]["Environment"] == '"CAIRN_DATA_DIR=/data/100%% cairn"'  # %% is systemd's literal %
    name = f"cairn-{autostart.entry_id(vault)}.service"
    assert name.startswith("cairn-My_Vault-")
    assert entry.path == home / ".config" / "systemd" / "user" / name
    assert entry.link == entry.path.parent / "default.target.wants" / name


def test_the_systemd_unit_quotes_odd_vault_names_so_the_argument_survives(home, tmp_path):
    odd = tmp_path / ODD_NAME
    odd.mkdir()
    entry = autostart.render("linux", config_for(odd), entry_env={})
    line = next(ln for ln in entry.content.splitlines() if ln.startswith("ExecStart="))
    assert '100%% $$HOME \\"quoted\\" & <tags>"' in line  # %→%%, $→$$ (no expansion), " escaped
    assert autostart.command_in("linux", entry.content)[-1] == str(odd)
    assert unit_sections(entry.content)["Unit"]["Description"].endswith('vault Notes 100%% $HOME "quoted" & <tags>')
    if autostart.current_platform() == "linux":
        autostart.enable(config_for(odd))
        verify_unit(entry.path, tmp_path)  # systemd itself accepts the quoting


def test_the_launch_agent_plist_runs_cairn_serve_at_login_with_the_vault(home, vault):
    config = config_for(vault)
    entry = autostart.render(
        "macos",
        config,
        argv=["/opt/cairn/bin/cairn", "serve", "--vault", ODD_NAME],
        entry_env={"CAIRN_LOG_DIR": "/logs/<cairn> & co"},
    )
    plist = plistlib.loads(entry.content.encode("utf-8"))
    assert plist["Label"] == f"org.cairn-notes.cairn.{autostart.entry_id(vault)}"
    assert plist["ProgramArguments"] == ["/opt/cairn/bin/cairn", "serve", "--vault", ODD_NAME]
    assert plist["RunAtLoad"] is True and plist["KeepAlive"] == {"SuccessfulExit": False}
    assert plist["EnvironmentVariables"] == {"CAIRN_LOG_DIR": "/logs/<cairn> & co"}
    assert entry.path == home / "Library" / "LaunchAgents" / f"{plist['Label']}.plist" and entry.link is None
    assert autostart.command_in("macos", entry.content) == plist["ProgramArguments"]


def test_the_windows_startup_entry_starts_pythonw_with_the_vault_in_crlf_lines(home, vault):
    config = config_for(vault)
    argv = [r"C:\Python311\pythonw.exe", "-m", "cairn", "serve", "--vault", r"C:\Users\me\100% Vault"]
    entry = autostart.render("windows", config, argv=argv, entry_env={"CAIRN_PORT": "27200"})
    assert entry.content.endswith("\r\n") and "\n" not in entry.content.replace("\r\n", "")
    lines = entry.content.split("\r\n")
    assert lines[0] == "@echo off"
    assert 'set "CAIRN_PORT=27200"' in lines
    assert r'start "Cairn" "C:\Python311\pythonw.exe" "-m" "cairn" "serve" "--vault" "C:\Users\me\100%% Vault"' in lines
    assert autostart.command_in("windows", entry.content) == argv
    assert (
        entry.path
        == home
        / "AppData"
        / "Roaming"
        / "Microsoft"
        / "Windows"
        / "Start Menu"
        / "Programs"
        / "Startup"
        / f"Cairn {autostart.entry_id(vault)}.cmd"
    )


def test_a_windows_argument_with_a_double_quote_is_refused_with_the_value(home, vault):
    from cairn.errors import ConfigError

    with pytest.raises(ConfigError, match="a double quote"):
        autostart.render("windows", config_for(vault), argv=['C:\\x"y.exe'], entry_env={})


def test_the_entry_carries_the_cairn_folders_set_now_and_no_other_variable(home, vault, monkeypatch):
    monkeypatch.setenv("CAIRN_DATA_DIR", "/srv/cairn-data")
    monkeypatch.setenv("CAIRN_LLM_MODEL", "llama")  # config, not a folder: read from config.toml instead
    carried = autostart.carried_env()
    assert carried["CAIRN_DATA_DIR"] == "/srv/cairn-data" and "CAIRN_LLM_MODEL" not in carried
    assert 'Environment="CAIRN_DATA_DIR=/srv/cairn-data"' in autostart.render("linux", config_for(vault)).content


def test_an_unknown_platform_is_an_error_naming_the_known_ones(home, vault):
    from cairn.errors import ConfigError

    with pytest.raises(ConfigError, match="linux, macos, windows"):
        autostart.render("beos", config_for(vault))


# -- installing for real (files in the fake home) -----------------------------------------------


def verify_unit(unit: Path, tmp_path: Path) -> None:
    """``systemd-analyze --user verify`` when present; else the structure systemd needs."""
    analyze = shutil.which("systemd-analyze")
    if analyze:
        runtime = tmp_path / "runtime"
        runtime.mkdir(mode=0o700, exist_ok=True)
        env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
        done = subprocess.run(
            [analyze, "--user", "verify", str(unit)], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert "is not executable" not in done.stderr and "Unknown key" not in done.stderr, done.stderr
        return
    sections = unit_sections(unit.read_text(encoding="utf-8"))
    argv = autostart.command_in("linux", unit.read_text(encoding="utf-8"))
    assert {"Unit", "Service", "Install"} <= set(sections.sections())
    assert argv and Path(argv[0]).is_absolute() and os.access(argv[0], os.X_OK)


@pytest.mark.skipif(autostart.current_platform() != "linux", reason="the Linux installer (systemd user unit)")
def test_enable_installs_a_unit_systemd_accepts_status_reports_it_and_disable_removes_it(home, vault, tmp_path):
    config = config_for(vault)
    assert autostart.status(config)["installed"] is False
    entry = autostart.enable(config)
    unit, link = autostart.entry_path("linux", vault=vault)
    assert entry.path == unit and unit.read_text(encoding="utf-8") == entry.content
    assert link.is_symlink() and link.resolve() == unit.resolve()
    assert oct(unit.stat().st_mode & 0o777) == "0o644"
    verify_unit(unit, tmp_path)
    status = autostart.status(config)
    assert status == {
        "platform": "linux",
        "path": str(unit),
        "installed": True,
        "enabled": True,
        "current": True,
        "command": autostart.launch_command(config),
        "vault": str(vault),
        "entries": [
            {"path": str(unit), "installed": True, "enabled": True, "command": status["command"], "vault": str(vault)}
        ],
    }
    assert sorted(autostart.disable(config)) == sorted([unit, link])
    assert not unit.exists() and not link.is_symlink()
    assert autostart.status(config)["installed"] is False
    assert autostart.disable() == []


def test_systemd_analyze_rejects_a_unit_whose_program_does_not_exist(home, tmp_path):
    """The check above can fail: the same verify on a unit pointing at a missing program does."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed; the structural check is used instead")
    unit = tmp_path / "broken.service"
    unit.write_text('[Service]\nExecStart="/nonexistent/cairn" "serve"\n', encoding="utf-8")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    done = subprocess.run(
        [analyze, "--user", "verify", str(unit)],
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "/nonexistent/cairn" in done.stderr


@pytest.mark.parametrize("platform", ["macos", "windows"])
def test_enable_for_another_platform_writes_its_file_under_the_fake_home(home, vault, platform):
    config = config_for(vault)
    entry = autostart.enable(config, platform=platform)
    assert entry.path.is_relative_to(home)
    with open(entry.path, encoding="utf-8", newline="") as fh:
        assert fh.read() == entry.content
    assert autostart.status(config, platform=platform)["enabled"] is True
    assert autostart.disable(config, platform=platform) == [entry.path]


def test_status_of_another_vault_says_it_has_no_entry_and_lists_the_one_there_is(home, vault, tmp_path):
    autostart.enable(config_for(vault))
    other = tmp_path / "Other vault"
    other.mkdir()
    status = autostart.status(config_for(other))
    assert status["installed"] is False and status["enabled"] is False
    assert [e["vault"] for e in status["entries"]] == [str(vault)]


# -- the CLI -------------------------------------------------------------------------------------


@pytest.mark.skipif(autostart.current_platform() != "linux", reason="prints the systemd hint")
def test_cairn_autostart_enable_status_disable_from_the_command_line(home, vault, capsys):
    assert main(["autostart", "enable", "--vault", str(vault)]) == 0
    out = capsys.readouterr().out
    unit, _ = autostart.entry_path("linux", vault=vault)
    assert f"Start at login enabled: {unit} runs `cairn serve --vault {vault}`." in out
    assert f"systemctl --user start {unit.stem}" in out
    assert main(["autostart", "status"]) == 0
    out = capsys.readouterr().out
    assert f"  enabled      cairn serve --vault {vault}  ({unit})" in out
    assert main(["autostart", "disable"]) == 0
    assert "Start at login disabled: removed" in capsys.readouterr().out and not unit.exists()
    assert main(["autostart", "status"]) == 0
    assert capsys.readouterr().out.startswith("Start at login: disabled")


def test_cairn_autostart_without_an_action_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["autostart", "start"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_cairn_paths_prints_the_config_data_log_and_cache_folders(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("CAIRN_CONFIG_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("CAIRN_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.setenv("CAIRN_LOG_DIR", str(tmp_path / "l"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(["paths"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected_cache = tmp_path / "cache" / "cairn" if sys.platform.startswith("linux") else None
    assert lines[:3] == [f"config: {tmp_path / 'c'}", f"data:   {tmp_path / 'd'}", f"log:    {tmp_path / 'l'}"]
    assert lines[3].startswith("cache:  ") and (expected_cache is None or lines[3] == f"cache:  {expected_cache}")
    assert main(["paths", "--json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["data"] == str(tmp_path / "d")


# -- one entry per vault -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(autostart.current_platform() != "linux", reason="the Linux entries (systemd user units)")
def test_enabling_a_second_vault_keeps_the_first_status_lists_both_and_disable_removes_one(home, tmp_path):
    from support.cli import run_cairn

    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    run_cairn(tmp_path, "autostart", "enable", "--vault", str(a), env=env)
    run_cairn(tmp_path, "autostart", "enable", "--vault", str(b), env=env)
    unit_a, link_a = autostart.entry_path("linux", vault=a)
    unit_b, link_b = autostart.entry_path("linux", vault=b)
    assert unit_a != unit_b and all(p.exists() for p in (unit_a, link_a, unit_b, link_b))
    assert autostart.command_in("linux", unit_a.read_text(encoding="utf-8"))[-1] == str(a)
    out = run_cairn(tmp_path, "autostart", "status", env=env).stdout
    assert "Start at login entries (2):" in out
    assert f"enabled      cairn serve --vault {a}  ({unit_a})" in out
    assert f"enabled      cairn serve --vault {b}  ({unit_b})" in out
    out = run_cairn(tmp_path, "autostart", "disable", "--vault", str(b), env=env).stdout
    assert out.startswith("Start at login disabled: removed ") and str(unit_b) in out
    assert not unit_b.exists() and not link_b.is_symlink() and unit_a.exists() and link_a.is_symlink()
    out = run_cairn(tmp_path, "autostart", "status", "--vault", str(a), env=env).stdout
    assert out.startswith(f"Start at login: enabled for {a} ({unit_a})")
    assert "Start at login entries (1):" in out


def test_an_entry_from_before_entries_were_per_vault_stays_for_its_vault_until_that_vault_is_enabled(
    home, vault, tmp_path
):
    old = autostart.render("linux", config_for(vault)).content
    legacy, legacy_link = autostart.entry_path("linux")
    legacy.parent.mkdir(parents=True)
    legacy.write_text(old, encoding="utf-8")
    other = tmp_path / "Other"
    other.mkdir()
    autostart.enable(config_for(other), platform="linux")  # another vault: the old entry is the first vault's
    assert legacy.exists()
    status = autostart.status(config_for(vault), platform="linux")
    assert status["path"] == str(legacy) and status["vault"] == str(vault) and status["current"] is False
    assert sorted(e["vault"] for e in status["entries"]) == sorted([str(vault), str(other)])
    autostart.enable(config_for(vault), platform="linux")  # its own vault: replaced by the per-vault entry
    assert not legacy.exists()
    assert autostart.status(config_for(vault), platform="linux")["current"] is True

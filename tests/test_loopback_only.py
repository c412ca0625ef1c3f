"""Every listener is loopback only, checked before any socket opens (docs/design.md, "Interfaces" → HTTP).

``host = "0.0.0.0"`` in ``config.toml`` is refused where the setting is read (``cairn config`` and every command say
so, naming the file and the key), so neither ``cairn mcp --http`` nor ``cairn serve`` ever binds every interface.
A configuration built in code that skips the loader is refused by each listener itself before it binds: the MCP
endpoint's socket, the daemon before it opens its index, ``cairn mcp --http`` before it reads the policy.
Real ``cairn`` subprocesses over a small indexed vault; the in-process checks use the real servers' entry points.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import pytest

from cairn.config import Config, load_config
from cairn.errors import ConfigError
from support.cairns import build_index
from support.cli import cairn_env, cairn_executable
from support.waits import wait_until

pytestmark = pytest.mark.slow  # `cairn` subprocesses

#: What the owner reads whenever a non-loopback host is refused.
LOOPBACK_WORDS = "expected a loopback address (127.0.0.1, ::1 or localhost)"
EXIT_S = 120


def home_with_host(tmp_path: Path, host: str) -> tuple[Path, Path, Path]:
    """A home whose ``config.toml`` sets ``host`` (and a free MCP port), and a one-note vault: (home, vault,
    config.toml)."""
    home, vault = tmp_path / "home", tmp_path / "vault"
    (home / "config").mkdir(parents=True)
    (vault / ".obsidian").mkdir(parents=True)
    (vault / "pub.md").write_text("# Pub\n\nA public note about bread.\n", encoding="utf-8")
    toml = home / "config" / "config.toml"
    toml.write_text(f'host = "{host}"\nmcp_port = 0\n', encoding="utf-8")
    return home, vault, toml


def index_vault(home: Path, vault: Path, embedder) -> None:
    """The vault indexed into ``home``'s data folder, in this process (as `cairn index` would), from defaults alone
    (the home's own config.toml sets the host under test)."""
    build_index(vault, home / "data", embedder, config_dir=home / "config")


def refused_setting(proc: subprocess.CompletedProcess | subprocess.Popen, stderr: str, toml: Path) -> None:
    assert proc.returncode == 1, stderr
    assert f"Error: config file {toml}: bad value '0.0.0.0' for 'host': {LOOPBACK_WORDS}" in stderr, stderr


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"])
def test_a_loopback_host_is_taken(host):
    config = load_config({"host": host}, env={})
    assert config.host == host.strip("[]")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "example.org", "my.localhost"])
def test_a_host_that_is_not_loopback_is_refused_wherever_it_is_set(tmp_path, host):
    with pytest.raises(ConfigError, match=r"option --host: bad value .* for 'host': expected a loopback address"):
        load_config({"host": host}, env={})
    toml = tmp_path / "config.toml"
    toml.write_text(f'host = "{host}"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=f"config file {toml}: bad value"):
        load_config(config_file=toml, env={})


def test_cairn_config_refuses_host_0000_naming_the_file_and_the_key(tmp_path):
    home, _, toml = home_with_host(tmp_path, "0.0.0.0")
    proc = subprocess.run(
        [cairn_executable(), "config"], env=cairn_env(home), capture_output=True, text=True, timeout=EXIT_S
    )
    refused_setting(proc, proc.stderr, toml)
    assert proc.stdout == ""


def test_cairn_mcp_http_never_listens_on_every_interface(tmp_path, embedder):
    home, vault, toml = home_with_host(tmp_path, "0.0.0.0")
    index_vault(home, vault, embedder)
    errors = tmp_path / "mcp-http.stderr"
    with open(errors, "w", encoding="utf-8") as err:
        proc = subprocess.Popen(
            [cairn_executable(), "mcp", "--http", "--vault", str(vault)],
            env=cairn_env(home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        said = wait_until(
            "cairn mcp --http to exit or to say where it serves",
            lambda: proc.poll() is not None or "Cairn serves MCP" in errors.read_text(encoding="utf-8"),
            EXIT_S,
        )
        assert said and proc.poll() is not None, f"it serves: {errors.read_text(encoding='utf-8')}"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    refused_setting(proc, errors.read_text(encoding="utf-8"), toml)


def test_cairn_serve_refuses_host_0000_before_opening_anything(tmp_path):
    home, vault, toml = home_with_host(tmp_path, "0.0.0.0")
    proc = subprocess.run(
        [cairn_executable(), "serve", "--vault", str(vault), "--no-tray", "--port", "0"],
        env=cairn_env(home),
        capture_output=True,
        text=True,
        timeout=EXIT_S,
        stdin=subprocess.DEVNULL,
    )
    refused_setting(proc, proc.stderr, toml)
    assert not (home / "data" / "indexes").exists()  # no index opened, so no listener either


def code_config(tmp_path: Path, vault: Path) -> Config:
    """A configuration built in code with a non-loopback host: nothing made by the loader checks it."""
    config = load_config(
        {"vault": str(vault), "data_dir": str(tmp_path / "data"), "config_dir": str(tmp_path / "config")}, env={}
    )
    return config.replace(host="0.0.0.0", mcp_port=0)


def test_each_listener_refuses_a_host_the_loader_never_saw(tmp_path):
    from cairn.app import run_daemon, run_mcp_http
    from cairn.mcp_server.listener import listen

    vault = tmp_path / "vault"
    vault.mkdir()
    config = code_config(tmp_path, vault)
    with pytest.raises(ConfigError, match=re.escape(f"MCP over HTTP on '0.0.0.0': {LOOPBACK_WORDS}")):
        listen(config.host, 0)
    with pytest.raises(ConfigError, match=re.escape(LOOPBACK_WORDS)):
        asyncio.run(run_mcp_http(config))
    with pytest.raises(ConfigError, match=re.escape(f"MCP endpoint on '0.0.0.0': {LOOPBACK_WORDS}")):
        asyncio.run(run_daemon(config))
    assert not (tmp_path / "data" / "indexes").exists()  # refused before the index (and the MCP port) was opened

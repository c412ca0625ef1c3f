"""Two vaults served side by side from one home, as start at login runs them: each vault's daemon takes a free
port when the one it is given is held by another vault's daemon, and records it in its ``service-<index>.json``,
where the Obsidian plugin (the shipped ``main.js``), ``cairn status`` and MCP clients find it. What ``cairn serve``
says at start (its MCP endpoint; the keyring warning once, not at every start).

Real ``cairn serve`` processes started with the command and environment of the real login entries
(``cairn autostart enable``), real HTTP, the real ``cairn status``; the plugin's discovery runs in Node.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from cairn import autostart
from cairn.config import Config
from support.cli import TIMEOUT_S, cairn_env, run_cairn, run_json

pytestmark = [
    pytest.mark.slow,  # two daemons, each loading the model
    pytest.mark.skipif(sys.platform != "linux", reason="runs the systemd user units `cairn autostart` writes"),
]

REPO = Path(__file__).resolve().parents[1]
SHIPPED_PLUGIN = REPO / "daemon" / "cairn" / "obsidian_plugin" / "main.js"
NOTES = {
    "A": ("Alpha.md", "# Alpha\n\nThe quince jelly sets overnight.\n"),
    "B": ("Beta.md", "# Beta\n\nThe kayak paddle hangs in the shed.\n"),
}
#: A keyring that always fails, as on a desktop without one (what the test environment has is not used).
NO_KEYRING = {"CAIRN_KEYRING": "auto", "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}

#: The plugin's own discovery (``discoverServiceUrl`` of the shipped main.js) for each vault given, with a stand-in
#: for the ``obsidian`` module (only its classes are extended when main.js loads).
DISCOVER_JS = """
const Module = require("module");
const load = Module._load;
Module._load = function (request, ...rest) {
  if (request === "obsidian") return new Proxy({}, { get: () => class {} });
  return load.call(this, request, ...rest);
};
const { discoverServiceUrl } = require(process.argv[1]);
console.log(JSON.stringify(process.argv.slice(2).map((vault) => discoverServiceUrl(vault) ?? null)));
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _login_entry(home: Path, vault: Path, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """``cairn autostart enable --vault VAULT`` (systemd user unit under ``home``), then the unit's command and the
    environment it sets, read back from the file as systemd would."""
    run_cairn(home, "autostart", "enable", "--vault", str(vault), env=env)
    config = Config(vault=vault.resolve(), data_dir=home / "data")
    path, link = autostart.entry_path(
        "linux", {"HOME": str(home), "XDG_CONFIG_HOME": env["XDG_CONFIG_HOME"]}, config.vault
    )
    assert link is not None and link.is_symlink(), "the unit is enabled"
    text = path.read_text(encoding="utf-8")
    command = autostart.command_in("linux", text)
    assert command is not None and command[-3:] == ["serve", "--vault", str(vault.resolve())]
    unit_env = {}
    for line in text.splitlines():
        if line.startswith('Environment="'):
            key, _, value = line[len('Environment="') : -1].partition("=")
            unit_env[key] = value
    return command, unit_env


def _record(home: Path, vault: Path, pid: int) -> dict | None:
    path = Config(vault=vault.resolve(), data_dir=home / "data").service_file
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if info.get("pid") == pid else None


def _start(
    home: Path, name: str, command: list[str], env: dict[str, str], vault: Path
) -> tuple[subprocess.Popen, dict]:
    """Run a login entry's command; return it and its discovery record once written (and its stderr says ready)."""
    err_path = home / f"{name}.stderr"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [*command, "--no-tray"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
        )
    end = time.monotonic() + TIMEOUT_S
    while time.monotonic() < end:
        record = _record(home, vault, proc.pid)
        if record and "Stop with Ctrl-C." in err_path.read_text(encoding="utf-8", errors="replace"):
            return proc, record
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"the login entry of {vault} did not start:\n{err_path.read_text()[-3000:]}")


def _search(url: str, token: str, query: str) -> list[str]:
    request = urllib.request.Request(
        f"{url}/search?{urllib.parse.urlencode({'q': query})}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=60) as resp:
        return [hit["filePath"] for hit in json.loads(resp.read())["results"]]


def _plugin_discovers(home: Path, *vaults: Path) -> list[str | None]:
    node = shutil.which("node")
    assert node is not None, "Node.js runs the plugin's discovery (packaging/obsidian-plugin needs it too)"
    out = subprocess.run(
        [node, "-e", DISCOVER_JS, str(SHIPPED_PLUGIN), *(str(v.resolve()) for v in vaults)],
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(home), "CAIRN_DATA_DIR": str(home / "data")},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def _stop(*procs: subprocess.Popen | None) -> None:
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.mark.skipif(shutil.which("node") is None, reason="the plugin's discovery runs in Node.js")
def test_two_vaults_enabled_at_login_both_serve_and_the_plugin_and_cairn_status_find_each(tmp_path):
    home = tmp_path / "home"
    vaults = {}
    for name, (file, text) in NOTES.items():
        vaults[name] = tmp_path / name
        vaults[name].mkdir()
        (vaults[name] / file).write_text(text, encoding="utf-8")
    port = _free_port()  # the port both entries are given (CAIRN_PORT when enabled), as an owner may set it
    env = {"XDG_CONFIG_HOME": str(home / "xdg"), "CAIRN_PORT": str(port), **NO_KEYRING}
    entries = {name: _login_entry(home, vault, env) for name, vault in vaults.items()}
    assert all(unit_env["CAIRN_PORT"] == str(port) for _, unit_env in entries.values())

    procs: dict[str, subprocess.Popen] = {}
    records: dict[str, dict] = {}
    try:
        for name in ("A", "B"):  # one after the other: the same port, the same data folder
            command, unit_env = entries[name]
            launch_env = {**cairn_env(home), **unit_env, "PYTHON_KEYRING_BACKEND": NO_KEYRING["PYTHON_KEYRING_BACKEND"]}
            procs[name], records[name] = _start(home, name, command, launch_env, vaults[name])

        # A has the port it was given; B, finding it held by A's daemon, took a free one and recorded it.
        assert records["A"]["port"] == port
        assert records["B"]["port"] != port and records["B"]["url"] == f"http://127.0.0.1:{records['B']['port']}"
        assert records["A"]["mcpUrl"] != records["B"]["mcpUrl"]
        err_b = (home / "B.stderr").read_text(encoding="utf-8")
        assert f"port {port} is taken by Cairn's daemon for {vaults['A'].resolve()}" in err_b, err_b

        # Both answer over HTTP, each with its own vault's notes, to its own vault's token.
        token = {n: run_cairn(home, "token", "--vault", str(vaults[n]), env=NO_KEYRING).stdout.strip() for n in "AB"}
        assert _search(records["A"]["url"], token["A"], "quince jelly") == ["Alpha.md"]
        assert _search(records["B"]["url"], token["B"], "kayak paddle") == ["Beta.md"]

        # The plugin of each vault finds its own daemon; `cairn status` lists both.
        assert _plugin_discovers(home, vaults["A"], vaults["B"], tmp_path / "C") == [
            records["A"]["url"],
            records["B"]["url"],
            None,  # a vault with no daemon: never another vault's
        ]
        listed = run_json(home, "status", "--json")["daemons"]
        assert [(d["vault"], d["url"], d["mcpUrl"], d["pid"]) for d in listed] == [
            (str(vaults[n].resolve()), records[n]["url"], records[n]["mcpUrl"], procs[n].pid) for n in ("A", "B")
        ]
        text = run_cairn(home, "status").stdout
        assert f"{vaults['A'].resolve()} at {records['A']['url']}" in text and records["B"]["url"] in text, text

        # What each start said: the MCP endpoint; the keyring warning the first time only.
        err_a = (home / "A.stderr").read_text(encoding="utf-8")
        for name, err in (("A", err_a), ("B", err_b)):
            assert f"MCP (streamable HTTP) for agents at {records[name]['mcpUrl']}" in err, err
        assert "Install a keyring backend" in err_a and "Install a keyring backend" not in err_b, err_b
    finally:
        _stop(*procs.values())
    assert not list((home / "data").glob("service*.json"))


def test_a_configured_port_held_by_another_program_is_still_an_error_naming_it(tmp_path):
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Note.md").write_text("# Note\n\nplain text\n", encoding="utf-8")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = run_cairn(
            tmp_path / "home", "serve", "--vault", str(vault), "--port", str(port), "--no-tray", check=False
        )
    assert proc.returncode == 1, proc.stderr
    assert f"Cannot listen on 127.0.0.1:{port}" in proc.stderr and "--port" in proc.stderr, proc.stderr

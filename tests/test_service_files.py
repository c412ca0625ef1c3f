"""Daemon discovery when daemons of two vaults share one data folder: each vault has its own
``service-<index>.json`` (``{port, pid, version, startedAt, url, vault, index}``, mode 0600, never a token), so
``cairn status --vault A`` reports A's daemon or none, and a daemon that stops removes only its own files
(``service.json``, the record of the daemon started last, stays for readers that know no vault).

Real ``cairn serve`` processes and the real ``cairn status`` for the end-to-end case.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import stat
import subprocess
import threading

import pytest

from cairn import __version__
from cairn.config import DEFAULT_PORT, Config
from cairn.discovery import (
    daemon_holding,
    health,
    moves_off,
    remove_service_file,
    running_daemons,
    write_service_file,
)
from support.cli import TIMEOUT_S, _serve_and_wait, run_json


def _config(tmp_path, name: str) -> Config:
    vault = tmp_path / name
    vault.mkdir(exist_ok=True)
    return Config(vault=vault.resolve(), data_dir=tmp_path / "data")


def test_each_vault_gets_its_own_0600_service_file_naming_its_vault(tmp_path):
    a, b = _config(tmp_path, "A"), _config(tmp_path, "B")
    write_service_file(a, "http://127.0.0.1:4001", 4001)
    write_service_file(b, "http://127.0.0.1:4002", 4002, "http://127.0.0.1:4003/mcp")
    assert a.service_file != b.service_file and a.service_file.parent == b.service_file.parent == tmp_path / "data"
    info_a = json.loads(a.service_file.read_text(encoding="utf-8"))
    info_b = json.loads(b.service_file.read_text(encoding="utf-8"))
    assert set(info_a) == {"port", "pid", "version", "startedAt", "url", "vault", "index"}
    assert (info_a["url"], info_a["vault"], info_a["index"]) == ("http://127.0.0.1:4001", str(a.vault), a.index_id)
    assert (info_b["url"], info_b["vault"], info_b["mcpUrl"]) == (
        "http://127.0.0.1:4002",
        str(b.vault),
        "http://127.0.0.1:4003/mcp",
    )
    assert info_a["pid"] == os.getpid() and info_a["version"] == __version__
    # service.json: the daemon started last, naming its vault.
    assert json.loads(a.shared_service_file.read_text(encoding="utf-8"))["vault"] == str(b.vault)
    for path in (a.service_file, b.service_file, a.shared_service_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not list((tmp_path / "data").glob(".service.*.tmp"))


def test_a_stopping_daemon_removes_only_its_own_service_files(tmp_path):
    a, b = _config(tmp_path, "A"), _config(tmp_path, "B")
    write_service_file(a, "http://127.0.0.1:4001", 4001)
    write_service_file(b, "http://127.0.0.1:4002", 4002)
    remove_service_file(a)  # service.json is B's: it stays
    assert not a.service_file.exists() and b.service_file.exists()
    assert json.loads(b.shared_service_file.read_text(encoding="utf-8"))["url"] == "http://127.0.0.1:4002"
    remove_service_file(b)
    assert not b.service_file.exists() and not b.shared_service_file.exists()
    # A record another process wrote (another pid) is never removed.
    b.service_file.write_text(json.dumps({"pid": os.getpid() + 1, "url": "http://127.0.0.1:1", "vault": str(b.vault)}))
    remove_service_file(b)
    assert b.service_file.exists()


def _status_daemon(home, vault) -> dict:
    return run_json(home, "status", "--vault", str(vault), "--json")["daemon"]


@pytest.mark.slow
def test_cairn_status_reports_each_vaults_own_daemon_when_two_share_a_data_folder(tmp_path):
    home = tmp_path / "home"
    vaults = {}
    for name, text in (("A", "# Alpha\nalpha only text\n"), ("B", "# Beta\nbeta only text\n")):
        vaults[name] = tmp_path / name
        vaults[name].mkdir()
        (vaults[name] / f"{name.lower()}.md").write_text(text, encoding="utf-8")
    proc_a, url_a = _serve_and_wait(home, vaults["A"])
    proc_b = None
    try:
        proc_b, url_b = _serve_and_wait(home, vaults["B"])  # service.json is B's from now on
        assert _status_daemon(home, vaults["A"]) == {"running": True, "url": url_a, "pid": proc_a.pid}
        assert _status_daemon(home, vaults["B"]) == {"running": True, "url": url_b, "pid": proc_b.pid}
        proc_b.send_signal(signal.SIGTERM)
        assert proc_b.wait(timeout=TIMEOUT_S) == 0
        # B's stop removed B's records only: A's daemon is still found, B's is reported as not running.
        assert _status_daemon(home, vaults["A"]) == {"running": True, "url": url_a, "pid": proc_a.pid}
        assert _status_daemon(home, vaults["B"]) == {"running": False}
        assert not (home / "data" / "service.json").exists()
        assert [json.loads(p.read_text())["vault"] for p in (home / "data").glob("service-*.json")] == [
            str(vaults["A"].resolve())
        ]
    finally:
        for proc in (proc_a, proc_b):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
    assert not list((home / "data").glob("service*.json"))


# -- who holds a port: another vault's daemon (take a free port) or another program (an error) --------------


class _Health(http.server.BaseHTTPRequestHandler):
    body = b"{}"

    def do_GET(self):  # noqa: N802 - the stdlib's name
        data = self.body if self.path == "/health" else b"{}"
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _server(body: dict):
    handler = type("H", (_Health,), {"body": json.dumps(body).encode()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


CAIRN_HEALTH = {"status": "ok", "version": __version__, "store": {"ok": True}, "embedder": {"ok": True}}


def test_a_port_held_by_another_vaults_daemon_is_told_from_one_held_by_another_program(tmp_path):
    a, b = _config(tmp_path, "A"), _config(tmp_path, "B")
    with _server({**CAIRN_HEALTH, "vaultId": a.vault_id}) as api, _server({"hello": "world"}) as other:
        write_service_file(a, f"http://127.0.0.1:{api}", api, "http://127.0.0.1:1/mcp")
        assert daemon_holding(b, api) == str(a.vault)  # A's record names the port, and A answers
        assert daemon_holding(b, 1) == str(a.vault)  # A's MCP port, from its record (never probed itself)
        assert daemon_holding(b, other) is None  # answers, but not as Cairn does
        assert [r["vault"] for r in running_daemons(tmp_path / "data")] == [str(a.vault)]
        # B's daemon moves off a port A's daemon holds even when the owner chose it; off one another program
        # holds only when the owner never chose it (the default, or the MCP port derived from it).
        assert moves_off(b, "HTTP API", api)(api) is True
        assert moves_off(b, "HTTP API", other)(other) is False
        assert moves_off(b, "HTTP API", DEFAULT_PORT)(other) is True
        assert moves_off(b, "MCP endpoint", None)(other) is True
        remove_service_file(a)
        # No record (a daemon keeping its files in another data folder): its /health still tells.
        assert daemon_holding(b, api) == "another vault"
        assert running_daemons(tmp_path / "data") == []
        # B's record naming A's daemon's port (B's daemon gone, A's took the port): not B's daemon.
        write_service_file(b, f"http://127.0.0.1:{api}", api)
        assert running_daemons(tmp_path / "data") == [] and daemon_holding(a, api) == "another vault"
        remove_service_file(b)
    # A stale record (its daemon gone) holds nothing.
    write_service_file(a, f"http://127.0.0.1:{api}", api)
    assert daemon_holding(b, api) is None and running_daemons(tmp_path / "data") == []
    assert health("http://example.com:80") is None  # never a probe off this machine

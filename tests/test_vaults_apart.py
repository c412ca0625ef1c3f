"""Each vault's daemon serves only its own vault (docs/design.md, "Contract" → Several vaults): two real
``cairn serve`` processes for two vaults sharing one home (data and config folders), each with its own API token
(a token opens only its own vault's daemon); each proves in ``/health`` which vault it serves (``vaultId``); the
shipped plugin's discovery (``findDaemon`` of daemon/cairn/obsidian_plugin/main.js, run in Node) and ``cairn
status`` refuse another vault's daemon and a stale record (a daemon killed with ``kill -9``); ``cairn plugin
install`` leaves the plugin a token that works.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from cairn.config import Config
from support.cli import TIMEOUT_S, cairn_env, cairn_executable, run_cairn, run_json
from support.waits import wait_until

pytestmark = pytest.mark.slow  # two daemons, each loading the model

REPO = Path(__file__).resolve().parents[1]
SHIPPED_PLUGIN = REPO / "daemon" / "cairn" / "obsidian_plugin" / "main.js"
NODE = shutil.which("node")

#: ``findDaemon(vault, {daemonUrl})`` of the shipped main.js for each case given (a JSON list of ``[vault, url]``),
#: with a stand-in for the ``obsidian`` module (only its classes are extended when main.js loads).
FIND_JS = """
const Module = require("module");
const load = Module._load;
Module._load = function (request, ...rest) {
  if (request === "obsidian") return new Proxy({}, { get: () => class {} });
  return load.call(this, request, ...rest);
};
const { findDaemon } = require(process.argv[1]);
(async () => {
  const out = [];
  for (const [vault, daemonUrl] of JSON.parse(process.argv[2])) out.push(await findDaemon(vault, { daemonUrl }));
  console.log(JSON.stringify(out));
})();
"""


def _vault_id(vault: Path) -> str:
    """What a daemon serving ``vault`` says in ``/health``: 16 hex digits of SHA-256 over its resolved path."""
    return hashlib.sha256(os.fsencode(vault.resolve())).hexdigest()[:16]


def _config(home: Path, vault: Path) -> Config:
    return Config(vault=vault.resolve(), data_dir=home / "data", config_dir=home / "config")


@contextmanager
def _serving(home: Path, vault: Path) -> Iterator[tuple[subprocess.Popen, dict]]:
    """``cairn serve`` on ``vault``; yields it and its discovery record; killed at the end if still running."""
    log = home / f"{vault.name}.stderr"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [cairn_executable(), "serve", "--vault", str(vault), "--port", "0", "--no-tray"],
            env=cairn_env(home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    record_file = _config(home, vault).service_file

    def record() -> dict | None:
        try:
            info = json.loads(record_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return info if info.get("pid") == proc.pid else None

    try:
        yield proc, wait_until(f"{record_file.name}", record, TIMEOUT_S, proc=proc, log=log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _get(url: str, token: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _found(url: str, token: str, word: str) -> list[str]:
    status, body = _get(f"{url}/search?{urllib.parse.urlencode({'q': word})}", token)
    return [hit["filePath"] for hit in body.get("results", [])] if status == 200 else []


def _find_daemon(home: Path, *cases: tuple[Path, str]) -> list[dict]:
    assert NODE is not None
    out = subprocess.run(
        [NODE, "-e", FIND_JS, str(SHIPPED_PLUGIN), json.dumps([[str(v.resolve()), url] for v, url in cases])],
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "CAIRN_DATA_DIR": str(home / "data")},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def _forge(home: Path, vault: Path, url: str, pid: int) -> None:
    """``vault``'s record pointing at ``url`` with a running ``pid``: as after its daemon was killed and another
    vault's daemon took its port (and a pid was reused)."""
    path = _config(home, vault).service_file
    info = {"port": int(url.rsplit(":", 1)[1]), "pid": pid, "url": url, "vault": str(vault.resolve())}
    path.write_text(json.dumps(info), encoding="utf-8")


@pytest.mark.skipif(NODE is None, reason="the plugin's discovery runs in Node.js")
def test_each_vaults_daemon_serves_only_its_own_vault_to_its_token_its_plugin_and_the_cli(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    vaults = {}
    for name in ("A", "B"):
        vaults[name] = tmp_path / f"v{name}"
        (vaults[name] / ".obsidian").mkdir(parents=True)
        (vaults[name] / f"n{name}.md").write_text(f"# Note {name}\n\nzqonlyin{name} text of vault {name}.\n")
    a, b = vaults["A"], vaults["B"]
    with ExitStack() as stack:
        proc_a, rec_a = stack.enter_context(_serving(home, a))
        proc_b, rec_b = stack.enter_context(_serving(home, b))
        url_a, url_b = rec_a["url"], rec_b["url"]

        # Each vault its own token: it opens its own vault's daemon, and only that one.
        token_a = run_cairn(home, "token", "--vault", str(a)).stdout.strip()
        token_b = run_cairn(home, "token", "--vault", str(b)).stdout.strip()
        assert token_a != token_b
        assert wait_until("A's note searchable", lambda: _found(url_a, token_a, "zqonlyinA"), TIMEOUT_S) == ["nA.md"]
        assert wait_until("B's note searchable", lambda: _found(url_b, token_b, "zqonlyinB"), TIMEOUT_S) == ["nB.md"]
        assert _get(f"{url_b}/search?q=zqonlyinB", token_a)[0] == 401
        assert _get(f"{url_a}/index/stats", token_b)[0] == 401

        # Each daemon says whose it is.
        assert _get(f"{url_a}/health")[1]["vaultId"] == _vault_id(a)
        assert _get(f"{url_b}/health")[1]["vaultId"] == _vault_id(b)

        # The plugin finds each vault's own daemon, and refuses B's where A's is looked for.
        found = _find_daemon(home, (a, ""), (b, ""), (a, url_b))
        assert found[0] == {"kind": "ok", "url": url_a} and found[1] == {"kind": "ok", "url": url_b}
        assert found[2]["kind"] == "elsewhere" and "serves another vault" in found[2]["message"]

        # `cairn plugin install` leaves A's plugin ready: its data.json holds a token A's daemon takes.
        run_cairn(home, "plugin", "install", "--vault", str(a))
        data = json.loads((a / ".obsidian" / "plugins" / "cairn" / "data.json").read_text(encoding="utf-8"))
        assert _found(url_a, data["token"], "zqonlyinA") == ["nA.md"]
        assert _get(f"{url_b}/search?q=zqonlyinB", data["token"])[0] == 401

        # A killed with kill -9 leaves its record: stale (its pid is gone), so ignored by the plugin and the CLI.
        proc_a.kill()
        proc_a.wait(timeout=TIMEOUT_S)
        assert _config(home, a).service_file.exists()
        assert _find_daemon(home, (a, "")) == [{"kind": "offline", "url": ""}]
        status = run_json(home, "status", "--vault", str(a), "--json")["daemon"]
        assert status["running"] is False and "no longer running" in status["ignored"], status

        # A's record now naming B's daemon (its port taken, a running pid): B's daemon proves it is not A's.
        _forge(home, a, url_b, proc_b.pid)
        found = _find_daemon(home, (a, ""))
        assert found[0]["kind"] == "elsewhere" and found[0]["url"] == url_b
        status = run_json(home, "status", "--vault", str(a), "--json")["daemon"]
        assert status["running"] is False and "does not answer" in status["ignored"], status
        text = run_cairn(home, "status", "--vault", str(a)).stdout
        assert "Daemon:   not running" in text and f"Also:     {b.resolve()} served at {url_b}" in text, text
        assert [d["vault"] for d in run_json(home, "status", "--json")["daemons"]] == [str(b.resolve())]
        assert run_json(home, "status", "--vault", str(b), "--json")["daemon"]["url"] == url_b

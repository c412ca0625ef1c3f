"""``cairn serve`` as a subprocess (port 0, the token from ``cairn token``) and how to talk to it over HTTP: the
daemon of the end-to-end tests. Every Cairn folder is inside the test's own home (:func:`support.cli.cairn_env`)."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest

from support.cli import cairn_env, cairn_executable, read_service
from support.waits import wait_until

START_DEADLINE_S = 90


INDEX_DEADLINE_S = 120


STOP_DEADLINE_S = 10


NOTES = {
    "Projects/Beekeeping.md": "---\ntags: [bees]\n---\n# Beekeeping\n\n## Hive inspection\n\n"
    "I inspect the hives every nine days in summer, looking for queen cells.\n\n"
    "## Honey harvest\n\nEach super yields about 11 kg of honey in late July.\n",
    "Home/Boiler.md": "---\ntags: [house]\n---\n# Boiler\n\n"
    "The boiler pressure should sit at 1.3 bar when the system is cold.\n",
    "Bikes/Touring bike.md": "# Touring bike\n\n#bikes\n\n"
    "Tyre pressure for the touring bike: 65 psi front, 75 psi rear.\n",
}


class Daemon:
    """A running ``cairn serve`` subprocess and how to talk to it."""

    def __init__(self, proc: subprocess.Popen, home: Path, env: dict[str, str], vault: Path, url: str, token: str):
        self.proc, self.home, self.env, self.vault, self.url, self.token = proc, home, env, vault, url, token
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port

    @property
    def service_file(self) -> Path:
        return self.home / "data" / "service.json"

    def stderr(self) -> str:
        return (self.home / "serve.stderr").read_text(encoding="utf-8", errors="replace")

    def stdout(self) -> str:
        return (self.home / "serve.stdout").read_text(encoding="utf-8", errors="replace")

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        token: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            hdrs = dict(headers or {})
            data = None
            if body is not None:
                data = json.dumps(body).encode("utf-8")
                hdrs["Content-Type"] = "application/json"
            if token is not None:
                hdrs["Authorization"] = f"Bearer {token}"
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def get_json(self, path: str, *, token: str | None = None, params: dict | list | None = None) -> tuple[int, Any]:
        if params:
            path += "?" + urlencode(params, doseq=True)
        status, _, raw = self.request("GET", path, token=token)
        return status, json.loads(raw)


def parse_sse(raw: bytes) -> list[tuple[str, Any]]:
    """``event: NAME`` / ``data: JSON`` frames separated by blank lines → [(name, data)] in order."""
    events = []
    for frame in raw.decode("utf-8").split("\n\n"):
        if not frame.strip():
            continue
        name, data = "message", []
        for line in frame.split("\n"):
            if line.startswith("event:"):
                name = line[len("event:") :].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:") :].strip())
        events.append((name, json.loads("\n".join(data)) if data else None))
    return events


def wait_for(what: str, check, deadline_s: float, proc: subprocess.Popen, stderr_file: Path):
    """:func:`support.waits.wait_until` with the daemon's process and log."""
    return wait_until(what, check, deadline_s, proc=proc, log=stderr_file)


@contextmanager
def running_daemon(home: Path, vault: Path, extra_env: dict[str, str] | None = None) -> Iterator[Daemon]:
    """``cairn serve --vault VAULT --port 0 --no-tray`` until the block ends; killed if still running then.
    ``extra_env``: more environment variables (e.g. ``CAIRN_LLM_BASE_URL``)."""
    env = {**cairn_env(home), **(extra_env or {})}
    stderr_file = home / "serve.stderr"
    with open(home / "serve.stdout", "wb") as out, open(stderr_file, "wb") as err:
        proc = subprocess.Popen(
            [cairn_executable(), "serve", "--vault", str(vault), "--port", "0", "--no-tray"],
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
    try:
        info = wait_until(
            "service.json", lambda: read_service(home, proc.pid), START_DEADLINE_S, proc=proc, log=stderr_file
        )
        token = subprocess.run(
            [cairn_executable(), "token", "--vault", str(vault)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
        yield Daemon(proc, home, env, vault, info["url"], token)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def stop(daemon: Daemon, sig: int) -> int:
    """Send ``sig`` and return the exit code; fail if the daemon takes longer than STOP_DEADLINE_S."""
    daemon.proc.send_signal(sig)
    try:
        return daemon.proc.wait(timeout=STOP_DEADLINE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"cairn serve did not stop within {STOP_DEADLINE_S} s of {signal.Signals(sig).name}:\n"
            f"{daemon.stderr()[-4000:]}"
        )

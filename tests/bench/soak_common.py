"""What the soak scripts share: a ``cairn serve`` subprocess in a scratch home, its URLs and tokens, its RSS.

Used by ``soak_sessions.py`` and ``soak_connections.py`` (``make soak``); not a test module.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
EXAMPLE_VAULT = REPO / "examples" / "vault"

from support.cli import cairn_env, cairn_executable  # noqa: E402  (the tests' own, with tests/ on the path)


@dataclass
class Daemon:
    proc: subprocess.Popen
    home: Path
    env: dict[str, str]
    port: int
    mcp_port: int
    token: str

    @property
    def stderr_file(self) -> Path:
        return self.home / "serve.stderr"

    def cli(self, *args: str) -> str:
        return subprocess.run(
            [cairn_executable(), *args], env=self.env, capture_output=True, text=True, timeout=120, check=True
        ).stdout.strip()

    def get(self, path: str, *, token: str | None = None, timeout_s: float = 10.0) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def rss_mb(self) -> float:
        """Resident memory of the daemon process (MB), from /proc (Linux)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def open_fds(self) -> int:
        try:
            return len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except OSError:
            return -1

    def wait_indexed(self, timeout_s: float = 300) -> None:
        def done() -> bool:
            status, body = self.get("/index/stats", token=self.token)
            stats = json.loads(body) if status == 200 else {}
            return bool(stats.get("notes")) and not stats.get("indexing") and stats.get("pending") == 0

        wait("the first index", done, timeout_s, self.proc)


def wait(what: str, check: Callable[[], object], timeout_s: float, proc: subprocess.Popen | None = None) -> object:
    end = time.monotonic() + timeout_s
    pause = threading.Event()
    while True:
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"cairn serve exited with {proc.returncode} while waiting for {what}")
        if time.monotonic() > end:
            raise SystemExit(f"timed out after {timeout_s} s waiting for {what}")
        pause.wait(0.1)


@contextmanager
def running_daemon(
    vault: Path, *, policy: str | None = None, preexec_fn: Callable[[], None] | None = None, config: str = ""
) -> Iterator[Daemon]:
    """``cairn serve --port 0 --no-tray`` over ``vault`` in a scratch home (removed afterwards); ``policy`` is
    written as the owner's MCP policy first, ``config`` as ``config.toml``."""
    home = Path(tempfile.mkdtemp(prefix="cairn-soak-"))
    try:
        (home / "config").mkdir(parents=True)
        if policy is not None:
            (home / "config" / "mcp-serve.yaml").write_text(policy, encoding="utf-8")
        if config:
            (home / "config" / "config.toml").write_text(config, encoding="utf-8")
        env = cairn_env(home)
        with open(home / "serve.stderr", "wb") as err:
            proc = subprocess.Popen(
                [cairn_executable(), "serve", "--vault", str(vault), "--port", "0", "--no-tray"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
                stdin=subprocess.DEVNULL,
                preexec_fn=preexec_fn,
            )
        try:

            def service() -> dict | None:
                info = json.loads((home / "data" / "service.json").read_text(encoding="utf-8"))
                return info if info.get("pid") == proc.pid and info.get("mcpUrl") else None

            info = wait("service.json", service, 180, proc)
            assert isinstance(info, dict)
            token = subprocess.run(
                [cairn_executable(), "token", "--vault", str(vault)],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout.strip()
            yield Daemon(proc, home, env, int(info["port"]), urlsplit(info["mcpUrl"]).port or 0, token)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

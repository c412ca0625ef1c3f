"""Bounded attack on connections: ``cairn serve`` under a 1,024-descriptor limit (soft and hard,
so it cannot raise it) while 1,100 connections that never finish their headers are held open against the plugin
API (each one the daemon closes is opened again at once), for ``--seconds``.

Meanwhile ``/health`` is asked every 100 ms and ``/search`` every second, and a note is edited. Prints whether
the daemon stayed responsive (every probe answered), p50/p99 of ``/health``, the bytes written to stderr, the
daemon's peak open descriptors and whether the edit was indexed (edits lost). Exit code 1 when unresponsive.

    python tests/bench/soak_connections.py [--connections 1100] [--seconds 60] [--nofile 1024]
"""

from __future__ import annotations

import argparse
import json
import resource
import selectors
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from soak_common import EXAMPLE_VAULT, Daemon, percentile, running_daemon, wait

PARTIAL = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Never-Ends: "


class Flood:
    """``n`` idle connections to ``port``, each reopened as soon as the daemon closes it, until ``stop``."""

    def __init__(self, port: int, n: int) -> None:
        self.port, self.n = port, n
        self.selector = selectors.DefaultSelector()
        self.opened = 0
        self.closed_by_server = 0
        self.stop = threading.Event()

    def _open(self) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            sock.sendall(PARTIAL)
            sock.setblocking(False)
        except OSError:
            return
        self.opened += 1
        self.selector.register(sock, selectors.EVENT_READ)

    def run(self) -> None:
        for _ in range(self.n):
            self._open()
        while not self.stop.is_set():
            for key, _ in self.selector.select(timeout=0.2):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    self.selector.unregister(sock)
                    sock.close()
                    self.closed_by_server += 1
                    self._open()
            while len(self.selector.get_map()) < self.n and not self.stop.is_set():
                self._open()
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]


def probe(daemon: Daemon, seconds: float, marker: str, note: Path) -> dict:
    """Ask /health every 100 ms and /search every second for ``seconds``; edit ``note`` halfway."""
    health_ms: list[float] = []
    failures: list[str] = []
    searches = 0
    fds = 0
    end = time.monotonic() + seconds
    edited = False
    pause = threading.Event()
    tick = 0
    while time.monotonic() < end:
        started = time.monotonic()
        try:
            status, _ = daemon.get("/health", timeout_s=10)
            health_ms.append((time.monotonic() - started) * 1000)
            if status != 200:
                failures.append(f"/health {status}")
        except OSError as exc:
            failures.append(f"/health {type(exc).__name__}")
        if tick % 10 == 0:
            try:
                status, _ = daemon.get("/search?q=garden", token=daemon.token, timeout_s=10)
                searches += 1
                if status != 200:
                    failures.append(f"/search {status}")
            except OSError as exc:
                failures.append(f"/search {type(exc).__name__}")
        if not edited and time.monotonic() > end - seconds / 2:
            note.write_text(note.read_text(encoding="utf-8") + f"\n\nEdited during the flood: {marker}.\n")
            edited = True
        fds = max(fds, daemon.open_fds())
        tick += 1
        pause.wait(0.1)
    return {"health_ms": health_ms, "failures": failures, "searches": searches, "fds": fds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1100)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--nofile", type=int, default=1024)
    args = parser.parse_args()
    vault = Path(tempfile.mkdtemp(prefix="cairn-soak-vault-")) / "vault"
    shutil.copytree(EXAMPLE_VAULT, vault)
    note = next(p for p in sorted(vault.rglob("*.md")))
    marker = "zanzibarquokka"

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, args.nofile))

    try:
        with running_daemon(vault, preexec_fn=lower) as daemon:
            daemon.wait_indexed()
            before = daemon.stderr_file.stat().st_size
            flood = Flood(daemon.port, args.connections)
            thread = threading.Thread(target=flood.run, daemon=True)
            thread.start()
            wait("the flood opened", lambda: flood.opened >= args.connections, 120)
            seen = probe(daemon, args.seconds, marker, note)
            flood.stop.set()
            thread.join(timeout=60)
            stderr_bytes = daemon.stderr_file.stat().st_size - before

            def found() -> bool:
                status, body = daemon.get(f"/search?q={marker}", token=daemon.token)
                return status == 200 and any(marker in json.dumps(r) for r in json.loads(body)["results"])

            try:
                wait("the edit indexed", found, 60, daemon.proc)
                lost = 0
            except SystemExit:
                lost = 1
            alive = daemon.proc.poll() is None
    finally:
        shutil.rmtree(vault.parent, ignore_errors=True)
    responsive = alive and not seen["failures"]
    print(
        f"{args.connections} idle connections held for {args.seconds:.0f} s under a {args.nofile}-descriptor limit "
        f"({flood.opened} opened, {flood.closed_by_server} closed by the daemon)"
    )
    print(f"daemon responsive: {'yes' if responsive else 'no'} ({len(seen['failures'])} failed probes)")
    print(
        f"/health: {len(seen['health_ms'])} calls, p50 {percentile(seen['health_ms'], 0.5):.0f} ms, "
        f"p99 {percentile(seen['health_ms'], 0.99):.0f} ms; /search: {seen['searches']} calls"
    )
    print(f"stderr during the flood: {stderr_bytes} bytes; peak open descriptors: {seen['fds']}")
    print(f"edits lost: {lost} of 1")
    if seen["failures"]:
        print("first failures:", ", ".join(seen["failures"][:5]))
    return 0 if responsive else 1


if __name__ == "__main__":
    sys.exit(main())

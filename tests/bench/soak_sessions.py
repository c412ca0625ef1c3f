"""Bounded attack on MCP sessions: one token holder opens MCP sessions over streamable HTTP in a
loop (``initialize``, never closed) while another non-local client and a local client keep initializing.

Prints the sessions the holder opened, how many ``initialize`` calls of the other clients failed (locked out:
must be 0) and the daemon's RSS growth. Exit code 1 when any other client was locked out.

    python tests/bench/soak_sessions.py [--sessions 12000] [--workers 8]
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from soak_common import EXAMPLE_VAULT, running_daemon

POLICY = """\
version: 1
withhold: {tags: [personal], folders: []}
default_tools: [get_note, list_notes]
clients:
  flooder: {local: false}
  other-agent: {local: false}
  owner-agent: {local: true, tools: all}
audit: {enabled: false}
"""
INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "soak", "version": "1"}},
    }
).encode()


def initialize(port: int, token: str) -> int:
    """One ``initialize`` POST (the session it opens is left open); the HTTP status, 0 when the call failed."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(
            "POST",
            "/mcp",
            body=INIT,
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "Authorization": f"Bearer {token}",
            },
        )
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except OSError:
        return 0
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=12000, help="sessions the token holder opens")
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    with running_daemon(EXAMPLE_VAULT, policy=POLICY) as daemon:
        tokens = {name: daemon.cli("mcp", "token", name) for name in ("flooder", "other-agent", "owner-agent")}
        daemon.wait_indexed()
        for name in ("other-agent", "owner-agent"):  # warm up: each client's first session
            assert initialize(daemon.mcp_port, tokens[name]) == 200, name
        rss_before = daemon.rss_mb()
        statuses: dict[int, int] = {}
        others = {"other-agent": [0, 0], "owner-agent": [0, 0]}  # name → [attempts, failures]
        done = threading.Event()

        def probe() -> None:
            pause = threading.Event()
            while not done.is_set():
                for name, counts in others.items():
                    counts[0] += 1
                    if initialize(daemon.mcp_port, tokens[name]) != 200:
                        counts[1] += 1
                pause.wait(0.2)

        prober = threading.Thread(target=probe, daemon=True)
        started = time.monotonic()
        prober.start()
        with ThreadPoolExecutor(args.workers) as pool:
            for status in pool.map(lambda _: initialize(daemon.mcp_port, tokens["flooder"]), range(args.sessions)):
                statuses[status] = statuses.get(status, 0) + 1
        done.set()
        prober.join(timeout=60)
        elapsed = time.monotonic() - started
        after = {name: initialize(daemon.mcp_port, tokens[name]) for name in others}
        rss_after = daemon.rss_mb()
        alive = daemon.proc.poll() is None
    locked_out = sum(f for _, f in others.values()) + sum(1 for s in after.values() if s != 200)
    print(
        f"token holder: {args.sessions} initialize calls in {elapsed:.1f} s, statuses {dict(sorted(statuses.items()))}"
    )
    for name, (attempts, failures) in others.items():
        print(f"{name}: {attempts} initialize calls during the flood, {failures} failed; after: HTTP {after[name]}")
    print(f"other clients locked out: {locked_out}")
    print(f"daemon RSS: {rss_before:.0f} MB before, {rss_after:.0f} MB after (+{rss_after - rss_before:.0f} MB)")
    print(f"daemon alive: {'yes' if alive else 'no'}")
    return 0 if locked_out == 0 and alive else 1


if __name__ == "__main__":
    sys.exit(main())

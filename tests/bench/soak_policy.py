#!/usr/bin/env python3
"""Bounded attack on live policy reloads. Figures, not a test.

The daemon's MCP endpoint (streamable HTTP on loopback, the daemon's fail-closed policy holder with the
configured settle time) serves the canary vault, indexed first. The owner's policy withholds the tag
``personal`` and the folder ``Private``. It is then saved REWRITES times in two writes GAP_MS apart: the first
write (``version`` and ``withhold.tags``) is a valid policy on its own that does not withhold the folder.
Meanwhile CLIENTS clients not declared local, each with its own token and the SDK's client, call ``get_note``
on ``Private/Salary.md`` (withheld by its folder only) in a loop.

Prints the calls served under a partial policy (must be 0), the total calls, and the longest real gap between the
two writes of a save (a save whose first write stood for the settle time or more is a laxer policy saved on
purpose, as far as the daemon can tell: the run is then marked invalid); exits 1 when any call was served.

Usage: soak_policy.py [--rewrites 100] [--gap-ms 100] [--clients 8] [--settle-s 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))
os.environ["CAIRN_KEYRING"] = "file"  # tokens in the temporary config folder, never the owner's keyring

import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from cairn.app import Cairn, start_mcp_http  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.secrets import mcp_token  # noqa: E402

sys.path.insert(0, str(REPO / "tests"))
from support.policies import FIRST_WRITE  # noqa: E402  (the policy and its first write, as the test saves them)
from support.policies import FULL as POLICY  # noqa: E402

VAULT = REPO / "tests" / "fixtures" / "canary_vault"
NOTE = "Private/Salary.md"


class Tally:
    def __init__(self) -> None:
        self.calls = 0
        self.served = 0
        self.errors: dict[str, int] = {}
        self.gaps: list[float] = []
        self.settle_s = 0.0


async def client_loop(url: str, token: str, tally: Tally, stop: asyncio.Event) -> None:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            while not stop.is_set():
                result = await client.call_tool("get_note", {"path": NOTE})
                tally.calls += 1
                if not result.is_error:
                    tally.served += 1
                else:
                    code = (result.structured_content or {}).get("error", {}).get("code", "?")
                    tally.errors[code] = tally.errors.get(code, 0) + 1


def rewrite(path: Path, rewrites: int, gap_s: float, gaps: list[float]) -> None:
    """Save the policy ``rewrites`` times in two writes ``gap_s`` apart, ``gap_s`` between saves; each save's real
    gap (seconds from the first write to the end of the second) is appended to ``gaps``. A thread of its own: the
    event loop that serves the clients could hold a sleep of its far longer than ``gap_s``."""
    pause = threading.Event()
    for _ in range(rewrites):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(FIRST_WRITE)
            fh.flush()
            first = time.monotonic()
            pause.wait(gap_s)
            fh.write(POLICY[len(FIRST_WRITE) :])
        gaps.append(time.monotonic() - first)
        pause.wait(gap_s)


async def attack(args: argparse.Namespace, home: Path) -> Tally:
    config = load_config(
        {
            "vault": str(VAULT),
            "data_dir": str(home / "data"),
            "config_dir": str(home / "config"),
            "log_dir": str(home / "log"),
            "mcp_port": 0,
            **({"mcp_policy_settle_s": args.settle_s} if args.settle_s is not None else {}),
        },
        env={"CAIRN_KEYRING": "file"},
    )
    policy_file = home / "config" / "mcp-serve.yaml"
    policy_file.parent.mkdir(parents=True)
    policy_file.write_text(POLICY, encoding="utf-8")
    cairn = await asyncio.to_thread(Cairn, config)
    try:
        await asyncio.to_thread(cairn.indexing.index)
        mcp = await start_mcp_http(config, cairn)
        tokens = [mcp_token(config, "claude-desktop") for _ in range(args.clients)]
        tally, stop = Tally(), asyncio.Event()
        tally.settle_s = config.mcp_policy_settle_s
        clients = [asyncio.create_task(client_loop(mcp.url, t, tally, stop)) for t in tokens]
        try:
            await asyncio.to_thread(rewrite, policy_file, args.rewrites, args.gap_ms / 1000, tally.gaps)
        finally:
            stop.set()
            await asyncio.gather(*clients)
            await mcp.close()
        return tally
    finally:
        cairn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rewrites", type=int, default=100)
    parser.add_argument("--gap-ms", type=float, default=100.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--settle-s", type=float, default=None, help="mcp_policy_settle_s (default: the config's)")
    args = parser.parse_args()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cairn-soak-policy-") as tmp:
        tally = asyncio.run(attack(args, Path(tmp)))
    settle = "as configured" if args.settle_s is None else f"{args.settle_s:g} s"
    print(
        f"soak_policy: {args.rewrites} saves in two writes {args.gap_ms:.0f} ms apart, {args.clients} clients not "
        f"declared local calling get_note({NOTE}), settle {settle}, {time.monotonic() - start:.0f} s"
    )
    settle_s = tally.settle_s
    late = sum(g >= settle_s for g in tally.gaps)
    longest = max(tally.gaps, default=0.0) * 1000
    print(f"  calls served under a partial policy: {tally.served}")
    print(f"  longest gap between the two writes of a save: {longest:.0f} ms (settle {settle_s * 1000:.0f} ms)")
    if late:  # a first write that stood unchanged for the settle time is, to the daemon, a deliberate save
        print(f"  INVALID RUN: {late} saves had writes {settle_s:g} s or more apart (the machine was too loaded)")
    print(f"  total calls: {tally.calls}  (refused: {', '.join(f'{k} {v}' for k, v in sorted(tally.errors.items()))})")
    return 1 if tally.served else 0


if __name__ == "__main__":
    sys.exit(main())

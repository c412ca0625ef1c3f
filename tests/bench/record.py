#!/usr/bin/env python3
"""Run one benchmark script and record what it printed in docs/benchmarks.md (what ``make bench`` does).

The script's stdout is shown as it comes and, when the script exits 0, replaces the section NAME of the
benchmarks file (between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``) with the table, the date
(UTC), the commit and the command; other sections are kept, a new one is added before the notes at the end.
A failing script leaves the file as it was and its exit code is returned.

Usage: record.py NAME [--out FILE] -- SCRIPT [ARG...]     e.g. record.py index -- tests/bench/bench_index.py VAULT
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "docs" / "benchmarks.md"
NOTES_MARK = "<!-- bench:notes -->"
HEADER = f"""# Benchmarks

Written by `make bench` (`tests/bench/record.py`): each section is the table its script printed in its
last successful run, with the date, the commit and the command. Run one bench alone with
`python tests/bench/record.py NAME -- tests/bench/bench_NAME.py VAULT` to update only its section.
The figures depend on the machine and on what else runs on it; compare runs made side by side.

{NOTES_MARK}
"""


def commit() -> str:
    """Short hash of HEAD, with ``+changes`` when the work tree differs from it; ``unknown`` outside git."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "diff", "--quiet", "HEAD"], capture_output=True).returncode
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" +changes" if dirty else "")


def run_script(argv: list[str]) -> tuple[int, str]:
    """Run ``python SCRIPT ARGS`` with this interpreter; stdout echoed line by line and returned."""
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)
    return proc.wait(), "".join(lines)


def section(name: str, argv: list[str], output: str, when: dt.datetime) -> str:
    """The Markdown of one bench's section, markers included."""
    command = " ".join(argv)
    cores = os.cpu_count() or "?"
    return (
        f"<!-- bench:{name} -->\n"
        f"## {name}\n\n"
        f"{when:%Y-%m-%d %H:%M} UTC, commit {commit()}, {cores} cores, Python {platform.python_version()}: "
        f"`{command}`\n\n"
        f"```text\n{output.rstrip()}\n```\n"
        f"<!-- /bench:{name} -->\n"
    )


def update(text: str, name: str, body: str) -> str:
    """``text`` with the section ``name`` replaced by ``body``, or ``body`` added before the notes."""
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->\n.*?<!-- /bench:{re.escape(name)} -->\n", re.S)
    if pattern.search(text):
        return pattern.sub(lambda _: body, text, count=1)
    if NOTES_MARK in text:
        return text.replace(NOTES_MARK, body + "\n" + NOTES_MARK, 1)
    return text.rstrip("\n") + "\n\n" + body


def _split(argv: list[str]) -> tuple[list[str], bool, list[str]]:
    """Arguments before the first ``--`` (record.py's), whether there was one, and those after (the script's)."""
    if "--" not in argv:
        return argv, False, []
    at = argv.index("--")
    return argv[:at], True, argv[at + 1 :]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", help="the section to write, e.g. index, freshness, http, pdf")
    ap.epilog = "-- SCRIPT [ARG...]: the bench script and its arguments"
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the benchmarks file (default docs/benchmarks.md)")
    own, sep, argv = _split(sys.argv[1:])
    args = ap.parse_args(own)
    if not sep or not argv:
        ap.error("give the bench script and its arguments after --")
    code, output = run_script(argv)
    if code != 0:
        print(f"record.py: {argv[0]} exited {code}; {args.out} left as it was", file=sys.stderr)
        return code
    old = args.out.read_text(encoding="utf-8") if args.out.exists() else HEADER
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(update(old, args.name, section(args.name, argv, output, dt.datetime.now(dt.UTC))), "utf-8")
    print(f"record.py: section {args.name!r} of {args.out} updated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

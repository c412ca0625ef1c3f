"""Rewrite the settings table of docs/settings.md from the settings Cairn reads (``make settings-table``).

The table between ``<!-- settings table: start -->`` and ``<!-- settings table: end -->`` in docs/settings.md is
:func:`cairn.config.settings_markdown` (what ``cairn config --markdown`` prints). ``--check`` changes nothing and
exits 1 when the table is not current; ``tests/test_settings.py`` checks the same.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cairn.config import settings_markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
START = "<!-- settings table: start -->"
END = "<!-- settings table: end -->"


def with_table(text: str, table: str) -> str:
    """``text`` with ``table`` between the markers; ValueError when the markers are missing or out of order."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOC}: the markers {START!r} and {END!r} are missing")
    return text[: start + len(START)] + "\n" + table + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the table is not current")
    args = parser.parse_args(argv)
    text = DOC.read_text(encoding="utf-8")
    new = with_table(text, settings_markdown())
    if new == text:
        return 0
    if args.check:
        print(f"{DOC}: the settings table is not current; run `make settings-table`", file=sys.stderr)
        return 1
    DOC.write_text(new, encoding="utf-8")
    print(f"{DOC}: settings table rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

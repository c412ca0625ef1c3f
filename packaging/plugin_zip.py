"""Build the Obsidian plugin's release zip: ``dist/cairn-obsidian-<version>.zip`` (``make plugin-zip``).

The zip holds ``main.js``, ``manifest.json`` and ``styles.css`` at its top level, so it unpacks straight into
``<vault>/.obsidian/plugins/cairn/``; the same three files are the assets of a GitHub release that BRAT installs
from. They are the build shipped in the Python package (``daemon/cairn/obsidian_plugin/``, which
``tests/test_plugin_build.py`` keeps equal to a fresh ``npm run build``), so this needs only Python: no venv,
no Node.js.

The version is Cairn's (``cairn.__version__``, read from ``daemon/cairn/__init__.py`` without importing the
package, whose dependencies may not be installed): the plugin's manifest must carry the same one and
``packaging/obsidian-plugin/versions.json`` must list it with the manifest's ``minAppVersion``, else this
exits with status 1 and says which file to change. Entries have a fixed date and mode, so the same files
always make the same zip.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "daemon" / "cairn" / "obsidian_plugin"
VERSIONS = ROOT / "packaging" / "obsidian-plugin" / "versions.json"
PACKAGE_INIT = ROOT / "daemon" / "cairn" / "__init__.py"
FILES = ("main.js", "manifest.json", "styles.css")
#: The zip format's earliest date: no build time inside, so rebuilding the same files gives the same bytes.
ENTRY_DATE = (1980, 1, 1, 0, 0, 0)


class ReleaseError(Exception):
    """The plugin files cannot make a release zip: a file missing, or a version out of step with Cairn's."""


def package_version(init: Path = PACKAGE_INIT) -> str:
    """``__version__`` from ``cairn/__init__.py`` (a ``"X.Y.Z"`` string). Raises ReleaseError if absent."""
    found = re.search(r'^__version__\s*=\s*"([^"]+)"', init.read_text(encoding="utf-8"), re.M)
    if not found:
        raise ReleaseError(f'no __version__ = "..." line in {init}')
    return found.group(1)


def check_versions(source: Path, version: str) -> None:
    """Raise ReleaseError unless ``source`` has the three files, its manifest says ``version`` and versions.json
    maps ``version`` to the manifest's ``minAppVersion`` (what Obsidian and BRAT read to pick a release)."""
    missing = [name for name in FILES if not (source / name).is_file()]
    if missing:
        raise ReleaseError(
            f"{', '.join(missing)} missing from {source}; run `npm ci && npm run ship` in packaging/obsidian-plugin"
        )
    manifest = json.loads((source / "manifest.json").read_text(encoding="utf-8"))
    if manifest.get("version") != version:
        raise ReleaseError(
            f"{source / 'manifest.json'} has version {manifest.get('version')!r} but Cairn is {version}: set it in "
            "packaging/obsidian-plugin/manifest.json and run `npm run ship` there"
        )
    listed = json.loads(VERSIONS.read_text(encoding="utf-8")).get(version)
    if listed != manifest.get("minAppVersion"):
        raise ReleaseError(
            f"{VERSIONS} maps {version} to {listed!r}, the manifest's minAppVersion is "
            f'{manifest.get("minAppVersion")!r}: add "{version}": "{manifest.get("minAppVersion")}" there'
        )


def build_zip(out_dir: Path, source: Path = SHIPPED) -> Path:
    """Write ``out_dir/cairn-obsidian-<version>.zip`` from ``source`` → its path (replaced whole, never half
    written). Raises ReleaseError (see :func:`check_versions`) and OSError."""
    version = package_version()
    check_versions(source, version)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"cairn-obsidian-{version}.zip"
    partial = path.with_name(path.name + ".partial")
    with zipfile.ZipFile(partial, "w") as zf:
        for name in FILES:
            entry = zipfile.ZipInfo(name, ENTRY_DATE)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o100644 << 16  # a regular file, rw-r--r-- when unzipped
            zf.writestr(entry, (source / name).read_bytes())
    os.replace(partial, path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the Obsidian plugin's release zip.")
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="folder for the zip (default: dist/)")
    args = parser.parse_args(argv)
    try:
        path = build_zip(args.out)
    except ReleaseError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(f"Wrote {path} ({', '.join(FILES)})")
    print("Install: unzip it into <vault>/.obsidian/plugins/cairn/, or attach the three files to a release for BRAT.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``cairn plugin install --vault PATH``: the built Obsidian plugin copied into ``<vault>/.obsidian/plugins/cairn/``
— the one owner-requested write into a vault — and nothing else in the vault touched.

Runs the real CLI entry point on a temp copy of examples/vault (never the repo's own copy).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from cairn.cli import main

REPO = Path(__file__).resolve().parents[1]
SAMPLE_VAULT = REPO / "examples" / "vault"
SHIPPED = REPO / "daemon" / "cairn" / "obsidian_plugin"
FILES = ("main.js", "manifest.json", "styles.css")


def snapshot(root: Path, skip: Path | None = None) -> dict[str, str]:
    """Every file under ``root`` (except under ``skip``) → its SHA-256."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not (skip and p.is_relative_to(skip)):
            out[p.relative_to(root).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def vault(tmp_path) -> Path:
    """A copy of the sample vault as Obsidian leaves it once opened: with a .obsidian folder."""
    dest = tmp_path / "vault"
    shutil.copytree(SAMPLE_VAULT, dest)
    if not (dest / ".obsidian").is_dir():
        (dest / ".obsidian").mkdir()
        (dest / ".obsidian" / "app.json").write_text("{}", encoding="utf-8")
    return dest


def test_install_copies_the_three_plugin_files_and_touches_nothing_else(vault, capsys):
    plugin_dir = vault / ".obsidian" / "plugins" / "cairn"
    before = snapshot(vault)
    assert main(["plugin", "install", "--vault", str(vault)]) == 0
    for name in FILES:
        assert (plugin_dir / name).read_bytes() == (SHIPPED / name).read_bytes(), name
    assert sorted(p.name for p in plugin_dir.iterdir()) == sorted(FILES)  # no temp files left behind
    assert snapshot(vault, skip=plugin_dir) == before  # every note and config file unchanged, none added
    out = capsys.readouterr().out
    version = json.loads((SHIPPED / "manifest.json").read_text(encoding="utf-8"))["version"]
    assert f"Installed the Cairn plugin {version} into {plugin_dir}" in out
    assert "cairn token" in out


def test_reinstalling_updates_the_files_but_keeps_the_plugins_settings(vault, capsys):
    plugin_dir = vault / ".obsidian" / "plugins" / "cairn"
    plugin_dir.mkdir(parents=True)
    (plugin_dir / "main.js").write_text("// an older build", encoding="utf-8")
    settings = '{"daemonUrl": "", "token": "kept-token-0123456789", "topK": 5, "defaultTags": ["garden"]}'
    (plugin_dir / "data.json").write_text(settings, encoding="utf-8")
    assert main(["plugin", "install", "--vault", str(vault)]) == 0
    assert (plugin_dir / "main.js").read_bytes() == (SHIPPED / "main.js").read_bytes()
    assert (plugin_dir / "data.json").read_text(encoding="utf-8") == settings
    assert "kept-token" not in capsys.readouterr().out


def test_a_folder_that_is_not_an_obsidian_vault_is_refused_and_left_alone(tmp_path, capsys):
    folder = tmp_path / "notes"
    shutil.copytree(SAMPLE_VAULT, folder)
    shutil.rmtree(folder / ".obsidian", ignore_errors=True)
    before = snapshot(folder)
    assert main(["plugin", "install", "--vault", str(folder)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "has no .obsidian folder" in err and "--vault" in err
    assert snapshot(folder) == before and not (folder / ".obsidian").exists()


def test_a_plugins_folder_that_links_outside_the_vault_is_not_written_through(vault, tmp_path, capsys):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (vault / ".obsidian" / "plugins").symlink_to(outside, target_is_directory=True)
    assert main(["plugin", "install", "--vault", str(vault)]) == 1
    assert "symbolic link" in capsys.readouterr().err
    assert list(outside.iterdir()) == []


def test_install_from_a_build_folder_missing_files_says_how_to_build(vault, tmp_path, capsys):
    build = tmp_path / "build"
    build.mkdir()
    (build / "manifest.json").write_text('{"version": "9.9.9"}', encoding="utf-8")
    assert main(["plugin", "install", "--vault", str(vault), "--from", str(build)]) == 1
    err = capsys.readouterr().err
    assert "main.js, styles.css missing" in err and "npm run build" in err
    assert not (vault / ".obsidian" / "plugins" / "cairn").exists()


def test_install_from_a_build_folder_copies_that_build(vault, tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    for name in FILES:
        (build / name).write_text(
            f"/* fresh {name} */" if name != "manifest.json" else '{"version": "9.9.9"}', encoding="utf-8"
        )
    assert main(["plugin", "install", "--vault", str(vault), "--from", str(build)]) == 0
    assert (vault / ".obsidian" / "plugins" / "cairn" / "main.js").read_text(encoding="utf-8") == "/* fresh main.js */"

"""``cairn plugin install --vault PATH``: the built Obsidian plugin copied into ``<vault>/.obsidian/plugins/cairn/``
with the vault's own API token in its ``data.json`` — the one owner-requested write into a vault — and nothing
else in the vault touched.

Runs the real CLI entry point on a temp copy of examples/vault (never the repo's own copy).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from cairn.cli import main
from cairn.config import load_config
from cairn.secrets import read_token

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


def _vault_token(vault: Path) -> str | None:
    return read_token(load_config({"vault": str(vault)}))


def test_install_copies_the_plugin_with_the_vaults_token_and_touches_nothing_else(vault, capsys):
    plugin_dir = vault / ".obsidian" / "plugins" / "cairn"
    before = snapshot(vault)
    assert main(["plugin", "install", "--vault", str(vault)]) == 0
    for name in FILES:
        assert (plugin_dir / name).read_bytes() == (SHIPPED / name).read_bytes(), name
    assert sorted(p.name for p in plugin_dir.iterdir()) == sorted([*FILES, "data.json"])  # no temp files left
    assert snapshot(vault, skip=plugin_dir) == before  # every note and config file unchanged, none added
    token = _vault_token(vault)
    assert token and json.loads((plugin_dir / "data.json").read_text(encoding="utf-8")) == {"token": token}
    if os.name == "posix":
        assert stat.S_IMODE((plugin_dir / "data.json").stat().st_mode) == 0o600  # it holds the token
    out = capsys.readouterr().out
    version = json.loads((SHIPPED / "manifest.json").read_text(encoding="utf-8"))["version"]
    assert f"Installed the Cairn plugin {version} into {plugin_dir}, with this vault's API token" in out
    assert "travels with the vault" in out and token not in out


def test_reinstalling_updates_the_files_and_the_token_but_keeps_the_plugins_other_settings(vault, capsys):
    plugin_dir = vault / ".obsidian" / "plugins" / "cairn"
    plugin_dir.mkdir(parents=True)
    (plugin_dir / "main.js").write_text("// an older build", encoding="utf-8")
    settings = {"daemonUrl": "", "token": "pasted-token-0123456789", "topK": 5, "defaultTags": ["garden"], "x": 1}
    (plugin_dir / "data.json").write_text(json.dumps(settings), encoding="utf-8")
    assert main(["plugin", "install", "--vault", str(vault)]) == 0
    assert (plugin_dir / "main.js").read_bytes() == (SHIPPED / "main.js").read_bytes()
    saved = json.loads((plugin_dir / "data.json").read_text(encoding="utf-8"))
    assert saved == {**settings, "token": _vault_token(vault)}
    assert "pasted-token" not in capsys.readouterr().out


def test_a_plugin_data_file_that_is_not_json_is_left_as_it_is_with_an_error_naming_it(vault, capsys):
    plugin_dir = vault / ".obsidian" / "plugins" / "cairn"
    plugin_dir.mkdir(parents=True)
    (plugin_dir / "data.json").write_text("{not json", encoding="utf-8")
    assert main(["plugin", "install", "--vault", str(vault)]) == 1
    err = capsys.readouterr().err
    assert str(plugin_dir / "data.json") in err and "fix it or delete it" in err
    assert (plugin_dir / "data.json").read_text(encoding="utf-8") == "{not json"
    assert sorted(p.name for p in plugin_dir.iterdir()) == ["data.json"]


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

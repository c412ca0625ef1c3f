"""One version: ``cairn.__version__`` is the source; every file that must repeat it carries the same one.

pyproject.toml reads it (``dynamic = ["version"]``); the Obsidian plugin's manifest, package files and the
OpenAPI document are JSON that npm, Obsidian and API clients read as they are, so they are checked here.
"""

from __future__ import annotations

import json
import re
import tomllib

import pytest

from cairn import __version__
from support.vaults import REPO

PLUGIN = REPO / "packaging" / "obsidian-plugin"
VERSIONED_JSON = [
    (PLUGIN / "manifest.json", ("version",)),
    (PLUGIN / "package.json", ("version",)),
    (PLUGIN / "package-lock.json", ("version",)),
    (PLUGIN / "package-lock.json", ("packages", "", "version")),
    (REPO / "daemon" / "cairn" / "obsidian_plugin" / "manifest.json", ("version",)),
    (REPO / "daemon" / "cairn" / "openapi.json", ("info", "version")),
]


def test_the_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__), __version__


def test_pyproject_takes_the_version_from_the_package():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "cairn.__version__"}


@pytest.mark.parametrize(("path", "keys"), VERSIONED_JSON, ids=lambda v: "/".join(v) if isinstance(v, tuple) else None)
def test_every_json_file_that_names_the_version_names_cairns(path, keys):
    value = json.loads(path.read_text(encoding="utf-8"))
    for key in keys:
        value = value[key]
    assert value == __version__, f"{path.relative_to(REPO)}: {'.'.join(keys) or 'version'} is {value}"


def test_the_plugin_lists_this_version_with_its_minimum_obsidian_version():
    versions = json.loads((PLUGIN / "versions.json").read_text(encoding="utf-8"))
    manifest = json.loads((PLUGIN / "manifest.json").read_text(encoding="utf-8"))
    assert versions.get(__version__) == manifest["minAppVersion"]


def test_the_changelog_has_an_unreleased_section_and_this_version():
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in text
    assert re.search(rf"^## \[{re.escape(__version__)}\]", text, re.M), "CHANGELOG.md has no section for it"

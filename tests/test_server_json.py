"""server.json, the MCP Registry's description of Cairn (the PyPI package ``cairn-notes``, launched with ``uvx``):
it agrees with pyproject.toml and the CLI, and is valid against the registry's published schema.

The schema is the one its ``$schema`` names (the registry's 2025-12-11 format). It is not kept in this repository:
the validity test reads it from ``CAIRN_MCP_SERVER_SCHEMA`` (a path to the downloaded file) and skips with one line
naming the URL without it. That server.json actually starts a working MCP server is tests/test_agent_install.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import cairn
from cairn.config import SETTINGS
from support.vaults import REPO

SCHEMA_URL = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
SERVER = json.loads((REPO / "server.json").read_text(encoding="utf-8"))
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_server_json_names_the_pypi_package_and_version_pyproject_builds():
    assert SERVER["$schema"] == SCHEMA_URL
    assert SERVER["version"] == cairn.__version__
    (package,) = SERVER["packages"]
    assert (package["registryType"], package["registryBaseUrl"]) == ("pypi", "https://pypi.org")
    assert package["identifier"] == PROJECT["name"] == "cairn-notes"
    assert package["version"] == cairn.__version__
    # MCP clients run `uvx <identifier> ARGS`: the package's name must be one of its commands, the same as `cairn`.
    assert PROJECT["scripts"][package["identifier"]] == PROJECT["scripts"]["cairn"]
    assert (package["runtimeHint"], package["transport"]) == ("uvx", {"type": "stdio"})


def test_server_json_arguments_and_variables_are_ones_cairn_mcp_takes():
    (package,) = SERVER["packages"]
    first, *named = package["packageArguments"]
    assert first == {"type": "positional", "value": "mcp"}
    usage = subprocess.run(
        [sys.executable, "-m", "cairn", "mcp", "--help"], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert [a["name"] for a in named] == ["--vault", "--client"]
    assert all(re.search(rf"^\s+{a['name']} ", usage, re.M) for a in named), usage
    assert [a["name"] for a in named if a.get("isRequired")] == ["--vault"]
    envs = {s.env for s in SETTINGS if s.env}
    assert {v["name"] for v in package["environmentVariables"]} <= envs


def test_the_readme_carries_the_mcp_name_the_registry_checks_on_pypi():
    """The registry proves a PyPI package is the publisher's by ``mcp-name: <name>`` in its description (the
    README, pyproject's ``readme``)."""
    assert PROJECT["readme"] == "README.md"
    assert f"mcp-name: {SERVER['name']}" in (REPO / "README.md").read_text(encoding="utf-8")


def test_server_json_is_valid_against_the_registry_schema():
    path = os.environ.get("CAIRN_MCP_SERVER_SCHEMA", "")
    if not path:
        pytest.skip(f"set CAIRN_MCP_SERVER_SCHEMA to a downloaded copy of {SCHEMA_URL} to check server.json against it")
    from jsonschema import Draft7Validator, FormatChecker

    schema = json.loads(Path(path).read_text(encoding="utf-8"))
    assert schema["$id"] == SCHEMA_URL, f"{path} is not the schema server.json names"
    Draft7Validator.check_schema(schema)
    errors = sorted(Draft7Validator(schema, format_checker=FormatChecker()).iter_errors(SERVER), key=str)
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)
    bad = {**SERVER, "description": "x" * 101}  # the check can fail: the registry's limit is 100 characters
    assert list(Draft7Validator(schema).iter_errors(bad))

"""Cairn installed as a user installs a tool: from the built wheel into a clean venv outside the checkout.

The wheel is built once per session (the ``cairn_wheel`` fixture: ``pip wheel`` on a copy of the source tree, so
the checkout keeps no ``build/`` folder) and installed into a fresh venv with no pip of its own (this interpreter's
pip installs into it, without compiling bytecode: the slow part of an install). ``cairn index`` and ``cairn ask``
then run from that venv on a copy of examples/vault, in a folder outside the repository, with no ``PYTHONPATH``
and no ``CAIRN_MODEL_DIR``: the embedding model and the Obsidian plugin have to come from the wheel. Skipped,
with the reason, when pip cannot reach the package registry; any other failure fails.

What each make target installs is checked in tests/test_make_targets.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.built_wheel import pip
from support.vaults import REPO, SAMPLE_VAULT

RUN_TIMEOUT_S = 300
TEST_ONLY = ("pytest", "playwright", "schemathesis", "ruff", "mypy")
#: Run by the installed interpreter: where its cairn and model are, and which of the modules in argv it finds.
PROBE = """
import importlib.util, json, sys
import cairn, cairn.embedder
print(json.dumps({
    "package": cairn.__file__,
    "model": str(cairn.embedder.DEFAULT_MODEL_DIR.resolve()),
    "test_only": [m for m in sys.argv[1:] if importlib.util.find_spec(m)],
}))
"""


@pytest.fixture(scope="session")
def tool_venv(tmp_path_factory, cairn_wheel) -> Path:
    """The wheel installed into a clean venv, once per session → the venv's folder."""
    venv = tmp_path_factory.mktemp("tool") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=RUN_TIMEOUT_S)
    python = str(venv / "bin" / "python")
    pip(["--python", python, "install", "--quiet", "--no-compile", str(cairn_wheel)], "install it")
    return venv


@pytest.fixture
def outside(tmp_path) -> tuple[Path, dict[str, str]]:
    """A working folder outside the checkout and an environment that knows nothing of it."""
    home = tmp_path / "home"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "TMPDIR": str(tmp_path),
        "CAIRN_DATA_DIR": str(home / "data"),
        "CAIRN_CONFIG_DIR": str(home / "config"),
        "CAIRN_LOG_DIR": str(home / "log"),
        "CAIRN_KEYRING": "file",
    }
    return tmp_path, env


def _run(venv: Path, args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
    return done


@pytest.mark.slow
@pytest.mark.e2e
def test_the_wheel_carries_the_model_and_plugin_and_not_the_test_stack(tool_venv, outside):
    cwd, env = outside
    found = json.loads(_run(tool_venv, ["python", "-c", PROBE, *TEST_ONLY], cwd, env).stdout)
    assert Path(found["package"]).is_relative_to(tool_venv), found
    model = Path(found["model"])
    assert model.is_relative_to(tool_venv), f"the installed Cairn reads its model from {model}, outside its venv"
    manifest = json.loads((model / "manifest.json").read_text(encoding="utf-8"))
    shipped = manifest["files"][manifest["default"]]  # the variant Cairn runs; the others stay in the checkout
    assert hashlib.sha256((model / shipped["file"]).read_bytes()).hexdigest() == shipped["sha256"]
    assert found["test_only"] == [], "installing Cairn pulled in its test stack"


@pytest.mark.slow
@pytest.mark.e2e
def test_index_and_ask_from_the_installed_wheel_on_the_sample_vault(tool_venv, outside):
    cwd, env = outside
    vault = cwd / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    notes = sum(1 for p in vault.rglob("*.md") if ".obsidian" not in p.parts)
    indexed = _run(tool_venv, ["cairn", "index", "--vault", str(vault)], cwd, env)
    assert f"{notes} files scanned — {notes} added" in indexed.stdout, indexed.stdout + indexed.stderr
    asked = _run(tool_venv, ["cairn", "ask", "--vault", str(vault), "When do I sow tomatoes?"], cwd, env)
    answer, _, sources = asked.stdout.partition("Sources:")
    assert answer.strip() and "[1]" in answer, asked.stdout
    assert sources.lstrip().startswith("[1] Garden/Tomatoes.md"), asked.stdout


@pytest.mark.slow
@pytest.mark.e2e
def test_plugin_install_from_the_installed_wheel_copies_the_shipped_build(tool_venv, outside):
    cwd, env = outside
    vault = cwd / "vault"
    (vault / ".obsidian").mkdir(parents=True)
    _run(tool_venv, ["cairn", "plugin", "install", "--vault", str(vault)], cwd, env)
    for name in ("main.js", "manifest.json", "styles.css"):
        installed = vault / ".obsidian" / "plugins" / "cairn" / name
        assert installed.read_bytes() == (REPO / "daemon" / "cairn" / "obsidian_plugin" / name).read_bytes(), name

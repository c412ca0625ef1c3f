"""Cairn installed as a user installs a tool: from the built wheel into a clean venv outside the checkout.

The wheel is built once per session (``pip wheel`` on a copy of the source tree, so the checkout keeps no
``build/`` folder) and installed into a fresh venv with no pip of its own (this interpreter's pip installs into
it, without compiling bytecode: the slow part of an install). ``cairn index`` and ``cairn ask`` then run from
that venv on a copy of examples/vault, in a folder outside the repository, with no ``PYTHONPATH`` and no
``CAIRN_MODEL_DIR``: the embedding model and the Obsidian plugin have to come from the wheel. Skipped, with
the reason, when pip cannot reach the package registry; any other failure fails.

``make run`` installs only what running needs and ``make test`` adds the ``[test]`` extras: checked on the
commands ``make -n`` would run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, SAMPLE_VAULT

PIP_TIMEOUT_S = 900
RUN_TIMEOUT_S = 300
#: Not part of the source tree a wheel is built from.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "node_modules", "build", "dist", ".eval-cache", ".build-model-venv", "__pycache__",
    ".pytest_cache", "*.egg-info", "tests", "docs", "examples",
)  # fmt: skip
#: pip's words for "the package index could not be reached".
_OFFLINE = re.compile(
    r"Failed to establish a new connection|Temporary failure in name resolution|Network is unreachable|"
    r"No matching distribution found|Could not find a version that satisfies",
    re.I,
)
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


def _pip(args: list[str], what: str) -> None:
    # Without PYTHONPATH: a checkout on it (daemon/, with an editable install's cairn_notes.egg-info) would make
    # pip take Cairn as installed already and leave it out of the new venv.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", *args], env=env, capture_output=True, text=True, timeout=PIP_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"pip ({what}) took longer than {PIP_TIMEOUT_S} s")
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if _OFFLINE.search(output):
            pytest.skip(f"pip could not reach the package registry ({what}):\n{output[-1500:]}")
        raise AssertionError(f"pip ({what}) failed (exit {done.returncode}):\n{output[-4000:]}")


@pytest.fixture(scope="session")
def tool_venv(tmp_path_factory) -> Path:
    """Build the wheel and install it into a clean venv, once per session → the venv's folder."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=NOT_SOURCE)
    _pip(["wheel", "--quiet", "--no-deps", "--wheel-dir", str(root / "dist"), str(source)], "build the wheel")
    shutil.rmtree(source)
    (wheel,) = (root / "dist").glob("cairn_notes-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=RUN_TIMEOUT_S)
    _pip(["--python", str(venv / "bin" / "python"), "install", "--quiet", "--no-compile", str(wheel)], "install it")
    wheel.unlink()
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


def _make_dry_run(target: str) -> str:
    with tempfile.TemporaryDirectory() as venv:  # a venv make has not built: every install step is listed
        done = subprocess.run(
            ["make", "-n", "-C", str(REPO), target, f"VENV={venv}/v"], capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_run_installs_only_what_running_needs_and_make_test_adds_the_test_extras():
    run_installs = [line for line in _make_dry_run("run").splitlines() if "pip install" in line]
    assert run_installs and not any("[test]" in line for line in run_installs), run_installs
    assert any("-e '.[test]'" in line for line in _make_dry_run("test").splitlines()), "make test lacks [test]"

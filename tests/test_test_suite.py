"""The test suite's own shape: test modules stand apart, shared builders live in ``tests/support/``, files stay small.

A test module that imports another runs that module's fixtures and module-level set-up as a side effect and ties two
files' refactors together; a helper reached through ``conftest`` or a test module is one a newcomer cannot find. So a
test module (``test_*.py``, ``conftest.py``) and a support module import shared code from :mod:`support` only, never
from a test module or ``conftest``, and no other Python file sits loose beside the tests. Checked on the source (every
``import``, at any depth), as :mod:`test_layers` checks the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
MAX_LINES = 600


def _suite_files() -> list[Path]:
    """The test modules, ``conftest.py`` and the support modules."""
    return sorted([*TESTS.glob("test_*.py"), TESTS / "conftest.py", *(TESTS / "support").glob("*.py")])


def _local_names() -> set[str]:
    """The module names a file under ``tests/`` resolves to itself (pytest puts ``tests/`` on ``sys.path``)."""
    return {p.stem for p in TESTS.glob("*.py")}


def imported_test_modules(source: str, local: set[str]) -> list[tuple[int, str]]:
    """(line, module) for each import in ``source`` of a module of ``local`` (one beside the tests, e.g.
    ``test_http_api`` or ``conftest``) or of ``tests.<module>``: every such import is one test module leaning on
    another."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            head, _, rest = name.partition(".")
            if head in local or (head == "tests" and rest.partition(".")[0] in local):
                found.append((node.lineno, name))
    return found


@pytest.mark.parametrize("path", _suite_files(), ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_module_imports_another(path):
    found = imported_test_modules(path.read_text(encoding="utf-8"), _local_names())
    assert not found, f"{path.name} imports test modules (move what they share to tests/support/): {found}"


def test_only_test_modules_and_conftest_sit_beside_the_tests():
    loose = [p.name for p in TESTS.glob("*.py") if not p.name.startswith("test_") and p.name != "conftest.py"]
    assert not loose, f"helpers beside the tests belong in tests/support/: {loose}"


def test_no_python_file_of_the_tests_is_over_600_lines():
    long = {str(p.relative_to(TESTS)): n for p in TESTS.rglob("*.py") if (n := _lines(p)) > MAX_LINES}
    assert not long, f"split these by what they test (at most {MAX_LINES} lines each): {long}"


def _lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def test_the_check_sees_imports_inside_functions_and_dotted_ones():
    source = (
        "import os\n"
        "from support.cli import run_cairn\n"
        "def f():\n"
        "    from test_http_api import AUTH\n"
        "import conftest\n"
        "from tests.test_cli import x\n"
        "from . import sibling\n"
    )
    found = imported_test_modules(source, {"test_http_api", "test_cli", "conftest", "test_test_suite"})
    assert sorted(found) == [(4, "test_http_api"), (5, "conftest"), (6, "tests.test_cli")]

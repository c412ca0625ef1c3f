"""The layering rules of DESIGN.md (Layout), checked with ``ast`` over every module of ``daemon/cairn``.

4 composition  app, cli, __main__
3 adapters     http/, mcp_server, watcher, tray, llm
2 use cases    indexer, search/, answers/, events
1 resources    store/, embedder, embedding, vault/, secrets, audit (the MCP audit log)
0 pure core    errors, config, policy, notes, chunking, ranking, prompt

Every import counts: top-level, inside functions, under ``if TYPE_CHECKING:``, relative
(``from . import x``) and ``importlib.import_module("cairn.x")`` with a constant name.
A module that is not in the table fails the test: a new module must be given a layer here
and in DESIGN.md.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "daemon" / "cairn"

LAYERS: dict[str, int] = {
    # 0 pure core; ``cairn`` itself is the package __init__ (only ``__version__``).
    "cairn": 0,
    "errors": 0,
    "config": 0,
    "policy": 0,
    "notes": 0,
    "chunking": 0,
    "ranking": 0,
    "prompt": 0,
    "contract": 0,
    # 1 resources
    "store": 1,
    "embedder": 1,
    "embedding": 1,
    "vault": 1,
    "secrets": 1,
    "audit": 1,
    # the OS's login-items folders (files in the user's folders, like secrets' token file): a resource
    "autostart": 1,
    # the owner's policy file and the live holder that reloads it (parsing is policy, layer 0)
    "policy_file": 1,
    # the daemon's discovery record (service files in the data folder)
    "discovery": 1,
    # 2 use cases
    "indexer": 2,
    # what links resolve against during indexing (the vault's file list, the notes' aliases)
    "link_targets": 2,
    # one text-phase run of the indexer (batches of changed notes, parse workers)
    "text_phase": 2,
    "search": 2,
    "events": 2,
    "answers": 2,
    "library": 2,
    "indexing": 2,
    "pdf_index": 2,
    "services": 2,
    # 3 adapters
    "http": 3,
    "mcp_server": 3,
    "watcher": 3,
    "tray": 3,
    "llm": 3,
    # 4 composition root
    "app": 4,
    "cli": 4,
    "__main__": 4,
}
ADAPTER_LAYER = 3
COMPOSITION = {"app", "cli", "__main__"}
#: Who may import a composition-root module at all.
MAY_IMPORT_COMPOSITION = {"__main__", "cli"}
#: Only these may print to stdout (stdout is the MCP stdio wire everywhere else).
STDOUT_WRITERS = {"cli", "__main__"}
#: Third-party modules owned by one unit (DESIGN.md: store/ has all SQL, embedder all onnxruntime/tokenizers).
OWNED_THIRD_PARTY = {
    "onnxruntime": {"embedder"},
    "tokenizers": {"embedder"},
    "apsw": {"store"},
    "pystray": {"tray"},
    "PIL": {"tray"},
    "pyperclip": {"tray"},
}


@dataclass(frozen=True)
class Import:
    module: str  # dotted name as imported, e.g. "cairn.store.schema" or "onnxruntime"
    line: int


def _source_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _dotted(path: Path) -> str:
    """``daemon/cairn/store/schema.py`` → ``cairn.store.schema``; ``cairn/__init__.py`` → ``cairn``."""
    parts = ["cairn", *path.relative_to(PACKAGE).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit(dotted: str) -> str:
    """The layer-table unit of a ``cairn.*`` module: ``cairn.store.schema`` → ``store``; ``cairn`` → ``cairn``."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "cairn"


def _imports(path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    me = _dotted(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(tree):  # ast.walk visits function bodies and `if TYPE_CHECKING:` blocks too
        if isinstance(node, ast.Import):
            found += [Import(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append(Import(target, node.lineno))
            # `from cairn import app` imports the module cairn.app
            if target == "cairn":
                found += [Import(f"cairn.{alias.name}", node.lineno) for alias in node.names if alias.name in LAYERS]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if (
                name in {"import_module", "__import__"}
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.append(Import(node.args[0].value, node.lineno))
    return found


def _cairn_imports(path: Path) -> list[tuple[str, int]]:
    """(unit, line) of every ``cairn.*`` module imported by ``path`` (the bare package ``cairn`` included)."""
    return [(_unit(i.module), i.line) for i in _imports(path) if i.module.split(".")[0] == "cairn"]


FILES = _source_files()
IDS = [str(p.relative_to(PACKAGE)) for p in FILES]


def test_the_package_has_the_modules_the_checks_are_about():
    units = {_unit(_dotted(p)) for p in FILES}
    assert {"errors", "config", "store", "embedder", "indexer", "search", "http", "app", "cli"} <= units


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_module_has_a_layer(path):
    unit = _unit(_dotted(path))
    assert unit in LAYERS, f"{path.relative_to(PACKAGE)}: module {unit!r} has no layer; add it to DESIGN.md and LAYERS"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_a_module_imports_only_its_own_layer_or_lower(path):
    me = _unit(_dotted(path))
    bad = [
        f"line {line}: imports cairn.{unit} (layer {LAYERS.get(unit)}) from layer {LAYERS[me]}"
        for unit, line in _cairn_imports(path)
        if unit in LAYERS and LAYERS[unit] > LAYERS[me]
    ]
    unknown = [
        f"line {line}: imports unknown module cairn.{unit}" for unit, line in _cairn_imports(path) if unit not in LAYERS
    ]
    assert not bad + unknown, f"{path.relative_to(PACKAGE)} ({me}):\n" + "\n".join(bad + unknown)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_adapters_never_import_each_other(path):
    me = _unit(_dotted(path))
    if LAYERS.get(me) != ADAPTER_LAYER:
        return
    bad = [
        f"line {line}: imports adapter cairn.{unit}"
        for unit, line in _cairn_imports(path)
        if unit != me and LAYERS.get(unit) == ADAPTER_LAYER
    ]
    assert not bad, f"{path.relative_to(PACKAGE)} ({me}):\n" + "\n".join(bad)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_nothing_imports_the_composition_root_except_main_and_cli(path):
    me = _unit(_dotted(path))
    if me in MAY_IMPORT_COMPOSITION:
        return
    bad = [
        f"line {line}: imports cairn.{unit}"
        for unit, line in _cairn_imports(path)
        if unit in COMPOSITION and unit != me
    ]
    assert not bad, f"{path.relative_to(PACKAGE)} ({me}):\n" + "\n".join(bad)


def _prints_to_stdout(path: Path) -> list[str]:
    """``print(...)`` calls without ``file=sys.stderr``, and any use of ``sys.stdout``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            target = next((kw.value for kw in node.keywords if kw.arg == "file"), None)
            if not (
                isinstance(target, ast.Attribute)
                and target.attr == "stderr"
                and isinstance(target.value, ast.Name)
                and target.value.id == "sys"
            ):
                found.append(f"line {node.lineno}: print() to stdout")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in {"stdout", "__stdout__"}
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        ):
            found.append(f"line {node.lineno}: uses sys.{node.attr}")
    return found


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_only_the_cli_prints_to_stdout(path):
    me = _unit(_dotted(path))
    if me in STDOUT_WRITERS:
        return
    found = _prints_to_stdout(path)
    assert not found, f"{path.relative_to(PACKAGE)}: stdout is reserved for the CLI (and the MCP wire):\n" + "\n".join(
        found
    )


@pytest.mark.parametrize("library", sorted(OWNED_THIRD_PARTY))
def test_heavy_libraries_are_imported_only_by_their_owner(library):
    owners = OWNED_THIRD_PARTY[library]
    bad = [
        f"{p.relative_to(PACKAGE)} line {i.line}: imports {i.module}"
        for p in FILES
        for i in _imports(p)
        if i.module.split(".")[0] == library and _unit(_dotted(p)) not in owners
    ]
    assert not bad, f"only {', '.join(sorted(owners))} may import {library}:\n" + "\n".join(bad)


def test_the_checker_sees_imports_inside_functions_type_checking_blocks_and_relative_ones(tmp_path):
    """Self-check of the checker on a throwaway module laid out like the package."""
    global PACKAGE
    saved = PACKAGE
    fake = tmp_path / "cairn"
    (fake / "store").mkdir(parents=True)
    (fake / "store" / "schema.py").write_text("x = 1\n")
    (fake / "store" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import schema\n"
        "from .schema import x\n"
        "if TYPE_CHECKING:\n    from cairn.query import Answer\n"
        "def f():\n    import apsw\n    from cairn import app\n    print('hi')\n"
        "def g():\n    import importlib\n    importlib.import_module('cairn.http')\n    print('ok', file=sys.stderr)\n"
    )
    PACKAGE = fake
    try:
        path = fake / "store" / "__init__.py"
        assert _dotted(path) == "cairn.store"
        modules = [i.module for i in _imports(path)]
        assert {"cairn.store", "cairn.store.schema", "cairn.query", "apsw", "cairn.app", "cairn.http"} <= set(modules)
        units = {u for u, _ in _cairn_imports(path)}
        assert {"store", "query", "app", "http"} <= units
        assert _prints_to_stdout(path) == ["line 9: print() to stdout"]
    finally:
        PACKAGE = saved

"""The layering rules of docs/architecture.md, checked with ``ast`` over every module of ``daemon/cairn``.

The layer of each module is read from the layer table of docs/architecture.md (the one place it is
written): 4 composition, 3 adapters, 2 use cases, 1 resources, 0 pure core. A module imports only from
its own layer or lower; adapters never import each other; nothing imports the composition root.

Every import counts: top-level, inside functions, under ``if TYPE_CHECKING:``, relative
(``from . import x``) and ``importlib.import_module("cairn.x")`` with a constant name.
A module that is not in the table fails the test (a new module must be given a layer there), and so
does a row naming a module that does not exist. Apart from the layers, no two modules import each other, directly or
round a loop, when they are imported (imports inside functions and under ``if TYPE_CHECKING:`` do not run then).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "daemon" / "cairn"
ARCHITECTURE = REPO / "docs" / "architecture.md"
TABLE_START = "<!-- layer table: start -->"
TABLE_END = "<!-- layer table: end -->"
#: One row of the layer table: ``| `unit` or `unit/` | layer digit | what it holds |``.
_ROW = re.compile(r"^\| `(?P<unit>[A-Za-z_][A-Za-z0-9_]*)/?` \| (?P<layer>[0-4]) \|")


def _table_rows(text: str, start: str = TABLE_START, end: str = TABLE_END) -> list[str]:
    """The table lines between the two markers, header and separator left out."""
    if start not in text or end not in text:
        raise ValueError(f"{ARCHITECTURE}: the markers {start!r} and {end!r} are missing")
    section = text.split(start, 1)[1].split(end, 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    return lines[2:]


def read_layers(text: str) -> dict[str, int]:
    """``{unit: layer}`` from the layer table of docs/architecture.md; ``ValueError`` on a malformed or
    repeated row (so no row is ever skipped silently)."""
    layers: dict[str, int] = {}
    for line in _table_rows(text):
        m = _ROW.match(line)
        if m is None:
            raise ValueError(f"{ARCHITECTURE}: not a layer-table row: {line!r}")
        if m["unit"] in layers:
            raise ValueError(f"{ARCHITECTURE}: {m['unit']!r} has two rows")
        layers[m["unit"]] = int(m["layer"])
    return layers


#: ``{unit: layer}``; a unit is a top-level module or package of ``cairn`` (``cairn`` itself: its __init__).
LAYERS: dict[str, int] = read_layers(ARCHITECTURE.read_text(encoding="utf-8"))
ADAPTER_LAYER = 3
COMPOSITION = {"app", "cli", "__main__"}
#: Who may import a composition-root module at all.
MAY_IMPORT_COMPOSITION = {"__main__", "cli"}
#: Only these may print to stdout (stdout is the MCP stdio wire everywhere else).
STDOUT_WRITERS = {"cli", "__main__"}
#: Third-party modules owned by one unit (docs/design.md, "Layers": store/ has all SQL, embedder all
#: onnxruntime/tokenizers).
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


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _imports(path: Path) -> list[Import]:
    tree = _tree(path)
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
    assert {"errors", "config", "store", "embedder", "index", "search", "http", "app", "cli"} <= units


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_module_has_a_layer(path):
    unit = _unit(_dotted(path))
    assert unit in LAYERS, (
        f"{path.relative_to(PACKAGE)}: module {unit!r} has no layer; add its row to the layer table of {ARCHITECTURE}"
    )


def test_every_row_of_the_layer_table_is_a_module_of_the_package():
    units = {_unit(_dotted(p)) for p in FILES}
    stale = sorted(set(LAYERS) - units)
    assert not stale, f"{ARCHITECTURE} gives a layer to modules that do not exist: {', '.join(stale)}"


def test_a_malformed_or_repeated_row_of_the_layer_table_is_an_error():
    header = "| Module | Layer | What |\n| --- | --- | --- |\n"
    table = f"{TABLE_START}\n{header}| `store/` | 1 | SQL |\n{{row}}\n{TABLE_END}\n"
    assert read_layers(table.format(row="| `notes` | 0 | front-matter |")) == {"store": 1, "notes": 0}
    for row in ("| notes | 0 | no backticks |", "| `notes` | zero | no digit |", "| `store` | 1 | twice |"):
        with pytest.raises(ValueError):
            read_layers(table.format(row=row))
    with pytest.raises(ValueError):
        read_layers("no table here")


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


#: Packages whose modules are private to them: outside, only the names their ``__init__`` exports are imported.
SEALED = {"search", "index"}


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_a_sealed_package_is_imported_through_its_exports_only(path):
    me = _unit(_dotted(path))
    bad = [
        f"line {i.line}: imports {i.module}; import its names from cairn.{_unit(i.module)}"
        for i in _imports(path)
        if i.module.split(".")[0] == "cairn" and _unit(i.module) in SEALED - {me} and i.module.count(".") > 1
    ]
    assert not bad, f"{path.relative_to(PACKAGE)} ({me}):\n" + "\n".join(bad)


def _prints_to_stdout(path: Path) -> list[str]:
    """``print(...)`` calls without ``file=sys.stderr``, and any use of ``sys.stdout``."""
    tree = _tree(path)
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
        "def g():\n    import importlib\n    importlib.import_module('cairn.http')\n"
        "    print('ok', file=sys.stderr)\n"
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


#: The floors of the modules of ``index/`` (docs/architecture.md, "The flow of a save"): inside the package a
#: module imports only modules on a lower floor, so nothing there calls back up and no two of them import each other.
INDEX_START = "<!-- index floors: start -->"
INDEX_END = "<!-- index floors: end -->"
INDEX = PACKAGE / "index"


def read_index_floors(text: str) -> dict[str, int]:
    """``{module: floor}`` from the index floors table of docs/architecture.md."""
    floors: dict[str, int] = {}
    for line in _table_rows(text, INDEX_START, INDEX_END):
        m = re.match(r"^\| `(?P<unit>[a-z_]+)` \| (?P<floor>\d+) \|", line)
        if m is None or m["unit"] in floors:
            raise ValueError(f"{ARCHITECTURE}: not an index floors row, or a repeated one: {line!r}")
        floors[m["unit"]] = int(m["floor"])
    return floors


INDEX_FLOORS = read_index_floors(ARCHITECTURE.read_text(encoding="utf-8"))
INDEX_FILES = sorted(p for p in INDEX.glob("*.py") if p.name != "__init__.py")


def test_every_module_of_the_index_package_has_a_floor_and_every_floor_a_module():
    assert {p.stem for p in INDEX_FILES} == set(INDEX_FLOORS), f"the index floors table of {ARCHITECTURE} is stale"


@pytest.mark.parametrize("path", INDEX_FILES, ids=[p.name for p in INDEX_FILES])
def test_inside_the_index_package_a_module_imports_only_lower_floors(path):
    me = INDEX_FLOORS[path.stem]
    bad = [
        f"line {i.line}: imports {i.module} (floor {INDEX_FLOORS.get(i.module.split('.')[2])}) from floor {me}"
        if i.module.count(".") >= 2
        else f"line {i.line}: imports the package's face {i.module}"
        for i in _imports(path)
        if i.module.split(".")[:2] == ["cairn", "index"]
        and (i.module.count(".") < 2 or INDEX_FLOORS.get(i.module.split(".")[2], me) >= me)
    ]
    assert not bad, f"{path.relative_to(PACKAGE)}:\n" + "\n".join(bad)


# -- run-time import cycles -------------------------------------------------------------------------------


def _run_time_body(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported: at module level, in ``if`` / ``try`` blocks, but not under
    ``if TYPE_CHECKING:`` nor inside functions or classes' methods."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                yield from _run_time_body(node.body)
            yield from _run_time_body(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                yield from _run_time_body(block)


def run_time_graph(package: Path) -> dict[str, set[str]]:
    """``{module: the cairn modules it imports when imported}`` over ``package``. ``from pkg import sub`` depends
    on ``pkg.sub`` (``pkg`` is already being imported then), ``from pkg import name`` on ``pkg``."""
    files = {_dotted_in(package, p): p for p in sorted(package.rglob("*.py")) if "__pycache__" not in p.parts}
    graph: dict[str, set[str]] = {}
    for me, path in files.items():
        own = me if path.name == "__init__.py" else me.rpartition(".")[0]
        targets: set[str] = set()
        for node in _run_time_body(ast.parse(path.read_text(encoding="utf-8")).body):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
                continue
            base = own.split(".")[: len(own.split(".")) - (node.level - 1)] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            targets |= {f"{module}.{a.name}" if f"{module}.{a.name}" in files else module for a in node.names}
        graph[me] = {_owner(t, files) for t in targets if t.split(".")[0] == "cairn"} - {me, ""}
    return graph


def _dotted_in(package: Path, path: Path) -> str:
    parts = [package.name, *path.relative_to(package).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _owner(dotted: str, modules: dict[str, Path]) -> str:
    """The module ``dotted`` names, or the module holding it (``cairn.search.Hit`` → ``cairn.search``)."""
    while dotted and dotted not in modules:
        dotted = dotted.rpartition(".")[0]
    return dotted


def test_no_import_cycle_among_the_packages_modules_at_run_time():
    try:
        TopologicalSorter(run_time_graph(PACKAGE)).prepare()
    except CycleError as exc:
        pytest.fail(f"modules import one another when imported: {' → '.join(exc.args[1])}")


def test_the_cycle_check_sees_a_loop_through_a_package_face_and_not_one_under_type_checking(tmp_path):
    fake = tmp_path / "cairn"
    (fake / "search").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "search" / "__init__.py").write_text("from cairn.search.service import Service\n")
    (fake / "search" / "recent.py").write_text("from cairn.search import persisted\n")  # a submodule: no loop
    (fake / "search" / "persisted.py").write_text("x = 1\n")
    (fake / "search" / "service.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cairn.index import Index\n"
        "def f():\n    from cairn.index import Index\n"
    )
    (fake / "index.py").write_text("from cairn.search import Service\n")
    graph = run_time_graph(fake)
    assert graph["cairn.search.recent"] == {"cairn.search.persisted"}
    assert graph["cairn.search.service"] == set()
    TopologicalSorter(graph).prepare()  # no loop yet
    (fake / "search" / "service.py").write_text("import cairn.index\n")
    with pytest.raises(CycleError):
        TopologicalSorter(run_time_graph(fake)).prepare()

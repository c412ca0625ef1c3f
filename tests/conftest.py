"""Shared fixtures: isolated folders, the real model, real indexes of the sample vault and the help vault.

Nothing here touches the user's real config, data or keyring: every test session points
CAIRN_CONFIG_DIR / CAIRN_DATA_DIR / CAIRN_LOG_DIR at a temp dir and forces the file
token backend (CAIRN_KEYRING=file).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE_VAULT = REPO / "examples" / "vault"
SHARED = Path(os.environ.get("CAIRN_SHARED", REPO.parent / "shared"))
VAULTS = SHARED / "vaults"
HELP_VAULT = VAULTS / "obsidian-help"
HUB_VAULT = VAULTS / "obsidian-hub"


#: Fixtures whose set-up alone takes longer than ``make check`` can afford: a test using one is marked slow.
SLOW_FIXTURES = {"help_cairn"}  # indexes the whole obsidian-help vault with the real model
#: Fixtures that read the shared test data: a test using one is marked ``shared_data`` with these paths.
SHARED_FIXTURES = {"help_cairn": ("vaults/obsidian-help",)}
#: Set by CI (``.ci/run``), where ``../shared`` is always there: missing shared data fails instead of skipping.
REQUIRE_SHARED = os.environ.get("CAIRN_REQUIRE_SHARED", "") not in ("", "0")
#: Set by CI (``.ci/run``), whose ``make test`` installs the model server (``[llm]``): a test that needs it fails
#: instead of skipping when it is missing (``make check`` does not install it, and those tests skip there).
REQUIRE_MODEL_SERVER = os.environ.get("CAIRN_REQUIRE_MODEL_SERVER", "") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` every test that uses a fixture of :data:`SLOW_FIXTURES` and ``shared_data`` every test
    that uses one of :data:`SHARED_FIXTURES` (wherever the test lives).

    Such a test also gets a 1,200 s timeout unless it sets its own: the first one to run pays for the
    fixture's set-up (the whole help vault embedded), which on a loaded 2-core machine passes the 300 s
    default, and a failed session fixture fails every later test that uses it.
    """
    for item in items:
        names = getattr(item, "fixturenames", ())
        if SLOW_FIXTURES.intersection(names):
            item.add_marker(pytest.mark.slow)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(1200))
        for name in SHARED_FIXTURES.keys() & set(names):
            item.add_marker(pytest.mark.shared_data(*SHARED_FIXTURES[name]))


def pytest_runtest_setup(item):
    """Skip a test marked ``shared_data(path, ...)`` when a path is missing under :data:`SHARED`, before any
    fixture is built, with one line (the same for every such test) naming what is missing and where it goes."""
    needed = [rel for mark in item.iter_markers("shared_data") for rel in mark.args]
    missing = [rel for rel in needed if not (SHARED / rel).exists()]
    if not missing:
        return
    if not SHARED.is_dir():
        what = f"the shared test data folder ({SHARED} does not exist)"
    else:
        what = ", ".join(str(SHARED / rel) for rel in missing) + " (missing)"
    reason = (
        f"needs {what}: put shared/ (vaults/obsidian-help, vaults/obsidian-hub, eval/) beside this checkout "
        "as ../shared, or set CAIRN_SHARED=/path/to/shared"
    )
    if REQUIRE_SHARED:
        pytest.fail(f"CAIRN_REQUIRE_SHARED is set and a test {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session", autouse=True)
def _isolated_folders(tmp_path_factory):
    base = tmp_path_factory.mktemp("cairn-home")
    saved = {
        k: os.environ.get(k)
        for k in ("CAIRN_CONFIG_DIR", "CAIRN_DATA_DIR", "CAIRN_LOG_DIR", "CAIRN_KEYRING", "CAIRN_VAULT", "CAIRN_PORT")
    }
    os.environ.update(
        {
            "CAIRN_CONFIG_DIR": str(base / "config"),
            "CAIRN_DATA_DIR": str(base / "data"),
            "CAIRN_LOG_DIR": str(base / "log"),
            "CAIRN_KEYRING": "file",
        }
    )
    os.environ.pop("CAIRN_VAULT", None)
    os.environ.pop("CAIRN_PORT", None)
    yield base
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def cairn_wheel(tmp_path_factory) -> Path:
    """The wheel ``make wheel`` builds, built once per session (tests/built_wheel.py) → its path."""
    from built_wheel import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def embedder():
    """The real shipped ONNX model, loaded once per session."""
    from cairn.embedder import Embedder

    return Embedder()


def make_config(vault: Path, data_dir: Path):
    from cairn.config import load_config

    return load_config({"vault": str(vault), "data_dir": str(data_dir), "config_dir": str(data_dir / "config")}, env={})


@pytest.fixture
def vault_copy(tmp_path):
    """A writable copy of the sample vault (tests change files here, never in the repo)."""
    dest = tmp_path / "vault"
    shutil.copytree(SAMPLE_VAULT, dest)
    return dest


@pytest.fixture
def fresh_cairn(vault_copy, tmp_path, embedder):
    """A Cairn (store + indexer + query) over a writable copy of the sample vault, not yet indexed."""
    from cairn.app import Cairn

    cairn = Cairn(make_config(vault_copy, tmp_path / "data"), embedder=embedder)
    yield cairn
    cairn.close()


def indexed_cairn(vault, data_dir, embedder):
    """Yield a Cairn over ``vault`` with its index in ``data_dir``, fully indexed; closed afterwards."""
    from cairn.app import Cairn

    cairn = Cairn(make_config(vault, data_dir), embedder=embedder)
    cairn.indexing.index()
    yield cairn
    cairn.close()


def services_of(cairn, *, answers=None, indexing=None, events=None):
    """The :class:`~cairn.services.Services` the daemon wires over a real :class:`cairn.app.Cairn`
    (:func:`cairn.app.build_services`: answers from the passages, no model), with ``answers``, ``indexing`` or
    ``events`` put in their place when given."""
    from cairn.app import build_services

    services = build_services(cairn)
    given = {"answers": answers, "indexing": indexing, "events": events}
    return dataclasses.replace(services, **{k: v for k, v in given.items() if v is not None})


@pytest.fixture(scope="session")
def sample_cairn(tmp_path_factory, embedder):
    """A Cairn over the sample vault, fully indexed (read-only use)."""
    yield from indexed_cairn(SAMPLE_VAULT, tmp_path_factory.mktemp("sample-data"), embedder)


@pytest.fixture(scope="session")
def indexed_sample(sample_cairn):
    """(config, query service, stats(), health()) over the indexed sample vault, for the HTTP tests."""
    return sample_cairn.config, sample_cairn.query, sample_cairn.indexing.stats, sample_cairn.indexing.health


@pytest.fixture(scope="session")
def help_cairn(tmp_path_factory, embedder):
    """A Cairn over the real Obsidian help vault (../shared/vaults/obsidian-help), fully indexed; a test using
    it is marked ``shared_data`` (skipped without the vault)."""
    from cairn.app import Cairn

    cairn = Cairn(make_config(HELP_VAULT, tmp_path_factory.mktemp("help-data")), embedder=embedder)
    cairn.indexing.last_report = cairn.indexing.index()
    yield cairn
    cairn.close()


# ------------------------------------------------------------------------------ the canary vault ---------
CANARY_VAULT = REPO / "tests" / "fixtures" / "canary_vault"
#: The canary string: it appears ONLY in the withheld notes of the canary vault.
CANARY = "CANARY-7f3a9"
#: Notes withheld by the default policy's tags (personal, in every form Obsidian allows).
CANARY_TAGGED = (
    "Health/Blood pressure.md",
    "Health/Sleep.md",
    "Journal/2024-03-01.md",
    "Journal/Therapy.md",
    "Notes/Allergies.md",
    "Notes/Dream log.md",
    "Notes/Passwords hint.md",
)
#: Front-matter that cannot be read (its `tags: personal` is lost): withheld whenever a tag is (fail closed).
CANARY_UNREADABLE = ("Notes/Mood tracker.md",)
#: Withheld only when the policy also says ``folders: [Private]``.
CANARY_FOLDER = ("Private/Salary.md",)
CANARY_WITHHELD = CANARY_TAGGED + CANARY_UNREADABLE + CANARY_FOLDER


@pytest.fixture(scope="session")
def canary_cairn(tmp_path_factory, embedder):
    """A Cairn over tests/fixtures/canary_vault, fully indexed with the real model (read-only use)."""
    yield from indexed_cairn(CANARY_VAULT, tmp_path_factory.mktemp("canary-data"), embedder)

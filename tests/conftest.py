"""Shared fixtures: isolated folders, the real model, real indexes of the sample vault and the help vault.

Nothing here touches the user's real config, data or keyring: every test session points
CAIRN_CONFIG_DIR / CAIRN_DATA_DIR / CAIRN_LOG_DIR at a temp dir and forces the file
token backend (CAIRN_KEYRING=file).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# Before any helper is imported: asserts in tests/support/ report their values as a test's do.
pytest.register_assert_rewrite("support")

from support.cairns import indexed_cairn, open_cairn  # noqa: E402
from support.vaults import CANARY_VAULT, HELP_VAULT, REQUIRE_SHARED, SAMPLE_VAULT, SHARED  # noqa: E402

#: Fixtures whose set-up alone takes longer than ``make check`` can afford: a test using one is marked slow.
SLOW_FIXTURES = {"help_cairn"}  # indexes the whole obsidian-help vault with the real model
#: Fixtures that read the shared test data: a test using one is marked ``shared_data`` with these paths.
SHARED_FIXTURES = {"help_cairn": ("vaults/obsidian-help",)}


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
    """The wheel ``make wheel`` builds, built once per session (tests/support/built_wheel.py) → its path."""
    from support.built_wheel import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def embedder():
    """The real shipped ONNX model, loaded once per session."""
    from cairn.embedder import Embedder

    return Embedder()


@pytest.fixture(scope="session")
def hash_embedder():
    """The stand-in for the model, for tests that only move data (tests/support/embedders.py): a module takes it as
    its ``embedder`` with ``embedder = embedders.stand_in``."""
    from support.embedders import HashEmbedder

    return HashEmbedder()


@pytest.fixture
def vault_copy(tmp_path):
    """A writable copy of the sample vault (tests change files here, never in the repo)."""
    dest = tmp_path / "vault"
    shutil.copytree(SAMPLE_VAULT, dest)
    return dest


@pytest.fixture
def fresh_cairn(vault_copy, tmp_path, embedder):
    """A Cairn (store + indexer + query) over a writable copy of the sample vault, not yet indexed."""

    cairn = open_cairn(vault_copy, tmp_path / "data", embedder)
    yield cairn
    cairn.close()


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

    cairn = open_cairn(HELP_VAULT, tmp_path_factory.mktemp("help-data"), embedder)
    cairn.indexing.last_report = cairn.indexing.index()
    yield cairn
    cairn.close()


@pytest.fixture(scope="session")
def canary_cairn(tmp_path_factory, embedder):
    """A Cairn over tests/fixtures/canary_vault, fully indexed with the real model (read-only use)."""
    yield from indexed_cairn(CANARY_VAULT, tmp_path_factory.mktemp("canary-data"), embedder)

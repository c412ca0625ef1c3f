"""A slice of the Obsidian help vault indexed once per module (``template``), a Cairn over a fresh copy of it per test
(``cairn``), and a real watchfiles watcher over it driven until the store matches the disk. A test module takes
the fixtures as ``template, cairn = watched_vault.template, watched_vault.cairn``."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path

import pytest

from cairn.app import Cairn
from cairn.index import VaultWatcher
from cairn.policy import Withhold
from support.cairns import make_config, open_cairn
from support.requests import caller_of, search_request
from support.vaults import HELP_VAULT

#: The slice copied: every note of one folder, three of another.
FOLDERS = {"User interface": "*.md", "Editing and formatting": "[CFT][ao][lg]*.md"}


DEADLINE_S = 30.0


@pytest.fixture(scope="session")
def template(tmp_path_factory, hash_embedder):
    """A slice of the help vault, indexed once with the stand-in model (the watcher's tests only move data): (vault,
    database file)."""
    base = tmp_path_factory.mktemp("watch-template")
    vault = base / "vault"
    for folder, pattern in FOLDERS.items():
        dest = vault / folder
        dest.mkdir(parents=True)
        for src in (HELP_VAULT / folder).glob(pattern):
            shutil.copy2(src, dest / src.name)
    (vault / ".obsidian").mkdir()
    (vault / ".obsidian" / "app.json").write_text("{}", encoding="utf-8")
    cairn = open_cairn(vault, base / "data", hash_embedder)
    cairn.indexing.index()
    db = cairn.config.db_path
    cairn.store.wal_checkpoint()
    cairn.close()
    return vault, db


@pytest.fixture
def cairn(template, tmp_path, hash_embedder):
    """A Cairn over a fresh copy of the template vault and its index (mtimes kept, so nothing to redo)."""
    vault_t, db_t = template
    vault = tmp_path / "vault"
    shutil.copytree(vault_t, vault, copy_function=shutil.copy2)
    config = make_config(vault, tmp_path / "data").replace(ignore=("Templates/", "*.excalidraw.md"))
    config.db_path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(db_t, config.db_path)
    c = open_cairn(vault, tmp_path / "data", hash_embedder, ignore=config.ignore)
    assert c.indexer.reconcile_diff() == {"added": [], "changed": [], "deleted": []}
    yield c
    c.close()


def make_watcher(cairn: Cairn, **kw) -> VaultWatcher:
    def apply_hints(paths: set[str]) -> None:
        cairn.indexer.index_paths(paths)
        cairn.vectors.embed_pending()

    return VaultWatcher(
        cairn.config.vault, apply_hints=apply_hints, reconcile=cairn.indexing.index, ignore=cairn.config.ignore, **kw
    )


EMPTY = {"added": [], "changed": [], "deleted": []}


async def converge(cairn: Cairn, watcher: VaultWatcher, check=lambda: True) -> None:
    """Wait until the watcher is idle, the store matches the disk and ``check()`` holds (deadline)."""
    end = time.monotonic() + DEADLINE_S
    last = None
    while time.monotonic() < end:
        if watcher.idle():
            last = await asyncio.to_thread(cairn.indexer.reconcile_diff)
            if last == EMPTY and cairn.store.count_pending() == 0 and check() and watcher.idle():
                return
        await asyncio.sleep(0.05)
    pytest.fail(f"no convergence in {DEADLINE_S} s: diff {last}, watcher {watcher.stats()}")


async def run_with(watcher: VaultWatcher, scenario):
    """Start ``watcher``, run ``scenario(watcher)``, stop the watcher (cleanly) whatever happens."""
    await watcher.start()
    try:
        assert watcher.watching
        return await scenario(watcher)
    finally:
        await watcher.stop()


def run(cairn: Cairn, scenario, **kw):
    """:func:`run_with` a test watcher (:func:`make_watcher`) over ``cairn``."""
    return asyncio.run(run_with(make_watcher(cairn, **kw), scenario))


def paths(cairn: Cairn) -> set[str]:
    return {p for p, state in cairn.store.note_states().items() if state.status == "ok"}


def hit_paths(cairn: Cairn, query: str, *, mode: str = "hybrid", withhold: Withhold | None = None) -> list[str]:
    """The notes a search finds for a caller withheld ``withhold`` (None: the owner), best first."""
    request = search_request(query, top_k=10)
    return [h.file_path for h in cairn.query.search(request, caller_of(cairn, withhold), mode=mode).hits]


def bump_mtime(p: Path) -> None:
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))

"""A small real vault in a temp folder (notes with tags, aliases, links, an empty note, one of front-matter only, an
ignored config note) and a Cairn over it, for the tests of keeping the index (cairn.index). A test module takes the
fixtures as ``vault, cairn = index_vault.vault, index_vault.cairn``."""

from __future__ import annotations

import pytest

from cairn.app import Cairn
from support.cairns import open_cairn

NOTES = {
    "Sourdough.md": "---\ntags: [baking, food/bread]\naliases: [Levain bread]\n---\n# Sourdough\n\n"
    "Proof the dough for 12 hours in the fridge before baking. Bake at 250 °C with steam.\n\n"
    "## Starter\n\nFeed the starter with equal weights of flour and water. See [[Flour]].\n",
    "Flour.md": "Rye flour ferments faster than wheat flour. #baking\n",
    "Garden/Tomatoes.md": "---\ntags: garden/vegetables\n---\n"
    "Water tomatoes deeply twice a week. Links to [[Missing note]].\n",
    "Empty.md": "",
    "Only front-matter.md": "---\ntags: [meta]\n---\n",
}


def indexed_paths(cairn: Cairn) -> set[str]:
    """The vault-relative paths of the indexed notes (skipped files left out)."""
    return {path for path, state in cairn.store.note_states().items() if state.status == "ok"}


@pytest.fixture
def vault(tmp_path):
    root = tmp_path / "vault"
    for rel, text in NOTES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    (root / ".obsidian").mkdir()
    (root / ".obsidian" / "workspace.md").write_text("ignored config note", encoding="utf-8")
    return root


@pytest.fixture
def cairn(vault, tmp_path, embedder):
    c = open_cairn(vault, tmp_path / "data", embedder)
    yield c
    c.close()


def rows(cairn, table):
    return cairn.store.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]

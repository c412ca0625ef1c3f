"""An index caught half-embedded, the way a first index leaves it: some notes with their vectors, the later ones
text only (keyword-searchable, not yet by meaning)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.cairns import open_cairn
from support.mcp_client import make_home


def half_embedded(base: Path, embedder: Any) -> tuple[Path, Path]:
    """(home with the MCP test policy and the index, the vault): FIRST indexed and embedded, LATER text only."""
    vault = base / "vault"
    vault.mkdir(parents=True)
    for rel, text in FIRST.items():
        (vault / rel).write_text(text, encoding="utf-8")
    home = make_home(base / "home")
    cairn = open_cairn(vault, home / "data", embedder, config_dir=home / "config")
    try:
        cairn.indexing.index()
        for rel, text in LATER.items():
            (vault / rel).write_text(text, encoding="utf-8")
        cairn.indexer.sync_text()  # the first phase only: keyword-searchable, vectors still to come
        assert cairn.store.count_pending() > 0
    finally:
        cairn.close()
    return home, vault


#: Indexed and embedded first ("Diary.md" is withheld from clients not declared local: tag personal).
FIRST = {
    "Garden.md": "# Garden\n\nThe zqcover beds get compost every spring.\n",
    "Bread.md": "# Bread\n\nA sourdough loaf needs a starter fed the night before.\n",
    "Diary.md": "---\ntags: [personal]\n---\n# Diary\n\nA long walk by the zqcover lake today.\n",
}


#: Written afterwards, text only: found by their words, not yet by meaning ("Secret.md" is withheld too).
LATER = {
    "Lake.md": "# Lake\n\nThe quillwort grows on the zqcover lake shore.\n",
    "Secret.md": "---\ntags: [personal]\n---\n# Secret\n\nThe quillwort by the zqcover pond is mine.\n",
}

"""The index as it stands when the first index has done only its first vector tier, for ``make eval``: a copy of a
complete index in which every chunk's vector is its whole-chunk vector alone (from the embedding cache: nothing is
embedded) and no sentence vector exists, as :meth:`cairn.index.ChunkVectors.embed_pending` leaves it after its first
pass. Used by eval_retrieval.py (``--tier1``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from cairn.app import Cairn
from cairn.config import load_config
from cairn.embedder import Embedder
from cairn.embedding import whole_chunk_hash
from cairn.store.base import vec_bytes


def tier_one_copy(cairn: Cairn, data_dir: Path, embedder: Embedder) -> Cairn:
    """A Cairn over a copy of ``cairn``'s (complete) index in ``data_dir``, brought back to tier 1. Not indexed
    again: its vectors stay at tier 1 while it is open (the caller must not run ``indexing.index()``)."""
    cairn.store.wal_checkpoint()
    vault = cairn.config.require_vault()
    config = load_config({"vault": str(vault), "data_dir": str(data_dir)}, env={})
    target = Path(config.db_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(cairn.config.db_path, target)
    copy = Cairn(config, embedder=embedder)
    store, model_id = copy.store, embedder.model_id
    rows = list(
        store.conn.execute("SELECT c.id, n.title, c.content_hash FROM chunks c JOIN notes n ON n.id = c.note_id")
    )
    keys = {cid: whole_chunk_hash(title, h) for cid, title, h in rows}
    cached = store.cached_vectors(keys.values(), model_id)
    missing = [cid for cid, key in keys.items() if key not in cached]
    if missing:
        raise SystemExit(f"{len(missing)} whole-chunk vectors are not in the embedding cache: index completely first")
    with store._write_lock, store.conn as c:
        c.execute("DELETE FROM unit_vectors")
        for cid, key in keys.items():
            c.execute("DELETE FROM chunk_vectors WHERE chunk_id = ?", (cid,))
            c.execute("INSERT INTO chunk_vectors(chunk_id, embedding) VALUES(?, ?)", (cid, vec_bytes(cached[key])))
        c.execute("UPDATE chunks SET embedded = 1")
        store._bump_vectors_generation(c)
    copy.query.vectors.reload()
    return copy

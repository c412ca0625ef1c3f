"""The chunks' vectors (:class:`ChunkVectors`): the recipe they are made by, the pending ones filled in tiers, a save's
completed at once, one batch at a time, and the embedding cache pruned.

A vector comes from the embedding cache when the same text was embedded before (so unchanged text is never embedded
twice, and renames re-embed nothing), else from the model. What is embedded, and how a chunk's vector is made:
:mod:`cairn.embedding`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from cairn.embedder import Embedder
from cairn.embedding import (
    RECIPE_VERSION,
    TITLE_WEIGHT,
    WHOLE_WEIGHT,
    chunk_vector,
    embed_in_slices,
    title_hash,
    whole_chunk_hash,
    whole_chunk_text,
)
from cairn.index.report import Progress
from cairn.progress import pro_rata
from cairn.store import Store

log = logging.getLogger(__name__)

#: With a ``pause`` callback, :meth:`ChunkVectors.embed_batch` sends texts to the model this many at a time: a slice
#: is the longest a note edited meanwhile waits for the PDF lane's model use.
PAUSE_SLICE = 16

#: Embedding-cache rows no note uses are kept this long (s) after they were written, then pruned at the end of
#: an indexing run: a note moved out of the vault and back, renamed, or edited back within 30 days re-embeds
#: nothing, while the cache no longer keeps every sentence ever deleted.
CACHE_GRACE_S = 30 * 86400


class ChunkVectors:
    """Makes the vectors of ``store``'s chunks with ``embedder``, by one recipe (``title_weight``, ``whole_weight``:
    :func:`cairn.embedding.chunk_vector`), checked when built: stored vectors made by another recipe are reset, to
    be made again (the embedding cache stays). Takes no lock: a chunk deleted or changed while its vectors were
    computed is skipped when they are stored (:meth:`Store.set_vectors`), so saves and the bulk's vectors can both
    run."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        *,
        title_weight: float = TITLE_WEIGHT,
        whole_weight: float = WHOLE_WEIGHT,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.title_weight = float(title_weight)
        self.whole_weight = float(whole_weight)
        self._check_vector_recipe()

    @property
    def vector_recipe(self) -> str:
        """Identifies how chunk vectors are made; a change invalidates stored vectors (the cache stays)."""
        return (
            f"{self.embedder.model_id}|units={RECIPE_VERSION}|title_weight={self.title_weight:g}"
            f"|whole_weight={self.whole_weight:g}"
        )

    def _check_vector_recipe(self) -> None:
        stored = self.store.get_meta("vector_recipe")
        if stored != self.vector_recipe:
            if stored is not None:
                log.info(
                    "vector recipe changed (%s -> %s): re-making every chunk vector once (texts already embedded "
                    "come from the embedding cache)",
                    stored,
                    self.vector_recipe,
                )
                self.store.reset_vectors()
            self.store.set_meta("vector_recipe", self.vector_recipe)

    def embed_pending(
        self,
        *,
        batch_size: int = 256,
        progress: Progress | None = None,
        should_stop: Callable[[], bool] | None = None,
        pdf: bool | None = None,
        background: bool = True,
    ) -> tuple[int, int]:
        """Vectors in two tiers (``pdf``: only PDF chunks, only the others, or all when None): first tier 1 — one
        whole-chunk vector — for every chunk without a vector (progress phase ``embed``), then tier 2 — sentence
        and title vectors, and the chunk's blended vector — for every chunk not yet complete (phase ``refine``),
        each pass most recently modified notes first (:meth:`Store.pending_chunks`). Every note is searchable by
        meaning after the first pass, at about a third of the model's work. Returns (vectors written, texts
        embedded by the model). Stops early (between batches) when ``should_stop()`` returns True. The model runs as
        background work, which waits while foreground work (a save, a question) is in flight, on threads nicer than
        the caller's; ``background=False`` (``cairn index`` in a terminal: the work the person waits for) at the
        caller's priority. Takes no lock (:meth:`embed_batch`)."""
        written = embedded = 0
        for tier, phase, count in ((1, "embed", self.store.count_pending), (2, "refine", self.store.count_unrefined)):
            total = count()
            done = 0
            if progress and total:
                progress(phase, 0, total)
            while not (should_stop and should_stop()):
                part = pro_rata(progress, phase, done, min(batch_size, total - done), total) if progress else None
                w, e, n = self.embed_batch(
                    batch_size, pdf=pdf, tier=tier, background=background, should_stop=should_stop, on_slice=part
                )
                embedded += e
                if not n:
                    break
                written += w
                done += n
                if progress:
                    progress(phase, min(done, total), total)
                if done % (batch_size * 20) == 0:
                    self.store.wal_checkpoint()
            if should_stop and should_stop():
                break
            if progress and total and done < total:  # saves completed some meanwhile: this pass is done
                progress(phase, total, total)
        self.store.wal_checkpoint()
        return written, embedded

    def embed_notes(
        self, note_ids: Sequence[int], *, batch_size: int = 64, should_stop: Callable[[], bool] | None = None
    ) -> tuple[int, int]:
        """Complete vectors (tier 2 at once) for the chunks of ``note_ids`` not yet complete: a save's vectors,
        made before the bulk's next slice. Returns (chunks given their first vector, texts embedded by the
        model); ``should_stop()`` is looked at before each batch."""
        written = embedded = 0
        while note_ids and not (should_stop and should_stop()):
            w, e, n = self.embed_batch(batch_size, note_ids=note_ids, tier=2, background=False)
            written, embedded = written + w, embedded + e
            if not n:
                break
        return written, embedded

    def embed_batch(
        self,
        batch_size: int,
        *,
        pdf: bool | None = None,
        note_path: str | None = None,
        note_ids: Sequence[int] | None = None,
        tier: int = 2,
        background: bool = True,
        pause: Callable[[], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        on_slice: Callable[[int, int], None] | None = None,
    ) -> tuple[int, int, int]:
        """Vectors of ``tier`` for up to ``batch_size`` chunks below it (filters as in :meth:`Store.pending_chunks`):
        tier 1 embeds only each chunk's whole-chunk text, its vector the chunk's; tier 2 embeds the title, the
        whole chunk and the sentences and blends them (:func:`~cairn.embedding.chunk_vector`), sentence vectors kept.
        Returns (chunks written that had no vector before, texts embedded, chunks taken). Needs no lock: a chunk
        deleted or changed while its vectors were computed is skipped when they are stored
        (:meth:`Store.set_vectors`). ``background``: the model runs as bulk work that gives way to questions (else
        as work a person waits for: a save's vectors). ``pause()``, when given, is called before each
        :data:`PAUSE_SLICE` texts go to the model. Once ``should_stop()`` is true (looked at before each ONNX run,
        :func:`~cairn.embedding.embed_in_slices`) the texts embedded so far go to the embedding cache, no vector is
        written and (0, texts embedded, 0) is returned: the next run takes the same chunks and finds those texts
        cached. ``on_slice(texts embedded, texts to embed)`` is called as the model goes (for progress)."""
        model_id = self.embedder.model_id
        embedded = 0
        rows = self.store.pending_chunks(batch_size, pdf=pdf, note_path=note_path, note_ids=note_ids, below=tier)
        if not rows:
            return 0, 0, 0
        wanted: dict[str, str] = {}
        for row in rows:
            units = [text for _uid, text, _uhash in row.sentences]
            wanted[whole_chunk_hash(row.title, row.content_hash)] = whole_chunk_text(row.title, row.symbol, units)
            if tier >= 2:
                wanted[title_hash(row.title)] = row.title
                for _uid, text, uhash in row.sentences:
                    wanted[uhash] = text
        cache = self.store.cached_vectors(wanted, model_id)
        missing = [h for h in wanted if h not in cache]
        if missing:
            texts = [wanted[h] for h in missing]
            vecs = embed_in_slices(
                self.embedder, texts, PAUSE_SLICE, pause, should_stop, on_slice, background=background
            )
            fresh = {missing[i]: v for i, v in vecs.items()}
            self.store.put_cached_vectors(fresh, model_id)
            cache.update(fresh)
            embedded += len(fresh)
            if len(fresh) < len(missing):
                return 0, embedded, 0
        items: list[tuple[int, str, np.ndarray, list[tuple[int, np.ndarray]]]] = []
        for row in rows:
            whole_vec = cache[whole_chunk_hash(row.title, row.content_hash)]
            if tier == 1:
                items.append((row.chunk_id, row.content_hash, whole_vec, []))
                continue
            unit_vecs = [(uid, cache[uhash]) for uid, _text, uhash in row.sentences]
            vec = self.chunk_vector([v for _, v in unit_vecs], cache[title_hash(row.title)], whole_vec)
            items.append((row.chunk_id, row.content_hash, vec, unit_vecs))
        written = self.store.set_vectors(items, tier=tier)
        return min(written, sum(1 for row in rows if row.tier == 0)), embedded, len(rows)

    def chunk_vector(
        self, unit_vectors: Sequence[np.ndarray], title_vector: np.ndarray, whole_vector: np.ndarray
    ) -> np.ndarray:
        """:func:`cairn.embedding.chunk_vector` with this recipe's weights."""
        return chunk_vector(unit_vectors, title_vector, whole_vector, self.title_weight, self.whole_weight)

    def prune_embedding_cache(self, *, now: float | None = None) -> int:
        """Drop embedding-cache rows no note has used for :data:`CACHE_GRACE_S` (:meth:`Store.prune_embedding_cache`:
        rows older than that whose text — a sentence, a code block, a note title, a whole chunk — is in no note now,
        and every row of another model). Without it the cache grows by every sentence ever written or deleted.
        Returns the number of rows deleted."""
        cutoff = (time.time() if now is None else now) - CACHE_GRACE_S

        def keep() -> Iterator[str]:  # read only when some rows are old enough to prune
            yield from (title_hash(t) for t in self.store.note_titles())
            yield from (whole_chunk_hash(t, h) for t, h in self.store.chunk_title_hashes())

        pruned = self.store.prune_embedding_cache(self.embedder.model_id, keep(), cutoff)
        if pruned:
            log.info(
                "embedding cache: %d rows dropped (another model's, or unused for %d days)",
                pruned,
                CACHE_GRACE_S // 86400,
            )
        return pruned

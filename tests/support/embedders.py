"""A stand-in for the embedding model, for the tests that only move data (:class:`HashEmbedder`).

Tests where ranking or the vectors' values matter use the real ONNX model (the ``embedder`` fixture). The rest —
indexing runs, the watcher, the save lane, kept snapshots, the store, recovery — need vectors of the right shape
that are the same for the same text, and the real tokenizer's token counts (chunking, the context budget and the
embedding cost all count tokens); :class:`HashEmbedder` gives them without loading onnxruntime or running a model.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from cairn.embedder import DIM, MAX_TOKENS, TokenCounter, resolve_model_dir

#: Rows of the table a token id picks its vector from (ids beyond it share rows: a collision only adds noise).
TABLE_ROWS = 4096
#: The table's seed: the same vectors in every process and every run.
SEED = 20240601


class HashEmbedder:
    """:class:`cairn.embedder.Embedder`'s interface without the model: a text's vector is the normalised sum of one
    fixed pseudo-random vector per token of the real WordPiece tokenizer, truncated as the model truncates (256
    tokens with ``[CLS]``/``[SEP]``). Deterministic; texts sharing words have a positive cosine, other texts a
    cosine near 0 (below the cosine floor), so a search still finds a note by its words and an answer's sources
    still pass the floor only when they share the question's words.

    ``model_id`` is its own: vectors written with it are never mistaken for the real model's. ``embed``,
    ``embed_background`` and ``embed_query`` count the texts in :attr:`embeddings_computed` and honour ``stop`` and
    ``progress`` as the real ones do, batch by batch.
    """

    dim: int = DIM
    max_tokens: int = MAX_TOKENS

    def __init__(self, model_dir: Path | str | None = None) -> None:
        self.model_dir = resolve_model_dir(model_dir)
        self._tokens = TokenCounter(self.model_dir)
        self.model_id = f"hash-embedder/seed{SEED}@{TABLE_ROWS}"
        self.variant = "hash"
        self.threads = 1
        self.session_bytes = 0
        self.embeddings_computed = 0
        self._table = np.random.default_rng(SEED).standard_normal((TABLE_ROWS, DIM)).astype(np.float32)
        self._lock = threading.Lock()
        self._foreground = 0

    @property
    def tokenizer(self) -> TokenCounter:
        return self._tokens

    def count_tokens(self, text: str) -> int:
        return self._tokens.count_tokens(text)

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 32, stop: Callable[[list[int]], bool] | None = None
    ) -> np.ndarray:
        """float32 ``(len(texts), 384)``, unit rows; rows of batches skipped by ``stop`` left unset."""
        with self.foreground():
            return self._embed(texts, batch_size, stop, None)

    def embed_background(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = 32,
        stop: Callable[[list[int]], bool] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        return self._embed(texts, batch_size, stop, progress)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    @contextmanager
    def foreground(self) -> Iterator[None]:
        with self._lock:
            self._foreground += 1
        try:
            yield
        finally:
            with self._lock:
                self._foreground -= 1

    def _embed(
        self,
        texts: Sequence[str],
        batch_size: int,
        stop: Callable[[list[int]], bool] | None,
        progress: Callable[[int], None] | None,
    ) -> np.ndarray:
        texts = list(texts)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"embed() needs str items; item {i} is {type(t).__name__}")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        ids = self._tokens.encode_for_model(texts) if texts else []
        done: list[int] = []
        for start in range(0, len(texts), batch_size):
            if stop is not None and stop(done):
                break
            batch = range(start, min(start + batch_size, len(texts)))
            for i in batch:
                out[i] = self._vector(ids[i])
            done.extend(batch)
            if progress is not None:
                progress(len(done))
        with self._lock:
            self.embeddings_computed += len(texts)
        return out

    def _vector(self, ids: list[int]) -> np.ndarray:
        content = ids[1:-1] or ids  # without [CLS]/[SEP]; an empty text by them
        summed = self._table[np.asarray(content, dtype=np.int64) % TABLE_ROWS].sum(axis=0)
        return summed / max(float(np.linalg.norm(summed)), 1e-12)

    def __repr__(self) -> str:
        return f"HashEmbedder({self.model_id!r})"


@pytest.fixture
def stand_in(hash_embedder: HashEmbedder) -> HashEmbedder:
    """The ``embedder`` fixture of a module whose tests only move data: the module says
    ``embedder = embedders.stand_in`` and every fixture it uses that builds a Cairn (``fresh_cairn``, ...) gets the
    stand-in. Function-scoped on purpose: a session fixture that embeds with the real model (``sample_cairn``, ...)
    cannot be built from it (pytest refuses the scope), so no real-model index is ever made with it."""
    return hash_embedder

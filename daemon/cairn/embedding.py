"""The embedding recipe (what text is embedded for a chunk, and how its vector is made) and the one in-memory
text → vector cache of the query side.

Recipe: a chunk is split into its prose sentences and list items (cleaned of markdown, at least three words), plus
the whole chunk (heading path + text) for code, tables and chunks without a sentence; each of these texts is
embedded on its own (a **sentence vector**), and the note's title once. The chunk as a whole is embedded too, with
the note title and heading path in front and its texts above in place of the raw markdown (:func:`whole_chunk_text`,
truncated by the model to 256 tokens: a **whole-chunk vector**). The chunk's vector is

    normalise(WHOLE_WEIGHT · whole-chunk vector + mean(sentence vectors) + TITLE_WEIGHT · title vector)

so "the chunk's cosine" to a question is its cosine with that blend: the passage read as one text, and the average
of its sentences, which keeps a long chunk's several topics. The sentence vectors are kept too, so a question can
match one sentence closely. Texts are keyed in the store's embedding cache by :func:`content_hash` (titles by
:func:`title_hash`, whole chunks by :func:`whole_chunk_hash`), so unchanged text is never embedded twice.

The indexer writes vectors with this recipe; the query side (search, extractive answers) reads them back or makes
the same vectors for text the index does not hold yet.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from cairn.embedder import Embedder
from cairn.prompt import candidate_sentences
from cairn.store import Store

#: Weight of the title vector in each chunk's vector (chosen by cross-validation on the dev questions).
TITLE_WEIGHT = 0.25
#: Weight of the whole-chunk vector in each chunk's vector, beside the mean of its sentence vectors (weight 1;
#: chosen by cross-validation on the dev questions).
WHOLE_WEIGHT = 1.0
#: Identifies the recipe above in the index's ``vector_recipe``: a change re-makes every chunk vector once.
RECIPE_VERSION = "sentences-v1+whole-v2"


def chunk_embed_text(symbol: str, text: str) -> str:
    """The text embedded for a chunk (without the title, which has its own vector): heading path, then text."""
    return f"{symbol}\n{text}" if symbol else text


def embedding_texts(symbol: str, text: str, kind: str) -> list[str]:
    """The texts embedded for one chunk, one sentence vector each: its sentences and list items (≥ 3 words,
    markdown cleaned), plus the whole chunk (heading path + text) for code and tables or when it has no
    sentence. Never empty for a non-empty chunk; duplicates removed, order kept."""
    texts = candidate_sentences(text, min_words=3)
    if kind in ("code", "table") or not texts:
        texts.append(chunk_embed_text(symbol, text))
    return list(dict.fromkeys(t for t in texts if t.strip()))


def embed_in_slices(
    embedder: Embedder,
    texts: Sequence[str],
    step: int,
    pause: Callable[[], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_slice: Callable[[int, int], None] | None = None,
    *,
    background: bool = True,
) -> dict[int, np.ndarray]:
    """{index in ``texts``: float32 (384,) vector}, embedded in the background (:meth:`Embedder.embed_background`:
        questions go first), or with ``background=False`` as a foreground call (:meth:`Embedder.embed`: work a person
        waits for, such as a save's vectors; background runs give way to it). With ``pause``, ``step`` texts at a time
        in order, ``pause()`` called before each slice (and ``should_stop`` looked at after each). Else one call of the
        model, in which ``should_stop()`` is looked at before each ONNX run (a stop waits for one run; the texts done so
        far are returned) and ``on_slice(texts done, len(texts))`` is called on this thread as the runs go (a foreground
    call: before each of its own ONNX runs). Raises what
        :meth:`Embedder.embed` raises."""
    if pause is None:
        seen: list[list[int]] = []
        caller = threading.get_ident()

        def stop(done: list[int]) -> bool:
            if not seen:
                seen.append(done)
            if not background and on_slice is not None and threading.get_ident() == caller:
                on_slice(len(done), len(texts))  # the caller runs every threads-th ONNX run: progress as it goes
            return should_stop is not None and should_stop()

        def progress(done: int) -> None:
            if on_slice is not None:
                on_slice(done, len(texts))

        if background:
            out = embedder.embed_background(texts, stop=stop, progress=progress if on_slice else None)
        else:
            out = embedder.embed(texts, stop=stop)
            progress(len(seen[0]) if seen else len(texts))
        finished = seen[0] if seen else range(len(texts))
        return {i: out[i] for i in finished}
    vecs: dict[int, np.ndarray] = {}
    for start in range(0, len(texts), step):
        pause()
        part = texts[start : start + step]
        vecs.update(
            zip(range(start, start + step), embedder.embed_background(part) if background else embedder.embed(part))
        )
        if should_stop is not None and should_stop():
            break
    return vecs


def whole_chunk_text(title: str, symbol: str, units: Sequence[str]) -> str:
    """The text of a chunk's whole-chunk vector: note title, heading path (when there is one), then the chunk's
    embedding texts (``units``, from :func:`embedding_texts`), one per line. The units rather than the raw chunk: link
    targets, image URLs and HTML are cleaned out of them, and the model would read those as many tokens of noise
    (a footer of links is mostly URL tokens raw, one short line cleaned)."""
    return "\n".join([title, symbol, *units] if symbol else [title, *units])


def chunk_vector(
    sentence_vectors: Sequence[np.ndarray] | np.ndarray,
    title_vector: np.ndarray,
    whole_vector: np.ndarray | None = None,
    title_weight: float = TITLE_WEIGHT,
    whole_weight: float = WHOLE_WEIGHT,
) -> np.ndarray:
    """A chunk's vector from its sentence vectors, its note title's and its whole-chunk vector (each (384,)
    float32): ``normalise(whole_weight · whole + mean(sentence vectors) + title_weight · title)`` (no whole-chunk
    term when ``whole_vector`` is None), (384,) float32, L2-normalised."""
    vec = np.mean(sentence_vectors, axis=0) if len(sentence_vectors) else np.zeros_like(title_vector)
    vec = vec + title_weight * title_vector
    if whole_vector is not None:
        vec = vec + whole_weight * whole_vector
    return (vec / max(float(np.linalg.norm(vec)), 1e-12)).astype(np.float32)


def content_hash(text: str) -> str:
    """sha256 hex of UTF-8 text: the embedding-cache key."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def title_hash(title: str) -> str:
    """The embedding-cache key of a note title's vector (distinct from a sentence with the same text)."""
    return content_hash("\x1ftitle\x1f" + title)


def whole_chunk_hash(title: str, chunk_hash: str) -> str:
    """The embedding-cache key of a chunk's whole-chunk vector, from its note title and the chunk's content hash
    (``chunks.content_hash``: sha256 of heading path + text), which together fix :func:`whole_chunk_text`. Computable
    from the store's columns without reading chunk text (the cache pruning keeps these keys)."""
    return content_hash("\x1fwhole-v2\x1f" + title + "\x1f" + chunk_hash)


class VectorCache:
    """Text → (384,) float32 vector, in memory (LRU, at most ``max_items`` and about ``max_bytes``: a text's
    entry costs its vector and its text; thread-safe). Questions, and the sentences and titles the extractive
    answer scores. The model is deterministic, so a cached vector is the one ``embedder.embed`` would give."""

    MAX_ITEMS = 20_000
    #: Bytes of entries kept (texts and vectors), whatever the texts' lengths.
    MAX_BYTES = 16 << 20

    def __init__(
        self, store: Store, embedder: Embedder, *, max_items: int = MAX_ITEMS, max_bytes: int = MAX_BYTES
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._bytes = 0  # _entry_bytes of every entry held
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._vectors)

    def nbytes(self) -> int:
        """Approximate bytes held: each vector (its array object included) and its text key."""
        with self._lock:
            return self._bytes

    def usage(self) -> dict[str, int | None]:
        """``{entries, maxEntries, bytes, maxBytes}``, as :meth:`cairn.search.cache.EpochLRU.usage`."""
        with self._lock:
            held = {"entries": len(self._vectors), "bytes": self._bytes}
        return {**held, "maxEntries": self.max_items, "maxBytes": self.max_bytes}

    def _entry_bytes(self, text: str) -> int:
        """The text, the vector (its array object included) and the entry's slot and node in the ordered dict."""
        return sys.getsizeof(text) + 112 + self.embedder.dim * 4 + 100

    def _set(self, text: str, vector: np.ndarray) -> None:
        """Hold ``text`` → ``vector`` as the most recently used entry (the lock held). A row of a batch is copied,
        so that the entry does not keep the whole batch in memory after its neighbours are dropped."""
        if text not in self._vectors:
            self._bytes += self._entry_bytes(text)
        self._vectors[text] = vector if vector.base is None else vector.copy()
        self._vectors.move_to_end(text)

    def _take(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for t in texts:
                v = self._vectors.get(t)
                if v is not None:
                    self._vectors.move_to_end(t)
                    found[t] = v
        return found

    def _put(self, fresh: dict[str, np.ndarray]) -> None:
        with self._lock:
            for t, v in fresh.items():
                self._set(t, v)

    def _trim(self) -> None:
        with self._lock:
            while len(self._vectors) > 1 and (len(self._vectors) > self.max_items or self._bytes > self.max_bytes):
                text, _ = self._vectors.popitem(last=False)
                self._bytes -= self._entry_bytes(text)

    def _stack(self, texts: Sequence[str], found: dict[str, np.ndarray]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return np.stack([found[t] for t in texts])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), 384)`` float32, L2-normalised: cached vectors, the rest embedded in one batch and cached."""
        found = self._take(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in found))
        if missing:
            fresh = dict(zip(missing, self.embedder.embed(missing)))
            self._put(fresh)
            found.update(fresh)
        self._trim()
        return self._stack(texts, found)

    def stored_or_embedded(self, texts: Sequence[str], hashes: Sequence[str]) -> np.ndarray:
        """``(len(texts), 384)`` float32 vectors of ``texts``: from memory, else from the store's embedding cache
        (``hashes[i]`` is ``texts[i]``'s key there, written by the indexer with this embedder's model id), else
        embedded now. All of them are kept in memory."""
        found = self._take(texts)
        wanted = {h: t for t, h in zip(texts, hashes) if t not in found}
        if wanted:
            stored = self.store.cached_vectors(wanted, self.embedder.model_id)
            fresh = {wanted[h]: v.astype(np.float32, copy=False) for h, v in stored.items()}
            found.update(fresh)
            with self._lock:
                for t, v in fresh.items():
                    self._set(t, v)
        rest = [t for t in texts if t not in found]
        if rest:
            found.update(zip(rest, self.embed(rest)))
        else:
            self._trim()
        return self._stack(texts, found)

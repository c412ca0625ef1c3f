"""Local text embeddings: the shipped all-MiniLM-L6-v2 ONNX model (layer 1 resource).

All onnxruntime and tokenizers code in Cairn lives here; nothing else imports them
(docs/design.md, "Layers"). The model files live in ``onnx_models/all-MiniLM-L6-v2/``
(built reproducibly by ``packaging/build_model.py``), reached from the package as
``cairn/onnx_models/`` (a symlink in the source tree, real files in the wheel) so an installed
Cairn finds the same model:

- ``model.onnx`` (float32) and ``model_int8.onnx`` (dynamic int8): BERT encoder,
  inputs ``input_ids``/``attention_mask``/``token_type_ids`` (int64, [batch, seq]),
  output ``last_hidden_state`` (float32, [batch, seq, 384]);
- ``tokenizer.json``: the WordPiece tokenizer (uncased);
- ``manifest.json``: provenance, sha256 of every file, ``default`` variant, and the
  embedding rules this module applies.

Embedding rules, matching sentence-transformers' all-MiniLM-L6-v2 (its
``sentence_bert_config.json`` and ``1_Pooling/config.json``): inputs truncated to
256 tokens including ``[CLS]``/``[SEP]``; mean pooling of the last hidden state over
the attention mask; L2 normalisation. Vectors are 384-d float32 with unit norm, so
a dot product is a cosine similarity.

Nothing is read at import time; onnxruntime is imported only when an
:class:`Embedder` is built, so :func:`load_tokenizer` stays cheap. The model's files and its tokenizer are
:mod:`cairn.embedder.model_files`; the int8 dot products of the dense scores :mod:`cairn.embedder.int8_dot`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from cairn.embedder.int8_dot import INT8_DOT_MODEL, INT8_QUERY_LIMIT, INT8_ZERO, Int8Dot
from cairn.embedder.model_files import (
    DEFAULT_MODEL_DIR,
    DIM,
    MANIFEST_FILE,
    MAX_TOKENS,
    MODEL_DIR_ENV,
    MODEL_NAME,
    TOKENIZER_FILE,
    TokenCounter,
    file_sha256,
    fix_hint,
    load_tokenizer,
    read_manifest,
    resolve_model_dir,
)

__all__ = [
    "DEFAULT_MODEL_DIR",
    "DIM",
    "INT8_DOT_MODEL",
    "INT8_QUERY_LIMIT",
    "INT8_ZERO",
    "MANIFEST_FILE",
    "MAX_TOKENS",
    "MODEL_DIR_ENV",
    "MODEL_NAME",
    "TOKENIZER_FILE",
    "Embedder",
    "Int8Dot",
    "TokenCounter",
    "load_tokenizer",
    "resolve_model_dir",
]
from cairn.errors import ConfigError, ModelError
from cairn.memory import rss_bytes, trim_heap

log = logging.getLogger(__name__)

#: Variants this code can load. ``fp32`` and ``int8`` ship (the manifest's ``files``); the others are built on demand
#: by ``packaging/build_model.py quantise`` (the manifest's ``variants_built``) for measurement.
VARIANTS = ("fp32", "int8", "int8-matmul", "int8-matmul-pt", "int8-static", "fp32-fused", "int8-fused")
#: :meth:`Embedder.embed` splits a call into at least this many texts per parallel batch.
MIN_PARALLEL_BATCH = 4
#: At most this many token positions (rows × padded width) in one ONNX run: each run's attention buffers grow
#: with it, so long chunks go 8 to a run (less memory, and no slower); short sentences still go 32 to a run.
MAX_BATCH_TOKENS = 2048
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
#: An :meth:`Embedder.embed` call of at least this many ONNX runs (indexing, not a question) ends with
#: :func:`cairn.memory.trim_heap`.
TRIM_AFTER_BATCHES = 4
#: Background lanes (:meth:`Embedder.embed_background`) run this much nicer than the thread that made them (Linux
#: thread niceness): a question's thread sharing a core with a background ONNX run gets ~75 % of it (CFS weights
#: 1024 : 335), while the index still gets a quarter of a core against a busy program of the user's (at +10: a tenth).
BACKGROUND_NICE = 5
#: Before each ONNX run a background lane waits while a foreground call is in flight, at most this long (s): questions
#: back to back slow the index down but never stop it.
YIELD_MAX_S = 2.0
#: How often (s) the caller of :meth:`Embedder.embed_background` reports progress while its lanes run.
PROGRESS_EVERY_S = 0.25


def _checked_texts(texts: Sequence[str], batch_size: int) -> list[str]:
    """``texts`` as a list; raises ``ValueError`` for ``batch_size`` < 1, ``TypeError`` for a non-``str`` item."""
    texts = list(texts)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"embed() needs str items; item {i} is {type(t).__name__}")
    return texts


class Embedder:
    """Sentence embeddings from the shipped all-MiniLM-L6-v2 ONNX model.

    Attributes:
        dim: vector size, 384.
        max_tokens: model input limit, 256 tokens including [CLS]/[SEP]; longer
            inputs are truncated (their leading tokens kept), never an error.
        model_id: stable id for the embedding cache,
            ``"all-MiniLM-L6-v2/<variant>@<first 12 hex of the ONNX file's sha256>"``;
            it changes whenever the vectors could change.
        variant: one of :data:`VARIANTS`.
        embeddings_computed: running count of texts embedded by this instance.

    Args:
        model_dir: the model folder; default ``$CAIRN_MODEL_DIR`` or
            ``cairn/onnx_models/all-MiniLM-L6-v2`` in the package.
        variant: ``"fp32"`` (``model.onnx``), ``"int8"`` (``model_int8.onnx``), or a variant the manifest lists
            under ``variants_built`` (its file made by ``packaging/build_model.py quantise``); default: the
            manifest's ``default``.
        threads: how many batches run at once (one core each); default ``os.cpu_count()``.

    Threads: the ONNX session runs each batch on one thread (``intra_op_num_threads`` 1), and
    :meth:`embed` runs up to ``threads`` batches at once on a small pool (onnxruntime's ``run`` is
    thread-safe and releases the GIL): a little more throughput than one multi-threaded session, and a
    question costs less CPU (a second intra-op thread mostly waits). The vectors are bit-identical either way.
    Bulk work goes through :meth:`embed_background`, whose runs give way to every other call (questions).

    Raises:
        ModelError: folder, manifest, tokenizer or ONNX file missing; file hash not
            the manifest's (corrupt or swapped); unknown variant; session fails to load.
        ConfigError: ``threads`` < 1.

    The ONNX file's sha256 is checked and the session built here (about a second);
    :meth:`embed` is thread-safe.
    """

    dim: int = DIM
    max_tokens: int = MAX_TOKENS

    def __init__(
        self, model_dir: Path | str | None = None, *, variant: str | None = None, threads: int | None = None
    ) -> None:
        self.model_dir = resolve_model_dir(model_dir)
        manifest = read_manifest(self.model_dir)
        self.manifest = manifest
        files = manifest.get("files") or {}
        if variant is None:
            variant = manifest.get("default")
        built = manifest.get("variants_built") or {}
        if variant not in VARIANTS or (variant not in files and variant not in built):
            available = sorted(k for k in {**built, **files} if k in VARIANTS)
            raise ModelError(
                f"Unknown embedding model variant {variant!r} in {self.model_dir}; expected one of {available}."
            )
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ConfigError(
                f"embed_threads must be a positive integer, got {threads!r}; leave it unset to use every core."
            )
        self.variant: str = variant
        self.threads: int = threads or os.cpu_count() or 1
        self._tokens = TokenCounter(self.model_dir)

        entry = files.get(variant) or built[variant]
        onnx_path = self.model_dir / str(entry.get("file", ""))
        expected_sha = str(entry.get("sha256", ""))
        if not onnx_path.is_file():
            hint = (
                fix_hint(self.model_dir)
                if variant in files
                else f"Build it with `python packaging/build_model.py quantise {variant}`."
            )
            raise ModelError(f"Embedding model file missing: {onnx_path} (variant {variant}). {hint}")
        actual_sha = file_sha256(onnx_path)
        if actual_sha != expected_sha:
            raise ModelError(
                f"Embedding model file {onnx_path} is corrupt or not the one in the manifest: "
                f"sha256 {actual_sha[:12]}…, manifest says {expected_sha[:12]}…. "
                f"{fix_hint(self.model_dir)}"
            )
        self.model_id: str = f"{manifest.get('name', MODEL_NAME)}/{variant}@{actual_sha[:12]}"
        #: Dynamic quantisation scales each run's activations by the whole batch's range, so a text's vector would
        #: depend on the texts run with it (cosine to itself down to ~0.987): such a model runs one text at a time,
        #: as fast here as in batches (no padding), and a text's vector depends on the text alone.
        self.one_text_per_run: bool = "quantize_dynamic" in str(entry.get("quantisation", ""))
        before = rss_bytes()
        self._session = self._load_session(onnx_path)
        after = rss_bytes()
        #: Resident bytes the session added when made (its weights and graph), or the ONNX file's size where the
        #: system does not tell; onnxruntime's work buffers come and go with the batches (not counted).
        self.session_bytes: int = (
            max(0, after - before) if before is not None and after is not None else onnx_path.stat().st_size
        )
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None  # batches beyond the caller's own, made on first need
        self._background_pool: ThreadPoolExecutor | None = None  # nicer threads for embed_background
        self._foreground = 0  # foreground calls in flight
        self._foreground_done = threading.Condition()
        self.embeddings_computed: int = 0
        log.info("embedder ready: %s (%d threads)", self.model_id, self.threads)

    def _load_session(self, onnx_path: Path) -> Any:
        try:
            import onnxruntime as ort  # noqa: PLC0415
        except ImportError as exc:  # pragma: no cover - a dependency of the package
            raise ModelError(f"onnxruntime is not installed ({exc}); reinstall cairn-notes.") from exc
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1  # parallel batches instead (class docstring)
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # Worker threads sleep instead of busy-waiting between ops: spinning steals the
        # cores the work needs on a small machine, and burns CPU while the daemon idles.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            sess = ort.InferenceSession(str(onnx_path), sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
            raise ModelError(
                f"Embedding model {onnx_path} failed to load in onnxruntime: {exc}. {fix_hint(self.model_dir)}"
            ) from exc
        names = tuple(i.name for i in sess.get_inputs())
        if sorted(names) != sorted(INPUT_NAMES):
            raise ModelError(f"Embedding model {onnx_path} has inputs {names}, expected {INPUT_NAMES}.")
        out_shape = sess.get_outputs()[0].shape
        if out_shape[-1] != self.dim:
            raise ModelError(f"Embedding model {onnx_path} outputs shape {out_shape}, expected [*, *, {self.dim}].")
        self._output_name = sess.get_outputs()[0].name
        # Each run gives back the arena blocks it grew: a batch of long chunks needs tens of MB of attention
        # buffers, which the arena would otherwise keep for the daemon's lifetime (the vectors are the same).
        self._run_options = ort.RunOptions()
        self._run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        return sess

    def count_tokens(self, text: str) -> int:
        """Number of content tokens in ``text`` (no [CLS]/[SEP], no truncation). ``""`` -> 0."""
        return self._tokens.count_tokens(text)

    @property
    def tokenizer(self) -> TokenCounter:
        """The :class:`TokenCounter` this embedder uses."""
        return self._tokens

    def embed(
        self, texts: Sequence[str], *, batch_size: int = 32, stop: Callable[[list[int]], bool] | None = None
    ) -> np.ndarray:
        """Embed ``texts``: returns float32 ``(len(texts), 384)``, each row L2-normalised.

        Each text is truncated to :attr:`max_tokens` (256, incl. [CLS]/[SEP]); the
        vector is the mean of the last hidden state over the attention mask, then
        L2-normalised (sentence-transformers' all-MiniLM-L6-v2 rules). Texts are
        sorted by token length and batched (at most ``batch_size`` texts and
        :data:`MAX_BATCH_TOKENS` padded positions per ONNX run) so batches carry little
        padding; up to ``threads`` batches run at once; rows come back in input order.
        ``[]`` -> shape (0, 384). ``stop(indices done)``, when given, is called before each ONNX run with the
        indices of the texts whose rows are filled so far (a list the lanes extend); once it returns True the runs
        left are skipped and the other rows are left unset (an indexing run's Ctrl-C waits for one run, not all).
        A foreground call: background runs (:meth:`embed_background`) give way while it is in flight.

        Raises:
            TypeError: an item is not a ``str``.
            ValueError: ``batch_size`` < 1.
            ModelError: onnxruntime fails while running the model.
        """
        with self.foreground():
            out, ids, batches = self._encoded(texts, batch_size)
            if not batches:
                return out
            n = len(ids)
            done: list[int] = []
            if len(batches) == 1 or self.threads == 1:
                self._run_batches(ids, batches, out, stop, done)
            else:  # the caller runs every threads-th batch, the pool the rest
                pool = self._batch_pool()
                lanes = min(self.threads, len(batches))
                futures = [
                    pool.submit(self._run_batches, ids, batches[lane::lanes], out, stop, done)
                    for lane in range(1, lanes)
                ]
                try:
                    self._run_batches(ids, batches[0::lanes], out, stop, done)
                finally:
                    for f in futures:
                        f.result()  # re-raises a lane's ModelError (after every lane has stopped)
            self._finished(n, len(batches))
            return out

    def _encoded(self, texts: Sequence[str], batch_size: int) -> tuple[np.ndarray, list[list[int]], list[list[int]]]:
        """The output rows to fill ((n, 384) float32, unset), the texts' token ids and the batches they run in (no
        batch for no text). Raises as :meth:`embed` for a bad item or ``batch_size``."""
        texts = _checked_texts(texts, batch_size)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out, [], []
        ids = self._tokens.encode_for_model(texts)
        return out, ids, self._batches(ids, batch_size)

    def embed_background(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = 32,
        stop: Callable[[list[int]], bool] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """:meth:`embed` for bulk work (indexing) that gives way to questions: same vectors, same ``stop``.

        Every ONNX run happens on a background lane, a pool thread :data:`BACKGROUND_NICE` nicer than the caller
        (Linux; elsewhere as nice as the caller), and waits before it starts while a foreground call
        (:meth:`embed`, :meth:`embed_query`, :meth:`foreground`) is in flight, up to :data:`YIELD_MAX_S`. A question
        thus never queues behind a bulk run, and shares a core with at most the tail of one. The calling thread
        only waits, calling ``progress(texts done)`` every :data:`PROGRESS_EVERY_S` and once at the end.

        Raises what :meth:`embed` raises.
        """
        out, ids, batches = self._encoded(texts, batch_size)
        if not batches:
            return out
        n = len(ids)
        done: list[int] = []

        def give_way(done: list[int]) -> bool:
            self._wait_for_foreground()
            return stop is not None and stop(done)

        pool = self._lanes_in_background()
        lanes = min(self.threads, len(batches))
        futures = [
            pool.submit(self._run_batches, ids, batches[lane::lanes], out, give_way, done) for lane in range(lanes)
        ]
        reported = -1
        while futures_wait(futures, timeout=PROGRESS_EVERY_S).not_done:
            if progress is not None and len(done) != reported:
                reported = len(done)
                progress(reported)
        for f in futures:
            f.result()  # re-raises a lane's ModelError
        if progress is not None:
            progress(len(done))
        self._finished(n, len(batches))
        return out

    @contextmanager
    def foreground(self) -> Iterator[None]:
        """Marks work a person waits for (a search, an answer) for its duration: background runs do not start
        while it lasts (up to :data:`YIELD_MAX_S` each). :meth:`embed` is one already; a caller may hold it
        around a whole question so the index also gives way to its scoring. Re-entrant, thread-safe."""
        with self._foreground_done:
            self._foreground += 1
        try:
            yield
        finally:
            with self._foreground_done:
                self._foreground -= 1
                if not self._foreground:
                    self._foreground_done.notify_all()

    def _wait_for_foreground(self) -> None:
        with self._foreground_done:
            if self._foreground:
                self._foreground_done.wait_for(lambda: not self._foreground, timeout=YIELD_MAX_S)

    def _finished(self, n: int, batches: int) -> None:
        with self._lock:
            self.embeddings_computed += n
        if batches >= TRIM_AFTER_BATCHES:
            trim_heap()  # the freed buffers of these runs go back to the system, not to the heap's free lists

    def _batches(self, ids: list[list[int]], batch_size: int) -> list[list[int]]:
        """Indices into ``ids``, grouped into ONNX runs: ascending token length, at most ``batch_size`` texts
        and :data:`MAX_BATCH_TOKENS` padded positions per run.

        A call smaller than ``threads`` batches is split so every lane gets work (16 texts on 2 threads: two
        runs of 8), but no batch below :data:`MIN_PARALLEL_BATCH` texts (a question is one run on one thread).
        A dynamically quantised model (:attr:`one_text_per_run`) runs each text alone.
        """
        n = len(ids)
        order = sorted(range(n), key=lambda i: len(ids[i]))
        if self.one_text_per_run:
            return [[i] for i in order]
        cap = min(batch_size, max(MIN_PARALLEL_BATCH, -(-n // self.threads)))
        batches: list[list[int]] = []
        for i in order:  # ascending length: the text added is the widest of its batch so far
            if batches and len(batches[-1]) < cap and (len(batches[-1]) + 1) * len(ids[i]) <= MAX_BATCH_TOKENS:
                batches[-1].append(i)
            else:
                batches.append([i])
        return batches

    def _run_batches(
        self,
        ids: list[list[int]],
        batches: list[list[int]],
        out: np.ndarray,
        stop: Callable[[list[int]], bool] | None,
        done: list[int],
    ) -> None:
        """Run each batch through the model, writing its sentence vectors into the rows ``out[batch]`` and their
        indices into ``done``, until ``stop(done)`` says to stop."""
        for idx in batches:
            if stop is not None and stop(done):
                return
            out[idx] = self._run_batch(ids, idx)
            done.extend(idx)

    def _run_batch(self, ids: list[list[int]], idx: list[int]) -> np.ndarray:
        """One ONNX run over the texts ``idx`` (ascending length): float32 ``(len(idx), dim)``, L2-normalised."""
        width = len(ids[idx[-1]])  # longest in this batch (sorted ascending)
        input_ids = np.zeros((len(idx), width), dtype=np.int64)
        mask = np.zeros((len(idx), width), dtype=np.int64)
        for row, i in enumerate(idx):
            seq = ids[i]
            input_ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)}
        try:
            hidden = self._session.run([self._output_name], feeds, self._run_options)[0]
        except Exception as exc:
            raise ModelError(
                f"Embedding model {self.model_id} failed on a batch of {len(idx)} texts of up to {width} tokens: {exc}"
            ) from exc
        return _mean_pool_l2(hidden, mask)

    def _batch_pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                # `threads` workers (one lane per call needs only threads - 1): two callers at once (the notes'
                # indexing and the PDF queue) each get their lanes at once, none waits behind the other's batches.
                self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="cairn-embed")
            return self._pool

    def _lanes_in_background(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._background_pool is None:
                # 2 × threads workers: two background callers at once (notes and PDFs) each get their lanes at once.
                self._background_pool = ThreadPoolExecutor(
                    max_workers=2 * self.threads, thread_name_prefix="cairn-embed-bg", initializer=_be_nicer
                )
            return self._background_pool

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one text (a search question): float32 ``(384,)``, L2-normalised. Same rules as :meth:`embed`."""
        return self.embed([text])[0]

    def __repr__(self) -> str:
        return f"Embedder({self.model_id!r}, threads={self.threads}, dir={str(self.model_dir)!r})"


def _be_nicer() -> None:
    """Lower the calling thread's scheduling priority by :data:`BACKGROUND_NICE` (Linux, where niceness is per
    thread; a no-op elsewhere or when the system refuses)."""
    if sys.platform != "linux":
        return
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + BACKGROUND_NICE))
    except OSError as exc:  # pragma: no cover - a sandbox without setpriority
        log.debug("background embedding lane keeps its priority: %s", exc)


def _mean_pool_l2(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of ``hidden`` [b, s, d] over positions where ``mask`` [b, s] is 1, then L2 rows (eps 1e-12)."""
    m = mask.astype(np.float32)[:, :, None]
    summed = (hidden * m).sum(axis=1)
    counts = np.maximum(m.sum(axis=1), 1e-9)
    pooled = summed / counts
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)

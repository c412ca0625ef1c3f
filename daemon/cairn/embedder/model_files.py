"""The embedding model's files (part of :mod:`cairn.embedder`, layer 1): where they are, the manifest checked against
the rules this code applies, and the WordPiece tokenizer without the ONNX session (:class:`TokenCounter`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cairn.errors import ModelError

MODEL_NAME = "all-MiniLM-L6-v2"
#: Default model folder: ``cairn/onnx_models/all-MiniLM-L6-v2`` beside this file (in a checkout a symlink to
#: ``<repo>/onnx_models/``; in a wheel the files themselves, pyproject.toml's package-data).
DEFAULT_MODEL_DIR = Path(__file__).resolve().parent.parent / "onnx_models" / MODEL_NAME
#: Environment variable overriding the default model folder.
MODEL_DIR_ENV = "CAIRN_MODEL_DIR"
MANIFEST_FILE = "manifest.json"
TOKENIZER_FILE = "tokenizer.json"
#: Values the code is written for; the manifest must agree (sentence-transformers config).
DIM = 384
MAX_TOKENS = 256
#: Words whose token counts a :class:`TokenCounter` keeps, per generation (two generations: at most twice this many,
#: about 120 bytes each, so ~16 MB at most).
WORD_CACHE_SIZE = 65_536
#: A word, as counted: a run of characters Python does not call whitespace.
_WORD_RE = re.compile(r"\S+")


def resolve_model_dir(model_dir: Path | str | None = None) -> Path:
    """The model folder to use: ``model_dir`` if given, else ``$CAIRN_MODEL_DIR``, else :data:`DEFAULT_MODEL_DIR`.

    Only resolves the path; nothing is read. Errors are raised by the loaders.
    """
    if model_dir is not None:
        return Path(model_dir).expanduser()
    env = os.environ.get(MODEL_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return DEFAULT_MODEL_DIR


def fix_hint(model_dir: Path) -> str:
    """What to do when the model files are missing or wrong (the end of every such error message)."""
    return (
        f"Expected the shipped model in {model_dir} (set {MODEL_DIR_ENV} or pass model_dir to "
        "point elsewhere); rebuild it with `make model` (packaging/build_model.py) or restore "
        "onnx_models/ from git."
    )


def read_manifest(model_dir: Path) -> dict[str, Any]:
    """The manifest of ``model_dir``, checked against what this code applies; raises :class:`ModelError`."""
    if not model_dir.is_dir():
        raise ModelError(f"Embedding model folder not found: {model_dir}. {fix_hint(model_dir)}")
    path = model_dir / MANIFEST_FILE
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"Embedding model manifest missing: {path}. {fix_hint(model_dir)}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"Embedding model manifest unreadable: {path}: {exc}. {fix_hint(model_dir)}") from exc
    if not isinstance(manifest, dict):
        raise ModelError(f"Embedding model manifest {path} is not a JSON object. {fix_hint(model_dir)}")
    for key, expected in (("dim", DIM), ("max_tokens", MAX_TOKENS), ("pooling", "mean"), ("normalisation", "L2")):
        if manifest.get(key) != expected:
            raise ModelError(
                f"Embedding model manifest {path}: {key} is {manifest.get(key)!r}, "
                f"this Cairn expects {expected!r}. {fix_hint(model_dir)}"
            )
    return manifest


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class TokenCounter:
    """The embedding model's WordPiece tokenizer, without the ONNX session.

    Cheap to build (parses tokenizer.json; no onnxruntime); used by chunking to keep chunks within
    :attr:`max_tokens`. ``count_tokens`` counts *content* tokens, i.e. without the
    ``[CLS]``/``[SEP]`` the model adds, so a chunk fits the model when
    ``count_tokens(text) <= max_tokens - 2``.

    Raises:
        ModelError: ``tokenizer.json`` missing or unreadable.
    """

    #: Model input limit, including [CLS] and [SEP] (sentence-transformers max_seq_length).
    max_tokens: int = MAX_TOKENS

    def __init__(self, model_dir: Path | str | None = None) -> None:
        from tokenizers import Tokenizer  # noqa: PLC0415  (lazy: no work at import time)

        self.model_dir = resolve_model_dir(model_dir)
        path = self.model_dir / TOKENIZER_FILE
        if not path.is_file():
            raise ModelError(f"Embedding tokenizer missing: {path}. {fix_hint(self.model_dir)}")
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
            raise ModelError(f"Embedding tokenizer unreadable: {path}: {exc}. {fix_hint(self.model_dir)}") from exc
        # The shipped tokenizer.json pads and truncates to 128; we do neither here:
        # counting must see every token, and Embedder truncates to 256 itself.
        tok.no_padding()
        tok.no_truncation()
        cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        if cls_id is None or sep_id is None:
            raise ModelError(f"Embedding tokenizer {path} has no [CLS]/[SEP] tokens. {fix_hint(self.model_dir)}")
        self._tok = tok
        # Ids without character offsets where the library has it (tokenizers >= 0.20), else the full encoding.
        self._encode_batch = getattr(tok, "encode_batch_fast", tok.encode_batch)
        self.cls_id: int = cls_id
        self.sep_id: int = sep_id
        #: Token counts of words seen lately (:meth:`count_tokens_many`): the young generation, then the old one.
        self._young: dict[str, int] = {}
        self._old: dict[str, int] = {}

    def count_tokens(self, text: str) -> int:
        """Number of content tokens in ``text`` (no [CLS]/[SEP], no truncation), summed over its words as
        :meth:`count_tokens_many` does. ``""`` -> 0."""
        return self.count_tokens_many((text,))[0]

    def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        """:meth:`count_tokens` for many texts at once: the sum of each whitespace-separated word's count, words not
        seen lately tokenised in one parallel batch (without character offsets).

        WordPiece splits at whitespace before anything else, so a word's count does not depend on its neighbours
        and the sum is the text's count, or more: where Python splits at a character the tokenizer drops (a
        control character such as U+001F) the sum counts one word as two. It never counts fewer, so a chunk
        within its budget by this count is within the model's window. Counts are kept for the last
        :data:`WORD_CACHE_SIZE` to twice that many distinct words (two generations: a full young one becomes the
        old one, the old one is dropped; a word found in the old one moves back to the young one). Thread-safe:
        a race loses a cache entry, never a count.
        """
        young, old = self._young, self._old
        split = [_WORD_RE.findall(t) for t in texts]
        counts: dict[str, int] = {}
        missing: list[str] = []
        promoted: list[str] = []
        for words in split:
            for w in words:
                if w in counts:
                    continue
                c = young.get(w)
                if c is None:
                    c = old.get(w)
                    if c is None:
                        counts[w] = 0
                        missing.append(w)
                        continue
                    promoted.append(w)
                counts[w] = c
        if missing:
            for w, e in zip(missing, self._encode_batch(missing, add_special_tokens=False)):
                counts[w] = len(e.ids)
        self._remember(counts, promoted + missing)
        return [sum(map(counts.__getitem__, words)) for words in split]

    def _remember(self, counts: dict[str, int], words: list[str]) -> None:
        """Put ``words`` (their ``counts``) in the young generation, turning it old when it is full; neither
        generation ever holds more than :data:`WORD_CACHE_SIZE` words."""
        young = self._young
        for start in range(0, len(words), WORD_CACHE_SIZE):
            part = words[start : start + WORD_CACHE_SIZE]
            if len(young) + len(part) > WORD_CACHE_SIZE:
                self._old, self._young = young, {}
                young = self._young
            for w in part:
                young[w] = counts[w]

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character ``(start, end)`` offsets in ``text`` of each content token, in order.

        Lets a chunker cut an over-long paragraph at a token boundary:
        ``text[:spans[k - 1][1]]`` holds the first ``k`` tokens.
        """
        return list(self._tok.encode(text, add_special_tokens=False).offsets)

    def encode_for_model(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids ready for the model: ``[CLS] + first (max_tokens - 2) content ids + [SEP]``.

        Same truncation as sentence-transformers (``truncation=True, max_length=256``
        on a single sequence keeps the leading tokens).
        """
        keep = self.max_tokens - 2
        return [
            [self.cls_id, *e.ids[:keep], self.sep_id] for e in self._encode_batch(list(texts), add_special_tokens=False)
        ]


def load_tokenizer(model_dir: Path | str | None = None) -> TokenCounter:
    """Load only the tokenizer (no onnxruntime session): cheap, for chunking and tests.

    ``model_dir`` defaults as for :class:`Embedder`. Raises :class:`ModelError` if
    ``tokenizer.json`` is missing or unreadable.
    """
    return TokenCounter(model_dir)

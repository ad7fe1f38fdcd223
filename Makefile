# Two commands a new user needs:  `make run`  and  `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

export MLFLOW_DISABLE_TELEMETRY ?= true

.PHONY: run lint test test-slow test-gpu test-qlib bench venv clean-cache study studies

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m backtest.cache compile
	touch $(STAMP)

venv: $(STAMP)

## Set up the environment and run the main job on the synthetic default market.
run: $(STAMP)
	$(PY) -m backtest $(ARGS)

## Lint and format check (ruff; configured in pyproject.toml). `ruff format` applies the format.
lint: $(STAMP)
	$(PY) -m ruff check backtest models tests benchmarks tools
	$(PY) -m ruff format --check backtest models tests benchmarks tools

## Set up the environment, lint, and run the default (fast) test suite with the library's doctests.
test: lint
	$(PY) -m pytest -m "not slow and not gpu" -n 2 -q

## Slow tests (long rolling backtests, quality checks).
test-slow: $(STAMP)
	$(PY) -m pytest -m "slow" -q

## GPU tests (skip cleanly without CUDA).
test-gpu: $(STAMP)
	$(PY) -m pytest -m "gpu" -q

## The Qlib importer against pyqlib's own reader (tests/data/test_qlib.py::test_pyqlib_*), in an environment of
## its own, $(QLIB_VENV): pyqlib and its dependencies (jupyter, cvxpy, gym, ...) stay out of $(VENV).
QLIB_VENV ?= .venv-qlib
QLIB_PY   := $(QLIB_VENV)/bin/python
$(QLIB_VENV)/.installed: pyproject.toml
	test -x $(QLIB_PY) || $(PYTHON) -m venv $(QLIB_VENV)
	$(QLIB_PY) -m pip install --quiet --upgrade pip
	$(QLIB_PY) -m pip install --quiet -e '.[dev,qlib]'
	touch $@

test-qlib: $(QLIB_VENV)/.installed
	$(QLIB_PY) -c 'import qlib'  # here the round trip must run, never skip
	$(QLIB_PY) -m pytest tests/data/test_qlib.py -k pyqlib -q

## Benchmarks (on demand; each prints ratios measured in one process). `make bench BENCH=features` runs one.
BENCH ?= synthetic features labels_splits portfolio tushare tracking lambdarank baselines transformer backtest
bench: $(STAMP)
	for b in $(BENCH); do echo "== $$b"; $(PY) benchmarks/bench_$$b.py || exit 1; done

## One study (conf/study/$(STUDY).yaml) run as a sweep, its report written to experiments/$(STUDY)/.
STUDIES := $(basename $(notdir $(wildcard conf/study/*.yaml)))
study: $(STAMP)
	@test -n "$(STUDY)" || { echo "usage: make study STUDY=NAME (one of: $(STUDIES))"; exit 2; }
	$(PY) -m backtest -m +study=$(STUDY) $(ARGS)
	$(PY) -m backtest.study report $(STUDY) --out experiments/$(STUDY) --no-log

## Every study of conf/study/, one after another (each study's minutes: experiments/digest.md).
studies: $(STAMP)
	for s in $(STUDIES); do $(MAKE) --no-print-directory study STUDY=$$s || exit 1; done
	$(PY) -m backtest.study digest experiments > experiments/digest.md

## Remove the feature cache and fold checkpoints (`.venv/bin/python -m backtest.cache list` shows them).
clean-cache: $(STAMP)
	$(PY) -m backtest.cache clear

.PHONY: ui ui-check team-store
UI_PORT ?= 5000

## A local MLflow UI on the project's store (127.0.0.1:$(UI_PORT), one worker, job runner off); prints the
## links of the experiment and of the latest study. Ctrl-C stops it.
ui: $(STAMP)
	$(PY) -m backtest.tracking.ui serve --port $(UI_PORT)

## A team store: an MLflow server on PostgreSQL (a local pgserver one unless MLFLOW_BACKEND_STORE_URI names
## one), bound to 127.0.0.1:$(UI_PORT); README "Scaling out" says how to expose it safely. Ctrl-C stops it.
team-store: $(STAMP)
	$(PY) -m backtest.tracking.team --port $(UI_PORT) $(ARGS)

## Look at the UI of a study in headless Chromium (by hand, not in CI; minutes); screenshots in outputs/ui-check/.
ui-check: $(STAMP)
	$(PY) -c 'import selenium' 2>/dev/null || $(PY) -m pip install --quiet -e '.[dev,ui]'
	$(PY) tools/ui_check.py $(ARGS)

# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint typecheck bench clean

$(STAMP): pyproject.toml requirements-dev.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(PY) -m agentscript.demo

test: setup
	$(PY) -m pytest -q -p no:cacheprovider
	$(PY) -m ruff check src tests bench
	$(PY) -m mypy

lint: setup
	$(PY) -m ruff check src tests bench
	$(PY) -m ruff format --check src tests bench

typecheck: setup
	$(PY) -m mypy

bench: setup
	$(PY) bench/parse.py
	$(PY) bench/turn.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

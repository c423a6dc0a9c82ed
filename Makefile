# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo demo-serve test lint typecheck bench clean editors-test vsix screenshot

$(STAMP): pyproject.toml requirements-dev.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	@echo "== 1. Check the example agents (parser + checker) =="
	-$(VENV)/bin/agentscript validate examples/
	@echo
	@rm -rf traces/Order_Status
	@echo "== 2. Run the seed 002 Order_Management agent through a scripted conversation =="
	$(VENV)/bin/agentscript run examples/order_status/order_status.agent \
		--conversation examples/order_status/late_order.yaml --trace-dir traces
	@echo
	@echo "== 3. What the LLM was given (the resolved prompt of the trace's LLM_STEP) =="
	@$(PY) -c "import json,glob,sys; f=sorted(glob.glob('traces/Order_Status/sessions/*/traces/*.json'))[-1]; \
	steps=json.load(open(f))['planTrace']['steps']; \
	[print('  [' + s['node'] + '] ' + s['input']['instructions'].replace(chr(10), chr(10) + '  ' + ' ' * (len(s['node']) + 3))) for s in steps if s['type']=='LLM_STEP']"
	@echo
	@echo
	@echo "== 4. A Mantle skill project on the same engine: an interrupt mid-block, then a resume =="
	$(VENV)/bin/agentscript run examples/card_bank \
		--conversation examples/card_bank/conversations/rule1_interrupt_resume.yml
	@echo
	@echo
	@$(MAKE) --no-print-directory demo-serve
	@echo "Trace files are in traces/ (one JSON file per turn). Try: $(VENV)/bin/agentscript --help"

demo-serve: setup
	@echo "== 5. The agent behind an HTTP API: agentscript serve, one session, two messages (stand-in model) =="
	$(PY) examples/serve_demo.py

# The suite runs on TEST_WORKERS processes (pytest-xdist; the machines have 2 cores, and much of
# the suite waits on served processes, databases and timeouts). TEST_WORKERS=0 runs it in one.
TEST_WORKERS ?= 2
test: setup editors-test
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal
	$(PY) -m ruff check src tests bench
	$(PY) -m mypy

# Rewrite docs/playground.png (the README image) from the playground browser test; an ordinary
# test run writes its screenshot to a temporary folder instead. Needs Chromium (see .ci/run).
screenshot: setup
	AGENTSCRIPT_UPDATE_SCREENSHOT=1 $(PY) -m pytest -q -p no:cacheprovider \
		tests/playground/test_playground_browser.py -k card_bank_hidden_tools

# The VS Code extension: its TextMate grammar is tested with vscode-tmgrammar-test (unit tests)
# and vscode-textmate over every corpus file. Node and npm come with the machine; the packages
# from the npm registry, pinned by package-lock.json.
EDITOR := editors/vscode
$(EDITOR)/node_modules/.installed: $(EDITOR)/package.json $(EDITOR)/package-lock.json
	cd $(EDITOR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

editors-test: $(EDITOR)/node_modules/.installed
	cd $(EDITOR) && npm test --silent

vsix: $(EDITOR)/node_modules/.installed
	cd $(EDITOR) && npm run --silent package

lint: setup
	$(PY) -m ruff check src tests bench
	$(PY) -m ruff format --check src tests bench

typecheck: setup
	$(PY) -m mypy

# The peers of bench/peers.py (LangGraph, OpenAI Agents SDK) are installed here only, never by
# `make test`.
bench: setup
	$(PY) -m pip install --quiet -r bench/requirements.txt
	$(PY) bench/parse.py
	$(PY) bench/turn.py
	$(PY) bench/peers.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache $(EDITOR)/node_modules

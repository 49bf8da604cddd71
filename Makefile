# Two commands do all the set-up: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test ui lint bench clean

# uv installs the same pinned range as pip in seconds instead of minutes (the demo's 3-minute
# budget includes set-up); pip is the fallback when uv cannot be had.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	($(BIN)/pip install -q uv && $(BIN)/uv pip install -q --python $(BIN)/python -e '.[test]') \
	  || $(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/backfill demo

test: $(STAMP)
	bash scripts/ensure-chromium.sh
	$(BIN)/ruff check .
	$(BIN)/pytest -q

ui: $(STAMP)
	bash scripts/ui.sh

bench: $(STAMP)
	$(BIN)/python benchmarks/run_overhead.py
	$(BIN)/python benchmarks/gates_vs_recompute.py

clean:
	rm -rf .backfill $(VENV)

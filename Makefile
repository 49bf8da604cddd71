# Two commands do all the set-up: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
WORKERS ?= 3  # on 2 cores: the end-to-end worker mostly waits on the daemon's ticks

.PHONY: demo test ui lint bench screenshots clean

# uv installs the same pinned ranges as pip in seconds instead of minutes; pip is the fallback.
# Bytecode is compiled once here: machines that set PYTHONDONTWRITEBYTECODE (CI does) would
# otherwise compile Dagster's ~2,000 modules on every command.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	($(BIN)/pip install -q uv && $(BIN)/uv pip install -q --python $(BIN)/python -e '.[test]') \
	  || $(BIN)/pip install -q -e '.[test]'
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib backfill_assets > /dev/null || true
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/backfill demo

test: $(STAMP)
	bash scripts/ensure-system-packages.sh
	$(BIN)/ruff check .
	$(BIN)/pytest -q -n $(WORKERS) --dist loadgroup

ui: $(STAMP)
	bash scripts/ui.sh

bench: $(STAMP)
	$(BIN)/uv pip install -q --python $(BIN)/python -e '.[bench]'
	$(BIN)/python benchmarks/scale.py

# Refreshes the README's screenshots from a real `dagster dev` (the tests write theirs to tmp).
screenshots: $(STAMP)
	BACKFILL_SCREENSHOTS=docs/screenshots $(BIN)/pytest -q tests/test_e2e_ui.py

clean:
	rm -rf .backfill $(VENV)

# Two commands do all the set-up: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
WORKERS ?= 3  # on 2 cores: one worker mostly waits (the end-to-end UI module, first); a fourth only contends (-n 4: 346 s and 622 CPU-s; -n 3: 316 s, 546)

.PHONY: demo test ui lint bench screenshots clean

# uv installs the same pinned ranges as pip in seconds instead of minutes; pip is the fallback.
# Bytecode is compiled once here: machines that set PYTHONDONTWRITEBYTECODE (CI does) would
# otherwise compile Dagster's ~2,000 modules on every command. Never imported, so not compiled: the
# packages' own test suites (pandas', numpy's: a fifth of the sources) and the installers.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	($(BIN)/pip install -q uv && $(BIN)/uv pip install -q --python $(BIN)/python -e '.[test]') \
	  || $(BIN)/pip install -q -e '.[test]'
	$(BIN)/python -m compileall -q -j 0 -x '/(tests|pip|setuptools|pkg_resources)/' $(VENV)/lib backfill_assets \
	  > /dev/null || true
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/backfill demo

test: $(STAMP)
	bash scripts/ensure-system-packages.sh
	$(BIN)/ruff check .
	@# the type check (~18 s from a cold cache) runs beside the tests, whose first minute mostly waits
	@# on the UI module's browser; its output follows theirs and either failing fails the target
	@log=$$(mktemp); $(BIN)/mypy > $$log 2>&1 & checker=$$!; \
	  trap 'kill $$checker 2>/dev/null; rm -f $$log; exit 130' INT TERM; \
	  $(BIN)/pytest -q -n $(WORKERS) --dist loadscope; tests=$$?; \
	  wait $$checker; typed=$$?; echo "mypy: $$(tail -n 1 $$log)"; \
	  [ $$typed -eq 0 ] || cat $$log; rm -f $$log; [ $$tests -eq 0 ] && [ $$typed -eq 0 ]

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

#!/usr/bin/env bash
# `make ui`: the Dagster UI (webserver + daemon) on http://127.0.0.1:3000 over the demo pipeline.
# State lives in BACKFILL_HOME (default ./.backfill): the warehouse, and DAGSTER_HOME (default
# $BACKFILL_HOME/dagster) whose dagster.yaml, written by `backfill init`, installs the plan-gate
# run coordinator.
set -euo pipefail
cd "$(dirname "$0")/.."
BACKFILL_HOME="${BACKFILL_HOME:-./.backfill}"
mkdir -p "$BACKFILL_HOME"
# absolute, since runs, sensors and the CLI resolve it from their own working directories
BACKFILL_HOME="$(cd "$BACKFILL_HOME" && pwd)"
export BACKFILL_HOME
export DAGSTER_HOME="${DAGSTER_HOME:-$BACKFILL_HOME/dagster}"
.venv/bin/backfill init --home "$BACKFILL_HOME"
exec .venv/bin/python scripts/dagster_dev.py dev -w workspace.yaml -h 127.0.0.1 -p 3000

"""The Dagster instance the CLI, `make ui` and the daemon share: DAGSTER_HOME with our dagster.yaml."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from backfill_assets.defs.coordinator import CAP_TAG, MAX_CAP
from backfill_assets.home import WAREHOUSE_URL_ENV, Home

DAILY_RUN_LIMIT = 4
INSTANCE_URL_ENV = "BACKFILL_DAGSTER_PG_URL"


def _storage(home: Home, postgres_url: str | None) -> str:
    if postgres_url:
        # SQLAlchemy 2.1 with psycopg 3 fails dagster-postgres's NOTIFY; psycopg2 works
        # (see docs/postgres-instance-notes.md)
        return f"""storage:
  postgres:
    postgres_url: "{postgres_url.replace('postgresql://', 'postgresql+psycopg2://', 1)}"
"""
    # One sqlite file for every run's events instead of a file per run plus an index copy, with
    # pooled connections in WAL mode (backfill_assets/dagster_storage.py says why).
    return f"""event_log_storage:
  module: backfill_assets.dagster_storage
  class: PooledSqliteEventLogStorage
  config:
    base_dir: "{home.dagster_home}/event_log"
"""


def dagster_yaml(home: Home, postgres_url: str | None = None) -> str:
    caps = "\n".join(
        f"      - key: \"{CAP_TAG.format(n)}\"\n        value: {{applyLimitPerUniqueValue: true}}\n"
        f"        limit: {n}" for n in range(1, MAX_CAP + 1))
    warehouse = os.environ.get(WAREHOUSE_URL_ENV)
    warehouse_line = f'    warehouse_url: "{warehouse}"\n' if warehouse else ""
    return f"""# Written by backfill-assets (`backfill init`). Backfill runs of each plan are capped at the
# plan's runs_at_once (the coordinator tags them backfill_assets/plan-cap-N=<plan>); daily
# (scheduled) runs keep their own limit.
run_coordinator:
  module: backfill_assets.defs.coordinator
  class: PlanGateRunCoordinator
  config:
    backfill_home: "{home.root}"
{warehouse_line}    max_concurrent_runs: 8
    dequeue_interval_seconds: 1
    dequeue_use_threads: true
    dequeue_num_workers: 4
    tag_concurrency_limits:
{caps}
      - key: "dagster/schedule_name"
        limit: {DAILY_RUN_LIMIT}
# A run whose worker died (kill -9, OOM) is marked failed instead of staying STARTED.
run_monitoring:
  enabled: true
  poll_interval_seconds: 10
{_storage(home, postgres_url)}telemetry:
  enabled: false
"""


def ensure_dagster_home(home: Home, postgres_url: str | None = None) -> Path:
    """Create DAGSTER_HOME with our dagster.yaml (rewritten only when it differs)."""
    path = home.dagster_home
    path.mkdir(parents=True, exist_ok=True)
    config = path / "dagster.yaml"
    if postgres_url is None and config.exists() and "postgres_url" in config.read_text():
        # keep an instance someone moved to Postgres with `backfill init --instance postgres`
        return path
    text = dagster_yaml(home, postgres_url)
    if not config.exists() or config.read_text() != text:
        config.write_text(text)
    return path


def instance_for(home: Home) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(str(ensure_dagster_home(home)))

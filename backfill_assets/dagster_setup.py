"""The Dagster instance the CLI and `dagster dev` share: DAGSTER_HOME with our dagster.yaml."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from backfill_assets.defs.coordinator import CAP_TAG, MAX_CAP
from backfill_assets.home import Home

DAILY_RUN_LIMIT = 4


def dagster_yaml(home: Home) -> str:
    path = home.dagster_home
    caps = "\n".join(
        f"      - key: \"{CAP_TAG.format(n)}\"\n        value: {{applyLimitPerUniqueValue: true}}\n"
        f"        limit: {n}" for n in range(1, MAX_CAP + 1))
    return f"""# Written by backfill-assets. Backfill runs of each plan are capped at the plan's
# max_concurrent_partitions (the coordinator tags them backfill_assets/plan-cap-N=<plan>);
# daily (non-backfill) runs keep their own limit.
run_coordinator:
  module: backfill_assets.defs.coordinator
  class: PlanGateRunCoordinator
  config:
    backfill_home: "{home.root}"
    max_concurrent_runs: 8
    dequeue_interval_seconds: 1
    tag_concurrency_limits:
{caps}
      - key: "dagster/schedule_name"
        limit: {DAILY_RUN_LIMIT}
# One sqlite file for every run's events instead of a file per run plus an index copy: each
# event is written once, which is most of a backfill's per-partition orchestration cost here
# (benchmarks/run_overhead.py). For production scale use a Postgres-backed instance instead.
event_log_storage:
  module: dagster._core.storage.event_log
  class: ConsolidatedSqliteEventLogStorage
  config:
    base_dir: "{path}/event_log"
telemetry:
  enabled: false
"""


def ensure_dagster_home(home: Home) -> Path:
    """Create DAGSTER_HOME with our dagster.yaml (rewritten only when it differs)."""
    path = home.dagster_home
    path.mkdir(parents=True, exist_ok=True)
    config = path / "dagster.yaml"
    text = dagster_yaml(home)
    if not config.exists() or config.read_text() != text:
        config.write_text(text)
    return path


def instance_for(home: Home) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(str(ensure_dagster_home(home)))

"""The Dagster internals we extend, exercised so an upgrade that moves them fails here first:
the pooled sqlite event log (backfill_assets/dagster_storage.py) and the run coordinator's config."""

from __future__ import annotations

import sqlite3

import dagster as dg

from backfill_assets.dagster_setup import instance_for
from backfill_assets.dagster_storage import PooledSqliteEventLogStorage
from backfill_assets.defs.coordinator import PlanGateRunCoordinator
from backfill_assets.home import Home
from tests.world import keys


def test_the_instance_uses_the_pooled_event_log_and_keeps_every_event(world):
    instance = instance_for(Home(world.home))
    try:
        assert isinstance(instance.event_log_storage, PooledSqliteEventLogStorage)
        assert isinstance(instance.run_coordinator, PlanGateRunCoordinator)
        job = world.defs().resolve_implicit_global_asset_job_def()
        result = job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey("daily_revenue")],
                                        tags={"dagster/asset_partition_range_start": "2026-01-01",
                                              "dagster/asset_partition_range_end": "2026-01-03"})
        assert result.success
        records = instance.fetch_materializations(dg.AssetKey("daily_revenue"), limit=10).records
        assert sorted(r.partition_key for r in records) == keys(1, 3)
        evaluations = instance.get_records_for_run(
            result.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION).records
        per_partition = {(r.event_log_entry.dagster_event.event_specific_data.partition,
                          r.event_log_entry.dagster_event.event_specific_data.check_name) for r in evaluations}
        assert len(per_partition) == 3 * 8  # every gate of every partition (eight since issue 25), with its partition
        # the file is in WAL mode; connections of this process are pooled, not one per event
        path = instance.event_log_storage.get_db_path()
        assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        engine = instance.event_log_storage._engine()
        assert engine.pool.checkedin() >= 1
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    finally:
        instance.dispose()

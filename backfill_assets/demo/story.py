"""`backfill demo`: the whole story on the embedded DuckDB, from sample data to evidence.

The demo is a user of the library like any team: it drives the `backfill` CLI and Dagster the way a
person would, with the demo pipeline in `examples/`.
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import time
from pathlib import Path

import dagster as dg
from examples.definitions import build_definitions
from examples.revenue import DAILY_REVENUE, DAILY_REVENUE_V1

from backfill_assets.cli import main as cli
from backfill_assets.dagster_setup import instance_for
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.errors import UsageError
from backfill_assets.execution.runner import enable_event_batching
from backfill_assets.home import Home
from backfill_assets.plan.gate import BACKFILL_TAG
from backfill_assets.warehouse.connection import connection

MARKER = ".backfill-demo"
FIRST_DAY, DAYS, ROWS_PER_DAY = dt.date(2026, 1, 1), 21, 2000
WINDOW = ("2026-01-05", "2026-01-18")
PROOF = "2026-01-06"
LATE_DAY = "2026-01-15"
PLAN_ID = "refund-double-count-fix"

PLAN_TEXT = f"""\
plan_id: {PLAN_ID}
owner: olivia
reason: >
  Release 2025-12 subtracted refunds twice from daily_revenue.net_revenue; finance dashboards
  under-report net revenue for {WINDOW[0]}..{WINDOW[1]}.
target: daily_revenue
window:
  start: {WINDOW[0]}
  end: {WINDOW[1]}
source_of_truth: orders
downstream:
  - asset: published_revenue
    owners: [finance-bi, revenue-dashboards]
execution:
  mode: overwrite
  idempotency: each partition is deleted and re-inserted from orders in one transaction, so a
    rerun yields the same rows (proved by fingerprints on the proof partition)
  business_keys: [order_date, region]
  max_concurrent_partitions: 4
  proof_partitions: [{PROOF}]
  allow_empty_partitions: false
incremental:
  watermark: the daily schedule keeps its cursor; the window is frozen while the plan is active
  metrics_comparable: one code version (2) for the whole window; the metric definitions are
    unchanged except the corrected net revenue
publish:
  pause: true
  notify: ["#revenue-consumers"]
rollback:
  strategy: backfill rollback restores daily_revenue and published_revenue for every written
    partition from the pre-run snapshots, checked by fingerprints
checks:
  row_count_parity: {{max_diff_pct: 0}}
  duplicates: {{max_rows: 0}}
  metrics:
    - {{name: orders, tolerance_pct: 0}}
    - {{name: gross, tolerance_pct: 0.01}}
    - {{name: refunds, tolerance_pct: 0.01}}
    - {{name: net_revenue, tolerance_pct: 0.01}}
  contract: {{enforce: true}}
approvals:
  required: 2
  granted: []
"""


def step(number: int, title: str) -> None:
    print(f"\n== {number}. {title}", flush=True)


def run(*args: str, expect: int = 0) -> None:
    print(f"$ backfill {' '.join(args)}", flush=True)
    code = cli(list(args))
    if code != expect:
        raise UsageError(f"demo step `backfill {' '.join(args)}` exited {code}, expected {expect}",
                         fix="see the output above")


def _prepare(home: Home) -> None:
    if home.root.exists() and any(home.root.iterdir()) and not (home.root / MARKER).exists():
        raise UsageError(f"{home.root} holds state that is not the demo's",
                         fix="pass --home to a new folder, or move that folder away")
    shutil.rmtree(home.root, ignore_errors=True)
    home.root.mkdir(parents=True)
    (home.root / MARKER).write_text("created by `backfill demo`; safe to delete\n")


def _net_revenue(home: Home, table: str) -> float:
    with connection(home.warehouse) as con:
        return float(con.execute(f"SELECT coalesce(sum(net_revenue), 0) FROM {table} "  # noqa: S608
                                 "WHERE order_date BETWEEN ? AND ?", list(WINDOW)).fetchone()[0])


def _truth(home: Home) -> float:
    with connection(home.warehouse) as con:
        return float(con.execute(
            "SELECT sum(amount) - coalesce(sum(amount) FILTER (WHERE status = 'refunded'), 0) "
            "FROM orders WHERE order_date BETWEEN ? AND ?", list(WINDOW)).fetchone()[0])


def _in_process(defs: dg.Definitions, instance: dg.DagsterInstance, assets: list[str],
                tags: dict[str, str]) -> dg.ExecuteInProcessResult:
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(
        instance=instance, asset_selection=[dg.AssetKey(a) for a in assets], tags=tags,
        raise_on_error=False, run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}})


def run_demo(home: Home) -> int:
    started = time.monotonic()
    enable_event_batching()
    _prepare(home)
    h = ["--home", str(home.root)]
    plan = home.root / "plans" / f"{PLAN_ID}.yaml"
    instance = instance_for(home)
    last = (FIRST_DAY + dt.timedelta(days=DAYS - 1)).isoformat()

    step(1, "Sample orders: deterministic order events, generated inside DuckDB")
    run(*h, "init")
    run(*h, "sample", "--days", str(DAYS), "--rows-per-day", str(ROWS_PER_DAY),
        "--start", FIRST_DAY.isoformat())

    step(2, "The buggy release (refunds counted twice) loads and publishes the history")
    buggy = build_definitions(DAILY_REVENUE_V1, database=str(home.warehouse))
    seeded = _in_process(buggy, instance, ["daily_revenue", "published_revenue"], {
        "dagster/asset_partition_range_start": FIRST_DAY.isoformat(),
        "dagster/asset_partition_range_end": last})
    assert seeded.success, "seeding the buggy history failed"
    before = _net_revenue(home, "published_revenue")
    print(f"published net revenue {WINDOW[0]}..{WINDOW[1]}: {before:,.2f} "
          f"(orders say {_truth(home):,.2f})")

    step(3, "A backfill launched like the UI does, without a plan, is refused before any write")
    fixed = build_definitions(DAILY_REVENUE, database=str(home.warehouse))
    refused = _in_process(fixed, instance, ["daily_revenue"],
                          {BACKFILL_TAG: "ui-demo", "dagster/partition": WINDOW[0]})
    print(f"run {refused.run_id[:8]} {'FAILED' if not refused.success else 'succeeded?!'}: "
          "no approved replay plan covers the partition (see the Runs page in `make ui`)")

    step(4, "Draft the replay plan; the guard refuses it until it is approved")
    plan.parent.mkdir(parents=True, exist_ok=True)
    plan.write_text(PLAN_TEXT)
    run(*h, "plan", "validate", str(plan))
    run(*h, "guard", str(plan), expect=1)

    step(5, "Two approvers who are not the owner; the guard passes")
    run(*h, "plan", "approve", str(plan), "--by", "alice")
    run(*h, "plan", "approve", str(plan), "--by", "bob")
    run(*h, "guard", str(plan))

    step(6, "Proof slice, twice, through Dagster: identical fingerprints")
    run(*h, "run", str(plan), "--proof")

    step(7, f"Late events with no region arrive for {LATE_DAY}; the window runs in slices")
    with connection(home.warehouse) as con:
        con.execute("INSERT INTO orders SELECT order_id + 10000000, customer_id, NULL, order_ts, "
                    "order_date, amount, status FROM orders WHERE order_date = ? LIMIT 3",
                    [LATE_DAY])
    run(*h, "run", str(plan), "--dry-run")
    run(*h, "run", str(plan), expect=1)

    step(8, "The gates table shows why; quarantine the bad events and resume")
    run(*h, "reconcile", str(plan), expect=1)
    with connection(home.warehouse) as con:
        con.execute("CREATE TABLE IF NOT EXISTS orders_quarantine AS "
                    "SELECT * FROM orders WHERE region IS NULL")
        con.execute("DELETE FROM orders WHERE region IS NULL")
    run(*h, "run", str(plan))
    run(*h, "reconcile", str(plan))

    step(9, "The reopen sensor sees every gate passed and requests the publish run")
    defs_sensor = fixed.resolve_sensor_def("daily_revenue__reopen_publish")
    context = dg.build_sensor_context(instance=instance, definitions=fixed, resources={
        "warehouse": WarehouseResource(database=str(home.warehouse))})
    [request] = defs_sensor.evaluate_tick(context).run_requests
    published = _in_process(fixed, instance, ["published_revenue"], dict(request.tags))
    assert published.success, "the publish run failed"
    run(*h, "status", str(plan))

    step(10, "Evidence for the audit, rendered from the hash-chained record")
    evidence = home.root / "evidence" / f"{PLAN_ID}.yaml"
    run(*h, "evidence", str(plan), "--out", str(evidence))
    run(*h, "evidence", "verify")

    step(11, "Rollback rehearsal on a copy of the warehouse (the real one is untouched)")
    with tempfile.TemporaryDirectory() as rehearsal:
        shutil.copy(home.warehouse, Path(rehearsal) / "warehouse.duckdb")
        run("--home", rehearsal, "rollback", str(plan), "--dry-run")
        run("--home", rehearsal, "rollback", str(plan))
        rolled = _net_revenue(Home(Path(rehearsal)), "published_revenue")
        print(f"rehearsal: published net revenue back to {rolled:,.2f} (the pre-backfill value)")

    after = _net_revenue(home, "published_revenue")
    print("\n== Repaired")
    print(f"published net revenue {WINDOW[0]}..{WINDOW[1]}: {before:,.2f} -> {after:,.2f} "
          f"(orders say {_truth(home):,.2f}; {after - before:+,.2f} restored)")
    print(f"evidence   {evidence}")
    print(f"Dagster    {home.dagster_home}: `make ui` shows these runs, checks and the plan's "
          f"publish; demo took {time.monotonic() - started:.0f}s")
    return 0

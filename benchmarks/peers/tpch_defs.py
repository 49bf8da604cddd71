"""This project's definitions for benchmarks/backfill_peers.py: TPC-H `lineitem` -> `daily_pricing`.

A replayable table declared like any team's (`make_replayable_table`), daily partitions on
l_shipdate from 1992-01-01, the SQL of benchmarks/peers/tpch.py in the range form
(`$partition_start` / `$partition_end`; `BENCH_SELECT_FORM=partition` declares `= $partition`), runs
of `BENCH_PARTITIONS_PER_RUN` partitions (default 30), Dagster's in-process executor as the demo's.
`backfill --defs benchmarks/peers/tpch_defs.py` loads it.

Run as a script it loads the table's history plan-free, as a team's incremental runs did before the
replay (`python tpch_defs.py history --home H --start D --end D`): one Dagster range run of the
released (buggy) transform over empty partitions, target and published table, in this process.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import dagster as dg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tpch  # noqa: E402

from backfill_assets.defs.replayable import make_replayable_table  # noqa: E402
from backfill_assets.defs.resources import backfill_resources  # noqa: E402
from backfill_assets.table import Column, Metric, TableSpec  # noqa: E402

PARTITIONS = dg.DailyPartitionsDefinition(start_date="1992-01-01")
PER_RUN = int(os.environ.get("BENCH_PARTITIONS_PER_RUN", "30"))
FORM = os.environ.get("BENCH_SELECT_FORM", "range")
WHERE = {"range": "l_shipdate >= $partition_start AND l_shipdate < $partition_end",
         "partition": "l_shipdate = $partition"}[FORM]

LINEITEM = dg.AssetSpec(tpch.SOURCE, partitions_def=PARTITIONS, group_name="tpch", kinds={"sql"},
                        description="TPC-H SF1 lineitem (tpchgen-cli), the source of truth.")

DAILY_PRICING = TableSpec(
    name=tpch.TABLE,
    source=tpch.SOURCE,
    select_sql=tpch.select_sql(WHERE),
    partition_column="l_shipdate",
    source_partition_column="l_shipdate",
    business_keys=tpch.KEYS,
    contract=tuple(Column(c, t, nullable=c not in tpch.KEYS) for c, t in tpch.COLUMNS),
    metrics=(
        Metric("sum_qty", "sum(sum_qty)", "sum(l_quantity)"),
        Metric("sum_base_price", "sum(sum_base_price)", "sum(l_extendedprice)"),
        Metric("count_order", "sum(count_order)", "count(*)"),
    ),
    publish_as="published_pricing",
    code_version="2",
    description="TPC-H Q1's pricing summary per ship day, return flag and line status.",
    range_form=FORM == "range",  # a run's days in one statement: one scan of lineitem a run
)
# the release before the fix: avg_disc averaged the tax (no metric reads it, so its gates passed)
RELEASED = replace(DAILY_PRICING, select_sql=tpch.select_sql(WHERE, disc=tpch.BUGGY_DISC), code_version="1")


def build(spec: TableSpec = DAILY_PRICING, home: str = "") -> dg.Definitions:
    table = make_replayable_table(spec, PARTITIONS, group_name="tpch", partitions_per_run=PER_RUN)
    return dg.Definitions(assets=[LINEITEM, *table.assets], sensors=table.sensors,
                          resources=backfill_resources(home), executor=dg.in_process_executor)


defs = build()


def load_history(home: str, start: str, end: str) -> None:
    """The released transform over [start, end], plan-free (empty partitions), then its publish."""
    from backfill_assets.dagster_setup import instance_for
    from backfill_assets.execution.runner import enable_event_batching, failure_messages
    from backfill_assets.home import Home

    enable_event_batching()
    os.environ["BACKFILL_HOME"] = str(Path(home).resolve())  # where its runs are deployed, as the CLI sets it
    instance = instance_for(Home(Path(home)))
    job = build(RELEASED, home).resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(
        instance=instance, raise_on_error=False,
        asset_selection=[dg.AssetKey(DAILY_PRICING.name), dg.AssetKey(DAILY_PRICING.publish_as)],
        tags={"dagster/asset_partition_range_start": start, "dagster/asset_partition_range_end": end,
              "backfill_assets/actor": "incremental history (benchmark)"},
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    instance.dispose()
    if not result.success:
        raise SystemExit("history load failed: " + "; ".join(failure_messages(result)))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["history"])
    parser.add_argument("--home", required=True)
    parser.add_argument("--start", required=True)
    parser.add_argument("--end", required=True)
    args = parser.parse_args()
    os.environ.pop("DAGSTER_HOME", None)
    load_history(args.home, args.start, args.end)

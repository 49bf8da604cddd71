"""Dagster alone, doing what `backfill run PLAN --and-publish` has it do, with no SQL: the floor of
the one command's time for a window, for benchmarks/backfill_peers.py.

One process, as the one command: the interpreter, Dagster and this project's modules imported, the
home's Dagster instance (this project's event storage, events batched as the product batches them),
then the runs the one command makes, each storing the events the UI shows for it and nothing
else: the proof's two one-partition runs, the window's runs of `--per-run` partitions (each
partition's materialization with a run's metadata, and its eight gate results logged as one batch
with their figures), and publish's one run over the window (each partition's materialization of the
published asset). No warehouse is opened, no gate computed, no evidence recorded or verified.

    .venv/bin/python benchmarks/peers/event_floor.py --home DIR --start 1995-01-01 --days 366 [--per-run 30]
        [--json OUT]

Prints (and writes to OUT) one JSON object: the seconds of each phase, measured inside the process
from its first line (the interpreter's start is the caller's to time, from outside).
"""


import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

started = time.perf_counter()

import dagster as dg  # noqa: E402 - timed from the process's start

from backfill_assets.dagster_inprocess import execute_selection  # noqa: E402
from backfill_assets.dagster_setup import instance_for  # noqa: E402
from backfill_assets.execution.runner import enable_event_batching  # noqa: E402
from backfill_assets.gates.results import GATE_NAMES  # noqa: E402
from backfill_assets.home import Home  # noqa: E402
from backfill_assets.tags import RANGE_END, RANGE_START  # noqa: E402

PARTITIONS = dg.DailyPartitionsDefinition(start_date="1992-01-01")
TARGET = dg.AssetKey("daily_pricing")
PUBLISHED = dg.AssetKey("published_pricing")
# a run's metadata as the target's and the published asset's carry it (numbers, a range, the impact
# in a markdown table of ten partitions), so each event serializes to about the size ours do
IMPACT = "\n".join(["| partition | added | removed | changed | sum_qty Δ | sum_base_price Δ | count_order Δ |",
                    "|---|---|---|---|---|---|---|",
                    *(f"| 1995-01-{d:02d} | 0 | 0 | 1 | +0.00 | +0.00 | +0.00 |" for d in range(1, 11))])


def _run_metadata(keys: list[str]) -> dict[str, Any]:
    return {"plan": "tpch-replay", "rows": 30, "partitions": dg.MetadataValue.int(len(keys)),
            "partitions_failing_gates": dg.MetadataValue.int(0), "range": f"{keys[0]}..{keys[-1]}",
            "impact_partitions_changed": dg.MetadataValue.int(len(keys)), "impact_added": dg.MetadataValue.int(0),
            "impact_removed": dg.MetadataValue.int(0), "impact_changed": dg.MetadataValue.int(len(keys)),
            "impact_sum_qty_difference": dg.MetadataValue.float(0.0),
            "impact_sum_base_price_difference": dg.MetadataValue.float(0.0),
            "impact_count_order_difference": dg.MetadataValue.float(0.0), "impact": dg.MetadataValue.md(IMPACT)}


@dg.multi_asset(
    name="daily_pricing",
    specs=[dg.AssetSpec(TARGET, partitions_def=PARTITIONS, code_version="2")],
    check_specs=[dg.AssetCheckSpec(name, asset=TARGET, partitions_def=PARTITIONS, blocking=True)
                 for name in GATE_NAMES],
    partitions_def=PARTITIONS, can_subset=True,
)
def target(context: dg.AssetExecutionContext) -> Iterator[Any]:
    from backfill_assets.dagster_storage import log_check_evaluations

    keys = list(context.partition_keys)
    yield dg.MaterializeResult(asset_key=TARGET, metadata=_run_metadata(keys))
    detail = "target 2 rows vs 2 key groups in the source (0.00% <= 0%)"
    log_check_evaluations(context, [dg.AssetCheckEvaluation(
        asset_key=TARGET, check_name=gate, passed=True, partition=key, blocking=True,
        severity=dg.AssetCheckSeverity.ERROR, description=detail,
        metadata={**{f"figure.{f}": dg.MetadataValue.float(1.0)
                     for f in ("actual", "difference", "difference_pct", "expected", "threshold_pct")},
                  "detail": dg.MetadataValue.text(detail)})
        for key in keys for gate in GATE_NAMES])


@dg.asset(key=PUBLISHED, deps=[TARGET], partitions_def=PARTITIONS)
def published(context: dg.AssetExecutionContext) -> dg.MaterializeResult[Any]:
    return dg.MaterializeResult(metadata=_run_metadata(list(context.partition_keys)))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--start", required=True)
    parser.add_argument("--days", type=int, required=True)
    parser.add_argument("--per-run", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    first = dt.date.fromisoformat(args.start)
    days = [(first + dt.timedelta(days=i)).isoformat() for i in range(args.days)]
    enable_event_batching()
    imported = time.perf_counter()
    instance = instance_for(Home(args.home))
    job = dg.Definitions(assets=[target, published], executor=dg.in_process_executor) \
        .resolve_implicit_global_asset_job_def()
    opened = time.perf_counter()

    def run(asset: dg.AssetKey, keys: list[str]) -> None:
        tags = {"dagster/partition": keys[0]} if len(keys) == 1 else {RANGE_START: keys[0], RANGE_END: keys[-1]}
        result = execute_selection(job, [asset], instance=instance, tags=tags, run_config={})
        if not result.success:
            raise SystemExit(f"event_floor: the run over {keys[0]}..{keys[-1]} failed")

    for _ in range(2):  # the proof: its partition twice
        run(TARGET, days[:1])
    proved = time.perf_counter()
    rest = days[1:]
    for i in range(0, len(rest), args.per_run):
        run(TARGET, rest[i:i + args.per_run])
    window = time.perf_counter()
    run(PUBLISHED, days)
    done = time.perf_counter()
    phases = {"imports": imported - started, "instance": opened - imported, "proof": proved - opened,
              "window": window - proved, "publish": done - window, "runs": 3 + -(-len(rest) // args.per_run)}
    print(json.dumps(phases))
    if args.json:
        args.json.write_text(json.dumps(phases) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

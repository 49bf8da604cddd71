"""Per-partition orchestration overhead of `backfill run` for a 30-partition window.

Overhead = wall time of the window through Dagster (persistent sqlite instance, per-partition
check results) minus the SQL work alone (the same writes, fingerprints and gates called directly on
an identical copy of the warehouse). Both are measured side by side in one run, interleaved, and
the medians are reported, because these machines are shared and noisy.

    .venv/bin/python benchmarks/run_overhead.py [--rounds 3] [--rows-per-day 2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import datetime as dt  # noqa: E402

from backfill_assets.cli import main as cli  # noqa: E402
from backfill_assets.control import record  # noqa: E402
from backfill_assets.dagster_compat import latest_check_results  # noqa: E402
from backfill_assets.dagster_setup import instance_for  # noqa: E402
from backfill_assets.execution.slice_write import gate_slice, write_slice  # noqa: E402
from backfill_assets.execution.stages import window_stage  # noqa: E402
from backfill_assets.gates.results import GATE_NAMES  # noqa: E402
from backfill_assets.home import Home  # noqa: E402
from backfill_assets.plan.gate import clear  # noqa: E402
from backfill_assets.sample import generate_orders  # noqa: E402
from backfill_assets.warehouse.connection import connection  # noqa: E402
from examples.definitions import build_definitions  # noqa: E402
from examples.revenue import DAILY_REVENUE  # noqa: E402
from tests.plans import complete_plan, write_plan  # noqa: E402

WINDOW = 30
START = dt.date(2026, 2, 1)


def prepare(base: Path, rows_per_day: int, slice_size: int) -> tuple[Home, Path]:
    home = Home(base / "home")
    home.root.mkdir(parents=True)
    with connection(home.warehouse) as con:
        generate_orders(con, start=START, days=WINDOW + 1, rows_per_day=rows_per_day)
    end = START + dt.timedelta(days=WINDOW)  # 31 days: one proof partition + a 30-partition window
    plan = write_plan(base / "plan.yaml", complete_plan(
        plan_id="bench", start=START.isoformat(), end=end.isoformat(), proof=(START.isoformat(),),
        max_concurrent=slice_size))
    for who in ("alice", "bob"):
        assert cli(["--home", str(home.root), "plan", "approve", str(plan), "--by", who]) == 0
    assert cli(["--home", str(home.root), "run", str(plan), "--proof"]) == 0
    return home, plan


def through_dagster(home: Home, plan: Path) -> float:
    started = time.perf_counter()
    assert cli(["--home", str(home.root), "run", str(plan)]) == 0
    return time.perf_counter() - started


def sql_only(home: Home, slice_size: int) -> float:
    """The same work without Dagster: clear, write, fingerprint and gate each slice."""
    with connection(home.warehouse) as con:
        state = record.require(con, "bench")
    stage = window_stage(state.partition_keys, state.proof_keys, set(), slice_size)
    started = time.perf_counter()
    for keys in stage.slices:
        with connection(home.warehouse) as con:
            clearance = clear(con, "daily_revenue", list(keys), {"backfill_assets/plan": "bench"})
            writes = write_slice(con, DAILY_REVENUE, clearance, run_id="sql-only", actor="bench")
            gate_slice(con, DAILY_REVENUE, clearance, writes, "bench")
    return time.perf_counter() - started


def checks_recorded(home: Home) -> int:
    """Partitions of the window whose five gate results Dagster recorded with their partition."""
    instance = instance_for(home)
    with connection(home.warehouse, read_only=True) as con:
        state = record.require(con, "bench")
    count = 0
    for key in [k for k in state.partition_keys if k not in state.proof_keys]:
        states = latest_check_results(instance, dg.AssetKey("daily_revenue"), list(GATE_NAMES), key)
        count += len(states) == len(GATE_NAMES) and all(s.passed for s in states.values())
    instance.dispose()
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows-per-day", type=int, default=2000)
    parser.add_argument("--slices", default="1,5,10,30", help="max_concurrent_partitions to try")
    args = parser.parse_args()
    build_definitions()  # import cost paid once, as in a long-lived CLI process
    print(f"window {WINDOW} partitions, {args.rows_per_day} orders/day, persistent sqlite "
          f"instance, {args.rounds} interleaved rounds (median)\n")
    print(f"{'slice':>5} {'dagster s':>10} {'sql s':>8} {'overhead/partition':>19} "
          f"{'runs':>5} {'check results':>14}")
    for size in [int(s) for s in args.slices.split(",")]:
        dagster_times, sql_times, recorded = [], [], 0
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
                home_a, plan_a = prepare(Path(a), args.rows_per_day, size)
                home_b = Home(Path(b) / "home")
                shutil.copytree(home_a.root, home_b.root)
                os.environ["BACKFILL_HOME"] = str(home_a.root)
                dagster_times.append(through_dagster(home_a, plan_a))
                sql_times.append(sql_only(home_b, size))
                recorded = checks_recorded(home_a)
        wall, sql = statistics.median(dagster_times), statistics.median(sql_times)
        runs = -(-WINDOW // size)
        print(f"{size:>5} {wall:>10.2f} {sql:>8.2f} {(wall - sql) / WINDOW * 1000:>16.0f} ms "
              f"{runs:>5} {recorded:>8}/{WINDOW}", flush=True)


if __name__ == "__main__":
    main()

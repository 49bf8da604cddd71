"""`backfill run`: the plan's stages through Dagster, on the instance the UI shows.

Each slice is one in-process Dagster run per contiguous range of partitions (tagged with the plan),
so every partition gets its own check results while the run overhead is paid once per slice.
The run halts at the first slice whose gates fail; a rerun skips what is already reconciled.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import dagster as dg

from backfill_assets.control import gate_record, record
from backfill_assets.control.record import PlanState
from backfill_assets.defs.replayable import ACTOR_TAG, ReplayableTable
from backfill_assets.defs.sensor import RANGE_END, RANGE_START
from backfill_assets.execution.progress import advance
from backfill_assets.execution.stages import Stage, contiguous_ranges
from backfill_assets.plan.gate import PLAN_TAG
from backfill_assets.warehouse.connection import connection

# the console shows our progress bar; Dagster's own event log stays in the instance and the UI
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}

# Dagster writes a range run's per-partition materialization events one transaction each unless
# this is set; batched, they are one write per run (benchmarks/run_overhead.py measures it).
# Check evaluations are not batchable in Dagster 1.13 and stay one write each.
EVENT_BATCH_ENV = ("DAGSTER_EVENT_BATCH_SIZE", "1000")


def enable_event_batching() -> None:
    os.environ.setdefault(*EVENT_BATCH_ENV)


@dataclass
class SliceReport:
    partitions: list[str]
    failed: dict[str, list[str]] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.errors


class Progress:
    """done/total, elapsed and ETA on stderr; redrawn in place on a terminal."""

    def __init__(self, total: int, label: str, out=sys.stderr) -> None:
        self.total, self.label, self.out = total, label, out
        self.done = 0
        self.started = time.monotonic()
        self.tty = out.isatty()

    def advance(self, n: int) -> None:
        self.done += n
        elapsed = time.monotonic() - self.started
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        width = 24
        filled = int(width * self.done / self.total) if self.total else width
        line = (f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                f"partitions  elapsed {elapsed:5.1f}s  ETA {eta:5.1f}s")
        self.out.write(("\r" + line) if self.tty else line + "\n")
        if self.tty and self.done >= self.total:
            self.out.write("\n")
        self.out.flush()


def run_slice(table: ReplayableTable, definitions: dg.Definitions, instance: dg.DagsterInstance,
              state: PlanState, keys: list[str], actor: str) -> SliceReport:
    job = definitions.resolve_implicit_global_asset_job_def()
    report = SliceReport(list(keys))
    for first, last in contiguous_ranges(keys):
        tags = {PLAN_TAG: state.plan_id, ACTOR_TAG: actor}
        if first == last:
            tags["dagster/partition"] = first
        else:
            tags.update({RANGE_START: first, RANGE_END: last})
        result = job.execute_in_process(
            instance=instance, asset_selection=[table.target.key],
            tags=tags, raise_on_error=False, run_config=QUIET,
        )
        report.run_ids.append(result.run_id)
        if not result.success:
            failures = [e.event_specific_data.error.message.strip().splitlines()[0]
                        for e in result.all_events
                        if e.is_step_failure and e.event_specific_data is not None
                        and getattr(e.event_specific_data, "error", None) is not None]
            report.errors += failures or [f"run {result.run_id} failed"]
    return report


def gate_failures(warehouse: str, state: PlanState, keys: list[str]) -> dict[str, list[str]]:
    with connection(warehouse) as con:
        latest = gate_record.latest(con, state.target, keys, state.plan_id)
    return {k: (e.failed or ["not evaluated"]) if e else ["not written"]
            for k, e in latest.items() if e is None or not e.passed}


def execute(stage: Stage, table: ReplayableTable, definitions: dg.Definitions,
            instance: dg.DagsterInstance, warehouse: str, state: PlanState, actor: str,
            say: Callable[[str], None]) -> list[SliceReport]:
    """Run the stage's slices in order, halting at the first slice that fails."""
    reports: list[SliceReport] = []
    progress = Progress(len(stage.partitions) * stage.repeats, stage.name)
    for repeat in range(stage.repeats):
        for keys in stage.slices:
            report = run_slice(table, definitions, instance, state, list(keys), actor)
            report.failed = gate_failures(warehouse, state, list(keys))
            reports.append(report)
            progress.advance(len(keys))
            if not report.ok:
                for error in report.errors:
                    say(f"  run failed: {error}")
                for key, gates in report.failed.items():
                    say(f"  {key}: {', '.join(gates)} failed")
                say(f"halted at {stage.name} slice {', '.join(keys)} (pass {repeat + 1})")
                return reports
    return reports


def settle(warehouse: str, plan_id: str, actor: str) -> PlanState:
    """Record what the evidence now proves (proof passed, window reconciled)."""
    with connection(warehouse) as con:
        return advance(con, record.require(con, plan_id), actor)

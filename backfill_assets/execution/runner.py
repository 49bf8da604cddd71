"""`backfill run`: the plan's stages through Dagster, on the instance the UI shows.

Each run of a stage is one Dagster run over a contiguous range of partitions, tagged with the plan, so
every partition gets its own check results while the run overhead is paid once per run. The
run holds the plan's lease, renews it between runs, stops before the next run when the plan
is paused or cancelled, honours the plan's throttle, and halts at the first run whose gates
fail; a rerun skips what already passed.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from backfill_assets import faults
from backfill_assets.control import lease, ledger, record
from backfill_assets.control.record import PlanState
from backfill_assets.dagster_inprocess import execute_selection
from backfill_assets.environment import is_process, pid_running, process_identity
from backfill_assets.execution.stages import Stage
from backfill_assets.graph import implicit_job
from backfill_assets.loaded_defs import LoadedDefs, LoadedTable
from backfill_assets.plan.phases import ENDED, Hold
from backfill_assets.tags import (
    HOST_TAG,
    PID_TAG,
    PROCESS_TAG,
    RANGE_END,
    RANGE_START,
    VERDICTS_JOB,
    cli_run_tags,
)
from backfill_assets.warehouse import Warehouse, kept_open
from backfill_assets.warehouse.engine import Session

# Dagster writes a range run's per-partition materialization events one transaction each unless
# this is set; batched, they are one write per run (benchmarks/run_overhead.py measures it).
EVENT_BATCH_ENV = ("DAGSTER_EVENT_BATCH_SIZE", "1000")


def enable_event_batching() -> None:
    os.environ.setdefault(*EVENT_BATCH_ENV)


@dataclass
class RunReport:
    partitions: list[str]
    failed: dict[str, list[str]] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.errors


class Progress:
    """done/total, elapsed and ETA on the terminal; redrawn in place on a tty."""

    def __init__(self, total: int, label: str, write: Callable[[str], None], tty: bool) -> None:
        self.total, self.label, self.write, self.tty = total, label, write, tty
        self.done = 0
        self.started = time.monotonic()

    def advance(self, n: int) -> None:
        self.done += n
        elapsed = time.monotonic() - self.started
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        width = 24
        filled = int(width * self.done / self.total) if self.total else width
        line = (f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                f"partitions  elapsed {elapsed:5.1f}s  ETA {eta:5.1f}s")
        self.write(("\r" + line + ("\n" if self.done >= self.total else "")) if self.tty else line + "\n")


def failure_messages(result: dg.ExecuteInProcessResult) -> list[str]:
    """The first line of each failed step's error: our one-line messages, the SQL error's cause."""
    out = []
    for failed in _step_failures(result):
        user = getattr(failed, "user_failure_data", None)
        error = getattr(failed, "error", None)
        text = (user.description if user is not None and user.description else None) or \
            (error.message if error is not None else "step failed")
        cause = getattr(error, "cause", None)
        while cause is not None and "Error occurred while executing" in text:
            text, cause = cause.message, getattr(cause, "cause", None)
        out.append(text.strip().splitlines()[0] if text.strip() else "step failed")
    return out


def run_range(loaded: LoadedDefs, table: LoadedTable, instance: dg.DagsterInstance, plan_id: str | None,
              keys: list[str], actor: str, run_config: dict[str, Any], launcher: str | None = None,
              assets: Sequence[str] | None = None) -> tuple[str, list[str]]:
    """One Dagster run of the target over `keys` (contiguous); returns its id and failures.
    `launcher`: the lease holder's label when this process is one of its workers; `assets`: what the
    run materializes instead of the target alone (a plan-free load adds the published asset)."""
    job = implicit_job(loaded.definitions)
    tags = our_run_tags(plan_id, actor, launcher)
    if len(keys) == 1:
        tags["dagster/partition"] = keys[0]
    else:
        tags.update({RANGE_START: keys[0], RANGE_END: keys[-1]})
    selection = [dg.AssetKey(a.split("/")) for a in (assets or [table.spec.name])]
    result = execute_selection(job, selection, instance=instance, tags=tags, run_config=run_config)
    if not result.success and interrupted(result):
        # Dagster turns a Ctrl-C during a step into a failed run: the command said "run failed:
        # dagster._core.errors.DagsterExecutionInterruptedError" and "halted" (exit 1), as if the
        # plan's code had failed (found by an attack); the run is recorded failed, the command stops
        raise KeyboardInterrupt
    return result.run_id, ([] if result.success else failure_messages(result) or [f"run {result.run_id} failed"])


INTERRUPTS = frozenset({"KeyboardInterrupt", "DagsterExecutionInterruptedError"})


def interrupted(result: dg.ExecuteInProcessResult) -> bool:
    """Whether a step of the run failed of an interrupt (SIGINT, or SIGTERM once Dagster mapped it)."""
    return any(getattr(getattr(failed, "error", None), "cls_name", None) in INTERRUPTS
               for failed in _step_failures(result))


def _step_failures(result: dg.ExecuteInProcessResult) -> list[Any]:
    """What each failed step of the run reported (its error, the user's failure data)."""
    return [event.event_specific_data for event in result.all_events
            if event.is_step_failure and event.event_specific_data is not None]


def gate_failures(session: Session, state: PlanState, keys: list[str],
                  asset: str | None = None) -> dict[str, list[str]]:
    latest = ledger.latest(session, asset or state.target, keys, state.plan_id, figures=False)
    return {k: (e.failed or ["not evaluated"]) if e else ["not written"]
            for k, e in latest.items() if e is None or not e.passed}


def execute(stage: Stage, warehouse: Warehouse, state: PlanState, held: lease.Lease,
            run_wave: Callable[[list[list[str]], str], list[tuple[str, list[str]]]], parallel: int = 1
            ) -> list[RunReport]:
    """Run the stage's runs (of its table) in waves of `parallel` runs at once; before each wave
    stop when the plan is paused or cancelled; halt after the first wave with a failure."""
    # on DuckDB the database stays loaded from one wave to the next (closing it writes a checkpoint
    # and opening it loads it: 10-19% of a 2,526-partition window's CPU), and commands waiting for the file
    # (`backfill pause`, `status`) are let in between two waves
    with kept_open():
        return _execute(stage, warehouse, state, held, run_wave, parallel)


def _execute(stage: Stage, warehouse: Warehouse, state: PlanState, held: lease.Lease,
             run_wave: Callable[[list[list[str]], str], list[tuple[str, list[str]]]], parallel: int
             ) -> list[RunReport]:
    from backfill_assets import terminal as output

    say = output.say
    reports: list[RunReport] = []
    progress = Progress(len(stage.partitions) * stage.repeats, stage.name, output.write, output.terminal_is_tty())
    throttle = state.approved.plan.execution.max_partitions_per_minute
    asset = stage.asset or state.target
    for repeat in range(stage.repeats):
        runs = [list(s) for s in stage.runs]
        for i in range(0, len(runs), parallel):
            wave = runs[i:i + parallel]
            started = time.monotonic()
            warehouse.engine.yield_to_waiters()
            with contextlib.ExitStack() as wave_session:
                session = wave_session.enter_context(warehouse.session())
                now = record.require(session, state.plan_id)
                if now.hold:
                    say(f"plan {state.plan_id} is {now.hold}: stopped before {_at(stage, wave[0][0])} (runs in flight "
                        "finished); " + ("`backfill run` resumes" if now.hold is Hold.PAUSED
                                         else f"roll it back with `backfill rollback {state.plan_id}`"))
                    return reports + [RunReport(wave[0], errors=[f"plan {now.hold}"])]
                if now.phase in ENDED:
                    # a rollback (or withdraw, close) let in between two runs, as a pause is: the next
                    # run was launched anyway, refused by the permission with "approve the plan", and
                    # left failed in the UI (found by an attack)
                    say(f"plan {state.plan_id} was {now.phase} while this run went: stopped before "
                        f"{_at(stage, wave[0][0])} (runs in flight finished); `backfill status {state.plan_id}` "
                        "says what is left")
                    return reports + [RunReport(wave[0], errors=[f"plan {now.phase}"])]
                try:
                    lease.renew(session, held)
                except lease.LeaseLost as exc:
                    say(f"{exc.message}: stopped before {wave[0][0]} (runs in flight finished)")
                    return reports + [RunReport(wave[0], errors=["lease lost"])]
                # on DuckDB the connection stays open, idle, while the wave's runs write, so theirs
                # join this process's open database instead of loading it again
                if not warehouse.engine.hold_during_runs:
                    wave_session.close()
                outcomes = run_wave(wave, asset)
                faults.checkpoint("run.after_wave")
                if not warehouse.engine.hold_during_runs:
                    session = wave_session.enter_context(warehouse.session())
                failed = gate_failures(session, state, [k for keys in wave for k in keys], asset)
            for keys, (run_id, errors) in zip(wave, outcomes, strict=True):
                report = RunReport(keys, run_ids=[run_id], errors=errors)
                report.failed = {k: g for k, g in failed.items() if k in keys}
                reports.append(report)
                progress.advance(len(keys))
            bad = [r for r in reports[-len(wave):] if not r.ok]
            if bad:
                for report in bad:
                    for error in report.errors[:3]:
                        say(f"  run failed: {error}")
                    for key, gates in list(report.failed.items())[:10]:
                        what = "not written" if gates == ["not written"] else f"{', '.join(gates)} failed"
                        say(f"  {key}: {what}")
                say(f"halted at {stage.name} run {bad[0].partitions[0]}..{bad[0].partitions[-1]} "
                    f"(pass {repeat + 1})" + (f" of {asset}" if stage.asset else ""))
                return reports
            if throttle:
                budget = sum(len(k) for k in wave) * 60.0 / throttle
                left = budget - (time.monotonic() - started)
                if left > 0:
                    warehouse.engine.let_go()  # the file is free while the run waits
                    time.sleep(left)
    return reports


def _at(stage: Stage, key: str) -> str:
    return key if stage.asset is None else f"{stage.asset} {key}"


def worker_run(defs_ref: str | None, home_root: str, warehouse_url: str | None, plan_id: str, target: str,
               keys: list[str], actor: str, verbose: bool, launcher: str | None = None,
               held: lease.Identity | None = None) -> tuple[str, list[str]]:
    """One run in a worker process (runs_at_once > 1 on a server engine), under the lease `held` of
    the process that started it."""
    from pathlib import Path

    from backfill_assets import terminal
    from backfill_assets.dagster_setup import instance_for
    from backfill_assets.home import HOME_ENV, WAREHOUSE_URL_ENV, Home
    from backfill_assets.loaded_defs import load_defs

    if held is not None:
        lease.held_here(held)
    os.environ[HOME_ENV] = home_root
    if warehouse_url:
        os.environ[WAREHOUSE_URL_ENV] = warehouse_url
    enable_event_batching()
    terminal.set_verbose(verbose)
    home = Home(Path(home_root))
    loaded = load_defs(defs_ref)
    with terminal.dagster_output(home):
        return run_range(loaded, loaded.table(target), instance_for(home), plan_id, keys, actor,
                         terminal.run_config(), launcher)


def our_run_tags(plan_id: str | None, actor: str, launcher: str | None = None) -> dict[str, str]:
    """`cli_run_tags` of this process, its identity included (`fail_dead_runs` reads it)."""
    return cli_run_tags(plan_id, actor, launcher, process_identity(os.getpid()))


def fail_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Runs our CLI started whose process died (kill -9) are marked failed, not STARTED forever."""
    host = socket.gethostname()
    dead = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED,
                                                                 dg.DagsterRunStatus.STARTING])):
        pid, run_host = run.tags.get(PID_TAG), run.tags.get(HOST_TAG)
        if run_host != host or pid is None or not pid.isdigit() or int(pid) == os.getpid():
            continue
        # the process that made the run, named as no clock step changes it (a process that got its
        # pid once it died is not it); a run without that name (made before) lives while its pid runs
        process = run.tags.get(PROCESS_TAG)
        if not (is_process(int(pid), process) if process else pid_running(int(pid))):
            # a run showing verdicts the ledger holds (`defs/verdicts_shown.py`) wrote no partition
            what = ("some verdicts may not be shown: `backfill reconcile PLAN` shows them"
                    if run.job_name == VERDICTS_JOB else "every partition is wholly old or new")
            instance.report_run_failed(run, message=f"the backfill process (pid {pid}) died while the run "
                                                    f"was in progress; {what}")
            dead.append(run.run_id)
    return dead

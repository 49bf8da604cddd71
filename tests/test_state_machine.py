"""A property over whole plans: whatever order proofs, window runs, partition re-runs, out-of-band edits
and rollbacks (each followed by a fresh plan) come in, every partition holds exactly what a small
model says (the seeded history, the fixed recomputation, or what an edit left), the plan is in the
phase the evidence allows, the evidence chain verifies, and a final run reconciles to the clean
fingerprints.

Each example starts from a copy of one seeded warehouse (built once through Dagster), so examples
are independent and cheap; every command runs through the in-process CLI on real DuckDB and Dagster.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import sys
import tempfile
from pathlib import Path

import dagster as dg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from backfill_assets.control import evidence_log
from backfill_assets.demo.sample import generate_orders
from backfill_assets.identifiers import quote
from backfill_assets.warehouse.ddl import create_sql
from backfill_assets.warehouse.duckdb_engine import kept_open
from backfill_assets.warehouse.fingerprints import Fingerprint, fingerprints
from tests.conftest import _home_instance
from tests.world import BUGGY, DEMO_DEFS, FIXED, START, World, keys, pin_trust_root, signers_text

DAYS = keys(1, 5)       # the warehouse
WINDOW = keys(1, 4)     # every plan's window; 2026-01-05 lies outside and must never change
PROOF = "2026-01-01"  # at the edge, so the rest of the window is one contiguous run
PAST_PROOF = ("proven", "running", "reconciled")
# contiguous runs of the window: one Dagster run each (the plan runs up to four partitions per run)
MODES = st.sampled_from(["overwrite", "merge"])
STAGES = st.sampled_from(["approved", "proven", "reconciled"])
RANGES = [tuple(WINDOW[i:j]) for i in range(len(WINDOW)) for j in range(i + 1, len(WINDOW) + 1)]


def build_template(root: Path, instance: dg.DagsterInstance, ssh_keys: dict[str, Path]):
    """A small warehouse whose target holds the buggy release's rows for every day."""
    world = World(root, instance, ssh_keys)
    world.home.mkdir(parents=True)
    signers = root / "approvers" / "allowed_signers"
    signers.parent.mkdir(parents=True)
    signers.write_text(signers_text(ssh_keys))
    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=len(DAYS), rows_per_day=120, seed=5)
        pin_trust_root(session, signers)
    assert world.materialize(DAYS, spec=BUGGY).success  # an incremental run, as the release wrote them
    history = world.fingerprints("daily_revenue", DAYS)
    cols = ", ".join(quote(c) for c in FIXED.columns)
    with world.warehouse().session() as session:
        session.execute(create_sql(FIXED, "expected_revenue"))
        for key in DAYS:
            session.execute(f"INSERT INTO expected_revenue ({cols}) "
                            f"SELECT {cols} FROM ({FIXED.select_sql}) AS s",
                            {"partition_start": dt.date.fromisoformat(key),
                             "partition_end": dt.date.fromisoformat(key) + dt.timedelta(days=1)})
    clean = world.fingerprints("expected_revenue", DAYS)
    assert all(history[k] != clean[k] for k in DAYS)
    return history, clean


class PlanMachine(RuleBasedStateMachine):
    template: Path
    scratch: Path
    instance: dg.DagsterInstance
    ssh_keys: dict[str, Path]
    history: dict[str, Fingerprint]
    clean: dict[str, Fingerprint]

    def __init__(self) -> None:
        super().__init__()
        root = Path(tempfile.mkdtemp(dir=self.scratch))
        shutil.copytree(self.template, root, dirs_exist_ok=True)
        self.world = World(root, self.instance, self.ssh_keys)
        self.kept = contextlib.ExitStack()  # the example's database loaded once, as `world` keeps its own
        self.kept.enter_context(kept_open())
        self.model = dict(self.history)  # what each day must hold now
        self.count = 0
        self.plan = ""
        self.phase = ""
        self.written: set[str] = set()   # days the current plan wrote
        self.passed: set[str] = set()    # days whose latest write under the plan passes its gates
        self.snapshot: dict[str, Fingerprint] = {}  # what the current plan's rollback must restore

    # --- the model --------------------------------------------------------------------------------
    def new_plan(self, mode: str) -> None:
        self.count += 1
        self.plan = f"p{self.count}"
        self.world.approved_plan(self.plan, start=WINDOW[0], end=WINDOW[-1], proof=(PROOF,), mode=mode,
                                 per_run=4)
        self.phase, self.written, self.passed, self.snapshot = "approved", set(), set(), {}

    def wrote(self, days) -> None:
        for key in days:
            self.snapshot.setdefault(key, self.model[key])
            self.model[key] = self.clean[key]
            self.written.add(key)
            self.passed.add(key)

    def settle(self) -> None:
        """The phase `advance` reaches on the evidence, after a run or a reconcile."""
        if self.phase in ("approved", "proving") and PROOF in self.written:
            self.phase = "proven"  # a proof run writes the proof partition twice; its gates pass
        if self.phase in PAST_PROOF:
            if set(WINDOW) <= self.passed:
                self.phase = "reconciled"
            elif self.phase == "reconciled" or self.written - {PROOF}:
                self.phase = "running"

    def cli(self, *args: str) -> int:
        return self.world.cli(*args)

    def start_plan(self, mode: str, stage: str) -> None:
        """A fresh plan, approved, then run to `stage` (later phases get explored in few steps)."""
        self.new_plan(mode)
        if stage != "approved":
            self.run_the_plan(through_the_window=stage == "reconciled")
            assert self.phase == stage

    def roll_back(self) -> None:
        assert self.cli("rollback", self.plan) == 0
        assert self.world.phase(self.plan) == "rolled_back"
        self.model.update(self.snapshot)  # every partition the plan wrote, as it was before its first write

    # --- rules ------------------------------------------------------------------------------------
    @initialize(mode=MODES, stage=STAGES)
    def approve_first_plan(self, mode: str, stage: str) -> None:
        self.start_plan(mode, stage)

    @rule(through_the_window=st.booleans())
    def run_the_plan(self, through_the_window: bool) -> None:
        """`backfill run --proof` while the proof is open (then the window too, or not), else the window."""
        if self.phase in ("approved", "proving"):
            assert self.cli("run", self.plan, "--proof") == 0
            self.wrote([PROOF])
            self.settle()
            if not through_the_window:
                return
        assert self.cli("run", self.plan) == 0
        self.wrote([k for k in WINDOW if k != PROOF and k not in self.passed])
        self.settle()

    @precondition(lambda self: self.phase in PAST_PROOF)
    @rule(picked=st.sampled_from(RANGES))
    def rerun_partitions(self, picked: tuple[str, ...]) -> None:
        assert self.cli("run", self.plan, "--partitions", ",".join(picked)) == 0
        self.wrote(picked)
        self.settle()

    @rule(key=st.sampled_from(WINDOW), how=st.sampled_from(["update", "delete"]))
    def edit_out_of_band_then_reconcile(self, key: str, how: str) -> None:
        before = self.world.fingerprints("daily_revenue", [key])[key]
        if how == "update" or before.rows <= 1:  # a partition is never emptied
            self.world.run_sql("UPDATE daily_revenue SET net_revenue = net_revenue + 1 "
                               "WHERE order_date = ?", [key])
        else:
            self.world.run_sql("DELETE FROM daily_revenue WHERE order_date = ? AND region = "
                               "(SELECT min(region) FROM daily_revenue WHERE order_date = ?)", [key, key])
        after = self.world.fingerprints("daily_revenue", [key])[key]
        assert after != before
        self.model[key] = after
        self.passed.discard(key)  # reconcile judges the latest write on the data as it is now
        assert self.cli("reconcile", self.plan) == (0 if set(WINDOW) <= self.passed else 1)
        self.settle()

    @rule(mode=MODES, stage=STAGES)
    def rollback_then_run_a_fresh_plan(self, mode: str, stage: str) -> None:
        self.roll_back()
        self.start_plan(mode, stage)

    # --- invariants -------------------------------------------------------------------------------
    @invariant()
    def partitions_phase_and_evidence_agree_with_the_model(self) -> None:
        """Every day holds exactly what the model says (2026-01-05, outside the window, never changes),
        the plan is in the phase the evidence allows, and the evidence chain verifies: one session."""
        if not self.plan:
            return
        with self.world.warehouse().session(read_only=True) as session:
            now = fingerprints(session, "daily_revenue", FIXED.columns, self.world.scheme, "order_date", DAYS)
            phase = session.scalar("SELECT phase FROM backfill_control.plans WHERE plan_id = ?", [self.plan])
            assert evidence_log.verify(session) > 0
        assert now == self.model
        assert now["2026-01-05"] == self.history["2026-01-05"]
        assert phase == self.phase

    def teardown(self) -> None:
        try:
            if self.plan and sys.exc_info()[1] is None:  # not after a failed step: that one is reported
                self.finish()
        finally:
            self.kept.close()
            shutil.rmtree(self.world.root, ignore_errors=True)

    def finish(self) -> None:
        """A final full run and reconcile reach exactly the clean fingerprints, whatever came before;
        then the plan's rollback restores exactly what its first writes replaced."""
        if self.phase in ("approved", "proving"):
            self.run_the_plan(through_the_window=False)
        assert self.cli("run", self.plan, "--partitions", ",".join(WINDOW)) == 0
        self.wrote(WINDOW)
        assert self.cli("reconcile", self.plan) == 0
        assert self.world.phase(self.plan) == "reconciled"
        outside = DAYS[len(WINDOW):]
        assert self.world.fingerprints("daily_revenue", DAYS) == {
            **self.clean, **{k: self.history[k] for k in outside}}
        self.roll_back()
        assert self.world.fingerprints("daily_revenue", DAYS) == self.model
        assert self.cli("evidence", "verify") == 0


def test_any_sequence_of_runs_edits_and_rollbacks_keeps_partitions_whole_and_converges(
        tmp_path, ssh_keys, monkeypatch, shared_dagster_home):
    monkeypatch.setenv("BACKFILL_DEFS", DEMO_DEFS)
    # one Dagster instance for every example, with the storage `backfill init` configures (the CLI's
    # commands open it through DAGSTER_HOME): Dagster's test instance stores a run's events ~3x slower
    with _home_instance(tmp_path / "dagster-home", shared_dagster_home, monkeypatch) as instance:
        template = tmp_path / "template"
        history, clean = build_template(template, instance, ssh_keys)
        scratch = tmp_path / "examples"
        scratch.mkdir()
        machine = type("Machine", (PlanMachine,), {
            "template": template, "scratch": scratch, "instance": instance, "ssh_keys": ssh_keys,
            "history": history, "clean": clean})
        run_state_machine_as_test(machine, settings=settings(
            max_examples=4, stateful_step_count=4, deadline=None, database=None,
            suppress_health_check=[HealthCheck.too_slow]))

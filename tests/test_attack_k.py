"""Attack k: the chain's recorded `reads`, the plan's lease and holds, and the undeclared upstream,
under many PostgreSQL sessions at once (real second sessions, stall points, the server's own view
of who waits for a lock)."""

from __future__ import annotations

import threading
import time

import pytest

from backfill_assets import faults
from tests.test_graph import FULL_DEFS, MONTH, _january_and_a_plan_over_its_days, _published_by_region, defs_of, run
from tests.test_pg_concurrency import wait_for_waiters
from tests.world import BUGGY, failure_text

pytestmark = pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)


def _stall(monkeypatch, point: str, seconds: int = 120) -> int:
    seen = faults.reached(point)  # this process's count, which earlier tests moved
    monkeypatch.setenv(faults.STALL_ENV, f"{point}@{seen + 1}={seconds}")
    monkeypatch.delenv(faults.RELEASE_ENV, raising=False)
    return seen


def _until_reached(point: str, seen: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while faults.reached(point) <= seen and time.monotonic() < deadline:
        time.sleep(0.02)
    assert faults.reached(point) > seen, f"{point} never reached"


def test_a_month_written_while_a_rollback_waits_is_never_left_computed_from_the_restored_days(
        engine_world, monkeypatch, capsys):
    """Plan fix over 2026-01-05..08 of the days is published; the team deploys the monthly rollup
    and a UI backfill loads January's month (new: no plan needed) from the published days. Its
    write transaction holds the days in SHARE mode and has read them when `backfill rollback fix`
    starts: the rollback reads the chain (no month yet), then waits for the days to restore them.
    The month commits (and is published); the rollback then restores the days. Consumers read a
    month computed from the plan's days beside the restored days, and nothing records it: a later
    publish of the month counts the plan's writes as undone, so sees nothing wrong."""
    world = engine_world
    _january_and_a_plan_over_its_days(world)
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)  # the team deploys the monthly rollup
    seen = _stall(monkeypatch, "write.after_snapshot")
    outcome: dict[str, object] = {}
    month = threading.Thread(target=lambda: outcome.update(month=run(
        world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
        {"dagster/backfill": "ui-bf"}).success))
    month.start()
    try:
        _until_reached("write.after_snapshot", seen)  # the month's write holds the days (SHARE)
        rollback = threading.Thread(target=lambda: outcome.update(rollback=world.cli("rollback", "fix")))
        rollback.start()
        wait_for_waiters(world, 1, ("relation",))  # the rollback waits for the days
    finally:
        monkeypatch.setenv(faults.RELEASE_ENV, "write.after_snapshot")
    month.join(timeout=240)
    rollback.join(timeout=240)
    monkeypatch.delenv(faults.STALL_ENV)
    said = capsys.readouterr()
    # whichever came first, consumers never read a month that does not add up to the days beside it
    run(world, defs_of(world, BUGGY), ["published_monthly_revenue"], [MONTH], {"dagster/backfill": "ui-bf2"})
    month_now = _published_by_region(world, "published_monthly_revenue", "month")
    assert month_now in ({}, _published_by_region(world, "published_revenue", "order_date")), (outcome, said.err)
    # the month held the days first: it is in the chain the rollback reads, which refuses in one line
    assert outcome == {"month": True, "rollback": 1}, (outcome, said.err)
    if outcome["rollback"] != 0:
        refusal = [line for line in said.err.splitlines() if line.startswith("backfill:")]
        assert len(refusal) == 1 and "monthly_revenue 2026-01-01" in refusal[0] and "Traceback" not in said.err, \
            said.err
        assert world.phase("fix") == "published"


def test_a_month_loaded_by_definitions_without_its_days_asks_the_chain_which_tables_backfill_writes(
        engine_world):
    """Plan fix over 2026-01-05..08 of the days is run and cancelled: consumers never saw its days.
    An insider (who can write backfill_control, not read the evidence key) relabels the ledger's
    writes of daily_revenue while a code location declaring the month alone loads January's month:
    the check that its source is a table backfill writes asked the ledger alone, found it a raw
    source, and the month was computed from the cancelled plan's days with no reads recorded. The
    rows put back, a Materialize of the published month passes every check, and consumers read a
    month that does not add up to the days beside it."""
    from tests.test_graph import _days_plan, _january_days_published, _month_alone_defs

    world = engine_world
    _january_days_published(world)
    world.approve(_days_plan(world))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("cancel", "fix") == 0
    world.run_sql("UPDATE backfill_control.writes SET asset = 'daily_revenue_x' WHERE asset = 'daily_revenue'")
    loaded = run(world, _month_alone_defs(world), ["monthly_revenue"], [MONTH], {"dagster/backfill": "ui-bf"})
    world.run_sql("UPDATE backfill_control.writes SET asset = 'daily_revenue' WHERE asset = 'daily_revenue_x'")
    run(world, _month_alone_defs(world), ["published_monthly_revenue"], [MONTH], {"dagster/backfill": "ui-bf2"})
    month = _published_by_region(world, "published_monthly_revenue", "month")
    assert month in ({}, _published_by_region(world, "published_revenue", "order_date")), month
    assert not loaded.success, failure_text(loaded)


def test_a_cancel_typed_while_a_proofs_first_write_commits_cancels_the_plan(engine_world, monkeypatch, capfd):
    """`backfill run fix --proof` is writing its first partition (its transaction open, the plan's
    row held shared) when `backfill cancel fix` reads that the plan wrote nothing and is proving: a
    cancel of such a plan is a withdrawal, which waits for the plan's row, then finds the write and
    refuses (`withdrawing would leave them; roll it back instead`). The cancel typed to stop the plan
    did not: the plan stayed unheld and the proof wrote on."""
    world = engine_world
    assert world.materialize(["2026-01-01", "2026-01-02"]).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    seen = _stall(monkeypatch, "write.after_snapshot")
    codes: dict[str, int] = {}
    proof = threading.Thread(target=lambda: codes.update(proof=world.cli("run", "fix", "--proof")))
    proof.start()
    try:
        _until_reached("write.after_snapshot", seen)
        cancel = threading.Thread(target=lambda: codes.update(cancel=world.cli("cancel", "fix")))
        cancel.start()
        wait_for_waiters(world, 1, ("tuple", "transactionid"))  # the cancel waits for the plan's row
    finally:
        monkeypatch.setenv(faults.RELEASE_ENV, "write.after_snapshot")
    proof.join(timeout=240)
    cancel.join(timeout=240)
    said = capfd.readouterr()
    # (the cancel's line went to the proof's Dagster log: a command in this process writes there while a
    # run of the in-process `backfill run` goes)
    assert codes.get("cancel") == 0, (codes, said.err[-300:])
    found = world.sql("SELECT hold FROM backfill_control.plans WHERE plan_id = 'fix'")
    assert found and found[0][0] == "cancelled", (found, said.err)

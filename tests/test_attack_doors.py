"""Dagster's own doors (re-execution, in-process launches with hand-made tags, check-only selections,
the reopen sensor) against the write permission and the publish rule: an operator without an
approver's key writes, publishes or moves a plan only where the README says they can.

This module keeps what the attack found open; the doors that held (a plan's old runs re-executed
with their tags once it was published, closed, paused, cancelled or rolled back, a publish run
re-executed, a key past the definitions' last partition) are refused by checks other modules test."""

import dagster as dg

from backfill_assets.demo.definitions import PARTITIONS
from backfill_assets.tags import BACKFILL_TAG, PLAN_TAG
from tests.world import failure_text


def reconciled(world):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix") == 0
    assert world.phase() == "reconciled"


def _checks_only(world, tags: dict[str, str]):
    """A run of the target's checks alone, as the UI's "Execute" on a check launches it."""
    defs = world.defs()
    checks = dg.AssetSelection.checks_for_assets(dg.AssetKey("daily_revenue"))
    job = dg.define_asset_job("checks_only", selection=checks, partitions_def=PARTITIONS)
    with world.deployed():
        return dg.Definitions.merge(defs, dg.Definitions(jobs=[job])).resolve_job_def("checks_only") \
            .execute_in_process(instance=world.instance, tags=tags, raise_on_error=False)


def _writes(world) -> list[tuple]:
    return world.sql("SELECT partition_key, plan_id FROM backfill_control.writes ORDER BY write_id")


def test_a_run_of_the_checks_alone_writes_nothing_and_moves_no_plan(world):
    """Executing a replayable table's checks alone (the UI's "Execute" on a check, an asset job
    selecting only the checks) ran the target's body: it rewrote the partition under the plan named
    by the run's tags, moving a reconciled plan back to running, and filled a never-written
    partition without a plan, before Dagster failed the step on the materialization it had not
    selected, so the UI showed no materialization of bytes the ledger holds (found by an attack).
    Gates are judged on the write they belong to: a run of the checks alone is refused before it
    writes, naming the commands that do what it asked."""
    reconciled(world)
    before, published = _writes(world), world.phase()
    for tags in ({"dagster/partition": "2026-01-02", PLAN_TAG: "fix"},
                 {"dagster/partition": "2026-01-02", BACKFILL_TAG: "ui-bf"},
                 {"dagster/partition": "2026-01-07"}):
        result = _checks_only(world, tags)
        assert not result.success
        assert "checks alone" in failure_text(result), failure_text(result)
        assert _writes(world) == before, tags
        assert world.phase() == published == "reconciled"
    assert world.rows("daily_revenue", "2026-01-07") == 0
    # the target with its checks still writes as before
    assert world.materialize("2026-01-07").success and world.rows("daily_revenue", "2026-01-07") > 0

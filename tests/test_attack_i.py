"""Attack i: approvals, the trust root, rollback signatures and holds, as an operator, an approver
and a hurried user would try them."""

from __future__ import annotations

from tests.world import keys


def test_a_pause_typed_after_a_cancel_never_lets_the_cancelled_plan_run_again(world, run_cli):
    """`cancel` ends a plan's runs: "a cancelled one only rolls back". A `pause` typed after it (a
    colleague's, or a hurried second thought) replaced the cancel with a pause, and `backfill run`
    resumed the cancelled plan: it wrote its window again and could go on to publish."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-01",))
    assert run_cli("run", "fix", "--proof").code == 0
    cancelled = run_cli("cancel", "fix")
    assert cancelled.code == 0, cancelled.err
    writes_before = world.sql("SELECT count(*) FROM backfill_control.writes")[0][0]
    run_cli("pause", "fix")
    assert world.sql("SELECT hold FROM backfill_control.plans WHERE plan_id = 'fix'") == [("cancelled",)]
    resumed = run_cli("run", "fix")
    assert resumed.code == 1 and "cancelled" in resumed.err, resumed.out + resumed.err
    assert world.sql("SELECT count(*) FROM backfill_control.writes")[0][0] == writes_before
    assert world.phase("fix") == "proven"

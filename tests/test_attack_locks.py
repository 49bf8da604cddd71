"""Attacks on the lock, lease and rollback changes: a test per hole found."""

from __future__ import annotations

from tests.test_graph import FULL_DEFS, MONTH, _january_and_a_plan_over_its_days, defs_of, run
from tests.world import BUGGY


def test_keep_computed_naming_a_table_the_plan_wrote_is_refused_not_ignored(world, monkeypatch, capsys):
    """`--keep-computed daily_revenue` on a plan that wrote daily_revenue: the rollback restored the
    table the operator asked to keep (the name was only checked to be a table of the definitions),
    saying nothing of the option it ignored. One line, nothing changed."""
    _january_and_a_plan_over_its_days(world)
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    assert run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
               {"dagster/backfill": "ui-bf"}).success
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-06'")
    world.cli("reconcile", "fix")
    assert world.cli("cancel", "fix") == 0
    days = world.sql("SELECT sum(net_revenue) FROM daily_revenue")
    capsys.readouterr()
    code = world.cli("rollback", "fix", "--keep-computed", "monthly_revenue", "--keep-computed", "daily_revenue")
    said = capsys.readouterr()
    assert code == 2, said.out + said.err
    assert said.err.count("\n") == 1 and "daily_revenue" in said.err, said.err
    assert world.phase("fix") == "repairing"
    assert world.sql("SELECT sum(net_revenue) FROM daily_revenue") == days

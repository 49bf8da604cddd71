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


def test_keep_computed_never_leaves_an_active_plans_month_to_publish_over_the_restored_days(world, monkeypatch,
                                                                                           capsys):
    """Plan fix's days are published; plan q recomputes January's month from them and is reconciled,
    not yet published. fix is then cancelled; its rollback is refused, naming q's month, and offers
    `--keep-computed monthly_revenue`, which a plan that can itself be rolled back does not need:
    kept, the rollback restored the days and q then published a month computed from the days
    consumers no longer see (the month's publish reads no upstream)."""
    from tests.plans import write_plan
    from tests.test_graph import complete_plan

    _january_and_a_plan_over_its_days(world)
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    document = complete_plan(plan_id="q", start=MONTH, end=MONTH, proof=(MONTH,), per_run=1,
                             target="monthly_revenue", source="daily_revenue")
    document["downstream"] = [{"asset": "published_monthly_revenue", "owners": ["finance-bi"]},
                              {"asset": "revenue_report", "owners": ["finance-bi"]}]
    world.approve(write_plan(world.root / "plans" / "q.yaml", document))
    assert world.cli("run", "q", "--proof") == 0
    assert world.cli("run", "q") == 0
    assert world.phase("q") == "reconciled", world.phase("q")
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-06'")
    world.cli("reconcile", "fix")
    assert world.cli("cancel", "fix") == 0
    capsys.readouterr()
    assert world.cli("rollback", "fix") == 1
    said = capsys.readouterr()
    assert "by q" in said.err and "--keep-computed" not in said.err and "backfill rollback q" in said.err, said.err
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 1
    said = capsys.readouterr()
    assert said.err.count("\n") == 1 and "plan q can be rolled back" in said.err, said.err
    assert world.phase("fix") == "repairing"
    days = world.fingerprints("daily_revenue", ["2026-01-05", "2026-01-06", "2026-01-07", "2026-01-08"])
    assert world.cli("rollback", "q") == 0 and world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    assert world.phase("fix") == "rolled_back"
    assert world.fingerprints("daily_revenue", ["2026-01-05", "2026-01-06", "2026-01-07", "2026-01-08"]) != days

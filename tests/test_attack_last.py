"""The last attack: rollback --keep-computed and what follows it; the per-write lease check."""

from __future__ import annotations

from tests.plans import write_plan
from tests.test_graph import (
    FULL_DEFS,
    MONTH,
    _january_and_a_plan_over_its_days,
    _published_by_region,
    defs_of,
    graph_plan,
    run,
)
from tests.world import BUGGY, failure_text


def _kept(world, monkeypatch, capsys):
    _january_and_a_plan_over_its_days(world)
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    assert run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
               {"dagster/backfill": "ui-bf"}).success
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-06'")
    world.cli("reconcile", "fix")
    assert world.cli("cancel", "fix") == 0
    capsys.readouterr()


def test_keep_computed_dry_run_then_rollback_then_verify_status(world, monkeypatch, capsys):
    _kept(world, monkeypatch, capsys)
    code = world.cli("rollback", "fix", "--keep-computed", "monthly_revenue", "--dry-run")
    said = capsys.readouterr()
    assert code == 0, said.out + said.err
    assert "would leave 1 partition(s) of monthly_revenue" in said.out, said.out
    assert world.phase("fix") == "repairing"
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    capsys.readouterr()
    out = world.root / "ev.yaml"
    assert world.cli("evidence", "fix", "--out", str(out)) == 0
    capsys.readouterr()
    code = world.cli("evidence", "verify", "--against", str(out))
    said = capsys.readouterr()
    assert code == 0, said.out + said.err
    code = world.cli("status", "fix")
    said = capsys.readouterr()
    assert code == 0 and "Traceback" not in said.err, said.out + said.err


def test_keep_computed_then_a_graph_plan_over_the_kept_month_is_published(world, monkeypatch, capsys):
    _kept(world, monkeypatch, capsys)
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    capsys.readouterr()
    world.approve(write_plan(world.root / "plans" / "fix2.yaml", graph_plan(world, "fix2")))
    code = world.cli("run", "fix2", "--proof")
    said = capsys.readouterr()
    assert code == 0, said.out + said.err
    code = world.cli("run", "fix2", "--and-publish")
    said = capsys.readouterr()
    assert code == 0, said.out + said.err
    assert world.phase("fix2") == "published"
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date")
    code = world.cli("evidence", "verify")
    said = capsys.readouterr()
    assert code == 0, said.out + said.err


def test_keep_computed_then_a_ui_month_load_without_a_plan(world, monkeypatch, capsys):
    """The kept month reloaded from the restored days by the team without a plan."""
    _kept(world, monkeypatch, capsys)
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    again = run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                {"dagster/backfill": "ui-bf2"})
    if again.success:
        assert _published_by_region(world, "published_monthly_revenue", "month") == \
            _published_by_region(world, "published_revenue", "order_date")


def test_a_kept_month_never_published_is_not_published_later_over_the_restored_days(world, monkeypatch, capsys):
    """The team computed January's month from plan fix's published days but did not publish it; fix
    is cancelled and rolled back with --keep-computed monthly_revenue (left computed from bytes
    consumers no longer see). Publishing that month without a plan put a month that does not add
    up to the restored days before consumers."""
    _january_and_a_plan_over_its_days(world)
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    assert run(world, defs_of(world, BUGGY), ["monthly_revenue"], [MONTH], {"dagster/backfill": "ui-bf"}).success
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-06'")
    world.cli("reconcile", "fix")
    assert world.cli("cancel", "fix") == 0
    capsys.readouterr()
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    published = run(world, defs_of(world, BUGGY), ["published_monthly_revenue"], [MONTH],
                    {"dagster/backfill": "ui-bf3"})
    month = _published_by_region(world, "published_monthly_revenue", "month")
    assert month in ({}, _published_by_region(world, "published_revenue", "order_date")), month
    assert not published.success and "rollback (--keep-computed" in failure_text(published), failure_text(published)
    # the way out: a plan over the days whose graph lists the month recomputes and publishes both
    world.approve(write_plan(world.root / "plans" / "fix2.yaml", graph_plan(world, "fix2")))
    assert world.cli("run", "fix2", "--proof") == 0 and world.cli("run", "fix2", "--and-publish") == 0
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date")

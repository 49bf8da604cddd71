"""On PostgreSQL, where every statement reads afresh and another session commits between two
statements of a decision, a comparison reads the bytes its check read: an insider (writes the
warehouse, any SQL, no evidence key) editing a snapshot, the target or a cutover's shadow between
the two, and putting it back after, had gates pass on unchecked bytes (found by an attack; each
test failed on the code before its fix). Also the checks against the chain's record added the same
day, run on PostgreSQL."""

from __future__ import annotations

import threading

import pytest

from backfill_assets.execution import audit
from backfill_assets.warehouse.snapshots import snapshot_table
from tests import test_cutover, test_diff, test_notices
from tests.test_expectations import DAY, undeclared_gross_change, verdicts
from tests.test_notices import receiver  # noqa: F401 - the fixture, for the notices' check below

pytestmark = pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)


def _edited_between(world, monkeypatch, step: str, arg: int, day: str, command: tuple[str, ...],
                    edit, put_back) -> None:
    """`command` run in a thread while `audit.<step>` (the comparison) is held twice: before it reads
    `day` (the gates' check of it already ran), while the insider commits `edit()`; and after it read,
    while they commit `put_back()`, so that every later check finds the bytes as they were."""
    reached, edited, compared, restored = (threading.Event() for _ in range(4))
    original = getattr(audit, step)

    def between(*args, **kwargs):
        if day in args[arg] and not reached.is_set():
            reached.set()
            assert edited.wait(timeout=120)
        found = original(*args, **kwargs)
        if reached.is_set() and not compared.is_set():
            compared.set()
            assert restored.wait(timeout=120)
        return found

    monkeypatch.setattr(audit, step, between)
    runner = threading.Thread(target=lambda: world.cli(*command))
    runner.start()
    try:
        assert reached.wait(timeout=120)
        edit()
        edited.set()
        assert compared.wait(timeout=120)
        put_back()
    finally:
        edited.set()
        restored.set()
    runner.join(timeout=180)


def test_a_snapshot_edited_between_its_check_and_the_comparison_never_makes_changes_as_expected_pass(
        engine_world, monkeypatch):
    """`changes_as_expected` fingerprinted the snapshot's rows against their sealed record in one
    statement and compared the data with them in the next; on PostgreSQL the insider's edit, committed
    between the two (the replayed gross typed into the snapshot) and put back after, had the gate
    pass on rows that were never checked: `reconcile` passed the undeclared change, `publish` copied
    it to consumers, and every later check of the snapshot found it as taken. The rows compared are
    now the rows checked."""
    world = engine_world
    region = undeclared_gross_change(world)
    snap = f"backfill_snapshots.{snapshot_table('fix', 'daily_revenue')}"
    taken = world.sql(f"SELECT region, gross FROM {snap} WHERE order_date = ?", [DAY])

    def edit() -> None:  # the insider, committed between the check and the comparison: the snapshot "was" the replay
        world.run_sql(f"UPDATE {snap} AS s SET gross = d.gross FROM daily_revenue AS d "
                      "WHERE s.order_date = d.order_date AND s.region = d.region AND s.order_date = ?", [DAY])

    def put_back() -> None:  # and put back as it was taken
        for where, gross in taken:
            world.run_sql(f"UPDATE {snap} SET gross = ? WHERE order_date = ? AND region = ?", [gross, DAY, where])

    _edited_between(world, monkeypatch, "change_figures", 4, DAY, ("reconcile", "fix"), edit, put_back)
    assert world.sql(f"SELECT region, gross FROM {snap} WHERE order_date = ?", [DAY]) == taken

    passed, figures = verdicts(world, "fix")[DAY]
    world.cli("publish", "fix")
    published = world.sql("SELECT gross FROM published_revenue WHERE order_date = ? AND region = ?", [DAY, region])
    true_gross = world.sql("SELECT gross FROM daily_revenue WHERE order_date = ? AND region = ?",
                           [DAY, region])[0][0] - 1000
    assert not passed, figures
    assert published in ([], [(true_gross,)]), published


def test_a_target_edited_between_its_fingerprint_and_the_comparison_never_makes_changes_as_expected_pass(
        engine_world, monkeypatch):
    """`reconcile` fingerprinted the written partition (gate `unchanged_since_checked`) in one
    statement and compared it with the snapshot (`changes_as_expected`) in the next: the insider's
    edit committed between the two (the snapshot's gross typed back into the day) and put back after
    had the gate pass on bytes never fingerprinted; the plan reconciled and publish, finding the day
    as written, copied its undeclared change to consumers. The bytes compared are now the bytes
    fingerprinted."""
    world = engine_world
    region = undeclared_gross_change(world)
    snap = f"backfill_snapshots.{snapshot_table('fix', 'daily_revenue')}"
    written = world.sql("SELECT region, gross FROM daily_revenue WHERE order_date = ?", [DAY])

    def edit() -> None:
        world.run_sql(f"UPDATE daily_revenue AS d SET gross = s.gross FROM {snap} AS s "
                      "WHERE s.order_date = d.order_date AND s.region = d.region AND d.order_date = ?", [DAY])

    def put_back() -> None:
        for where, gross in written:
            world.run_sql("UPDATE daily_revenue SET gross = ? WHERE order_date = ? AND region = ?",
                          [gross, DAY, where])

    _edited_between(world, monkeypatch, "change_figures", 4, DAY, ("reconcile", "fix"), edit, put_back)
    assert world.sql("SELECT region, gross FROM daily_revenue WHERE order_date = ?", [DAY]) == written

    passed, figures = verdicts(world, "fix")[DAY]
    world.cli("publish", "fix")
    published = world.sql("SELECT gross FROM published_revenue WHERE order_date = ? AND region = ?", [DAY, region])
    true_gross = dict(written)[region] - 1000
    assert not passed, figures
    assert published in ([], [(true_gross,)]), published


# today's checks against the chain's record, run on PostgreSQL (their own modules run them on DuckDB):
# each is a statement of its own whose types, quoting and pg_catalog-qualified SQL must hold there


def test_a_cutover_over_published_bytes_edited_since_their_publication_is_refused_on_postgresql(engine_world,
                                                                                                 capsys):
    test_cutover.test_a_cutover_compared_with_published_bytes_edited_since_their_publication_is_not_met(
        engine_world, capsys)


def test_diff_refuses_an_edited_snapshot_on_postgresql(engine_world, capsys):
    test_diff.test_diff_refuses_a_snapshot_edited_to_hide_what_the_plan_changed(engine_world, capsys)


def test_a_notice_edited_in_the_outbox_is_named_on_postgresql(engine_world, run_cli):
    test_notices.test_a_notice_edited_in_the_outbox_is_not_listed_as_the_notice_backfill_queued(engine_world, run_cli)


def test_a_notice_marked_delivered_outside_the_chain_is_not_delivered_on_postgresql(
        engine_world, run_cli, receiver):  # noqa: F811
    test_notices.test_a_notice_marked_delivered_without_its_delivery_in_the_chain_is_not_listed_as_delivered(
        engine_world, run_cli, receiver)


def test_a_shadow_edited_between_its_fingerprint_and_the_dual_run_never_meets_the_cutover(engine_world,
                                                                                           monkeypatch):
    """A cutover's dual run read the shadow in a statement of its own after the gates fingerprinted
    it: the insider's edit committed between the two (the day's figures typed back to what the old
    pipeline published), put back after, had the day match; `reconcile` met the streak and publish,
    finding the shadow as written, cut over to a day that never matched the published one. The
    dual run now compares the rows the gates fingerprinted."""
    world = engine_world
    test_cutover.old_pipeline(world)
    day = test_cutover.WINDOW[2]
    region, gross = test_cutover.correct_source(world, day, 1000)
    path = test_cutover.cutover_plan(world, "cut")
    test_cutover.run(world, path)
    assert test_cutover.dual_runs(world, "cut")[day]["numbers"]["dual_run.matched"] == 0
    shift = "UPDATE daily_revenue SET gross = gross {0} 1000, net_revenue = net_revenue {0} 1000 " \
            "WHERE order_date = ? AND region = ?"
    _edited_between(world, monkeypatch, "dual_run_figures", 3, day, ("reconcile", "cut"),
                    lambda: world.run_sql(shift.format("-"), [day, region]),
                    lambda: world.run_sql(shift.format("+"), [day, region]))

    assert test_cutover.dual_runs(world, "cut")[day]["numbers"].get("dual_run.matched") != 1
    world.cli("publish", "cut")
    assert world.sql("SELECT gross FROM published_revenue WHERE order_date = ? AND region = ?",
                     [day, region]) == [(gross,)]

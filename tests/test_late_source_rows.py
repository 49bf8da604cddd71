"""Late source rows: the seed asks that watermark behaviour never skip late data. A plan's window is
published only while its source is what its gates compared; a row landing after `reconcile` is
found by publish, which names the way on, and the replay picks it up."""

from __future__ import annotations

LATE_ORDER = ("INSERT INTO orders SELECT * REPLACE (order_id + 1000000 AS order_id) FROM orders "
              "WHERE order_date = DATE '2026-01-03' ORDER BY order_id LIMIT 1")


def _published(world) -> list[tuple]:
    return world.sql("SELECT * FROM published_revenue ORDER BY ALL")


def _reconciled(world) -> None:
    assert world.cli("init") == 0
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-06", proof=("2026-01-02",))
    assert world.cli("run", str(path), "--proof") == 0
    assert world.cli("run", "fix") == 0
    assert world.cli("reconcile", "fix") == 0


def _refused_over(world, capsys, change: str) -> None:
    """`change` lands in the source after the reconcile: publish refuses in one line naming 01-03
    and the reconcile that finds it, consumers keep the last good data, the plan stays reconciled."""
    before = _published(world)
    world.run_sql(change)
    capsys.readouterr()
    assert world.cli("publish", "fix") != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "2026-01-03: orders changed since its gates compared it" in err, err
    assert "`backfill reconcile fix`" in err, err
    assert _published(world) == before
    assert world.phase() == "reconciled"


def test_a_source_row_landing_after_reconcile_is_never_published_over(world, capsys):
    """The window ran and reconciled; an order for 01-03 landed in `orders` before the publish (late
    data, or a loader re-run). Publish checked the target's bytes only and copied the day its gates
    had compared with yesterday's source: consumers read a 01-03 one order short, under verdicts
    saying it matched the source, until someone happened to reconcile again (found by the seed
    round). Now publish refuses in one line naming the day and the reconcile that finds it; the
    re-run picks the late order up and the window publishes."""
    _reconciled(world)
    _refused_over(world, capsys, LATE_ORDER)

    assert world.cli("reconcile", "fix") != 0  # the gates find the late order and name the re-run
    assert world.phase() == "running"  # not published: the window runs again where it failed
    assert world.cli("run", "fix", "--partitions", "2026-01-03") == 0
    assert world.cli("reconcile", "fix") == 0
    assert world.cli("publish", "fix") == 0
    [(orders,)] = world.sql("SELECT sum(orders) FROM published_revenue WHERE order_date = DATE '2026-01-03'")
    [(source,)] = world.sql("SELECT count(*) FROM orders WHERE order_date = DATE '2026-01-03'")
    assert orders == source


def test_run_and_publish_in_one_command_publishes_when_the_source_held_still(world, capsys):
    """The check costs one statement over the source's window under publish's locks: the one command
    with nothing late publishes as before (held)."""
    assert world.cli("init") == 0
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-06", proof=("2026-01-02",))
    assert world.cli("run", str(path), "--and-publish") == 0
    assert world.phase() == "published"
    [(days,)] = world.sql("SELECT count(DISTINCT order_date) FROM published_revenue "
                          "WHERE order_date BETWEEN DATE '2026-01-01' AND DATE '2026-01-06'")
    assert days == 6


# an order of 01-03 (its customer's only one that day) restated to another region, as a correction
# loader does: the day keeps its rows, key groups, event ids and every metric's total
MOVE_REGION = """
UPDATE orders SET region = CASE WHEN region = 'north' THEN 'south' ELSE 'north' END
WHERE order_id = (SELECT min(order_id) FROM orders o WHERE order_date = DATE '2026-01-03'
                  AND (SELECT count(*) FROM orders p WHERE p.order_date = o.order_date
                       AND p.customer_id = o.customer_id) = 1)
"""


def test_a_late_restatement_moving_an_order_between_regions_is_not_published_over(world, capsys):
    """After reconcile, a correction loader moved one 01-03 order from one region to another: the
    day's rows, key groups, event ids and each metric's total stayed what the gates recorded, so
    publish's source check found nothing and copied a 01-03 whose two regions no longer matched the
    source (one order too many in one, one short in the other), though the gates compare region by
    region and a reconcile fails the day. Now publish compares the source's key groups too: it
    refuses in one line naming the day and `backfill reconcile fix` (found by an attack)."""
    _reconciled(world)
    _refused_over(world, capsys, MOVE_REGION)
    assert world.cli("reconcile", "fix") != 0  # the gates see it too


def test_the_sensor_requests_no_publish_run_over_a_late_row_and_status_names_the_reconcile(world, capsys):
    """A late order landed in 01-03 after the window reconciled. The reopen sensor asked the publish
    rule without the source check, so it requested a publish run bound to fail, then another, then a
    third, while `backfill status` said "publish reopens by the sensor" and, after the third, named
    `backfill publish fix`, itself refused: the way out, `backfill reconcile fix`, was named by none.
    Now the sensor's question includes the source check: it requests nothing, and status names the
    day and the reconcile (found by an attack)."""
    from tests.test_publish_and_sensor import evaluate_sensor

    _reconciled(world)
    world.run_sql(LATE_ORDER)
    assert evaluate_sensor(world).run_requests == []
    capsys.readouterr()
    assert world.cli("status", "fix") == 0
    shown = capsys.readouterr().out
    assert "publish reopens by the sensor" not in shown, shown
    assert "2026-01-03: orders changed since its gates compared it" in shown, shown
    assert "`backfill reconcile fix`" in shown, shown


EMPTY_DAY_ORDER = ("INSERT INTO orders (order_id, customer_id, region, order_ts, order_date, amount, status) "
                   "VALUES (9000001, 42, 'north', TIMESTAMP '2026-01-09 10:00:00', DATE '2026-01-09', 12.50, "
                   "'completed')")


def test_a_late_row_in_a_day_that_had_none_and_a_restatement_are_refused_on_each_engine(engine_world, capsys):
    """The window reaches past the source's last day (01-09 had no orders when it ran and
    reconciled), then the day's first order landed, and a correction moved a 01-08 order between
    regions; on DuckDB and PostgreSQL publish refuses both days and names the reconcile (held)."""
    world = engine_world
    assert world.cli("init") == 0
    path = world.approved_plan("fix", start="2026-01-07", end="2026-01-09", proof=("2026-01-08",))
    assert world.cli("run", str(path), "--proof") == 0
    assert world.cli("run", "fix") == 0
    assert world.cli("reconcile", "fix") == 0
    world.run_sql(EMPTY_DAY_ORDER)
    world.run_sql(MOVE_REGION.replace("2026-01-03", "2026-01-08"))
    capsys.readouterr()
    assert world.cli("publish", "fix") != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "2026-01-08: orders changed since its gates compared it" in err, err
    assert "2026-01-09: orders changed since its gates compared it (0 key group(s) then, 1 now)" in err, err
    assert "`backfill reconcile fix`" in err, err
    assert world.phase() == "reconciled"


def test_a_late_order_in_a_day_of_a_graph_plan_after_its_month_was_computed(world, monkeypatch, capsys):
    """A plan over 01-05..01-08 and their month ran and reconciled; then an order for 01-06 landed
    late. The sensor requests nothing, publish refuses naming the day and the reconcile, the reconcile
    names the day's re-run, the month is computed again from it, and consumers get days and a month
    that add up with the late order in both (held)."""
    from tests.test_graph import MONTH, buggy_january_published, reconciled_graph
    from tests.test_publish_and_sensor import evaluate_sensor

    world = buggy_january_published(world, monkeypatch)
    reconciled_graph(world)
    world.run_sql(LATE_ORDER.replace("2026-01-03", "2026-01-06"))
    assert evaluate_sensor(world).run_requests == []
    capsys.readouterr()
    assert world.cli("publish", "fix") != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "2026-01-06: orders changed since its gates compared it" in err and "`backfill reconcile fix`" in err, err
    assert world.cli("reconcile", "fix") != 0
    assert world.cli("run", "fix", "--partitions", "2026-01-06") == 0
    if world.phase() != "reconciled":
        assert world.cli("run", "fix") == 0  # the month, computed again from the day
    assert world.phase() == "reconciled", world.phase()
    assert world.cli("publish", "fix") == 0
    [(days,)] = world.sql("SELECT sum(orders) FROM published_revenue WHERE order_date < DATE '2026-02-01'")
    [(month,)] = world.sql(f"SELECT sum(orders) FROM published_monthly_revenue WHERE month = DATE '{MONTH}'")
    [(source,)] = world.sql("SELECT count(*) FROM orders WHERE order_date BETWEEN DATE '2026-01-05' "
                            "AND DATE '2026-01-08'")
    [(window,)] = world.sql("SELECT sum(orders) FROM published_revenue WHERE order_date BETWEEN DATE '2026-01-05' "
                            "AND DATE '2026-01-08'")
    assert days == month and window == source


def test_a_plan_never_closes_over_a_late_row_that_landed_after_its_publish(world, capsys):
    """The window was published; an order for 01-03 landed late; the consumers confirmed and the
    engineer ran `backfill plan close fix`. Close re-checked the target's bytes only and closed the
    plan: 01-03 stayed one order short for good, its verdict saying it matched the source, and once
    closed nothing compares the window again. Now close finds the source moved, sends the plan to
    repairing and names the reconcile that finds the day (found by an attack)."""
    _reconciled(world)
    assert world.cli("publish", "fix") == 0
    world.run_sql(LATE_ORDER)
    capsys.readouterr()
    assert world.cli("plan", "close", "fix") != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert world.phase() == "repairing"
    assert "2026-01-03: orders changed since its gates compared it" in err and "`backfill reconcile fix`" in err, err
    assert world.cli("reconcile", "fix") != 0  # names the day's re-run
    assert world.cli("run", "fix", "--partitions", "2026-01-03") == 0
    assert world.cli("reconcile", "fix") == 0
    assert world.cli("publish", "fix") == 0
    assert world.cli("plan", "close", "fix") == 0
    [(orders,)] = world.sql("SELECT sum(orders) FROM published_revenue WHERE order_date = DATE '2026-01-03'")
    [(source,)] = world.sql("SELECT count(*) FROM orders WHERE order_date = DATE '2026-01-03'")
    assert orders == source

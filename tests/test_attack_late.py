"""Round late: rows keep landing in the source while a replay plan runs, reconciles and publishes."""

from __future__ import annotations

# an order of 01-03 (its customer's only one that day) restated to another region, as a correction
# loader does: the day keeps its rows, key groups, event ids and every metric's total
MOVE_REGION = """
UPDATE orders SET region = CASE WHEN region = 'north' THEN 'south' ELSE 'north' END
WHERE order_id = (SELECT min(order_id) FROM orders o WHERE order_date = DATE '2026-01-03'
                  AND (SELECT count(*) FROM orders p WHERE p.order_date = o.order_date
                       AND p.customer_id = o.customer_id) = 1)
"""


def _published(world) -> list[tuple]:
    return world.sql("SELECT * FROM published_revenue ORDER BY ALL")


def _reconciled(world) -> None:
    assert world.cli("init") == 0
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-06", proof=("2026-01-02",))
    assert world.cli("run", str(path), "--proof") == 0
    assert world.cli("run", "fix") == 0
    assert world.cli("reconcile", "fix") == 0


def test_a_late_restatement_moving_an_order_between_regions_is_not_published_over(world, capsys):
    """After reconcile, a correction loader moved one 01-03 order from one region to another: the
    day's rows, key groups, event ids and each metric's total stayed what the gates recorded, so
    publish's source check found nothing and copied a 01-03 whose two regions no longer matched the
    source (one order too many in one, one short in the other), though the gates compare region by
    region and a reconcile fails the day. Now publish compares the source's key groups too: it
    refuses in one line naming the day and `backfill reconcile fix` (found by an attack)."""
    _reconciled(world)
    before = _published(world)
    world.run_sql(MOVE_REGION)
    capsys.readouterr()
    assert world.cli("publish", "fix") != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "2026-01-03: orders changed since its gates compared it" in err, err
    assert "`backfill reconcile fix`" in err, err
    assert _published(world) == before
    assert world.phase() == "reconciled"
    assert world.cli("reconcile", "fix") != 0  # the gates see it too


LATE_ORDER = ("INSERT INTO orders SELECT * REPLACE (order_id + 1000000 AS order_id) FROM orders "
              "WHERE order_date = DATE '2026-01-03' ORDER BY order_id LIMIT 1")


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

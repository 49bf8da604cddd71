"""Late source rows: the seed asks that watermark behaviour never skip late data. A plan's window is
published only while its source is what its gates compared; a row landing after `reconcile` is
found by publish, which names the way on, and the replay picks it up."""

from __future__ import annotations

LATE_ORDER = ("INSERT INTO orders SELECT * REPLACE (order_id + 1000000 AS order_id) FROM orders "
              "WHERE order_date = DATE '2026-01-03' ORDER BY order_id LIMIT 1")


def _published(world) -> list[tuple]:
    return world.sql("SELECT * FROM published_revenue ORDER BY ALL")


def test_a_source_row_landing_after_reconcile_is_never_published_over(world, capsys):
    """The window ran and reconciled; an order for 01-03 landed in `orders` before the publish (late
    data, or a loader re-run). Publish checked the target's bytes only and copied the day its gates
    had compared with yesterday's source: consumers read a 01-03 one order short, under verdicts
    saying it matched the source, until someone happened to reconcile again (found by the seed
    round). Now publish refuses in one line naming the day and the reconcile that finds it; the
    re-run picks the late order up and the window publishes."""
    assert world.cli("init") == 0
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-06", proof=("2026-01-02",))
    assert world.cli("run", str(path), "--proof") == 0
    assert world.cli("run", "fix") == 0
    assert world.cli("reconcile", "fix") == 0
    before = _published(world)
    world.run_sql(LATE_ORDER)
    capsys.readouterr()

    assert world.cli("publish", "fix") != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "2026-01-03: orders changed since its gates compared it" in err, err
    assert "`backfill reconcile fix`" in err, err
    assert _published(world) == before  # consumers keep the last good data
    assert world.phase() == "reconciled"

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

"""Attacks against the seed's red flags and the README's promises on `expect:`, scenarios and the
impact report consumers are told. Each test fails on the code before its fix."""

from __future__ import annotations

from tests.test_cutover import WINDOW, correct_source, cutover_plan, old_pipeline, run
from tests.world import FIXED


def test_a_stale_comparison_at_the_end_of_the_window_does_not_hide_its_mismatch(world, capsys):
    """The last day mismatches, so the streak is 0 and the cutover is refused. The old pipeline then
    restates that published day (still not what the shadow holds): its comparison is stale, counted
    as "not compared", and the streak was counted only up to the last partition compared, so three
    matching days before it met shadow_days 3 and the cutover published a day that never matched."""
    old_pipeline(world)
    correct_source(world, WINDOW[3], 1000)
    path = cutover_plan(world, "cut", shadow_days=3)
    run(world, path)
    assert world.phase("cut") == "reconciled"
    capsys.readouterr()
    assert world.cli("publish", "cut") != 0
    assert "dual-run streak 0 of 3" in capsys.readouterr().err
    world.run_sql(f"UPDATE {FIXED.publish_table} SET gross = gross + 1 WHERE order_date = ?", [WINDOW[3]])
    before = world.sql(f"SELECT sum(gross) FROM {FIXED.publish_table} WHERE order_date = ?", [WINDOW[3]])
    capsys.readouterr()
    assert world.cli("publish", "cut") != 0
    err = capsys.readouterr().err
    assert f"reset at {WINDOW[3]}: the published partition changed since it was compared" in err, err
    assert world.phase("cut") == "reconciled"
    assert world.sql(f"SELECT sum(gross) FROM {FIXED.publish_table} WHERE order_date = ?", [WINDOW[3]]) == before

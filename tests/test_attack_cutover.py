"""Attacks on the cutover's streak and on the doors to the published table."""

from __future__ import annotations

from tests.plans import complete_plan, write_plan
from tests.test_cutover import WINDOW, correct_source, cutover_plan, old_pipeline
from tests.world import FIXED, failure_text


def test_a_published_day_rewritten_outside_backfill_names_the_way_out_of_the_cutover(world, capsys):
    """In this product the old pipeline writes the published table through backfill (materialize,
    then publish: each publication sealed), and while a cutover plan holds the window both are
    refused, so the old pipeline cannot restate a day of the shadowed window; one that writes the
    published table outside backfill writes the same bytes an insider would, and the streak cannot
    tell them apart. The fix said to re-run the day (which compares again with the same edited
    bytes, refused forever) and the reason to restore it from backup (undoing a pipeline's
    legitimate restatement); the fix now names both ways out, and the second one works."""
    old_pipeline(world)
    path = cutover_plan(world, "cut")
    day = WINDOW[2]
    assert world.cli("run", str(path), "--proof") == 0
    region, _ = correct_source(world, day, 1000)
    # through backfill, the old pipeline cannot restate the held day
    refused = world.materialize([day])
    assert not refused.success and "claimed by active plan cut" in failure_text(refused)
    # outside backfill, it restates the published day from the corrected source
    world.run_sql(f"UPDATE {FIXED.publish_table} SET gross = gross + 1000, net_revenue = net_revenue + 1000 "
                  "WHERE order_date = ? AND region = ?", [day, region])
    assert world.cli("run", str(path)) == 0
    assert world.cli("run", str(path), "--partitions", day) == 0  # what the fix said: it changes nothing
    capsys.readouterr()
    assert world.cli("publish", "cut") != 0
    err = capsys.readouterr().err
    assert f"reset at {day}: the published partition was edited since its last publication" in err, err
    assert "restore it from backup" not in err and "find why the shadow differs" not in err, err
    assert (f"{day}'s published rows are not the ones backfill published there: put its last publication back "
            f"(from backup) and re-run it, `backfill run cut --partitions {day}`; if a pipeline rewrote it outside "
            f"backfill, roll back, `backfill rollback cut`, and replay {day} with a plan of its own") in err, err
    assert world.cli("status", "cut") == 0
    assert f"next       {day}'s published rows are not the ones backfill published" in capsys.readouterr().out

    # the way out the fix names: roll back, replay the day with a plan of its own, plan the cutover again
    assert world.cli("rollback", "cut") == 0
    restated = world.approve(write_plan(world.root / "plans" / "restated.yaml", complete_plan(
        plan_id="restated", start=day, end=day, proof=(day,))))
    assert world.cli("run", str(restated), "--proof") == 0 and world.cli("run", str(restated)) == 0
    capsys.readouterr()
    assert world.cli("publish", "restated") == 0
    # the pipeline's restatement and the new pipeline's day agree: consumers see nothing change
    assert "consumers see 0 partition(s) changed" in capsys.readouterr().out
    again = cutover_plan(world, "cut2")
    assert world.cli("run", str(again), "--proof") == 0
    assert world.cli("run", str(again)) == 0
    assert world.cli("publish", "cut2") == 0
    assert world.phase("cut2") == "published"


def test_a_cutover_rolled_back_leaves_the_old_sides_rows_to_a_plan(world):
    """The published table is the team's own, adopted as `publish_as`: the old pipeline's rows, which
    backfill never published, and which a publish without a plan (the UI's Materialize of the
    published asset, a load's publish) refuses to replace. A cutover published the new pipeline's
    days and was rolled back: its restore was recorded as the days' last publication, so the same
    publish without a plan then replaced the old pipeline's days with the new pipeline's, a cutover
    with no plan, no dual run and no notice."""
    assert world.materialize(WINDOW).success  # the new pipeline's first write of the target, planless
    world.run_sql(f"INSERT INTO {FIXED.publish_table} SELECT * FROM {FIXED.table}")  # the old side's rows
    day = WINDOW[0]
    world.run_sql(f"UPDATE {FIXED.publish_table} SET gross = gross + 1000, net_revenue = net_revenue + 1000 "
                  "WHERE order_date = ?", [day])
    refused = world.publish(WINDOW)
    foreign = f"{day}: {FIXED.publish_table} holds 5 row(s) of it that backfill never published"
    assert not refused.success and foreign in failure_text(refused)
    path = cutover_plan(world, "cut")  # the old side's first day mismatches: before the streak, allowed
    assert world.cli("run", str(path), "--proof") == 0 and world.cli("run", str(path)) == 0
    assert world.cli("publish", "cut") == 0
    assert world.cli("rollback", "cut") == 0
    old = world.sql(f"SELECT sum(gross) FROM {FIXED.publish_table} WHERE order_date = ?", [day])[0][0]

    refused = world.publish(WINDOW)
    assert not refused.success and foreign in failure_text(refused), failure_text(refused) if not refused.success \
        else "published without a plan"
    assert world.sql(f"SELECT sum(gross) FROM {FIXED.publish_table} WHERE order_date = ?", [day])[0][0] == old
    # the other days hold the bytes the cutover published from its gated writes (the two pipelines
    # agree there): only the day whose rows no publish ever gave consumers is refused
    assert f"{WINDOW[1]}: {FIXED.publish_table} holds" not in failure_text(refused)

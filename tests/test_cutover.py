"""A cutover (issue 25): the new pipeline (the loaded definitions, through the plan) writes the plan's
target as a shadow of the published table, which holds what the old pipeline gave consumers; each
judged partition is compared key by key with the published one, and the cutover (the publish of the
window) is refused until `shadow_days` consecutive partitions matched. On each engine.

The old pipeline's days are published first; a source correction that arrived since makes the new
pipeline's figure of one key differ on one day, which every source-facing gate agrees with: only the
dual run sees it.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml

from backfill_assets.control import ledger
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.gates.results import CHANGES_AS_EXPECTED
from tests.plans import complete_plan, write_plan
from tests.world import FIXED, World, failure_text, keys

WINDOW = keys(1, 4)


def cutover_plan(world: World, name: str, shadow_days: int = 3, tolerance: dict | None = None) -> Path:
    document = complete_plan(plan_id=name, start=WINDOW[0], end=WINDOW[-1], proof=(WINDOW[0],), per_run=4)
    document["scenario"] = {"kind": "cutover", "shadow_days": shadow_days, "tolerance": tolerance or {"abs": 0}}
    return world.approve(write_plan(world.root / "plans" / f"{name}.yaml", document))


def old_pipeline(world: World) -> None:
    """The window as the old pipeline wrote and published it: what consumers read today."""
    assert world.materialize(WINDOW).success
    assert world.publish(WINDOW).success


def correct_source(world: World, day: str, amount: float) -> tuple[str, float]:
    """A correction of one order of `day` after the old pipeline ran: the region's gross moves by
    `amount` in the new pipeline's output. Returns the region and its published gross."""
    order_id, region = world.sql("SELECT order_id, region FROM orders WHERE order_date = ? AND status <> 'refunded' "
                                 "ORDER BY order_id LIMIT 1", [day])[0]
    world.run_sql("UPDATE orders SET amount = amount + ? WHERE order_id = ?", [amount, order_id])
    gross = world.sql(f"SELECT gross FROM {FIXED.publish_table} WHERE order_date = ? AND region = ?",
                      [day, region])[0][0]
    return region, gross


def run(world: World, path: Path) -> None:
    assert world.cli("run", str(path), "--proof") == 0
    assert world.cli("run", str(path)) == 0


def dual_runs(world: World, plan_id: str) -> dict[str, dict]:
    with world.warehouse().session() as session:
        latest = ledger.latest(session, FIXED.name, WINDOW, plan_id)
    return {k: e.gates[CHANGES_AS_EXPECTED][1] for k, e in latest.items() if e is not None}


def test_a_cutover_is_refused_until_the_streak_is_met_and_accepted_after(engine_world, capsys):
    world = engine_world
    old_pipeline(world)
    day = WINDOW[2]
    region, gross = correct_source(world, day, 1000)
    path = cutover_plan(world, "cut")

    assert world.cli("run", str(path), "--proof") == 0
    capsys.readouterr()
    assert world.cli("status", "cut") == 0
    assert "cutover    dual-run streak 1 of 3 consecutive matching partition(s) needed (1 of 4 compared)" \
        in capsys.readouterr().out.splitlines()
    assert world.cli("run", str(path)) == 0
    # every gate passed: the source agrees with the new pipeline, so the window reconciled
    assert world.phase("cut") == "reconciled"

    found = dual_runs(world, "cut")
    assert [found[k]["numbers"]["dual_run.matched"] for k in WINDOW] == [1, 1, 0, 1]
    numbers, detail = found[day]["numbers"], found[day]["detail"]
    assert numbers["dual_run.keys.mismatched"] == 1 and numbers["dual_run.gross.keys_differing"] == 1
    assert numbers["dual_run.gross.difference"] == pytest.approx(1000)
    assert numbers["dual_run.net_revenue.difference"] == pytest.approx(1000)
    assert numbers["dual_run.orders.difference"] == 0
    worst = f"(region={region}): gross {gross + 1000} vs {gross} published"
    assert detail.startswith("no expectation declared; dual run MISMATCH against the published table (exact): "
                             "gross differs in 1 key(s), net_revenue differs in 1 key(s); worst: "), detail
    assert worst in detail, detail
    assert found[WINDOW[0]]["detail"].endswith("dual run: the shadow matches the published table in all 5 key(s) "
                                               "(exact)")

    # the cutover: refused in one line naming the streak, what is needed and the key that reset it
    capsys.readouterr()
    assert world.cli("publish", "cut") != 0
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if "cutover by plan cut refused" in ln)
    assert (f"cutover by plan cut refused: dual-run streak 1 of 3 consecutive matching partition(s) needed "
            f"(4 of 4 compared, 1 mismatching); reset at {day}: {worst}") in line, err
    assert f"backfill run cut --partitions {day}" in err
    published = world.sql(f"SELECT sum(gross) FROM {FIXED.publish_table} WHERE order_date = ?", [day])[0][0]
    assert world.cli("status", "cut") == 0
    out = capsys.readouterr().out
    assert any(ln.startswith(f"cutover    dual-run streak 1 of 3 consecutive matching partition(s) needed (4 of 4 "
                             f"compared, 1 mismatching); reset at {day}: {worst}") for ln in out.splitlines()), out
    assert "blocked: cutover by plan cut refused" in out
    assert f"next       the streak counts from {day}: " in out and f"`backfill run cut --partitions {day}`" in out
    # the reopen sensor requests no publish, and the publish asset run from the UI refuses the same
    # way: consumers keep the old pipeline's data
    defs = world.defs()
    context = dg.build_sensor_context(instance=world.instance, definitions=defs, resources={
        "warehouse": WarehouseResource(home=str(world.home), url=world.url or "")})
    assert not defs.resolve_sensor_def("daily_revenue__reopen_publish").evaluate_tick(context).run_requests
    refused = world.publish(WINDOW)
    assert not refused.success and "cutover by plan cut refused: dual-run streak 1 of 3" in failure_text(refused)
    assert world.sql(f"SELECT sum(gross) FROM {FIXED.publish_table} WHERE order_date = ?", [day])[0][0] == published

    # the correction was withdrawn at the source; the day re-run through the plan matches again
    correct_source(world, day, -1000)
    assert world.cli("run", str(path), "--partitions", day) == 0
    assert dual_runs(world, "cut")[day]["numbers"]["dual_run.matched"] == 1
    capsys.readouterr()
    assert world.cli("publish", "cut") == 0
    assert world.phase("cut") == "published"
    reopened = json.loads(world.sql("SELECT body FROM backfill_control.outbox WHERE plan_id = 'cut' "
                                    "AND event = 'reopened'")[0][0])
    assert reopened["cutover"] == {"streak": 4, "needed": 3, "met": True, "compared": 4, "partitions": 4,
                                   "mismatches": {}, "reset_at": None}


def test_a_mismatch_before_the_streak_does_not_stop_the_cutover_and_the_tolerance_holds(engine_world, tmp_path,
                                                                                        capsys):
    world = engine_world
    old_pipeline(world)
    first, _ = correct_source(world, WINDOW[0], 1000)
    correct_source(world, WINDOW[2], 0.5)  # within the tolerance of 1 (the metric's unit)
    path = cutover_plan(world, "cut", tolerance={"abs": 1})
    run(world, path)

    found = dual_runs(world, "cut")
    assert [found[k]["numbers"]["dual_run.matched"] for k in WINDOW] == [0, 1, 1, 1]
    assert found[WINDOW[2]]["numbers"]["dual_run.gross.difference"] == pytest.approx(0.5)
    assert found[WINDOW[2]]["numbers"]["dual_run.tolerance_abs"] == 1
    # the streak counts from the last mismatch: three days matched after it, as many as needed
    assert world.cli("publish", "cut") == 0
    assert world.phase("cut") == "published"
    # the published table now holds the shadow: status shows the streak the cutover met
    capsys.readouterr()
    assert world.cli("status", "cut") == 0
    assert (f"cutover    cut over: dual-run streak 3 of 3 consecutive matching partition(s) needed (4 of 4 "
            f"compared, 1 mismatching); reset at {WINDOW[0]}: (region={first}): gross") in capsys.readouterr().out

    # the check's figures are numbers in Dagster, for the UI's plots across partitions
    key = dg.AssetCheckKey(dg.AssetKey(FIXED.name), CHANGES_AS_EXPECTED)
    evaluation = world.instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key] \
        .event.dagster_event.event_specific_data
    assert isinstance(evaluation.metadata["figure.dual_run.matched"], dg.FloatMetadataValue)
    assert evaluation.metadata["figure.dual_run.gross.keys_differing"].value == 0

    out = tmp_path / "evidence.yaml"
    assert world.cli("evidence", "cut", "--out", str(out)) == 0
    document = yaml.safe_load(out.read_text())
    cutover = document["cutover"]
    assert cutover["shadow_days"] == 3 and cutover["tolerance"] == "within 1" and cutover["streak"] == 3
    assert list(cutover["mismatches"]) == [WINDOW[0]] and f"(region={first}): gross" in cutover["mismatches"][WINDOW[0]]
    assert cutover["verdict"].startswith(f"met: dual-run streak 3 of 3 consecutive matching partition(s) needed "
                                         f"(4 of 4 compared, 1 mismatching); reset at {WINDOW[0]}: (region={first})")
    assert document["published"]["cutover"]["streak"] == 3
    assert document["scenario"] == {"kind": "cutover", "shadow_days": 3, "tolerance": {"abs": 1.0, "pct": 0.0}}


def test_a_published_partition_changed_since_its_comparison_breaks_the_streak(world, capsys):
    old_pipeline(world)
    path = cutover_plan(world, "cut", shadow_days=2)
    run(world, path)
    assert world.phase("cut") == "reconciled"
    # someone edits what consumers read after the dual run compared it: the comparison no longer holds
    world.run_sql(f"UPDATE {FIXED.publish_table} SET gross = gross + 1 WHERE order_date = ?", [WINDOW[2]])
    capsys.readouterr()
    assert world.cli("publish", "cut") != 0
    err = capsys.readouterr().err
    assert (f"dual-run streak 1 of 2 consecutive matching partition(s) needed (3 of 4 compared); reset at "
            f"{WINDOW[2]}: the published partition changed since it was compared (now 5 rows #") in err, err


@pytest.mark.parametrize(("scenario", "line"), [
    ({"kind": "cutover"}, "  - scenario = 'cutover': kind cutover needs shadow_days, tolerance"),
    ({"kind": "cutover", "shadow_days": 3, "failure": "x"},
     "  - scenario = 'cutover': kind cutover needs tolerance; failure is not a field of kind cutover (it takes "
     "shadow_days, tolerance)"),
    ({"kind": "cutover", "shadow_days": 0, "tolerance": {"abs": 0}},
     "  - scenario.shadow_days = 0: Input should be greater than or equal to 1; give the number of consecutive "
     "matching partitions the cutover waits for, >= 1"),
    ({"kind": "cutover", "shadow_days": 3, "tolerance": {"pct": 200}},
     "  - scenario.tolerance.pct = 200: Input should be less than or equal to 100; give a percentage of the "
     "published figure between 0 and 100 (0.01 means 0.01%)"),
    ({"kind": "cutover", "shadow_days": 7, "tolerance": {"abs": 0}},
     "  - scenario.shadow_days = 7: the window 2026-01-01..2026-01-06 holds 6 partition(s), so a streak of 7 can "
     "never be met; widen the window or lower shadow_days"),
])
def test_a_cutover_missing_its_fields_is_one_line_naming_them(tmp_path, run_cli, scenario, line):
    document = complete_plan()
    document["scenario"] = scenario
    result = run_cli("plan", "validate", str(write_plan(tmp_path / "p.yaml", document)),
                     "--defs", "backfill_assets.demo.daily")
    assert result.code == 1
    assert len(result.err.splitlines()) == 1 and result.err.rstrip().endswith(f": {line[4:]}"), result.err


def test_a_cutover_plan_is_labelled_and_existing_plans_keep_their_hash():
    from backfill_assets.plan.identity import plan_sha256
    from backfill_assets.plan.model import Plan

    # the identities the release before cutover gave these plans: the new optional fields leave
    # them out (defaults), so no approval of an existing plan is voided
    plain = complete_plan()
    incident = {**complete_plan(), "scenario": {"kind": "incident", "incident_id": "INC-1", "link": "https://x/INC-1"}}
    assert plan_sha256(Plan.model_validate(plain)) == \
        "bef7c33b06f6a7641cfb8cebdfc78a07880e1616247d3945b37c7723dd6dcdf2"
    assert plan_sha256(Plan.model_validate(incident)) == \
        "9f3aaf219c32ed7c3f4c3dfd277b6237a253000119aacacbef47e0e3979c5aac"
    document = {**complete_plan(), "scenario": {"kind": "cutover", "shadow_days": 3, "tolerance": {"pct": 0.01}}}
    plan = Plan.model_validate(document)
    assert plan.scenario is not None
    assert plan.scenario.label() == ("cutover after 3 consecutive partition(s) of the dual run matching the "
                                     "published table (within 0.01%)")


def test_a_cutover_compared_with_published_bytes_edited_since_their_publication_is_not_met(world, capsys):
    """A cutover's dual run compares the new pipeline with what the old one gave consumers. The
    insider typed the new pipeline's figure into the published day before the plan ran (the
    publication sealed what the old pipeline published): the day matched, the streak was met and
    the cutover published, its evidence saying the shadow matched, though the new pipeline's day
    differs from the one the old pipeline published by 1,000."""
    old_pipeline(world)
    day = WINDOW[2]
    region, _ = correct_source(world, day, 1000)  # the new pipeline's day differs from the published one
    world.run_sql(f"UPDATE {FIXED.publish_table} SET gross = gross + 1000, net_revenue = net_revenue + 1000 "
                  "WHERE order_date = ? AND region = ?", [day, region])
    path = cutover_plan(world, "cut")
    assert world.cli("run", str(path), "--proof") == 0
    assert world.cli("run", str(path)) == 0
    published = world.sql(f"SELECT sum(gross) FROM {FIXED.publish_table} WHERE order_date = ?", [day])[0][0]
    capsys.readouterr()
    assert world.cli("publish", "cut") != 0
    err = capsys.readouterr().err
    assert "cutover by plan cut refused" in err and f"reset at {day}: the published partition was edited" in err, err
    assert world.sql(f"SELECT sum(gross) FROM {FIXED.publish_table} WHERE order_date = ?", [day])[0][0] == published


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

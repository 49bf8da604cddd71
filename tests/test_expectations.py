"""`expect:` and the gate `changes_as_expected` (issue 25): the plan says what its replay may change,
and the gate proves nothing else did, against the snapshot taken before the plan's first write, on
each engine.

The window is first written by the buggy release (net revenue subtracted refunds twice); the plan
replays it with the fix, whose only intended change is net revenue going up.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import dagster as dg
import pytest
import yaml

from backfill_assets.control import ledger
from backfill_assets.gates.results import CHANGES_AS_EXPECTED, GATE_NAMES, SINGLE_CODE_VERSION
from backfill_assets.warehouse.snapshots import snapshot_table
from tests.plans import complete_plan, write_plan
from tests.world import BUGGY, FIXED, World, keys

WINDOW = keys(1, 4)
DAY = "2026-01-03"
NET_UP = {"changes": [{"name": "net_revenue", "direction": "up"}]}


def plan_with(world: World, name: str, expect: dict | None = None, scenario: dict | None = None,
              proof: str = WINDOW[0]) -> Path:
    document = complete_plan(plan_id=name, start=WINDOW[0], end=WINDOW[-1], proof=(proof,), per_run=4)
    if expect is not None:
        document["expect"] = expect
    if scenario is not None:
        document["scenario"] = scenario
    return world.approve(write_plan(world.root / "plans" / f"{name}.yaml", document))


def buggy_window(world: World) -> None:
    """What the buggy release's daily runs wrote before the fix."""
    result = world.materialize(WINDOW, spec=BUGGY)
    assert result.success


def run(world: World, path: Path) -> None:
    """The proof, then the window; each exits 1 when a gate fails (the verdicts are what tests read)."""
    if world.cli("run", str(path), "--proof") == 0:
        world.cli("run", str(path))


def verdicts(world: World, plan_id: str, gate: str = CHANGES_AS_EXPECTED) -> dict[str, tuple[bool, dict]]:
    with world.warehouse().session() as session:
        latest = ledger.latest(session, FIXED.name, WINDOW, plan_id)
    return {k: e.gates[gate] for k, e in latest.items() if e is not None}


def undeclared_gross_change(world: World) -> str:
    """The buggy window, then one order of DAY grows (so gross changes too), a plan that declares
    only net_revenue up, run: its gate fails on DAY. Returns the order's region."""
    assert world.materialize(WINDOW, spec=BUGGY).success
    order_id, region, _ = world.sql(
        "SELECT order_id, region, amount FROM orders WHERE order_date = ? AND status <> 'refunded' "
        "ORDER BY order_id LIMIT 1", [DAY])[0]
    world.run_sql("UPDATE orders SET amount = amount + 1000 WHERE order_id = ?", [order_id])
    path = plan_with(world, "fix", NET_UP)
    assert world.cli("run", str(path), "--proof") == 0
    world.cli("run", str(path))
    passed, figures = verdicts(world, "fix")[DAY]
    assert not passed and "gross" in figures["detail"]  # the gate sees the undeclared change
    return str(region)


def test_a_declared_change_in_its_direction_passes_with_its_figures(engine_world):
    world = engine_world
    buggy_window(world)
    path = plan_with(world, "fix", NET_UP)
    run(world, path)

    found = verdicts(world, "fix")
    assert set(found) == set(WINDOW)
    for passed, figures in found.values():
        assert passed, figures["detail"]
        assert figures["detail"].startswith("as expected: rows +0 -0 ~5 against the snapshot; changed: "
                                            "net_revenue (5)")
        numbers = figures["numbers"]
        assert numbers["net_revenue.new"] > numbers["net_revenue.old"]
        assert numbers["net_revenue.difference"] == pytest.approx(
            numbers["net_revenue.new"] - numbers["net_revenue.old"])
        assert numbers["gross.difference"] == 0 and numbers["violations"] == 0 and numbers["judged"] == 1
        assert numbers["column.net_revenue.changed"] == 5 and numbers["column.gross.changed"] == 0
    assert world.phase("fix") == "reconciled"


def test_an_undeclared_column_change_fails_naming_the_key_column_and_values(engine_world, capsys):
    world = engine_world
    buggy_window(world)
    # the source moved since the buggy run: one order of DAY is bigger, so gross changes too, and
    # every source-facing gate agrees with the replay
    order = world.sql("SELECT order_id, region, amount FROM orders WHERE order_date = ? AND status <> 'refunded' "
                      "ORDER BY order_id LIMIT 1", [DAY])[0]
    world.run_sql("UPDATE orders SET amount = amount + 1000 WHERE order_id = ?", [order[0]])
    old_gross = world.sql("SELECT gross FROM daily_revenue WHERE order_date = ? AND region = ?", [DAY, order[1]])[0][0]
    path = plan_with(world, "fix", NET_UP)
    run(world, path)

    found = verdicts(world, "fix")
    passed, figures = found[DAY]
    assert not passed
    assert f"(region={order[1]}): gross {old_gross} -> {old_gross + 1000}" in figures["detail"], figures["detail"]
    assert figures["detail"].startswith("1 key(s) changed beyond expect: ")
    assert figures["numbers"]["violations"] == 1 and figures["numbers"]["column.gross.changed"] == 1
    assert "metric gross changed" in figures["detail"]
    # the other gates all passed: only this one saw the side effect
    with world.warehouse().session() as session:
        entry = ledger.latest(session, FIXED.name, [DAY], "fix")[DAY]
    assert entry.failed == [CHANGES_AS_EXPECTED]
    assert all(found[k][0] for k in WINDOW if k != DAY)
    assert world.phase("fix") != "reconciled"
    # `backfill diff` marks the side effect beside the intended change
    capsys.readouterr()
    assert world.cli("diff", "fix") == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines()[text.splitlines().index(next(
        ln for ln in text.splitlines() if ln.startswith(DAY))):] if f"region={order[1]}" in ln)
    assert " gross " in line and line.count("NOT EXPECTED") == 1, line
    assert "net_revenue" not in line or " expected" in line
    assert re.search(r"gross [\d,.]+ -> [\d,.]+ \(\+1,000\.00\) NOT EXPECTED", line), line


def test_a_change_against_its_declared_direction_fails(engine_world):
    world = engine_world
    buggy_window(world)
    path = plan_with(world, "fix", {"changes": [{"name": "net_revenue", "direction": "down"}]})
    run(world, path)

    found = verdicts(world, "fix")
    assert list(found) == [WINDOW[0]]  # the proof failed, so nothing past it ran
    passed, figures = found[WINDOW[0]]
    assert not passed
    numbers = figures["numbers"]
    assert figures["detail"].startswith(f"net_revenue went up {numbers['net_revenue.old']:.2f} -> "
                                 f"{numbers['net_revenue.new']:.2f} (+{numbers['net_revenue.difference']:.15g}); "
                                 "expected down; net_revenue over the window went up")
    assert world.phase("fix") == "proving"


def refunds(world: World) -> dict[str, float]:
    """Per day, what the fix adds back to net revenue: the refunds the buggy release subtracted twice."""
    rows = world.sql("SELECT order_date, sum(amount) FROM orders WHERE status = 'refunded' AND order_date "
                     "BETWEEN ? AND ? GROUP BY order_date", [WINDOW[0], WINDOW[-1]])
    return {str(d): float(v) for d, v in rows}


def test_bounds_hold_per_partition_and_over_the_window(engine_world):
    world = engine_world
    buggy_window(world)
    moved = refunds(world)
    proof = min(moved, key=moved.get)
    least = moved[proof]
    # the proof partition (the smallest movement) is within both bounds; past it the window's sum
    # is not, and neither is any day's own movement
    path = plan_with(world, "fix", {"changes": [{"name": "net_revenue", "direction": "up",
                                                 "per_partition": {"max_abs": least + 0.01, "max_pct": 1000},
                                                 "window": {"max_abs": least + 0.5}}]}, proof=proof)
    run(world, path)

    found = verdicts(world, "fix")
    assert found[proof][0], found[proof][1]["detail"]
    assert len(found) > 1  # the run halts after the first slice failing a gate
    # the window's figure: every partition of it written so far (the proof's and the slice's)
    window = sum(moved[k] for k in found)
    for key in (k for k in found if k != proof):
        passed, figures = found[key]
        assert not passed
        detail = figures["detail"]
        assert detail.startswith(f"net_revenue moved +{moved[key]:.15g} ("), detail
        assert f"more than max_abs {least + 0.01:g}" in detail
        assert f"net_revenue over the window moved +{window:.15g}" in detail, detail
        assert f"more than max_abs {least + 0.5:g}" in detail
        numbers = figures["numbers"]
        assert numbers["net_revenue.window_new"] - numbers["net_revenue.window_old"] == \
            pytest.approx(window)
        assert numbers["net_revenue.difference_pct"] < 1000


def test_keys_added_or_removed_and_partitions_outside_expect_fail(engine_world):
    world = engine_world
    buggy_window(world)
    # since the buggy run the source lost one region's orders on the second day and gained a
    # region on the third; every source-facing gate agrees with the replay
    world.run_sql("DELETE FROM orders WHERE order_date = ? AND region = 'west'", [WINDOW[1]])
    world.run_sql("INSERT INTO orders SELECT order_id + 1000000, customer_id, 'atlantis', order_ts, order_date, "
                  "amount, status FROM orders WHERE order_date = ? AND region = 'north'", [WINDOW[2]])
    path = plan_with(world, "fix", {"changes": [{"name": "net_revenue"}],
                                    "partitions": WINDOW[:3]})
    run(world, path)

    found = verdicts(world, "fix")
    assert found[WINDOW[0]][0]
    removed, added, outside = (found[k][1]["detail"] for k in WINDOW[1:])
    assert not any(found[k][0] for k in WINDOW[1:])
    assert removed.startswith("1 key(s) changed beyond expect: (region=west) removed"), removed
    assert added.startswith("1 key(s) changed beyond expect: (region=atlantis) added"), added
    assert "metric orders changed" in added  # the day's totals moved with the key added
    assert outside.startswith(f"partition {WINDOW[3]} may not change (expect.partitions) but did: "
                              "(region="), outside
    assert found[WINDOW[1]][1]["numbers"]["rows.removed"] == 1
    assert found[WINDOW[2]][1]["numbers"]["rows.added"] == 1


def test_a_logic_change_records_the_comparison_and_requires_its_new_code_version(engine_world):
    world = engine_world
    buggy_window(world)
    path = plan_with(world, "logic", scenario={"kind": "logic_change", "old_code_version": BUGGY.code_version,
                                               "new_code_version": FIXED.code_version})
    run(world, path)

    for passed, figures in verdicts(world, "logic").values():
        assert passed
        assert figures["detail"].startswith("no expectation declared; recorded: rows +0 -0 ~5 against the "
                                            "snapshot; changed: net_revenue (5)")
        assert figures["numbers"]["net_revenue.difference"] > 0 and figures["numbers"]["orders.difference"] == 0
    for passed, figures in verdicts(world, "logic", SINGLE_CODE_VERSION).values():
        assert passed and figures["detail"] == f"code version {FIXED.code_version}, the logic change's new version"
    assert world.phase("logic") == "reconciled"


def test_without_expect_the_gate_passes_saying_so_and_counts_as_the_eighth(world):
    buggy_window(world)
    path = plan_with(world, "plain")
    run(world, path)

    for passed, figures in verdicts(world, "plain").values():
        assert passed and figures["detail"] == "no expectation declared"
        assert figures["numbers"] == {"judged": 0}  # a figure for the UI's plots, beside judged ones
    with world.warehouse().session() as session:
        entry = ledger.latest(session, FIXED.name, [WINDOW[0]], "plain")[WINDOW[0]]
    assert sorted(entry.gates) == sorted(GATE_NAMES) and len(GATE_NAMES) == 8


# --- the plan: one line per problem, a kind's missing fields named together --------------------------

@pytest.mark.parametrize(("scenario", "line"), [
    ({"kind": "incident"},
     "  - scenario = 'incident': kind incident needs incident_id, link"),
    ({"kind": "logic_change", "new_code_version": "2", "incident_id": "INC-1"},
     "  - scenario = 'logic_change': kind logic_change needs old_code_version; incident_id is not a field of "
     "kind logic_change (it takes old_code_version, new_code_version)"),
    ({"kind": "logic_change", "old_code_version": "2", "new_code_version": "2"},
     "  - scenario = 'logic_change': old_code_version and new_code_version are both 2"),
    ({"kind": "repair"}, "  - scenario = 'repair': kind repair needs failure"),
    ({"kind": "late_data"}, "  - scenario = 'late_data': kind late_data needs arrived"),
    ({"kind": "cutover"}, "  - scenario = 'cutover': kind cutover needs shadow_days, tolerance"),
    ({"kind": "switchover"},
     "  - scenario.kind = 'switchover': Input should be 'incident', 'logic_change', 'repair', 'late_data' or "
     "'cutover'; use one of incident, logic_change, repair, late_data, cutover"),
    ({"kind": "incident", "incident_id": "INC-1", "link": "ftp://x"},
     "  - scenario.link = 'ftp://x': String should match pattern '^https?://\\S{1,2000}$'; give the "
     "incident's http(s) URL"),
])
def test_a_scenario_missing_its_fields_is_one_line_naming_them(tmp_path, run_cli, scenario, line):
    document = complete_plan()
    document["scenario"] = scenario
    result = run_cli("plan", "validate", str(write_plan(tmp_path / "p.yaml", document)))
    assert result.code == 1
    assert len(result.err.splitlines()) == 1 and result.err.rstrip().endswith(f": {line[4:]}"), result.err


@pytest.mark.parametrize(("expect", "line"), [
    ({"changes": [{"name": "refund"}]},
     "  - expect.changes.name = 'refund': daily_revenue has no such value column or metric; use one of: "
     "customers, gross, net_revenue, orders, refunds"),
    ({"changes": [{"name": "region"}]},
     "  - expect.changes.name = 'region': is a business key: a row whose key changes is one removed and one "
     "added; say rows_added / rows_removed instead"),
    ({"partitions": ["2026-02-01"]},
     "  - expect.partitions = '2026-02-01': is outside the window 2026-01-01..2026-01-06; pick keys inside it"),
    ({"changes": [{"name": "net_revenue", "direction": "sideways"}]},
     "  - expect.changes.0.direction = 'sideways': Input should be 'up' or 'down'; use up or down, or leave "
     "it out (either way)"),
    ({"changes": [{"name": "net_revenue", "window": {"max_pct": -1}}]},
     "  - expect.changes.0.window.max_pct = -1: Input should be greater than or equal to 0; give a "
     "percentage >= 0 of the window's figure before the replay"),
    ({"rows_added": "yes"},
     "  - expect.rows_added = 'yes': Input should be a valid boolean; use true or false: may keys appear "
     "that were not there before"),
])
def test_a_bad_expectation_is_one_line_naming_the_key_and_the_fix(tmp_path, run_cli, expect, line):
    document = complete_plan()
    document["expect"] = expect
    result = run_cli("plan", "validate", str(write_plan(tmp_path / "p.yaml", document)),
                     "--defs", "backfill_assets.demo.daily")
    assert result.code == 1
    assert len(result.err.splitlines()) == 1 and result.err.rstrip().endswith(f": {line[4:]}"), result.err


def test_a_logic_change_to_a_version_not_deployed_does_not_fit(tmp_path, run_cli):
    document = complete_plan()
    document["scenario"] = {"kind": "logic_change", "old_code_version": "2", "new_code_version": "3"}
    result = run_cli("plan", "validate", str(write_plan(tmp_path / "p.yaml", document)),
                     "--defs", "backfill_assets.demo.daily")
    assert result.code == 1
    assert len(result.err.splitlines()) == 1 and result.err.rstrip().endswith(
        ": scenario.new_code_version = '3': the loaded daily_revenue is code version 2: the replay writes "
        "the new version, so deploy it first (or name the version it is)"), result.err


# --- the incident, end to end: show, checklist, notices, check metadata, diff, evidence -------------

INCIDENT = {"kind": "incident", "incident_id": "INC-2291", "link": "https://status.example/INC-2291"}


def test_an_incident_replay_carries_its_id_and_expectation_everywhere(world, capsys, tmp_path):
    buggy_window(world)
    path = plan_with(world, "fix", NET_UP, scenario=INCIDENT)
    capsys.readouterr()
    assert world.cli("plan", "show", str(path)) == 0
    shown = capsys.readouterr().out.splitlines()
    assert "scenario   incident INC-2291 (https://status.example/INC-2291)" in shown
    assert ("expect     may change: net_revenue (up) in any partition; no key added or removed; everything "
            "else byte-identical per key") in shown
    assert world.cli("guard", str(path), "--defs", "backfill_assets.demo.daily") == 0
    checklist = capsys.readouterr().out
    assert "scenario: incident INC-2291" in checklist
    assert "changes as expected: may change: net_revenue (up)" in checklist

    run(world, path)
    # the check's figures are numbers in Dagster, for the UI's plots
    evaluation = world.instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [dg.AssetCheckKey(dg.AssetKey(FIXED.name), CHANGES_AS_EXPECTED)])[
        dg.AssetCheckKey(dg.AssetKey(FIXED.name), CHANGES_AS_EXPECTED)].event.dagster_event.event_specific_data
    assert evaluation.passed
    assert isinstance(evaluation.metadata["figure.net_revenue.difference"], dg.FloatMetadataValue)
    assert evaluation.metadata["figure.net_revenue.difference"].value > 0
    assert evaluation.metadata["figure.violations"].value == 0

    capsys.readouterr()
    assert world.cli("diff", "fix") == 0
    text = capsys.readouterr().out
    assert ("  expected: may change: net_revenue (up) in any partition; no key added or removed; everything "
            "else byte-identical per key; NOT EXPECTED marks the rest") in text
    assert "NOT EXPECTED (" not in text and " expected" in text.split("expected:", 1)[1]

    assert world.cli("publish", "fix") == 0
    notices = {event: (message, json.loads(body)) for event, message, body in world.sql(
        "SELECT event, message, body FROM backfill_control.outbox WHERE plan_id = 'fix'")}
    assert set(notices) >= {"frozen", "reopened"}
    for event, (message, body) in notices.items():
        assert message.endswith("[incident INC-2291 (https://status.example/INC-2291)]"), message
        assert body["scenario"] == INCIDENT, event
    assert notices["reopened"][1]["expectation"] == {
        "declared": "may change: net_revenue (up) in any partition; no key added or removed; everything "
                    "else byte-identical per key", "verdict": "every partition changed as expected"}

    out = tmp_path / "evidence.yaml"
    assert world.cli("evidence", "fix", "--out", str(out)) == 0
    document = yaml.safe_load(out.read_text())
    assert document["scenario"] == INCIDENT
    expectation = document["expectation"]
    assert expectation["verdict"] == f"as expected in all {len(WINDOW)} partition(s) judged"
    assert expectation["observed"]["changed"] == 5 * len(WINDOW)
    assert expectation["observed"]["added"] == expectation["observed"]["removed"] == 0
    net = expectation["observed"]["metrics"]["net_revenue"]
    assert net["new"] - net["old"] == pytest.approx(net["difference"]) and net["difference"] > 0
    assert expectation["observed"]["metrics"]["gross"]["difference"] == 0


def test_a_snapshot_edited_after_it_was_taken_never_makes_changes_as_expected_pass(world, capfd):
    """Insider (warehouse write, no evidence key). `changes_as_expected` compares the data with the
    rows in backfill_snapshots, never checking them against the snapshot's sealed fingerprint. After
    the gate failed on an undeclared change, the insider edits the snapshot rows to agree with the
    new data; `reconcile` then passes and `publish` copies the undeclared change to consumers.

    Found by an attack: the gate now fingerprints the snapshot's rows against the sealed record of
    what was taken, and fails the partition when they differ."""
    region = undeclared_gross_change(world)
    assert world.phase("fix") != "reconciled"

    # the insider: the snapshot's rows of DAY now "were" what the replay wrote (gross included)
    snap = f"backfill_snapshots.{snapshot_table('fix', 'daily_revenue')}"
    world.run_sql(f"UPDATE {snap} AS s SET gross = d.gross FROM daily_revenue AS d "
                  "WHERE s.order_date = d.order_date AND s.region = d.region AND s.order_date = ?", [DAY])

    capfd.readouterr()
    world.cli("reconcile", "fix")
    passed, figures = verdicts(world, "fix")[DAY]
    assert not passed and "snapshot of 2026-01-03 holds other rows" in figures["detail"], figures
    world.cli("publish", "fix")
    published_gross = world.sql("SELECT gross FROM published_revenue WHERE order_date = ? AND region = ?",
                                [DAY, region])
    true_snapshot_gross = world.sql("SELECT gross FROM daily_revenue WHERE order_date = ? AND region = ?",
                                    [DAY, region])[0][0] - 1000
    # what the README promises: the undeclared gross change never reaches consumers
    assert published_gross in ([], [(true_snapshot_gross,)]), (
        f"consumers see gross {published_gross} for {DAY}/{region}: an undeclared change the gate failed "
        f"against the real snapshot ({true_snapshot_gross}); phase {world.phase('fix')}")


def test_a_snapshot_swapped_for_a_view_never_makes_changes_as_expected_pass(world, capfd):
    """Insider (warehouse write, no evidence key). Fix 5 fingerprints the snapshot's rows against the
    sealed record, then compares the data with the snapshot in a second statement. A view in the
    snapshot's place answers each statement differently (DuckDB's current_query()): the true rows
    to the fingerprint pass (it names 'sha256:'), rows agreeing with the replay to the comparison.
    The undeclared change then passed its gate and reached consumers (found by an attack): a
    fingerprint now refuses a relation that is not a plain table."""
    region = undeclared_gross_change(world)
    # the insider: the snapshot becomes a view, honest to fingerprints, agreeing with the replay otherwise
    snap = snapshot_table("fix", "daily_revenue")
    s = f"backfill_snapshots.{snap}"
    world.run_sql(f"CREATE TABLE backfill_snapshots.kept AS SELECT * FROM {s}")
    world.run_sql(f"CREATE TABLE backfill_snapshots.agreeing AS SELECT * FROM {s}")
    world.run_sql("UPDATE backfill_snapshots.agreeing AS s SET gross = d.gross FROM daily_revenue AS d "
                  "WHERE s.order_date = d.order_date AND s.region = d.region AND s.order_date = ?", [DAY])
    world.run_sql(f"DROP TABLE {s}")
    world.run_sql(f"CREATE VIEW {s} AS SELECT * FROM backfill_snapshots.kept WHERE current_query() LIKE '%sha256:%' "
                  "UNION ALL SELECT * FROM backfill_snapshots.agreeing WHERE current_query() NOT LIKE '%sha256:%'")
    capfd.readouterr()
    assert world.cli("reconcile", "fix") == 1
    assert "is a view, not a table" in capfd.readouterr().err
    world.cli("publish", "fix")
    true_gross = world.sql("SELECT gross FROM daily_revenue WHERE order_date = ? AND region = ?",
                           [DAY, region])[0][0] - 1000
    published = world.sql("SELECT gross FROM published_revenue WHERE order_date = ? AND region = ?", [DAY, region])
    assert published in ([], [(true_gross,)]), (
        f"an undeclared gross change reached consumers ({published}, snapshot {true_gross}); gate "
        f"{verdicts(world, 'fix')[DAY]}; phase {world.phase('fix')}")

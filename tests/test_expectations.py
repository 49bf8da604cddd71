"""`expect:` and the gate `changes_as_expected` (issue 25): the plan says what its replay may change,
and the gate proves nothing else did, against the snapshot taken before the plan's first write, on
each engine.

The window is first written by the buggy release (net revenue subtracted refunds twice); the plan
replays it with the fix, whose only intended change is net revenue going up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from backfill_assets.control import ledger
from backfill_assets.gates.results import CHANGES_AS_EXPECTED, GATE_NAMES, SINGLE_CODE_VERSION
from tests.plans import complete_plan, write_plan
from tests.world import BUGGY, FIXED, World, keys

WINDOW = keys(1, 4)
DAY = "2026-01-03"
NET_UP = {"changes": [{"name": "net_revenue", "direction": "up"}]}


def plan_with(world: World, name: str, expect: dict | None = None, scenario: dict | None = None,
              **kwargs) -> Path:
    document = complete_plan(plan_id=name, start=WINDOW[0], end=WINDOW[-1], proof=(WINDOW[0],), per_run=4,
                             **kwargs)
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


def test_a_declared_change_in_its_direction_passes_with_its_figures(engine_world):
    world = engine_world
    buggy_window(world)
    path = plan_with(world, "fix", NET_UP)
    run(world, path)

    found = verdicts(world, "fix")
    assert set(found) == set(WINDOW)
    for key, (passed, figures) in found.items():
        assert passed, figures["detail"]
        assert figures["detail"].startswith("as expected: rows +0 -0 ~5 against the snapshot; changed: "
                                            "net_revenue (5)")
        numbers = figures["numbers"]
        assert numbers["net_revenue.new"] > numbers["net_revenue.old"]
        assert numbers["net_revenue.difference"] == pytest.approx(
            numbers["net_revenue.new"] - numbers["net_revenue.old"])
        assert numbers["gross.difference"] == 0 and numbers["violations"] == 0
        assert numbers["column.net_revenue.changed"] == 5 and numbers["column.gross.changed"] == 0
    assert world.phase("fix") == "reconciled"


def test_an_undeclared_column_change_fails_naming_the_key_column_and_values(engine_world):
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

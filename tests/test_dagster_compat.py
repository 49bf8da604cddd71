"""Fails loudly when a Dagster upgrade changes the internal API we read check results through."""

from __future__ import annotations

import dagster as dg

from backfill_assets.dagster_compat import latest_check_results
from backfill_assets.gates.results import GATE_NAMES
from tests.world import keys


def test_per_partition_check_results_are_readable_for_single_and_range_runs(world):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.plan_run("fix", keys(2, 2)).success          # one partition: yielded results
    world.sql("UPDATE backfill_control.plans SET phase = 'proven'")  # skip to the window
    assert world.plan_run("fix", keys(3, 4)).success          # a range: logged per partition
    for key in ("2026-01-02", "2026-01-03", "2026-01-04"):
        states = latest_check_results(world.instance, dg.AssetKey("daily_revenue"),
                                      list(GATE_NAMES), key)
        assert sorted(states) == sorted(GATE_NAMES), key
        assert all(s.status == "SUCCEEDED" and s.passed for s in states.values()), key
        assert states["row_count_matches_source"].metadata["partition"] == key
    untouched = latest_check_results(world.instance, dg.AssetKey("daily_revenue"),
                                     list(GATE_NAMES), "2026-01-01")
    assert untouched == {}

"""`backfill load`: a new table's history in ranged runs without a plan, gated and published; refused
over history; halted at a failing gate with commands that can succeed."""

from __future__ import annotations

from tests.world import keys


def runs_of(world) -> int:
    return len(world.instance.get_run_records())


def test_load_fills_never_written_partitions_in_ranged_runs_and_publishes_them(world, run_cli):
    assert world.materialize(keys(7, 7)).success  # a later day first: the earlier ones stay new
    dry = run_cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-05", "--per-run", "2",
                  "--dry-run")
    assert dry.code == 0 and "5 partition(s) in 3 run(s)" in dry.out and "run 3: 2026-01-05" in dry.out
    assert world.rows("daily_revenue", "2026-01-01") == 0
    before = runs_of(world)
    done = run_cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-05", "--per-run", "2")
    assert done.code == 0, done.err
    assert "5/5 partitions" in done.err  # the progress line, on stderr like `backfill run`'s
    assert "loaded 5 partition(s) of daily_revenue in 3 run(s), gated and published to published_revenue" in done.out
    assert runs_of(world) == before + 3
    assert [world.rows("published_revenue", k) for k in keys(1, 5)] == [5] * 5
    assert world.fingerprints("published_revenue", keys(1, 5)) == world.fingerprints("daily_revenue", keys(1, 5))
    assert world.sql("SELECT count(DISTINCT partition_key), bool_and(passed) FROM backfill_control.gate_results "
                     "WHERE plan_id IS NULL") == [(6, True)]  # gated like any write: the 6 days, all passed
    assert world.plan_ids() == []


def test_load_over_history_is_refused_before_any_run(world, run_cli):
    assert world.materialize(keys(2, 2)).success
    world.run_sql("DELETE FROM daily_revenue")  # emptied: still history
    before = runs_of(world)
    refused = run_cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-03")
    assert refused.code == 1
    assert ("1 of the 3 partition(s) of daily_revenue are history (2026-01-02 was written before (it holds no rows "
            "now)); only partitions never written load without a plan") in refused.err
    assert "backfill plan new plans/new-plan.yaml --target daily_revenue" in refused.err
    assert refused.err.count("\n") == 1 and runs_of(world) == before
    assert world.rows("daily_revenue", "2026-01-01") == 0
    world.approved_plan("fix", start="2026-01-05", end="2026-01-06", proof=("2026-01-05",))
    held = run_cli("load", "daily_revenue", "--start", "2026-01-04", "--end", "2026-01-05")
    assert held.code == 1 and "2026-01-05 of daily_revenue lies in plan fix's window" in held.err
    bad = run_cli("load", "daily_revenue", "--start", "2026-01-04", "--end", "2026-13-01")
    assert bad.code == 2 and "'2026-13-01' is not a partition of daily_revenue" in bad.err


def test_load_halts_at_a_failing_gate_publishes_what_passed_and_says_what_can_succeed(world, run_cli):
    world.run_sql("INSERT INTO orders SELECT order_id + 10000000, customer_id, NULL, order_ts, order_date, amount, "
                  "status FROM orders WHERE order_date = '2026-01-02' LIMIT 3")  # events without a region
    halted = run_cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-05", "--per-run", "3")
    assert halted.code == 1
    assert "2026-01-02: " in halted.out and "contract_holds" in halted.out
    assert "halted at 2026-01-01..2026-01-03" in halted.out
    assert ("backfill plan new plans/new-plan.yaml --target daily_revenue --start 2026-01-02 --end 2026-01-02"
            in halted.out)
    assert "backfill load daily_revenue --start 2026-01-04 --end 2026-01-05" in halted.out
    # the days of that run whose gates passed are published; the failing one is not
    assert [world.rows("published_revenue", k) for k in keys(1, 3)] == [5, 0, 5]
    assert world.rows("daily_revenue", "2026-01-04") == 0
    rest = run_cli("load", "daily_revenue", "--start", "2026-01-04", "--end", "2026-01-05")
    assert rest.code == 0, rest.err
    again = run_cli("load", "daily_revenue", "--start", "2026-01-02", "--end", "2026-01-02")
    assert again.code == 1 and "history (2026-01-02 holds" in again.err

"""The seed's red flags and the README's promises on `expect:`, scenarios and the impact consumers
are told: a cutover's streak, the notice and the materializations of a graph publish, `backfill
diff` beside `changes_as_expected`, the proof as a bounded slice. Each test failed on the code
before its fix (found by an attack)."""

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



def test_the_reopened_notice_of_a_graph_plan_tells_what_consumers_of_the_month_will_see(world, monkeypatch, capsys):
    """A plan over the days and their month publishes both in one transaction; the README says the
    impact consumers will see goes into the `reopened` notice to downstream owners (the month's
    consumers, the report's owners, among them). The notice carried the days' impact alone: the
    month, whose net revenue moved as much, was reported to no one (only the evidence row had it)."""
    import json

    from tests.test_graph import MONTH, buggy_january_published, month_net, reconciled_graph

    world = buggy_january_published(world, monkeypatch)
    before = month_net(world, "published_monthly_revenue")
    reconciled_graph(world)
    assert world.cli("publish", "fix") == 0
    moved = month_net(world, "published_monthly_revenue") - before
    assert moved
    [body] = [json.loads(b) for (b,) in world.sql(
        "SELECT body FROM backfill_control.outbox WHERE plan_id = 'fix' AND event = 'reopened'")]
    text = json.dumps(body)
    assert "published_monthly_revenue" in text, text
    month = next(i for i in ([body["impact"]] + list(body["impact"].get("graph", {}).values())
                             if isinstance(body.get("impact"), dict) else [])
                 if i.get("table") == "published_monthly_revenue")
    assert round(month["totals"]["net_revenue"]["difference"], 2) == round(moved, 2)
    assert [p["partition"] for p in month["changed"]] == [MONTH]


def test_the_months_published_materialization_carries_what_its_consumers_see_change(world, monkeypatch, capsys):
    """The README: what consumers see change goes on the published asset's materialization (the
    `impact_*` numbers the UI plots, and the table). A graph plan's publish materializes the month's
    published asset too, with no impact at all: its Plots and its readers saw nothing of the move."""
    import dagster as dg

    from tests.test_graph import MONTH, buggy_january_published, month_net, reconciled_graph

    world = buggy_january_published(world, monkeypatch)
    before = month_net(world, "published_monthly_revenue")
    reconciled_graph(world)
    capsys.readouterr()
    assert world.cli("publish", "fix") == 0
    # the terminal still tells the days' change, the run's own table
    assert "consumers see 4 partition(s) changed" in capsys.readouterr().out
    moved = month_net(world, "published_monthly_revenue") - before
    record = world.instance.get_latest_materialization_event(dg.AssetKey("published_monthly_revenue"))
    assert record is not None and record.asset_materialization.partition == MONTH
    metadata = {k: v.value for k, v in record.asset_materialization.metadata.items()}
    assert metadata.get("impact_partitions_changed") == 1, metadata
    assert round(metadata["impact_net_revenue_difference"], 2) == round(moved, 2)


def test_backfill_diff_never_marks_expected_a_move_the_gate_refused_for_its_direction(world, capsys):
    """The plan says net_revenue goes down; the replay moves it up in every key, and
    `changes_as_expected` fails the partition for it. `backfill diff`, what reviewers read "before
    anyone sees it", marked each of those moves ` expected` and printed no NOT EXPECTED at all."""
    from tests.test_expectations import WINDOW as W
    from tests.test_expectations import buggy_window, plan_with, verdicts

    buggy_window(world)
    path = plan_with(world, "fix", {"changes": [{"name": "net_revenue", "direction": "down"}]})
    assert world.cli("run", str(path), "--proof") != 0
    passed, figures = verdicts(world, "fix")[W[0]]
    assert not passed and "expected down" in figures["detail"]
    capsys.readouterr()
    assert world.cli("diff", "fix") == 0
    text = capsys.readouterr().out
    moves = [ln for ln in text.splitlines() if "net_revenue" in ln and "->" in ln and ln.startswith("  ")]
    assert moves, text
    assert not any(ln.endswith(" expected") or "(+" in ln.split("net_revenue")[1].split(";")[0]
                   and " expected" in ln.split("net_revenue")[1].split(";")[0] for ln in moves), text
    assert "NOT EXPECTED" in text, text


def test_backfill_diff_marks_a_key_whose_only_change_is_an_undeclared_column(world, capsys):
    """A team's table with a value column that is no metric (here `customers`): the replay changes it
    in one key, undeclared, and `changes_as_expected` fails naming it. `backfill diff` listed the key
    as `changed` with no figure and no NOT EXPECTED: the one change the gate refused was shown as
    nothing at all."""
    from tests.plans import complete_plan, write_plan
    from tests.test_expectations import DAY, NET_UP
    from tests.test_expectations import WINDOW as W
    from tests.world import BUGGY, replace

    spec = replace(FIXED, metrics=tuple(m for m in FIXED.metrics if m.name != "customers"))
    defs = world.defs_file(spec)
    assert world.materialize(W, spec=BUGGY).success
    # one order moves to another customer of its region who ordered that day: one customer fewer
    order_id, region, other = world.sql(
        "SELECT o.order_id, o.region, (SELECT min(x.customer_id) FROM orders x WHERE x.order_date = o.order_date "
        "AND x.region = o.region AND x.customer_id <> o.customer_id) FROM orders o WHERE o.order_date = ? "
        "AND (SELECT count(*) FROM orders y WHERE y.order_date = o.order_date AND y.region = o.region "
        "AND y.customer_id = o.customer_id) = 1 ORDER BY o.order_id LIMIT 1", [DAY])[0]
    world.run_sql("UPDATE orders SET customer_id = ? WHERE order_id = ?", [other, order_id])
    document = complete_plan(plan_id="fix", start=W[0], end=W[-1], proof=(W[0],), per_run=4)
    document["expect"] = NET_UP
    path = world.approve_for(write_plan(world.root / "plans" / "fix.yaml", document), spec)
    assert world.cli("run", str(path), "--proof", "--defs", str(defs)) == 0
    world.cli("run", str(path), "--defs", str(defs))
    with world.warehouse().session() as session:
        from backfill_assets.control import ledger
        from backfill_assets.gates.results import CHANGES_AS_EXPECTED
        passed, figures = ledger.latest(session, spec.name, [DAY], "fix")[DAY].gates[CHANGES_AS_EXPECTED]
    assert not passed and "customers" in figures["detail"], figures["detail"]
    capsys.readouterr()
    assert world.cli("diff", "fix", "--partitions", DAY, "--defs", str(defs)) == 0
    text = capsys.readouterr().out
    [line] = [ln for ln in text.splitlines() if f"region={region}" in ln]
    assert "NOT EXPECTED" in line and "customers" in line, text


def test_a_proof_covering_the_whole_window_is_no_slice_proof(tmp_path, run_cli):
    """The seed's red flag "no bounded slice proof before full-window replay": proof_partitions may
    list every partition of a window of several, so the "proof" is the full-window replay itself
    (written twice), and no slice was ever proven before it. A window of one partition (late data
    for yesterday) is its own proof; one of several needs a proof smaller than it."""
    from tests.plans import complete_plan, write_plan

    days = ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"]
    document = complete_plan(start=days[0], end=days[-1], proof=tuple(days))
    result = run_cli("plan", "validate", str(write_plan(tmp_path / "p.yaml", document)),
                     "--defs", "backfill_assets.demo.daily")
    assert result.code == 1, result.out
    assert "execution.proof_partitions" in result.err and "whole window" in result.err, result.err
    late = complete_plan(start=days[0], end=days[0], proof=(days[0],))
    assert run_cli("plan", "validate", str(write_plan(tmp_path / "late.yaml", late)),
                   "--defs", "backfill_assets.demo.daily").code == 0

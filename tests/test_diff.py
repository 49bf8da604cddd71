"""`backfill diff PLAN`: what a plan changed, partition by partition and key by key, against the
snapshot taken before its first write of each partition (issue 11)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re

import dagster as dg
import pytest

from backfill_assets import impact
from backfill_assets.control.schema import SNAPSHOT_SCHEMA
from backfill_assets.errors import IdentifierError
from backfill_assets.impact import _by_rows, compare, consumer_impact, consumer_impact_holds
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import Column, Metric, TableSpec
from backfill_assets.warehouse.ddl import create_sql
from backfill_assets.warehouse.snapshots import snapshot_table
from tests.world import BUGGY, FIXED, World, keys

WINDOW = keys(1, 4)
METRICS = [m.name for m in FIXED.metrics]


def diff(world: World, capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = world.cli("diff", *args)
    return code, capsys.readouterr().out


def diff_json(world: World, capsys, *args: str) -> dict:
    code, out = diff(world, capsys, *args, "--json")
    assert code == 0, out
    return json.loads(out)


def by_region(world: World, table: str, day: str) -> dict[str, tuple]:
    """region -> (orders, gross, refunds, net_revenue, customers) of one partition of `table`."""
    rows = world.sql(f"SELECT region, orders, gross, refunds, net_revenue, customers FROM {table} "
                     "WHERE order_date = ? ORDER BY region", [day])
    return {r[0]: r[1:] for r in rows}


def snapshot(plan_id: str) -> str:
    return f"{SNAPSHOT_SCHEMA}.{snapshot_table(plan_id, FIXED.table)}"


def test_diff_reports_per_key_figures_of_the_fix_against_the_pre_plan_snapshot(world, capsys):
    assert world.materialize(WINDOW, spec=BUGGY).success  # the buggy release's daily runs
    path = world.approved_plan("fix", start=WINDOW[0], end=WINDOW[-1], proof=(WINDOW[0],), per_run=3)
    assert world.cli("run", str(path), "--proof") == 0
    assert world.cli("run", str(path)) == 0

    report = diff_json(world, capsys, "fix")

    assert (report["plan_id"], report["table"]) == ("fix", "daily_revenue")
    assert [p["partition"] for p in report["partitions"]] == WINDOW
    assert {k: report["totals"][k] for k in ("partitions_changed", "added", "removed", "changed")} == {
        "partitions_changed": 4, "added": 0, "removed": 0, "changed": 20}
    for part in report["partitions"]:
        day = part["partition"]
        before, after = by_region(world, snapshot("fix"), day), by_region(world, "daily_revenue", day)
        assert (part["rows_before"], part["rows_after"]) == (5, 5)
        assert (part["added"], part["removed"], part["changed"]) == (0, 0, 5)
        assert len(part["top"]) == 5
        for change in part["top"]:
            assert change["status"] == "changed"
            assert change["keys"]["order_date"] == day
            region = change["keys"]["region"]
            net = change["metrics"]["net_revenue"]
            old, new = before[region][3], after[region][3]
            assert (net["old"], net["new"]) == (float(old), float(new))
            assert net["difference"] == pytest.approx(float(new - old), abs=1e-9)
            assert net["difference"] > 0  # the fix stops subtracting refunds twice
            assert change["metrics"]["gross"]["difference"] == 0.0  # only net revenue was wrong
        # keys come largest change first
        sizes = [c["metrics"]["net_revenue"]["difference"] for c in part["top"]]
        assert sizes == sorted(sizes, reverse=True)
        net_total = part["totals"]["net_revenue"]
        old_total = sum(v[3] for v in before.values())
        new_total = sum(v[3] for v in after.values())
        assert (net_total["old"], net_total["new"]) == (float(old_total), float(new_total))
        assert part["totals"]["gross"]["difference"] == 0.0
    truth = world.sql("SELECT sum(amount) - coalesce(sum(amount) FILTER (WHERE status = 'refunded'), 0) "
                      "FROM orders WHERE order_date BETWEEN ? AND ?", [WINDOW[0], WINDOW[-1]])[0][0]
    assert report["totals"]["net_revenue"]["new"] == float(truth)

    limited = diff_json(world, capsys, "fix", "--partitions", f"{WINDOW[1]},{WINDOW[3]}")
    assert [p["partition"] for p in limited["partitions"]] == [WINDOW[1], WINDOW[3]]
    assert limited["partitions"] == [report["partitions"][1], report["partitions"][3]]
    assert limited["totals"]["changed"] == 10

    # the text is bounded: the summary, then at most --top keys per changed partition
    code, text = diff(world, capsys, "fix", "--top", "2")
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == ("impact of plan fix on daily_revenue: 4 of 4 partition(s) changed; "
                        "rows added 0, removed 0, changed 20")
    assert sum(1 for line in lines if line.startswith("  changed ")) == 4 * 2
    assert f"{WINDOW[0]}: +0 -0 ~5 rows (5 -> 5)" in lines
    biggest = report["partitions"][0]["top"][0]
    old, new = biggest["metrics"]["net_revenue"]["old"], biggest["metrics"]["net_revenue"]["new"]
    assert (f"  changed  order_date={WINDOW[0]}, region={biggest['keys']['region']}: "
            f"net_revenue {old:,.2f} -> {new:,.2f} ({new - old:+,.2f})") in lines
    assert not any("gross" in line for line in lines if line.startswith("  changed "))
    assert len(text) < 2000

    # a rerun that changes nothing since its last run still diffs against the pre-plan snapshot
    assert world.cli("run", str(path), "--partitions", WINDOW[1]) == 0
    assert world.sql("SELECT count(*) FROM backfill_control.writes WHERE plan_id = 'fix' "
                     "AND partition_key = ?", [WINDOW[1]])[0][0] == 2
    again = diff_json(world, capsys, "fix", "--partitions", WINDOW[1])
    assert again["partitions"] == [report["partitions"][1]]
    # and that run's materialization of the target says the same, as numbers the UI plots
    [event] = world.instance.get_latest_materialization_events([dg.AssetKey("daily_revenue")]).values()
    metadata = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    assert (metadata["plan"], metadata["impact_partitions_changed"], metadata["impact_changed"]) == ("fix", 1, 5)
    assert metadata["impact_net_revenue_difference"] == pytest.approx(
        report["partitions"][1]["totals"]["net_revenue"]["difference"])
    assert f"| {WINDOW[1]} | 0 | 0 | 5 |" in metadata["impact"]


def test_a_plan_whose_recomputation_equals_the_snapshot_reports_no_change(world, capsys):
    window = keys(1, 3)
    assert world.materialize(window, spec=FIXED).success  # already the fixed figures
    path = world.approved_plan("same", start=window[0], end=window[-1], proof=tuple(window[:2]), per_run=3)
    assert world.cli("run", str(path), "--proof") == 0
    assert world.cli("run", str(path)) == 0
    assert world.sql("SELECT count(*) FROM backfill_control.writes WHERE plan_id = 'same'")[0][0] == 5

    code, text = diff(world, capsys, "same")

    assert code == 0
    assert text.splitlines()[0] == ("impact of plan same on daily_revenue: 0 of 3 partition(s) changed; "
                                    "rows added 0, removed 0, changed 0")
    assert not re.search(r"^\d{4}-\d{2}-\d{2}: ", text, re.M)  # no partition listed
    report = diff_json(world, capsys, "same")
    assert [(p["partition"], p["added"], p["removed"], p["changed"], p["top"])
            for p in report["partitions"]] == [(k, 0, 0, 0, []) for k in window]
    assert report["totals"]["net_revenue"]["difference"] == 0.0


def test_a_key_added_and_a_key_removed_in_the_source_show_as_added_and_removed(world, capsys):
    day = "2026-01-02"
    assert world.materialize(keys(1, 2), spec=FIXED).success
    west = by_region(world, "daily_revenue", day)["west"]
    world.run_sql("DELETE FROM orders WHERE order_date = ? AND region = 'west'", [day])
    world.run_sql("INSERT INTO orders VALUES (999001, 42, 'arctic', TIMESTAMP '2026-01-02 12:00:00', "
                  "DATE '2026-01-02', 123.45, 'completed')")
    path = world.approved_plan("moved", start=day, end=day, proof=(day,))
    assert world.cli("run", str(path), "--proof") == 0

    report = diff_json(world, capsys, "moved")

    [part] = report["partitions"]
    assert (part["partition"], part["rows_before"], part["rows_after"]) == (day, 5, 5)
    assert (part["added"], part["removed"], part["changed"]) == (1, 1, 0)
    changes = {c["keys"]["region"]: c for c in part["top"]}
    assert set(changes) == {"arctic", "west"}
    added, removed = changes["arctic"], changes["west"]
    assert added["status"] == "added" and removed["status"] == "removed"
    assert added["metrics"]["net_revenue"] == {"old": None, "new": 123.45, "difference": 123.45}
    assert added["metrics"]["orders"] == {"old": None, "new": 1.0, "difference": 1.0}
    assert removed["metrics"]["net_revenue"] == {"old": float(west[3]), "new": None,
                                                 "difference": -float(west[3])}
    code, text = diff(world, capsys, "moved")
    assert code == 0
    assert f"{day}: +1 -1 ~0 rows (5 -> 5)" in text.splitlines()
    lines = text.splitlines()
    arctic = next(line for line in lines if line.startswith(f"  added    order_date={day}, region=arctic: "))
    assert "orders NULL -> 1.00 (+1.00)" in arctic and "net_revenue NULL -> 123.45 (+123.45)" in arctic
    gone = next(line for line in lines if line.startswith(f"  removed  order_date={day}, region=west: "))
    assert f"net_revenue {west[3]:,.2f} -> NULL (-{west[3]:,.2f})" in gone


@pytest.mark.parametrize("args, expected", [
    (("--partitions", "2099-01-01"), "partitions 2099-01-01 are not in the window 2026-01-01..2026-01-03 of plan fix"),
    (("--partitions", ",,,"), "partitions (none) are not in the window 2026-01-01..2026-01-03 of plan fix"),
    (("--partitions", "2026-01-03..2026-01-01"), "partitions 2026-01-03..2026-01-01: 2026-01-03 comes after"),
    (("--top", "-1"), "--top -1 is negative"),
])
def test_diff_outside_the_window_or_a_negative_top_is_one_line(world, run_cli, args, expected):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    result = run_cli("diff", "fix", *args)
    assert result.code == 2 and result.err.startswith(f"backfill: {expected}"), result
    assert result.err.count("\n") == 1 and result.out == ""


# --- the engine function, on each engine: NULL keys, duplicated rows, keys of several rows ------

DIFF_SPEC = TableSpec(name="store_sales", source="store_orders", select_sql="SELECT 1", partition_column="day",
                      source_partition_column="day", business_keys=("day", "region", "store"),
                      contract=(Column("day", "DATE"), Column("region", "VARCHAR"), Column("store", "BIGINT"),
                                Column("amount", "DECIMAL(18,2)")),
                      metrics=(Metric("amount", "sum(amount)", "sum(amount)"), Metric("lines", "count(*)", "count(*)")),
                      publish_as="store_sales_published")
DIFF_DAYS = ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"]
BEFORE_ROWS = [
    ("2026-01-01", "north", 1, "10.00"),  # the same after
    ("2026-01-01", None, 1, "5.00"),      # a NULL region, changed to 6.00
    ("2026-01-01", "south", 2, "7.00"),   # twice before, once after
    ("2026-01-01", "south", 2, "7.00"),
    ("2026-01-01", "east", None, "3.00"),  # a NULL store, removed
    ("2026-01-01", "north", 2, "1.00"),   # a key of two rows: only the second changes, to 2.50
    ("2026-01-01", "north", 2, "2.00"),
    ("2026-01-02", "north", 1, "8.00"),   # a partition that did not change
    ("2026-01-03", "north", 1, "1.00"),   # a partition emptied
    ("2026-01-03", "south", 1, "2.00"),
]
AFTER_ROWS = [
    ("2026-01-01", "north", 1, "10.00"), ("2026-01-01", None, 1, "6.00"), ("2026-01-01", "south", 2, "7.00"),
    ("2026-01-01", "north", 2, "1.00"), ("2026-01-01", "north", 2, "2.50"),
    ("2026-01-01", "west", 3, "4.00"),    # added
    ("2026-01-02", "north", 1, "8.00"),
    ("2026-01-04", "north", 1, "9.00"),   # a partition filled
]



@pytest.mark.parametrize("rows_at_once", [None, 1, 9])  # the default; each partition alone; day 1 alone
def test_compare_reports_rows_keys_and_totals_exactly_on_each_engine(engine, monkeypatch, rows_at_once):
    if rows_at_once is not None:
        monkeypatch.setattr(impact, "IMPACT_ROWS_AT_ONCE", rows_at_once)
    scheme = PartitionScheme("equality", lambda k: (dt.date.fromisoformat(k), None), tuple(DIFF_DAYS), "days")
    with engine.session() as session:
        for table, rows in (("store_sales_before", BEFORE_ROWS), ("store_sales", AFTER_ROWS)):
            session.execute(create_sql(DIFF_SPEC, table))
            for row in rows:
                session.execute(f"INSERT INTO {table} VALUES (CAST(? AS DATE), ?, ?, CAST(? AS DECIMAL(18,2)))",
                                list(row))
        found = {p.partition: p for p in compare(session, DIFF_SPEC, scheme, "store_sales_before", DIFF_DAYS, top=5)}

    day1 = found["2026-01-01"]
    assert (day1.rows_before, day1.rows_after, day1.added, day1.removed, day1.changed) == (7, 6, 1, 1, 3)
    assert day1.totals == {"amount": (35.0, 30.5, -4.5), "lines": (7.0, 6.0, -1.0)}
    # largest first: amount and lines moved 7 + 1, 4 + 1, 3 + 1, 1 + 0, 0.5 + 0
    assert [(c.status, c.keys["region"], c.keys["store"], c.metrics["amount"]) for c in day1.top] == [
        ("changed", "south", 2, (14.0, 7.0, -7.0)), ("added", "west", 3, (None, 4.0, 4.0)),
        ("removed", "east", None, (3.0, None, -3.0)), ("changed", None, 1, (5.0, 6.0, 1.0)),
        ("changed", "north", 2, (3.0, 3.5, 0.5))]
    assert found["2026-01-02"].unchanged and not found["2026-01-02"].totals
    day3, day4 = found["2026-01-03"], found["2026-01-04"]
    assert (day3.rows_before, day3.rows_after, day3.removed, day3.added, day3.changed) == (2, 0, 2, 0, 0)
    assert day3.totals == {"amount": (3.0, None, -3.0), "lines": (2.0, 0.0, -2.0)}  # no rows: count 0, sum NULL
    assert (day4.rows_before, day4.rows_after, day4.added, day4.removed) == (0, 1, 1, 0)
    assert day4.totals == {"amount": (None, 9.0, 9.0), "lines": (0.0, 1.0, 1.0)}


def test_changed_partitions_are_compared_in_batches_bounded_by_their_rows():
    rows = {"a": 3, "b": 4, "c": 9, "d": 1, "e": 1}
    assert list(_by_rows(list(rows), rows, 8)) == [["a", "b"], ["c"], ["d", "e"]]  # c alone: over the bound
    assert list(_by_rows(list(rows), rows, 100)) == [list(rows)]
    assert list(_by_rows([], {}, 8)) == []


def test_compare_hashes_rows_whose_columns_postgresql_cannot_hash(engine):
    # hash_record_extended has no hash for JSON, XML, POINT or MONEY: the diff hashes the row's text
    extra = {"doc": "JSON", "cash": "MONEY", "at": "POINT", "x": "XML"} if engine.name == "postgresql" \
        else {"doc": "JSON"}
    spec = dataclasses.replace(DIFF_SPEC, contract=(*DIFF_SPEC.contract, *(Column(c, t) for c, t in extra.items())))
    values = {"doc": "'{\"a\": 1}'", "cash": "1.50", "at": "'(1,2)'", "x": "'<a/>'"}
    scheme = PartitionScheme("equality", lambda k: (dt.date.fromisoformat(k), None), tuple(DIFF_DAYS), "days")
    with engine.session() as session:
        for table in ("store_sales_before", "store_sales"):
            session.execute(create_sql(spec, table))
            for store, amount in ((1, "10.00"), (2, "20.00")):
                cells = ", ".join(f"CAST({values[c]} AS {t})" for c, t in extra.items())
                session.execute(f"INSERT INTO {table} VALUES (DATE '2026-01-01', 'north', {store}, {amount}, {cells})")
        session.execute("UPDATE store_sales SET amount = 25 WHERE store = 2")
        [day] = compare(session, spec, scheme, "store_sales_before", DIFF_DAYS[:1], top=1)
    assert (day.changed, day.added, day.removed) == (1, 0, 0) and day.totals["amount"] == (30.0, 35.0, 5.0)


def test_a_consumer_impact_computed_before_the_lock_is_known_stale_once_either_table_moves(engine):
    scheme = PartitionScheme("equality", lambda k: (dt.date.fromisoformat(k), None), tuple(DIFF_DAYS), "days")
    with engine.session() as session:
        for table, rows in ((DIFF_SPEC.publish_table, BEFORE_ROWS), (DIFF_SPEC.table, AFTER_ROWS)):
            session.execute(create_sql(DIFF_SPEC, table))
            for row in rows:
                session.execute(f"INSERT INTO {table} VALUES (CAST(? AS DATE), ?, ?, CAST(? AS DECIMAL(18,2)))",
                                list(row))
        impact = consumer_impact(session, DIFF_SPEC, scheme, DIFF_DAYS)
        assert impact.totals["changed"] == 3 and consumer_impact_holds(session, DIFF_SPEC, scheme, impact)
        session.execute("UPDATE store_sales SET amount = amount + 1 WHERE day = DATE '2026-01-02'")
        assert not consumer_impact_holds(session, DIFF_SPEC, scheme, impact)
        again = consumer_impact(session, DIFF_SPEC, scheme, DIFF_DAYS)
        assert again.totals["partitions_changed"] == impact.totals["partitions_changed"] + 1
        session.execute("DELETE FROM store_sales_published WHERE day = DATE '2026-01-01' AND store = 1")
        assert not consumer_impact_holds(session, DIFF_SPEC, scheme, again)


def test_a_metric_named_like_an_impact_count_is_refused_in_one_line():
    with pytest.raises(IdentifierError, match="metric name 'changed' is reserved"):
        Metric("changed", "count(*)", "count(*)")


def test_diff_refuses_a_snapshot_edited_to_hide_what_the_plan_changed(world, capsys):
    """`backfill diff`, what reviewers read before anyone sees the data, compares the target with
    the snapshot's rows as the table holds them. The insider copied the replayed rows over the
    snapshot's: diff said the plan changed nothing (the sealed fingerprint of each snapshot, which
    a rollback and `changes_as_expected` compare first, was never asked)."""
    assert world.materialize(WINDOW, spec=BUGGY).success  # the buggy release's daily runs
    path = world.approved_plan("fix", start=WINDOW[0], end=WINDOW[-1], proof=(WINDOW[0],), per_run=3)
    assert world.cli("run", str(path), "--proof") == 0
    assert world.cli("run", str(path)) == 0
    capsys.readouterr()
    assert world.cli("diff", "fix") == 0
    assert "changed" in capsys.readouterr().out
    day = WINDOW[1]
    world.run_sql(f"DELETE FROM {snapshot('fix')} WHERE order_date = ?", [day])
    world.run_sql(f"INSERT INTO {snapshot('fix')} SELECT * FROM daily_revenue WHERE order_date = ?", [day])
    capsys.readouterr()
    code = world.cli("diff", "fix")
    captured = capsys.readouterr()
    assert code != 0, captured.out
    assert f"snapshot of daily_revenue {day}" in captured.err, captured.err

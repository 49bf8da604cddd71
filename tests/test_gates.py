"""The reconciliation gates on a real DuckDB warehouse: break one thing, exactly the right gate fails
with the right figures; untouched partitions pass.

Partitions are written through the product (a plan-free incremental Dagster run, or a plan's runs),
broken by hand with SQL, then judged again by `execution.audit.judge` (or `backfill reconcile`).
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from decimal import Decimal

import dagster as dg
import duckdb
import pytest

from backfill_assets.control import ledger
from backfill_assets.execution.audit import default_thresholds, judge
from backfill_assets.gates.results import (
    CONTRACT_HOLDS,
    GATE_NAMES,
    METRICS_MATCH_SOURCE,
    NO_DUPLICATE_BUSINESS_KEYS,
    ROW_COUNT_MATCHES_SOURCE,
    SINGLE_CODE_VERSION,
    SOURCE_HAS_NO_DUPLICATES,
    UNCHANGED_SINCE_CHECKED,
    GateResult,
)
from backfill_assets.warehouse.fingerprints import EMPTY, Fingerprint
from backfill_assets.warehouse.gate_sql import slice_figures
from tests.plans import complete_plan, edited, write_plan
from tests.world import FIXED, World, failure_text, keys, make_world

WRITTEN = keys(1, 5)  # what the incremental run wrote in every `written` world
DAY = "2026-01-03"    # the partition most tests break
METRICS = ("orders", "gross", "refunds", "net_revenue", "customers")
REFUNDS = "coalesce(sum(amount) FILTER (WHERE status = 'refunded'), 0)"
NET = f"sum(amount) - {REFUNDS}"
ENV = ("BACKFILL_HOME", "BACKFILL_WAREHOUSE_URL", "BACKFILL_ALLOWED_SIGNERS", "BACKFILL_DEFS",
       "BACKFILL_CRASH_AT", "BACKFILL_EVIDENCE_KEY_FILE", "DAGSTER_HOME", "BACKFILL_MAX_WINDOW_PARTITIONS")


@pytest.fixture(scope="module")
def template(tmp_path_factory, ssh_keys):
    """2026-01-01..05 written by one plan-free incremental Dagster run, once per module."""
    root = tmp_path_factory.mktemp("written")
    with pytest.MonkeyPatch.context() as mp, dg.instance_for_test() as instance:
        for name in ENV:
            mp.delenv(name, raising=False)
        world = make_world(root, instance, ssh_keys)
        result = world.materialize(WRITTEN)
        assert result.success, failure_text(result)
    return world.home


@pytest.fixture
def written(world, template) -> World:
    """The test's own world, holding the template's warehouse (byte for byte what the run wrote)."""
    shutil.copytree(template, world.home, dirs_exist_ok=True)
    return world


# --- helpers ---------------------------------------------------------------------------------------

def write_prints(world: World, ks: list[str]) -> dict[str, tuple[None, Fingerprint | None]]:
    """{key: (None, the fingerprint its latest write recorded)}, as judge takes them."""
    with world.warehouse().session() as session:
        latest = ledger.latest(session, FIXED.name, ks)
    return {k: (None, e.fingerprint if e else None) for k, e in latest.items()}


def judged(world: World, ks: list[str] = WRITTEN, spec=FIXED,
           prints: dict | None = None) -> dict[str, list[GateResult]]:
    written = prints if prints is not None else write_prints(world, ks)
    with world.warehouse().session() as session:
        return judge(session, spec, world.scheme, None, written, "test", record_results=False)


def failed(results: dict[str, list[GateResult]]) -> set[tuple[str, str]]:
    return {(k, r.gate) for k, rs in results.items() for r in rs if not r.passed}


def gate(results: dict[str, list[GateResult]], key: str, name: str) -> GateResult:
    return results[key][GATE_NAMES.index(name)]


def value(world: World, column: str, region: str, day: str = DAY) -> Decimal:
    found = world.sql(f"SELECT {column} FROM daily_revenue WHERE order_date = ? AND region = ?",
                      [day, region])
    assert len(found) == 1
    return found[0][0]


def source(world: World, expression: str, region: str | None = None, day: str = DAY) -> Decimal:
    where = "order_date = ?" + (" AND region = ?" if region else "")
    params = [day, *([region] if region else [])]
    return world.sql(f"SELECT {expression} FROM orders WHERE {where}", params)[0][0]


def totals(world: World, day: str = DAY) -> tuple:
    target = world.sql("SELECT sum(orders), sum(gross), sum(refunds), sum(net_revenue), sum(customers) "
                       "FROM daily_revenue WHERE order_date = ?", [day])[0]
    truth = world.sql(f"SELECT count(*), sum(amount), {REFUNDS}, {NET}, "
                      "count(DISTINCT (region, customer_id)) FROM orders WHERE order_date = ?", [day])[0]
    return target, truth


def plan_file(world: World, name: str, metrics: list[dict], **kwargs):
    document = edited(complete_plan(plan_id=name, **kwargs), gates__metrics=metrics)
    return world.approve(write_plan(world.root / "plans" / f"{name}.yaml", document))


# --- clean data, one statement per slice ----------------------------------------------------------

def test_clean_partitions_pass_every_gate_with_per_metric_figures(written):
    results = judged(written)

    assert list(results) == WRITTEN
    assert all([r.gate for r in rs] == list(GATE_NAMES) for rs in results.values())
    assert failed(results) == set()
    rows = gate(results, DAY, ROW_COUNT_MATCHES_SOURCE)
    assert (rows.expected, rows.actual, rows.difference) == (5, 5, 0)
    assert rows.detail == "target 5 rows vs 5 key groups in the source (0.00% <= 0%)"
    metrics = gate(results, DAY, METRICS_MATCH_SOURCE)
    target, truth = totals(written)
    assert metrics.expected == {"orders": truth[0], "gross": float(truth[1]), "refunds": float(truth[2]),
                                "net_revenue": float(truth[3]), "customers": truth[4]}
    assert metrics.actual["net_revenue"] == float(target[3])
    assert metrics.detail.startswith("5 metric(s) match the source in all 5 key group(s): orders exact")
    assert gate(results, DAY, UNCHANGED_SINCE_CHECKED).detail.endswith("equals the write's")
    sourced = gate(results, DAY, SOURCE_HAS_NO_DUPLICATES)
    assert sourced.detail == "no duplicated order_id among 300 source rows"


def test_a_slice_of_five_partitions_is_one_statement_with_figures_for_each(written):
    written.run_sql("DELETE FROM orders WHERE order_date = '2026-01-06'")  # empty on both sides
    slice_keys = keys(2, 6)
    thresholds = default_thresholds(FIXED)
    null_columns = [c.name for c in FIXED.contract if not c.nullable]
    with written.warehouse().session() as session:
        statements: list[str] = []
        run = session.rows

        def counted(sql, params=()):
            statements.append(sql)
            return run(sql, params)

        session.rows = counted  # an observer: the statement still runs on the real warehouse
        figures = slice_figures(session, FIXED, written.scheme, slice_keys, thresholds, null_columns)
    # one pass over the data; the catalog read of the columns' types (a fingerprint's text) aside
    assert len([s for s in statements if "duckdb_columns()" not in s]) == 1
    assert list(figures) == slice_keys
    fingerprints = written.fingerprints("daily_revenue", keys(2, 5))
    assert {k: figures[k].fingerprint for k in keys(2, 5)} == fingerprints
    for key in keys(2, 5):
        f = figures[key]
        assert (f.rows, f.target_groups, f.source_groups, f.source_rows) == (5, 5, 5, 300)
        assert f.differing == dict.fromkeys(thresholds.metric_tolerances, 0)
        net = source(written, NET, day=key)
        assert f.target_totals["net_revenue"] == f.source_totals["net_revenue"] == net
    empty = figures["2026-01-06"]
    assert (empty.rows, empty.target_groups, empty.source_groups, empty.source_rows) == (0, 0, 0, 0)
    assert (empty.duplicate_rows, empty.missing_groups, empty.extra_groups,
            empty.source_duplicates) == (0, 0, 0, 0)
    assert empty.fingerprint == EMPTY and empty.nulls == dict.fromkeys(null_columns, 0)

    # judged, the empty partition (NULL against NULL) passes like the written ones
    prints = {**write_prints(written, keys(2, 5)), "2026-01-06": (None, EMPTY)}
    results = judged(written, slice_keys, prints=prints)
    assert failed(results) == set()
    for per_key in results.values():
        for result in per_key:
            assert all(isinstance(v, float) and math.isfinite(v) for v in result.numbers.values()), result
            assert json.loads(json.dumps(result.to_json())) == result.to_json()
    numbers = gate(results, DAY, METRICS_MATCH_SOURCE).numbers
    for name in METRICS:
        assert numbers[f"{name}.expected"] == numbers[f"{name}.actual"]
        assert numbers[f"{name}.difference"] == 0.0 and numbers[f"{name}.groups_differing"] == 0.0
    assert numbers["net_revenue.expected"] == float(source(written, NET))
    assert gate(results, DAY, ROW_COUNT_MATCHES_SOURCE).numbers == {
        "expected": 5.0, "actual": 5.0, "difference": 0.0, "threshold_pct": 0.0, "difference_pct": 0.0}
    assert gate(results, "2026-01-06", ROW_COUNT_MATCHES_SOURCE).numbers["expected"] == 0.0


# --- per-key parity (issue 11) --------------------------------------------------------------------

def test_swapped_figures_of_two_regions_fail_metrics_naming_both_keys_though_totals_agree(written):
    north, south = value(written, "net_revenue", "north"), value(written, "net_revenue", "south")
    assert north != south
    written.run_sql("UPDATE daily_revenue SET net_revenue = CASE region WHEN 'north' THEN ? ELSE ? END "
                    "WHERE order_date = ? AND region IN ('north', 'south')", [south, north, DAY])
    target, truth = totals(written)
    assert target == truth  # a totals-only check would have passed

    results = judged(written)

    assert failed(results) == {(DAY, METRICS_MATCH_SOURCE), (DAY, UNCHANGED_SINCE_CHECKED)}
    metrics = gate(results, DAY, METRICS_MATCH_SOURCE)
    assert metrics.expected["net_revenue"] == metrics.actual["net_revenue"] == float(truth[3])
    assert metrics.difference["net_revenue"] == 0.0
    assert metrics.numbers["net_revenue.groups_differing"] == 2.0
    assert metrics.numbers["gross.groups_differing"] == 0.0
    assert metrics.detail.startswith("net_revenue differs in 2 group(s) (exact); worst: ")
    # target against source, per key
    assert f"(region=north): net_revenue {south} vs {north}" in metrics.detail
    assert f"(region=south): net_revenue {north} vs {south}" in metrics.detail
    assert gate(results, DAY, ROW_COUNT_MATCHES_SOURCE).passed


def test_a_row_moved_to_another_key_fails_metrics_as_a_missing_and_an_extra_group(written):
    written.run_sql("UPDATE daily_revenue SET region = 'northern' WHERE order_date = ? AND region = 'north'",
                    [DAY])
    target, truth = totals(written)
    assert target == truth

    results = judged(written)

    # the row count holds (five rows, five source groups), the totals hold: only the per-key join sees it
    assert failed(results) == {(DAY, METRICS_MATCH_SOURCE), (DAY, UNCHANGED_SINCE_CHECKED)}
    metrics = gate(results, DAY, METRICS_MATCH_SOURCE)
    assert (metrics.numbers["groups.missing"], metrics.numbers["groups.extra"]) == (1.0, 1.0)
    assert metrics.difference == dict.fromkeys(METRICS, 0.0)
    assert "1 source group(s) missing in the target; 1 target group(s) not in the source" in metrics.detail
    assert "(region=north) missing in the target" in metrics.detail
    assert "(region=northern) not in the source" in metrics.detail


def test_a_missing_and_an_extra_group_each_fail_naming_the_key(written):
    missing, extra = "2026-01-02", "2026-01-04"
    written.run_sql("DELETE FROM daily_revenue WHERE order_date = ? AND region = 'west'", [missing])
    written.run_sql("INSERT INTO daily_revenue VALUES (?, 'atlantis', 0, 0, 0, 0, 0)", [extra])
    target, truth = totals(written, extra)
    assert target == truth  # the extra group adds nothing to any total

    results = judged(written)

    broken = (ROW_COUNT_MATCHES_SOURCE, METRICS_MATCH_SOURCE, UNCHANGED_SINCE_CHECKED)
    assert failed(results) == {(k, g) for k in (missing, extra) for g in broken}
    gone = gate(results, missing, METRICS_MATCH_SOURCE)
    assert (gone.numbers["groups.missing"], gone.numbers["groups.extra"]) == (1.0, 0.0)
    assert "1 source group(s) missing in the target" in gone.detail
    assert "(region=west) missing in the target" in gone.detail
    west = source(written, NET, "west", missing)
    assert gone.difference["net_revenue"] == pytest.approx(-float(west))
    added = gate(results, extra, METRICS_MATCH_SOURCE)
    assert (added.numbers["groups.missing"], added.numbers["groups.extra"]) == (0.0, 1.0)
    assert "1 target group(s) not in the source" in added.detail
    assert "(region=atlantis) not in the source" in added.detail
    assert added.difference["net_revenue"] == 0.0
    short = gate(results, missing, ROW_COUNT_MATCHES_SOURCE)
    assert (short.expected, short.actual, short.difference) == (5, 4, 1)
    assert short.detail == "target 4 rows vs 5 key groups in the source (20.00% > 0%)"
    more = gate(results, extra, ROW_COUNT_MATCHES_SOURCE)
    assert (more.expected, more.actual, more.difference) == (5, 6, 1)
    assert more.detail == "target 6 rows vs 5 key groups in the source (20.00% > 0%)"
    assert more.numbers["difference_pct"] == 20.0


# --- tolerances -----------------------------------------------------------------------------------

def reconciled(world: World, capsys, plan_id: str) -> tuple[int, dict[str, dict[str, dict]]]:
    """`backfill reconcile PLAN --json`: the exit code and {partition: {gate: result}}."""
    capsys.readouterr()
    code = world.cli("reconcile", plan_id, "--json")
    report = json.loads(capsys.readouterr().out)
    return code, {p["partition"]: p["gates"] for p in report["partitions"]}


def test_plan_tolerances_are_absolute_amounts_and_percent_of_the_source_figure(written, capsys):
    path = plan_file(written, "tol", [{"name": "net_revenue", "tolerance_abs": 0.05},
                                      {"name": "gross", "tolerance_pct": 0.01}, {"name": "refunds"}],
                     start="2026-01-01", end="2026-01-04", proof=tuple(keys(1, 3)), per_run=4)
    assert written.cli("run", str(path), "--proof") == 0  # a proof is smaller than its window
    assert written.cli("run", str(path)) == 0
    within, beyond, exact = "2026-01-02", "2026-01-03", "2026-01-04"
    gross = {d: source(written, "sum(amount)", "north", d) for d in (within, exact)}
    half_bp = (gross[within] * Decimal("0.00005")).quantize(Decimal("0.01"))  # 0.005% of the figure
    two_bp = (gross[exact] * Decimal("0.0002")).quantize(Decimal("0.01"))     # 0.02%
    assert half_bp / gross[within] * 100 < Decimal("0.01") < two_bp / gross[exact] * 100
    assert half_bp > Decimal("0.05")  # so it passes by the percentage, not by an amount
    for day, column, region, delta in ((within, "net_revenue", "north", Decimal("0.04")),
                                       (within, "gross", "north", half_bp),
                                       (beyond, "net_revenue", "north", Decimal("0.06")),
                                       (exact, "gross", "north", two_bp),
                                       (exact, "refunds", "south", Decimal("0.01"))):
        written.run_sql(f"UPDATE daily_revenue SET {column} = {column} + ? "
                        "WHERE order_date = ? AND region = ?", [delta, day, region])

    code, gates = reconciled(written, capsys, "tol")

    assert code == 1  # every edited partition fails unchanged_since_checked, whatever the tolerances
    failing = {(k, g) for k, per_key in gates.items() for g, r in per_key.items() if not r["passed"]}
    assert failing == {(within, UNCHANGED_SINCE_CHECKED), (beyond, UNCHANGED_SINCE_CHECKED),
                       (exact, UNCHANGED_SINCE_CHECKED), (beyond, METRICS_MATCH_SOURCE),
                       (exact, METRICS_MATCH_SOURCE)}
    passing = gates[within][METRICS_MATCH_SOURCE]
    assert passing["detail"] == ("3 metric(s) match the source in all 5 key group(s): "
                                 "net_revenue within 0.05, gross within 0.01%, refunds exact")
    assert passing["numbers"]["net_revenue.difference"] == pytest.approx(0.04)
    assert passing["numbers"]["gross.difference"] == pytest.approx(float(half_bp))
    assert passing["threshold"] == {"net_revenue": {"pct": 0.0, "abs": 0.05},
                                    "gross": {"pct": 0.01, "abs": 0.0}, "refunds": {"pct": 0.0, "abs": 0.0}}
    net = source(written, NET, "north", beyond)
    over = gates[beyond][METRICS_MATCH_SOURCE]
    assert over["detail"] == (f"net_revenue differs in 1 group(s) (within 0.05); worst: (region=north): "
                              f"net_revenue {net + Decimal('0.06')} vs {net}")
    assert over["numbers"]["net_revenue.groups_differing"] == 1.0
    strict = gates[exact][METRICS_MATCH_SOURCE]
    assert strict["detail"].startswith("gross differs in 1 group(s) (within 0.01%); "
                                       "refunds differs in 1 group(s) (exact); worst: ")
    refunds = source(written, REFUNDS, "south", exact)
    assert f"(region=south): refunds {refunds + Decimal('0.01')} vs {refunds}" in strict["detail"]
    assert f"(region=north): gross {gross[exact] + two_bp} vs {gross[exact]}" in strict["detail"]
    assert (strict["numbers"]["gross.groups_differing"], strict["numbers"]["refunds.groups_differing"],
            strict["numbers"]["net_revenue.groups_differing"]) == (1.0, 1.0, 0.0)
    assert all(r["passed"] for r in gates["2026-01-01"].values())


def test_exact_money_fails_on_a_cent_and_null_fails_against_a_figure(written):
    cent, nulled, unsourced = "2026-01-02", "2026-01-03", "2026-01-04"
    written.run_sql("UPDATE daily_revenue SET gross = gross + 0.01 WHERE order_date = ? AND region = 'east'",
                    [cent])
    written.run_sql("UPDATE daily_revenue SET net_revenue = NULL WHERE order_date = ? AND region = 'north'",
                    [nulled])
    written.run_sql("UPDATE orders SET amount = NULL WHERE order_date = ? AND region = 'west'", [unsourced])

    results = judged(written)

    assert failed(results) == {(cent, METRICS_MATCH_SOURCE), (cent, UNCHANGED_SINCE_CHECKED),
                               (nulled, METRICS_MATCH_SOURCE), (nulled, CONTRACT_HOLDS),
                               (nulled, UNCHANGED_SINCE_CHECKED), (unsourced, METRICS_MATCH_SOURCE)}
    gross = source(written, "sum(amount)", "east", cent)
    assert gate(results, cent, METRICS_MATCH_SOURCE).detail == (
        f"gross differs in 1 group(s) (exact); worst: (region=east): gross {gross + Decimal('0.01')} "
        f"vs {gross}")
    north = source(written, NET, "north", nulled)
    detail = gate(results, nulled, METRICS_MATCH_SOURCE).detail
    assert detail == ("net_revenue differs in 1 group(s) (exact); worst: (region=north): "
                      f"net_revenue NULL vs {north}")
    west = value(written, "gross", "west", unsourced)
    detail = gate(results, unsourced, METRICS_MATCH_SOURCE).detail
    assert detail.startswith("gross differs in 1 group(s) (exact); ")
    assert f"gross {west} vs NULL" in detail
    # NULL against NULL: a partition empty on both sides passes, its figures all absent
    empty = judged(written, ["2026-01-09"], prints={"2026-01-09": (None, EMPTY)})
    assert failed(empty) == set()
    assert gate(empty, "2026-01-09", METRICS_MATCH_SOURCE).expected == dict.fromkeys(METRICS)


# --- each gate on its own breakage ----------------------------------------------------------------

def test_duplicated_rows_fail_duplicates_with_the_exact_count(written):
    copy = "INSERT INTO daily_revenue SELECT * FROM daily_revenue WHERE order_date = ? AND region IN "
    written.run_sql(copy + "('north', 'south')", [DAY])
    written.run_sql(copy + "('north') LIMIT 1", [DAY])  # north three times, south twice

    results = judged(written)

    assert failed(results) == {(DAY, g) for g in (NO_DUPLICATE_BUSINESS_KEYS, ROW_COUNT_MATCHES_SOURCE,
                                                  METRICS_MATCH_SOURCE, UNCHANGED_SINCE_CHECKED)}
    dup = gate(results, DAY, NO_DUPLICATE_BUSINESS_KEYS)
    assert (dup.expected, dup.actual, dup.threshold, dup.difference) == (0, 3, 0, 3)
    assert dup.detail == "3 duplicate row(s) on (order_date, region) (> 0 allowed)"
    assert dup.numbers == {"actual": 3.0, "threshold": 0.0}
    rows = gate(results, DAY, ROW_COUNT_MATCHES_SOURCE)
    assert (rows.expected, rows.actual) == (5, 8)
    north = source(written, "count(*)", "north")
    assert gate(results, DAY, METRICS_MATCH_SOURCE).actual["orders"] == 300 + 2 * north + source(
        written, "count(*)", "south")


def test_a_null_business_key_fails_the_contract_naming_the_column(written):
    written.run_sql("UPDATE daily_revenue SET region = NULL WHERE order_date = ? AND region = 'south'", [DAY])

    results = judged(written)

    assert (DAY, CONTRACT_HOLDS) in failed(results)
    assert failed(results) == {(DAY, CONTRACT_HOLDS), (DAY, METRICS_MATCH_SOURCE),
                               (DAY, UNCHANGED_SINCE_CHECKED)}
    contract = gate(results, DAY, CONTRACT_HOLDS)
    assert contract.detail == "region: 1 NULL(s) in a non-nullable column"
    assert contract.actual["nulls"] == {c.name: (1 if c.name == "region" else 0)
                                        for c in FIXED.contract if not c.nullable}
    assert contract.difference == 1
    metrics = gate(results, DAY, METRICS_MATCH_SOURCE)
    assert "(region=NULL) not in the source" in metrics.detail
    assert "(region=south) missing in the target" in metrics.detail


def test_a_column_type_changed_by_alter_table_fails_the_contract_on_every_partition(written):
    written.run_sql("ALTER TABLE daily_revenue ALTER COLUMN orders TYPE INTEGER")

    results = judged(written)

    assert failed(results) == {(k, CONTRACT_HOLDS) for k in WRITTEN}
    contract = gate(results, DAY, CONTRACT_HOLDS)
    assert contract.detail == "orders: type INTEGER, contract says BIGINT"
    assert contract.actual["mismatched"] == {"orders": "INTEGER"}
    assert contract.expected["columns"]["orders"] == "BIGINT"


def test_a_missing_column_fails_the_contract_naming_it(written):
    written.run_sql("ALTER TABLE daily_revenue DROP COLUMN customers")

    results = judged(written)

    assert {(k, CONTRACT_HOLDS) for k in WRITTEN} <= failed(results)
    contract = gate(results, DAY, CONTRACT_HOLDS)
    assert contract.detail == "missing column customers"
    assert contract.actual["missing"] == ["customers"]


def test_a_double_loaded_source_passes_parity_but_fails_source_duplicates_with_the_count(written):
    day = "2026-01-06"
    written.run_sql("INSERT INTO orders SELECT * FROM orders WHERE order_date = ? "
                    "ORDER BY order_id LIMIT 100", [day])

    # the daily incremental run derives the partition from the doubled source
    run = written.materialize(day)
    assert not run.success  # the blocking check failed the step; the rows are written

    assert written.rows("daily_revenue", day) == 5
    assert written.sql("SELECT sum(orders) FROM daily_revenue WHERE order_date = ?", [day])[0][0] == 400
    results = judged(written, [day])
    assert failed(results) == {(day, SOURCE_HAS_NO_DUPLICATES)}
    dup = gate(results, day, SOURCE_HAS_NO_DUPLICATES)
    assert (dup.actual, dup.threshold, dup.difference) == (100, 0, 100)
    assert dup.detail == ("100 duplicated order_id value(s) in the source (> 0 allowed): "
                          "a double-loaded source inflates the target")
    assert dup.numbers == {"actual": 100.0, "source_rows": 400.0}
    # what the run itself recorded, and what Dagster shows as plottable metadata
    with written.warehouse().session() as session:
        recorded = ledger.latest(session, FIXED.name, [day])[day]
    assert recorded.failed == [SOURCE_HAS_NO_DUPLICATES]
    evaluations = {e.check_name: e for e in run.get_asset_check_evaluations()}
    evaluation = evaluations[SOURCE_HAS_NO_DUPLICATES]
    assert not evaluation.passed
    assert evaluation.metadata["figure.actual"].value == 100.0


def test_a_row_updated_after_its_write_fails_unchanged_naming_both_fingerprints(written):
    prints = write_prints(written, WRITTEN)
    written.run_sql("UPDATE daily_revenue SET customers = customers WHERE order_date = ? AND region = 'east'",
                    [DAY])
    assert failed(judged(written, prints=prints)) == set()  # rewriting the same values changes nothing
    written.run_sql("UPDATE daily_revenue SET refunds = refunds + 1, net_revenue = net_revenue - 1 "
                    "WHERE order_date = ? AND region = 'east'", [DAY])
    now = written.fingerprints("daily_revenue", [DAY])[DAY]

    results = judged(written, prints=prints)

    assert failed(results) == {(DAY, UNCHANGED_SINCE_CHECKED), (DAY, METRICS_MATCH_SOURCE)}
    same = gate(results, DAY, UNCHANGED_SINCE_CHECKED)
    before = prints[DAY][1]
    assert before != now and before.rows == now.rows == 5
    assert same.detail == (f"the data now ({now}) is not what its write produced ({before}): "
                           "it was changed after the write")
    assert (same.expected, same.actual) == (before.digest, now.digest)
    # judged against the fingerprint it has now, only the figures the edit broke still fail
    rejudged = judged(written, prints={**prints, DAY: (None, now)})
    assert failed(rejudged) == {(DAY, METRICS_MATCH_SOURCE)}


def test_a_window_of_mixed_code_versions_fails_the_odd_partition(written, capsys):
    path = written.approved_plan("ver", start="2026-01-01", end="2026-01-04", proof=tuple(keys(1, 3)),
                                 per_run=3)
    assert written.cli("run", str(path), "--proof") == 0
    newer = replace(FIXED, code_version="3")
    written.approve_for(path, newer)  # a new release, signed for: the plan may now run either code
    odd = written.plan_run("ver", ["2026-01-04"], spec=newer)
    assert not odd.success  # its own gates saw the mix at once

    code, gates = reconciled(written, capsys, "ver")

    assert code == 1
    failing = {(k, g) for k, per_key in gates.items() for g, r in per_key.items() if not r["passed"]}
    assert failing == {("2026-01-04", SINGLE_CODE_VERSION)}
    version = gates["2026-01-04"][SINGLE_CODE_VERSION]
    assert (version["expected"], version["actual"], version["difference"]) == ("2", "3", {"2": 3, "3": 1})
    assert version["detail"] == ("written by code version 3, the window's is 2: "
                                 "2 (3 partition(s)), 3 (1 partition(s))")
    assert gates["2026-01-02"][SINGLE_CODE_VERSION]["detail"] == (
        "code version 2, the window's majority; others: 2 (3 partition(s)), 3 (1 partition(s))")


# --- the CLI's summary --------------------------------------------------------------------------

def test_a_failing_recomputation_is_one_line_naming_the_sql_error(world, cli):
    path = world.approved_plan("typed", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    world.run_sql("ALTER TABLE orders ALTER COLUMN amount TYPE VARCHAR")
    con = duckdb.connect(str(world.warehouse_path))
    try:
        with pytest.raises(duckdb.Error) as raised:
            con.execute(FIXED.select_sql.replace("$partition_start", "DATE '2026-01-01'")
                        .replace("$partition_end", "DATE '2026-01-02'")).fetchall()
    finally:
        con.close()
    first_line = str(raised.value).splitlines()[0]

    result = cli("run", str(path), "--proof")

    output = result.out + result.err
    assert result.code == 1, output
    assert first_line in output
    assert "Traceback" not in output and "Stack Trace" not in output
    assert world.rows("daily_revenue", "2026-01-01") == 0

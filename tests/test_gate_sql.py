"""The reconciliation gates on a real DuckDB file: break one thing, exactly the right gate fails."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from backfill_assets.errors import IdentifierError, UsageError, WarehouseError, WindowError
from backfill_assets.gates import (
    CONTRACT_HOLDS,
    GATE_NAMES,
    METRICS_MATCH_SOURCE,
    NO_DUPLICATE_BUSINESS_KEYS,
    ROW_COUNT_MATCHES_SOURCE,
    SINGLE_CODE_VERSION,
    GateResult,
    Thresholds,
    all_passed,
    pct_diff,
)
from backfill_assets.plan.model import Plan
from backfill_assets.sample import generate_orders
from backfill_assets.table import Column
from backfill_assets.warehouse import gate_sql
from backfill_assets.warehouse.connection import transaction
from backfill_assets.warehouse.gate_sql import STRATEGIES, evaluate_slice
from examples.revenue import DAILY_REVENUE
from tests.plans import complete_plan

START = dt.date(2026, 1, 1)
DAYS = [START + dt.timedelta(days=i) for i in range(4)]
KEYS = [d.isoformat() for d in DAYS]
BROKEN = KEYS[2]  # the one partition each test breaks
ROWS_PER_DAY = 500

# exact money: every DECIMAL sum matches to the cent on clean data
STRICT = Thresholds(0, 0, {"orders": 0, "gross": 0, "refunds": 0, "net_revenue": 0})


def fill(con: duckdb.DuckDBPyConnection, spec=DAILY_REVENUE) -> None:
    for day in DAYS:
        con.execute(f"INSERT INTO {spec.table} SELECT * FROM ({spec.select_sql})", {"partition": day})


@pytest.fixture
def con(tmp_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect(str(tmp_path / "warehouse.duckdb"))
    generate_orders(connection, start=START, days=len(DAYS), rows_per_day=ROWS_PER_DAY)
    connection.execute(DAILY_REVENUE.create_sql())
    fill(connection)
    yield connection
    connection.close()


@pytest.fixture(params=STRATEGIES)
def strategy(request: pytest.FixtureRequest) -> str:
    return request.param


def failed(results: dict[str, list[GateResult]]) -> set[tuple[str, str]]:
    return {(key, r.gate) for key, per_key in results.items() for r in per_key if not r.passed}


def gate(results: dict[str, list[GateResult]], key: str, name: str) -> GateResult:
    return results[key][GATE_NAMES.index(name)]


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> object:
    row = con.execute(sql, params or []).fetchone()
    assert row is not None
    return row[0]


# --- one break, one failing gate ------------------------------------------------------------------

def test_clean_data_passes_every_gate(con, strategy):
    results = evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT, strategy=strategy)

    assert list(results) == KEYS
    assert all([r.gate for r in per_key] == list(GATE_NAMES) for per_key in results.values())
    assert failed(results) == set()
    rows = gate(results, BROKEN, ROW_COUNT_MATCHES_SOURCE)
    assert (rows.expected, rows.actual, rows.difference) == (5, 5, 0.0)
    metrics = gate(results, BROKEN, METRICS_MATCH_SOURCE)
    assert metrics.actual["orders"] == metrics.expected["orders"] == ROWS_PER_DAY
    assert metrics.difference == {"orders": 0.0, "gross": 0.0, "refunds": 0.0, "net_revenue": 0.0}
    assert gate(results, BROKEN, SINGLE_CODE_VERSION).detail == "not tracked"


def test_duplicate_row_fails_duplicates_and_the_figures_it_inflates(con, strategy):
    con.execute("INSERT INTO daily_revenue SELECT * FROM daily_revenue "
                "WHERE order_date = ? AND region = 'north'", [DAYS[2]])

    results = evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT, strategy=strategy)

    # a copied row is one duplicate key, but it is also a sixth row where the source has five
    # regions, and it counts north's orders and money twice: three gates see it, each its own way
    assert failed(results) == {(BROKEN, NO_DUPLICATE_BUSINESS_KEYS), (BROKEN, ROW_COUNT_MATCHES_SOURCE),
                               (BROKEN, METRICS_MATCH_SOURCE)}
    dup = gate(results, BROKEN, NO_DUPLICATE_BUSINESS_KEYS)
    assert (dup.expected, dup.actual, dup.threshold) == (0, 1, 0)
    assert dup.detail == "1 duplicate row(s) on (order_date, region) (> 0 allowed)"
    rows = gate(results, BROKEN, ROW_COUNT_MATCHES_SOURCE)
    assert (rows.expected, rows.actual, rows.difference) == (5, 6, 20.0)
    north = scalar(con, "SELECT count(*) FROM orders WHERE order_date = ? AND region = 'north'", [DAYS[2]])
    metrics = gate(results, BROKEN, METRICS_MATCH_SOURCE)
    assert metrics.actual["orders"] == ROWS_PER_DAY + north
    assert gate(results, BROKEN, CONTRACT_HOLDS).passed


def test_zero_valued_duplicate_fails_only_duplicates_and_row_count(con):
    con.execute("INSERT INTO daily_revenue VALUES (?, 'north', 0, 0, 0, 0, 0)", [DAYS[2]])

    results = evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT)

    # adds nothing to any sum, so the metrics hold; the key and the row count do not
    assert failed(results) == {(BROKEN, NO_DUPLICATE_BUSINESS_KEYS), (BROKEN, ROW_COUNT_MATCHES_SOURCE)}


def test_dropped_row_fails_row_count_and_metrics(con, strategy):
    con.execute("DELETE FROM daily_revenue WHERE order_date = ? AND region = 'east'", [DAYS[2]])

    results = evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT, strategy=strategy)

    assert failed(results) == {(BROKEN, ROW_COUNT_MATCHES_SOURCE), (BROKEN, METRICS_MATCH_SOURCE)}
    rows = gate(results, BROKEN, ROW_COUNT_MATCHES_SOURCE)
    assert (rows.expected, rows.actual, rows.threshold, rows.difference) == (5, 4, 0.0, 20.0)
    assert rows.detail == "target 4 rows vs source 5 expected (20.00% > 0%)"
    east = scalar(con, "SELECT count(*) FROM orders WHERE order_date = ? AND region = 'east'", [DAYS[2]])
    metrics = gate(results, BROKEN, METRICS_MATCH_SOURCE)
    assert metrics.expected["orders"] == ROWS_PER_DAY
    assert metrics.actual["orders"] == ROWS_PER_DAY - east
    assert all(f"{name}: target " in metrics.detail for name in STRICT.metric_tolerance_pct)


def test_shifted_amount_fails_only_metrics_naming_net_revenue(con, strategy):
    con.execute("UPDATE daily_revenue SET net_revenue = net_revenue + 10 "
                "WHERE order_date = ? AND region = 'west'", [DAYS[2]])

    results = evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT, strategy=strategy)

    assert failed(results) == {(BROKEN, METRICS_MATCH_SOURCE)}
    metrics = gate(results, BROKEN, METRICS_MATCH_SOURCE)
    source = scalar(con, "SELECT sum(amount) - coalesce(sum(amount) FILTER (WHERE status = 'refunded'), 0) "
                         "FROM orders WHERE order_date = ?", [DAYS[2]])
    assert isinstance(source, Decimal)
    target = source + 10
    pct = float(Decimal(10) / source * 100)
    assert metrics.expected["net_revenue"] == float(source)
    assert metrics.actual["net_revenue"] == float(target)
    assert metrics.difference["net_revenue"] == pytest.approx(pct)
    assert metrics.detail == f"net_revenue: target {target} vs source {source} ({pct:.3g}% > 0%)"
    assert [m for m, d in metrics.difference.items() if d] == ["net_revenue"]


def test_null_key_fails_only_the_contract(con, strategy):
    con.execute("UPDATE daily_revenue SET region = NULL WHERE order_date = ? AND region = 'south'",
                [DAYS[2]])

    results = evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT, strategy=strategy)

    assert failed(results) == {(BROKEN, CONTRACT_HOLDS)}
    contract = gate(results, BROKEN, CONTRACT_HOLDS)
    assert contract.actual["nulls"]["region"] == 1
    assert contract.expected["nulls"]["region"] == 0
    assert contract.difference == 1
    assert contract.detail == "region: 1 NULL(s) in a non-nullable column"


def test_type_drift_fails_the_contract_on_every_partition(con, strategy):
    con.execute("DROP TABLE daily_revenue")
    drifted = dataclasses.replace(DAILY_REVENUE, contract=tuple(
        Column(c.name, "INTEGER", c.nullable) if c.name == "orders" else c for c in DAILY_REVENUE.contract))
    con.execute(drifted.create_sql())
    fill(con)

    results = evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT, strategy=strategy)

    # the schema belongs to the table, not to one partition: every partition carries the drift
    assert failed(results) == {(key, CONTRACT_HOLDS) for key in KEYS}
    contract = gate(results, BROKEN, CONTRACT_HOLDS)
    assert contract.actual["mismatched"] == {"orders": "INTEGER"}
    assert contract.expected["columns"]["orders"] == "BIGINT"
    assert contract.detail == "orders: type INTEGER, contract says BIGINT"


def test_missing_and_extra_columns_are_named(con):
    con.execute("ALTER TABLE daily_revenue DROP COLUMN customers")
    con.execute("ALTER TABLE daily_revenue ADD COLUMN note VARCHAR")

    results = evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT)

    assert failed(results) == {(key, CONTRACT_HOLDS) for key in KEYS}
    contract = gate(results, BROKEN, CONTRACT_HOLDS)
    assert (contract.actual["missing"], contract.actual["extra"]) == (["customers"], ["note"])
    assert contract.detail == "missing column customers; unexpected column note"


def test_contract_types_compare_as_duckdb_names_them(con):
    spelled = {"gross": "decimal(18, 2)", "orders": "long", "region": "text", "order_date": "date"}
    spec = dataclasses.replace(DAILY_REVENUE, contract=tuple(
        Column(c.name, spelled.get(c.name, c.type), c.nullable) for c in DAILY_REVENUE.contract))

    results = evaluate_slice(con, spec, KEYS, STRICT)

    assert failed(results) == set()


def test_mixed_code_versions_fail_the_odd_partition(con, strategy):
    versions = {key: "2" for key in KEYS} | {BROKEN: "1"}

    results = evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT, versions, strategy=strategy)

    assert failed(results) == {(BROKEN, SINGLE_CODE_VERSION)}
    odd = gate(results, BROKEN, SINGLE_CODE_VERSION)
    assert (odd.expected, odd.actual, odd.difference) == ("2", "1", {"1": 1, "2": 3})
    assert odd.detail.startswith("written by code version 1, the window's is 2")


# --- thresholds -----------------------------------------------------------------------------------

def test_row_threshold_lets_a_dropped_row_pass_the_row_gate(con):
    con.execute("DELETE FROM daily_revenue WHERE order_date = ? AND region = 'east'", [DAYS[2]])
    lenient = dataclasses.replace(STRICT, max_row_diff_pct=20.0)  # exactly the 1-in-5 shortfall

    results = evaluate_slice(con, DAILY_REVENUE, KEYS, lenient)

    assert failed(results) == {(BROKEN, METRICS_MATCH_SOURCE)}
    rows = gate(results, BROKEN, ROW_COUNT_MATCHES_SOURCE)
    assert rows.detail == "target 4 rows vs source 5 expected (20.00% <= 20.00%)"


def test_metric_tolerance_is_respected(con):
    # +10 on ~110k of daily net revenue is under 0.01%: inside the demo plan's tolerance
    con.execute("UPDATE daily_revenue SET net_revenue = net_revenue + 10 "
                "WHERE order_date = ? AND region = 'west'", [DAYS[2]])
    demo = Thresholds(0, 0, {"orders": 0, "net_revenue": 0.01})

    assert all_passed(evaluate_slice(con, DAILY_REVENUE, KEYS, demo))
    tighter = Thresholds(0, 0, {"orders": 0, "net_revenue": 0.005})
    assert failed(evaluate_slice(con, DAILY_REVENUE, KEYS, tighter)) == {(BROKEN, METRICS_MATCH_SOURCE)}


def test_duplicate_threshold_is_respected(con):
    con.execute("INSERT INTO daily_revenue VALUES (?, 'north', 0, 0, 0, 0, 0)", [DAYS[2]])
    allowing = Thresholds(100, 1, {"orders": 0})

    results = evaluate_slice(con, DAILY_REVENUE, KEYS, allowing)

    assert failed(results) == set()
    assert gate(results, BROKEN, NO_DUPLICATE_BUSINESS_KEYS).actual == 1


# --- edges ----------------------------------------------------------------------------------------

def test_partition_without_target_rows_still_gets_results(con, strategy):
    con.execute("DELETE FROM daily_revenue WHERE order_date = ?", [DAYS[2]])
    beyond = (DAYS[-1] + dt.timedelta(days=1)).isoformat()  # neither source nor target rows

    results = evaluate_slice(con, DAILY_REVENUE, [*KEYS, beyond], STRICT, strategy=strategy)

    assert set(results) == {*KEYS, beyond}
    assert failed(results) == {(BROKEN, ROW_COUNT_MATCHES_SOURCE), (BROKEN, METRICS_MATCH_SOURCE)}
    rows = gate(results, BROKEN, ROW_COUNT_MATCHES_SOURCE)
    assert (rows.expected, rows.actual, rows.difference) == (5, 0, 100.0)
    assert gate(results, BROKEN, METRICS_MATCH_SOURCE).actual["net_revenue"] is None
    assert gate(results, beyond, ROW_COUNT_MATCHES_SOURCE).detail == \
        "target 0 rows vs source 0 expected (0% <= 0%)"


def test_strategies_agree(con, monkeypatch):
    con.execute("UPDATE daily_revenue SET region = NULL WHERE order_date = ? AND region = 'south'", [DAYS[0]])
    con.execute("DELETE FROM daily_revenue WHERE order_date = ? AND region = 'east'", [DAYS[1]])
    con.execute("INSERT INTO daily_revenue SELECT * FROM daily_revenue WHERE order_date = ?", [DAYS[3]])
    checks = Thresholds(0, 0, {**STRICT.metric_tolerance_pct, "customers": 0})

    by_strategy = [evaluate_slice(con, DAILY_REVENUE, KEYS, checks, strategy=s) for s in STRATEGIES]
    # auto on data this small is all grouped; a negative limit sends every DISTINCT to per-partition
    # queries and merges them with the grouped pass, the path auto takes on large data
    monkeypatch.setattr(gate_sql, "GROUPED_DISTINCT_LIMIT", -1)
    by_strategy.append(evaluate_slice(con, DAILY_REVENUE, KEYS, checks, strategy="auto"))

    assert all(r == by_strategy[0] for r in by_strategy[1:])
    assert len(failed(by_strategy[0])) == 6


def test_hash_collision_is_confirmed_exactly_and_does_not_fail(con, monkeypatch):
    # every key "collides": the hash pass sees 4 duplicates per partition, the exact count none
    monkeypatch.setattr(gate_sql, "key_hash_sql", lambda keys: "hash(0)")

    results = evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT)

    assert failed(results) == set()
    dup = gate(results, BROKEN, NO_DUPLICATE_BUSINESS_KEYS)
    assert dup.actual == 0
    assert dup.detail.endswith("the key hash flagged 4, the exact count found 0")


def test_gates_see_the_callers_uncommitted_write(con):
    with pytest.raises(RuntimeError), transaction(con):
        con.execute("DELETE FROM daily_revenue WHERE order_date = ? AND region = 'east'", [DAYS[2]])
        results = evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT)
        assert (BROKEN, ROW_COUNT_MATCHES_SOURCE) in failed(results)
        raise RuntimeError("roll back")
    assert all_passed(evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT))


def test_bad_input_raises_product_errors(con):
    with pytest.raises(IdentifierError, match="declares no metric 'revenue'"):
        evaluate_slice(con, DAILY_REVENUE, KEYS, Thresholds(0, 0, {"revenue": 0}))
    with pytest.raises(WindowError, match="not a daily key"):
        evaluate_slice(con, DAILY_REVENUE, ["2026-1-3"], STRICT)
    with pytest.raises(UsageError, match="unknown gate strategy"):
        evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT, strategy="fastest")
    con.execute("DROP TABLE daily_revenue")
    with pytest.raises(WarehouseError, match="daily_revenue does not exist"):
        evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT)
    assert evaluate_slice(con, DAILY_REVENUE, [], STRICT) == {}


# --- results --------------------------------------------------------------------------------------

def test_results_are_json_and_round_trip(con):
    con.execute("UPDATE daily_revenue SET region = NULL WHERE order_date = ? AND region = 'south'", [DAYS[2]])
    results = evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT, {KEYS[0]: "2", KEYS[1]: None})

    for result in (r for per_key in results.values() for r in per_key):
        metadata = result.metadata()
        assert json.loads(json.dumps(metadata)) == metadata
        assert metadata["partition"] == result.partition_key
        stored = json.loads(json.dumps(result.to_json()))
        assert GateResult.from_json(stored) == result


def test_code_versions_unknown_beside_known_fail(con):
    results = evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT, {KEYS[0]: "2", KEYS[1]: "2", KEYS[3]: "2"})

    assert failed(results) == {(BROKEN, SINGLE_CODE_VERSION)}
    assert gate(results, BROKEN, SINGLE_CODE_VERSION).detail.startswith("code version unknown")


def test_code_versions_tie_fails_every_partition(con):
    versions = {KEYS[0]: "1", KEYS[1]: "1", KEYS[2]: "2", KEYS[3]: "2"}

    results = evaluate_slice(con, DAILY_REVENUE, KEYS, STRICT, versions)

    assert failed(results) == {(key, SINGLE_CODE_VERSION) for key in KEYS}


def test_thresholds_from_plan_are_frozen_and_hashable():
    plan = Plan.model_validate(complete_plan())

    thresholds = Thresholds.from_plan(plan)

    assert thresholds == Thresholds(0.0, 0, {"net_revenue": 0.01, "orders": 0.0})
    assert hash(thresholds) == hash(Thresholds(0.0, 0, {"orders": 0.0, "net_revenue": 0.01}))
    with pytest.raises(TypeError):
        thresholds.metric_tolerance_pct["orders"] = 5  # type: ignore[index]
    with pytest.raises(UsageError):
        Thresholds(-1, 0, {})


@pytest.mark.parametrize(("expected", "actual", "pct"), [
    (100, 95, 5.0), (Decimal("1300.00"), Decimal("1234.50"), 5.038461538461538),
    (0, 0, 0.0), (0, 3, 100.0), (None, None, 0.0), (10, None, 100.0), (2.5, 2.5, 0.0),
])
def test_pct_diff(expected, actual, pct):
    assert pct_diff(expected, actual) == pytest.approx(pct)

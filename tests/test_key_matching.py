"""Joins on business keys are NULL-safe and hash-joinable on every engine.

A NULL key must match a NULL key (a summary table may group NULL regions), and the join must stay a
hash or merge join on the keys: PostgreSQL cannot hash `IS NOT DISTINCT FROM`, so a per-key gate,
a merge write or a diff joined on it compares every key of a partition with every other (the
gate: 8.8 s instead of 0.18 s for 3 partitions of 7,000 keys, `benchmarks/key_match.py`). Keys of
other types than the declared one (a source's, an older table's) are compared without loss.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from backfill_assets.gates.results import Thresholds, Tolerance
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import Column, Metric, TableSpec
from backfill_assets.warehouse.ddl import create_sql
from backfill_assets.warehouse.gate_sql import slice_figures

PACKAGE = Path(__file__).resolve().parents[1] / "backfill_assets"
KEYS = ["day", "region", "n"]



def test_a_key_match_pairs_null_with_null_through_a_hash_or_merge_join(engine):
    rows = [("2026-01-01", "north", 1), ("2026-01-01", None, 2), ("2026-01-01", None, None),
            ("2026-01-02", "south", None)]
    with engine.session() as session:
        # the right side holds other types than the declared ones, as a source or an older table may
        session.execute("CREATE TABLE l (day DATE, region VARCHAR(10), n BIGINT, v BIGINT)")
        session.execute("CREATE TABLE r (day TIMESTAMP, region TEXT, n INTEGER, v BIGINT)")
        for table in ("l", "r"):
            for i, row in enumerate(rows):
                session.execute(f"INSERT INTO {table} VALUES (CAST(? AS DATE), ?, ?, ?)", [*row, i])
        session.execute("INSERT INTO r VALUES (DATE '2026-01-03', NULL, NULL, 9)")
        session.execute("INSERT INTO r VALUES (TIMESTAMP '2026-01-01 10:00:00', 'north', 1, 10)")  # not that day
        match = engine.keys_match_sql("l", "r", KEYS, ["DATE", "VARCHAR(10)", "BIGINT"])
        sql = f"SELECT l.v, r.v FROM l FULL OUTER JOIN r ON {match} ORDER BY 2"
        assert session.rows(sql) == [(0, 0), (1, 1), (2, 2), (3, 3), (None, 9), (None, 10)]
        plan = "\n".join(str(cell) for row in session.rows(f"EXPLAIN {sql}") for cell in row)
    if engine.name == "postgresql":
        joined_on = re.search(r"(Hash|Merge) Cond: (.*)", plan)
        assert joined_on and all(k in joined_on.group(2) for k in KEYS), plan
        assert "Join Filter" not in plan, plan
    else:
        assert re.search(r"hash.?join", plan, re.I) and not re.search(r"nested.?loop", plan, re.I), plan


def test_every_join_on_business_keys_goes_through_the_engines_key_match():
    # a NULL-safe comparison between two aliases written by hand would be a join PostgreSQL cannot
    # hash; a comparison of two values that is no join condition says so on its line
    by_hand = re.compile(r"IS NOT DISTINCT FROM \{?[a-z_]+[.}]")
    found = [f"{path.relative_to(PACKAGE)}:{n}" for path in PACKAGE.rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if by_hand.search(line) and path.name != "engine.py" and "not a join" not in line]
    assert not found, found


def test_the_per_key_gate_matches_source_keys_of_other_types_and_null_keys_on_each_engine(engine):
    # source: INTEGER store and TEXT region; target: BIGINT and VARCHAR(10); one region is NULL
    spec = TableSpec(name="sales_by_store", source="store_sales", select_sql="SELECT 1",
                     partition_column="day", source_partition_column="day",
                     business_keys=("day", "store", "region"),
                     contract=(Column("day", "DATE"), Column("store", "BIGINT"), Column("region", "VARCHAR(10)"),
                               Column("amount", "DECIMAL(18,2)")),
                     metrics=(Metric("amount", "sum(amount)", "sum(amount)"),), publish_as="sales_published")
    scheme = PartitionScheme("equality", lambda k: (dt.date.fromisoformat(k), None), ("2026-01-01",), "days")
    rows = [(1, "north", "10.00"), (1, None, "5.00"), (2, "south", "7.50"), (2, None, "1.25")]
    with engine.session() as session:
        session.execute("CREATE TABLE store_sales (day DATE, store INTEGER, region TEXT, amount DECIMAL(18,2))")
        session.execute(create_sql(spec))
        for store, region, amount in rows:
            for table in ("store_sales", "sales_by_store"):
                session.execute(f"INSERT INTO {table} VALUES (DATE '2026-01-01', ?, ?, CAST(? AS DECIMAL(18,2)))",
                                [store, region, amount])
        thresholds = Thresholds(max_row_diff_pct=0, max_duplicate_rows=0,
                                metric_tolerances={"amount": Tolerance()})
        clean = slice_figures(session, spec, scheme, ["2026-01-01"], thresholds, [])["2026-01-01"]
        assert (clean.target_groups, clean.source_groups, clean.missing_groups, clean.extra_groups) == (4, 4, 0, 0)
        assert clean.differing == {"amount": 0}
        # the two NULL-region groups swap their figures: the day's total holds, two keys do not
        session.execute("UPDATE sales_by_store SET amount = CASE store WHEN 1 THEN 1.25 ELSE 5.00 END "
                        "WHERE region IS NULL")
        swapped = slice_figures(session, spec, scheme, ["2026-01-01"], thresholds, [])["2026-01-01"]
    assert swapped.differing == {"amount": 2} and (swapped.missing_groups, swapped.extra_groups) == (0, 0)
    assert "store=1, region=NULL" in swapped.worst and "store=2, region=NULL" in swapped.worst


@pytest.mark.parametrize(("target_type", "source_type", "target_key", "source_key"), [
    ("INTEGER", "BIGINT", "5", "5000000005"),             # would overflow the target's type
    ("DECIMAL(10,2)", "DECIMAL(10,3)", "1.00", "1.001"),  # would be rounded into the target's key
    ("VARCHAR(3)", "VARCHAR(20)", "abc", "abcdef"),       # would be cut to the target's length
])
def test_a_source_key_the_target_type_cannot_hold_is_a_missing_group_on_each_engine(
        engine, target_type, source_type, target_key, source_key):
    spec = TableSpec(name="by_key", source="key_source", select_sql="SELECT 1", partition_column="day",
                     source_partition_column="day", business_keys=("day", "k"),
                     contract=(Column("day", "DATE"), Column("k", target_type), Column("amount", "DECIMAL(18,2)")),
                     metrics=(Metric("amount", "sum(amount)", "sum(amount)"),), publish_as="by_key_published")
    scheme = PartitionScheme("equality", lambda k: (dt.date.fromisoformat(k), None), ("2026-01-01",), "days")
    with engine.session() as session:
        session.execute(create_sql(spec))
        session.execute(f"CREATE TABLE key_source (day DATE, k {source_type}, amount DECIMAL(18,2))")
        session.execute(f"INSERT INTO by_key VALUES (DATE '2026-01-01', CAST(? AS {target_type}), 1)", [target_key])
        session.execute(f"INSERT INTO key_source VALUES (DATE '2026-01-01', CAST(? AS {source_type}), 1)",
                        [source_key])
        thresholds = Thresholds(max_row_diff_pct=0, max_duplicate_rows=0, metric_tolerances={"amount": Tolerance()})
        figures = slice_figures(session, spec, scheme, ["2026-01-01"], thresholds, [])["2026-01-01"]
    assert (figures.missing_groups, figures.extra_groups) == (1, 1)

"""DuckDB 2.0's nested schemas: a table in `zzz.main` is listed by the catalog under the schema name
`main`, while a statement's `daily_revenue` still names `main.daily_revenue`. A decoy there answered
the checks that look a relation up by its schema's name (found by an attack; each test failed
first): `contract_holds` read the decoy's column types and passed a target whose `gross` lost its
cents, and a view put over a plan's snapshot passed for a table, so a failed `changes_as_expected`
passed on reconcile and was published. A nested schema named like a schema of the warehouse (or
like `main`, `backfill_control`, `backfill_snapshots`) is refused as each session opens, in one
line, before anything is read or written."""

from __future__ import annotations

import pytest

from tests.test_trust import _insider_duckdb
from tests.world import keys

CONTRACT_COLUMNS = ("order_date DATE, region VARCHAR, orders BIGINT, gross DECIMAL(18,2), refunds DECIMAL(18,2), "
                    "net_revenue DECIMAL(18,2), customers BIGINT")


def _refused(world, capfd, *args: str) -> str:
    capfd.readouterr()
    code = world.cli(*args)
    err = capfd.readouterr().err
    assert code != 0 and err.count("\n") == 1 and "nested schema" in err, (code, err)
    return err


def _contract_fails(world, capfd) -> None:
    """The proof reads `gross`'s own type, DECIMAL(18,0), against the contract's DECIMAL(18,2)."""
    capfd.readouterr()
    assert world.cli("run", "fix", "--proof") != 0
    assert "contract_holds failed" in capfd.readouterr().err and world.phase() == "proving"


# the decoys, with the contract's columns: a nested schema the catalog lists as `main`; a top-level
# schema and tables whose names SQL's lower() folds to the real ones (DuckDB's binder does not:
# "İ" is no "I"), found by a review
DECOYS = {
    "nested": ("CREATE SCHEMA zzz", "CREATE SCHEMA zzz.main", "CREATE TABLE zzz.main.daily_revenue ({})",
               "CREATE TABLE zzz.main.published_revenue ({})"),
    "look-alike schema": ('CREATE SCHEMA "maİn"', 'CREATE TABLE "maİn".daily_revenue ({})',
                          'CREATE TABLE "maİn".published_revenue ({})'),
    "look-alike tables": ('CREATE TABLE main."daİly_revenue" ({})', 'CREATE TABLE main."publİshed_revenue" ({})'),
}


@pytest.mark.parametrize("decoy", [None, *DECOYS])
def test_a_decoy_named_like_the_target_never_hides_a_broken_contract(world, capfd, decoy):
    window = keys(1, 4)
    assert world.materialize(window, publish=True).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    statements = ["ALTER TABLE daily_revenue ALTER gross TYPE DECIMAL(18,0)",
                  "ALTER TABLE published_revenue ALTER gross TYPE DECIMAL(18,0)"]
    statements += [s.format(CONTRACT_COLUMNS) for s in DECOYS.get(decoy, ())]
    _insider_duckdb(world, *statements)
    if decoy == "nested":  # refused before anything is read; once dropped, the contract gate sees gross
        assert '"zzz"."main"' in _refused(world, capfd, "run", "fix", "--proof")
        _insider_duckdb(world, "DROP SCHEMA zzz CASCADE")  # as the fix says
        assert world.phase() == "approved"
    _contract_fails(world, capfd)


SNAPSHOT_DECOYS = {
    "nested": ("CREATE SCHEMA zzz", "CREATE SCHEMA zzz.backfill_snapshots",
               "CREATE TABLE zzz.backfill_snapshots.{snap} ({columns})"),
    "look-alike schema": ('CREATE SCHEMA "backfİll_snapshots"', 'CREATE TABLE "backfİll_snapshots".{snap} ({columns})'),
    "look-alike table": ('CREATE TABLE backfill_snapshots."{alike}" ({columns})',),
}


@pytest.mark.parametrize("decoy", [None, *SNAPSHOT_DECOYS])
def test_a_decoy_never_passes_a_view_over_a_snapshot_off_as_a_table(world, capfd, decoy):
    from backfill_assets.warehouse.snapshots import snapshot_table
    from tests.test_expectations import undeclared_gross_change

    undeclared_gross_change(world)  # DAY's changes_as_expected fails: gross changed, undeclared
    snap = snapshot_table("fix", "daily_revenue")
    columns = "order_date, region, orders, gross, refunds, net_revenue, customers"
    statements = [f"ALTER TABLE backfill_snapshots.{snap} RENAME TO {snap}_real",
                  f"CREATE VIEW backfill_snapshots.{snap} AS SELECT {columns} FROM backfill_snapshots.{snap}_real "
                  "WHERE strpos(current_query(), 'sha256(') > 0 UNION ALL SELECT s.order_date, s.region, s.orders, "
                  "coalesce(d.gross, s.gross), s.refunds, s.net_revenue, s.customers "
                  f"FROM backfill_snapshots.{snap}_real AS s LEFT JOIN main.daily_revenue AS d "
                  "ON d.order_date = s.order_date AND d.region = s.region "
                  "WHERE strpos(current_query(), 'sha256(') = 0"]
    statements += [s.format(snap=snap, alike=snap.replace("daily", "daİly"), columns=CONTRACT_COLUMNS)
                   for s in SNAPSHOT_DECOYS.get(decoy, ())]
    _insider_duckdb(world, *statements)
    if decoy == "nested":
        _refused(world, capfd, "reconcile", "fix")
        _refused(world, capfd, "publish", "fix")
        _insider_duckdb(world, "DROP SCHEMA zzz CASCADE")  # then the view is found for what it is
    capfd.readouterr()
    code = world.cli("reconcile", "fix")
    err = capfd.readouterr().err
    assert code != 0 and "view" in err and err.count("\n") == 1, err
    assert world.phase() != "reconciled"


def test_a_nested_schema_named_with_a_line_break_is_refused_in_one_line(world, capfd):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    _insider_duckdb(world, 'CREATE SCHEMA "x\ny"', 'CREATE SCHEMA "x\ny"."Main"')
    err = _refused(world, capfd, "run", "fix", "--proof")
    assert '"x\\ny"."Main"' in err, err


def test_a_nested_schema_named_like_no_schema_of_the_warehouse_is_the_teams_own(world, capfd):
    _insider_duckdb(world, "CREATE SCHEMA lake", "CREATE SCHEMA lake.raw", "CREATE TABLE lake.raw.events (id INTEGER)")
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0


@pytest.mark.parametrize("column_type", ["VARIANT", "UNION(i INTEGER, s VARCHAR)", "STRUCT(x VARIANT)",
                                         "MAP(VARCHAR, VARIANT)"])
def test_a_column_whose_values_carry_their_own_type_is_never_fingerprinted(world, column_type):
    """A VARIANT's (DuckDB 2.0) or a UNION's text drops its value's type: 1 and '1' fingerprinted
    alike, so an insider could swap a value's type unseen (found by an attack)."""
    from backfill_assets.errors import WarehouseError
    from backfill_assets.warehouse.fingerprints import fingerprints

    _insider_duckdb(world, f"CREATE TABLE typed (order_date DATE, v {column_type})",
                    "INSERT INTO typed (order_date) VALUES ('2026-01-01')")
    with world.warehouse().session() as session, pytest.raises(WarehouseError, match="carry their own types"):
        fingerprints(session, "typed", ["order_date", "v"], world.scheme, "order_date", ["2026-01-01"])


@pytest.mark.parametrize("column_type", ["ENUM('control', 'variant')", "STRUCT(variant VARCHAR)"])
def test_a_label_or_a_field_named_variant_is_an_ordinary_type(world, column_type):
    from backfill_assets.warehouse.fingerprints import fingerprints

    _insider_duckdb(world, f"CREATE TABLE typed (order_date DATE, v {column_type})",
                    "INSERT INTO typed (order_date) VALUES ('2026-01-01')")
    with world.warehouse().session() as session:
        found = fingerprints(session, "typed", ["order_date", "v"], world.scheme, "order_date", ["2026-01-01"])
    assert found["2026-01-01"].rows == 1

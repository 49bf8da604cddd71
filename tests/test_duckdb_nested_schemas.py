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


def refused_saying(words: str, world, capfd, *args: str) -> str:
    """The command `args` refused in one line that says `words`; that line."""
    capfd.readouterr()
    code = world.cli(*args)
    err = capfd.readouterr().err
    assert code != 0 and err.count("\n") == 1 and words in err, (code, err)
    return err


def _refused(world, capfd, *args: str) -> str:
    return refused_saying("nested schema", world, capfd, *args)


# the decoys, with the contract's columns, and how each is removed: a nested schema the catalog
# lists as `main`; a top-level schema and tables whose names SQL's lower() folds to the real ones
# (DuckDB's binder does not: "İ" is no "I"), found by a review. Each is tried in turn on one
# world: a refusal changes nothing, so the next finds the world as the first did
DECOYS = {
    "nested": (("CREATE SCHEMA zzz", "CREATE SCHEMA zzz.main", "CREATE TABLE zzz.main.daily_revenue ({})"),
               "DROP SCHEMA zzz CASCADE"),
    "look-alike schema": (('CREATE SCHEMA "maİn"', 'CREATE TABLE "maİn".daily_revenue ({})'),
                          'DROP SCHEMA "maİn" CASCADE'),
    "look-alike table": (('CREATE TABLE main."daİly_revenue" ({})',), 'DROP TABLE main."daİly_revenue"'),
}


def test_a_decoy_named_like_the_target_never_hides_a_broken_contract(world, capfd):
    window = keys(1, 4)
    assert world.materialize(window).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    _insider_duckdb(world, "ALTER TABLE daily_revenue ALTER gross TYPE DECIMAL(18,0)")  # the cents lost
    for decoy, (plant, remove) in [(None, ((), None)), *DECOYS.items()]:
        _insider_duckdb(world, *(s.format(CONTRACT_COLUMNS) for s in plant))
        capfd.readouterr()
        code = world.cli("run", "fix", "--proof")
        err = capfd.readouterr().err
        if decoy == "nested":  # refused before anything is read; once dropped, the gate sees gross
            assert code != 0 and err.count("\n") == 1 and '"zzz"."main"' in err, (decoy, err)
            _insider_duckdb(world, remove)  # as the fix says
            code = world.cli("run", "fix", "--proof")
            err = capfd.readouterr().err
        elif remove:
            _insider_duckdb(world, remove)
        # the proof read gross's own type, DECIMAL(18,0), against the contract's DECIMAL(18,2)
        assert code != 0 and "contract_holds failed" in err, (decoy, err)
        assert world.phase() in ("approved", "proving"), decoy


SNAPSHOT_DECOYS = {
    "nested": (("CREATE SCHEMA zzz", "CREATE SCHEMA zzz.backfill_snapshots",
                "CREATE TABLE zzz.backfill_snapshots.{snap} ({columns})"), "DROP SCHEMA zzz CASCADE"),
    "look-alike schema": (('CREATE SCHEMA "backfİll_snapshots"',
                           'CREATE TABLE "backfİll_snapshots".{snap} ({columns})'),
                          'DROP SCHEMA "backfİll_snapshots" CASCADE'),
    "look-alike table": (('CREATE TABLE backfill_snapshots."{alike}" ({columns})',),
                         'DROP TABLE backfill_snapshots."{alike}"'),
}


def test_a_decoy_never_passes_a_view_over_a_snapshot_off_as_a_table(world, capfd):
    from backfill_assets.warehouse.snapshots import snapshot_table
    from tests.test_expectations import undeclared_gross_change

    undeclared_gross_change(world)  # DAY's changes_as_expected fails: gross changed, undeclared
    snap = snapshot_table("fix", "daily_revenue")
    columns = "order_date, region, orders, gross, refunds, net_revenue, customers"
    _insider_duckdb(world, f"ALTER TABLE backfill_snapshots.{snap} RENAME TO {snap}_real",
                    f"CREATE VIEW backfill_snapshots.{snap} AS SELECT {columns} FROM backfill_snapshots.{snap}_real "
                    "WHERE strpos(current_query(), 'sha256(') > 0 UNION ALL SELECT s.order_date, s.region, s.orders, "
                    "coalesce(d.gross, s.gross), s.refunds, s.net_revenue, s.customers "
                    f"FROM backfill_snapshots.{snap}_real AS s LEFT JOIN main.daily_revenue AS d "
                    "ON d.order_date = s.order_date AND d.region = s.region "
                    "WHERE strpos(current_query(), 'sha256(') = 0")
    names = {"snap": snap, "alike": snap.replace("daily", "daİly"), "columns": CONTRACT_COLUMNS}
    for decoy, (plant, remove) in [(None, ((), None)), *SNAPSHOT_DECOYS.items()]:
        _insider_duckdb(world, *(s.format(**names) for s in plant))
        if decoy == "nested":
            _refused(world, capfd, "reconcile", "fix")
            _refused(world, capfd, "publish", "fix")
            _insider_duckdb(world, remove)  # then the view is found for what it is
        capfd.readouterr()
        code = world.cli("reconcile", "fix")
        err = capfd.readouterr().err
        assert code != 0 and "view" in err and err.count("\n") == 1, (decoy, err)
        if remove and decoy != "nested":
            _insider_duckdb(world, remove.format(**names))
        assert world.phase() != "reconciled", decoy


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

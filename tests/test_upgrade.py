"""A home of release 0.2 (schema 2) upgrades in place: its rows are sealed as they stand, its
approvers pin is kept, and a home with an active plan is refused before anything changes."""

from __future__ import annotations

import pytest
import yaml

from backfill_assets.control.schema import SCHEMA, schema_version
from backfill_assets.demo.revenue import DAILY_REVENUE
from tests.release_0_2 import as_release_0_2
from tests.world import keys

CONTROL = SCHEMA


def closed_plan_in_0_2(world) -> None:
    """A published, closed plan, a failure of it repaired, in a home 0.2 left behind."""
    world.approved_plan("old", start="2026-01-01", end="2026-01-02", proof=("2026-01-02",))
    assert world.cli("run", "old", "--proof") == 0 and world.cli("run", "old") == 0
    world.run_sql("UPDATE daily_revenue SET net_revenue = net_revenue + 1 WHERE order_date = '2026-01-01'")
    assert world.cli("reconcile", "old") == 1 and world.cli("run", "old", "--partitions", "2026-01-01") == 0
    assert world.cli("publish", "old") == 0 and world.cli("plan", "close", "old") == 0
    as_release_0_2(world)


def test_a_0_2_home_upgrades_in_place_and_keeps_its_approvers(world, tmp_path, run_cli):
    closed_plan_in_0_2(world)
    before = world.fingerprints("published_revenue", keys(1, 2))
    with world.warehouse().session() as session:
        assert schema_version(session) == "2"
    # the first command upgrades it; every existing row is sealed, the chain still verifies
    assert world.cli("evidence", "verify") == 1  # a reader: never upgrades, and 0.2 rows are unsealed
    assert run_cli("plan", "withdraw", "nothing-here").code == 2  # a writer: upgrades, then says what is wrong
    with world.warehouse().session() as session:
        assert schema_version(session) == "3"
    assert world.cli("evidence", "verify") == 0
    assert world.fingerprints("published_revenue", keys(1, 2)) == before
    # the old plan's evidence: the chain rows that recorded its writes and its failure name rows the
    # upgrade sealed anew (they were read as hidden from the evidence: found by an attack)
    out = tmp_path / "old.yaml"
    assert world.cli("evidence", "old", "--out", str(out)) == 0
    document = yaml.safe_load(out.read_text())
    assert document["history"]["failures"]
    assert sorted(line.split()[0] for line in document["approvals"]["signed"]) == ["alice", "bob", "olivia"]
    assert all(line.endswith("(release 0.2: the plan's hash alone)") for line in document["approvals"]["signed"])
    # the approvers pin of 0.2 is kept: only that same file becomes the first trust root
    from tests.world import make_keys, signers_text

    others = make_keys(tmp_path / "others")
    forged = tmp_path / "others" / "allowed_signers"
    forged.write_text(signers_text(others))
    refused = run_cli("init", "--allowed-signers", str(forged))
    assert refused.code == 1 and "before its upgrade" in refused.err, refused
    assert run_cli("init", "--allowed-signers", str(world.root / "approvers" / "allowed_signers")).code == 0
    # and the upgraded home works: a new plan is approved, runs and publishes
    world.approved_plan("new", start="2026-01-03", end="2026-01-03", proof=("2026-01-03",))
    assert world.cli("run", "new", "--proof") == 0 and world.cli("publish", "new") == 0
    assert world.cli("evidence", "verify") == 0


def test_a_0_2_home_with_an_active_plan_is_refused_unchanged(world, run_cli):
    closed_plan_in_0_2(world)
    world.run_sql(f"UPDATE {CONTROL}.plans SET phase = 'running' WHERE plan_id = 'old'")
    refused = run_cli("plan", "withdraw", "old")
    assert refused.code == 1 and "old are still active" in refused.err and refused.err.count("\n") == 1, refused
    with world.warehouse().session() as session:
        assert schema_version(session) == "2"


def test_a_record_of_this_version_reshaped_to_look_like_0_2s_is_never_upgraded(world, cli, capfd):
    """Insider (warehouse write, no evidence key). The upgrade from 0.2 "seals every existing row as it
    stands", and whether the record is 0.2 is read from `backfill_control.meta` plus the shape of the
    tables, both of which the insider writes. They edit a published partition's target rows, point
    its write and gate results at the new bytes' fingerprint (public SQL, no key needed), reshape the
    record to schema 2 (drop the seal columns, `meta.schema_version = 2`); the next process that opens
    the warehouse (the daily schedule's run, any CLI command) "upgrades" it, sealing the forgery under
    the key, and publish copies the edited bytes to consumers. `evidence verify` then passes.

    Found by an attack: the upgrade now refuses a record whose keyed chain holds a row only this
    version writes (a pin, a seal), and the load fails before it writes."""
    from backfill_assets.warehouse.fingerprints import fingerprints

    day = keys(2, 2)[0]
    assert world.materialize(keys(1, 3), publish=True).success  # loaded plan-free, gated, published
    proven = world.fingerprints("published_revenue", [day])[day]
    honest = world.sql("SELECT net_revenue FROM published_revenue WHERE order_date = ? AND region = 'north'",
                       [day])[0][0]

    # the insider, while no command holds the file: other bytes, and a ledger that says the gates passed them
    world.run_sql("UPDATE daily_revenue SET net_revenue = net_revenue + 100000 WHERE order_date = ? "
                  "AND region = 'north'", [day])
    with world.warehouse().session() as session:
        forged = fingerprints(session, "daily_revenue", DAILY_REVENUE.columns, world.scheme, "order_date", [day])[day]
    world.run_sql("UPDATE backfill_control.writes SET fingerprint = ? WHERE asset = 'daily_revenue' "
                  "AND partition_key = ?", [forged.digest, day])
    world.run_sql("UPDATE backfill_control.gate_results SET checked_fingerprint = ?, passed = true "
                  "WHERE asset = 'daily_revenue' AND partition_key = ?", [forged.digest, day])
    # ... and a control record shaped like 0.2's
    for statement in ("DROP INDEX backfill_control.writes_by_partition",
                      "DROP INDEX backfill_control.results_by_write",
                      "ALTER TABLE backfill_control.plan_versions DROP COLUMN evidence_seq",
                      "ALTER TABLE backfill_control.writes DROP COLUMN evidence_seq",
                      "ALTER TABLE backfill_control.writes DROP COLUMN code_identity",
                      "ALTER TABLE backfill_control.snapshots DROP COLUMN evidence_seq",
                      "ALTER TABLE backfill_control.gate_results DROP COLUMN evidence_seq",
                      "UPDATE backfill_control.meta SET value = '2' WHERE key = 'schema_version'"):
        world.run_sql(statement)

    # the next command to open the warehouse "upgrades" it: here the hurried user loads the next day
    loaded = cli("load", "daily_revenue", "--start", keys(4, 4)[0], "--end", keys(4, 4)[0])
    assert loaded.code != 0 and "which only this version writes" in loaded.err, loaded.err[-2000:]
    # then the UI's Materialize of the published partition
    world.publish([day])
    capfd.readouterr()
    verified = world.cli("evidence", "verify")
    now = world.sql("SELECT net_revenue FROM published_revenue WHERE order_date = ? AND region = 'north'", [day])
    assert world.fingerprints("published_revenue", [day])[day] == proven, (
        f"consumers see net_revenue {now} for {day}/north (the gates passed {honest}); "
        f"`evidence verify` exit {verified}")


@pytest.mark.parametrize("engine_world", ["duckdb", "postgresql"], indirect=True)
def test_the_column_types_the_sessions_check_are_the_ones_the_schema_makes(engine_world):
    """`schema.column_types()` (read from the schema's own DDL) is what each engine's control check
    compares a column's type with: it must name every column a fresh record has, as made."""
    from backfill_assets.warehouse.postgres_engine import _PG_TYPE
    from backfill_assets.warehouse.state_store.schema import column_types

    world = engine_world
    if world.url is None:
        made = {(str(t), str(c)): str(k) for t, c, k in world.sql(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE schema_name = ?", [CONTROL])}
        expected = column_types()
    else:
        made = {(str(t), str(c)): str(k) for t, c, k in world.sql(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = ? AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped", [CONTROL])}
        expected = {key: _PG_TYPE[kind] for key, kind in column_types().items()}
    assert made == expected

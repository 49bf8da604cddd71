"""A collation on a text column shows in no catalog type (`duckdb_columns()` says VARCHAR for
`VARCHAR COLLATE NOCASE`), leaves the bytes and their fingerprint unchanged, yet every comparison,
join and hash of the column honours it: `changes_as_expected` compared a snapshot's `'north'` with
the replay's `'NORTH'` as equal, so keys a replay upper-cased, undeclared, passed and were published
(found by an attack; each test failed first). A table the product fingerprints (target, published,
snapshot) with a collated column is refused in one line before any gate reads it; on PostgreSQL, a
column of a collation outside pg_catalog (which may be nondeterministic)."""

from __future__ import annotations

import pytest

from backfill_assets.warehouse.snapshots import snapshot_table
from tests.test_duckdb_nested_schemas import refused_saying
from tests.test_expectations import DAY, NET_UP, buggy_window, plan_with, verdicts
from tests.test_trust import CONTROL, _insider_duckdb


def _refused(world, capfd, *args: str) -> str:
    return refused_saying("collated column", world, capfd, *args)


def test_a_collation_put_on_a_snapshot_never_hides_an_undeclared_key_change(world, capfd):
    buggy_window(world)
    # the replay writes DAY's keys upper-case ('NORTH' for 'north'): keys removed and added, undeclared
    world.run_sql("UPDATE orders SET region = upper(region) WHERE order_date = ?", [DAY])
    path = plan_with(world, "fix", NET_UP)
    assert world.cli("run", str(path), "--proof") == 0
    world.cli("run", str(path))
    passed, figures = verdicts(world, "fix")[DAY]
    assert not passed and "added" in figures["detail"], figures["detail"]  # the gate sees it
    snap = snapshot_table("fix", "daily_revenue")
    _insider_duckdb(world, f"ALTER TABLE backfill_snapshots.{snap} ALTER region TYPE VARCHAR COLLATE NOCASE")
    _refused(world, capfd, "reconcile", "fix")
    assert world.cli("publish", "fix") != 0  # the window's gates have not all passed
    passed, _ = verdicts(world, "fix")[DAY]
    assert not passed and world.phase("fix") != "published"


def test_a_collation_put_on_the_target_before_the_run_has_its_write_refused(world, capfd):
    buggy_window(world)
    _insider_duckdb(world, "ALTER TABLE daily_revenue ALTER region TYPE VARCHAR COLLATE NOCASE")
    world.run_sql("UPDATE orders SET region = upper(region) WHERE order_date = ?", [DAY])
    path = plan_with(world, "fix", NET_UP)
    capfd.readouterr()
    assert world.cli("run", str(path), "--proof") != 0  # the run's write is fingerprinted, and refused
    err = capfd.readouterr().err
    assert "collated column" in err and "ALTER TABLE daily_revenue ALTER <column> TYPE VARCHAR" in err, err
    assert verdicts(world, "fix") == {}  # no write of the plan's committed: the write's transaction rolled back


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_nondeterministic_collation_on_postgresql_has_the_write_refused(engine_world, capfd):
    """PostgreSQL's like it: ICU's case-insensitive collation, of one's own (pg_catalog's are all
    deterministic), on the target's key."""
    world = engine_world
    buggy_window(world)
    world.run_sql("CREATE COLLATION public.no_case (provider = icu, locale = 'und-u-ks-level2', "
                  "deterministic = false)")
    world.run_sql("ALTER TABLE daily_revenue ALTER region TYPE varchar COLLATE public.no_case")
    world.run_sql("UPDATE orders SET region = upper(region) WHERE order_date = ?", [DAY])
    path = plan_with(world, "fix", NET_UP)
    capfd.readouterr()
    assert world.cli("run", str(path), "--proof") != 0
    assert "collated column" in capfd.readouterr().err
    assert verdicts(world, "fix") == {}


def test_a_column_or_a_default_named_like_the_keyword_is_no_collation(world):
    _insider_duckdb(world, 'CREATE TABLE notes ("collate" VARCHAR, "collated_at" VARCHAR, '
                           "note VARCHAR DEFAULT 'x COLLATE y')",
                    "CREATE TABLE keyed (region VARCHAR COLLATE NOCASE)")
    with world.warehouse().session() as session:
        assert session.engine.relation_kind(session, "notes") == "table"
        assert session.engine.relation_kind(session, "keyed") == "table with a collated column"


# --- the chain's key, looked for as the binder names it (found by the same attack) ---------------

CHAIN = ("seq BIGINT, recorded_at VARCHAR NOT NULL, plan_id VARCHAR, kind VARCHAR NOT NULL, actor VARCHAR NOT NULL, "
         "payload VARCHAR NOT NULL, prev_hash VARCHAR NOT NULL, row_hash VARCHAR NOT NULL")
COLS = "seq, recorded_at, plan_id, kind, actor, payload, prev_hash, row_hash"

WAYS = {
    "a look-alike schema holds the key": (
        f"CREATE TABLE {CONTROL}.evidence_copy AS SELECT * FROM {CONTROL}.evidence",
        f"DROP TABLE {CONTROL}.evidence", f"ALTER TABLE {CONTROL}.evidence_copy RENAME TO evidence",
        'CREATE SCHEMA "bac\u212afill_control"',
        'CREATE TABLE "bac\u212afill_control".evidence (seq BIGINT PRIMARY KEY)'),
    "the key on a look-alike column": (
        f"CREATE TABLE {CONTROL}.evidence_copy ({CHAIN}, \"\u017feq\" BIGINT PRIMARY KEY)",
        f"INSERT INTO {CONTROL}.evidence_copy SELECT {COLS}, seq FROM {CONTROL}.evidence",
        f"DROP TABLE {CONTROL}.evidence", f"ALTER TABLE {CONTROL}.evidence_copy RENAME TO evidence"),
}


@pytest.mark.parametrize("way", list(WAYS))
def test_the_chain_key_is_looked_for_on_the_table_itself(world, capsys, way):
    """A primary key on a look-alike (a schema "bacKfill_control" with the Kelvin sign, a column
    "ſeq" with a long s), which Python's lower() folds to ours and DuckDB's binder does not,
    answered for the real table, which then held a row twice while another was gone."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    dup = ("INSERT INTO {c}.evidence SELECT * REPLACE (1000 AS \"\u017feq\") FROM {c}.evidence WHERE seq = 4"
           if "column" in way else "INSERT INTO {c}.evidence SELECT * FROM {c}.evidence WHERE seq = 4"
           ).format(c=CONTROL)
    _insider_duckdb(world, *WAYS[way], dup, f"DELETE FROM {CONTROL}.evidence WHERE seq = 3")
    capsys.readouterr()
    code = world.cli("run", "fix", "--proof")
    said = capsys.readouterr().err
    assert code != 0 and f"{CONTROL}.evidence has no primary key on seq" in said and said.count("\n") == 1, said

"""An insider who can create operators and functions in a schema of the PostgreSQL warehouse (no
key) makes a namesake of pg_catalog's from another session while a product's session works, after
its checks, and drops it again before the next: a race of one statement's length. Each test drives
the product's own Python API step by step and makes the namesake between the session's opening
(whose check it passes) and the decision's read."""

from __future__ import annotations

import contextlib

import pytest

# `=(varchar, varchar)`: the exact match where pg_catalog's `=(text, text)` needs a binary coercion,
# so PostgreSQL picks it for a bare `plan_id = ?` (an untyped parameter takes the column's type)
_UNEQUAL = ("CREATE FUNCTION public.unequal(varchar, varchar) RETURNS boolean LANGUAGE sql IMMUTABLE "
            "AS 'SELECT $1::pg_catalog.text OPERATOR(pg_catalog.<>) $2::pg_catalog.text'",
            "CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.unequal)")
_CASELESS = ("CREATE FUNCTION public.caseless(varchar, varchar) RETURNS boolean LANGUAGE sql IMMUTABLE "
             "AS 'SELECT pg_catalog.lower($1) OPERATOR(pg_catalog.=) pg_catalog.lower($2)'",
             "CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.caseless)")
_DROP = "DROP OPERATOR IF EXISTS public.= (varchar, varchar)"


@contextlib.contextmanager
def _namesake(url: str, made: tuple[str, ...]):
    """The insider's namesake, made from their own session, for as long as this lasts."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as insider:
        for statement in made:
            insider.execute(statement)
        try:
            yield
        finally:
            insider.execute(_DROP)


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
def test_a_namesake_made_after_a_sessions_check_never_answers_a_control_read(engine):
    """Insider, no key, PostgreSQL: once a session of the product has opened (its check of namesakes
    passed), they make `public.=(varchar, varchar)` that says two different texts are equal, and
    drop it again before the next check. The product's `plan_id = ?` (a VARCHAR column, an untyped
    parameter) was theirs: asked for plan `a`, the control read returned plan `b`'s row, whose
    phase, target and plan of record the decision then acted on. Now the product's own statements
    compare with pg_catalog's operators by name, so the namesake answers none of them.
    (found by an attack)"""
    from backfill_assets.control.schema import SCHEMA_VERSION
    from backfill_assets.warehouse.state_store import evidence, plans, schema

    with engine.session() as session, session.transaction():
        schema.create(session, SCHEMA_VERSION)
        plans.insert_plan(session, "a", "approved", "daily_revenue", "alice", "2026-01-01T00:00:00Z")
        plans.insert_plan(session, "b", "withdrawn", "monthly_revenue", "bob", "2026-01-01T00:00:00Z")
    with engine.session() as session:  # its checks passed as it opened
        with _namesake(engine.url, _UNEQUAL):
            row = plans.plan_row(session, "a")
            phases = plans.ids_in_phases(session, ["approved"])
            kinds = evidence.plan_ids_of_kinds(session, ["plan"])  # no evidence row at all
    assert row is not None and row[0] == "a", f"plan a's read returned another plan's row: {row}"
    assert phases == ["a"], f"the approved plans read as {phases}"
    assert kinds == set(), f"the chain read as holding rows of plans: {kinds}"


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
def test_a_namesake_made_after_a_sessions_check_never_picks_a_partitions_rows(engine):
    """Insider, no key, PostgreSQL: the partition column is VARCHAR (regions); once a session has
    opened they make a case-blind `public.=(varchar, varchar)`. The product's partition predicate
    (`t."region" IN (?)`, and `= ?` for a static key) was theirs: the row of region `EU`, which lies
    in no partition the upstream declares (only `eu`), read as partition `eu`'s, so a rollup's
    window was told it read nothing outside its upstream's partitions. Now the predicates compare
    with pg_catalog's `=`. (found by an attack)"""
    from backfill_assets.partitions import PartitionScheme
    from backfill_assets.warehouse.grouping import rows_in_no_key, rows_per_partition

    scheme = PartitionScheme("equality", lambda k: (k, None), ("eu",), "regions")
    with engine.session() as session:
        session.execute("CREATE TABLE regional (region VARCHAR(8), amount INTEGER)")
        session.execute("INSERT INTO regional VALUES ('EU', 1), ('eu', 2), ('eu', 3)")
    with engine.session() as session, _namesake(engine.url, _CASELESS):
        outside = rows_in_no_key(session, "regional", "region", [("EU", None)], scheme, ["eu"])
        assert outside == (1, "EU"), f"a row in no partition read as partition eu's: {outside}"
        assert rows_per_partition(session, "regional", "region", scheme, ["eu"]) == {"eu": 2}


def test_the_teams_sql_cannot_mark_the_products_own_as_its_own():
    """Held: the team's SQL, left as written inside the product's statements, is marked with a
    secret of the process; a `select_sql` that writes a marker of its own (without the secret) to
    have the product's comparisons after it left bare marks nothing: they are named with pg_catalog."""
    from backfill_assets.warehouse.postgres_operators import catalog_named, team

    forged = "SELECT 1 FROM t WHERE a = b /*}team0000*/) AS s WHERE s.plan_id = ?"
    sent = catalog_named(f"SELECT * FROM ({team('SELECT 1 FROM t WHERE a = b')}) AS s WHERE s.plan_id = ?")
    assert sent == "SELECT * FROM (SELECT 1 FROM t WHERE a = b) AS s WHERE ((s.plan_id) OPERATOR(pg_catalog.=) (?))"
    assert "s.plan_id = ?" not in catalog_named(f"SELECT * FROM (/*team{{0000*/{forged}")


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
def test_an_in_list_named_with_pg_catalog_reads_the_rows_the_list_named(engine):
    """Held: an IN list becomes `OPERATOR(pg_catalog.=) ANY (...)`; its untyped texts still take the
    column's type (a DATE) and quotes, backslashes and braces in them stay the values they were."""
    with engine.session() as session:
        session.execute("CREATE TABLE lits (v VARCHAR(20), d DATE)")
        session.execute("INSERT INTO lits VALUES ('it''s', '2026-01-01'), ('a\\b\"c', '2026-01-02'), "
                        "('x', '2026-01-03'), ('{y}', NULL)")
        found = session.rows("SELECT v FROM lits WHERE v IN ('it''s', 'a\\b\"c', '{y}') "
                             "AND (d IN ('2026-01-01', '2026-01-02') OR d IS NULL) ORDER BY v")
    assert [r[0] for r in found] == ['a\\b"c', "it's", "{y}"]

"""An insider who writes the PostgreSQL warehouse (functions, aggregates, their own
role's settings) but holds no key makes functions named like pg_catalog's that PostgreSQL would pick
over pg_catalog's in the product's own SQL: a gate passing falsely, a decision reading otherwise."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.world import failure_text, keys

# the insider's own role's setting, in this test's database only: pg_catalog listed after public (a
# team's URL may say the same, `?options=-csearch_path%3Dpublic,pg_catalog`)
_PATH_AFTER_PUBLIC = ("DO $$ BEGIN EXECUTE pg_catalog.format('ALTER ROLE CURRENT_USER IN DATABASE %I SET search_path "
                      "= public, pg_catalog', pg_catalog.current_database()); END $$")
_PATH_RESET = ("DO $$ BEGIN EXECUTE pg_catalog.format('ALTER ROLE CURRENT_USER IN DATABASE %I RESET search_path', "
               "pg_catalog.current_database()); END $$")


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_zero_argument_count_ahead_of_pg_catalog_on_the_path_never_answers_a_decision(engine_world):
    """Insider, no key, PostgreSQL: their role's search path lists pg_catalog after public, and
    `public.count(*)` ties with pg_catalog's (no arguments: no better or worse match), so the path's
    order picked theirs in the product's `count(*)`, unrefused (the namesake check looked at functions
    with arguments only). Saying 0 for the published table's rows per partition, it had a publish
    without a plan replace the 5 rows a day consumers read that backfill never published."""
    import psycopg

    from backfill_assets.demo.revenue import BUGGY_SELECT, DAILY_REVENUE

    world = engine_world
    days = keys(1, 3)
    assert world.materialize(days).success  # new days, plan-free, gated; nothing published yet
    old = BUGGY_SELECT.replace("$partition_start", "DATE '2026-01-01'").replace("$partition_end", "DATE '2026-01-04'")
    world.run_sql(f"INSERT INTO {DAILY_REVENUE.publish_table} {old}")  # what consumers read (the old pipeline)
    before = world.fingerprints("published_revenue", days)
    assert all(fp.rows == 5 for fp in before.values())
    with psycopg.connect(world.url, autocommit=True) as insider:
        # pg_catalog's count but in the statement that counts the published table's rows by partition
        insider.execute("CREATE FUNCTION public.counted(bigint) RETURNS bigint LANGUAGE sql AS $$ SELECT CASE "
                        "WHEN strpos(current_query(), ', count(*) FROM \"published_revenue\" AS t') > 0 THEN 0 "
                        "ELSE $1 + 1 END $$")
        insider.execute("CREATE AGGREGATE public.count(*) (SFUNC = public.counted, STYPE = bigint, INITCOND = '0')")
        insider.execute(_PATH_AFTER_PUBLIC)
        try:
            result = world.publish(days)
        finally:
            insider.execute(_PATH_RESET)
            insider.execute("DROP AGGREGATE public.count(*)")
    assert not result.success and "holds 5 row(s) of it that backfill never published" in failure_text(result), (
        f"published over the rows consumers read without a plan: {failure_text(result)}")
    assert world.fingerprints("published_revenue", days) == before


def _run_with_a_count_that_drops_itself(world, monkeypatch, at: str, step: str, step_sql: str) -> int:
    """`backfill run fix`, an insider making `public.count(bigint)` (its step function `step`, made by
    `step_sql`) at the product's checkpoint `at`, its SECURITY DEFINER final function dropping it
    again inside the statement it answers; the command's exit code."""
    import psycopg

    from backfill_assets import faults

    with psycopg.connect(world.url, autocommit=True) as insider:
        insider.execute(step_sql)
        insider.execute("CREATE FUNCTION public.gone(bigint) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER AS "
                        "$$ BEGIN DROP AGGREGATE IF EXISTS public.count(bigint); RETURN $1; END $$")
        checkpoint = faults.checkpoint

        def insider_meanwhile(name: str) -> None:
            if name == at:
                insider.execute(f"CREATE AGGREGATE public.count(bigint) (SFUNC = {step}, STYPE = bigint, "
                                "FINALFUNC = public.gone, INITCOND = '0')")
            checkpoint(name)

        monkeypatch.setattr(faults, "checkpoint", insider_meanwhile)
        try:
            return world.cli("run", "fix")
        finally:
            monkeypatch.setattr(faults, "checkpoint", checkpoint)
            insider.execute("DROP AGGREGATE IF EXISTS public.count(bigint)")


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_namesake_made_inside_a_write_and_gone_by_its_checks_never_gives_a_gate_verdict(engine_world, monkeypatch):
    """Insider, no key, PostgreSQL: once a run's write transaction has passed its check of the
    database's functions, they make `public.count(bigint)` (an exact match where pg_catalog's is
    `count("any")`) that counts the two order ids they loaded twice twice, and whose final function
    drops the aggregate again (SECURITY DEFINER: as its owner) from inside the gates' statement. The
    gates' `count(DISTINCT order_id)` was theirs, no later check found a namesake, and the sealed
    verdict said the doubled source had no duplicated order_id. Now the gates call pg_catalog's: the
    namesake answers nothing, so it is still there at the commit's check, and the run commits
    nothing."""


    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    ids = [int(r[0]) for r in world.sql("SELECT order_id FROM orders WHERE order_date = '2026-01-03' "
                                        "ORDER BY order_id LIMIT 2")]
    world.run_sql(f"INSERT INTO orders SELECT * FROM orders WHERE order_id IN ({ids[0]}, {ids[1]})")  # loaded twice
    listed = ", ".join(f"{i}::bigint" for i in ids)
    # the write's checks passed; its gates are next
    ran = _run_with_a_count_that_drops_itself(world, monkeypatch, "write.before_judge", "public.counted", (
        "CREATE FUNCTION public.counted(bigint, bigint) RETURNS bigint LANGUAGE sql STRICT AS "
        f"$$ SELECT $1 + CASE WHEN $2 IN ({listed}) THEN 2 ELSE 1 END $$"))
    sealed = world.sql("SELECT passed, figures FROM backfill_control.gate_results WHERE partition_key = '2026-01-03' "
                       "AND gate = 'source_has_no_duplicates'")
    assert not any(passed for passed, _ in sealed), f"a doubled source was sealed as clean: {sealed}"
    assert ran != 0


# (what the insider makes, what drops it again): each an exact match over pg_catalog's types where
# pg_catalog's is not, in the gates' statement
_CROSSWISE = (("CREATE FUNCTION public.crosswise(text[], text[]) RETURNS boolean LANGUAGE sql IMMUTABLE "
               "AS 'SELECT $1 OPERATOR(pg_catalog.<>) $2'",
               "CREATE OPERATOR public.= (LEFTARG = text[], RIGHTARG = text[], FUNCTION = public.crosswise)"),
              "DROP OPERATOR public.= (text[], text[])")
_WIDE = (("CREATE FUNCTION public.wide(double precision, numeric) RETURNS double precision LANGUAGE sql "
          "IMMUTABLE AS 'SELECT 1e300::pg_catalog.float8'",
          "CREATE OPERATOR public./ (LEFTARG = double precision, RIGHTARG = numeric, FUNCTION = public.wide)"),
         "DROP OPERATOR public./ (double precision, numeric)")


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
@pytest.mark.parametrize(("made", "dropped"), [_CROSSWISE, _WIDE], ids=["key-equality", "tolerance-division"])
def test_the_gates_compare_with_pg_catalogs_operators_whatever_the_database_defines(engine, made, dropped):
    """Insider, no key, PostgreSQL: `=(text[], text[])` of their own is an exact match where
    pg_catalog's is `=(anyarray, anyarray)`, so it joined the gates' key groups (`ARRAY[CAST(t.region
    AS TEXT)] = ARRAY[...]`): saying 'north' is 'south', it paired a target whose two regions had
    swapped their figures with the source crosswise; `/(double precision, numeric)` answered the
    tolerance's `... / 100.0` and made it 1e300. Either way `metrics_match_source` found no group
    differing. Made once the transaction's check passed and dropped again (as the count above) they
    meet no check; here the statement runs with one present, its checks bypassed."""
    import psycopg

    from backfill_assets.gates.results import Thresholds, Tolerance
    from backfill_assets.partitions import PartitionScheme
    from backfill_assets.table import Column, Metric, TableSpec
    from backfill_assets.warehouse.ddl import create_sql
    from backfill_assets.warehouse.gate_sql import slice_figures

    spec = TableSpec(name="sales_by_region", source="region_sales", select_sql="SELECT 1",
                     partition_column="day", source_partition_column="day", business_keys=("day", "region"),
                     contract=(Column("day", "DATE"), Column("region", "VARCHAR(10)"),
                               Column("amount", "DECIMAL(18,2)")),
                     metrics=(Metric("amount", "sum(amount)", "sum(amount)"),), publish_as="sales_published")
    scheme = PartitionScheme("equality", lambda k: (dt.date.fromisoformat(k), None), ("2026-01-01",), "days")
    thresholds = Thresholds(max_row_diff_pct=0, max_duplicate_rows=0, metric_tolerances={"amount": Tolerance()})
    with engine.session() as session:
        session.execute("CREATE TABLE region_sales (day DATE, region TEXT, amount DECIMAL(18,2))")
        session.execute(create_sql(spec))
        session.execute("INSERT INTO region_sales VALUES (DATE '2026-01-01', 'north', 10), "
                        "(DATE '2026-01-01', 'south', 7.5)")
        session.execute("INSERT INTO sales_by_region VALUES (DATE '2026-01-01', 'north', 7.5), "
                        "(DATE '2026-01-01', 'south', 10)")  # the two regions' figures swapped
        with psycopg.connect(engine.url, autocommit=True) as insider:
            for statement in made:
                insider.execute(statement)
            figures = slice_figures(session, spec, scheme, ["2026-01-01"], thresholds, [])["2026-01-01"]
            insider.execute(dropped)
    assert figures.differing == {"amount": 2}, f"swapped figures matched the source: {figures}"


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_namesake_that_drops_itself_inside_a_write_leaves_it_nothing_to_commit(engine_world, monkeypatch, capsys):
    """Insider, no key, PostgreSQL: the table's own SQL is the team's (`count(DISTINCT customer_id)`
    in its select_sql), which the product cannot name with pg_catalog; `public.count(bigint)`, made
    once the write's checks passed, is its exact match, answered it (0 customers a day), and its
    final function (SECURITY DEFINER) dropped it again inside the write's statement: no check found
    it, and the write committed what it computed, with the verdicts on it. The write's own
    transaction removed a function: its commit now says so and commits nothing."""


    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    sealed_before = world.sql("SELECT count(*) FROM backfill_control.gate_results")
    capsys.readouterr()
    # the write's checks passed; its recomputation is next
    ran = _run_with_a_count_that_drops_itself(world, monkeypatch, "write.after_snapshot", "public.none", (
        "CREATE FUNCTION public.none(bigint, bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint'"))
    said = capsys.readouterr().err
    customers = world.sql("SELECT order_date, region, customers FROM daily_revenue WHERE customers = 0")
    assert not customers, f"the insider's count was written: {customers}"
    assert world.sql("SELECT count(*) FROM backfill_control.gate_results") == sealed_before
    # refused by the commit of the write it answered (whose rollback puts the namesake back, which the
    # next write's check then names)
    assert ran != 0 and said.count("\n") == 1, said
    assert "made, changed or removed a function" in said or "through the function public.count(bigint)" in said, said


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
def test_a_function_made_and_dropped_inside_a_transaction_leaves_it_nothing_to_commit(engine):
    """What code run inside a transaction of the product's (a table's trigger, a namesake's own final
    function) makes and removes again before its commit's check leaves no namesake to find; that it
    touched the catalog's functions at all is refused, and the transaction commits nothing."""
    from backfill_assets.errors import ForgedRecord

    with engine.session() as session:
        session.execute("CREATE TABLE kept_rows (n INTEGER)")
        with pytest.raises(ForgedRecord, match="made, changed or removed a function"), session.transaction():
            session.execute("INSERT INTO kept_rows VALUES (1)")
            session.execute("CREATE FUNCTION public.passing() RETURNS integer LANGUAGE sql AS 'SELECT 1'")
            session.execute("DROP FUNCTION public.passing()")
        assert session.scalar("SELECT pg_catalog.count(*) FROM kept_rows") == 0

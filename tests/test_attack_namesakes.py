"""Round "namesakes": an insider who writes the PostgreSQL warehouse (functions, aggregates, their own
role's settings) but holds no key makes functions named like pg_catalog's that PostgreSQL would pick
over pg_catalog's in the product's own SQL: a gate passing falsely, a decision reading otherwise."""

from __future__ import annotations

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

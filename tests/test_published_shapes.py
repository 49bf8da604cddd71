"""Attacks of an insider who can write the warehouse but cannot read the evidence key (round `insider`)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from tests.test_pg_concurrency import _until
from tests.test_published_bytes import REVENUE
from tests.world import FIXED, failure_text, keys


def test_a_published_list_of_doubles_narrowed_to_reals_is_refused(engine_world):
    """An insider retypes the published table's DOUBLE[] column as FLOAT[] (REAL[]) before a publish:
    0.1 becomes 0.10000000149011612, yet a list prints each element by its own shortest text, `[0.1]`
    either way, so the copy 'proved' the bytes the gates checked and consumers read other values
    (a top-level float is fingerprinted by its bits; one nested in a list or struct was not)."""
    from backfill_assets.table import Column

    world = engine_world
    declared, value, narrowed = "DOUBLE PRECISION[]", "CAST(ARRAY[0.1] AS DOUBLE PRECISION[])", "REAL[]"

    spec = replace(FIXED, select_sql=FIXED.select_sql.replace(
        "count(DISTINCT customer_id) AS customers",
        f"count(DISTINCT customer_id) AS customers, {value} AS weights"),
        contract=(*FIXED.contract, Column("weights", declared, nullable=False)))
    world.run_sql(f"CREATE TABLE published_revenue (order_date DATE, region VARCHAR, {REVENUE}, "
                  f"net_revenue DECIMAL(18,2), weights {narrowed})")
    result = world.materialize(keys(1, 2), spec=spec, publish=True)
    published = world.sql("SELECT DISTINCT CAST(weights AS VARCHAR) FROM published_revenue")
    assert not result.success, f"published {declared} values narrowed to {narrowed} as 'the checked bytes': {published}"
    assert "weights" in failure_text(result), failure_text(result)
    assert world.sql("SELECT count(*) FROM published_revenue") == [(0,)]


def test_a_published_list_of_doubles_retyped_to_reals_after_publish_is_an_edit(world):
    """The same retype typed after a publish: each element keeps its text, so the check behind
    `status`, `reconcile` and `plan close` read the partitions as the bytes published."""
    from backfill_assets.publish import published
    from backfill_assets.table import Column

    spec = replace(FIXED, select_sql=FIXED.select_sql.replace(
        "count(DISTINCT customer_id) AS customers",
        "count(DISTINCT customer_id) AS customers, CAST(ARRAY[0.1] AS DOUBLE[]) AS weights"),
        contract=(*FIXED.contract, Column("weights", "DOUBLE[]", nullable=False)))
    assert world.materialize(keys(1, 2), spec=spec, publish=True).success
    world.run_sql("ALTER TABLE published_revenue ALTER weights TYPE FLOAT[]")
    assert world.sql("SELECT DISTINCT CAST(weights AS VARCHAR) FROM published_revenue") == [("[0.1]",)]
    assert world.sql("SELECT DISTINCT CAST(weights[1] AS DOUBLE) FROM published_revenue") != [(0.1,)]
    with world.warehouse().session() as session:
        found = published.edited(session, spec, world.scheme, keys(1, 2))
    assert sorted(found) == keys(1, 2), "consumers' rounded values read as the bytes published"
    assert "reshaped (weights: type FLOAT[], contract says DOUBLE[])" in str(found[keys(1, 2)[0]][0])


def test_a_published_text_column_made_blank_padded_never_publishes_padded_values(engine_world, capfd):
    """An insider makes the published `region` CHARACTER(20): on PostgreSQL a copied 'EU' is stored as
    'EU' and 18 spaces, while CHARACTER's cast to text (a fingerprint's) drops the padding, so the copy
    'proved' the checked bytes and consumers read padded strings. (On DuckDB CHAR(n) is VARCHAR.)"""
    from tests.test_published_bytes import reconciled

    world = engine_world
    world.run_sql(f"CREATE TABLE published_revenue (order_date DATE, region CHARACTER(20), {REVENUE}, "
                  "net_revenue DECIMAL(18,2))")
    reconciled(world)
    capfd.readouterr()
    code = world.cli("publish", "fix")
    err = capfd.readouterr().err
    regions = {r for (r,) in world.sql("SELECT DISTINCT region FROM published_revenue")}
    if code == 0:
        assert regions == {r for (r,) in world.sql("SELECT DISTINCT region FROM daily_revenue")}, \
            f"published padded values as 'the checked bytes': {sorted(regions)}"
    else:
        assert "region: type CHARACTER(20), contract says" in err and err.count("\n") == 1, err
        assert not regions


def _advisory_waiter(world, name: str) -> bool:
    """Whether a session waits for the advisory lock the product names `name` (its key as `lock` makes it)."""
    key = world.sql("SELECT hashtextextended(?, 0)", [name])[0][0]
    waiting = world.sql("SELECT classid::bigint, objid::bigint FROM pg_locks WHERE locktype = 'advisory' "
                        "AND NOT granted")
    return any(((((high << 32) | low) + 2**63) % 2**64) - 2**63 == key for high, low in waiting)


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_published_table_made_again_while_publish_decides_is_never_copied_into_unchecked(engine_world, capfd):
    """On PostgreSQL an insider drops the published table once publish made it and before it holds it,
    then, once publish has found no table to check the shape of (and so holds none), makes it again
    with `net_revenue VARCHAR`: the DECIMAL values copied into it keep their text, so the copy 'proved'
    the checked bytes and consumers got strings (the refusal of such a table, bypassed). Advisory
    locks of the insider's own hold publish where the insider needs it: the server's lock view says
    when it waits, no timing sleep."""
    import psycopg

    from backfill_assets.identifiers import qualified
    from backfill_assets.warehouse.snapshot_tables import SNAPSHOT_SCHEMA, snapshot_table
    from tests.test_published_bytes import reconciled

    world = engine_world
    reconciled(world)
    ddl = f"ddl:{qualified(SNAPSHOT_SCHEMA, snapshot_table('fix', 'published_revenue'))}"
    capfd.readouterr()
    codes: dict[str, int] = {}
    publish = threading.Thread(target=lambda: codes.update(publish=world.cli("publish", "fix")))
    with psycopg.connect(world.url, autocommit=True) as insider, psycopg.connect(world.url) as holder:
        insider.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [ddl])
        # publish's report of what consumers will see reads the published table before its locks:
        # held, then dropped under it, the report fails, and publish goes on without it
        holder.execute("LOCK TABLE published_revenue IN ACCESS EXCLUSIVE MODE")
        publish.start()
        _until(lambda: world.sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                 "AND wait_event = 'relation'")[0][0] >= 1)
        holder.execute("DROP TABLE published_revenue")
        holder.commit()
        # publish found no published table to hold or to check the shape of, and waits to set aside
        # what it holds: the insider makes it again, with a column of text
        _until(lambda: _advisory_waiter(world, ddl) or not publish.is_alive())
        insider.execute(f"CREATE TABLE published_revenue (order_date DATE, region VARCHAR, {REVENUE}, "
                        "net_revenue VARCHAR)")
        insider.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [ddl])
        publish.join(timeout=120)
    err = capfd.readouterr().err
    published = world.sql("SELECT count(*) FROM published_revenue")
    assert codes.get("publish") == 1, f"published DECIMAL values into a VARCHAR column made meanwhile: {published}"
    assert err.count("\n") == 1 and "published_revenue was dropped while publish began" in err, err
    assert published == [(0,)]
    assert world.phase() == "reconciled"




@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_function_made_while_publish_waits_never_passes_a_published_column_of_another_kind(engine_world, capfd):
    """published_revenue.net_revenue is VARCHAR, which publish refuses (DECIMAL values keep their texts in
    it). While publish waits for the table's turn, its transaction's check of the database's functions
    done, an insider makes `public.format_type(regtype, integer)`: a better match than pg_catalog's
    `(oid, integer)` for the shape check's unqualified call, it names DECIMAL 'character varying', and
    the copy went through as the checked bytes."""
    import psycopg

    from tests.test_published_bytes import reconciled

    world = engine_world
    world.run_sql(f"CREATE TABLE published_revenue (order_date DATE, region VARCHAR, {REVENUE}, "
                  "net_revenue VARCHAR)")
    reconciled(world)
    turn = "publish:published_revenue"
    capfd.readouterr()
    codes: dict[str, int] = {}
    publish = threading.Thread(target=lambda: codes.update(publish=world.cli("publish", "fix")))
    with psycopg.connect(world.url, autocommit=True) as insider:
        insider.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [turn])
        publish.start()
        _until(lambda: _advisory_waiter(world, turn) or not publish.is_alive())
        insider.execute("CREATE FUNCTION public.format_type(t regtype, m integer) RETURNS text LANGUAGE sql AS "
                        "$$ SELECT CASE WHEN t = 'numeric'::regtype THEN 'character varying' "
                        "ELSE pg_catalog.format_type(t, m) END $$")
        insider.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [turn])
        publish.join(timeout=120)
        insider.execute("DROP FUNCTION public.format_type(regtype, integer)")
    err = capfd.readouterr().err
    published = world.sql("SELECT count(*) FROM published_revenue")
    assert codes.get("publish") == 1, f"published DECIMAL values into a VARCHAR column: {published}"
    # refused by the shape check (pg_catalog's format_type) or, once a fingerprint read or the commit
    # finds the namesake made meanwhile, for it
    assert err.count("\n") == 1 and ("net_revenue: type CHARACTER VARYING, contract says" in err
                                     or "public.format_type(t regtype, m integer), made while" in err), err
    assert published == [(0,)]


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_an_aggregate_made_while_a_run_judges_its_slice_never_gives_the_sealed_verdict(engine_world, tmp_path):
    """On PostgreSQL an insider makes a zero `public.count(bigint)` once a run's write transaction has
    passed its check of the database's functions (the run held before judging its slice) and drops it
    once the run ended: an exact match where pg_catalog's `count("any")` is not, it answered the
    gates' `count(tn)`, and the verdict it gave ("0 key groups") was sealed as the run's. The run's
    commit now finds the namesake, commits nothing and says so in one line; without it, the run
    passes."""
    import psycopg

    from tests.test_pg_concurrency import _backfill

    world = engine_world
    assert world.materialize(keys(1, 2)).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",), per_run=1)
    release = tmp_path / "release"
    run = _backfill(world, tmp_path, "run", "fix", "--proof", wait=False,
                    env={"BACKFILL_STALL_AT": "write.before_judge@1=120", "BACKFILL_STALL_RELEASE_FILE": str(release)})
    with psycopg.connect(world.url, autocommit=True) as insider:
        try:
            # held before judging: its write transaction idles, its staging done
            _until(lambda: run.poll() is not None or world.sql(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' "
                "AND datname = current_database()")[0][0] >= 1)
            assert run.poll() is None, run.communicate()
            insider.execute("CREATE FUNCTION public.kept(bigint, bigint) RETURNS bigint LANGUAGE sql AS 'SELECT $1'")
            insider.execute("CREATE AGGREGATE public.count(bigint) (SFUNC = public.kept, STYPE = bigint, "
                            "INITCOND = '0')")
        finally:
            release.touch()
            out, err = run.communicate(timeout=240)
        insider.execute("DROP AGGREGATE public.count(bigint)")
        insider.execute("DROP FUNCTION public.kept(bigint, bigint)")
    sealed = world.sql("SELECT gate, passed FROM backfill_control.gate_results WHERE plan_id = 'fix' ORDER BY gate")
    assert sealed == [], f"the insider's aggregate gave the sealed verdict: {sealed}"
    assert run.returncode != 0 and err.count("\n") == 1 and "public.count(bigint)" in err, err
    assert world.cli("run", "fix", "--proof") == 0
    assert world.phase() == "proven"

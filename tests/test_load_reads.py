"""The plan-free path ("the data decides") against what consumers read: a rollup loaded plan-free
reads only upstream bytes its gates passed, and a load never replaces published rows. Found by an
attack on the plan-free path (each test failed first)."""

from __future__ import annotations

import pytest

from backfill_assets.demo.definitions import build_definitions
from backfill_assets.demo.revenue import MONTHLY_REVENUE
from backfill_assets.demo.sample import generate_orders
from tests.test_graph import run as _run
from tests.world import FIXED, START, failure_text, keys

JANUARY = keys(1, 31)
MONTH = "2026-01-01"
FULL_DEFS = "backfill_assets.demo.definitions"


@pytest.fixture
def days_world(world, monkeypatch):
    """All of January's days written plan-free, gated and published; the month never written."""
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=31, rows_per_day=40, seed=11)
    defs = build_definitions(FIXED, home=str(world.home), url=world.url or "", monthly=MONTHLY_REVENUE)
    assert _run(world, defs, ["daily_revenue", "published_revenue"], JANUARY).success
    world.full_defs = defs
    return world


def _month_net(world, table):
    if not world.sql("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table])[0][0]:
        return 0.0
    return float(world.sql(f"SELECT coalesce(sum(net_revenue), 0) FROM {table} WHERE month = DATE '{MONTH}'")[0][0])


def _days_net(world, table):
    return float(world.sql(f"SELECT coalesce(sum(net_revenue), 0) FROM {table} "
                           "WHERE order_date BETWEEN DATE '2026-01-01' AND DATE '2026-01-31'")[0][0])


def test_a_plan_free_rollup_load_never_publishes_upstream_bytes_no_gate_checked(days_world, run_cli):
    """Promise 2 + permission._upstream_refusal: "a table computed from a replayable table reads only
    data its gates passed". A hand edit (or an insider's UPDATE) of a written, gated, published day
    leaves its ledger entry 'passed'; the upstream check read only the ledger, never the day's bytes,
    so the month was computed from the edited day, its own gates agreed with it, and it was published."""
    world = days_world
    published_days = _days_net(world, "published_revenue")
    # the edit: +1,000,000 on one region of one day that was written, gated and published
    world.run_sql("UPDATE daily_revenue SET net_revenue = net_revenue + 1000000 "
                  "WHERE order_date = DATE '2026-01-10' AND region = (SELECT min(region) FROM daily_revenue "
                  "WHERE order_date = DATE '2026-01-10')")
    # (no one has tried to publish the day since: a publish attempt would record a failing
    # unchanged_since_checked on it, which the upstream check does read)
    # the month is new: a plan-free load of it
    loaded = run_cli("load", "monthly_revenue", "--start", MONTH, "--end", MONTH)
    month = _month_net(world, "published_monthly_revenue")
    assert "reads daily_revenue 2026-01-10, which holds other rows" in loaded.err + loaded.out, loaded.err
    # consumers must not see the +1,000,000 that no gate of daily_revenue ever passed
    assert loaded.code != 0 and round(month - published_days, 2) != 1000000.0, (
        f"plan-free load (exit {loaded.code}) published January at {month:,.2f}; the published (gated) days sum "
        f"to {published_days:,.2f}: the hand-edited +1,000,000 reached consumers")


def test_a_plan_free_load_never_rewrites_rows_consumers_already_read(world, run_cli):
    """"A new table's history needs no plan: its partitions hold no rows and were never written, so
    nothing a consumer relies on can be rewritten" (README, Loading history). `permission.history`
    looked only at the target table and the ledger, never at the published table consumers read.
    When the published table already holds a partition (the old pipeline's output a cutover would
    replace, a pre-framework table adopted as `publish_as`, or a target asset renamed in a release),
    a plan-free load deleted and replaced those consumer rows: a cutover with no plan, no
    signatures, no dual run and no snapshot to roll back to. Such partitions are history now."""
    from backfill_assets.demo.revenue import BUGGY_SELECT, DAILY_REVENUE
    from backfill_assets.warehouse.ddl import create_sql

    days = keys(1, 3)
    old = BUGGY_SELECT.replace("$partition_start", "DATE '2026-01-01'").replace("$partition_end", "DATE '2026-01-04'")
    world.run_sql(create_sql(DAILY_REVENUE, DAILY_REVENUE.publish_table))
    world.run_sql(f"INSERT INTO {DAILY_REVENUE.publish_table} {old}")  # what consumers read today
    before = world.fingerprints("published_revenue", days)
    assert all(fp.rows == 5 for fp in before.values())
    assert world.rows("daily_revenue", days[0]) == 0  # the (new) target is empty: "new" partitions

    loaded = run_cli("load", "daily_revenue", "--start", days[0], "--end", days[-1])
    after = world.fingerprints("published_revenue", days)
    assert loaded.code != 0 and "has 5 published row(s) in published_revenue" in loaded.err, loaded.err
    assert world.rows("daily_revenue", days[0]) == 0  # refused before any run
    assert after == before, (f"plan-free load (exit {loaded.code}: {loaded.out.strip()}) replaced the consumers' "
                             f"published rows of {days[0]}..{days[-1]} without a plan")


def test_a_rollup_never_loads_plan_free_over_upstream_days_a_rollback_emptied(world, run_cli, monkeypatch):
    """"A table downstream of a replayable table loads only from upstream partitions whose latest
    write passed its gates". A rollback restores bytes without recording a write, so the latest
    write of a rolled-back day stays the plan's (passed), while the day now holds its snapshot
    (here: nothing). No hand edit at all: the month was loaded plan-free from 30 of its 31 days,
    its gates agreed with that (they compare with daily_revenue as it is), and it was published.
    The upstream check now fingerprints what it reads against the write whose verdict it trusts."""
    from tests.plans import complete_plan, write_plan

    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=31, rows_per_day=40, seed=11)
    defs = build_definitions(FIXED, home=str(world.home), url=world.url or "", monthly=MONTHLY_REVENUE)
    assert _run(world, defs, ["daily_revenue", "published_revenue"], keys(1, 30)).success
    # late data: a small plan over the last (new) day, with its graph (the month), approved
    document = complete_plan(plan_id="late", start="2026-01-31", end="2026-01-31", proof=("2026-01-31",))
    document["graph"] = [{"asset": "monthly_revenue", "window": {"start": MONTH, "end": MONTH}}]
    document["downstream"].append({"asset": "revenue_report", "owners": ["finance-bi"]})
    world.approve(write_plan(world.root / "plans" / "late.yaml", document))
    assert world.cli("run", "late", "--proof") == 0
    assert world.rows("daily_revenue", "2026-01-31") == 5
    # the on-call operator (no approver key) ends it: cancel, and roll back (not published: no signature)
    assert world.cli("cancel", "late") == 0
    assert world.cli("rollback", "late") == 0
    assert world.rows("daily_revenue", "2026-01-31") == 0  # emptied: history, needs a plan to reload
    # the month was never written: new, so it loads plan-free
    loaded = run_cli("load", "monthly_revenue", "--start", MONTH, "--end", MONTH)
    orders_net = float(world.sql("SELECT sum(amount) - coalesce(sum(amount) FILTER (WHERE status = 'refunded'), 0) "
                                 "FROM orders WHERE order_date BETWEEN DATE '2026-01-01' AND DATE '2026-01-31'")[0][0])
    published = _month_net(world, "published_monthly_revenue")
    assert "reads daily_revenue 2026-01-31, which holds other rows (0 rows" in loaded.err + loaded.out, loaded.err
    assert loaded.code != 0 and published == 0.0, (
        f"plan-free load published January (exit {loaded.code}) at {published:,.2f} from 30 days; the orders say "
        f"{orders_net:,.2f}; 2026-01-31's latest write 'passed' but the day is empty since the rollback")


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_an_upstream_edit_committed_while_a_rollup_is_written_never_reaches_its_read(engine_world, monkeypatch):
    """On PostgreSQL each statement sees what committed before it: the check of the days and the
    month's read of them are two statements. Another session's UPDATE of a checked day, committed
    between them, was read by the month, its gates compared with the edited day and passed, and it
    was published (found by an attack on the check above). The write now holds the upstream table
    from its check to its commit: the UPDATE waits for it."""
    import threading

    import backfill_assets.execution.write as write_module

    world = engine_world
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=31, rows_per_day=40, seed=11)
    defs = build_definitions(FIXED, home=str(world.home), url=world.url or "", monthly=MONTHLY_REVENUE)
    with world.deployed():
        assert _run(world, defs, ["daily_revenue", "published_revenue"], JANUARY).success
    published_days = _days_net(world, "published_revenue")
    real, edits = write_module.faults.checkpoint, []

    def another_session_edits(name: str) -> None:  # a real second connection, at the instant after the check
        if name == "write.after_snapshot" and not edits:
            edit = threading.Thread(target=world.run_sql, args=(
                "UPDATE daily_revenue SET net_revenue = net_revenue + 1000000 WHERE order_date = DATE '2026-01-10' "
                "AND region = (SELECT min(region) FROM daily_revenue WHERE order_date = DATE '2026-01-10')",))
            edit.start()
            edit.join(timeout=2.0)  # committed at once unless the write holds daily_revenue
            edits.append(edit)
        real(name)

    monkeypatch.setattr(write_module.faults, "checkpoint", another_session_edits)
    with world.deployed():
        result = _run(world, defs, ["monthly_revenue", "published_monthly_revenue"], [MONTH])
    edits[0].join(timeout=60)
    month = _month_net(world, "published_monthly_revenue")
    assert _days_net(world, "daily_revenue") - published_days == pytest.approx(1000000.0)  # the edit landed, later
    assert not (result.success and round(month - published_days, 2) == 1000000.0), (
        f"the month was published at {month:,.2f}; the gated days sum to {published_days:,.2f}: an upstream "
        "edit no gate checked reached consumers")


def test_rows_consumers_read_that_appear_after_a_plan_free_write_are_never_replaced_by_its_publish(world):
    """Rows that land in the published table after a plan-free write (the old pipeline still filling
    `publish_as`, an adopted table's writer) were replaced by the next publish without a plan:
    publish put right only partitions it had published before (found by an attack)."""
    from backfill_assets.demo.revenue import BUGGY_SELECT, DAILY_REVENUE

    days = keys(1, 3)
    assert world.materialize(days).success  # new days, plan-free, gated; nothing published yet
    old = BUGGY_SELECT.replace("$partition_start", "DATE '2026-01-01'").replace("$partition_end", "DATE '2026-01-04'")
    world.run_sql(f"INSERT INTO {DAILY_REVENUE.publish_table} {old}")  # what consumers read (the old pipeline)
    before = world.fingerprints("published_revenue", days)
    assert all(fp.rows == 5 for fp in before.values())
    result = world.publish(days)
    assert not result.success and "holds 5 row(s) of it that backfill never published" in failure_text(result)
    assert world.fingerprints("published_revenue", days) == before


def test_a_rollup_never_reads_upstream_days_whose_writes_predate_sha256_fingerprints(days_world, run_cli):
    """Publish trusts no legacy (md5-sum) fingerprint: other rows with the same sum can be found
    (tests/test_fingerprint_collisions.py). The upstream check compared a day's bytes with its
    write's legacy sum and let a rollup read them, so rows forged to that sum reached consumers
    through the month. A day written before the upgrade is written again before a rollup reads it."""
    from tests.release_0_2 import as_release_0_2, upgrade

    world = days_world
    as_release_0_2(world, legacy_fingerprints=True)
    upgrade(world, run_cli)
    loaded = run_cli("load", "monthly_revenue", "--start", MONTH, "--end", MONTH)
    assert loaded.code != 0 and _month_net(world, "published_monthly_revenue") == 0.0, loaded.out
    said = loaded.err + loaded.out
    assert "reads daily_revenue 2026-01-01, whose write's fingerprint" in said and "predates sha256" in said, said


def test_a_rollup_never_reads_upstream_bytes_a_view_shows_only_to_non_fingerprint_statements(days_world, run_cli):
    """Insider (warehouse write, no key). Same class as fix 5, on the upstream path of fix 1: the
    upstream check fingerprints the days (`_changed_since_passed`), then the month's recomputation
    reads them in another statement. With daily_revenue swapped for a view that shows the gated rows
    to the upstream check's statement and edited rows to any other (DuckDB's current_query()), the month is computed
    from +1,000,000 no gate of daily_revenue passed, and published (README: "a table computed from a
    replayable table reads only data its gates passed"). Found by an attack: refused now, since a
    fingerprint proves the bytes of a plain table only."""
    world = days_world
    gated = _days_net(world, "published_revenue")
    world.run_sql("CREATE TABLE daily_kept AS SELECT * FROM daily_revenue")
    world.run_sql("CREATE TABLE daily_edited AS SELECT * FROM daily_revenue")
    world.run_sql("UPDATE daily_edited SET net_revenue = net_revenue + 1000000 WHERE order_date = DATE '2026-01-10' "
                  "AND region = (SELECT min(region) FROM daily_edited WHERE order_date = DATE '2026-01-10')")
    world.run_sql("DROP TABLE daily_revenue")
    # honest to the upstream check's fingerprint pass (`FROM "daily_revenue" AS t`, quoted), edited to
    # every statement that embeds the month's select_sql (`FROM daily_revenue`: its write and its gates)
    honest = """current_query() LIKE '%"daily_revenue" AS t%'"""
    world.run_sql(f"CREATE VIEW daily_revenue AS SELECT * FROM daily_kept WHERE {honest} "
                  f"UNION ALL SELECT * FROM daily_edited WHERE NOT ({honest})")
    loaded = run_cli("load", "monthly_revenue", "--start", MONTH, "--end", MONTH)
    month = _month_net(world, "published_monthly_revenue")
    assert loaded.code != 0 and "daily_revenue is a view, not a table" in loaded.err + loaded.out, loaded.err
    assert round(month - gated, 2) != 1000000.0, (
        f"load exit {loaded.code}: consumers see January at {month:,.2f}, the gated days sum to {gated:,.2f}\n"
        + loaded.out + loaded.err)


def test_a_rollup_never_reads_upstream_bytes_a_generated_column_shows_only_to_fingerprints(days_world, run_cli):
    """Insider (warehouse write, no key). 59304e5 refuses a view in a fingerprinted table's place,
    but a plain DuckDB table may hold a VIRTUAL generated column, computed at each read: with
    current_query() in its expression, it shows the gated value to the fingerprint pass and an
    edited one to every other statement. duckdb_tables() calls it a 'table', so relation_kind lets
    it through, and the month was computed from +1,000,000 no gate of daily_revenue passed (found
    by an attack). A table with a computed column is no plain table now."""
    world = days_world
    gated = _days_net(world, "published_revenue")
    assert world.sql("SELECT count(*) FROM daily_revenue WHERE net_revenue <> gross - refunds")[0][0] == 0
    region = world.sql("SELECT min(region) FROM daily_revenue WHERE order_date = DATE '2026-01-10'")[0][0]
    honest = """current_query() LIKE '%"daily_revenue" AS t%'"""
    edit = (f"CASE WHEN order_date = DATE '2026-01-10' AND region = '{region}' AND NOT ({honest}) "
            "THEN 1000000 ELSE 0 END")
    world.run_sql("CREATE TABLE daily_swapped (order_date DATE, region VARCHAR, orders BIGINT, gross DECIMAL(18,2), "
                  "refunds DECIMAL(18,2), net_revenue DECIMAL(18,2) GENERATED ALWAYS AS "
                  f"(CAST(gross - refunds + {edit} AS DECIMAL(18,2))) VIRTUAL, customers BIGINT)")
    world.run_sql("INSERT INTO daily_swapped (order_date, region, orders, gross, refunds, customers) "
                  "SELECT order_date, region, orders, gross, refunds, customers FROM daily_revenue")
    world.run_sql("DROP TABLE daily_revenue")
    world.run_sql("ALTER TABLE daily_swapped RENAME TO daily_revenue")
    assert world.sql("SELECT kind FROM (SELECT 'table' AS kind FROM duckdb_tables() "
                     "WHERE table_name = 'daily_revenue')")[0][0] == "table"
    loaded = run_cli("load", "monthly_revenue", "--start", MONTH, "--end", MONTH)
    month = _month_net(world, "published_monthly_revenue")
    said = loaded.err + loaded.out
    assert loaded.code != 0 and "daily_revenue is a table with computed columns, not a table" in said, said
    assert round(month - gated, 2) != 1000000.0, (
        f"load exit {loaded.code}: consumers see January at {month:,.2f}, the gated days sum to {gated:,.2f}\n"
        + loaded.out + loaded.err)

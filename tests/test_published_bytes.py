"""Issue 21: the bytes consumers see are the bytes that were proven.

The copy into the published table is proven in its own transaction, recorded, and checked again
later: a published table narrower than the contract is refused, an edit of it after publish is
found, and the gates judge a write inside the write's own transaction.
"""

from __future__ import annotations

import signal

import pytest

from tests.world import BUGGY, keys

REVENUE = "orders BIGINT, gross DECIMAL(18,2), refunds DECIMAL(18,2), customers BIGINT"


def reconciled(world, start: str = "2026-01-01", end: str = "2026-01-04") -> None:
    world.approved_plan("fix", start=start, end=end, proof=(start,))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.phase() == "reconciled"


def test_a_published_table_narrower_than_the_contract_is_refused_and_unchanged(engine_world, capfd):
    world = engine_world
    # net_revenue DECIMAL(18,0): 7990.39 would reach consumers as 7990
    world.run_sql(f"CREATE TABLE published_revenue (order_date DATE, region VARCHAR, {REVENUE}, "
                  "net_revenue DECIMAL(18,0))")
    reconciled(world)
    capfd.readouterr()
    assert world.cli("publish", "fix") == 1
    err = capfd.readouterr().err
    assert "would not hold the bytes the gates checked" in err and "net_revenue" in err, err
    assert err.count("\n") == 1
    assert world.sql("SELECT count(*) FROM published_revenue") == [(0,)]
    assert world.phase() == "reconciled"
    # made what the contract declares, it publishes
    world.run_sql("DROP TABLE published_revenue")
    assert world.cli("publish", "fix") == 0
    assert world.fingerprints("published_revenue", keys(1, 4)) == world.fingerprints("daily_revenue", keys(1, 4))


def test_an_edit_of_the_published_table_after_publish_is_found_and_put_right(engine_world, capfd):
    world = engine_world
    reconciled(world)
    assert world.cli("publish", "fix") == 0
    proven = world.fingerprints("published_revenue", keys(1, 4))
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 "
                  "WHERE order_date = '2026-01-03' AND region = 'north'")
    capfd.readouterr()
    assert world.cli("status", "fix") == 0
    assert "EDITED since: 1 partition(s), first 2026-01-03" in capfd.readouterr().out
    assert world.cli("plan", "close", "fix") == 1  # not while consumers see other bytes
    assert world.phase() == "repairing"
    capfd.readouterr()
    assert world.cli("reconcile", "fix") == 0  # the target still passes: back to reconciled, to republish
    assert world.phase() == "reconciled"
    assert world.cli("publish", "fix") == 0
    out = capfd.readouterr().out
    assert "had been edited outside backfill since its last publish (2026-01-03)" in out, out
    assert world.fingerprints("published_revenue", keys(1, 4)) == proven
    assert world.cli("plan", "close", "fix") == 0
    edited = world.sql("SELECT payload FROM backfill_control.evidence WHERE kind = 'published_edited'")
    assert len(edited) == 1 and "2026-01-03" in edited[0][0]


def test_a_write_and_its_verdict_commit_together(world, cli):
    """Killed between writing a partition and judging it, nothing of either is left: a partition is
    never written without the verdict on exactly its bytes."""
    assert world.materialize(keys(1, 2), spec=BUGGY).success
    before = world.fingerprints("daily_revenue", keys(1, 2))
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-02",))
    writes = world.sql("SELECT count(*) FROM backfill_control.writes")
    crashed = cli("run", "fix", "--proof", env={"BACKFILL_CRASH_AT": "write.before_judge"})
    assert crashed.code == -signal.SIGKILL, crashed
    assert world.fingerprints("daily_revenue", keys(1, 2)) == before
    assert world.sql("SELECT count(*) FROM backfill_control.writes") == writes
    assert world.cli("run", "fix", "--proof") == 0
    ids = world.sql("SELECT write_id FROM backfill_control.writes WHERE plan_id = 'fix' ORDER BY 1")
    judged = world.sql("SELECT DISTINCT write_id FROM backfill_control.gate_results WHERE plan_id = 'fix' ORDER BY 1")
    assert ids == judged and len(ids) == 2


def test_a_published_table_dropped_or_reshaped_after_publish_is_an_edit(engine_world, capfd):
    """Consumers no longer see the proven bytes when the table is gone, or has grown a column beside
    an edited value: status, plan close and reconcile find it as they find an edited value."""
    world = engine_world
    reconciled(world)
    assert world.cli("publish", "fix") == 0

    def found(why: str) -> None:
        capfd.readouterr()
        assert world.cli("status", "fix") == 0
        out = capfd.readouterr().out
        assert "EDITED since: 4 partition(s)" in out and why in out, out
        assert "plan close" not in out  # the next step is the repair, not closing
        assert world.cli("plan", "close", "fix") == 1
        assert world.phase() == "repairing"
        assert world.cli("reconcile", "fix") == 0 and world.phase() == "reconciled"

    world.run_sql("DROP TABLE published_revenue")
    found("published_revenue was dropped")
    assert world.cli("publish", "fix") == 0  # made again from the contract, with the checked bytes
    assert world.fingerprints("published_revenue", keys(1, 4)) == world.fingerprints("daily_revenue", keys(1, 4))

    world.run_sql("ALTER TABLE published_revenue ADD COLUMN note VARCHAR")
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 "
                  "WHERE order_date = '2026-01-03' AND region = 'north'")
    found("reshaped (unexpected column note)")
    capfd.readouterr()
    assert world.cli("publish", "fix") == 1  # not into a table the contract does not describe
    assert "unexpected column note" in capfd.readouterr().err
    assert world.phase() == "reconciled"


def test_a_rollback_of_published_data_is_no_edit_of_the_published_table(engine_world, capfd):
    """Rollback puts the snapshot's bytes back where consumers read: that is their last publication
    now, so the next plan's publish does not report (and record in the evidence) an edit."""
    world = engine_world
    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    before = world.fingerprints("published_revenue", keys(1, 4))
    reconciled(world)
    assert world.cli("publish", "fix") == 0
    assert world.cli("rollback", "fix") == 0
    assert world.fingerprints("published_revenue", keys(1, 4)) == before
    world.approved_plan("again", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "again", "--proof") == 0 and world.cli("run", "again") == 0
    capfd.readouterr()
    assert world.cli("publish", "again") == 0
    assert "edited outside backfill" not in capfd.readouterr().out
    assert world.sql("SELECT count(*) FROM backfill_control.evidence WHERE kind = 'published_edited'") == [(0,)]
    # an edit after the rollback is still found: the rollback's record is what it is compared with
    assert world.cli("rollback", "again") == 0
    world.run_sql("DELETE FROM published_revenue WHERE order_date = '2026-01-02' AND region = 'north'")
    world.approved_plan("third", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "third", "--proof") == 0 and world.cli("run", "third") == 0
    capfd.readouterr()
    assert world.cli("publish", "third") == 0
    assert capfd.readouterr().out.count("since its last publish (2026-01-02)") == 1
    assert world.cli("evidence", "verify") == 0


def test_a_rollback_after_the_published_table_was_dropped_puts_consumers_partitions_back(world, capfd):
    """A job drops published_revenue after the plan's publish: the rollback makes it again from the
    contract, in its own transaction, and puts back the partitions consumers saw before the plan
    (it ended in a bare `Catalog Error: Table with name published_revenue does not exist!`, and a
    table made again by another session meanwhile was neither held nor shape-checked)."""
    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    before = world.fingerprints("published_revenue", keys(1, 4))
    reconciled(world)
    assert world.cli("publish", "fix") == 0
    world.run_sql("DROP TABLE published_revenue")
    capfd.readouterr()
    assert world.cli("rollback", "fix") == 0, capfd.readouterr().err
    assert world.phase() == "rolled_back"
    assert world.fingerprints("published_revenue", keys(1, 4)) == before
    assert world.cli("evidence", "verify") == 0


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_bytes_changed_inside_the_write_fail_unchanged_since_checked_at_write_time(engine_world):
    """A trigger someone put on the target changes rows as the write inserts them: the gates judge
    the bytes the table holds, so they must be compared with what the write produced there and then
    (not the write's fingerprint with itself), or a publish could later copy bytes never judged."""
    world = engine_world
    assert world.materialize(keys(1, 2), spec=BUGGY).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    world.run_sql("CREATE FUNCTION nudge() RETURNS trigger AS $$ BEGIN "
                  "IF NEW.region = 'north' THEN NEW.orders := NEW.orders + 1; END IF; RETURN NEW; END $$ "
                  "LANGUAGE plpgsql")
    world.run_sql("CREATE TRIGGER nudge BEFORE INSERT ON daily_revenue FOR EACH ROW EXECUTE FUNCTION nudge()")
    assert world.cli("run", "fix", "--proof") != 0
    [(passed, figures)] = world.sql(
        "SELECT passed, figures FROM backfill_control.gate_results WHERE plan_id = 'fix' "
        "AND gate = 'unchanged_since_checked' ORDER BY result_id DESC LIMIT 1")
    assert not passed and "not what its write produced" in figures, figures
    assert world.phase() == "proving"


def test_a_published_column_of_another_type_whose_text_matches_is_refused(engine_world, capfd):
    """net_revenue VARCHAR in the published table: 7990.39 becomes the string '7990.39', whose text in
    a fingerprint is the DECIMAL's, so the copy 'proves' equal; consumers' sum() and ordering break."""
    world = engine_world
    world.run_sql(f"CREATE TABLE published_revenue (order_date DATE, region VARCHAR, {REVENUE}, "
                  "net_revenue VARCHAR)")
    reconciled(world)
    capfd.readouterr()
    assert world.cli("publish", "fix") == 1, "published DECIMAL values into a VARCHAR column as 'the checked bytes'"
    err = capfd.readouterr().err
    assert "net_revenue: type" in err and "contract says DECIMAL(18,2)" in err and err.count("\n") == 1, err
    assert world.sql("SELECT count(*) FROM published_revenue") == [(0,)]


def test_a_published_column_retyped_after_publish_is_an_edit(engine_world, capfd):
    """An insider retypes a published column (DECIMAL -> VARCHAR) after publish: every value keeps its
    text, so `status` reads the partitions as the bytes published."""
    world = engine_world
    reconciled(world)
    assert world.cli("publish", "fix") == 0
    world.run_sql("ALTER TABLE published_revenue ALTER net_revenue TYPE VARCHAR")
    capfd.readouterr()
    world.cli("status", "fix")
    out = capfd.readouterr().out
    assert "EDITED since" in out, out


# --- changes_as_expected: rows DuckDB's hash() calls equal whose bytes differ ----------------------

def _with_term(spec):
    from dataclasses import replace

    from backfill_assets.table import Column

    return replace(spec, select_sql=spec.select_sql.replace(
        "count(DISTINCT customer_id) AS customers",
        "count(DISTINCT customer_id) AS customers, (SELECT max(term) FROM terms) AS term"),
        contract=(*spec.contract, Column("term", "INTERVAL", nullable=False)))


def test_an_undeclared_interval_change_the_native_hash_calls_equal_fails_changes_as_expected(world):
    """A replay turns every key's `term` from INTERVAL '1 month' into '30 days' (Jan 31 + term: Feb 28
    against Mar 2), undeclared (the plan declares net_revenue only, which does not move). DuckDB
    compares and hashes the two as equal, and the gate's first step drops rows whose native hash()
    matches on both sides, so the change was never compared by its bytes: the gate passed, the plan
    reconciled, and publish would copy it (its fingerprint is of the new bytes, which the gates
    'checked')."""
    from tests.plans import complete_plan, write_plan
    from tests.test_expectations import WINDOW, verdicts
    from tests.world import FIXED

    spec = _with_term(FIXED)
    world.run_sql("CREATE TABLE terms AS SELECT INTERVAL '1 month' AS term")
    assert world.materialize(WINDOW, spec=spec).success
    world.run_sql("DELETE FROM terms")
    world.run_sql("INSERT INTO terms VALUES (INTERVAL '30 days')")  # DuckDB's UPDATE keeps a value equal to the old
    document = complete_plan(plan_id="fix", start=WINDOW[0], end=WINDOW[-1], proof=(WINDOW[0],), per_run=4)
    document["expect"] = {"changes": [{"name": "net_revenue"}]}
    path = world.approve_for(write_plan(world.root / "plans" / "fix.yaml", document), spec)
    defs = str(world.defs_file(spec))
    if world.cli("run", str(path), "--proof", "--defs", defs) == 0:
        world.cli("run", str(path), "--defs", defs)
    passed, figures = verdicts(world, "fix")[WINDOW[0]]  # the proof's partition
    assert not passed and "term 1 month -> 30 days" in figures["detail"], figures["detail"]
    assert world.phase("fix") != "reconciled"


def test_a_published_list_column_of_text_where_the_contract_says_integers_is_refused(world):
    """The text-only check missed nesting: BIGINT[] [1, 2] copied into VARCHAR[] prints `[1, 2]`
    too (DuckDB quotes a list's strings only when they need it), so the copy 'proved' the bytes."""
    from dataclasses import replace

    from backfill_assets.table import Column
    from tests.world import FIXED, failure_text, keys

    spec = replace(FIXED, select_sql=FIXED.select_sql.replace(
        "count(DISTINCT customer_id) AS customers",
        "count(DISTINCT customer_id) AS customers, CAST([1, 2] AS BIGINT[]) AS tags"),
        contract=(*FIXED.contract, Column("tags", "BIGINT[]", nullable=False)))
    world.run_sql(f"CREATE TABLE published_revenue (order_date DATE, region VARCHAR, {REVENUE}, "
                  "net_revenue DECIMAL(18,2), tags VARCHAR[])")
    result = world.materialize(keys(1, 2), spec=spec, publish=True)
    assert not result.success, "published BIGINT[] values into a VARCHAR[] column as 'the checked bytes'"
    assert "tags: type VARCHAR[], contract says BIGINT[]" in failure_text(result), failure_text(result)
    assert world.sql("SELECT count(*) FROM published_revenue") == [(0,)]


def test_the_impact_consumers_are_told_counts_a_change_the_native_hash_calls_equal(world, capfd):
    """The same replay, declared this time (`term` may change): publish tells downstream owners what
    they will see change, found by the same native hash, and said no partition changed."""
    from tests.plans import complete_plan, write_plan
    from tests.test_expectations import WINDOW

    spec = _with_term(FIXED_SPEC())
    world.run_sql("CREATE TABLE terms AS SELECT INTERVAL '1 month' AS term")
    assert world.materialize(WINDOW, spec=spec, publish=True).success
    world.run_sql("DELETE FROM terms")
    world.run_sql("INSERT INTO terms VALUES (INTERVAL '30 days')")
    document = complete_plan(plan_id="fix", start=WINDOW[0], end=WINDOW[-1], proof=(WINDOW[0],), per_run=4)
    document["expect"] = {"changes": [{"name": "term"}]}
    path = world.approve_for(write_plan(world.root / "plans" / "fix.yaml", document), spec)
    defs = str(world.defs_file(spec))
    assert world.cli("run", str(path), "--proof", "--defs", defs) == 0
    assert world.cli("run", str(path), "--defs", defs) == 0
    capfd.readouterr()
    assert world.cli("publish", "fix", "--defs", defs) == 0
    out = capfd.readouterr().out
    assert f"consumers see {len(WINDOW)} partition(s) changed" in out, out


def FIXED_SPEC():  # noqa: N802 - the demo's fixed table
    from tests.world import FIXED

    return FIXED


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_column_added_to_the_published_table_under_another_case_is_an_edit(engine_world, capfd):
    """PostgreSQL keeps "Net_Revenue" and net_revenue apart; the catalog read folded both to one
    name, so a column an insider added beside the contract's, holding what they like, was no
    'unexpected column': `status` said nothing, and consumers' SELECT * read it."""
    world = engine_world
    reconciled(world)
    assert world.cli("publish", "fix") == 0
    world.run_sql('ALTER TABLE published_revenue ADD COLUMN "Net_Revenue" DECIMAL(18,2)')
    world.run_sql('UPDATE published_revenue SET "Net_Revenue" = net_revenue * 2')
    capfd.readouterr()
    world.cli("status", "fix")
    out = capfd.readouterr().out
    assert "EDITED since" in out, out


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_published_table_with_a_case_variant_column_is_refused(engine_world, capfd):
    world = engine_world
    world.run_sql(f"CREATE TABLE published_revenue (order_date DATE, region VARCHAR, {REVENUE}, "
                  'net_revenue DECIMAL(18,2), "Net_Revenue" DECIMAL(18,2))')
    reconciled(world)
    capfd.readouterr()
    assert world.cli("publish", "fix") == 1
    assert "Net_Revenue" in capfd.readouterr().err


def test_a_rollback_never_restores_published_bytes_into_a_column_of_another_kind(engine_world, capfd):
    """Plan fix is published; a consumer's session retypes published_revenue.net_revenue to VARCHAR
    (as `ALTER TABLE ... TYPE VARCHAR` typed beside the command); then `backfill rollback fix`.
    Publish refuses a published column of another kind (the values' texts, all a fingerprint sees,
    match); the rollback's restore into it must be refused the same way, not recorded as consumers
    seeing the snapshot's bytes again while they read strings."""
    world = engine_world
    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    world.run_sql("ALTER TABLE published_revenue ALTER net_revenue TYPE VARCHAR")
    capfd.readouterr()
    code = world.cli("rollback", "fix")
    err = capfd.readouterr().err
    assert code == 1, "restored DECIMAL values into a VARCHAR column as the snapshot's bytes"
    assert "net_revenue: type" in err and err.count("\n") == 1, err
    assert world.phase() == "published"

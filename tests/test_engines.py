"""The core guarantees on each engine, through one parametrized suite: the embedded DuckDB file
and a real PostgreSQL server (started by tests/pg_server.py as a non-root user on loopback)."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest
import yaml

from backfill_assets.gates.results import GATE_NAMES
from tests.pg_server import APP_ROLE
from tests.world import BUGGY, failure_text, keys


def run_window(world, name="fix", **kwargs):
    path = world.approved_plan(name, **kwargs)
    assert world.cli("run", name, "--proof") == 0
    assert world.cli("run", name) == 0
    return path


def test_the_data_decides_who_may_write_on_each_engine(engine_world):
    world = engine_world
    assert world.materialize(keys(1, 3), spec=BUGGY).success  # plan-free on empty partitions
    before = world.fingerprints("daily_revenue", keys(1, 3))
    refused = world.materialize("2026-01-02", tags={"dagster/from_ui": "true"})
    assert not refused.success and "holds 5 row(s)" in failure_text(refused)
    assert not world.plan_run("fix", keys(2, 2)).success
    assert world.fingerprints("daily_revenue", keys(1, 3)) == before


@pytest.mark.parametrize("mode", ["overwrite", "merge", "replay"])
def test_each_write_mode_is_idempotent_on_each_engine(engine_world, mode):
    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",), mode=mode)
    assert world.cli("run", "fix", "--proof") == 0  # twice, identical fingerprints, or it fails
    first = world.fingerprints("daily_revenue", keys(2, 2))
    assert world.plan_run("fix", keys(2, 2)).success
    assert world.fingerprints("daily_revenue", keys(2, 2)) == first and first["2026-01-02"].rows == 5


def test_gates_publish_verification_and_rollback_on_each_engine(engine_world, run_cli):
    world = engine_world
    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    published = world.fingerprints("published_revenue", keys(1, 4))
    target = world.fingerprints("daily_revenue", keys(1, 4))
    run_window(world, start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.phase() == "reconciled"
    # a swap of two regions' figures keeps the day's totals but fails the per-key gate
    world.run_sql("UPDATE daily_revenue SET net_revenue = CASE region WHEN 'north' THEN "
                  "(SELECT net_revenue FROM daily_revenue WHERE order_date = '2026-01-03' AND region = 'south') "
                  "WHEN 'south' THEN (SELECT net_revenue FROM daily_revenue WHERE order_date = '2026-01-03' "
                  "AND region = 'north') END WHERE order_date = '2026-01-03' AND region IN ('north', 'south')")
    reconciled = run_cli("reconcile", "fix")
    assert reconciled.code == 1 and "region=north" in reconciled.out and "region=south" in reconciled.out
    assert run_cli("publish", "fix").code == 1
    assert world.fingerprints("published_revenue", keys(1, 4)) == published
    assert world.cli("run", "fix", "--partitions", "2026-01-03") == 0
    assert world.cli("publish", "fix") == 0
    assert world.fingerprints("published_revenue", keys(1, 4)) == world.fingerprints("daily_revenue", keys(1, 4))
    assert world.cli("rollback", "fix") == 0
    assert world.fingerprints("daily_revenue", keys(1, 4)) == target
    assert world.fingerprints("published_revenue", keys(1, 4)) == published


def test_a_write_killed_mid_transaction_leaves_old_or_new_on_each_engine(engine_world, run_subprocess):
    world = engine_world
    assert world.materialize(keys(1, 4), spec=BUGGY).success
    old = world.fingerprints("daily_revenue", keys(1, 4))
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",), per_run=3)
    assert world.cli("run", "fix", "--proof") == 0
    env = {"BACKFILL_CRASH_AT": "write.before_commit@1"}  # 02, 03 and 04 written, not committed
    if world.url:
        env["BACKFILL_WAREHOUSE_URL"] = world.url
    crashed = run_subprocess("--home", str(world.home), "run", "fix", env=env)
    assert crashed.code == -9
    now = world.fingerprints("daily_revenue", keys(1, 4))
    assert now["2026-01-01"] != old["2026-01-01"]  # the proof committed
    assert all(now[k] == old[k] for k in keys(2, 4))  # the killed transaction's partitions are wholly old
    for record_table in ("writes", "snapshots"):  # nor are their ledger rows and snapshots
        assert world.sql(f"SELECT count(*) FROM backfill_control.{record_table} WHERE plan_id = 'fix' "
                         "AND partition_key > '2026-01-01'") == [(0,)], record_table
    assert run_subprocess("--home", str(world.home), "run", "fix",
                          env={k: v for k, v in env.items() if k != "BACKFILL_CRASH_AT"}).code == 0
    assert world.phase() == "reconciled"
    assert world.cli("evidence", "verify") == 0


def test_four_run_workers_write_each_partition_once_on_postgres(postgres_url, tmp_path, instance, ssh_keys,
                                                               monkeypatch):
    from tests.world import DEMO_DEFS, make_world

    monkeypatch.setenv("BACKFILL_DEFS", DEMO_DEFS)
    monkeypatch.setenv("BACKFILL_WAREHOUSE_URL", postgres_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    world = make_world(tmp_path, instance, ssh_keys, postgres_url)
    world.approved_plan("fix", start="2026-01-01", end="2026-01-08", proof=("2026-01-01",), per_run=1,
                        runs_at_once=4)
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix") == 0
    writes = world.sql("SELECT partition_key, count(*) FROM backfill_control.writes WHERE plan_id = 'fix' "
                       "GROUP BY 1 ORDER BY 1")
    assert writes == [("2026-01-01", 2)] + [(k, 1) for k in keys(2, 8)]
    runs = world.sql("SELECT count(DISTINCT run_id) FROM backfill_control.writes WHERE plan_id = 'fix' "
                     "AND partition_key <> '2026-01-01'")
    assert runs == [(7,)]  # one run per partition, four at a time
    assert world.phase() == "reconciled"
    assert all(fp.rows == 5 for fp in world.fingerprints("daily_revenue", keys(1, 8)).values())
    assert world.cli("evidence", "verify") == 0


def test_dagster_instance_on_postgres_holds_the_runs_of_a_plan(postgres_server, tmp_path, instance, ssh_keys,
                                                                monkeypatch):

    from backfill_assets.dagster_setup import instance_for
    from backfill_assets.errors import UsageError
    from backfill_assets.home import Home
    from tests.world import DEMO_DEFS, make_world

    warehouse_url = postgres_server.create_database("warehouse_on_pg")
    # with a password (trust auth ignores it): dagster.yaml names it, never holds it
    dagster_url = postgres_server.create_database("dagster_on_pg").replace(f"://{APP_ROLE}@", f"://{APP_ROLE}:s3cr%40t@")
    monkeypatch.setenv("BACKFILL_DEFS", DEMO_DEFS)
    monkeypatch.setenv("BACKFILL_WAREHOUSE_URL", warehouse_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    world = make_world(tmp_path, instance, ssh_keys, warehouse_url)
    assert world.cli("init", "--instance", "postgres", "--instance-url", dagster_url) == 0
    config = (world.home / "dagster" / "dagster.yaml").read_text()
    document = yaml.safe_load(config)
    storages = ("run_storage", "event_log_storage", "schedule_storage")
    assert {document[s]["config"]["postgres_db"]["scheme"] for s in storages} == {"postgresql+psycopg2"}
    assert document["run_coordinator"]["class"] == "PlanGateRunCoordinator"
    # the coordinator reads the same warehouse, named by its environment variable, never in clear
    assert document["run_coordinator"]["config"]["warehouse_url"] == {"env": "BACKFILL_WAREHOUSE_URL"}
    assert warehouse_url not in config and "s3cr" not in config
    assert all(document[s]["config"]["postgres_db"]["password"] == {"env": "BACKFILL_DAGSTER_PG_PASSWORD"}
               for s in storages)
    with pytest.raises(UsageError, match="BACKFILL_DAGSTER_PG_PASSWORD|needs NAME set"):
        instance_for(Home(world.home))  # one line, not a traceback, while the password is not given
    monkeypatch.setenv("BACKFILL_DAGSTER_PG_URL", dagster_url)  # where the CLI finds the password
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0
    with instance_for(Home(world.home)) as on_pg:
        assert type(on_pg.event_log_storage).__name__ == "PooledPostgresEventLogStorage"
        assert type(on_pg.run_storage).__name__ == "PooledPostgresRunStorage"
        runs = on_pg.get_runs(filters=dg.RunsFilter(tags={"backfill_assets/plan": "fix"}))
        assert len(runs) == 2 and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
        evaluations = on_pg.get_records_for_run(runs[0].run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
        assert len(evaluations.records) == len(GATE_NAMES)


REVENUE_COLUMNS = ("orders BIGINT, gross DECIMAL(18,2), refunds DECIMAL(18,2), net_revenue DECIMAL(18,2), "
                   "customers BIGINT")


def test_a_consumers_table_made_before_the_contract_with_other_key_types_still_publishes(engine_world):
    world = engine_world
    world.run_sql(f"CREATE TABLE published_revenue (order_date DATE, region TEXT, {REVENUE_COLUMNS})")
    # a day consumers read already is history (a plan would replace it): the load writes others
    world.run_sql("INSERT INTO published_revenue VALUES (DATE '2026-01-05', 'north', 1, 1, 0, 1, 1)")
    result = world.materialize(keys(1, 2), spec=BUGGY, publish=True)
    assert result.success, failure_text(result)
    assert world.fingerprints("published_revenue", keys(1, 2)) == world.fingerprints("daily_revenue", keys(1, 2))


def test_a_target_whose_key_column_drifted_from_the_contract_fails_its_gate_not_a_statement(engine_world):
    world = engine_world
    world.run_sql(f"CREATE TABLE daily_revenue (order_date DATE, region TEXT, {REVENUE_COLUMNS})")
    result = world.materialize(keys(1, 1), spec=BUGGY)
    judged = dict(world.sql("SELECT gate, passed FROM backfill_control.gate_results WHERE partition_key = ?",
                            [keys(1, 1)[0]]))
    if world.url:  # PostgreSQL: TEXT is not the contract's VARCHAR
        assert not result.success and judged["contract_holds"] is False, failure_text(result)
        assert "operator does not exist" not in failure_text(result)
        assert all(passed for gate, passed in judged.items() if gate != "contract_holds")
    else:  # DuckDB: TEXT is VARCHAR
        assert result.success and all(judged.values())


def test_a_consumers_table_whose_day_is_a_timestamp_is_refused_naming_the_column(engine_world):
    world = engine_world
    # consumers would read 2026-01-01 00:00:00 where the gates checked the DATE 2026-01-01
    world.run_sql(f"CREATE TABLE published_revenue (order_date TIMESTAMP, region VARCHAR, {REVENUE_COLUMNS})")
    world.run_sql("INSERT INTO published_revenue VALUES (TIMESTAMP '2026-01-05 00:00:00', 'north', 1, 1, 0, 1, 1)")
    result = world.materialize(keys(1, 2), spec=BUGGY, publish=True)
    assert not result.success
    assert "published_revenue cannot hold the contract's partitions: order_date: type TIMESTAMP" in \
        failure_text(result), failure_text(result)
    assert world.sql("SELECT count(*) FROM published_revenue")[0][0] == 1  # unchanged


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_publish_waits_while_another_holds_the_published_table(engine_world):
    """Two publishes of one table at once on a server engine each deleted what the other had not
    committed yet, then both inserted: every row twice. They take turns on the publish lock."""
    import threading

    from backfill_assets.publish import rule

    world = engine_world
    assert world.materialize(keys(1, 2), spec=BUGGY, publish=True).success
    before = world.fingerprints("published_revenue", keys(1, 2))
    outcome: dict[str, object] = {}

    def publish() -> None:
        with world.warehouse().session() as session:
            outcome["published"] = rule.publish(session, BUGGY, world.scheme, keys(1, 2), actor="second")

    with world.warehouse().session() as holder, holder.transaction():
        holder.lock(rule.publish_lock(BUGGY))  # what a publish (or a rollback) in its transaction holds
        second = threading.Thread(target=publish)
        second.start()
        second.join(timeout=2)
        assert second.is_alive() and "published" not in outcome  # waiting, nothing copied
    second.join(timeout=60)
    assert outcome["published"].rows == 10
    assert world.sql("SELECT count(*), count(DISTINCT (order_date, region)) FROM published_revenue") == [(10, 10)]
    assert world.fingerprints("published_revenue", keys(1, 2)) == before


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_rollback_waits_for_a_write_in_flight_of_one_of_its_partitions(engine_world):
    """Rollback checks that no one wrote its partitions since; on a server engine a run could start
    writing one between that check and the restore. It takes the partitions' write locks (as runs
    do, in key order) and checks again under them."""
    import threading

    world = engine_world
    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    target = world.fingerprints("daily_revenue", keys(1, 4))
    run_window(world, start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    outcome: dict[str, int] = {}
    rollback = threading.Thread(target=lambda: outcome.update(code=world.cli("rollback", "fix")))
    with world.warehouse().session() as holder, holder.transaction():
        holder.lock("write:daily_revenue:2026-01-03")  # what a run's write transaction holds
        rollback.start()
        rollback.join(timeout=2)
        assert rollback.is_alive() and world.phase() == "reconciled"  # waiting, nothing restored
    rollback.join(timeout=60)
    assert outcome["code"] == 0 and world.phase() == "rolled_back"
    assert world.fingerprints("daily_revenue", keys(1, 4)) == target


def test_a_table_of_bound_rows_holds_them_as_given_on_each_engine(engine):
    """The ledger's inserts read their rows from `rows_table_sql` (DuckDB: a list a column, unnested;
    PostgreSQL: VALUES): texts with marks, integers past 32 bits, NULLs in any column, a column of
    NULLs only, flags, and the rows in their given order."""
    rows = [("b", 1, None, True, "é, 'x' \"y\""), ("a", None, None, False, ""), ("c", 2 ** 40, None, None, None),
            ("a", 7, None, True, "\\n")]
    with engine.session() as session:
        sql, params = engine.rows_table_sql(rows, ("k", "n", "x", "ok", "t"), "v")
        got = session.rows(f"SELECT k, CAST(n AS BIGINT), x, CAST(ok AS BOOLEAN), t FROM {sql}", params)
    assert got == rows
    assert engine.rows_table_sql([], ("k",), "v")[1] in ([], [[]])


def _approved_on_postgres(postgres_url, tmp_path, instance, ssh_keys, monkeypatch):
    """A world on PostgreSQL whose plan `fix` (2026-01-01..03) is approved."""
    from tests.world import DEMO_DEFS, make_world

    monkeypatch.setenv("BACKFILL_DEFS", DEMO_DEFS)
    monkeypatch.setenv("BACKFILL_WAREHOUSE_URL", postgres_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    world = make_world(tmp_path, instance, ssh_keys, postgres_url)
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-01",))
    return world


def _reconciled_on_postgres(postgres_url, tmp_path, instance, ssh_keys, monkeypatch):
    """The same, its plan reconciled: ready to publish."""
    world = _approved_on_postgres(postgres_url, tmp_path, instance, ssh_keys, monkeypatch)
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    return world


def test_a_hold_typed_during_a_publish_on_postgres_waits_for_it_instead_of_deadlocking(
        postgres_url, tmp_path, instance, ssh_keys, monkeypatch):
    """Publish appended to the chain (the evidence lock) before it moved the plan (its row), and a
    cancel took the plan's row before appending: each waited on the other and PostgreSQL killed the
    publish, `deadlock detected` (found by an attack). Publish takes the plans' rows first now, and
    the hold then finds the plan published (a hold is judged under the row lock)."""
    verb = "cancel"  # a pause takes the same way (`lifecycle._held`)
    import subprocess
    import sys
    import time

    import psycopg

    world = _reconciled_on_postgres(postgres_url, tmp_path, instance, ssh_keys, monkeypatch)
    release = tmp_path / "release-the-publish"  # the publish goes on once the hold waits for it
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "BACKFILL_STALL_AT": "publish.between_delete_and_insert=15",
           "BACKFILL_STALL_RELEASE_FILE": str(release)}
    backfill = [str(Path(sys.executable).parent / "backfill"), "--home", str(world.home)]
    publish = subprocess.Popen([*backfill, "publish", "fix"], env=env, cwd=tmp_path, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with psycopg.connect(postgres_url, autocommit=True) as watch:  # the publish waits inside its copy
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' "
                    "AND datname = current_database() AND now() - state_change > interval '0.5 seconds'"
            ).fetchone()[0]:
                time.sleep(0.05)
            holding = subprocess.Popen([*backfill, verb, "fix"], env={**env, "BACKFILL_STALL_AT": ""}, cwd=tmp_path,
                                       text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            while time.monotonic() < deadline and holding.poll() is None and not watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()").fetchone()[0]:
                time.sleep(0.05)
        release.touch()
        held_out, held_err = holding.communicate(timeout=120)
        held = subprocess.CompletedProcess(holding.args, holding.returncode, held_out, held_err)
    finally:
        release.touch()
        out, err = publish.communicate(timeout=120)
    assert publish.returncode == 0 and "deadlock" not in err, err
    assert "published published_revenue" in out
    # it waited for the publish, then judged the plan as the publish left it (under its row lock)
    assert held.returncode == 1 and held.stderr.startswith(f"backfill: plan fix is published; there is nothing to "
                                                           f"{verb}"), held.stderr
    assert world.sql("SELECT phase, hold FROM backfill_control.plans WHERE plan_id = 'fix'") == [("published", None)]


def test_a_publish_and_an_approval_that_completes_another_plan_never_deadlock_on_postgres(
        postgres_url, tmp_path, instance, ssh_keys, monkeypatch):
    """Publish took the rows of every active plan of its table, then the chain; the approval that
    completed a new version of another plan took the chain, then that plan's row: PostgreSQL killed
    the publish, `deadlock detected` (found by an attack on the lock order). Publish takes only the
    rows of the plans its window holds, and an approval takes its plan's row before the chain."""
    import subprocess
    import sys
    import time

    import psycopg

    world = _reconciled_on_postgres(postgres_url, tmp_path, instance, ssh_keys, monkeypatch)
    other = world.approved_plan("other", start="2026-01-05", end="2026-01-06", proof=("2026-01-05",))
    doc = yaml.safe_load(other.read_text())
    doc["execution"]["proof_partitions"] = ["2026-01-06"]  # a new version: the owner and alice sign it, bob last
    other.write_text(yaml.safe_dump(doc))
    world.approve(other, "alice")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    backfill = [str(Path(sys.executable).parent / "backfill"), "--home", str(world.home)]

    def waiting(watch, count: int) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()").fetchone()[0] < count:
            time.sleep(0.05)

    with psycopg.connect(postgres_url) as writer, psycopg.connect(postgres_url, autocommit=True) as watch:
        writer.execute("LOCK TABLE daily_revenue IN ROW EXCLUSIVE MODE")  # a write in flight: publish waits
        publish = subprocess.Popen([*backfill, "publish", "fix"], env=env, cwd=tmp_path, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        waiting(watch, 1)
        approve = subprocess.Popen([*backfill, "plan", "approve", str(other), "--by", "bob", "--key",
                                    str(world.keys["bob"])], env=env, cwd=tmp_path, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(3)  # the approval reaches its locks (or waits on one)
        writer.rollback()
    out, err = publish.communicate(timeout=120)
    approved_out, approved_err = approve.communicate(timeout=120)
    assert publish.returncode == 0 and "deadlock" not in err, err
    assert approve.returncode == 0 and "deadlock" not in approved_err, approved_err


def test_evidence_verify_on_postgres_while_another_command_appends_is_no_false_alarm(
        postgres_url, tmp_path, instance, ssh_keys, monkeypatch):
    """`verify` counted the chain before its walk: a row another command appended meanwhile
    (PostgreSQL reads each statement at its own snapshot) made it say rows were removed, and so
    refuse publish and rollback (found by a review). It counts up to where its walk ended."""
    import subprocess
    import sys
    import time

    import psycopg

    world = _approved_on_postgres(postgres_url, tmp_path, instance, ssh_keys, monkeypatch)
    release = tmp_path / "release-the-verify"  # the walk goes on once the other command appended
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "BACKFILL_STALL_AT": "verify.walk=15",
           "BACKFILL_STALL_RELEASE_FILE": str(release)}
    verify = subprocess.Popen([str(Path(sys.executable).parent / "backfill"), "--home", str(world.home), "evidence",
                               "verify"], env=env, cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        with psycopg.connect(postgres_url, autocommit=True) as watch:  # it counted, and waits before its walk
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and verify.poll() is None and not watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> "
                    "pg_backend_pid() AND state = 'idle' AND now() - state_change > interval '1 second'"
            ).fetchone()[0]:
                time.sleep(0.05)
        assert verify.poll() is None, "verify ended before another command could append"
        assert world.cli("pause", "fix") == 0  # another command appends a chain row meanwhile
    finally:
        release.touch()
        out, err = verify.communicate(timeout=120)
    assert verify.returncode == 0 and "rows were removed" not in err, err
    assert out.startswith("evidence chain verified")


def test_a_chain_index_edited_during_a_transaction_is_seen_as_each_engine_reads_it(engine_world, monkeypatch):
    """The chain index check is remembered for the rest of a transaction only where every statement
    of it reads one snapshot (DuckDB): there it is read once a transaction, and the answer remembered
    is the one a fresh check gives in that transaction. PostgreSQL reads each statement afresh, so it
    reads it each time, and a relabel committed by another session between two decisions of one
    transaction is found by the second."""
    from backfill_assets.control import evidence_log
    from backfill_assets.errors import ForgedRecord
    from backfill_assets.warehouse.state_store import evidence as store

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-01",))
    relabel = (f"UPDATE backfill_control.evidence SET kind = 'note' WHERE seq = (SELECT max(seq) FROM "
               f"backfill_control.evidence WHERE plan_id = 'fix' AND kind IN "
               f"({', '.join(repr(k) for k in evidence_log.PLAN_STATE_KINDS)}))")
    reads = []
    index_rows = store.index_rows
    monkeypatch.setattr(store, "index_rows", lambda *a, **k: reads.append(1) or index_rows(*a, **k))
    world.warehouse().engine.let_go()  # as a new process finds it: nothing checked yet (`Session.memo_while_locked`)
    with world.warehouse().session() as session, session.transaction():
        before = evidence_log.check_index(session)
        assert before is not None and ("plan", "fix") in before and len(reads) == 1
        world.run_sql(relabel)  # another session's, committed
        if world.url is None:
            assert session.snapshot_number is not None
            assert evidence_log.check_index(session) == before and len(reads) == 1  # remembered
            assert evidence_log._check_index(session)[0] == before  # what this snapshot holds
        else:
            assert session.snapshot_number is None
            with pytest.raises(ForgedRecord, match="relabelled or removed"):
                evidence_log.check_index(session)
            assert len(reads) == 2
    with world.warehouse().session() as session, session.transaction():  # the relabel is there
        with pytest.raises(ForgedRecord, match="relabelled or removed"):
            evidence_log.check_index(session)


def test_an_append_keeps_the_remembered_chain_index_what_the_table_holds(world):
    from backfill_assets.control import evidence_log

    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-01",))
    with world.warehouse().session() as session, session.transaction():
        before = evidence_log.check_index(session)
        evidence_log.append(session, plan_id="fix", kind="hold", actor="test", payload={"hold": "paused"})
        evidence_log.append(session, plan_id=None, kind="note", actor="test", payload={})
        after = evidence_log.check_index(session)
        assert after == evidence_log._check_index(session)[0] != before
        assert after[("plan", "fix")][1] == before[("plan", "fix")][1] + 1


@pytest.mark.parametrize("engine_world", ["duckdb", "postgresql"], indirect=True)
def test_what_a_held_database_checked_is_not_asked_again_and_is_forgotten_when_it_is_let_go(engine_world,
                                                                                            monkeypatch):
    """`Session.memo_while_locked`: while this process holds the DuckDB file no other process can write it, so the
    chain index and the seals it checked are not read again by its later sessions (a 365-partition
    command read the same seals 425 times for 64 seals); once it lets go of the file, an insider's
    edit made meanwhile is found by the next decision. PostgreSQL, where another connection may
    commit at any moment, remembers nothing between statements."""
    from backfill_assets.control import evidence_log, ledger
    from backfill_assets.errors import ForgedRecord
    from backfill_assets.warehouse.state_store import evidence as evidence_store
    from backfill_assets.warehouse.state_store import seals as seal_store

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    reads: list[str] = []
    for module, name in ((evidence_store, "index_rows"), (seal_store, "rows_of_seqs")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **k: reads.append(_name) or _real(*a, **k))

    def decide() -> None:
        with world.warehouse().session() as session:
            evidence_log.check_index(session)
            entry = ledger.latest(session, "daily_revenue", ["2026-01-02"], "fix")["2026-01-02"]
            assert entry is not None and entry.passed

    world.warehouse().engine.let_go()  # as a new process finds it
    decide()
    first = list(reads)
    assert "index_rows" in first and "rows_of_seqs" in first
    decide()  # a second session of the same process: on DuckDB it joins the database this one holds
    assert reads[len(first):] == ([] if world.url is None else first)
    # an insider's edit, once the file is let go (on DuckDB, before no other process can open it)
    tamper = "UPDATE backfill_control.gate_results SET passed = NOT passed WHERE partition_key = '2026-01-02'"
    if world.url is None:
        from tests.test_trust import _insider_duckdb

        _insider_duckdb(world, tamper)
    else:
        world.run_sql(tamper)
    with pytest.raises(ForgedRecord, match="differ from what that row sealed"):
        decide()


def test_seals_committed_while_the_database_is_held_are_not_read_back_again(world, monkeypatch):
    """A seal is of the rows read back under its chain row's number in the transaction that wrote
    them (`seals.of_seq`): once that commits, while the file stays held, a verify would read the
    same rows, so they are remembered as verified (a 2,526-partition reconcile read its 20,000
    results back again in the session that wrote them). A transaction rolled back remembers
    nothing: its number goes to another row."""
    from backfill_assets.control import evidence_log, seals
    from backfill_assets.warehouse.state_store import seals as seal_store

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    reads: list[int] = []
    real = seal_store.rows_of_seqs
    monkeypatch.setattr(seal_store, "rows_of_seqs", lambda s, table, seqs: reads.extend(seqs) or real(s, table, seqs))

    def sealed(session) -> tuple[int, str]:  # a chain row sealing no rows of `writes`, as a write of nothing would
        seq = evidence_log.next_seq(session)
        row = evidence_log.append(session, plan_id="fix", kind="note", actor="test", seq=seq,
                                  payload={"seals": {"writes": seals.digest("writes", [])}})
        return seq, row.row_hash

    with world.warehouse().session() as session:
        with session.transaction():
            committed, _ = sealed(session)
        seals.verify(session, "writes", [committed])
        assert reads == []  # remembered as it committed
        with pytest.raises(RuntimeError), session.transaction():
            rolled_back, its_hash = sealed(session)
            raise RuntimeError("rolled back")
        assert ("writes", rolled_back, its_hash) not in session.memo_while_locked()[evidence_log.HELD_SEALS]
        with session.transaction():
            again, _ = sealed(session)  # the number rolled back, now another row's
        assert again == rolled_back
        seals.verify(session, "writes", [again])
        assert reads == []
    world.warehouse().engine.let_go()  # a new process remembers nothing
    with world.warehouse().session() as session:
        seals.verify(session, "writes", [committed, again])
        assert sorted(reads) == [committed, again]


def _noted(session, text: str, plan_id: str | None = "fix"):
    from backfill_assets.control import evidence_log

    return evidence_log.append(session, plan_id=plan_id, kind="note", actor="test", payload={"text": text})


def test_a_check_made_after_an_append_of_a_transaction_that_rolls_back_leaves_no_row_the_next_append_links_to(world):
    """A decision's check made in a transaction after its own append sees the uncommitted row; the
    transaction rolls back. The next append still takes the rolled-back row's number and links to
    the row before it: the chain misses nothing (an append that trusted what the check remembered
    linked to the row rolled back, found by an attack on a memo tried and withdrawn, 2026-12-07)."""
    from backfill_assets.control import evidence_log

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    engine = world.warehouse().engine
    with world.warehouse().session() as session:
        evidence_log.check_index(session)
        with session.transaction():
            first = _noted(session, "one")  # confirms the key: later appends read nothing
        with pytest.raises(RuntimeError), session.transaction():
            _noted(session, "rolled back")
            evidence_log.check_index(session)  # a decision of the same transaction
            raise RuntimeError("the command fails after its decision")
        with session.transaction():
            after = _noted(session, "after the rollback")
        assert (after.seq, after.prev_hash) == (first.seq + 1, first.row_hash)
    engine.let_go()
    with world.warehouse().session() as session:
        evidence_log.check_index(session)
        assert evidence_log.verify(session) == after.seq


def test_a_session_whose_memo_is_its_own_does_not_number_its_row_over_a_row_another_session_appended(world):
    """Two sessions of one process, each with a memo of its own (the outer opened after a let-go, as
    `backfill run`'s wave session is, the inner inside it): the inner one appends and commits, and
    the outer one's next row comes after it, not over it (a false alarm on the chain's key where an
    append trusted its session's memo, found by an attack, 2026-12-07)."""
    from backfill_assets.control import evidence_log

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    engine = world.warehouse().engine
    engine.let_go()  # nothing kept: the next session's memo is its own
    with world.warehouse().session() as outer:
        evidence_log.check_index(outer)
        with outer.transaction():
            first = _noted(outer, "outer one")
        with world.warehouse().session() as inner:  # nested: nothing kept yet, a memo of its own
            assert inner.memo_while_locked() is not outer.memo_while_locked()
            with inner.transaction():
                second = _noted(inner, "inner")
        with outer.transaction():
            third = _noted(outer, "outer two")
        assert (second.seq, third.seq) == (first.seq + 1, first.seq + 2)


def test_a_promised_number_read_by_a_session_whose_memo_is_its_own_is_not_called_a_bug(world):
    """As above, with a row sealing rows under the number `next_seq` promised (an approval, a
    snapshot, a write): the number promised is the number the row gets."""
    from backfill_assets.control import evidence_log

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    engine = world.warehouse().engine
    engine.let_go()
    with world.warehouse().session() as outer:
        evidence_log.check_index(outer)
        with outer.transaction():
            _noted(outer, "outer one")
        with world.warehouse().session() as inner, inner.transaction():
            _noted(inner, "inner")
        with outer.transaction():
            seq = evidence_log.next_seq(outer)
            row = evidence_log.append(outer, plan_id="fix", kind="note", actor="test", payload={}, seq=seq)
        assert row.seq == seq


def test_a_transaction_that_began_before_another_sessions_append_committed_commits_no_row_after_it(world):
    """Two sessions sharing the held memo: the first decides on its snapshot (the plan goes on), the
    second cancels the plan and commits. The first one's append meets the cancel's committed row and
    its stale decision rolls back; numbered past it (from a memo that followed the cancel), it
    committed a decision the cancel had superseded (found by an attack, 2026-12-07)."""
    from backfill_assets.control import evidence_log, record
    from backfill_assets.control.record import Hold
    from backfill_assets.errors import WarehouseError

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    with world.warehouse().session():
        pass  # a kept connection: the sessions below share its memo
    with world.warehouse().session() as stale:
        evidence_log.check_index(stale)
        with stale.transaction():
            _noted(stale, "confirms the key")
        cancelled = False
        with pytest.raises(WarehouseError, match="Duplicate key"), stale.transaction():
            state = record.require(stale, "fix")  # the decision: the plan may go on
            assert state.hold is None
            with world.warehouse().session() as other:
                assert other.memo_while_locked() is stale.memo_while_locked()
                record.set_hold(other, "fix", Hold.CANCELLED, "test", "cancelled meanwhile")
            cancelled = True
            # numbered from the snapshot, the insert meets the cancel's committed row
            evidence_log.append(stale, plan_id="fix", kind="proof", actor="test",
                                payload={"passed": True, "decided_on": str(state.hold)})
        assert cancelled


def test_a_row_cut_off_the_chain_by_code_in_the_process_is_not_extended_past_while_held(world):
    """Code in this process (its own DuckDB connection joins the database this process holds)
    deletes the chain's last row. The next append takes the deleted row's number, and the next
    decision finds the head log's row changed; an append past it, linked to the deleted row's hash,
    left a chain every decision of the held file trusted (found by an attack, 2026-12-07)."""
    import duckdb

    from backfill_assets.control import evidence_log, record
    from backfill_assets.errors import EvidenceChainBroken

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    with world.warehouse().session() as session:
        evidence_log.check_index(session)
        with session.transaction():
            cut = _noted(session, "to be cut off")
        con = duckdb.connect(str(world.warehouse_path))  # joins this process's open database
        try:
            con.execute("DELETE FROM backfill_control.evidence WHERE seq = ?", [cut.seq])
        finally:
            con.close()
        with session.transaction():
            _noted(session, "appended after the cut")
        with pytest.raises(EvidenceChainBroken, match="cut off the chain's end"):
            evidence_log.check_index(session)  # the head log's row is another now
        with pytest.raises(EvidenceChainBroken):
            record.require(session, "fix")

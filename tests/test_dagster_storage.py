"""The Dagster internals we extend, exercised so an upgrade that moves them fails here first:
the pooled sqlite event log (backfill_assets/dagster_storage.py) and the run coordinator's config."""

from __future__ import annotations

import sqlite3
import time

import dagster as dg
import pytest

from backfill_assets.dagster_setup import instance_for
from backfill_assets.dagster_storage import PooledSqliteEventLogStorage, PooledSqliteRunStorage
from backfill_assets.defs.coordinator import PlanGateRunCoordinator
from backfill_assets.gates.results import GATE_NAMES
from backfill_assets.home import Home
from tests.world import keys


def test_the_instance_uses_the_pooled_event_log_and_keeps_every_event(world):
    instance = instance_for(Home(world.home))
    try:
        assert isinstance(instance.event_log_storage, PooledSqliteEventLogStorage)
        assert isinstance(instance.run_coordinator, PlanGateRunCoordinator)
        job = world.defs().resolve_implicit_global_asset_job_def()
        result = job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey("daily_revenue")],
                                        tags={"dagster/asset_partition_range_start": "2026-01-01",
                                              "dagster/asset_partition_range_end": "2026-01-03"})
        assert result.success
        records = instance.fetch_materializations(dg.AssetKey("daily_revenue"), limit=10).records
        assert sorted(r.partition_key for r in records) == keys(1, 3)
        evaluations = instance.get_records_for_run(
            result.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION).records
        per_partition = {(r.event_log_entry.dagster_event.event_specific_data.partition,
                          r.event_log_entry.dagster_event.event_specific_data.check_name) for r in evaluations}
        assert len(per_partition) == 3 * 8  # every gate of every partition (eight since issue 25), with its partition
        # the file is in WAL mode; connections of this process are pooled, not one per event
        path = instance.event_log_storage.get_db_path()
        assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        engine = instance.event_log_storage._engine()
        assert engine.pool.checkedin() >= 1
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    finally:
        instance.dispose()


def test_a_range_runs_gate_results_are_stored_in_one_batch_and_read_back_per_partition(world):
    """log_check_evaluations hands a range run's evaluations to the instance as one batch, which
    the pooled event log stores in one transaction; Dagster's API reads them back per partition,
    exactly as when each was logged alone."""
    import sqlalchemy
    from dagster._core.event_api import PartitionKeyFilter

    instance = instance_for(Home(world.home))
    commits: list[int] = []
    try:
        sqlalchemy.event.listen(instance.event_log_storage._engine(), "commit", lambda conn: commits.append(1))
        job = world.defs().resolve_implicit_global_asset_job_def()

        def range_run(first: str, last: str) -> int:
            commits.clear()
            result = job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey("daily_revenue")],
                                            tags={"dagster/asset_partition_range_start": first,
                                                  "dagster/asset_partition_range_end": last})
            assert result.success
            evaluations = instance.get_records_for_run(
                result.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION).records
            assert len(evaluations) == len(GATE_NAMES) * len(keys(int(first[-2:]), int(last[-2:])))
            return len(commits)

        two, six = range_run("2026-01-01", "2026-01-02"), range_run("2026-01-03", "2026-01-08")
        # four more partitions log 28 more evaluations: stored one a commit, that is 28 more commits
        assert six - two < 28, f"{two} commits for 2 partitions, {six} for 6"
        storage = instance.event_log_storage
        check_keys = [dg.AssetCheckKey(dg.AssetKey("daily_revenue"), name) for name in
                      ("row_count_matches_source", "unchanged_since_checked")]
        for key in keys(1, 8):
            latest = storage.get_latest_asset_check_execution_by_key(
                check_keys, partition_filter=PartitionKeyFilter(key=key))
            assert {k.name: r.status.value for k, r in latest.items()} == {
                "row_count_matches_source": "SUCCEEDED", "unchanged_since_checked": "SUCCEEDED"}, key
    finally:
        instance.dispose()


def test_a_steps_output_is_captured_for_the_ui_and_kept_off_the_terminal(tmp_path, monkeypatch, capfd):
    import sys

    from backfill_assets.dagster_storage import FileComputeLogManager

    @dg.asset
    def talkative() -> None:
        print("said on stdout", flush=True)
        print("said on stderr", file=sys.stderr, flush=True)

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    instance = instance_for(Home(tmp_path / "home"))
    assert isinstance(instance.compute_log_manager, FileComputeLogManager)
    capfd.readouterr()
    result = dg.materialize([talkative], instance=instance)
    assert result.success
    terminal = capfd.readouterr()
    # Dagster's own manager mirrors both streams back to the process's (a `tail -F` each)
    assert "said on" not in terminal.out + terminal.err
    files = {p.suffix: p for p in (tmp_path / "home" / "dagster" / "storage" / result.run_id).rglob("*")}
    assert "said on stdout" in files[".out"].read_text() and "said on stderr" in files[".err"].read_text()
    assert ".complete" in files  # the UI knows the capture ended


def test_the_compute_log_manager_overrides_what_dagster_still_calls():
    import inspect

    from dagster._core.storage.local_compute_log_manager import LocalComputeLogManager

    # an upgrade that renames or reshapes these would silently bypass ours: fail here instead
    assert list(inspect.signature(LocalComputeLogManager.capture_logs).parameters) == ["self", "log_key"]
    assert list(inspect.signature(LocalComputeLogManager.get_captured_local_path).parameters)[:3] == [
        "self", "log_key", "extension"]
    assert callable(LocalComputeLogManager.complete_artifact_path)


def test_the_run_storage_is_pooled_and_a_new_instance_reads_its_runs(world):
    instance = world.instance
    assert isinstance(instance.run_storage, PooledSqliteRunStorage)
    result = world.materialize(keys(1, 2))
    assert result.success
    engine = instance.run_storage._engine()
    assert engine.pool.checkedin() >= 1  # one engine a process, its connections reused
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA journal_mode").fetchone()[0] == "wal"
    # what another process (the UI, the daemon) opens sees the run and its end
    other = dg.DagsterInstance.from_ref(instance.get_ref())
    try:
        run = other.get_run_by_id(result.run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
    finally:
        other.dispose()


def test_the_run_storage_overrides_what_dagster_still_calls():
    import inspect

    from dagster._core.storage.runs import SqliteRunStorage

    # every statement of Dagster's sqlite run storage goes through connect(); from_local builds cls
    assert list(inspect.signature(SqliteRunStorage.connect).parameters) == ["self"]
    assert list(inspect.signature(SqliteRunStorage.from_local).parameters) == ["base_dir", "inst_data"]
    assert "cls(conn_string" in inspect.getsource(SqliteRunStorage.from_local)


def test_many_readers_at_once_never_wait_on_the_pool(world):
    # the webserver asks many queries at once: each past the pool opens its own connection
    engine = world.instance.run_storage._engine()
    opened = [engine.connect() for _ in range(20)]
    try:
        assert all(c.exec_driver_sql("SELECT count(*) FROM runs").fetchone()[0] == 0 for c in opened)
    finally:
        for conn in opened:
            conn.close()


def _tables_of(storage) -> dict[str, list[dict]]:
    """The rows an event writes, per table, each without its own id and creation time (set by the
    storage): the event log (in id order), the indexed tags, the asset index, the check executions."""
    from dagster._core.storage.event_log.schema import (
        AssetCheckExecutionsTable,
        AssetEventTagsTable,
        AssetKeyTable,
        SqlEventLogStorageTable,
    )

    apart = {"create_timestamp"}
    out = {}
    with storage.index_connection() as conn:
        for name, table, keep_id in (("events", SqlEventLogStorageTable, True), ("tags", AssetEventTagsTable, False),
                                     ("assets", AssetKeyTable, False), ("checks", AssetCheckExecutionsTable, False)):
            rows = conn.execute(table.select().order_by(table.c.id)).mappings().fetchall()
            out[name] = [{c: v for c, v in row.items() if c not in apart and (keep_id or c != "id")} for row in rows]
    out["tags"].sort(key=repr)  # their ids follow the order each storage wrote them in
    return out


def test_a_batch_leaves_the_asset_index_exactly_as_dagsters_own_storage_does(world, tmp_path):
    """The pooled event log inserts a batch's rows of the event log with one statement, serializes
    each event once, writes each asset's row of the asset index once a batch (the last writer of
    each column) instead of once an event, and a batch's check evaluations in one UPDATE executed
    for all: the same events stored one by one by Dagster's own sqlite event log leave the same rows
    in every table. Fails when an upgrade changes what an event writes."""
    from dagster._core.storage.event_log import ConsolidatedSqliteEventLogStorage
    from dagster_shared.serdes import deserialize_value

    instance = instance_for(Home(world.home))
    try:
        job = world.defs().resolve_implicit_global_asset_job_def()
        for first, last in (("2026-01-01", "2026-01-03"), ("2026-01-04", "2026-01-06")):
            assert job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey("daily_revenue")],
                                          tags={"dagster/asset_partition_range_start": first,
                                                "dagster/asset_partition_range_end": last}).success
        ours = _tables_of(instance.event_log_storage)
    finally:
        instance.dispose()
    ids = [row["id"] for row in ours["events"]]
    assert ids == list(range(1, len(ids) + 1))  # replayed below under the same ids
    stock_storage = ConsolidatedSqliteEventLogStorage(str(tmp_path / "stock"))
    for row in ours["events"]:
        stock_storage.store_event(deserialize_value(row["event"]))
    stock = _tables_of(stock_storage)
    stock_storage.dispose()
    # the event log's rows (one INSERT for a batch, each event serialized once) and their indexed tags
    assert len(ours["events"]) == len(stock["events"]) > 3 * len(GATE_NAMES)
    assert ours["events"] == stock["events"]
    assert ours["tags"] == stock["tags"]
    assert len(ours["assets"]) == 1 and ours["assets"] == stock["assets"]  # daily_revenue
    assert len(ours["checks"]) == 2 * 3 * len(GATE_NAMES)  # two runs of three days
    assert ours["checks"] == stock["checks"]
    assert {row["execution_status"] for row in ours["checks"]} == {"SUCCEEDED"}

    # a planned check no evaluation followed (a run that stopped) keeps its planned row: the same
    planned = [deserialize_value(row["event"]) for row in ours["events"]
               if row["dagster_event_type"] == "ASSET_CHECK_EVALUATION_PLANNED"]
    assert planned
    alone = PooledSqliteEventLogStorage(str(tmp_path / "planned-ours"))
    alone.store_event_batch(planned)
    stock_alone = ConsolidatedSqliteEventLogStorage(str(tmp_path / "planned-stock"))
    for event in planned:
        stock_alone.store_event(event)
    checks, expected = _tables_of(alone)["checks"], _tables_of(stock_alone)["checks"]
    alone.dispose()
    stock_alone.dispose()
    assert len(checks) == 2 * 3 * len(GATE_NAMES) and checks == expected


def test_only_the_last_writer_of_each_asset_index_column_is_kept():
    from types import SimpleNamespace

    from backfill_assets.dagster_storage import last_writers

    def event(kind: str) -> SimpleNamespace:
        return SimpleNamespace(dagster_event=SimpleNamespace(event_type_value=kind))

    kinds = ["ASSET_MATERIALIZATION_PLANNED", "ASSET_MATERIALIZATION", "ASSET_MATERIALIZATION_PLANNED",
             "ASSET_OBSERVATION", "ASSET_MATERIALIZATION", "ASSET_MATERIALIZATION_PLANNED", "ASSET_OBSERVATION",
             "SOMETHING_NEW"]
    kept = last_writers([(event(k), i) for i, k in enumerate(kinds)])
    # the last materialization (4), the last planned after it (5), the last time (6), the unknown (7)
    assert [i for _, i in kept] == [4, 5, 6, 7]


# Dagster's methods the pooled event log's batch does the work of (`_insert_events`, `_index_event`,
# `_event_to_row`, `_store_asset_check_evaluation_planned`): an upgrade that changes any of them
# fails here, so what ours writes is re-read against theirs before the pin moves
REPLICATED = {"store_event": "391ced414e9bfecb", "_event_to_row": "93d47fbe7edc4f70",
              "_store_asset_check_evaluation_planned": "bbecef7ab5ce9d01"}


def test_the_dagster_methods_a_batch_replicates_are_the_ones_it_was_written_against():
    import hashlib
    import inspect

    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage

    found = {name: hashlib.sha256(inspect.getsource(getattr(SqlEventLogStorage, name)).encode()).hexdigest()[:16]
             for name in REPLICATED}
    assert found == REPLICATED, "Dagster changed a method dagster_storage.py replicates: re-read it, then update both"


def test_a_process_reads_dagsters_migration_scripts_once_and_stamps_homes_at_their_head(tmp_path, monkeypatch):
    import inspect
    import sqlite3

    import alembic.command
    import dagster._core.storage.sql as dagster_sql
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from dagster._core.storage.event_log.sqlite import consolidated_sqlite_event_log
    from dagster._core.storage.runs.sqlite import sqlite_run_storage

    from backfill_assets.dagster_storage import _KeptScriptDirectory

    # where Dagster reads them: an upgrade that reads them elsewhere fails here, not silently slower
    assert "ScriptDirectory.from_config(" in inspect.getsource(dagster_sql.check_alembic_revision)
    assert "ScriptDirectory.from_config(" in inspect.getsource(alembic.command.stamp)
    assert dagster_sql.ScriptDirectory is _KeptScriptDirectory is alembic.command.ScriptDirectory

    runs = dagster_sql.get_alembic_config(sqlite_run_storage.__file__)
    kept = _KeptScriptDirectory.from_config(runs)
    events = dagster_sql.get_alembic_config(consolidated_sqlite_event_log.__file__)
    assert _KeptScriptDirectory.from_config(events) is kept
    fresh = ScriptDirectory.from_config(runs)
    assert kept.get_heads() == fresh.get_heads()
    assert len(list(kept.walk_revisions())) == len(list(fresh.walk_revisions()))

    # a team's own migrations are read as alembic reads them, every time, whatever their folder's name
    for name in ("theirs", "dagster_migrations"):
        (tmp_path / name / "versions").mkdir(parents=True)
        (tmp_path / name / "script.py.mako").write_text("")
        (tmp_path / name / "alembic.ini").write_text(f"[alembic]\nscript_location = {name}\n")
        theirs = Config(str(tmp_path / name / "alembic.ini"))
        theirs.set_main_option("script_location", str(tmp_path / name) if name == "theirs" else name)
        with monkeypatch.context() as context:
            context.chdir(tmp_path)
            assert _KeptScriptDirectory.from_config(theirs) is not _KeptScriptDirectory.from_config(theirs)

    # a new home is stamped at the head through the kept directory, and opens again as it is
    home = Home(tmp_path / "home")
    instance_for(home)
    # (Dagster 1.13's consolidated event log leaves its stamp uncommitted, with or without this)
    stores = [home.dagster_home / "history" / "runs.db", home.dagster_home / "schedules" / "schedules.db"]
    for store in stores:
        with sqlite3.connect(store) as conn:
            assert [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")] == list(fresh.get_heads())
    monkeypatch.setenv("DAGSTER_HOME", str(home.dagster_home))  # as Dagster's own tools find it
    again = dg.DagsterInstance.from_config(str(home.dagster_home))
    try:
        assert again.get_runs() == []
    finally:
        again.dispose()


def test_the_dagster_tags_we_name_are_dagsters_own():
    """Dagster's system tags we read or set by name (its module is internal): an upgrade that renames
    one fails here, not as a sensor that requests a publish run forever under a key it never sees."""
    from dagster._core.storage import tags as dagster_tags

    from backfill_assets import tags

    assert (tags.BACKFILL_TAG, tags.RANGE_START, tags.RANGE_END, tags.RUN_KEY) == (
        dagster_tags.BACKFILL_ID_TAG, dagster_tags.ASSET_PARTITION_RANGE_START_TAG,
        dagster_tags.ASSET_PARTITION_RANGE_END_TAG, dagster_tags.RUN_KEY_TAG)


# --- a Dagster instance on PostgreSQL ----------------------------------------------------------

def test_a_postgres_instance_keeps_one_connection_a_storage_and_every_event(postgres_server, tmp_path,
                                                                            monkeypatch):
    """dagster-postgres connects for every statement (NullPool): a run connected ~40 times a
    partition, most of a PostgreSQL run's time. The storages `backfill init --instance postgres`
    names keep one connection each and store every event as Dagster's do."""
    import sqlalchemy as sa

    from backfill_assets.dagster_setup import ensure_dagster_home

    url = postgres_server.create_database("dagster_pooled")
    home = Home(tmp_path / "home")
    ensure_dagster_home(home, url)
    monkeypatch.setenv("DAGSTER_HOME", str(home.dagster_home))

    @dg.asset(check_specs=[dg.AssetCheckSpec("rows_present", asset="thing")])
    def thing():
        yield dg.Output(1)
        yield dg.AssetCheckResult(passed=True)

    connects: list[str] = []
    with dg.DagsterInstance.from_config(str(home.dagster_home)) as instance:
        storages = {"event log": instance.event_log_storage, "runs": instance.run_storage}
        assert {type(s).__name__ for s in storages.values()} == {"PooledPostgresEventLogStorage",
                                                                 "PooledPostgresRunStorage"}
        for name, storage in storages.items():
            sa.event.listen(storage._engine, "connect", lambda *_args, name=name: connects.append(name))
        runs = [dg.materialize([thing], instance=instance) for _ in range(3)]
        assert all(r.success for r in runs)
        assert len(connects) <= 2, connects  # one a storage, reused by every statement of the three runs
        records = instance.fetch_materializations(dg.AssetKey("thing"), limit=10).records
        assert sorted(r.run_id for r in records) == sorted(r.run_id for r in runs)
        checks = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(dg.AssetKey("thing"), "rows_present"), limit=10)
        assert sorted(c.run_id for c in checks) == sorted(r.run_id for r in runs)
        assert all(c.status.value == "SUCCEEDED" for c in checks)
    # another process (the UI, the daemon) reads the same runs through a new instance
    with dg.DagsterInstance.from_config(str(home.dagster_home)) as other:
        assert other.get_run_by_id(runs[0].run_id).status == dg.DagsterRunStatus.SUCCESS


def test_the_postgres_storages_override_what_dagster_still_calls():
    import inspect

    from dagster_postgres.event_log import PostgresEventLogStorage
    from dagster_postgres.run_storage import PostgresRunStorage

    for storage in (PostgresEventLogStorage, PostgresRunStorage):
        # __init__ sets `_engine` (a NullPool engine, replaced by the pooled one), and every statement
        # goes through it; from_config_value builds Dagster's own class with these arguments
        assert list(inspect.signature(storage.__init__).parameters) == [
            "self", "postgres_url", "should_autocreate_tables", "inst_data", "token_provider"], storage
        init = inspect.getsource(storage.__init__)
        assert "self._engine = create_pg_engine(" in init and "poolclass=db_pool.NullPool" in init, storage
        assert "token_provider=get_token_provider_from_config(config_value)" in \
            inspect.getsource(storage.from_config_value), storage
    assert "self._engine" in inspect.getsource(PostgresEventLogStorage._connect)
    assert "self._engine" in inspect.getsource(PostgresRunStorage.connect)


def test_a_postgres_instance_the_webserver_optimizes_leaves_no_connection_open_once_disposed(postgres_server,
                                                                                             tmp_path, monkeypatch):
    """The webserver gives each storage its own pool (`optimize_for_webserver`): the pooled engine
    it replaces, which had connected, is closed, and disposing of the instance closes the rest."""
    import psycopg

    from backfill_assets.dagster_setup import ensure_dagster_home

    url = postgres_server.create_database("dagster_webserver")
    home = Home(tmp_path / "home")
    ensure_dagster_home(home, url)
    assert "&id" not in (home.dagster_home / "dagster.yaml").read_text()  # three blocks, no YAML anchor
    monkeypatch.setenv("DAGSTER_HOME", str(home.dagster_home))

    def backends() -> int:
        with psycopg.connect(url, autocommit=True) as watch:
            return watch.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND pid <> pg_backend_pid()").fetchone()[0]

    instance = dg.DagsterInstance.from_config(str(home.dagster_home))
    instance.get_runs(limit=1)
    instance.optimize_for_webserver(statement_timeout=5000, pool_recycle=3600, max_overflow=10)
    instance.get_runs(limit=1)
    instance.event_log_storage.get_latest_materialization_events([dg.AssetKey("thing")])
    assert backends() <= 2  # the webserver's pool of each of the two storages, nothing left behind
    instance.dispose()
    deadline = time.monotonic() + 10
    while backends() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backends() == 0


# the Dagster functions `event_json` replicates, by the hash of their source when it was written
SERDES_REPLICATED = {"ObjectSerializer.pack_items": "d8ae47dc560cf3e7",
                     "NamedTupleSerializer.object_as_mapping": "77e5a6dbba939382",
                     "_transform_for_serialization": "f225506f6a3edc8a", "serialize_value": "ce4cdafb65e178dd",
                     "EnumSerializer.pack": "5bfb873f647327fd", "MetadataFieldSerializer.pack": "5d6fcaf8426dfb53"}


def test_the_dagster_serializer_functions_event_json_replicates_are_the_ones_it_was_written_against():
    import hashlib
    import inspect

    from dagster._core.definitions import metadata
    from dagster_shared.serdes import serdes

    found = {}
    for name in SERDES_REPLICATED:
        owner, _, attribute = name.rpartition(".")
        module = metadata if owner == "MetadataFieldSerializer" else serdes
        function = getattr(getattr(module, owner), attribute) if owner else getattr(module, attribute)
        found[name] = hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:16]
    assert found == SERDES_REPLICATED, \
        "Dagster changed how it serializes events: re-read event_json.py, then update both"


@pytest.mark.own_dagster_home  # its event log holds this test's events alone
def test_every_event_a_replay_stores_is_the_text_dagsters_serializer_writes(world):
    """The runs, a failed gate (its figures as JSON), a published window (the impact as markdown) and
    the planned checks: each stored event's JSON is `serialize_value`'s, byte for byte, and so are
    values `event_json` hands back to Dagster (sets, tuples, a mapping with non-string keys)."""
    import dataclasses

    from dagster._core.events import DagsterEventType
    from dagster_shared.serdes import deserialize_value, serialize_value
    from dagster_shared.serdes.serdes import SerializableNonScalarKeyMapping

    from backfill_assets.demo.revenue import BUGGY_SELECT
    from backfill_assets.event_json import serialized
    from tests.world import FIXED

    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    unfixed = dataclasses.replace(FIXED, select_sql=BUGGY_SELECT)
    world.approve_for(path, unfixed)
    assert not world.plan_run("fix", keys(3, 4), spec=unfixed, publish=True).success  # a gate fails
    assert world.cli("run", "fix", "--and-publish") == 0
    stored = [text for (text,) in sqlite3.connect(world.home / "dagster" / "event_log" / "event_log.db").execute(
        "SELECT event FROM event_logs ORDER BY id")]
    kinds = set()
    for text in stored:
        event = deserialize_value(text)
        assert serialized(event) == serialize_value(event) == text
        if event.dagster_event is not None:
            kinds.add(event.dagster_event.event_type)
    assert {DagsterEventType.ASSET_CHECK_EVALUATION, DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED,
            DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
            DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE} <= kinds, kinds
    failed = [deserialize_value(t) for t in stored if '"figures"' in t]
    assert failed, "no failed gate's figures were stored"
    for odd in ({"b", "a"}, frozenset({3, 1}), ("x", 1), SerializableNonScalarKeyMapping({("a", 1): "b"}),
                {"key": [dg.AssetKey(["a", "b"]), dg.MetadataValue.json({"n": [1, 2]})]},
                dg.TableColumn("a", "int"), dg.TableColumn("b", "text", tags={"pii": ""})):  # tags skipped when empty
        assert serialized(odd) == serialize_value(odd)


def test_shown_checks_reads_each_partitions_check_as_the_ui_shows_it(world):
    """`shown_checks` (Dagster's `get_asset_check_partition_info`, an internal the UI's partition
    bar reads): a range run's failed gate is False on its partitions, a passed one True, a partition
    never run None."""
    import dataclasses

    from backfill_assets.dagster_storage import shown_checks
    from backfill_assets.demo.revenue import BUGGY_SELECT
    from backfill_assets.gates.results import METRICS_MATCH_SOURCE, ROW_COUNT_MATCHES_SOURCE
    from tests.world import FIXED

    unfixed = dataclasses.replace(FIXED, select_sql=BUGGY_SELECT)
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    world.approve_for(path, unfixed)
    assert not world.plan_run("fix", keys(3, 4), spec=unfixed).success
    shown = shown_checks(world.instance, dg.AssetKey("daily_revenue"),
                         [METRICS_MATCH_SOURCE, ROW_COUNT_MATCHES_SOURCE], keys(1, 4))
    assert {k: shown.get((k, METRICS_MATCH_SOURCE)) for k in keys(1, 4)} == \
        {"2026-01-01": None, "2026-01-02": True, "2026-01-03": False, "2026-01-04": False}
    assert shown.get(("2026-01-03", ROW_COUNT_MATCHES_SOURCE)) is True

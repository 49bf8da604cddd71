"""Any partitioning Dagster offers works, keys taken from the partitions definition itself (issue 12).

Three small replayable tables of their own, each over a source generated with SQL in a DuckDB
warehouse in tmp_path, each driven through the whole product: hourly windows over a TIMESTAMP
column, monthly windows over a DATE column, and static keys over a VARCHAR column. Each writes
its history plan-free, is refused a rewrite without a plan, is approved through the CLI, proven,
run, broken and repaired per partition, published and rolled back to the exact fingerprints it
started from. Beside them, unit checks of time windows with an offset and a time zone, of the
refusals of partitionings and keys a table does not have, and of the run coordinator's key spans.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo

import dagster as dg
import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backfill_assets.cli import main as cli_main
from backfill_assets.control import record
from backfill_assets.control.record import PlanState, PlanVersion
from backfill_assets.dagster_setup import instance_for
from backfill_assets.defs.coordinator import covering_plan, run_span
from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import backfill_resources
from backfill_assets.errors import PartitionRefused, WindowError
from backfill_assets.home import Home
from backfill_assets.partitions import PartitionScheme, scheme_for
from backfill_assets.permission import BACKFILL_TAG
from backfill_assets.plan.loading import collect_problems
from backfill_assets.plan.phases import Phase
from backfill_assets.table import Column, Metric, TableSpec
from backfill_assets.tags import ACTOR_TAG
from backfill_assets.warehouse import open_warehouse
from backfill_assets.warehouse.duckdb_engine import kept_open
from backfill_assets.warehouse.fingerprints import Fingerprint, fingerprints
from tests.plans import complete_plan, edited, write_plan
from tests.world import failure_text, pin_trust_root, signers_text

RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def hour(h: int) -> str:
    return f"2026-01-01-{h:02d}:00"


def month(m: int) -> str:
    return f"2025-{m:02d}-01"


@dataclass(frozen=True)
class Case:
    """One replayable table and the story the lifecycle test tells about it."""

    spec: TableSpec
    partitions_def: dg.PartitionsDefinition
    source_sql: str              # creates and fills the source
    history: tuple[str, ...]     # written plan-free before any plan exists
    old: str                     # a history key outside the window: its rewrite needs a plan
    window: tuple[str, str]
    proof: str
    late_sql: str                # late source rows inside the window, which the replay picks up
    broken: str                  # the partition whose source gets double-loaded after the run
    break_sql: str
    fix_sql: str
    not_a_key: str               # a window start the definition does not have

    @property
    def window_keys(self) -> list[str]:
        keys = list(self.history)
        return keys[keys.index(self.window[0]):keys.index(self.window[1]) + 1]


def _spec(name: str, source: str, select_sql: str, partition: Column, source_partition: str,
          source_keys: tuple[tuple[str, str], ...] = ()) -> TableSpec:
    return TableSpec(
        name=name, source=source, select_sql=select_sql, partition_column=partition.name,
        source_partition_column=source_partition, business_keys=(partition.name, "kind"),
        contract=(partition, Column("kind", "VARCHAR", nullable=False),
                  Column("events", "BIGINT", nullable=False), Column("amount", "DECIMAL(18,2)", nullable=False)),
        metrics=(Metric("events", "sum(events)", "count(*)"), Metric("amount", "sum(amount)", "sum(amount)")),
        publish_as=f"published_{name}", source_keys=source_keys, source_event_id="event_id",
        description=f"{name}: events and amount per partition and kind")


HOURLY = Case(
    spec=_spec("hourly_kinds", "clicks", """
        SELECT CAST(date_trunc('hour', event_ts) AS TIMESTAMP) AS event_hour, kind,
               count(*) AS events, sum(amount) AS amount
        FROM clicks
        WHERE event_ts >= $partition_start AND event_ts < $partition_end
        GROUP BY 1, 2""", Column("event_hour", "TIMESTAMP", nullable=False), "event_ts",
        (("event_hour", "CAST(date_trunc('hour', event_ts) AS TIMESTAMP)"),)),
    partitions_def=dg.HourlyPartitionsDefinition(start_date="2026-01-01-00:00"),
    # an event every 2 minutes over 8 hours; event 90 lies exactly on 03:00, a window's edge
    source_sql="""
        CREATE TABLE clicks AS
        SELECT i AS event_id, TIMESTAMP '2026-01-01 00:00:00' + (2 * i) * INTERVAL 1 MINUTE AS event_ts,
               ['view', 'cart', 'buy'][i % 3 + 1] AS kind, CAST((i * 37) % 100 + 0.25 AS DECIMAL(18,2)) AS amount
        FROM range(240) AS t(i)""",
    history=tuple(hour(h) for h in range(8)),
    old=hour(1),
    window=(hour(3), hour(6)),
    proof=hour(4),
    late_sql="""INSERT INTO clicks VALUES
        (1000, TIMESTAMP '2026-01-01 03:00:00', 'buy', 10), (1001, TIMESTAMP '2026-01-01 04:59:59.999', 'buy', 11),
        (1002, TIMESTAMP '2026-01-01 05:30:00', 'refund', 12), (1003, TIMESTAMP '2026-01-01 06:00:00', 'buy', 13)""",
    broken=hour(5),
    break_sql="INSERT INTO clicks SELECT event_id, event_ts, kind, 999 FROM clicks WHERE event_id = 160",
    fix_sql="DELETE FROM clicks WHERE amount = 999",
    not_a_key="2026-01-01-03:30",
)

MONTHLY = Case(
    spec=_spec("monthly_kinds", "sales", """
        SELECT CAST(date_trunc('month', event_date) AS DATE) AS month_start, kind,
               count(*) AS events, sum(amount) AS amount
        FROM sales
        WHERE event_date >= $partition_start AND event_date < $partition_end
        GROUP BY 1, 2""", Column("month_start", "DATE", nullable=False), "event_date",
        (("month_start", "CAST(date_trunc('month', event_date) AS DATE)"),)),
    partitions_def=dg.MonthlyPartitionsDefinition(start_date="2025-01-01"),
    # two sales a day from 2025-01-01 to 2025-06-30
    source_sql="""
        CREATE TABLE sales AS
        SELECT i AS event_id, CAST(DATE '2025-01-01' + CAST(i // 2 AS INTEGER) AS DATE) AS event_date,
               ['online', 'store'][i % 2 + 1] AS kind, CAST((i * 13) % 50 + 0.5 AS DECIMAL(18,2)) AS amount
        FROM range(362) AS t(i)""",
    history=tuple(month(m) for m in range(1, 7)),
    old=month(5),
    window=(month(2), month(4)),
    proof=month(3),
    # on the edges of the months: the last and first days
    late_sql="""INSERT INTO sales VALUES
        (1000, DATE '2025-02-28', 'online', 10), (1001, DATE '2025-03-01', 'phone', 11),
        (1002, DATE '2025-03-31', 'store', 12), (1003, DATE '2025-04-30', 'phone', 13)""",
    broken=month(4),
    break_sql="INSERT INTO sales SELECT event_id, event_date, kind, 999 FROM sales WHERE event_id = 200",
    fix_sql="DELETE FROM sales WHERE amount = 999",
    not_a_key="2025-02-15",
)

STATIC = Case(
    spec=_spec("region_kinds", "region_events", """
        SELECT region, kind, count(*) AS events, sum(amount) AS amount
        FROM region_events
        WHERE region = $partition
        GROUP BY 1, 2""", Column("region", "VARCHAR", nullable=False), "region"),
    partitions_def=dg.StaticPartitionsDefinition(["eu", "us", "apac"]),
    source_sql="""
        CREATE TABLE region_events AS
        SELECT i AS event_id, ['eu', 'us', 'apac'][i % 3 + 1] AS region, ['a', 'b'][i % 2 + 1] AS kind,
               CAST((i * 7) % 40 + 0.75 AS DECIMAL(18,2)) AS amount
        FROM range(90) AS t(i)""",
    history=("eu", "us", "apac"),
    old="apac",
    window=("eu", "us"),
    proof="us",
    late_sql="INSERT INTO region_events VALUES (1000, 'eu', 'c', 10), (1001, 'us', 'a', 11)",
    broken="eu",
    break_sql="INSERT INTO region_events SELECT event_id, region, kind, 999 FROM region_events WHERE event_id = 3",
    fix_sql="DELETE FROM region_events WHERE amount = 999",
    not_a_key="mars",
)

CASES = {"hourly": HOURLY, "monthly": MONTHLY, "static": STATIC}

# partitionings a replayable table does not support, refused when the definitions load
UNSUPPORTED = {
    "multi": Case(**{**vars(STATIC), "partitions_def": dg.MultiPartitionsDefinition({
        "region": dg.StaticPartitionsDefinition(["eu", "us"]),
        "day": dg.DailyPartitionsDefinition(start_date="2026-01-01")})}),
    "dynamic": Case(**{**vars(STATIC), "partitions_def": dg.DynamicPartitionsDefinition(name="regions")}),
}


def definitions(name: str, home: str) -> dg.Definitions:
    """The team's definitions of one case, as its defs.py builds them."""
    case = {**CASES, **UNSUPPORTED}[name]
    table = make_replayable_table(case.spec, case.partitions_def)
    return dg.Definitions(assets=[dg.AssetSpec(case.spec.source), *table.assets], sensors=table.sensors,
                          resources=backfill_resources(home=home))


@dataclass
class Result:
    code: int
    out: str
    err: str


class Lab:
    """A warehouse home, a definitions file, SSH approvers and a Dagster instance in tmp_path."""

    def __init__(self, tmp_path: Path, name: str, keys: dict[str, Path], capsys) -> None:
        self.root, self.name, self.keys, self.capsys = tmp_path, name, keys, capsys
        self.case = CASES.get(name)
        self.home = tmp_path / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self._instance: dg.DagsterInstance | None = None
        signers = tmp_path / "approvers" / "allowed_signers"
        signers.parent.mkdir(parents=True, exist_ok=True)
        signers.write_text(signers_text(keys))
        with open_warehouse(Home(self.home)).session() as session:
            pin_trust_root(session, signers)
        self.defs_file = self.write_defs(name)

    def write_defs(self, name: str) -> Path:
        path = self.root / f"defs_{name}.py"
        path.write_text("from tests.test_partitionings import definitions\n\n"
                        f"defs = definitions({name!r}, home={str(self.home)!r})\n", encoding="utf-8")
        return path

    @property
    def instance(self) -> dg.DagsterInstance:
        """The home's Dagster instance, the one `backfill run` uses too."""
        if self._instance is None:
            self._instance = instance_for(Home(self.home))
        return self._instance

    def close(self) -> None:
        if self._instance is not None:
            self._instance.dispose()

    @property
    def spec(self) -> TableSpec:
        return self.case.spec

    def scheme(self) -> PartitionScheme:
        spec = self.spec
        return scheme_for(self.case.partitions_def, spec.column(spec.partition_column).type, name=spec.name)

    def cli(self, *args: str) -> Result:
        self.capsys.readouterr()
        code = cli_main(["--home", str(self.home), *args])
        captured = self.capsys.readouterr()
        return Result(code, captured.out, captured.err)

    def sql(self, query: str, params: list | None = None) -> list[tuple]:
        with open_warehouse(Home(self.home)).session() as session:
            return session.rows(query, params or [])

    def run_sql(self, statement: str) -> None:
        with open_warehouse(Home(self.home)).session() as session:
            session.execute(statement)

    def materialize(self, keys: list[str], *, publish: bool = False) -> dg.ExecuteInProcessResult:
        """An untagged in-process run of the target: the UI's Materialize, an incremental run."""
        run_tags = {ACTOR_TAG: "test"}
        if len(keys) == 1:
            run_tags["dagster/partition"] = keys[0]
        else:
            run_tags.update({RANGE_START: keys[0], RANGE_END: keys[-1]})
        selection = [dg.AssetKey(self.spec.name)] + ([dg.AssetKey(self.spec.publish_as)] if publish else [])
        job = definitions(self.name, str(self.home)).resolve_implicit_global_asset_job_def()
        return job.execute_in_process(instance=self.instance, asset_selection=selection, tags=run_tags,
                                      raise_on_error=False)

    def fingerprints(self, table: str, keys: list[str]) -> dict[str, Fingerprint]:
        with open_warehouse(Home(self.home)).session() as session:
            return fingerprints(session, table, self.spec.columns, self.scheme(), self.spec.partition_column,
                                keys)

    def plan(self, plan_id: str, start: str, end: str, proof: str) -> Path:
        spec = self.spec
        document = complete_plan(plan_id=plan_id, start=start, end=end, proof=(proof,), per_run=2,
                                 target=spec.name, source=spec.source)
        document = edited(document, reason=f"late {spec.source} rows were missed by {spec.name}",
                          downstream=[{"asset": spec.publish_as, "owners": ["analytics"]}],
                          gates__metrics=[{"name": "events"}, {"name": "amount"}])
        return write_plan(self.root / "plans" / f"{plan_id}.yaml", document)

    def approve(self, path: Path, who: str) -> Result:
        return self.cli("plan", "approve", str(path), "--by", who, "--key", str(self.keys[who]),
                        "--defs", str(self.defs_file))

    def phase(self, plan_id: str) -> str | None:
        found = self.sql("SELECT phase FROM backfill_control.plans WHERE plan_id = ?", [plan_id])
        return found[0][0] if found else None


@pytest.fixture
def lab(tmp_path, ssh_keys, capsys, monkeypatch):
    made: list[Lab] = []

    def make(name: str) -> Lab:
        made.append(Lab(tmp_path, name, ssh_keys, capsys))
        monkeypatch.setenv("BACKFILL_DEFS", str(made[-1].defs_file))  # the commands without --defs find them
        monkeypatch.setenv("BACKFILL_HOME", str(made[-1].home))  # where its Dagster runs are deployed
        return made[-1]
    with kept_open():  # the lab's database loaded once for the test, as `world` keeps its own
        yield make
    for each in made:
        each.close()


def the_whole_lifecycle(lab: Lab) -> None:
    case, spec = lab.case, lab.spec
    lab.run_sql(case.source_sql)
    history, window = list(case.history), case.window_keys

    # the history, written plan-free: untagged runs over empty partitions, published as they land
    written = lab.materialize(history, publish=True)
    assert written.success, failure_text(written)
    target_before = lab.fingerprints(spec.table, history)
    published_before = lab.fingerprints(spec.publish_table, history)
    assert all(fp.rows > 0 for fp in target_before.values()), target_before
    assert published_before == target_before
    source_rows = lab.sql(f"SELECT count(*) FROM {spec.source_table}")[0][0]
    assert lab.sql(f"SELECT sum(events) FROM {spec.table}") == [(source_rows,)]  # no row lost on an edge

    # the data decides: rewriting a partition that holds rows is a replay, refused without a plan
    refused = lab.materialize([case.old])
    assert not refused.success
    assert (f"no approved replay plan covers partition {case.old} of {spec.name}, and it holds "
            f"{target_before[case.old].rows} row(s)") in failure_text(refused)
    assert lab.fingerprints(spec.table, history) == target_before

    # late rows arrive inside the window: the replay's reason
    lab.run_sql(case.late_sql)

    # approved through the CLI by two signers, against the definitions in a file
    path = lab.plan("replay", *case.window, case.proof)
    assert lab.approve(path, "olivia").code == 0  # the owner signs too
    first = lab.approve(path, "alice")
    assert first.code == 0, first.err
    assert "1/2 approver signature(s) counted (alice)" in first.out and "not approved yet" in first.out
    second = lab.approve(path, "bob")
    assert second.code == 0, second.err
    assert "approved: it is the plan of record" in second.out
    recorded = lab.sql("SELECT partition_keys FROM backfill_control.plan_versions WHERE plan_id = 'replay'")
    assert json.loads(recorded[0][0]) == window  # the definition's keys, in its order

    # a window naming a key the definition does not have is refused at approval, naming it
    bad = lab.plan("bad-window", case.not_a_key, case.window[1], case.proof)
    refusal = lab.approve(bad, "alice")
    assert refusal.code == 1 and "Traceback" not in refusal.err
    assert len(refusal.err.splitlines()) == 1, refusal.err  # one problem, one line
    assert refusal.err.rstrip().endswith(
        f": window = '{case.not_a_key}..{case.window[1]}': '{case.not_a_key}' is not a partition key of "
        f"{spec.name} ({_cadence(case)} partitions): use keys between {case.history[0]} and "
        f"{lab.scheme().ordered_keys[-1]}"), refusal.err
    assert lab.phase("bad-window") is None

    # the proof (twice, identical fingerprints), then the window
    proof = lab.cli("run", "replay", "--proof")
    assert proof.code == 0, proof.err + proof.out
    assert "proof passed: fingerprints identical on both runs; plan replay is proven" in proof.out
    run = lab.cli("run", "replay")
    assert run.code == 0, run.err + run.out
    assert "plan replay is reconciled" in run.out
    after_run = lab.fingerprints(spec.table, history)
    for key in history:  # the window changed, nothing outside it did
        assert (after_run[key] != target_before[key]) == (key in window), key
    assert lab.fingerprints(spec.publish_table, history) == published_before  # publish is frozen

    # a double-loaded source in one partition: reconcile fails naming exactly that partition
    lab.run_sql(case.break_sql)
    broken = lab.cli("reconcile", "replay")
    assert broken.code == 1 and "NOT reconciled; plan replay is running" in broken.out
    failing = {line.split()[0] for line in broken.out.splitlines() if "FAIL" in line}
    assert failing == {case.broken}, broken.out
    assert f"  {case.broken} source_has_no_duplicates: 1 duplicated event_id" in broken.out
    assert lab.cli("publish", "replay").code == 1  # publish stays shut

    # fixed at the source, the partition re-run alone
    lab.run_sql(case.fix_sql)
    rerun = lab.cli("run", "replay", "--partitions", case.broken)
    assert rerun.code == 0, rerun.err + rerun.out
    assert "plan replay is reconciled" in rerun.out
    again = lab.cli("reconcile", "replay")
    assert again.code == 0 and "all gates passed; plan replay is reconciled" in again.out, again.out

    # publish copies the window; rollback restores every fingerprint of both tables
    published = lab.cli("publish", "replay")
    assert published.code == 0, published.err
    assert f"published {spec.publish_as} for {case.window[0]}..{case.window[1]}" in published.out
    assert lab.fingerprints(spec.publish_table, window) == lab.fingerprints(spec.table, window)
    assert lab.phase("replay") == "published"
    rolled = lab.cli("rollback", "replay")
    assert rolled.code == 0, rolled.err
    assert f"restored {len(window)} partition(s) of {spec.table}" in rolled.out
    assert lab.fingerprints(spec.table, history) == target_before
    assert lab.fingerprints(spec.publish_table, history) == published_before
    assert lab.phase("replay") == "rolled_back"


def _cadence(case: Case) -> str:
    return {dg.StaticPartitionsDefinition: "static"}.get(
        type(case.partitions_def), type(case.partitions_def).__name__.replace("PartitionsDefinition", "").lower())


def test_an_hourly_table_over_a_timestamp_column_replays_end_to_end(lab):
    the_whole_lifecycle(lab("hourly"))


def test_a_monthly_table_over_a_date_column_replays_end_to_end(lab):
    the_whole_lifecycle(lab("monthly"))


def test_a_static_table_over_a_varchar_column_replays_end_to_end(lab):
    the_whole_lifecycle(lab("static"))


# --- time windows with an offset or a time zone ----------------------------------------------------

WINDOW_SQL = "SELECT * FROM s WHERE ts >= $partition_start AND ts < $partition_end AND $partition IS NOT NULL"


def test_a_daily_window_with_an_hour_offset_resolves_through_the_scheme():
    daily = dg.DailyPartitionsDefinition(start_date="2026-01-01", hour_offset=3)
    scheme = scheme_for(daily, "TIMESTAMP", name="shifted")
    assert scheme.kind == "range"
    assert scheme.window("2026-01-02", "2026-01-04") == ["2026-01-02", "2026-01-03", "2026-01-04"]
    assert scheme.params_for(WINDOW_SQL, "2026-01-02") == {
        "partition_start": dt.datetime(2026, 1, 2, 3), "partition_end": dt.datetime(2026, 1, 3, 3),
        "partition": dt.datetime(2026, 1, 2, 3)}
    assert scheme.params_for("WHERE day = $partition", "2026-01-02") == {"partition": dt.datetime(2026, 1, 2, 3)}
    # over a DATE column a day is still its own key's date
    assert scheme_for(daily, "DATE", name="shifted").predicate_params("2026-01-02") == [dt.date(2026, 1, 2)]
    weekly = scheme_for(dg.WeeklyPartitionsDefinition(start_date="2026-01-04"), "DATE", name="weeks")
    assert weekly.predicate_params("2026-01-11") == [dt.date(2026, 1, 11), dt.date(2026, 1, 18)]
    with pytest.raises(WindowError, match="'2026-01-02-03:00' is not a partition key of shifted"):
        scheme.window("2026-01-02-03:00", "2026-01-04")


def test_an_hourly_window_in_new_york_follows_its_wall_clock_and_daylight_saving():
    hourly = dg.HourlyPartitionsDefinition(start_date="2026-03-07-00:00", timezone="America/New_York")
    wall = scheme_for(hourly, "TIMESTAMP", name="ny")
    assert wall.params_for(WINDOW_SQL, "2026-03-07-09:00") == {
        "partition_start": dt.datetime(2026, 3, 7, 9), "partition_end": dt.datetime(2026, 3, 7, 10),
        "partition": dt.datetime(2026, 3, 7, 9)}
    # spring forward: 02:00 does not exist that night, so it is no key and windows skip it
    assert wall.window("2026-03-08-01:00", "2026-03-08-04:00") == [
        "2026-03-08-01:00", "2026-03-08-03:00", "2026-03-08-04:00"]
    with pytest.raises(WindowError, match="'2026-03-08-02:00' is not a partition key of ny"):
        wall.window("2026-03-08-02:00", "2026-03-08-04:00")
    # fall back: 01:00 happens twice; over TIMESTAMPTZ the two windows are consecutive real hours
    aware = scheme_for(dg.HourlyPartitionsDefinition(start_date="2026-10-31-00:00", timezone="America/New_York"),
                       "TIMESTAMPTZ", name="ny")
    keys = aware.window("2026-11-01-00:00", "2026-11-01-02:00")
    assert keys == ["2026-11-01-00:00", "2026-11-01-01:00", "2026-11-01-01:00-0500", "2026-11-01-02:00"]
    connection = duckdb.connect()
    connection.execute("SET TimeZone = 'UTC'")
    utc = ZoneInfo("UTC")
    instants = [tuple(connection.execute("SELECT CAST($partition_start AS TIMESTAMPTZ), "
                                         "CAST($partition_end AS TIMESTAMPTZ)",
                                         aware.params_for(WINDOW_SQL.replace("$partition IS", "1 IS"), k)
                                         ).fetchone()) for k in keys]
    assert instants == [(dt.datetime(2026, 11, 1, h, tzinfo=utc), dt.datetime(2026, 11, 1, h + 1, tzinfo=utc))
                        for h in (4, 5, 6, 7)]


# --- what a replayable table refuses ---------------------------------------------------------------

@pytest.mark.parametrize("name, kind", [("multi", "MultiPartitionsDefinition"),
                                        ("dynamic", "DynamicPartitionsDefinition")])
def test_an_unsupported_partitioning_is_refused_when_the_definitions_load(lab, name, kind):
    case = UNSUPPORTED[name]
    with pytest.raises(WindowError, match=f"region_kinds uses {kind}, which a replayable table does not support"):
        make_replayable_table(case.spec, case.partitions_def)
    made = lab("static")
    bad_defs = made.write_defs(name)
    plan = made.plan("replay", "eu", "us", "us")
    result = made.cli("plan", "validate", str(plan), "--defs", str(bad_defs))
    assert result.code == 2
    assert result.err.splitlines() == [
        f"backfill: region_kinds uses {kind}, which a replayable table does not support: use time-window "
        "(hourly, daily, weekly, monthly, cron) or static partitions"], result.err


# --- the run coordinator takes keys as text ------------------------------------------------------

def _state(phase: Phase, keys: tuple[str, ...], proof: str) -> PlanState:
    document = complete_plan(plan_id="regions", start=keys[0], end=keys[-1], proof=(proof,),
                             target="region_kinds", source="region_events")
    plan, problems = collect_problems(document)
    assert plan is not None, problems
    sha = f"{phase.value:0<64}"[:64]
    return PlanState("regions", phase, "region_kinds", "olivia", sha, None, "", PlanVersion(sha, plan, keys, None))


def test_the_run_coordinator_takes_static_keys_as_text():
    assert run_span({BACKFILL_TAG: "bf", RANGE_START: "eu", RANGE_END: "us"}) == ("eu", "us")
    assert run_span({BACKFILL_TAG: "bf", "dagster/partition": "apac"}) == ("apac", "apac")
    assert run_span({BACKFILL_TAG: "bf", RANGE_START: "eu"}) is None
    proven = _state(Phase.PROVEN, ("eu", "us"), "us")
    assert covering_plan([proven], "region_kinds", ("eu", "us")) is proven
    approved = _state(Phase.APPROVED, ("eu", "us"), "us")
    assert covering_plan([approved], "region_kinds", ("us", "us")) is approved
    with pytest.raises(PartitionRefused, match=r"only its proof partitions \(us\) may run"):
        covering_plan([approved], "region_kinds", ("eu", "us"))
    with pytest.raises(PartitionRefused, match="partitions us..apac of region_kinds reach outside plan regions's"):
        covering_plan([proven], "region_kinds", ("us", "apac"))
    assert covering_plan([proven], "region_kinds", ("apac", "apac")) is None  # the data decides


def test_the_plan_of_record_holds_the_definitions_keys_in_their_order(lab):
    made = lab("static")
    path = made.plan("regions", "us", "apac", "apac")
    assert all(made.approve(path, who).code == 0 for who in ("olivia", "alice", "bob"))
    with open_warehouse(Home(made.home)).session() as session:
        [state] = record.active_plans(session, target="region_kinds")
    assert state.partition_keys == ("us", "apac")  # the definition's order, not the alphabet
    assert covering_plan([state], "region_kinds", ("apac", "apac")) == state


def test_static_keys_on_a_padded_char_column_are_grouped_on_each_engine(engine_world):
    """PostgreSQL pads CHAR(n) values with spaces ('a' reads back as 'a   '); grouping by partition
    must still find the key, or fingerprints, gates and diffs of such a table fail."""
    from backfill_assets.warehouse.grouping import rows_per_partition

    scheme = scheme_for(dg.StaticPartitionsDefinition(["a", "b", "c"]), "CHAR(4)", name="coded")
    with engine_world.warehouse().session() as session, session.transaction():
        session.execute("CREATE TABLE coded (k CHAR(4), v INTEGER)")
        session.execute("INSERT INTO coded VALUES ('a', 1), ('a', 2), ('b', 3)")
    with engine_world.warehouse().session() as session:
        assert rows_per_partition(session, "coded", "k", scheme, ["a", "b", "c"]) == {"a": 2, "b": 1}
        prints = fingerprints(session, "coded", ["k", "v"], scheme, "k", ["a", "b", "c"])
    assert [prints[k].rows for k in ("a", "b", "c")] == [2, 1, 0]


@pytest.mark.parametrize("engine_world", ["duckdb", "postgresql"], indirect=True)
def test_several_keys_bounded_by_their_span_select_exactly_their_rows(engine_world):
    """`many_predicate` bounds a list of dates by its least and greatest (a scan filters a range
    first: 35% off a run's source scan), and keeps the list: days inside the span but not listed
    stay out; a list of every day of its span is the range alone. Text keys get no range (a
    collation may order them otherwise than Python)."""
    from backfill_assets.warehouse.grouping import rows_per_partition
    from backfill_assets.warehouse.partition_sql import many_predicate

    daily = scheme_for(dg.DailyPartitionsDefinition(start_date="2026-01-01"), "DATE", name="days")
    coded = scheme_for(dg.StaticPartitionsDefinition(["a", "B", "c"]), "VARCHAR", name="coded")
    with engine_world.warehouse().session() as session, session.transaction():
        session.execute("CREATE TABLE days (d DATE, v INTEGER)")
        session.execute("INSERT INTO days VALUES " + ", ".join(f"(DATE '2026-01-0{i}', {i})" for i in range(1, 7)))
        session.execute("CREATE TABLE coded (k VARCHAR, v INTEGER)")
        session.execute("INSERT INTO coded VALUES ('a', 1), ('B', 2), ('c', 3)")
    keys = ["2026-01-05", "2026-01-01", "2026-01-02"]
    where, params = many_predicate(daily, "d", keys)
    assert ">=" in where and len(params) == len(keys) + 2
    assert ">=" not in many_predicate(coded, "k", ["a", "B"])[0]
    # every day from the first to the last: the range alone, two values bound, not one a day
    every = ["2026-01-04", "2026-01-02", "2026-01-03", "2026-01-03"]
    where, params = many_predicate(daily, "d", every)
    assert " IN " not in where and params == [dt.date(2026, 1, 2), dt.date(2026, 1, 4)]
    with engine_world.warehouse().session() as session:
        assert rows_per_partition(session, "days", "d", daily, keys) == {k: 1 for k in keys}
        assert rows_per_partition(session, "days", "d", daily, every) == {k: 1 for k in every}
        assert rows_per_partition(session, "coded", "k", coded, ["a", "B"]) == {"a": 1, "B": 1}


@settings(max_examples=30, deadline=None)  # three leap days in range; Dagster lists ~10 us a key
@given(start=st.dates(dt.date(2015, 1, 1), dt.date(2026, 11, 1)), end_offset=st.integers(0, 3),
       days=st.one_of(st.none(), st.integers(1, 800)))
def test_daily_keys_by_date_arithmetic_are_dagsters_keys(start, end_offset, days):
    from backfill_assets.partitions import _keys, _plain_utc_days

    end = None if days is None else (start + dt.timedelta(days=days)).isoformat()
    daily = dg.DailyPartitionsDefinition(start_date=start.isoformat(), end_date=end, end_offset=end_offset)
    assert _plain_utc_days(daily)
    _keys.cache_clear()
    assert _keys(daily, daily.get_last_partition_key()) == tuple(daily.get_partition_keys())


@pytest.mark.parametrize("daily", [dg.DailyPartitionsDefinition("2020-01-01", timezone="America/Sao_Paulo"),
                                   dg.DailyPartitionsDefinition("2020-01-01", hour_offset=3),
                                   dg.DailyPartitionsDefinition("20200101", fmt="%Y%m%d")])
def test_other_days_are_listed_by_dagster(daily):
    from backfill_assets.partitions import _keys, _plain_utc_days

    assert not _plain_utc_days(daily)
    assert _keys(daily, daily.get_last_partition_key()) == tuple(daily.get_partition_keys())


def test_rows_in_a_window_the_definition_excludes_are_never_copied_by_a_publish_spanning_it(lab, monkeypatch):
    """Hurried user (a hand-edit of the target). An hourly table over a TIMESTAMP column whose
    partitions definition excludes 02:00 (Dagster's `exclusions`, accepted by `scheme_for`): 01:00
    and 03:00 are consecutive keys, so `PartitionScheme.runs` merges them and the copy's predicate
    (`many_predicate`) becomes [01:00, 04:00). Rows in 02:00..03:00 belong to no partition, no gate
    and no fingerprint sees them (fingerprints group by each key's own window), yet publish copies
    them into the published table, and the copy's proof does not notice.

    Found by an attack; `runs` now merges only keys whose windows touch."""
    import dataclasses

    excluded = dataclasses.replace(HOURLY, partitions_def=dg.HourlyPartitionsDefinition(
        start_date="2026-01-01-00:00", exclusions=[dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.UTC)]))
    monkeypatch.setitem(CASES, "hourly_gap", excluded)
    made = lab("hourly_gap")
    made.run_sql(excluded.source_sql)
    assert hour(2) not in made.scheme()
    # history loaded plan-free, in runs that never span the excluded hour
    for part in ([hour(0), hour(1)], [hour(3), hour(4)]):
        assert made.materialize(part).success
    # by hand, a row in the excluded hour: in no partition, so no gate, write or fingerprint judges it
    made.run_sql("INSERT INTO hourly_kinds VALUES (TIMESTAMP '2026-01-01 02:30:00', 'forged', 1, 99999.99)")

    # the UI's Materialize of the published asset over the loaded hours: 00, 01, 03, 04
    job = definitions("hourly_gap", str(made.home)).resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(instance=made.instance, asset_selection=[dg.AssetKey("published_hourly_kinds")],
                                    tags={RANGE_START: hour(0), RANGE_END: hour(4), "backfill_assets/actor": "t"},
                                    raise_on_error=False)
    leaked = made.sql("SELECT event_hour, kind, amount FROM published_hourly_kinds WHERE kind = 'forged'")
    assert leaked == [], f"publish (success={result.success}) copied rows no gate checked to consumers: {leaked}"

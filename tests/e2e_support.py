"""End-to-end support: a real `dagster dev` (webserver + daemon) on a free port, driven over GraphQL.

`dagster_dev(...)` runs `backfill init` in a temp BACKFILL_HOME (which writes DAGSTER_HOME/dagster.yaml
with the write-permission run coordinator), lets the caller prepare data, then starts
`dagster dev -w <repo>/workspace.yaml` in its own process group with BACKFILL_HOME/DAGSTER_HOME set,
waits until the code location is loaded, yields a `DagsterDev` client and, on exit, terminates the
whole process group (SIGTERM, then SIGKILL) so no webserver, daemon, code server or run worker
survives.

The client talks to /graphql with urllib and reads what the UI reads: backfills and their runs with
their failure messages, asset check executions per partition with their metadata, and the asset
observations the reopen sensor records. Every process started here gets a clean environment: the
developer's BACKFILL_* and DAGSTER_HOME never leak into a test.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import duckdb

from tests.cli_server import Server

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DEMO_DEFS = "backfill_assets.demo.daily"  # the daily table alone, as the scenarios plan it
T = TypeVar("T")

# Backfill states that will not change any more (BulkActionStatus in dagster_graphql).
BACKFILL_DONE = frozenset({"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"})
RUN_DONE = frozenset({"SUCCESS", "FAILURE", "CANCELED"})
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"

# --- the GraphQL documents (Dagster 1.13 schema) ------------------------------------------------

WORKSPACE_QUERY = """
query Workspace {
  workspaceOrError {
    __typename
    ... on Workspace {
      locationEntries {
        name
        loadStatus
        locationOrLoadError { __typename ... on PythonError { message } }
      }
    }
    ... on PythonError { message }
  }
}
"""

LAUNCH_BACKFILL_MUTATION = """
mutation LaunchPartitionBackfill($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId launchedRunIds }
    ... on Error { message }
    ... on PythonError { stack }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""

BACKFILL_QUERY = """
query PartitionBackfill($backfillId: String!) {
  partitionBackfillOrError(backfillId: $backfillId) {
    __typename
    ... on PartitionBackfill {
      id
      status
      partitionNames
      numPartitions
      endTimestamp
      error { message }
    }
    ... on BackfillNotFoundError { message }
    ... on PythonError { message }
  }
}
"""

RUNS_QUERY = """
query RunsByTag($filter: RunsFilter!) {
  runsOrError(filter: $filter) {
    __typename
    ... on Runs {
      results {
        runId
        status
        startTime
        endTime
        tags { key value }
        eventConnection {
          events {
            __typename
            ... on MessageEvent { message eventType }
            ... on ErrorEvent { error { message } }
          }
        }
      }
    }
    ... on InvalidPipelineRunsFilterError { message }
    ... on PythonError { message }
  }
}
"""

METADATA_ENTRIES = """
fragment Entries on MetadataEntry {
  __typename
  label
  ... on TextMetadataEntry { text }
  ... on MarkdownMetadataEntry { mdStr }
  ... on JsonMetadataEntry { jsonString }
  ... on IntMetadataEntry { intValue }
  ... on FloatMetadataEntry { floatValue }
  ... on BoolMetadataEntry { boolValue }
}
"""

CHECK_EXECUTIONS_QUERY = """
query CheckExecutions($assetKey: AssetKeyInput!, $checkName: String!, $partition: String, $limit: Int!) {
  assetCheckExecutions(assetKey: $assetKey, checkName: $checkName, partition: $partition,
                       limit: $limit) {
    id
    runId
    status
    partition
    timestamp
    evaluation {
      success
      partition
      description
      severity
      metadataEntries { ...Entries }
    }
  }
}
""" + METADATA_ENTRIES

ASSET_CHECKS_QUERY = """
query AssetChecks($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    __typename
    ... on AssetNode {
      assetChecksOrError {
        __typename
        ... on AssetChecks { checks { name blocking } }
      }
    }
  }
}
"""

OBSERVATIONS_QUERY = """
query Observations($assetKey: AssetKeyInput!, $limit: Int!) {
  assetOrError(assetKey: $assetKey) {
    __typename
    ... on Asset {
      assetObservations(limit: $limit) {
        timestamp
        runId
        metadataEntries { ...Entries }
      }
    }
  }
}
""" + METADATA_ENTRIES

SET_NUX_SEEN_MUTATION = "mutation SetNuxSeen { setNuxSeen }"


class GraphQLError(AssertionError):
    pass


# --- results ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunEvent:
    type: str | None
    message: str
    error: str | None


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    status: str
    tags: dict[str, str]
    start_time: float | None
    end_time: float | None
    events: list[RunEvent]

    @property
    def partition(self) -> str | None:
        return self.tags.get("dagster/partition")

    @property
    def span(self) -> tuple[str, str] | None:
        """(first, last) partition key of the run: its range tags, or its one partition."""
        if RANGE_START in self.tags and RANGE_END in self.tags:
            return self.tags[RANGE_START], self.tags[RANGE_END]
        return (self.partition, self.partition) if self.partition else None

    def event_types(self) -> list[str]:
        return [e.type for e in self.events if e.type]

    @property
    def failure_messages(self) -> list[str]:
        """RUN_FAILURE / STEP_FAILURE messages and the errors they carry, in order."""
        out: list[str] = []
        for e in self.events:
            if e.type in ("RUN_FAILURE", "STEP_FAILURE"):
                out.append(e.message)
                if e.error:
                    out.append(e.error)
        return out


@dataclass(frozen=True)
class CheckExecution:
    check_name: str
    status: str  # SUCCEEDED, FAILED, EXECUTION_FAILED, IN_PROGRESS, SKIPPED
    run_id: str
    partition: str | None
    passed: bool | None
    description: str | None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Observation:
    timestamp_ms: float
    metadata: dict[str, Any]


def _metadata(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in entries:
        if "jsonString" in entry:
            out[entry["label"]] = json.loads(entry["jsonString"])
        else:
            value = next((entry[k] for k in ("text", "mdStr", "intValue", "floatValue", "boolValue")
                          if k in entry), None)
            out[entry["label"]] = value
    return out


# --- waiting ------------------------------------------------------------------------------------

def wait_until(probe: Callable[[], T | None], *, timeout: float, what: str, interval: float = 1.5,
               describe: Callable[[], str] | None = None) -> T:
    """Call `probe` until it returns something truthy; fail with `what` (and `describe()`) at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{describe()}" if describe else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)


class Background(Generic[T]):
    """Work started now in a thread and awaited later: `result()` joins it and re-raises its error.

    The e2e scenarios spend most of their time waiting for the daemon's and the sensor's 30-second
    ticks; started together, their waits overlap.
    """

    def __init__(self, what: str, work: Callable[[], T]) -> None:
        self.what = what
        self._work = work
        self._outcome: tuple[bool, Any] | None = None
        self._thread = threading.Thread(target=self._run, name=what, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._outcome = (True, self._work())
        except BaseException as exc:  # noqa: BLE001 - handed to whoever asks for the result
            self._outcome = (False, exc)

    def wait(self, timeout: float) -> None:
        self._thread.join(timeout)

    def result(self, timeout: float = 420.0) -> T:
        self._thread.join(timeout)
        if self._outcome is None:
            raise AssertionError(f"{self.what}: still running after {timeout:.0f}s")
        done, value = self._outcome
        if not done:
            raise value
        return value


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(backfill_home: Path, **extra: str) -> dict[str, str]:
    """The environment of every process started here: no developer BACKFILL_* or DAGSTER_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKFILL_") and k != "DAGSTER_HOME"}
    env.update({"BACKFILL_HOME": str(backfill_home), "BACKFILL_DEFS": DEMO_DEFS,
                "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


# --- the warehouse, read briefly (DuckDB lets one process hold the file) ------------------------

def query_warehouse(path: Path, sql: str, params: Sequence[Any] | None = None, *,
                    timeout: float = 60.0) -> list[tuple]:
    """Run one read-only query, retrying while a run, the daemon or the CLI holds the lock."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            con = duckdb.connect(str(path), read_only=True)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
            continue
        try:
            return con.execute(sql, list(params or [])).fetchall()
        finally:
            con.close()


def table_exists(path: Path, table: str, schema: str = "main") -> bool:
    rows = query_warehouse(path, "SELECT count(*) FROM information_schema.tables "
                                 "WHERE table_schema = ? AND table_name = ?", [schema, table])
    return rows[0][0] > 0


def plan_phase(path: Path, plan_id: str) -> str | None:
    rows = query_warehouse(path, "SELECT phase FROM backfill_control.plans WHERE plan_id = ?", [plan_id])
    return rows[0][0] if rows else None


@contextlib.contextmanager
def warehouse_session(backfill_home: Path, *, read_only: bool = False):
    """The product's own session on the home's DuckDB file (it waits while another process holds it)."""
    from backfill_assets.home import Home
    from backfill_assets.warehouse import open_warehouse

    home = Home(backfill_home)
    with open_warehouse(home, f"duckdb:///{home.warehouse}").session(read_only=read_only) as session:
        yield session


def row_fingerprints(backfill_home: Path, table: str, keys: Sequence[str]) -> dict[str, Any]:
    """The product's fingerprint (rows, order-independent digest) of each daily partition of a
    demo table; partitions without rows (or a missing table) give 0 rows."""
    from backfill_assets.demo.definitions import PARTITIONS
    from backfill_assets.demo.revenue import DAILY_REVENUE
    from backfill_assets.partitions import scheme_for
    from backfill_assets.warehouse.fingerprints import EMPTY, fingerprints

    with warehouse_session(backfill_home, read_only=True) as session:
        if not session.engine.table_exists(session, table):
            return dict.fromkeys(keys, EMPTY)
        scheme = scheme_for(PARTITIONS, "DATE", name=DAILY_REVENUE.name)
        return fingerprints(session, table, DAILY_REVENUE.columns, scheme, DAILY_REVENUE.partition_column,
                            list(keys))


def execute_in_warehouse(backfill_home: Path, statement: str, params: Sequence[Any] | None = None) -> None:
    """A hand edit of the warehouse (what a bad deploy or a person might do), outside the product."""
    with warehouse_session(backfill_home) as session:
        session.execute(statement, list(params or []))


# --- the CLI and in-process history -------------------------------------------------------------

_forking: list[Server] = []  # the worker's CLI server, while a module lends it


@contextlib.contextmanager
def commands_forked_from(server: Server) -> Iterator[None]:
    """`run_backfill_cli` forks its commands from the worker's CLI server meanwhile: each is still a
    process of its own, but ~0.3 CPU-s instead of ~1.8 for a new interpreter importing Dagster."""
    _forking.append(server)
    try:
        yield
    finally:
        _forking.remove(server)


def run_backfill_cli(*args: str, backfill_home: Path, expect: int | None = 0, cwd: Path = ROOT,
                     timeout: float = 300) -> subprocess.CompletedProcess:
    """`backfill` as a user types it, with BACKFILL_HOME and the demo definitions (BACKFILL_DEFS) set:
    the installed console script, or a child forked from the CLI server a module lent
    (`commands_forked_from`); `expect` is the exit code it must end with (None: any)."""
    argv = [str(BIN / "backfill"), *args, "--home", str(backfill_home)]
    if _forking:
        proc = _forking[-1].run(argv, clean_env(backfill_home), cwd, timeout)
    else:
        proc = subprocess.run(argv, capture_output=True, text=True, env=clean_env(backfill_home), cwd=cwd,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    if expect is not None and proc.returncode != expect:
        raise AssertionError(f"backfill {' '.join(args)} exited {proc.returncode} (expected {expect})\n"
                             f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


_HISTORY_SCRIPT = """
import sys
import dagster as dg
from backfill_assets.demo.definitions import build_definitions

home, dagster_home, first, last = sys.argv[1:5]
job = build_definitions(home=home).resolve_implicit_global_asset_job_def()
with dg.DagsterInstance.from_config(dagster_home) as instance:
    result = job.execute_in_process(
        instance=instance, asset_selection=[dg.AssetKey("daily_revenue")], raise_on_error=False,
        tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last})
print(result.run_id)
sys.exit(0 if result.success else 1)
"""


def write_history(backfill_home: Path, dagster_home: Path, first: str, last: str) -> str:
    """Materialize daily_revenue first..last plan-free, as the daily schedule or a UI Materialize of
    empty partitions would: one in-process Dagster run (demo definitions) on the instance in
    `dagster_home`. Returns the run id."""
    proc = subprocess.run([sys.executable, "-c", _HISTORY_SCRIPT, str(backfill_home), str(dagster_home),
                           first, last], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=clean_env(backfill_home, DAGSTER_HOME=str(dagster_home)),
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise AssertionError(f"writing the history {first}..{last} failed ({proc.returncode})\n"
                             f"stdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]


# --- the client ---------------------------------------------------------------------------------

@dataclass
class DagsterDev:
    port: int
    backfill_home: Path
    dagster_home: Path
    log_path: Path
    process: subprocess.Popen

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def warehouse(self) -> Path:
        return self.backfill_home / "warehouse.duckdb"

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def graphql(self, query: str, variables: dict[str, Any] | None = None, *,
                timeout: float = 60.0) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(f"{self.url}/graphql", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload = json.load(response)
        if payload.get("errors"):
            raise GraphQLError(f"GraphQL errors: {json.dumps(payload['errors'])[:2000]}")
        return payload["data"]

    # - backfills -

    def launch_backfill(self, asset: str, partitions: Sequence[str], *, title: str,
                        tags: dict[str, str] | None = None) -> str:
        """What the UI's launch dialog sends for a partitioned asset: assetSelection + partitionNames."""
        params = {
            "assetSelection": [{"path": asset.split("/")}],
            "partitionNames": list(partitions),
            "fromFailure": False,
            "tags": [{"key": k, "value": v} for k, v in (tags or {}).items()],
            "title": title,
        }
        result = self.graphql(LAUNCH_BACKFILL_MUTATION, {"backfillParams": params})
        launched = result["launchPartitionBackfill"]
        if launched["__typename"] != "LaunchBackfillSuccess":
            raise GraphQLError(f"launchPartitionBackfill failed: {json.dumps(launched)[:2000]}")
        return launched["backfillId"]

    def backfill(self, backfill_id: str) -> dict[str, Any]:
        result = self.graphql(BACKFILL_QUERY, {"backfillId": backfill_id})["partitionBackfillOrError"]
        if result["__typename"] != "PartitionBackfill":
            raise GraphQLError(f"backfill {backfill_id}: {json.dumps(result)}")
        return result

    def wait_for_backfill_runs(self, backfill_id: str, partitions: Sequence[str], *,
                               timeout: float = 150.0) -> list[RunInfo]:
        """Until the daemon submitted runs covering every partition and each of them ended."""
        wanted = set(partitions)

        def ended() -> list[RunInfo] | None:
            self.assert_alive()
            runs = self.backfill_runs(backfill_id)
            covered = {k for r in runs if r.span for k in partitions if r.span[0] <= k <= r.span[1]}
            if covered != wanted or any(r.status not in RUN_DONE for r in runs):
                return None
            return runs

        return wait_until(ended, timeout=timeout, what=f"the runs of backfill {backfill_id} to end",
                          describe=lambda: self.describe_backfill(backfill_id))

    def wait_for_backfill(self, backfill_id: str, *, timeout: float = 150.0) -> dict[str, Any]:
        """Until the daemon marks the backfill finished and every run it launched has ended."""

        def done() -> dict[str, Any] | None:
            self.assert_alive()
            state = self.backfill(backfill_id)
            if state["status"] not in BACKFILL_DONE:
                return None
            if any(r.status not in RUN_DONE for r in self.backfill_runs(backfill_id)):
                return None
            return state

        return wait_until(done, timeout=timeout, what=f"backfill {backfill_id} to finish",
                          describe=lambda: self.describe_backfill(backfill_id))

    def describe_backfill(self, backfill_id: str) -> str:
        try:
            state = self.backfill(backfill_id)
            runs = [(r.span, r.status, r.failure_messages[:1]) for r in self.backfill_runs(backfill_id)]
            return (f"backfill status {state['status']}, runs {runs}\n"
                    f"--- dagster dev log ---\n{self.log_tail()}")
        except Exception as exc:  # noqa: BLE001 - only a description for a failure message
            return f"(could not describe: {exc})\n{self.log_tail()}"

    # - runs -

    def runs_with_tag(self, key: str, value: str) -> list[RunInfo]:
        result = self.graphql(RUNS_QUERY, {"filter": {"tags": [{"key": key, "value": value}]}})
        runs = result["runsOrError"]
        if runs["__typename"] != "Runs":
            raise GraphQLError(f"runsOrError: {json.dumps(runs)}")
        out = []
        for r in runs["results"]:
            events = [RunEvent(e.get("eventType"), e.get("message") or "",
                               (e.get("error") or {}).get("message"))
                      for e in r["eventConnection"]["events"]]
            out.append(RunInfo(r["runId"], r["status"], {t["key"]: t["value"] for t in r["tags"]},
                               r["startTime"], r["endTime"], events))
        return out

    def backfill_runs(self, backfill_id: str) -> list[RunInfo]:
        return self.runs_with_tag("dagster/backfill", backfill_id)

    # - asset checks -

    def asset_checks(self, asset: str) -> dict[str, bool]:
        """Check name -> blocking, as the asset node declares them."""
        node = self.graphql(ASSET_CHECKS_QUERY, {"assetKey": {"path": asset.split("/")}})
        checks = node["assetNodeOrError"]["assetChecksOrError"]["checks"]
        return {c["name"]: c["blocking"] for c in checks}

    def check_executions(self, asset: str, check_name: str, partition: str | None,
                         limit: int = 10) -> list[CheckExecution]:
        """Executions of one check, newest first (one partition when given)."""
        result = self.graphql(CHECK_EXECUTIONS_QUERY, {
            "assetKey": {"path": asset.split("/")}, "checkName": check_name,
            "partition": partition, "limit": limit})
        out = []
        for e in result["assetCheckExecutions"]:
            evaluation = e["evaluation"] or {}
            out.append(CheckExecution(
                check_name=check_name, status=e["status"], run_id=e["runId"],
                partition=e["partition"], passed=evaluation.get("success"),
                description=evaluation.get("description"),
                metadata=_metadata(evaluation.get("metadataEntries") or [])))
        return out

    def latest_checks(self, asset: str, partition: str,
                      check_names: Sequence[str]) -> dict[str, CheckExecution | None]:
        """The newest execution of each check on one partition (None when it never ran there)."""
        out: dict[str, CheckExecution | None] = {}
        for name in check_names:
            executions = self.check_executions(asset, name, partition, limit=1)
            out[name] = executions[0] if executions else None
        return out

    # - observations -

    def observations(self, asset: str, limit: int = 10) -> list[Observation]:
        """The asset's observations, newest first, with their metadata."""
        result = self.graphql(OBSERVATIONS_QUERY, {"assetKey": {"path": asset.split("/")}, "limit": limit})
        asset_node = result["assetOrError"]
        if asset_node["__typename"] != "Asset":
            return []
        return [Observation(float(o["timestamp"]), _metadata(o["metadataEntries"]))
                for o in asset_node["assetObservations"]]

    def location_names(self) -> list[str]:
        workspace = self.graphql(WORKSPACE_QUERY)["workspaceOrError"]
        return [e["name"] for e in workspace["locationEntries"]]

    def set_nux_seen(self) -> None:
        """What the UI's "Skip" does on its first-visit community dialog."""
        self.graphql(SET_NUX_SEEN_MUTATION)

    # - the process -

    def assert_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise AssertionError(f"dagster dev exited with code {code}\n{self.log_tail()}")


SIGTERM_EXIT_SECONDS = 30


def _ignore_sigint() -> None:
    # A shell's background job starts with SIGINT ignored and children inherit that; `dagster dev`
    # maps SIGTERM onto the SIGINT handler, so it ignored SIGTERM too until scripts/dagster_dev.py
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pids_with_env(marker: str) -> list[int]:
    """Processes whose environment holds `marker` (our temp DAGSTER_HOME): strays of this server."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ:
            found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160]
    except OSError:
        return "gone"


def stop_process_group(process: subprocess.Popen, *, grace: float = 10.0) -> None:
    """SIGTERM the group; again for anything spawned meanwhile; SIGKILL whatever is left at the end.

    While shutting down, the webserver may restart a code server that exited (seen in 1.13); that
    late child never got the first SIGTERM, hence the repeats once `dagster dev` itself is gone.
    """
    pgid = process.pid  # start_new_session=True: the leader's pid is the group id
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    next_term = None
    while _group_alive(pgid) and time.monotonic() < deadline:
        if process.poll() is not None:
            now = time.monotonic()
            if next_term is None:
                next_term = now + 2.0
            elif now >= next_term:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGTERM)
                next_term = now + 5.0
        time.sleep(0.25)
    if _group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


@contextlib.contextmanager
def dagster_dev(tmp: Path, *, startup_timeout: float = 120.0,
                prepare: Callable[[Path, Path], None] | None = None) -> Iterator[DagsterDev]:
    """`backfill init` in tmp/home, then `dagster dev` on a free port until the location loads.

    `prepare(backfill_home, dagster_home)` runs after init and before the server starts (e.g. sample
    data and history).
    """
    backfill_home = (tmp / "home").resolve()
    dagster_home = backfill_home / "dagster"
    run_backfill_cli("init", backfill_home=backfill_home)
    assert (dagster_home / "dagster.yaml").is_file(), "backfill init wrote no dagster.yaml"
    if prepare is not None:
        prepare(backfill_home, dagster_home)

    port = free_port()
    log_path = tmp / "dagster-dev.log"
    # the reopen sensor ticks every 5 s here (30 s by default) so the scenarios wait less
    env = clean_env(backfill_home, DAGSTER_HOME=str(dagster_home), BACKFILL_REOPEN_INTERVAL_SECONDS="5")
    log = open(log_path, "wb")  # noqa: SIM115 - closed in the finally below
    workspace = tmp / "workspace.yaml"  # the demo's definitions, the daily table alone
    workspace.write_text("load_from:\n  - python_module:\n      module_name: backfill_assets.demo.daily\n"
                         f"      working_directory: {ROOT}\n")
    # started as `make ui` starts it, and as a background job would: with SIGINT ignored
    process = subprocess.Popen(
        [str(BIN / "python"), str(ROOT / "scripts" / "dagster_dev.py"), "dev", "-w", str(workspace),
         "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True, preexec_fn=_ignore_sigint)
    server = DagsterDev(port, backfill_home, dagster_home, log_path, process)
    try:
        def loaded() -> bool:
            server.assert_alive()
            try:
                workspace = server.graphql(WORKSPACE_QUERY, timeout=5)["workspaceOrError"]
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                return False
            if workspace["__typename"] != "Workspace":
                return False
            entries = workspace["locationEntries"]
            for entry in entries:
                loc = entry["locationOrLoadError"] or {}
                if loc.get("__typename") == "PythonError":
                    raise AssertionError(f"code location {entry['name']} failed to load: {loc['message']}")
            return bool(entries) and all(e["loadStatus"] == "LOADED" and
                                         (e["locationOrLoadError"] or {}).get("__typename") ==
                                         "RepositoryLocation" for e in entries)

        wait_until(loaded, timeout=startup_timeout, interval=1.0,
                   what=f"dagster dev on port {port} to serve GraphQL with the workspace loaded",
                   describe=server.log_tail)
        yield server
    finally:
        # SIGTERM to `dagster dev` alone, as a supervisor or `kill` sends it: it takes its webserver
        # and daemon down itself (it ignored SIGTERM when started with SIGINT ignored)
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=SIGTERM_EXIT_SECONDS)
            ignored_sigterm = False
        except subprocess.TimeoutExpired:
            ignored_sigterm = True
        stop_process_group(process)
        # a run worker or code server that left the group would still carry our DAGSTER_HOME; a
        # helper of a killed step (Dagster's compute-log `tail` and its orphan watcher) exits within
        # a second or two on its own, so only what is still there after a few seconds counts
        marker = f"DAGSTER_HOME={dagster_home}"
        deadline = time.monotonic() + 5
        while (strays := _pids_with_env(marker)) and time.monotonic() < deadline:
            time.sleep(0.25)
        described = [f"{pid} ({_cmdline(pid)})" for pid in strays]
        for pid in strays:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        log.close()
        if described and sys.exc_info()[0] is None:
            raise AssertionError(f"processes outlived dagster dev's process group: {described}")
        if ignored_sigterm and sys.exc_info()[0] is None:
            raise AssertionError(f"dagster dev did not exit within {SIGTERM_EXIT_SECONDS} s of SIGTERM")

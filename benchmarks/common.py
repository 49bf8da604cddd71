"""What benchmarks/scale.py and benchmarks/engines.py share.

A prepared "plan home" is what a team has right before `backfill run` of the window: `backfill
init`, order events for a proof day plus the window, the target already holding the old (buggy)
numbers for every day, a plan signed by alice and bob through `backfill plan approve`, and the
proof passed with `backfill run --proof`. Baselines get a copy of the same warehouse, so every
alternative overwrites the same existing partitions from the same source rows.

Measuring rules (the machines are shared, 2 cores, noisy): alternatives run interleaved in one
process, in a rotating order, and the scripts report medians over rounds and ratios measured in
the same run, never a lone absolute figure.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PYTHON = sys.executable
BIN = Path(sys.executable).parent
BENCH_DIR = Path(__file__).resolve().parent
DEFS = str(BENCH_DIR / "bench_defs.py")  # the demo's table over partitions from 2019 (see that file)
PLAN_ID = "bench"
TARGET = "daily_revenue"
# What `backfill run` sets for its own process (backfill_assets/execution/runner.py); set here for
# every alternative so the Dagster baselines get the same event batching.
EVENT_BATCH = ("DAGSTER_EVENT_BATCH_SIZE", "1000")

os.environ["BACKFILL_DEFS"] = DEFS
os.environ.setdefault(*EVENT_BATCH)
os.environ.pop("DAGSTER_HOME", None)  # Home.dagster_home must follow each --home, never the caller's

import dagster as dg  # noqa: E402

if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))
from bench_defs import PARTITIONS, START  # noqa: E402
from go_between import GO_BETWEEN  # noqa: E402

from backfill_assets.cli import main as cli_main  # noqa: E402
from backfill_assets.demo.revenue import DAILY_REVENUE, DAILY_REVENUE_V1  # noqa: E402
from backfill_assets.demo.sample import generate_orders  # noqa: E402
from backfill_assets.gates.results import GATE_NAMES  # noqa: E402
from backfill_assets.home import Home  # noqa: E402
from backfill_assets.identifiers import quote  # noqa: E402
from backfill_assets.partitions import PartitionScheme, scheme_for  # noqa: E402
from backfill_assets.warehouse import open_warehouse  # noqa: E402
from backfill_assets.warehouse.ddl import create_sql  # noqa: E402
from backfill_assets.warehouse.engine import Session  # noqa: E402
from backfill_assets.warehouse.partition_sql import predicate  # noqa: E402
from tests.plans import complete_plan, write_plan  # noqa: E402
from tests.world import make_keys, signers_text  # noqa: E402

SCHEME: PartitionScheme = scheme_for(PARTITIONS, "DATE", name=TARGET)


def day_keys(first: dt.date, count: int) -> list[str]:
    return [(first + dt.timedelta(days=i)).isoformat() for i in range(count)]


# --- measuring ------------------------------------------------------------------------------------

def median(values: Sequence[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


@contextlib.contextmanager
def quiet(log: Path) -> Iterator[None]:
    """Everything printed (Python and file descriptors 1 and 2) goes to `log` meanwhile."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "ab") as handle:
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def say(text: str) -> None:
    print(text, flush=True)


@dataclass
class Child:
    seconds: float
    peak_rss_mb: float
    code: int
    output: str
    cpu: float = 0.0


def run_child(cmd: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
              timeout: float = 3600) -> Child:
    """A subprocess with its own wall time, CPU time and peak RSS."""
    full = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    full.pop("DAGSTER_HOME", None)
    if env and "DAGSTER_HOME" in env:
        full["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    scratch = Path(tempfile.mkdtemp(prefix="bench-child-"))
    report, out_path = scratch / "usage.json", scratch / "output.txt"
    try:
        with open(out_path, "wb") as out:
            proc = subprocess.run([PYTHON, "-I", "-S", "-c", GO_BETWEEN, str(report), *[str(c) for c in cmd]],
                                  env=full, cwd=cwd or ROOT, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=timeout, check=False)
        text = out_path.read_text(errors="replace")
        if proc.returncode != 0 or not report.exists():
            raise SystemExit(f"go-between failed ({proc.returncode}) for {cmd}:\n{text[-2000:]}")
        usage = json.loads(report.read_text())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Child(usage["seconds"], usage["maxrss_kb"] / 1024.0, usage["code"], text, usage["cpu"])


def self_peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --- the machine ----------------------------------------------------------------------------------

def machine() -> dict[str, Any]:
    import dagster
    import duckdb

    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "dagster": dagster.__version__,
        "duckdb": duckdb.__version__,
        "date": dt.datetime.now().isoformat(timespec="seconds"),
    }
    with contextlib.suppress(OSError, ValueError):
        total = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
        info["memory_gb"] = round(int(total.split()[1]) / 1024 / 1024, 1)
    with contextlib.suppress(OSError):
        info["loadavg_at_start"] = os.getloadavg()
    try:
        from tests.pg_server import find_pg_bin

        out = subprocess.run([str(find_pg_bin() / "postgres"), "--version"], capture_output=True, text=True)
        info["postgresql"] = out.stdout.split()[2]
    except Exception:  # noqa: BLE001 - only a label
        info["postgresql"] = None
    with contextlib.suppress(Exception):
        info["git"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip() + " (+ working tree)"
    info["code_sha256"] = code_digest()
    return info


def code_digest() -> str:
    """A digest of backfill_assets/**/*.py as this process starts: the product is a moving tree."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted((ROOT / "backfill_assets").rglob("*.py")):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


# --- the CLI --------------------------------------------------------------------------------------

def cli(home: Home, *args: str, log: Path | None = None) -> int:
    """The real `backfill` command in this process (`backfill_assets.cli.main`)."""
    argv = ["--home", str(home.root), *args]
    if log is None:
        return cli_main(argv)
    with quiet(log):
        return cli_main(argv)


def must(code: int, what: str, log: Path | None = None) -> None:
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log and log.exists() else ""
        raise SystemExit(f"{what} exited {code}\n{tail}")


# --- data and plans -------------------------------------------------------------------------------

@dataclass
class PlanHome:
    base: Path
    home: Home
    plan: Path
    proof: str
    window: list[str]          # the window's partitions `backfill run` writes (the proof excluded)
    url: str | None = None     # a server warehouse; None: the DuckDB file in the home
    log: Path = field(default=Path("/dev/null"))

    @property
    def warehouse_file(self) -> Path:
        return self.home.warehouse

    def env(self) -> dict[str, str]:
        env = {"BACKFILL_HOME": str(self.home.root), "BACKFILL_DEFS": DEFS}
        if self.url:
            env["BACKFILL_WAREHOUSE_URL"] = self.url
        return env


def seed_warehouse(session: Session, days: int, rows_per_day: int) -> None:
    """Orders for `days` days from START, and the target holding the old transform's numbers."""
    generate_orders(session, start=START, days=days, rows_per_day=rows_per_day, seed=7)
    spec = DAILY_REVENUE_V1
    end = START + dt.timedelta(days=days - 1)
    with session.transaction():
        session.execute(create_sql(spec))
        session.execute(f"DELETE FROM {quote(spec.table)}")
        # the old numbers for every day at once: the buggy select's range form over the whole window
        select = spec.select_sql.replace("$partition_start", "?").replace("$partition_end", "?")
        assert select.count("?") == 2, "the demo's select no longer takes $partition_start and $partition_end"
        cols = ", ".join(quote(c) for c in spec.columns)
        session.execute(f"INSERT INTO {quote(spec.table)} ({cols}) SELECT {cols} FROM ({select}) AS s",
                        [START, end + dt.timedelta(days=1)])


def prepare_plan_home(base: Path, window: int, rows_per_day: int, *, per_run: int = 30, runs_at_once: int = 1,
                      url: str | None = None, instance_url: str | None = None) -> PlanHome:
    """init (the signers pinned), data, a plan signed by its owner and two approvers, its proof passed:
    ready for `backfill run`."""
    base.mkdir(parents=True, exist_ok=True)
    home = Home(base / "home")
    log = base / "cli.log"
    keys = make_keys(base / "keys")
    signers = base / "approvers" / "allowed_signers"
    signers.parent.mkdir(parents=True, exist_ok=True)
    signers.write_text(signers_text(keys))
    with url_env(url):
        init = ["init", "--allowed-signers", str(signers)] + (
            ["--instance", "postgres", "--instance-url", instance_url] if instance_url else [])
        must(cli(home, *init, log=log), "backfill init", log)
        with open_warehouse(home, url).session() as session:
            seed_warehouse(session, window + 1, rows_per_day)
        proof = START.isoformat()
        end = (START + dt.timedelta(days=window)).isoformat()
        document = complete_plan(plan_id=PLAN_ID, start=proof, end=end, proof=(proof,), per_run=per_run)
        document["execution"]["runs_at_once"] = runs_at_once
        plan = write_plan(base / "plans" / f"{PLAN_ID}.yaml", document)
        for who in ("olivia", "alice", "bob"):  # the owner signs too
            must(cli(home, "plan", "approve", str(plan), "--by", who, "--key", str(keys[who]), log=log),
                 f"plan approve by {who}", log)
        must(cli(home, "run", str(plan), "--proof", log=log), "backfill run --proof", log)
    return PlanHome(base, home, plan, proof, day_keys(START + dt.timedelta(days=1), window), url, log)


@contextlib.contextmanager
def url_env(url: str | None) -> Iterator[None]:
    """BACKFILL_WAREHOUSE_URL set to `url` (or unset) meanwhile."""
    before = os.environ.get("BACKFILL_WAREHOUSE_URL")
    if url:
        os.environ["BACKFILL_WAREHOUSE_URL"] = url
    else:
        os.environ.pop("BACKFILL_WAREHOUSE_URL", None)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("BACKFILL_WAREHOUSE_URL", None)
        else:
            os.environ["BACKFILL_WAREHOUSE_URL"] = before


def copy_warehouse(source: PlanHome, base: Path) -> Home:
    """A DuckDB warehouse identical to `source`'s, for a baseline (DuckDB only)."""
    home = Home(base / "home")
    home.root.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source.warehouse_file, home.warehouse)
    return home


# --- the same SQL the target runs, without the product ---------------------------------------------

def write_keys(session: Session, keys: Sequence[str]) -> None:
    """Per partition, one transaction: DELETE the partition, INSERT the demo's select for it."""
    spec = DAILY_REVENUE
    target, cols = quote(spec.table), ", ".join(quote(c) for c in spec.columns)
    select = session.engine.named(spec.select_sql)
    delete = f"DELETE FROM {target} WHERE {predicate(SCHEME, quote(spec.partition_column))}"
    insert = f"INSERT INTO {target} ({cols}) SELECT {cols} FROM ({select}) AS s"
    for key in keys:
        with session.transaction():
            session.execute(delete, SCHEME.predicate_params(key))
            session.execute(insert, SCHEME.params_for(spec.select_sql, key))


def pure_sql(home: Home, url: str | None, keys: Sequence[str]) -> float:
    started = time.perf_counter()
    with open_warehouse(home, url).session() as session:
        write_keys(session, keys)
    return time.perf_counter() - started


def count_rows(home: Home, url: str | None, keys: Sequence[str]) -> int:
    with open_warehouse(home, url).session(read_only=not url) as session:
        return int(session.scalar(f"SELECT count(DISTINCT order_date) FROM {TARGET} WHERE order_date BETWEEN ? AND ?",
                                  [dt.date.fromisoformat(keys[0]), dt.date.fromisoformat(keys[-1])]))


# --- bare Dagster: a plain @asset over the same SQL -------------------------------------------------

def _evaluation_metadata(gate: str, key: str) -> dict[str, Any]:
    """About what our target attaches to each check evaluation: figures, a detail, a JSON."""
    return {
        "figure.expected": dg.MetadataValue.float(1000.0),
        "figure.actual": dg.MetadataValue.float(1000.0),
        "detail": dg.MetadataValue.text(f"{gate} on {key}: expected 1000, actual 1000, within 0"),
        "figures": dg.MetadataValue.json({"expected": 1000, "actual": 1000, "threshold": 0, "difference": 0}),
    }


def bare_definitions(home: Home, url: str | None, *, checks: bool,
                     policy: dg.BackfillPolicy | None) -> dg.Definitions:
    """`daily_revenue` as a team would write it without this product: the same SQL, optionally the
    same eight per-partition check evaluations our target logs, nothing else."""
    key = dg.AssetKey(TARGET)
    specs = [dg.AssetCheckSpec(name, asset=key, partitions_def=PARTITIONS, blocking=True) for name in GATE_NAMES] \
        if checks else []

    @dg.multi_asset(name=TARGET, specs=[dg.AssetSpec(key, deps=[dg.AssetKey("orders")], partitions_def=PARTITIONS)],
                    check_specs=specs, partitions_def=PARTITIONS, can_subset=True, backfill_policy=policy)
    def daily_revenue(context):
        keys = list(context.partition_keys)
        with open_warehouse(home, url).session() as session:
            write_keys(session, keys)
        yield dg.MaterializeResult(asset_key=key, metadata={"partitions": len(keys)})
        if not checks:
            return
        for k in keys:
            for gate in GATE_NAMES:
                common = dict(asset_key=key, check_name=gate, passed=True, metadata=_evaluation_metadata(gate, k),
                              severity=dg.AssetCheckSeverity.ERROR, description=f"{gate} passed")
                if len(keys) == 1:
                    yield dg.AssetCheckResult(**common)
                else:
                    context.log_event(dg.AssetCheckEvaluation(**common, blocking=True, partition=k))

    orders = dg.AssetSpec("orders", partitions_def=PARTITIONS)
    return dg.Definitions(assets=[orders, daily_revenue])


# the console log level `backfill run` uses (backfill_assets/terminal.py run_config, not verbose)
RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}


def bare_runs(defs: dg.Definitions, instance: dg.DagsterInstance, keys: Sequence[str], per_run: int) -> int:
    """Runs of `per_run` contiguous keys each (what a backfill policy makes); returns the run count."""
    job = defs.resolve_implicit_global_asset_job_def()
    runs = 0
    for i in range(0, len(keys), per_run):
        chunk = keys[i:i + per_run]
        tags = {"dagster/partition": chunk[0]} if len(chunk) == 1 else {
            "dagster/asset_partition_range_start": chunk[0], "dagster/asset_partition_range_end": chunk[-1]}
        result = job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(TARGET)], tags=tags,
                                        raise_on_error=False, run_config=RUN_CONFIG)
        if not result.success:
            raise SystemExit(f"bare Dagster run over {chunk[0]}..{chunk[-1]} failed")
        runs += 1
    return runs


def our_instance(dagster_home: Path) -> dg.DagsterInstance:
    """An instance with the dagster.yaml `backfill init` writes (pooled sqlite event log)."""
    from backfill_assets.dagster_setup import ensure_dagster_home

    home = Home(dagster_home.parent)
    ensure_dagster_home(home)
    return dg.DagsterInstance.from_config(str(home.dagster_home))


def stock_instance(dagster_home: Path) -> dg.DagsterInstance:
    """Dagster's default persistent instance: an empty dagster.yaml (sqlite, a file per run)."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return dg.DagsterInstance.from_config(str(dagster_home))


def checks_recorded(instance: dg.DagsterInstance, keys: Sequence[str], sample: int = 5) -> bool:
    """Spot check: the first and last partitions have all eight evaluations, passed, with their partition."""
    from dagster._core.event_api import PartitionKeyFilter

    key = dg.AssetKey(TARGET)
    check_keys = [dg.AssetCheckKey(key, name) for name in GATE_NAMES]
    probe = list(keys[:sample // 2 + 1]) + list(keys[-(sample // 2):])
    for pk in probe:
        found = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            check_keys, partition_filter=PartitionKeyFilter(key=pk))
        if len(found) != len(GATE_NAMES):
            return False
        for record in found.values():
            evaluation = record.evaluation
            if evaluation is None or not evaluation.passed:
                return False
    return True


# --- the daemon and a UI-style backfill -------------------------------------------------------------

@dataclass
class Daemon:
    process: subprocess.Popen
    log: Path


def start_daemon(plan_home: PlanHome, instance: dg.DagsterInstance, *, per_run: int = 30,
                 executor: str = "multiprocess", timeout: float = 180.0) -> Daemon:
    """`dagster-daemon run` on a workspace naming bench_defs.py (its target's backfill policy
    multi_run(per_run)), with the home's DAGSTER_HOME; returns once its backfill and run-queue
    daemons have sent a heartbeat."""
    log = plan_home.base / "daemon.log"
    workspace = plan_home.base / "workspace.yaml"
    workspace.write_text(f"load_from:\n  - python_file:\n      relative_path: {DEFS}\n"
                         f"      working_directory: {BENCH_DIR}\n")
    env = {**os.environ, **plan_home.env(), "DAGSTER_HOME": str(plan_home.home.dagster_home),
           "BENCH_PARTITIONS_PER_RUN": str(per_run), "BENCH_EXECUTOR": executor, "PYTHONUNBUFFERED": "1",
           "PYTHONWARNINGS": "ignore"}
    handle = open(log, "wb")  # noqa: SIM115 - the child keeps it
    process = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(workspace)],
                               cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    handle.close()
    deadline = time.monotonic() + timeout
    wanted = {"BACKFILL", "QUEUED_RUN_COORDINATOR"}
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"dagster-daemon exited {process.returncode}:\n{log.read_text()[-3000:]}")
        beats = instance.get_daemon_heartbeats()
        if wanted <= set(beats):
            return Daemon(process, log)
        time.sleep(0.5)
    stop_daemon(Daemon(process, log))
    raise SystemExit(f"dagster-daemon sent no heartbeat in {timeout:.0f}s:\n{log.read_text()[-3000:]}")


def stop_daemon(daemon: Daemon) -> None:
    from tests.e2e_support import stop_process_group

    stop_process_group(daemon.process, grace=30.0)


def launch_ui_backfill(instance: dg.DagsterInstance, keys: Sequence[str], title: str) -> str:
    """What the UI's `launchPartitionBackfill` stores (dagster_graphql's
    create_and_launch_partition_backfill, pure asset branch): a PartitionBackfill the daemon runs."""
    from bench_defs import defs
    from dagster._core.execution.backfill import PartitionBackfill
    from dagster._core.utils import make_new_backfill_id

    backfill = PartitionBackfill.from_asset_partitions(
        backfill_id=make_new_backfill_id(), asset_graph=defs.resolve_asset_graph(), partition_names=list(keys),
        asset_selection=[dg.AssetKey(TARGET)], backfill_timestamp=time.time(), tags={},
        dynamic_partitions_store=instance, all_partitions=False, title=title, description=None, run_config=None)
    instance.add_backfill(backfill)
    return backfill.backfill_id


def wait_backfill(instance: dg.DagsterInstance, backfill_id: str, daemon: Daemon, timeout: float) -> dict[str, Any]:
    """Until every run of the backfill ended and the daemon marked it finished."""
    from dagster._core.execution.backfill import BulkActionStatus

    started = time.perf_counter()
    runs_done_at = None
    done = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
    while True:
        if daemon.process.poll() is not None:
            raise SystemExit(f"dagster-daemon died:\n{daemon.log.read_text()[-3000:]}")
        backfill = instance.get_backfill(backfill_id)
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
        if runs and all(r.status in done for r in runs):
            runs_done_at = runs_done_at or time.perf_counter()
        else:
            runs_done_at = None
        if backfill.status != BulkActionStatus.REQUESTED and runs_done_at is not None:
            break
        if time.perf_counter() - started > timeout:
            raise SystemExit(f"backfill {backfill_id} still {backfill.status} after {timeout:.0f}s; runs "
                             f"{[(r.run_id[:8], r.status.value) for r in runs]}\n{daemon.log.read_text()[-3000:]}")
        time.sleep(0.25)
    first_start = min((r.start_time for r in _records(instance, runs) if r.start_time), default=None)
    last_end = max((r.end_time for r in _records(instance, runs) if r.end_time), default=None)
    return {
        "status": backfill.status.value,
        "runs": len(runs),
        "runs_succeeded": sum(r.status == dg.DagsterRunStatus.SUCCESS for r in runs),
        "range_runs": sum("dagster/asset_partition_range_start" in r.tags for r in runs),
        "runs_done_s": runs_done_at - started,
        "marked_done_s": time.perf_counter() - started,
        "first_start_to_last_end_s": (last_end - first_start) if first_start and last_end else None,
        "plan_tagged": sum("backfill_assets/plan" in r.tags for r in runs),
    }


def _records(instance: dg.DagsterInstance, runs: Sequence[dg.DagsterRun]):
    return instance.get_run_records(filters=dg.RunsFilter(run_ids=[r.run_id for r in runs]))


# --- profiling one `backfill run` ------------------------------------------------------------------

# Where the time goes, beyond the wrappers every call passes through: the target's body, its writes
# and gates, the warehouse's statements, and Dagster's event storage.
COST_CENTRES = (
    ("dagster/_core/definitions/job_definition.py", "execute_in_process"),
    ("backfill_assets/defs/replayable.py", "target"),
    ("dagster/_core/instance/methods/event_methods.py", "handle_new_event"),
    ("dagster/_core/execution/context/op_execution_context.py", "log_event"),
    ("dagster/_core/storage/event_log/sql_event_log.py", "store_asset_check_event"),
    ("dagster/_core/storage/event_log/sqlite/consolidated_sqlite_event_log.py", "has_table"),
    ("dagster/_core/storage/event_log/sql_event_log.py", "supports_asset_checks"),
    ("dagster_shared/serdes/serdes.py", "serialize_value"),
    ("backfill_assets/execution/write.py", "write_partitions"),
    ("backfill_assets/warehouse/writes.py", "write_rows"),
    ("backfill_assets/control/snapshots.py", "ensure_snapshots"),
    ("backfill_assets/warehouse/fingerprints.py", "fingerprints"),
    ("backfill_assets/permission.py", "recheck"),
    ("backfill_assets/control/evidence_log.py", "append"),
    ("backfill_assets/control/ledger.py", "latest"),
    ("backfill_assets/execution/audit.py", "judge"),
    ("backfill_assets/execution/runner.py", "gate_failures"),
    ("backfill_assets/warehouse/duckdb_engine.py", "_run"),
    ("backfill_assets/warehouse/duckdb_engine.py", "session"),
    ("backfill_assets/warehouse/postgres_engine.py", "_cursor_run"),
    ("backfill_assets/warehouse/postgres_engine.py", "session"),
    ("backfill_assets/execution/advance.py", "advance"),
    ("backfill_assets/dagster_storage.py", "_connect"),
)


def _short(path: str) -> str:
    for marker in ("site-packages/", f"{ROOT}/", "lib/python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def profile_backfill_run(ph: PlanHome, dump: str | None = None) -> dict[str, Any]:
    """cProfile of one `backfill run PLAN` in this process (worker processes are not profiled)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    started = time.perf_counter()
    with url_env(ph.url), quiet(ph.log):
        profiler.enable()
        code = cli_main(["--home", str(ph.home.root), "run", str(ph.plan)])
        profiler.disable()
    wall = time.perf_counter() - started
    stats = pstats.Stats(profiler)
    if dump:
        stats.dump_stats(dump)
    rows = []
    for (path, line, func), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{_short(path)}:{line}({func})", "path": _short(path), "name": func,
                     "calls": calls, "tottime": tottime, "cumtime": cumtime})
    centres = []
    for path, name in COST_CENTRES:
        found = [r for r in rows if r["path"] == path and r["name"] == name]
        if found:
            centres.append(max(found, key=lambda r: r["cumtime"]))
    total = stats.total_tt  # type: ignore[attr-defined]
    return {"code": code, "wall_profiled": wall, "total_tt": total,
            "top_cumulative": sorted(rows, key=lambda r: -r["cumtime"])[:60],
            "top_tottime": sorted(rows, key=lambda r: -r["tottime"])[:30],
            "cost_centres": sorted(centres, key=lambda r: -r["cumtime"])}


def print_profile(prof: dict[str, Any]) -> None:
    say(f"wall under the profiler {prof['wall_profiled']:.1f}s (exit {prof['code']}); top cumulative:")
    for row in prof["top_cumulative"][:25]:
        say(f"  {row['cumtime']:8.2f}s cum {row['tottime']:7.2f}s own {row['calls']:>8} calls  {row['function']}")
    say("cost centres (cumulative, overlapping):")
    for row in prof["cost_centres"]:
        share = row["cumtime"] / prof["total_tt"] * 100 if prof["total_tt"] else 0
        say(f"  {row['cumtime']:8.2f}s {share:5.1f}% {row['calls']:>8} calls  {row['function']}")
    say("top own time:")
    for row in prof["top_tottime"][:15]:
        say(f"  {row['tottime']:8.2f}s own {row['calls']:>8} calls  {row['function']}")


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, indent=2, default=str) + "\n")

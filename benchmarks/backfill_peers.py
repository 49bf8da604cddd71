"""A replay of a window of daily partitions: this project against the tools a team would pick instead.

The workload (issue 23): TPC-H SF1 `lineitem` (6M rows, `tpchgen-cli` in its own venv, cached as
Parquet under benchmarks/.data/) into a daily pricing summary (TPC-H Q1's figures per l_shipdate,
l_returnflag, l_linestatus; benchmarks/peers/tpch.py), one partition per ship day, for a window of
--days days from --start (default: 1995, 365 partitions). Each tool first loads the window's history
with its own incremental path (not timed), so the replay rewrites existing partitions, then:

* this project (the project's .venv, the installed `backfill` CLI, one process a command, as a team
  runs it): `init` (before the history), an approved plan (owner and two approvers sign with
  throwaway SSH keys, as the demo does), then `run --proof`, `run`, `reconcile`, `publish`, each
  timed, with its peak RSS; "end to end" is proof + run + reconcile + publish. The table is declared
  in benchmarks/peers/tpch_defs.py (range form of the SQL; runs of --per-run partitions); its
  history is a plan-free Dagster range run of the released transform (a bug in avg_disc); and
  the same four steps as one command, `run --and-publish` (one process: one start, one load of
  the definitions, one Dagster instance);
* SQLMesh (benchmarks/.venv-sqlmesh, its DuckDB 1.x): an INCREMENTAL_BY_TIME_RANGE model with 3
  audits (not_null, unique_combination_of_columns, accepted_range), batch_size 30 and 1; timed:
  `sqlmesh plan --restate-model ... --start --end --auto-apply --no-prompts` (the window restated);
* dbt-duckdb microbatch (benchmarks/.venv-dbt), batch_size day and month; timed: `dbt run
  --event-time-start --event-time-end` over the window, then `dbt test` (3 tests: not_null, unique
  key, a singular count_order >= 1);
* DuckDB alone (the project's duckdb, in this process): one DELETE + INSERT transaction a partition,
  and one DELETE + INSERT of the whole window;
* Dagster alone, the one command's floor (benchmarks/peers/event_floor.py, the project's venv): the
  runs `run --and-publish` makes, each storing the events the UI shows and nothing else, no SQL
  (it writes no rows, so its answer is not compared).

Every tool works on its own copy of the same DuckDB file of `lineitem` (one per DuckDB version).
Peers are timed as their command-line tools, whole processes, as ours are. After each tool the
same order-independent aggregate over the window (benchmarks/peers/tpch.py `check_sql`, in the
tool's own venv) is compared with the SELECT computed directly: any difference prints MISMATCH.

The machine is shared and noisy: tools are interleaved (order rotated each round), medians reported
with the ratio of each to this project's end-to-end time in the same round (the median of those);
the load average is printed beside them.

    .venv/bin/python benchmarks/backfill_peers.py [--days 365] [--start 1995-01-01] [--rounds 2]
        [--only backfill,sqlmesh,dbt,duckdb] [--json out.json] [--keep DIR] [--per-run 30]
        [--profile [--profiler cprofile|pyinstrument]] [--profile-only] [--duckdb-memory-mb 64]

Peer venvs: `bash benchmarks/peers/setup.sh sqlmesh dbt tpchgen [pyinstrument]` (run for any that
is missing; a peer that cannot be installed is reported as skipped, with why). --profile adds one
round of this project only, `backfill run` under cProfile (or pyinstrument), and prints where its
seconds go. --duckdb-memory-mb N adds this project's two forms again with BACKFILL_DUCKDB_MEMORY_MB=N
(DuckDB's memory limit: its buffer pool otherwise keeps the blocks read, the most of the peak RSS).
A benchmark, not a test: nothing here runs in `make test`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS = HERE / "peers"
sys.path.insert(0, str(PEERS))

import tpch  # noqa: E402
from go_between import GO_BETWEEN  # noqa: E402 - beside this file, standard library only

DATA = HERE / ".data"
PARQUET = DATA / "sf1" / "lineitem.parquet"
PROJECT_PY = ROOT / ".venv" / "bin" / "python"
BACKFILL = ROOT / ".venv" / "bin" / "backfill"
DEFS = PEERS / "tpch_defs.py"
VENVS = {"sqlmesh": HERE / ".venv-sqlmesh", "dbt": HERE / ".venv-dbt", "tpchgen": HERE / ".venv-tpchgen"}
PYINSTRUMENT = HERE / ".venv-pyinstrument"
PLAN_ID = "tpch-replay"

OURS = "backfill (this project)"
ONE_COMMAND = "backfill run --and-publish (this project)"
OURS_CAPPED = "backfill, DuckDB memory limit (this project)"
ONE_CAPPED = "backfill run --and-publish, DuckDB memory limit (this project)"
MEMORY_ENV = "BACKFILL_DUCKDB_MEMORY_MB"
TOOLS = {
    OURS: "proof + run + reconcile + publish (runs of {per_run})",
    ONE_COMMAND: "the same four steps in one command, one process (runs of {per_run})",
    OURS_CAPPED: "the four commands, BACKFILL_DUCKDB_MEMORY_MB={memory_mb} (runs of {per_run})",
    ONE_CAPPED: "the one command, BACKFILL_DUCKDB_MEMORY_MB={memory_mb} (runs of {per_run})",
    "SQLMesh batch 30": "INCREMENTAL_BY_TIME_RANGE, batch_size 30, 3 audits a batch, restatement",
    "SQLMesh batch 1": "INCREMENTAL_BY_TIME_RANGE, batch_size 1, 3 audits a batch, restatement",
    "dbt microbatch day": "incremental microbatch, batch_size day, `dbt run` + `dbt test` (3 tests)",
    "dbt microbatch month": "incremental microbatch, batch_size month, `dbt run` + `dbt test` (3 tests)",
    "DuckDB, DELETE+INSERT a partition": "one transaction a partition, in this process",
    "DuckDB, one INSERT for the window": "one DELETE + INSERT of the whole window, one transaction",
}
FLOOR = "Dagster alone, the floor: the one command's runs and events, no SQL"
TOOLS[FLOOR] = ("the runs `run --and-publish` makes (runs of {per_run}), storing the events the UI shows and "
                "nothing else (benchmarks/peers/event_floor.py): the one command's floor")
STEPS = ("proof", "run", "reconcile", "publish")


def say(text: str = "") -> None:
    print(text, flush=True)


# --- processes --------------------------------------------------------------------------------



@dataclass
class Done:
    seconds: float
    peak_rss_mb: float
    cpu: float
    code: int


def child(cmd: Sequence[str | Path], log: Path, *, env: dict[str, str] | None = None, cwd: Path | None = None,
          what: str = "", timeout: float = 7200) -> Done:
    """A process with its wall seconds, CPU seconds and peak RSS; its output appended to `log`;
    SystemExit with the log's tail if it fails."""
    full = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    report = Path(tempfile.mkstemp(prefix="peers-usage-", suffix=".json")[1])
    try:
        with open(log, "ab") as out:
            out.write(f"\n$ {' '.join(str(c) for c in cmd)}\n".encode())
            out.flush()
            proc = subprocess.run([sys.executable, "-I", "-S", "-c", GO_BETWEEN, str(report), *map(str, cmd)],
                                  env=full, cwd=cwd or ROOT, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=timeout, check=False)
        usage = json.loads(report.read_text()) if report.stat().st_size else None
    finally:
        report.unlink(missing_ok=True)
    if proc.returncode or usage is None or usage["code"] != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise SystemExit(f"{what or cmd[0]} failed (exit {usage and usage['code']}); {log}:\n{tail}")
    return Done(usage["seconds"], usage["maxrss_kb"] / 1024.0, usage["cpu"], usage["code"])


def venv_python(name: str) -> Path:
    return VENVS[name] / "bin" / "python"


def ensure_venvs(names: Sequence[str], setup: bool) -> dict[str, str]:
    """{name: why it is unusable} for the venvs that do not work (after one setup attempt)."""
    checks = {"sqlmesh": "import duckdb, sqlmesh; assert duckdb.__version__ < '2'",
              "dbt": "import duckdb, dbt.adapters.duckdb",
              "tpchgen": "import os, sys; assert os.access(os.path.join(os.path.dirname(sys.executable), "
                         "'tpchgen-cli'), os.X_OK)"}

    def broken(name: str) -> str | None:
        python = venv_python(name)
        if not python.exists():
            return f"{VENVS[name].relative_to(ROOT)} is missing"
        probe = subprocess.run([str(python), "-c", checks[name]], capture_output=True, text=True)
        return (probe.stderr.strip().splitlines() or ["does not import"])[-1] if probe.returncode else None

    missing = [n for n in names if broken(n)]
    if missing and setup:
        say(f"setting up {', '.join(missing)}: bash benchmarks/peers/setup.sh {' '.join(missing)}")
        done = subprocess.run(["bash", str(PEERS / "setup.sh"), *missing], capture_output=True, text=True)
        if done.returncode:
            say(f"  setup.sh exited {done.returncode}: {(done.stderr or done.stdout).strip()[-1500:]}")
    out = {}
    for name in missing:
        why = broken(name)
        if why:
            out[name] = f"{why} (`bash benchmarks/peers/setup.sh {name}`)"
    return out


# --- data ---------------------------------------------------------------------------------------

def duckdb_version(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import duckdb; print(duckdb.__version__)"], capture_output=True,
                          text=True, check=True).stdout.strip()


def ensure_parquet() -> float:
    """benchmarks/.data/sf1/lineitem.parquet from tpchgen-cli (generated once, then cached)."""
    if PARQUET.exists():
        return 0.0
    started = time.perf_counter()
    PARQUET.parent.mkdir(parents=True, exist_ok=True)
    tool = VENVS["tpchgen"] / "bin" / "tpchgen-cli"
    subprocess.run([str(tool), "parquet", "-s", "1", "--tables", "lineitem", "-o", str(PARQUET.parent)], check=True)
    return time.perf_counter() - started


_LOAD = ("import duckdb, sys\n"
         "con = duckdb.connect(sys.argv[1])\n"
         "con.execute('SET enable_progress_bar = false')\n"
         "con.execute(\"CREATE TABLE lineitem AS SELECT * FROM read_parquet('\" + sys.argv[2] + \"')\")\n"
         "con.execute('CHECKPOINT')\n"
         "con.close()\n")


def base_db(python: Path) -> Path:
    """A DuckDB file holding only `lineitem`, in the storage of `python`'s duckdb (built once)."""
    version = duckdb_version(python)
    path = DATA / f"lineitem-duckdb-{version}.duckdb"
    if not path.exists():
        say(f"loading lineitem into {path.name} (DuckDB {version})")
        partial = path.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        subprocess.run([str(python), "-c", _LOAD, str(partial), str(PARQUET)], check=True)
        partial.rename(path)
    return path


def days_of(start: dt.date, count: int) -> list[str]:
    return [(start + dt.timedelta(days=i)).isoformat() for i in range(count)]


def truth(db: Path, first: str, last: str) -> dict[str, str]:
    """The check over the window computed straight from lineitem."""
    with duckdb.connect(str(db), read_only=True) as con:
        con.execute("SET enable_progress_bar = false")
        where = f"l_shipdate BETWEEN DATE '{first}' AND DATE '{last}'"
        return tpch.check(con, f"({tpch.select_sql(where)})", first, last)


def check_with(python: Path, db: Path, relation: str, first: str, last: str) -> dict[str, str]:
    out = subprocess.run([str(python), str(PEERS / "tpch.py"), str(db), relation, first, last],
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the check of {relation} failed: {out.stderr.strip()[-800:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- this project ---------------------------------------------------------------------------------

def make_keys(folder: Path, names: Sequence[str]) -> dict[str, Path]:
    """Throwaway ed25519 keys in OpenSSH format (as the demo's and tests/world.py's)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    paths = {}
    for name in names:
        key = ed25519.Ed25519PrivateKey.generate()
        path = folder / name
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                           serialization.NoEncryption()))
        path.chmod(0o600)
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        (folder / f"{name}.pub").write_bytes(public + f" {name}\n".encode())
        paths[name] = path
    return paths


def plan_document(first: str, last: str, per_run: int) -> dict[str, Any]:
    return {
        "plan_id": PLAN_ID,
        "owner": "olivia",
        "reason": "the released daily_pricing averaged l_tax into avg_disc; replay the window with the fix",
        "target": tpch.TABLE,
        "window": {"start": first, "end": last},
        "source_of_truth": tpch.SOURCE,
        "downstream": [{"asset": "published_pricing", "owners": ["pricing-bi"]}],
        "execution": {
            "mode": "overwrite",
            "idempotency": "each partition is deleted and re-inserted from lineitem in one transaction",
            "proof_partitions": [first],
            "partitions_per_run": per_run,
        },
        "incremental": {
            "watermark": "the daily schedule keeps its cursor; the window is frozen while the plan is active",
            "metrics_comparable": "one code version for the whole window; only avg_disc's definition changed",
        },
        "publish": {"freeze": True, "notify": ["#pricing-consumers"]},
        "rollback": {"strategy": "restore every written partition from its pre-run snapshot"},
        "gates": {
            "row_count_parity": {"max_diff_pct": 0},
            "duplicates": {"max_rows": 0},
            "metrics": [{"name": "sum_qty"}, {"name": "sum_base_price"}, {"name": "count_order"}],
            "contract": {"enforce": True},
        },
        "approvals": {"required": 2, "granted": []},
    }


@dataclass
class ProjectHome:
    base: Path
    log: Path
    env: dict[str, str]
    plan: Path
    timings: dict[str, Done] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.base / "home"

    def backfill(self, *args: str, what: str) -> Done:
        return child([BACKFILL, "--home", str(self.home), *args], self.log, env=self.env, what=f"backfill {what}")


def project_env(per_run: int, memory_mb: int = 0) -> dict[str, str]:
    env = {"BACKFILL_DEFS": str(DEFS), "BENCH_PARTITIONS_PER_RUN": str(per_run)}
    return {**env, MEMORY_ENV: str(memory_mb)} if memory_mb else env


def prepare_project(base: Path, db: Path, days: list[str], per_run: int, memory_mb: int = 0) -> ProjectHome:
    """init, history (plan-free), a plan signed by its owner and two approvers: ready for the proof.
    Only init and the signatures are timed (reported apart from end to end)."""
    base.mkdir(parents=True, exist_ok=True)
    env = project_env(per_run, memory_mb)
    ph = ProjectHome(base, base / "backfill.log", env, base / "plans" / f"{PLAN_ID}.yaml")
    ph.home.mkdir(parents=True)
    shutil.copy2(db, ph.home / "warehouse.duckdb")
    keys = make_keys(base / "keys", ("olivia", "alice", "bob"))
    signers = base / "approvers" / "allowed_signers"
    signers.parent.mkdir(parents=True, exist_ok=True)
    signers.write_text("".join(f"{n} {' '.join((keys[n].parent / f'{n}.pub').read_text().split()[:2])}\n"
                               for n in keys))
    ph.timings["init"] = ph.backfill("init", "--allowed-signers", str(signers), what="init")
    ph.timings["history (not timed)"] = child(
        [PROJECT_PY, DEFS, "history", "--home", str(ph.home), "--start", days[0], "--end", days[-1]], ph.log,
        env=env, what="history (plan-free Dagster range run)")
    ph.plan.parent.mkdir(parents=True, exist_ok=True)
    ph.plan.write_text(yaml.safe_dump(plan_document(days[0], days[-1], per_run), sort_keys=False))
    approve = []
    for who in ("olivia", "alice", "bob"):
        approve.append(ph.backfill("plan", "approve", str(ph.plan), "--by", who, "--key", str(keys[who]),
                                   what=f"plan approve --by {who}"))
    ph.timings["approve x3"] = Done(sum(a.seconds for a in approve), max(a.peak_rss_mb for a in approve),
                                    sum(a.cpu for a in approve), 0)
    return ph


def run_project(ph: ProjectHome) -> dict[str, Done]:
    out = {"proof": ph.backfill("run", PLAN_ID, "--proof", what="run --proof"),
           "run": ph.backfill("run", PLAN_ID, what="run"),
           "reconcile": ph.backfill("reconcile", PLAN_ID, what="reconcile"),
           "publish": ph.backfill("publish", PLAN_ID, what="publish")}
    return out


def tool_project(work: Path, ctx: Context, *, one_command: bool = False, memory_mb: int = 0) -> dict[str, Any]:
    ph = prepare_project(work, ctx.db2, ctx.days, ctx.per_run, memory_mb)
    steps = ({"run --and-publish": ph.backfill("run", PLAN_ID, "--and-publish", what="run --and-publish")}
             if one_command else run_project(ph))
    # command start-up alone: the interpreter, dagster and the CLI imported, nothing run
    start = child([PROJECT_PY, "-c", "import dagster, backfill_assets.cli"], ph.log, what="process start")
    total = sum(d.seconds for d in steps.values())
    cpu = sum(d.cpu for d in steps.values())
    db = ph.home / "warehouse.duckdb"
    answer = check_with(PROJECT_PY, db, tpch.TABLE, ctx.days[0], ctx.days[-1])
    published = check_with(PROJECT_PY, db, "published_pricing", ctx.days[0], ctx.days[-1])
    return {"seconds": total, "cpu": cpu, "answer": answer, "published_same": published == answer,
            "steps": {k: vars(v) for k, v in {**ph.timings, **steps, "process start": start}.items()},
            "notes": f"history {ph.timings['history (not timed)'].seconds:.1f} s (not timed)"}


def tool_floor(work: Path, ctx: Context) -> dict[str, Any]:
    """What Dagster alone costs the one command: its process, instance, runs and the events the UI
    shows, with no SQL, no gate and no evidence (it writes no rows, so it has no answer to check)."""
    work.mkdir(parents=True)
    phases = work / "phases.json"
    done = child([PROJECT_PY, PEERS / "event_floor.py", "--home", work / "home", "--start", ctx.days[0],
                  "--days", str(len(ctx.days)), "--per-run", str(ctx.per_run), "--json", phases],
                 work / "floor.log", what="event floor")
    inside = json.loads(phases.read_text())
    return {"seconds": done.seconds, "cpu": done.cpu, "answer": None, "writes_nothing": True,
            "notes": f"{inside['runs']} runs; inside the process: "
                     + ", ".join(f"{k} {v:.2f} s" for k, v in inside.items() if k != "runs")}


# --- SQLMesh ------------------------------------------------------------------------------------------

SQLMESH_MODEL = """MODEL (
  name bench.{table},
  kind INCREMENTAL_BY_TIME_RANGE (time_column l_shipdate, batch_size {batch}),
  start '{first}',
  end '{last}',
  cron '@daily',
  grain (l_shipdate, l_returnflag, l_linestatus),
  audits (
    not_null(columns := (l_shipdate, l_returnflag, l_linestatus)),
    unique_combination_of_columns(columns := (l_shipdate, l_returnflag, l_linestatus)),
    accepted_range(column := count_order, min_v := 1)
  )
);
{select}"""


def sqlmesh_project(work: Path, ctx: Context, batch: int) -> tuple[list[str], Path]:
    work.mkdir(parents=True)
    db = work / "db.duckdb"
    shutil.copy2(ctx.db1, db)
    (work / "models").mkdir()
    (work / "config.yaml").write_text(yaml.safe_dump({
        "gateways": {"local": {"connection": {"type": "duckdb", "database": str(db)}}},
        "default_gateway": "local", "model_defaults": {"dialect": "duckdb"}}))
    columns = {"l_quantity": "DECIMAL(15,2)", "l_extendedprice": "DECIMAL(15,2)", "l_discount": "DECIMAL(15,2)",
               "l_tax": "DECIMAL(15,2)", "l_returnflag": "VARCHAR", "l_linestatus": "VARCHAR", "l_shipdate": "DATE"}
    (work / "external_models.yaml").write_text(yaml.safe_dump([{"name": "main.lineitem", "columns": columns}]))
    select = tpch.select_sql("l_shipdate BETWEEN @start_ds AND @end_ds", source="main.lineitem")
    (work / "models" / f"{tpch.TABLE}.sql").write_text(SQLMESH_MODEL.format(
        table=tpch.TABLE, batch=batch, first=ctx.days[0], last=ctx.days[-1], select=select))
    return [str(VENVS["sqlmesh"] / "bin" / "sqlmesh"), "-p", str(work), "plan", "--auto-apply", "--no-prompts"], db


def tool_sqlmesh(batch: int) -> Callable[[Path, Context], dict[str, Any]]:
    def run(work: Path, ctx: Context) -> dict[str, Any]:
        plan, db = sqlmesh_project(work, ctx, batch)
        env = {"SQLMESH_HOME": str(work / ".sqlmesh-home")}
        log = work / "sqlmesh.log"
        started = time.perf_counter()
        child(plan, log, env=env, cwd=work, what="sqlmesh plan (history)")  # its logs/ go to cwd
        history = time.perf_counter() - started
        restate = child([*plan, "--restate-model", f"bench.{tpch.TABLE}", "--start", ctx.days[0],
                         "--end", ctx.days[-1]], log, env=env, cwd=work, what="sqlmesh plan --restate-model")
        text = log.read_text(errors="replace")
        audits = text.count("audits passed")
        answer = check_with(venv_python("sqlmesh"), db, f"bench.{tpch.TABLE}", ctx.days[0], ctx.days[-1])
        return {"seconds": restate.seconds, "cpu": restate.cpu, "answer": answer,
                "steps": {"restatement": vars(restate)},
                "notes": f"history {history:.1f} s (not timed); batches reporting audits in the log "
                         f"(history + restatement): {audits}"}
    return run


# --- dbt ----------------------------------------------------------------------------------------------

DBT_MODEL = """{{{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='l_shipdate',
          begin='{first}', batch_size='{batch}') }}}}
{select}"""

DBT_SCHEMA = {
    "version": 2,
    "sources": [{"name": "tpch", "schema": "main",
                 "tables": [{"name": "lineitem", "config": {"event_time": "l_shipdate"}}]}],
    "models": [{"name": tpch.TABLE,
                "columns": [{"name": "l_shipdate", "data_tests": ["not_null"]}],
                "data_tests": [{"unique": {"column_name": " || '|' || ".join(tpch.KEYS)}}]}],
}


def tool_dbt(batch: str) -> Callable[[Path, Context], dict[str, Any]]:
    def run(work: Path, ctx: Context) -> dict[str, Any]:
        (work / "models").mkdir(parents=True)
        (work / "tests").mkdir()
        db = work / "db.duckdb"
        shutil.copy2(ctx.db2, db)
        (work / "dbt_project.yml").write_text(yaml.safe_dump({
            "name": "bench", "version": "1.0", "profile": "bench", "config-version": 2,
            "flags": {"send_anonymous_usage_stats": False}}))
        (work / "profiles.yml").write_text(yaml.safe_dump({"bench": {"target": "dev", "outputs": {
            "dev": {"type": "duckdb", "path": str(db), "threads": 1}}}}))
        (work / "models" / "schema.yml").write_text(yaml.safe_dump(DBT_SCHEMA, sort_keys=False))
        # the source filter is dbt's own (the source's event_time), per batch
        select = tpch.select_sql("TRUE", source="{{ source('tpch', 'lineitem') }}")
        (work / "models" / f"{tpch.TABLE}.sql").write_text(DBT_MODEL.format(first=ctx.days[0], batch=batch,
                                                                            select=select))
        (work / "tests" / "count_order_positive.sql").write_text(
            f"SELECT * FROM {{{{ ref('{tpch.TABLE}') }}}} WHERE count_order < 1\n")
        env = {"DBT_PROFILES_DIR": str(work), "DO_NOT_TRACK": "1", "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
        dbt = str(VENVS["dbt"] / "bin" / "dbt")
        end = (dt.date.fromisoformat(ctx.days[-1]) + dt.timedelta(days=1)).isoformat()  # exclusive
        window = ["--event-time-start", ctx.days[0], "--event-time-end", end]
        log = work / "dbt.log"
        started = time.perf_counter()
        child([dbt, "run", "--project-dir", str(work), *window], log, env=env, cwd=work, what="dbt run (history)")
        history = time.perf_counter() - started
        replay = child([dbt, "run", "--project-dir", str(work), *window], log, env=env, cwd=work, what="dbt run")
        tests = child([dbt, "test", "--project-dir", str(work)], log, env=env, cwd=work, what="dbt test")
        answer = check_with(venv_python("dbt"), db, f"main.{tpch.TABLE}", ctx.days[0], ctx.days[-1])
        return {"seconds": replay.seconds + tests.seconds, "cpu": replay.cpu + tests.cpu, "answer": answer,
                "steps": {"dbt run": vars(replay), "dbt test": vars(tests)},
                "notes": f"run {replay.seconds:.1f} s + test {tests.seconds:.1f} s; history {history:.1f} s "
                         "(not timed)"}
    return run


# --- DuckDB alone -------------------------------------------------------------------------------------

def cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tool_duckdb(per_partition: bool) -> Callable[[Path, Context], dict[str, Any]]:
    def run(work: Path, ctx: Context) -> dict[str, Any]:
        work.mkdir(parents=True)
        db = work / "db.duckdb"
        shutil.copy2(ctx.db2, db)
        first, last = ctx.days[0], ctx.days[-1]
        window = f"l_shipdate BETWEEN DATE '{first}' AND DATE '{last}'"
        with duckdb.connect(str(db)) as con:  # the history: what the incremental runs left
            con.execute("SET enable_progress_bar = false")
            con.execute(tpch.create_sql())
            con.execute(f"INSERT INTO {tpch.TABLE} {tpch.select_sql(window, disc=tpch.BUGGY_DISC)}")
        started, cpu = time.perf_counter(), cpu_self()
        with duckdb.connect(str(db)) as con:
            con.execute("SET enable_progress_bar = false")
            if per_partition:
                delete = f"DELETE FROM {tpch.TABLE} WHERE l_shipdate = ?"
                insert = f"INSERT INTO {tpch.TABLE} {tpch.select_sql('l_shipdate = ?')}"
                for day in ctx.days:
                    con.execute("BEGIN")
                    con.execute(delete, [day])
                    con.execute(insert, [day])
                    con.execute("COMMIT")
            else:
                con.execute("BEGIN")
                con.execute(f"DELETE FROM {tpch.TABLE} WHERE {window}")
                con.execute(f"INSERT INTO {tpch.TABLE} {tpch.select_sql(window)}")
                con.execute("COMMIT")
        seconds, cpu = time.perf_counter() - started, cpu_self() - cpu
        return {"seconds": seconds, "cpu": cpu, "answer": check_with(PROJECT_PY, db, tpch.TABLE, first, last)}
    return run


# --- rounds -------------------------------------------------------------------------------------------

@dataclass
class Context:
    days: list[str]
    per_run: int
    db1: Path  # lineitem in SQLMesh's DuckDB storage
    db2: Path  # lineitem in the project's (and dbt's) DuckDB storage
    truth: dict[str, str]


def tools_for(only: list[str] | None, skipped: dict[str, str],
              memory_mb: int = 0) -> dict[str, Callable[[Path, Context], dict]]:
    capped: dict[str, Callable[[Path, Context], dict]] = {
        OURS_CAPPED: lambda work, ctx: tool_project(work, ctx, memory_mb=memory_mb),
        ONE_CAPPED: lambda work, ctx: tool_project(work, ctx, one_command=True, memory_mb=memory_mb),
    } if memory_mb else {}
    every: dict[str, Callable[[Path, Context], dict]] = {
        OURS: tool_project,
        ONE_COMMAND: lambda work, ctx: tool_project(work, ctx, one_command=True),
        **capped,
        "SQLMesh batch 30": tool_sqlmesh(30),
        "SQLMesh batch 1": tool_sqlmesh(1),
        "dbt microbatch day": tool_dbt("day"),
        "dbt microbatch month": tool_dbt("month"),
        "DuckDB, DELETE+INSERT a partition": tool_duckdb(True),
        "DuckDB, one INSERT for the window": tool_duckdb(False),
        FLOOR: tool_floor,
    }
    chosen = {n: f for n, f in every.items() if not only or any(o.lower() in n.lower() for o in only)}
    for name in list(chosen):
        venv = "sqlmesh" if name.startswith("SQLMesh") else "dbt" if name.startswith("dbt") else None
        if venv in skipped:
            del chosen[name]
    return chosen


def median(values: Sequence[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(runs: dict[str, list[dict[str, Any]]], truth_row: dict[str, str]) -> dict[str, Any]:
    ours = runs.get(OURS, [])
    out: dict[str, Any] = {}
    for name, got in runs.items():
        ok = [g for g in got if "error" not in g]
        seconds = [g["seconds"] for g in ok]
        entry: dict[str, Any] = {"configuration": TOOLS[name], "rounds": len(ok),
                                 "seconds": seconds, "median_seconds": median(seconds),
                                 "same_answer": bool(ok) and all(g["answer"] == truth_row or g.get("writes_nothing")
                                                                 for g in ok),
                                 "writes_nothing": bool(ok) and all(g.get("writes_nothing") for g in ok),
                                 "errors": [g["error"] for g in got if "error" in g]}
        ratios = [g["seconds"] / o["seconds"] for g, o in zip(got, ours, strict=False)
                  if "error" not in g and "error" not in o and o["seconds"]]
        entry["ratio_to_ours"] = median(ratios)
        entry["ratios"] = ratios
        entry["cpu"] = [g.get("cpu") for g in ok]
        entry["median_cpu"] = median(entry["cpu"])
        cpu_ratios = [g["cpu"] / o["cpu"] for g, o in zip(got, ours, strict=False)
                      if "error" not in g and "error" not in o and o.get("cpu")]
        entry["cpu_ratio_to_ours"] = median(cpu_ratios)
        if ok and "steps" in ok[0]:
            names = ok[0]["steps"].keys()
            entry["steps_median"] = {s: {"seconds": median([g["steps"][s]["seconds"] for g in ok]),
                                         "peak_rss_mb": max(g["steps"][s].get("peak_rss_mb", 0.0) for g in ok),
                                         "cpu": median([g["steps"][s].get("cpu", 0.0) for g in ok])}
                                     for s in names}
        if ok and "published_same" in ok[0]:
            entry["published_same"] = all(g["published_same"] for g in ok)
        entry["notes"] = [g.get("notes") for g in ok if g.get("notes")]
        if entry["writes_nothing"]:
            entry["same_answer"] = None  # no rows to compare: not a match, not a mismatch
        if entry["same_answer"] is False and ok:
            entry["answers"] = [g["answer"] for g in ok]
        out[name] = entry
    return out


def fmt(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.2f}" if seconds < 10 else f"{seconds:.1f}"


def print_table(summary: dict[str, Any], skipped: dict[str, str], per_run: int, memory_mb: int = 0) -> None:
    say("| tool | configuration | median s | ratio to this project (end to end) | CPU s | CPU ratio | same rows "
        "| rounds (s) |")
    say("|---|---|---:|---:|---:|---:|---|---|")
    for name, e in summary.items():
        ratio, cpu_ratio = e["ratio_to_ours"], e["cpu_ratio_to_ours"]
        same = "- (writes nothing)" if e.get("writes_nothing") else \
            "yes" if e["same_answer"] else ("**NO (MISMATCH)**" if e["rounds"] else "-")
        if e.get("published_same") is False:
            same += " (published table DIFFERS)"
        err = f"; errors: {e['errors']}" if e["errors"] else ""
        configuration = e["configuration"].format(per_run=per_run, memory_mb=memory_mb)
        say(f"| {name} | {configuration} | {fmt(e['median_seconds'])} | "
            f"{'-' if ratio is None else f'{ratio:.2f}x'} | {fmt(e['median_cpu'])} | "
            f"{'-' if cpu_ratio is None else f'{cpu_ratio:.2f}x'} | {same} | "
            f"{', '.join(fmt(s) for s in e['seconds'])}{err} |")
    for venv, why in skipped.items():
        say(f"| {venv} | SKIPPED | - | - | - | - | - | {why} |")
    for name in (OURS, ONE_COMMAND, OURS_CAPPED, ONE_CAPPED):
        ours = summary.get(name)
        if not (ours and ours.get("steps_median")):
            continue
        say(f"\n{name}, by command (median seconds, peak RSS over rounds; end to end = "
            f"{' + '.join(STEPS) if name in (OURS, OURS_CAPPED) else 'run --and-publish'}):")
        for step, m in ours["steps_median"].items():
            say(f"  {step:<22} {fmt(m['seconds']):>8} s  cpu {fmt(m['cpu']):>7} s  "
                f"peak RSS {m['peak_rss_mb']:6.0f} MB")
    for name, e in summary.items():
        for note in e["notes"][:1]:
            say(f"  {name}: {note}")


# --- the profile -------------------------------------------------------------------------------------

#: (label, path fragment, function): cumulative seconds of each, overlapping; the label says which
COST_CENTRES = (
    ("imports (all modules)", "<frozen importlib._bootstrap>", "_find_and_load"),
    ("loading the definitions", "backfill_assets/loaded_defs.py", "load_defs"),
    ("the Dagster instance", "backfill_assets/dagster_setup.py", "instance_for"),
    ("Dagster: execute_in_process (all runs)", "dagster/_core/definitions/job_definition.py", "execute_in_process"),
    ("our target's body (write, gates, impact)", "backfill_assets/defs/replayable.py", "target"),
    ("  write_partitions (snapshots, write, fingerprints, gates)", "backfill_assets/execution/write.py",
     "write_partitions"),
    ("  the impact of each run", "backfill_assets/impact.py", "plan_impact"),
    ("Dagster: storing events (handle_new_event)", "dagster/_core/instance/methods/event_methods.py",
     "handle_new_event"),
    ("Dagster: store_event", "dagster/_core/storage/event_log/sql_event_log.py", "store_event"),
    ("Dagster: store_asset_check_event", "dagster/_core/storage/event_log/sql_event_log.py",
     "store_asset_check_event"),
    ("Dagster: log_event from the op", "dagster/_core/execution/context/op_execution_context.py", "log_event"),
    ("Dagster: serialize_value", "dagster_shared/serdes/serdes.py", "serialize_value"),
    ("our SQL on DuckDB (every statement)", "backfill_assets/warehouse/duckdb_engine.py", "_run"),
    ("sqlite connections of the event log", "backfill_assets/dagster_storage.py", "_connect"),
    ("the permission and its recheck", "backfill_assets/permission.py", "permit"),
    ("  recheck", "backfill_assets/permission.py", "recheck"),
    ("evidence log appends", "backfill_assets/control/evidence_log.py", "append"),
    ("partition schemes built (every key enumerated)", "backfill_assets/partitions.py", "scheme_for"),
)
SQL_RUN = ("backfill_assets/warehouse/duckdb_engine.py", "_run")  # every statement of ours passes here


def sql_by_issuer(stats: Any) -> list[dict[str, Any]]:
    """Seconds of our SQL by the product function that issued each statement: walking up from
    `_run` through the session layer (warehouse/engine.py, duckdb_engine.py: execute, rows,
    scalar ...), each caller edge's share of its callee's time carried along (cProfile keeps one
    level of callers per function, so a shared helper's split is proportional, not exact)."""
    table = stats.stats
    run = [f for f in table if SQL_RUN[0] in f[0] and f[2] == SQL_RUN[1]]
    if not run:
        return []
    layer = ("backfill_assets/warehouse/engine.py", "backfill_assets/warehouse/duckdb_engine.py")
    frontier = {run[0]: table[run[0]][3]}  # function -> seconds of SQL attributed to it
    for _ in range(6):
        nxt: dict[Any, float] = {}
        for func, seconds in frontier.items():
            callers = table[func][4] if any(p in func[0] for p in layer) else {}
            total = sum(edge[3] for edge in callers.values())
            if not total:
                nxt[func] = nxt.get(func, 0.0) + seconds
                continue
            for caller, edge in callers.items():
                nxt[caller] = nxt.get(caller, 0.0) + seconds * edge[3] / total
        frontier = nxt
    rows = [{"function": f"{_short(f[0])}:{f[1]}({f[2]})", "sql_seconds": sec} for f, sec in frontier.items()]
    return sorted(rows, key=lambda r: -r["sql_seconds"])


def _short(path: str) -> str:
    for marker in ("site-packages/", f"{ROOT}/", "lib/python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


PROFILED_STEPS = {"run": ("run",), "reconcile": ("reconcile",), "publish": ("publish",),
                  "and-publish": ("run", "--and-publish")}  # the one command: the window to publish


def profile_run(work: Path, ctx: Context, profiler: str, step: str = "run") -> dict[str, Any]:
    """One round of this project up to `step` (its proof, and the steps before it), then that
    step's command under the profiler."""
    ph = prepare_project(work, ctx.db2, ctx.days, ctx.per_run)
    ph.backfill("run", PLAN_ID, "--proof", what="run --proof")
    for before in STEPS[1:STEPS.index(step)] if step in STEPS else ():
        ph.backfill(before, PLAN_ID, what=before)
    out: dict[str, Any] = {"profiler": profiler, "partitions": len(ctx.days) - 1, "step": step}
    command = [str(BACKFILL), "--home", str(ph.home), *PROFILED_STEPS[step], PLAN_ID]
    if profiler == "pyinstrument":
        text = work / "pyinstrument.txt"
        env = {**ph.env, "PYTHONPATH": str(PYINSTRUMENT)}
        done = child([PROJECT_PY, "-m", "pyinstrument", "--renderer", "text", "--outfile", str(text),
                      "-p", "time=percent_of_total", "--no-color", "--unicode", *command], ph.log, env=env,
                     what=f"backfill {step} (pyinstrument)")
        out.update(wall=done.seconds, text=text.read_text(errors="replace"))
        return out
    import pstats

    dump = work / f"backfill-{step}.prof"
    done = child([PROJECT_PY, "-m", "cProfile", "-o", str(dump), *command], ph.log, env=ph.env,
                 what=f"backfill {step} (cProfile)")
    stats = pstats.Stats(str(dump))
    rows = []
    for (path, line, func), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{_short(path)}:{line}({func})", "path": path, "name": func,
                     "calls": calls, "tottime": tottime, "cumtime": cumtime})
    centres = []
    for label, fragment, name in COST_CENTRES:
        found = [r for r in rows if fragment in r["path"] and r["name"] == name]
        if found:
            best = max(found, key=lambda r: r["cumtime"])
            centres.append({"label": label, "cumtime": best["cumtime"], "calls": best["calls"],
                            "function": best["function"]})
    total = stats.total_tt  # type: ignore[attr-defined]
    for r in rows:
        r.pop("path")
    out.update(wall=done.seconds, total_tt=total, dump=str(dump), cost_centres=centres,
               sql_by_issuer=sql_by_issuer(stats)[:20],
               top_cumulative=sorted(rows, key=lambda r: -r["cumtime"])[:40],
               top_tottime=sorted(rows, key=lambda r: -r["tottime"])[:25])
    return out


def print_profile(prof: dict[str, Any]) -> None:
    say(f"\n## Profile: one `backfill {prof.get('step', 'run')}` of {prof['partitions']} partitions under "
        f"{prof['profiler']} "
        f"({fmt(prof['wall'])} s wall under the profiler)")
    if prof["profiler"] == "pyinstrument":
        lines = prof["text"].splitlines()
        say("\n".join(lines[:160]) + ("\n  ... (cut; the whole tree is in the JSON)" if len(lines) > 160 else ""))
        return
    say("where the seconds go (cumulative, overlapping; share of the profiled process):")
    for c in prof["cost_centres"]:
        share = c["cumtime"] / prof["total_tt"] * 100 if prof["total_tt"] else 0.0
        say(f"  {c['cumtime']:8.2f} s {share:5.1f}% {c['calls']:>8} calls  {c['label']}  [{c['function']}]")
    say("our SQL by the function that issued it (seconds, two levels above the statement):")
    for r in prof.get("sql_by_issuer", [])[:12]:
        say(f"  {r['sql_seconds']:8.2f} s  {r['function']}")
    say("top cumulative:")
    for r in prof["top_cumulative"][:30]:
        say(f"  {r['cumtime']:8.2f} s cum {r['tottime']:7.2f} s own {r['calls']:>9} calls  {r['function']}")
    say("top own time:")
    for r in prof["top_tottime"][:15]:
        say(f"  {r['tottime']:8.2f} s own {r['calls']:>9} calls  {r['function']}")


# --- main ---------------------------------------------------------------------------------------------

def _memory_mb(text: str) -> int:
    """0, or the megabytes BACKFILL_DUCKDB_MEMORY_MB accepts: refused here, not by each run."""
    from backfill_assets.warehouse.duckdb_engine import MIN_MEMORY_MB

    value = int(text) if text.isdigit() else -1
    if value != 0 and value < MIN_MEMORY_MB:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of megabytes, {MIN_MEMORY_MB} or more")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=365, help="partitions in the window (default 365)")
    parser.add_argument("--start", default="1995-01-01", help="the window's first day (TPC-H: 1992-01-02..1998-12-01)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--per-run", type=int, default=30, help="this project's partitions a run (the plan's)")
    parser.add_argument("--only", help="comma-separated: run only tools whose name contains one of these")
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temp folder)")
    parser.add_argument("--profile", action="store_true", help="also profile one `backfill run` (one round)")
    parser.add_argument("--profile-only", action="store_true", help="only the profile, no rounds")
    parser.add_argument("--profiler", choices=("cprofile", "pyinstrument"), default="cprofile")
    parser.add_argument("--profile-step", choices=tuple(PROFILED_STEPS), default="run",
                        help="the command profiled (the steps before it run unprofiled)")
    parser.add_argument("--no-setup", action="store_true", help="never run benchmarks/peers/setup.sh")
    parser.add_argument("--duckdb-memory-mb", type=_memory_mb, default=0,
                        help=f"also run this project's two forms with {MEMORY_ENV} set to this (peak RSS)")
    args = parser.parse_args(argv)

    os.environ.pop("DAGSTER_HOME", None)  # each home's own DAGSTER_HOME, never the caller's
    started = time.perf_counter()
    load_before = os.getloadavg()
    when = dt.datetime.now().isoformat(timespec="seconds")
    say(f"# backfill_peers: {args.days} day(s) from {args.start}, {args.rounds} round(s), {when}, "
        f"load average {load_before[0]:.1f} / {load_before[1]:.1f} / {load_before[2]:.1f} ({os.cpu_count()} cores)")
    skipped = ensure_venvs(["tpchgen", "sqlmesh", "dbt"], setup=not args.no_setup)
    if "tpchgen" in skipped and not PARQUET.exists():
        say(f"cannot generate the data: {skipped['tpchgen']}")
        return 2
    skipped.pop("tpchgen", None)
    for venv, why in skipped.items():
        say(f"SKIPPED {venv}: {why}")
    generated = ensure_parquet()
    db2 = base_db(PROJECT_PY)
    db1 = base_db(venv_python("sqlmesh")) if "sqlmesh" not in skipped else db2
    days = days_of(dt.date.fromisoformat(args.start), args.days)
    truth_row = truth(db2, days[0], days[-1])
    say(f"window {days[0]}..{days[-1]}: {truth_row}")
    ctx = Context(days, args.per_run, db1, db2, truth_row)
    versions = {"duckdb (project, dbt)": duckdb.__version__}
    for name, packages in (("sqlmesh", ("sqlmesh", "sqlglot", "duckdb")),
                           ("dbt", ("dbt-core", "dbt-duckdb", "duckdb"))):
        if name not in skipped:
            code = f"import importlib.metadata as m; print(', '.join(p + ' ' + m.version(p) for p in {packages!r}))"
            versions[name] = subprocess.run([str(venv_python(name)), "-c", code], capture_output=True,
                                            text=True).stdout.strip()
    versions["dagster"] = subprocess.run([str(PROJECT_PY), "-c", "import dagster; print(dagster.__version__)"],
                                         capture_output=True, text=True).stdout.strip()
    say(f"versions: {versions}")

    work = args.keep or Path(tempfile.mkdtemp(prefix="backfill_peers-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "when": when, "command": " ".join(["benchmarks/backfill_peers.py", *(argv or sys.argv[1:])]),
        "window": {"start": days[0], "end": days[-1], "partitions": len(days)}, "rounds": args.rounds,
        "per_run": args.per_run, "duckdb_memory_mb": args.duckdb_memory_mb,
        "truth": truth_row, "versions": versions, "skipped": skipped,
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "load_before": load_before},
        "data": {"parquet": str(PARQUET.relative_to(ROOT)), "generated_seconds": generated},
    }
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        tools = {} if args.profile_only else tools_for(args.only.split(",") if args.only else None, skipped,
                                                       args.duckdb_memory_mb)
        names = list(tools)
        runs = {n: [] for n in names}
        for rnd in range(args.rounds if names else 0):
            shift = rnd % len(names)
            order = names[shift:] + names[:shift]
            say(f"\nround {rnd + 1}: {', '.join(order)}")
            for name in order:
                folder = work / f"round{rnd + 1}" / re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
                try:
                    got = tools[name](folder, ctx)
                except (SystemExit, Exception) as exc:  # noqa: BLE001 - one tool failing must not end the run
                    got = {"error": f"{type(exc).__name__}: {str(exc)[-1500:]}", "seconds": None}
                    say(f"  ERROR {name}: {got['error']}")
                got["load_average"] = os.getloadavg()[0]
                runs[name].append(got)
                if "error" not in got:
                    flag = "" if got["answer"] == truth_row or got.get("writes_nothing") else \
                        f"   <<< MISMATCH: {got['answer']}"
                    extra = ""
                    if name == OURS:
                        extra = "  (" + ", ".join(f"{s} {fmt(got['steps'][s]['seconds'])}" for s in STEPS) + ")"
                    say(f"  {name:<36} {fmt(got['seconds']):>8} s  load {got['load_average']:.1f}{extra}{flag}")
                if not args.keep:
                    shutil.rmtree(folder, ignore_errors=True)
        if names:
            summary = summarize(runs, truth_row)
            load_after = os.getloadavg()
            results["machine"]["load_after"] = load_after
            results["summary"] = summary
            results["runs"] = runs
            say(f"\n## Results: {len(days)} partitions ({days[0]}..{days[-1]}), median of {args.rounds} interleaved "
                f"round(s); load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
                f"({os.cpu_count()} cores)\n")
            print_table(summary, skipped, args.per_run, args.duckdb_memory_mb)
        if args.profile or args.profile_only:
            prof = profile_run(work / "profile", ctx, args.profiler, args.profile_step)
            results["profile"] = prof
            print_profile(prof)
            if not args.keep:
                shutil.rmtree(work / "profile", ignore_errors=True)
    finally:
        results["total_seconds"] = time.perf_counter() - started
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
            say(f"\nJSON: {args.json}")
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    mismatches = [n for n, e in results.get("summary", {}).items() if e["rounds"] and e["same_answer"] is False]
    if mismatches:
        say("\nMISMATCH: " + ", ".join(mismatches) + " produced different rows over the window")
    say(f"total {results['total_seconds']:.0f} s")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

"""Which rows differ between versions A and B of a partitioned table, per partition: us vs peers.

Every tool answers the same question on the same tables in one run: for each partition, how many
rows were added, removed and changed between A and B. Tools:

* ours: fingerprint per partition on each side, then a FULL JOIN on the keys over only the
  partitions whose fingerprints differ (benchmarks/peers/ours_sql.py), plus two variants of the
  fingerprint (the brief's concat_ws row text; DuckDB's own hash(), not portable);
* FULL OUTER JOIN on the keys, EXCEPT ALL both ways, and the SQL that dbt-audit-helper's
  compare_relations / compare_all_columns generate for DuckDB, in the project's DuckDB;
* `backfill diff` (`backfill_assets.impact.compare`) twice: in this process beside the other
  in-process tools, and in its own process with the project's venv (benchmarks/peers/run_product.py),
  timed exactly as the peers are;
* data-diff 0.11.2 joindiff and SQLMesh 0.236.4 table_diff, each in its own venv
  (benchmarks/.venv-datadiff, benchmarks/.venv-sqlmesh; `bash benchmarks/peers/setup.sh`), run
  as subprocesses on Parquet copies of the same tables loaded into their own DuckDB files.

Data (generated inside DuckDB, benchmarks/peers/datagen.py): daily_sales-like, ~2.9M rows over
30 days. Scenario "3 days": 500 changed, 200 removed, 300 added rows in each of 3 days; scenario
"1 row": one row changed in one day. The known change set is the ground truth; any answer that
differs is printed as MISMATCH.

The machine is shared and noisy: tools are interleaved (order rotated each round) and medians
reported; compare ratios within one run. Every tool gets its two tables warmed by one scan right
before its timed diff (in this process for the in-process tools, in its own for each peer). Peers time only the
diff; their process start-up, imports and loading are reported beside it.

    .venv/bin/python benchmarks/diff_peers.py --rounds 3 [--json results.json] [--keep DIR]

A benchmark, not a test: nothing here runs in `make test`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from peers import datagen, ours_sql, project_sql  # noqa: E402

PRODUCT = "backfill diff (backfill_assets.impact.compare)"
OURS = "ours (md5 fingerprint, product row text)"
PRODUCT_OWN = "backfill diff, own process"
PEER_VENVS = {
    # the product itself, in its own process with the project's venv: timed exactly like the peers
    PRODUCT_OWN: (ROOT / ".venv", HERE / "peers" / "run_product.py", "import duckdb, backfill_assets"),
    "data-diff joindiff": (HERE / ".venv-datadiff", HERE / "peers" / "run_datadiff.py",
                           "import duckdb, data_diff"),
    "SQLMesh table_diff": (HERE / ".venv-sqlmesh", HERE / "peers" / "run_sqlmesh.py",
                           "import duckdb, sqlmesh"),
}
SCENARIOS = {"3 days": "b", "1 row": "b1"}

Answer = dict[str, tuple[int, int, int]]


def as_answer(result: dict[Any, Any]) -> Answer:
    """{partition: (added, removed, changed)} with ISO-date text keys and int tuples."""
    out = {}
    for part, counts in result.items():
        key = part.isoformat() if isinstance(part, dt.date) else str(part)
        out[key] = tuple(int(c) for c in counts)
    return dict(sorted(out.items()))


# --- in-process tools -------------------------------------------------------------------------

def in_process_tools() -> dict[str, Callable[..., tuple[Answer, dict]]]:
    def ours_variant(row_text: str):
        def run(con, a, b):
            timings: dict[str, float] = {}
            result = ours_sql.ours(con, a, b, datagen.KEYS, datagen.PARTITION, datagen.VALUES,
                                   row_text=row_text, timings=timings)
            return as_answer(result), timings
        return run

    def peer(fn):
        def run(con, a, b):
            return as_answer(fn(con, a, b, datagen.KEYS, datagen.PARTITION, datagen.VALUES)), {}
        return run

    import dagster as dg

    from backfill_assets.impact import compare
    from backfill_assets.partitions import scheme_for
    from backfill_assets.table import Column, Metric, TableSpec
    from backfill_assets.warehouse.duckdb_engine import DuckDBEngine, DuckDBSession

    # built once, outside the timed call, as every other tool's set-up is
    scheme = scheme_for(dg.DailyPartitionsDefinition(start_date=datagen.START.isoformat()), "DATE", name="b")
    days = [(datagen.START + dt.timedelta(days=i)).isoformat() for i in range(datagen.DAYS)]

    def spec_for(a: str, b: str) -> TableSpec:
        return TableSpec(name=b, source=a, publish_as=f"{b}_published", select_sql="SELECT 1",
                         partition_column=datagen.PARTITION, source_partition_column=datagen.PARTITION,
                         business_keys=datagen.KEYS,
                         contract=(Column("event_date", "DATE"), Column("customer_id", "BIGINT"),
                                   Column("category", "VARCHAR"), Column("amount", "DECIMAL(18,2)"),
                                   Column("orders", "BIGINT")),
                         metrics=(Metric("amount", "sum(amount)", "sum(amount)"),))

    specs = {b: spec_for("a", b) for b in SCENARIOS.values()}

    def product(con, a, b):
        """`backfill diff`'s own engine function (backfill_assets.impact.compare): a native hash per
        partition on both sides, then one hash join over the changed partitions only."""
        session = DuckDBSession(DuckDBEngine("unused"), con)
        found = compare(session, specs.get(b) or spec_for(a, b), scheme, f'"{a}"', days, top=1)
        return as_answer({p.partition: (p.added, p.removed, p.changed) for p in found if not p.unchanged}), {}

    tools = {
        PRODUCT: product,
        OURS: ours_variant("length_prefixed"),
        "ours, concat_ws row text": ours_variant("concat_ws"),
        "ours, DuckDB hash() (not portable)": ours_variant("duckdb_hash"),
    }
    tools.update({name: peer(fn) for name, fn in project_sql.TOOLS.items()})
    return tools


def warm(con: duckdb.DuckDBPyConnection, tables: list[str]) -> float:
    started = time.perf_counter()
    cols = ", ".join(f'sum(hash("{c}"))' for c in (*datagen.KEYS, *datagen.VALUES))  # max() is read from statistics
    for table in tables:
        con.execute(f'SELECT count(*), {cols} FROM "{table}"').fetchall()
    return time.perf_counter() - started


# --- subprocess peers -------------------------------------------------------------------------

def peer_ready(name: str) -> str | None:
    """None if the peer's venv imports its packages, else why not and how to fix it."""
    venv, _, check = PEER_VENVS[name]
    python = venv / "bin" / "python"
    if not python.exists():
        return f"{venv.relative_to(ROOT)} is missing: create it with `bash benchmarks/peers/setup.sh`"
    probe = subprocess.run([str(python), "-c", check], capture_output=True, text=True)
    if probe.returncode:
        return (f"{venv.relative_to(ROOT)} does not import ({probe.stderr.strip().splitlines()[-1:]}): "
                "rebuild it with `bash benchmarks/peers/setup.sh --force`")
    return None


def run_peer(name: str, work: Path, b_table: str) -> tuple[Answer, dict]:
    venv, script, _ = PEER_VENVS[name]
    slug = venv.name.removeprefix(".venv-")
    cmd = [str(venv / "bin" / "python"), str(script), "--parquet-dir", str(work / "parquet"),
           "--db", str(work / f"peer_{slug}.duckdb"), "--load", "a,b,b1", "--a", "a", "--b", b_table,
           "--keys", ",".join(datagen.KEYS), "--values", ",".join(datagen.VALUES),
           "--partition", datagen.PARTITION]
    if name == PRODUCT_OWN:
        cmd += ["--start", datagen.START.isoformat(), "--days", str(datagen.DAYS)]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - started
    (work / f"peer_{slug}.stderr.log").open("a").write(done.stderr)
    if done.returncode:
        raise RuntimeError(f"{name} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    answer = as_answer(report.pop("result"))
    report["process_wall_seconds"] = wall
    report["other_startup_seconds"] = wall - sum(
        report.get(k, 0.0) for k in ("diff_seconds", "import_seconds", "load_seconds",
                                     "context_seconds", "warm_seconds"))
    return answer, report


# --- checks of ours ---------------------------------------------------------------------------

def python_fingerprint(texts: list[str | None]) -> int:
    """The definition, in Python: per column '~' or '<length>:<text>', md5, first 8 bytes BE."""
    row = "".join("~" if t is None else f"{len(t)}:{t}" for t in texts)
    return int.from_bytes(hashlib.md5(row.encode()).digest()[:8], "big")


def check_fingerprint(con: duckdb.DuckDBPyConnection) -> dict:
    """ours' row fingerprint SQL against the definition computed in Python, and against the
    product's legacy md5 row hash (`warehouse.legacy_fingerprints.row_sql`, the form ours uses to
    find changed partitions) if that imports."""
    cols = [*datagen.KEYS, *datagen.VALUES]
    fp = ours_sql.row_fingerprint_sql(cols, "t")
    texts = ", ".join(f'CAST(t."{c}" AS VARCHAR)' for c in cols)
    edge = duckdb.connect()
    edge.execute("CREATE TABLE t AS SELECT * FROM (VALUES "
                 "(DATE '2026-01-01', NULL::BIGINT, 'x', 1.50::DECIMAL(18,2), 2::BIGINT), "
                 "(NULL, 5, NULL, NULL, NULL), (DATE '2026-01-02', 7, '', 0.00, 0), "
                 "(DATE '2026-01-03', -1, 'é~:|' || chr(31) || 'e' || chr(769) || '👨‍👩‍👧', -0.01, "
                 "9223372036854775807)) "
                 f"v({', '.join(cols)})")
    samples = (con.execute(f"SELECT {texts}, {fp} FROM a AS t USING SAMPLE 2000 ROWS").fetchall()
               + edge.execute(f"SELECT {texts}, {fp} FROM t").fetchall())
    bad = [r for r in samples if python_fingerprint(list(r[:-1])) != r[-1]]
    out: dict[str, Any] = {"rows_checked": len(samples), "python_definition_mismatches": len(bad)}
    try:
        sys.path.insert(0, str(ROOT))
        from backfill_assets.warehouse.duckdb_engine import DuckDBEngine
        from backfill_assets.warehouse.legacy_fingerprints import row_sql

        product = row_sql(DuckDBEngine(Path(tempfile.gettempdir()) / "unused.duckdb"), cols, "t")
        out["same_sql_as_product"] = product == fp
        count = f"SELECT count(*) FILTER (WHERE ({product}) <> ({fp})) FROM "
        differ = con.execute(count + "a AS t").fetchone()[0] + edge.execute(count + "t").fetchone()[0]
        out["product_value_mismatches"] = int(differ)
    except Exception as exc:  # the product is edited concurrently; the check is optional
        out["product_check_skipped"] = f"{type(exc).__name__}: {exc}"
    edge.close()
    return out


# --- report -----------------------------------------------------------------------------------

def fmt_s(seconds: float) -> str:
    return f"{seconds:.3f}" if seconds < 10 else f"{seconds:.1f}"


def summarize(runs: dict, truth: dict, rounds: int) -> dict:
    summary: dict[str, Any] = {}
    for scenario, tools in runs.items():
        expected = truth[scenario]
        ours_seconds = tools.get(PRODUCT, {}).get("seconds")
        ours_median = statistics.median(ours_seconds) if ours_seconds else None
        own_seconds = tools.get(PRODUCT_OWN, {}).get("seconds")
        own_median = statistics.median(own_seconds) if own_seconds else None
        rows = {}
        for tool, rec in tools.items():
            if not rec["seconds"]:
                rows[tool] = {"skipped": rec.get("skipped") or rec.get("error")}
                continue
            median = statistics.median(rec["seconds"])
            same = all(a == expected for a in rec["answers"]) and len(rec["answers"]) == rounds
            row = {"median_seconds": median, "seconds": rec["seconds"],
                   "ratio_vs_ours": median / ours_median if ours_median else None,
                   "ratio_vs_own_process": median / own_median if own_median else None,
                   "same_answer": same}
            if not same:
                row["answers"] = [{k: list(v) for k, v in a.items()} for a in rec["answers"]]
            if rec.get("error"):
                row["error"] = rec["error"]
            if rec["extra"]:
                keys = rec["extra"][0].keys()
                row["extra_median"] = {k: statistics.median(e[k] for e in rec["extra"])
                                       for k in keys if isinstance(rec["extra"][0][k], int | float)
                                       and not isinstance(rec["extra"][0][k], bool)}
                row["versions"] = rec["extra"][0].get("versions")
            rows[tool] = row
        summary[scenario] = {"truth": {k: list(v) for k, v in expected.items()}, "tools": rows}
    return summary


def print_tables(summary: dict) -> None:
    for scenario, data in summary.items():
        print(f"\n### Scenario: {scenario}  (truth: "
              + ", ".join(f"{p} +{a}/-{r}/~{c}" for p, (a, r, c) in data["truth"].items()) + ")\n")
        print("| tool | median s | ratio vs backfill diff (in this process) | ratio vs backfill diff (own "
              "process) | same answer | notes |")
        print("|---|---:|---:|---:|---|---|")
        order = sorted(data["tools"].items(),
                       key=lambda kv: kv[1].get("median_seconds", float("inf")))
        for tool, row in order:
            if "skipped" in row:
                print(f"| {tool} | - | - | - | - | skipped: {row['skipped']} |")
                continue
            notes = []
            extra = row.get("extra_median", {})
            if "fingerprints" in extra:
                notes.append(f"fingerprints {fmt_s(extra['fingerprints'])} s + join "
                             f"{fmt_s(extra['join'])} s over {int(extra['partitions_joined'])} partition(s)")
            if "process_wall_seconds" in extra:
                parts = {"imports": extra["import_seconds"], "load": extra.get("load_seconds", 0.0),
                         "context": extra.get("context_seconds", 0.0), "warm-up": extra["warm_seconds"],
                         "other start-up": extra["other_startup_seconds"]}
                notes.append(f"whole process {fmt_s(extra['process_wall_seconds'])} s; besides the diff: "
                             + ", ".join(f"{k} {fmt_s(v)} s" for k, v in parts.items() if v >= 0.0005)
                             + " (medians over rounds)")
            notes.append("rounds " + ", ".join(fmt_s(s) for s in row["seconds"]))
            ratios = [row["ratio_vs_ours"], row["ratio_vs_own_process"]]
            same = "yes" if row["same_answer"] else "**NO (MISMATCH)**"
            print(f"| {tool} | {fmt_s(row['median_seconds'])} | "
                  + " | ".join('-' if r is None else f'{r:.2f}x' for r in ratios)
                  + f" | {same} | {'; '.join(notes)} |")


# --- main -------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (default: a temp dir)")
    parser.add_argument("--only", nargs="*", help="run only tools whose name contains one of these")
    args = parser.parse_args(argv)

    work = args.keep or Path(tempfile.mkdtemp(prefix="diff_peers-"))
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    print(f"# diff_peers: {args.rounds} round(s), work dir {work}, load average {load_before[0]:.1f}",
          flush=True)
    try:
        db = work / "versions.duckdb"
        started = time.perf_counter()
        if not db.exists():
            with duckdb.connect(str(db)) as con:
                counts = datagen.build(con, work / "parquet")
        else:
            with duckdb.connect(str(db), read_only=True) as con:
                counts = dict(con.execute("SELECT 'a', count(*) FROM a UNION ALL SELECT 'b', count(*) FROM b "
                                          "UNION ALL SELECT 'b1', count(*) FROM b1").fetchall())
        data_seconds = time.perf_counter() - started
        print(f"data: {counts} rows, {data_seconds:.1f} s (tables and Parquet copies)", flush=True)

        truth = {name: {k: tuple(v) for k, v in t.items()} for name, t in datagen.ground_truth().items()}
        con = duckdb.connect(str(db), read_only=True)
        warm_seconds = warm(con, ["a", "b", "b1"])
        fingerprint_check = check_fingerprint(con)
        print(f"ours' row fingerprint vs its definition: {fingerprint_check}", flush=True)

        tools: dict[str, Any] = dict(in_process_tools())
        skipped: dict[str, str] = {}
        for name in PEER_VENVS:
            why = peer_ready(name)
            if why:
                skipped[name] = why
                print(f"SKIPPED {name}: {why}", flush=True)
            else:
                tools[name] = name
        if args.only:
            tools = {n: t for n, t in tools.items()
                     if n in (OURS, PRODUCT, PRODUCT_OWN) or any(o.lower() in n.lower() for o in args.only)}

        runs = {s: {t: {"seconds": [], "answers": [], "extra": []} for t in tools} for s in SCENARIOS}
        for s in SCENARIOS:
            for name, why in skipped.items():
                runs[s][name] = {"seconds": [], "answers": [], "extra": [], "skipped": why}
        names = list(tools)
        for round_no in range(args.rounds):
            for s_index, (scenario, b_table) in enumerate(SCENARIOS.items()):
                shift = (round_no * len(SCENARIOS) + s_index) % len(names)
                for name in names[shift:] + names[:shift]:
                    rec = runs[scenario][name]
                    if rec.get("error"):
                        continue
                    try:
                        if isinstance(tools[name], str):
                            answer, extra = run_peer(name, work, b_table)
                            seconds = extra["diff_seconds"]
                        else:
                            # warm, as each peer warms its tables right before its timed diff
                            warm(con, ["a", b_table])
                            started = time.perf_counter()
                            answer, extra = tools[name](con, "a", b_table)
                            seconds = time.perf_counter() - started
                    except Exception as exc:
                        rec["error"] = f"{type(exc).__name__}: {exc}"
                        print(f"ERROR {name} ({scenario}): {rec['error']}", flush=True)
                        continue
                    rec["seconds"].append(seconds)
                    rec["answers"].append(answer)
                    extra["load_average"] = os.getloadavg()[0]
                    rec["extra"].append(extra)
                    flag = "" if answer == truth[scenario] else f"   <<< MISMATCH: {answer}"
                    print(f"round {round_no + 1} {scenario:6s} {name:40s} {seconds:8.3f} s "
                          f"(load {extra['load_average']:.1f}){flag}", flush=True)
        con.close()

        summary = summarize(runs, truth, args.rounds)
        load_after = os.getloadavg()
        print(f"\n## Results: median of {args.rounds} interleaved round(s); load average "
              f"{load_before[0]:.1f} before, {load_after[0]:.1f} after ({os.cpu_count()} cores)")
        print_tables(summary)
        mismatches = [(s, t) for s, d in summary.items() for t, r in d["tools"].items()
                      if "skipped" not in r and not r["same_answer"]]
        if mismatches:
            print("\n" + "!" * 72)
            for s, t in mismatches:
                print(f"MISMATCH: {t} gave a different answer from the ground truth in scenario {s!r}")
            print("!" * 72)
        check = fingerprint_check
        if check["python_definition_mismatches"] or check.get("product_value_mismatches"):
            print("\nMISMATCH: ours' row fingerprint differs from its definition: "
                  f"{fingerprint_check}")

        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({
                "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "rounds": args.rounds,
                "machine": {"cores": os.cpu_count(), "load_average_before": load_before,
                            "load_average_after": load_after, "python": platform.python_version(),
                            "duckdb": duckdb.__version__},
                "data": {"rows": counts, "seconds": data_seconds, "warm_seconds": warm_seconds,
                         "days": datagen.DAYS, "keys": datagen.KEYS, "values": datagen.VALUES},
                "fingerprint_check": fingerprint_check,
                "scenarios": summary,
                "mismatches": [{"scenario": s, "tool": t} for s, t in mismatches],
            }, indent=2, default=str))
            print(f"\nJSON: {args.json}")
        return 1 if mismatches else 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

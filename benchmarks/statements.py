"""Where `backfill run PLAN --and-publish` spends its DuckDB statements: each statement timed inside
the command's one process (`DuckDBSession._run`), grouped by the calls of ours that made it and by
the statement's first words, on a copy of a home prepared by `benchmarks/prepare_home.py`.

    .venv/bin/python benchmarks/prepare_home.py /tmp/pre365 365 1995-01-01
    .venv/bin/python benchmarks/statements.py /tmp/pre365 [--depth 3] [--top 40]

Each statement's time is measured around DuckDB's call alone (the caller's stack is read after the
clock stops). Statements cost ~0.3-1 ms each however small on DuckDB (parse, bind, plan), so their
count matters as much as the large ones. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DRIVER = """
import atexit, collections, json, os, sys, time, traceback
out, depth = sys.argv[1], int(sys.argv[2])
from backfill_assets.warehouse import duckdb_engine
real = duckdb_engine.DuckDBSession._run
by_caller = collections.defaultdict(lambda: [0, 0.0])
by_text = collections.defaultdict(lambda: [0, 0.0])
def _run(self, sql, params):
    started = time.perf_counter()
    try:
        return real(self, sql, params)
    finally:
        spent = time.perf_counter() - started
        ours = [f for f in traceback.extract_stack(limit=16)[:-1] if "backfill_assets" in f.filename
                and not f.filename.endswith(("duckdb_engine.py", "warehouse/engine.py"))]
        caller = " < ".join(f"{os.path.basename(f.filename)}:{f.name}" for f in ours[-depth:][::-1])
        text = " ".join(sql.split())[:80]
        for table, key in ((by_caller, caller), (by_text, text)):
            table[key][0] += 1
            table[key][1] += spent
duckdb_engine.DuckDBSession._run = _run
atexit.register(lambda: open(out, "w").write(json.dumps({"callers": by_caller, "texts": by_text})))
from backfill_assets.cli import entrypoint
sys.argv = ["backfill", *sys.argv[3:]]
entrypoint()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prepared", type=Path, help="a folder made by benchmarks/prepare_home.py")
    parser.add_argument("--plan", default="tpch-replay")
    parser.add_argument("--depth", type=int, default=3, help="calls of ours named per statement")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="statements-") as scratch:
        copy = Path(scratch) / "w"
        shutil.copytree(args.prepared, copy, symlinks=True)
        found = Path(scratch) / "statements.json"
        env = {**os.environ, "BACKFILL_DEFS": str(ROOT / "benchmarks" / "peers" / "tpch_defs.py"),
               "BENCH_PARTITIONS_PER_RUN": os.environ.get("BENCH_PARTITIONS_PER_RUN", "30")}
        done = subprocess.run([sys.executable, "-c", DRIVER, str(found), str(args.depth), "--home", str(copy / "home"),
                               "run", "--and-publish", args.plan], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
            return done.returncode
        tables = json.loads(found.read_text())
    callers, texts = tables["callers"], tables["texts"]
    total = sum(n for n, _ in callers.values())
    seconds = sum(s for _, s in callers.values())
    print(f"{total:,} statements, {seconds:.2f} s inside DuckDB's calls")
    for title, table in (("by the calls of ours that made them", callers), ("by their first words", texts)):
        print(f"\n{title}:\n  count  seconds")
        for key, (n, s) in sorted(table.items(), key=lambda kv: -kv[1][1])[:args.top]:
            print(f"  {n:5d}  {s:7.3f}  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

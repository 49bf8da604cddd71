"""The steps of `backfill run PLAN --and-publish` timed inside its one process: the proof and the
window (`_run`, twice), reconcile and publish, each step's wall, and publish's share of the runs
(issue 23's goal: under 10%), with the command's wall and peak RSS. On copies of one home prepared
by `benchmarks/prepare_home.py`; each checkout given (`--repo`, this one by default) in turn, the
order rotated each round, so two trees are compared under the same load.

    .venv/bin/python benchmarks/prepare_home.py /tmp/pre2526 2526 1992-01-02
    .venv/bin/python benchmarks/and_publish_steps.py /tmp/pre2526 --rounds 2 --repo . --repo /path/to/older/tree

A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = {"runs (proof, window)": "backfill_assets.cli.run_cmds:_run",
         "reconcile": "backfill_assets.cli.report_cmds:reconcile_plan",
         "publish": "backfill_assets.cli.report_cmds:publish_plan"}

# the command in this process, each step's function wrapped by a wall timer (outermost calls only)
DRIVER = """
import atexit, importlib, json, sys, time
out, steps = sys.argv[1], json.loads(sys.argv[2])
walls = {}
def timed(name, module, attribute):
    owner = importlib.import_module(module)
    real = getattr(owner, attribute)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            walls[name] = walls.get(name, 0.0) + time.perf_counter() - started
    setattr(owner, attribute, wrapper)
for name, where in steps.items():
    timed(name, *where.split(":"))
atexit.register(lambda: open(out, "w").write(json.dumps(walls)))
from backfill_assets.console import entrypoint  # the console script's: its collector thresholds too
sys.argv = ["backfill", *sys.argv[3:]]
entrypoint()
"""


def one(repo: Path, prepared: Path, plan: str) -> dict[str, float]:
    """The command once, on a fresh copy of the prepared home, with `repo`'s code."""
    with tempfile.TemporaryDirectory(prefix="and-publish-") as scratch:
        copy = Path(scratch) / "w"
        shutil.copytree(prepared, copy, symlinks=True)
        walls = Path(scratch) / "walls.json"
        env = {**os.environ, "PYTHONPATH": str(repo), "BACKFILL_DEFS": str(repo / "benchmarks/peers/tpch_defs.py"),
               "BENCH_PARTITIONS_PER_RUN": "30"}
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", DRIVER, str(walls), json.dumps(STEPS), "--home",
                               str(copy / "home"), "run", plan, "--and-publish"], cwd=copy, env=env,
                              capture_output=True, text=True)
        wall = time.perf_counter() - started
        if done.returncode:
            raise SystemExit(f"{repo}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
        found: dict[str, float] = json.loads(walls.read_text())
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        found["command"] = wall
        # a child's peak shows only once it passes every earlier child's (see go_between.py): left out then
        if peak > before:
            found["peak RSS MB"] = peak / 1024
        return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prepared", type=Path, help="a folder made by benchmarks/prepare_home.py")
    parser.add_argument("--repo", type=Path, action="append", help="a checkout to time (repeatable; default: this)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--plan", default="tpch-replay")
    args = parser.parse_args(argv)
    repos = [r.resolve() for r in args.repo or [ROOT]]
    results: dict[Path, list[dict[str, float]]] = {r: [] for r in repos}
    for round_ in range(args.rounds):
        for repo in repos[round_ % len(repos):] + repos[:round_ % len(repos)]:
            found = one(repo, args.prepared, args.plan)
            results[repo].append(found)
            share = found["publish"] / found["runs (proof, window)"] * 100
            print(f"round {round_ + 1} {repo}: " + ", ".join(f"{k} {v:.2f}" for k, v in found.items())
                  + f"; publish {share:.1f}% of the runs", flush=True)
    for repo, rounds in results.items():
        shares = sorted(r["publish"] / r["runs (proof, window)"] * 100 for r in rounds)
        commands = ", ".join(f"{r['command']:.1f}" for r in rounds)
        print(f"{repo}: publish {', '.join(f'{s:.1f}%' for s in shares)} of the runs; command {commands} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

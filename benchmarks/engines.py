"""One window on DuckDB and on PostgreSQL with 1, 2 and 4 run workers (issue 14).

    .venv/bin/python benchmarks/engines.py [--partitions 60] [--per-run 5] [--workers 1,2,4]
                                           [--rounds 3] [--rows-per-day 1000] [--daemon] [--json out.json]

Each round prepares, per configuration, a plan home ready for `backfill run` of the window (init,
data, a plan approved by alice and bob with `partitions_per_run` --per-run and `runs_at_once` N,
the proof passed), then runs, in a rotating order:

  sql_duckdb / sql_postgres   the same per-partition DELETE + INSERT, one transaction each, no Dagster
  duckdb                      `backfill run` on the embedded DuckDB (one writer: runs_at_once is 1)
  postgres_wN                 `backfill run` with the warehouse AND the Dagster instance on a throwaway
                              PostgreSQL server (tests/pg_server.py; `backfill init --instance postgres`),
                              runs_at_once N: N worker processes run slices at once

With --profile duckdb,postgres_w1: cProfile of one `backfill run` per named configuration.
With --daemon, after the rounds: the same window as a UI-style backfill through `dagster-daemon run`
on DuckDB (plan runs_at_once 1) and on PostgreSQL (runs_at_once = the largest --workers); the
target's BackfillPolicy is multi_run(--per-run), the run coordinator caps runs per plan.

Reported: medians over rounds of wall seconds, partitions per second and ms per partition over the
same engine's pure SQL; CPU seconds of this process and its waited children (the PostgreSQL server's
CPU is not counted, nor the daemon's).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402
from scale import cpu_now  # noqa: E402

from backfill_assets.dagster_setup import instance_for  # noqa: E402
from backfill_assets.warehouse import open_warehouse  # noqa: E402


def run_check(ph: c.PlanHome) -> dict[str, Any]:
    with c.url_env(ph.url), open_warehouse(ph.home, ph.url).session(read_only=not ph.url) as s:
        phase = s.scalar("SELECT phase FROM backfill_control.plans WHERE plan_id = ?", [c.PLAN_ID])
        writes = s.rows("SELECT count(*), count(DISTINCT partition_key), count(DISTINCT run_id) FROM "
                        "backfill_control.writes WHERE plan_id = ? AND partition_key <> ?", [c.PLAN_ID, ph.proof])[0]
    return {"phase": phase, "writes": writes[0], "written": writes[1], "runs": writes[2]}


def one_round(rnd: int, args: argparse.Namespace, server, workers: list[int]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="engines-") as tmp:
        base = Path(tmp)
        homes: dict[str, c.PlanHome] = {}
        started = time.perf_counter()
        homes["duckdb"] = c.prepare_plan_home(base / "duckdb", args.partitions, args.rows_per_day,
                                              per_run=args.per_run)
        sql_duck = c.copy_warehouse(homes["duckdb"], base / "sql_duckdb")
        for n in workers:
            wh = server.create_database(f"wh_r{rnd}_w{n}")
            inst = server.create_database(f"dg_r{rnd}_w{n}")
            homes[f"postgres_w{n}"] = c.prepare_plan_home(base / f"pg{n}", args.partitions, args.rows_per_day,
                                                          per_run=args.per_run, runs_at_once=n, url=wh,
                                                          instance_url=inst)
        sql_pg_url = server.create_database(f"sql_r{rnd}")
        with open_warehouse(c.Home(base / "sql_pg"), sql_pg_url).session() as s:
            c.seed_warehouse(s, args.partitions + 1, args.rows_per_day)
        keys = homes["duckdb"].window
        names = ["sql_duckdb", "sql_postgres", *homes]
        shift = rnd % len(names)
        order = names[shift:] + names[:shift]
        c.say(f"  round {rnd + 1}: setup {time.perf_counter() - started:.0f}s; order {', '.join(order)}")
        for name in order:
            cpu, t0 = cpu_now(), time.perf_counter()
            if name == "sql_duckdb":
                c.pure_sql(sql_duck, None, keys)
                m: dict[str, Any] = {"ok": c.count_rows(sql_duck, None, keys) == len(keys)}
            elif name == "sql_postgres":
                c.pure_sql(c.Home(base / "sql_pg"), sql_pg_url, keys)
                m = {"ok": c.count_rows(c.Home(base / "sql_pg"), sql_pg_url, keys) == len(keys)}
            else:
                ph = homes[name]
                with c.url_env(ph.url):
                    code = c.cli(ph.home, "run", str(ph.plan), log=ph.log)
                m = {"code": code, **run_check(ph)}
                m["ok"] = code == 0 and m["phase"] == "reconciled" and m["written"] == len(keys)
            m.update(wall=time.perf_counter() - t0, cpu=cpu_now() - cpu, partitions=len(keys))
            out[name] = m
            c.say(f"    {name:<14} {m['wall']:7.2f}s wall {m['cpu']:7.2f}s cpu"
                  + (f"  {m['runs']} runs, {m['writes']} writes" if "runs" in m else "")
                  + ("" if m["ok"] else f"  NOT OK {m}"))
            if not m["ok"]:
                c.say(f"    log tail: {ph.log.read_text(errors='replace')[-1500:]}" if name in homes else "")
    return out


def daemon_run(name: str, args: argparse.Namespace, server, workers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"engines-daemon-{name}-") as tmp:
        base = Path(tmp)
        if name == "duckdb":
            ph = c.prepare_plan_home(base / name, args.partitions, args.rows_per_day, per_run=args.per_run)
        else:
            ph = c.prepare_plan_home(base / name, args.partitions, args.rows_per_day, per_run=args.per_run,
                                     runs_at_once=workers, url=server.create_database(f"wh_daemon_{name}"),
                                     instance_url=server.create_database(f"dg_daemon_{name}"))
        with c.url_env(ph.url):
            instance = instance_for(ph.home)
            daemon = c.start_daemon(ph, instance, per_run=args.per_run)
            try:
                started = time.perf_counter()
                backfill_id = c.launch_ui_backfill(instance, ph.window, f"engines {name}")
                result = c.wait_backfill(instance, backfill_id, daemon, timeout=args.daemon_timeout)
                result["wall"] = time.perf_counter() - started
            finally:
                c.stop_daemon(daemon)
                instance.dispose()
            result.update(run_check(ph))
        result["ok"] = result["status"] == "COMPLETED_SUCCESS" and result["written"] == args.partitions
        return result


def profile_config(name: str, args: argparse.Namespace, server) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"engines-profile-{name}-") as tmp:
        base = Path(tmp)
        if name == "duckdb":
            ph = c.prepare_plan_home(base / name, args.partitions, args.rows_per_day, per_run=args.per_run)
        else:
            n = int(name.rsplit("_w", 1)[1])
            ph = c.prepare_plan_home(base / name, args.partitions, args.rows_per_day, per_run=args.per_run,
                                     runs_at_once=n, url=server.create_database(f"wh_profile_{name}"),
                                     instance_url=server.create_database(f"dg_profile_{name}"))
        return c.profile_backfill_run(ph)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=60)
    parser.add_argument("--per-run", type=int, default=5)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows-per-day", type=int, default=1000)
    parser.add_argument("--daemon", action="store_true", help="also the UI-style backfill through the daemon")
    parser.add_argument("--daemon-timeout", type=float, default=900)
    parser.add_argument("--profile", default="", metavar="CONFIG,...",
                        help="after the rounds, cProfile one `backfill run` of these configurations "
                             "(duckdb, postgres_w1; workers of postgres_wN>1 are not profiled)")
    parser.add_argument("--json")
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    from tests.pg_server import PostgresServer

    results: dict[str, Any] = {"machine": c.machine(), "command": " ".join(sys.argv), "partitions": args.partitions,
                               "partitions_per_run": args.per_run, "rows_per_day": args.rows_per_day}
    c.say(f"machine: {results['machine']}")
    started = time.perf_counter()
    with PostgresServer() as server:
        if args.rounds:
            c.say("warm-up round (4 partitions, not recorded)")
            one_round(99, argparse.Namespace(**{**vars(args), "partitions": 4}), server, workers)
        rounds = []
        for rnd in range(args.rounds):
            c.say(f"round {rnd + 1}/{args.rounds} (t+{time.perf_counter() - started:.0f}s)")
            rounds.append(one_round(rnd, args, server, workers))
            results["rounds"] = rounds
            c.write_json(args.json, results)
        daemon: dict[str, Any] = {}
        if args.daemon:
            for name, n in (("duckdb", 1), (f"postgres_w{max(workers)}", max(workers))):
                c.say(f"daemon backfill on {name} (t+{time.perf_counter() - started:.0f}s)")
                daemon[name] = daemon_run(name, args, server, n)
                c.say(f"  {daemon[name]}")
            results["daemon"] = daemon
        profiles = {}
        for name in [p for p in args.profile.split(",") if p]:
            c.say(f"profile of `backfill run` on {name} (t+{time.perf_counter() - started:.0f}s)")
            profiles[name] = profile_config(name, args, server)
            c.print_profile(profiles[name])
        results["profiles"] = profiles
    summary: dict[str, dict[str, Any]] = {}
    for name in rounds[0] if rounds else []:
        wall = c.median([r[name]["wall"] for r in rounds])
        cpu = c.median([r[name]["cpu"] for r in rounds])
        summary[name] = {"wall_s": wall, "cpu_s": cpu, "partitions_per_s": args.partitions / wall,
                         "walls": [r[name]["wall"] for r in rounds], "ok": all(r[name]["ok"] for r in rounds),
                         "runs": rounds[0][name].get("runs")}
    for name, entry in summary.items():
        sql = summary["sql_duckdb" if name.endswith("duckdb") else "sql_postgres"]
        entry["over_sql_ms_per_partition"] = (entry["wall_s"] - sql["wall_s"]) / args.partitions * 1000
        entry["speedup_vs_postgres_w1"] = (summary["postgres_w1"]["wall_s"] / entry["wall_s"]
                                           if "postgres_w1" in summary and name.startswith("postgres") else None)
        # the same ratio taken within each round, then the median
        if name.startswith("postgres") and "postgres_w1" in summary:
            entry["speedup_vs_w1_in_round"] = c.median([r["postgres_w1"]["wall"] / r[name]["wall"] for r in rounds])
    for name, d in daemon.items() if summary else []:
        sql = summary["sql_duckdb" if name == "duckdb" else "sql_postgres"]
        summary[f"daemon_{name}"] = {"wall_s": d["runs_done_s"], "cpu_s": None,
                                     "partitions_per_s": args.partitions / d["runs_done_s"],
                                     "over_sql_ms_per_partition": (d["runs_done_s"] - sql["wall_s"]) / args.partitions
                                     * 1000, "marked_done_s": d["marked_done_s"], "runs": d["runs"], "ok": d["ok"],
                                     "first_start_to_last_end_s": d["first_start_to_last_end_s"]}
    results["summary"] = summary
    results["total_seconds"] = time.perf_counter() - started
    c.write_json(args.json, results)
    c.say(f"\n== {args.partitions} partitions, {args.per_run} per run, {args.rows_per_day} orders/day; "
          f"medians of {args.rounds} rounds ==")
    c.say(f"{'what':<22} {'wall s':>8} {'part/s':>7} {'ms/part over SQL':>17} {'cpu s':>7} {'speedup vs w1':>13} "
          f"{'runs':>5}")
    for name, e in summary.items():
        speed = e.get("speedup_vs_w1_in_round")
        cpu = f"{e['cpu_s']:.2f}" if e["cpu_s"] is not None else "-"
        runs = e.get("runs") if e.get("runs") is not None else "-"
        c.say(f"{name:<22} {e['wall_s']:>8.2f} {e['partitions_per_s']:>7.1f} {e['over_sql_ms_per_partition']:>17.1f} "
              f"{cpu:>7} {(f'{speed:.2f}x' if speed else '-'):>13} {runs:>5}" + ("" if e["ok"] else "  NOT OK"))
    c.say(f"total {results['total_seconds']:.0f}s")


if __name__ == "__main__":
    main()

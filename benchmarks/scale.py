"""`backfill run` against Dagster without the product, side by side, by window size (issue 12).

    .venv/bin/python benchmarks/scale.py [--partitions 30,365,2500] [--rounds 3] [--rows-per-day 1000]
                                         [--json out.json] [--png out.png]

For each window size N (daily partitions of the demo's `daily_revenue` spec over generated orders,
with partitions from 2019: benchmarks/bench_defs.py), each round prepares one plan home (init, data,
a plan approved by alice and bob, the proof passed) and gives every alternative an identical copy
of its warehouse, then runs, in a rotating order:

  pure_sql            the same per-partition DELETE + INSERT (the demo's select), one transaction each
  bare_range          a plain multi_asset, BackfillPolicy.multi_run(30): the same SQL, no checks
  bare_range_checks   the same, logging 7 AssetCheckEvaluation(partition=...) per partition: the floor
  bare_per_partition  one run per partition, 7 AssetCheckResult each (a UI backfill without a policy),
                      on the first --per-partition-keys keys, at the smallest window only
  stock_range_checks  bare_range_checks on Dagster's default sqlite instance (not our pooled event
                      log), at windows <= --stock-max only
  backfill_run        `backfill run PLAN` through backfill_assets.cli.main, slices of 30
with --what-if, also (same round, same rotation):
  bare_range_checks_cached, backfill_run_cached   the floor and `backfill run` with a proposed change to
                      backfill_assets/dagster_storage.py patched in, in this process only: the event log
                      remembers that a table exists instead of opening a new sqlite engine to ask for
                      every check evaluation (Dagster's has_table, via supports_asset_checks)
then, as subprocesses of the installed console script, with each one's peak RSS:
  publish, evidence (render --out), evidence_verify; and `process_start` (import dagster + the CLI).

Dagster runs use an instance made from the dagster.yaml `backfill init` writes (pooled sqlite event
log) unless named stock; DAGSTER_EVENT_BATCH_SIZE=1000 is set for all of them, as `backfill run`
sets it for itself. After the rounds: a UI-style backfill of the window through `dagster-daemon run`
(the PartitionBackfill that GraphQL's launchPartitionBackfill stores), for --daemon-partitions;
(--daemon-executor both: also with the runs on Dagster's in_process executor, see bench_defs.py);
and cProfile of one `backfill run` of --profile-partitions.

Reported per alternative: medians over rounds of wall seconds, CPU seconds (this process and its
waited children; the daemon's processes are not counted), ms per partition, and ms per partition
over pure SQL; the ratios backfill_run / bare_range_checks (goal <= 1.5) and backfill_run / bare_range.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402
import dagster as dg  # noqa: E402

from backfill_assets.dagster_setup import instance_for  # noqa: E402
from backfill_assets.warehouse import open_warehouse  # noqa: E402

PER_RUN = 30
ALTERNATIVES = ("pure_sql", "bare_range", "bare_range_checks", "bare_per_partition", "stock_range_checks",
                "backfill_run")
# commands after the run, measured as processes: no "over SQL" for them
STEPS = ("publish", "evidence", "evidence_verify", "process_start")
# --what-if: the same two with the proposed event-log change patched in (this process only)
WHAT_IF = ("bare_range_checks_cached", "backfill_run_cached")
LABELS = {
    "pure_sql": "pure SQL (DELETE+INSERT per partition)",
    "bare_range": "bare Dagster, range runs of 30, no checks",
    "bare_range_checks": "bare Dagster, range runs of 30 + 7 check evals/partition (floor)",
    "bare_per_partition": "bare Dagster, one run per partition + 7 checks",
    "stock_range_checks": "bare range+checks on Dagster's stock sqlite instance",
    "backfill_run": "`backfill run` (slices of 30)",
    "bare_range_checks_cached": "WHAT-IF floor, event log caching has_table",
    "backfill_run_cached": "WHAT-IF `backfill run`, event log caching has_table",
    "daemon_backfill": "UI-style backfill via dagster-daemon, launch to last run done",
    "daemon_backfill_in_process": "the same, runs on Dagster's in_process executor",
    "publish": "`backfill publish` (subprocess)",
    "evidence": "`backfill evidence PLAN --out` (subprocess)",
    "evidence_verify": "`backfill evidence verify` (subprocess)",
    "process_start": "process start: import dagster + CLI (subprocess)",
}


def cpu_now() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def measure(fn) -> dict[str, Any]:
    cpu, started = cpu_now(), time.perf_counter()
    extra = fn() or {}
    return {"wall": time.perf_counter() - started, "cpu": cpu_now() - cpu, **extra}


# --- what if: the event log asks sqlite "does this table exist?" once, not per check evaluation ---

def _cached_has_table(self, table_name: str) -> bool:
    """A proposed PooledSqliteEventLogStorage.has_table: Dagster's opens a new NullPool engine and
    sqlite connection per call, and store_asset_check_event calls it for every check evaluation
    (supports_asset_checks). Tables are never dropped, so a found table is remembered."""
    seen = self.__dict__.setdefault("_bench_seen_tables", set())
    if table_name in seen:
        return True
    engine = self._engine()
    with engine.connect() as conn:
        found = bool(engine.dialect.has_table(conn, table_name))
    if found:
        seen.add(table_name)
    return found


@contextlib.contextmanager
def cached_has_table(active: bool):
    """Patch the product's event-log class in this process only, for the `_cached` alternatives."""
    from backfill_assets.dagster_storage import PooledSqliteEventLogStorage as Storage

    if not active:
        yield
        return
    Storage.has_table = _cached_has_table  # type: ignore[method-assign]
    try:
        yield
    finally:
        del Storage.has_table  # Dagster's own, inherited, again


# --- one round of one window --------------------------------------------------------------------

def backfill_run(ph: c.PlanHome, keys: list[str]) -> dict[str, Any]:
    m = measure(lambda: {"code": c.cli(ph.home, "run", str(ph.plan), log=ph.log)})
    with open_warehouse(ph.home).session(read_only=True) as s:
        phase = s.scalar("SELECT phase FROM backfill_control.plans WHERE plan_id = ?", [c.PLAN_ID])
        runs = s.scalar("SELECT count(DISTINCT run_id) FROM backfill_control.writes WHERE plan_id = ? "
                        "AND partition_key <> ?", [c.PLAN_ID, ph.proof])
    instance = instance_for(ph.home)
    checks = c.checks_recorded(instance, keys)
    instance.dispose()
    m.update(partitions=len(keys), runs=runs, phase=phase, ok=m["code"] == 0 and phase == "reconciled" and checks)
    return m


def run_round(window: int, rnd: int, args: argparse.Namespace, smallest: bool) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix=f"scale-{window}-") as tmp:
        base = Path(tmp)
        started = time.perf_counter()
        ph = c.prepare_plan_home(base / "plan", window, args.rows_per_day, per_run=PER_RUN)
        log = base / "dagster.log"
        keys = ph.window
        wanted = [a for a in ALTERNATIVES if (a != "bare_per_partition" or smallest)
                  and (a != "stock_range_checks" or window <= args.stock_max)]
        if args.what_if:
            wanted += list(WHAT_IF)
        homes = {"backfill_run": ph}
        if "backfill_run_cached" in wanted:
            homes["backfill_run_cached"] = c.prepare_plan_home(base / "plan_cached", window, args.rows_per_day,
                                                               per_run=PER_RUN)
        copies = {alt: c.copy_warehouse(ph, base / alt) for alt in wanted if alt not in homes}
        shift = rnd % len(wanted)
        order = wanted[shift:] + wanted[:shift]
        c.say(f"  round {rnd + 1}: setup {time.perf_counter() - started:.1f}s; order {', '.join(order)}")
        for alt in order:
            home = copies.get(alt)
            with cached_has_table(alt.endswith("_cached")):
                if alt == "pure_sql":
                    m = measure(lambda h=home: (c.pure_sql(h, None, keys), None)[1])
                    m.update(partitions=len(keys), runs=0, ok=c.count_rows(home, None, keys) == len(keys))
                elif alt in homes:
                    m = backfill_run(homes[alt], keys)
                    if alt == "backfill_run":
                        out.update(after_run(ph, args))
                else:
                    per_partition = alt == "bare_per_partition"
                    subset = keys[:args.per_partition_keys] if per_partition else keys
                    instance = c.stock_instance(base / alt / "dagster-stock") if alt == "stock_range_checks" \
                        else c.our_instance(base / alt / "dagster")
                    defs = c.bare_definitions(home, None, checks=alt != "bare_range",
                                              policy=None if per_partition else dg.BackfillPolicy.multi_run(PER_RUN))
                    with c.quiet(log):
                        m = measure(lambda d=defs, i=instance, s=subset, p=per_partition:
                                    {"runs": c.bare_runs(d, i, s, 1 if p else PER_RUN)})
                    checks = alt == "bare_range" or c.checks_recorded(instance, subset)
                    instance.dispose()
                    m.update(partitions=len(subset), ok=checks and c.count_rows(home, None, subset) == len(subset))
            out[alt] = m
            c.say(f"    {alt:<26} {m['wall']:8.2f}s wall {m['cpu']:8.2f}s cpu  {m['partitions']:>5} partitions "
                  f"{m.get('runs', 0):>4} runs{'' if m['ok'] else '  NOT OK'}")
    return out


def after_run(ph: c.PlanHome, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """publish, evidence render and verify as the installed console script, each with its peak RSS."""
    out = {}
    backfill = str(c.BIN / "backfill")
    evidence_file = ph.base / "evidence.yaml"
    steps = [
        ("process_start", [c.PYTHON, "-c", "import dagster, backfill_assets.cli"]),
        ("publish", [backfill, "--home", str(ph.home.root), "publish", c.PLAN_ID]),
        ("evidence", [backfill, "--home", str(ph.home.root), "evidence", c.PLAN_ID, "--out", str(evidence_file)]),
        ("evidence_verify", [backfill, "--home", str(ph.home.root), "evidence", "verify"]),
    ]
    for name, cmd in steps:
        child = c.run_child(cmd, env=ph.env(), cwd=ph.base)
        out[name] = {"wall": child.seconds, "cpu": child.cpu, "peak_rss_mb": child.peak_rss_mb,
                     "partitions": len(ph.window), "ok": child.code == 0}
        if child.code != 0:
            c.say(f"    {name} exited {child.code}: {child.output.strip().splitlines()[-3:]}")
        c.say(f"    {name:<20} {child.seconds:8.2f}s wall  peak RSS {child.peak_rss_mb:7.1f} MB")
    return out


# --- the daemon ---------------------------------------------------------------------------------

def daemon_round(window: int, args: argparse.Namespace, executor: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"scale-daemon-{window}-") as tmp:
        ph = c.prepare_plan_home(Path(tmp) / "plan", window, args.rows_per_day, per_run=PER_RUN)
        instance = instance_for(ph.home)
        daemon = c.start_daemon(ph, instance, executor=executor)
        try:
            cpu = cpu_now()
            started = time.perf_counter()
            backfill_id = c.launch_ui_backfill(instance, ph.window, f"bench {window}")
            result = c.wait_backfill(instance, backfill_id, daemon, timeout=args.daemon_timeout)
            result["wall"] = time.perf_counter() - started
            result["cpu_this_process"] = cpu_now() - cpu
        finally:
            c.stop_daemon(daemon)
            instance.dispose()
        with open_warehouse(ph.home).session(read_only=True) as s:
            written = s.scalar("SELECT count(DISTINCT partition_key) FROM backfill_control.writes WHERE plan_id = ? "
                               "AND partition_key <> ?", [c.PLAN_ID, ph.proof])
            result["phase_after"] = s.scalar("SELECT phase FROM backfill_control.plans WHERE plan_id = ?",
                                             [c.PLAN_ID])
        result.update(partitions=window, written=written,
                      ok=result["status"] == "COMPLETED_SUCCESS" and written == window)
        return result


# --- the profile ---------------------------------------------------------------------------------

def profile_run(window: int, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"scale-profile-{window}-") as tmp:
        ph = c.prepare_plan_home(Path(tmp) / "plan", window, args.rows_per_day, per_run=PER_RUN)
        return {"window": window, **c.profile_backfill_run(ph, args.profile_out)}


# --- reporting ------------------------------------------------------------------------------------

def summarise(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    names = sorted({k for r in rounds for k in r}, key=lambda n: list(LABELS).index(n) if n in LABELS else 99)
    summary: dict[str, dict[str, Any]] = {}
    for name in names:
        got = [r[name] for r in rounds if name in r]
        parts = got[0]["partitions"]
        wall = c.median([g["wall"] for g in got])
        cpu = c.median([g["cpu"] for g in got if g.get("cpu") is not None])
        summary[name] = {"label": LABELS.get(name, name), "rounds": len(got), "partitions": parts,
                         "wall_s": wall, "cpu_s": cpu, "wall_ms_per_partition": wall / parts * 1000,
                         "cpu_ms_per_partition": cpu / parts * 1000 if cpu is not None else None,
                         "walls": [g["wall"] for g in got], "ok": all(g["ok"] for g in got),
                         "runs": got[0].get("runs")}
        rss = [g["peak_rss_mb"] for g in got if g.get("peak_rss_mb") is not None]
        if rss:
            summary[name]["peak_rss_mb"] = max(rss)
    sql = summary.get("pure_sql")
    for name, entry in summary.items():
        if sql and name not in STEPS:
            entry["over_sql_ms_per_partition"] = entry["wall_ms_per_partition"] - sql["wall_ms_per_partition"]
            if entry["cpu_ms_per_partition"] is not None and sql["cpu_ms_per_partition"] is not None:
                entry["cpu_over_sql_ms_per_partition"] = entry["cpu_ms_per_partition"] - sql["cpu_ms_per_partition"]
    return summary


def ratios(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Ratios taken within each round (same conditions), then the median over rounds."""
    out: dict[str, Any] = {}
    pairs = [("backfill_run", "bare_range_checks"), ("backfill_run", "bare_range"),
             ("backfill_run_cached", "bare_range_checks_cached"), ("backfill_run_cached", "backfill_run"),
             ("bare_range_checks_cached", "bare_range_checks")]
    for top, floor in pairs:
        got = [r for r in rounds if top in r and floor in r]
        if not got:
            continue
        wall = [r[top]["wall"] / r[floor]["wall"] for r in got]
        cpu = [r[top]["cpu"] / r[floor]["cpu"] for r in got]
        out[f"{top} / {floor}"] = {"wall": c.median(wall), "cpu": c.median(cpu), "wall_rounds": wall}
    return out


def print_table(window: int, summary: dict[str, dict[str, Any]], rat: dict[str, Any]) -> None:
    c.say(f"\n== window {window} partitions (medians over rounds) ==")
    c.say(f"{'what':<66} {'rounds':>6} {'parts':>5} {'wall s':>8} {'ms/part':>8} {'over SQL':>9} "
          f"{'cpu ms/part':>11} {'peak RSS':>9}")
    for entry in summary.values():
        cpu = entry.get("cpu_ms_per_partition")
        rss = entry.get("peak_rss_mb")
        over = f"{entry['over_sql_ms_per_partition']:.1f}" if "over_sql_ms_per_partition" in entry else "-"
        c.say(f"{entry['label'][:66]:<66} {entry['rounds']:>6} {entry['partitions']:>5} {entry['wall_s']:>8.2f} "
              f"{entry['wall_ms_per_partition']:>8.1f} {over:>9} "
              f"{(f'{cpu:.1f}' if cpu is not None else '-'):>11} {(f'{rss:.0f} MB' if rss else '-'):>9}"
              f"{'' if entry['ok'] else '  NOT OK'}")
    for name, r in rat.items():
        goal = "  (goal <= 1.5x)" if name.startswith("backfill_run") and "/ bare_range_checks" in name else ""
        c.say(f"{name}: wall {r['wall']:.2f}x, cpu {r['cpu']:.2f}x" + goal)


def chart(path: str, results: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(8, 6))
    windows = sorted(int(w) for w in results["windows"])
    series = ["bare_range", "bare_range_checks", "stock_range_checks", "bare_per_partition", "backfill_run",
              "daemon_backfill", "daemon_backfill_in_process", "bare_range_checks_cached", "backfill_run_cached"]
    markers = dict(zip(series, "os^vDx+<>", strict=True))
    for name in series:
        xs, ys = [], []
        for w in windows:
            entry = results["windows"][str(w)]["summary"].get(name)
            if entry and (entry.get("over_sql_ms_per_partition") or 0) > 0:
                xs.append(w)
                ys.append(entry["over_sql_ms_per_partition"])
        if xs:
            # one run per partition is measured on --per-partition-keys keys whatever the window: points only
            style = "none" if name in ("bare_per_partition", "stock_range_checks") else "-"
            ax.plot(xs, ys, marker=markers[name], linestyle=style, label=LABELS[name])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(windows, [str(w) for w in windows])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("window (daily partitions)")
    ax.set_ylabel("wall ms per partition over pure SQL (median, log)")
    ax.set_title("Per-partition orchestration overhead by window size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", default="30,365,2500", help="window sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--large-rounds", type=int, default=1, help="rounds for windows > --large (default 1)")
    parser.add_argument("--large", type=int, default=1000)
    parser.add_argument("--rows-per-day", type=int, default=1000)
    parser.add_argument("--per-partition-keys", type=int, default=30)
    parser.add_argument("--stock-max", type=int, default=30, help="largest window for stock_range_checks")
    parser.add_argument("--daemon-partitions", default="30,365", help="windows for the daemon backfill ('' skips)")
    parser.add_argument("--daemon-rounds", type=int, default=1)
    parser.add_argument("--daemon-executor", choices=("multiprocess", "in_process", "both"), default="multiprocess",
                        help="the executor of the runs the daemon launches (Dagster's default: multiprocess)")
    parser.add_argument("--daemon-timeout", type=float, default=1800)
    parser.add_argument("--profile-partitions", type=int, default=365, help="0 skips the profile")
    parser.add_argument("--profile-out", help="write the cProfile stats here (pstats format)")
    parser.add_argument("--what-if", action="store_true",
                        help="also the floor and `backfill run` with the proposed cached has_table patched in")
    parser.add_argument("--json")
    parser.add_argument("--png")
    parser.add_argument("--chart-only", metavar="A.json,B.json",
                        help="measure nothing: merge the windows of earlier --json files into --png")
    args = parser.parse_args()
    if args.chart_only:
        merged: dict[str, Any] = {"windows": {}}
        for path in args.chart_only.split(","):
            merged["windows"].update(json.loads(Path(path).read_text())["windows"])
        chart(args.png, merged)
        c.say(f"chart: {args.png} (windows {', '.join(sorted(merged['windows'], key=int))})")
        return
    windows = [int(w) for w in args.partitions.split(",") if w.strip()]
    started = time.perf_counter()
    results: dict[str, Any] = {"machine": c.machine(), "command": " ".join(sys.argv), "rows_per_day": args.rows_per_day,
                               "partitions_per_run": PER_RUN, "windows": {}}
    c.say(f"machine: {results['machine']}")
    if windows:
        c.say("warm-up (3 partitions, not recorded)")
        run_round(3, 0, argparse.Namespace(**{**vars(args), "per_partition_keys": 2}), smallest=True)
    for window in windows:
        rounds_n = args.large_rounds if window > args.large else args.rounds
        c.say(f"\nwindow {window}: {rounds_n} round(s), {args.rows_per_day} orders/day "
              f"(t+{time.perf_counter() - started:.0f}s)")
        rounds = [run_round(window, r, args, smallest=window == min(windows)) for r in range(rounds_n)]
        summary, rat = summarise(rounds), ratios(rounds)
        results["windows"][str(window)] = {"rounds": rounds, "summary": summary, "ratios": rat}
        print_table(window, summary, rat)
        c.write_json(args.json, results)
    executors = ["multiprocess", "in_process"] if args.daemon_executor == "both" else [args.daemon_executor]
    for window in [int(w) for w in args.daemon_partitions.split(",") if w.strip()]:
        for executor in executors:
            name = "daemon_backfill" if executor == "multiprocess" else "daemon_backfill_in_process"
            c.say(f"\ndaemon backfill of {window} partitions, {executor} executor "
                  f"(t+{time.perf_counter() - started:.0f}s)")
            got = []
            for _ in range(args.daemon_rounds):
                d = daemon_round(window, args, executor)
                c.say(f"  {d}")
                got.append(d)
            entry = results["windows"].setdefault(str(window), {"summary": {}})
            wall = c.median([g["runs_done_s"] for g in got])
            summary = {"label": LABELS[name], "rounds": len(got), "partitions": window, "wall_s": wall,
                       "cpu_s": None, "wall_ms_per_partition": wall / window * 1000, "cpu_ms_per_partition": None,
                       "walls": [g["runs_done_s"] for g in got], "ok": all(g["ok"] for g in got),
                       "runs": got[0]["runs"], "marked_done_s": c.median([g["marked_done_s"] for g in got]),
                       "first_start_to_last_end_s": c.median([g["first_start_to_last_end_s"] for g in got]),
                       "details": got}
            sql = entry["summary"].get("pure_sql")
            if sql:
                summary["over_sql_ms_per_partition"] = summary["wall_ms_per_partition"] - sql["wall_ms_per_partition"]
            entry["summary"][name] = summary
            c.write_json(args.json, results)
    if args.profile_partitions:
        c.say(f"\nprofile of one `backfill run` of {args.profile_partitions} partitions "
              f"(t+{time.perf_counter() - started:.0f}s)")
        prof = profile_run(args.profile_partitions, args)
        results["profile"] = prof
        c.print_profile(prof)
    results["total_seconds"] = time.perf_counter() - started
    c.say("\n== summary ==")
    for window, entry in results["windows"].items():
        if "ratios" in entry:
            print_table(int(window), entry["summary"], entry["ratios"])
        elif entry["summary"]:
            c.say(f"window {window}: {entry['summary']}")
    c.write_json(args.json, results)
    if args.png:
        chart(args.png, results)
        c.say(f"chart: {args.png}")
    c.say(f"total {results['total_seconds']:.0f}s")


if __name__ == "__main__":
    main()

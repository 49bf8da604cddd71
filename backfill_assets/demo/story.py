"""`backfill demo`: the whole story on the embedded DuckDB, from sample data to evidence.

The demo is a user of the library like any team: it drives the `backfill` CLI and Dagster the way a
person would, with the demo pipeline in `backfill_assets/demo/`. The CLI is handed in by the command
that starts the story (`backfill demo`), so the story never imports the CLI that imports it.
Dagster's own output goes to the home's log file; the terminal shows the story.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from backfill_assets import terminal
from backfill_assets.control import trust_record
from backfill_assets.dagster_setup import instance_for
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.demo.definitions import build_definitions
from backfill_assets.demo.revenue import DAILY_REVENUE, DAILY_REVENUE_V1, MONTHLY_REVENUE
from backfill_assets.errors import UsageError
from backfill_assets.execution.runner import enable_event_batching, failure_messages
from backfill_assets.home import Home
from backfill_assets.impact import consumers_line
from backfill_assets.plan.approvals import append_approval_text, entry_of, plan_statement
from backfill_assets.plan.loading import load_plan
from backfill_assets.signing import sshsig
from backfill_assets.signing.statements import Statement
from backfill_assets.table import code_identity_of
from backfill_assets.tags import BACKFILL_TAG
from backfill_assets.warehouse import open_warehouse

MARKER = ".backfill-demo"
FIRST_DAY, DAYS, ROWS_PER_DAY = dt.date(2026, 1, 1), 31, 2000  # all of January: its month is rolled up
WINDOW = ("2026-01-05", "2026-01-18")
PROOF = "2026-01-06"
LATE_DAY = "2026-01-15"
PLAN_ID = "refund-double-count-fix"

PLAN_TEXT = f"""\
plan_id: {PLAN_ID}
owner: olivia
reason: >
  Release 2025-12 subtracted refunds twice from daily_revenue.net_revenue; finance dashboards
  under-report net revenue for {WINDOW[0]}..{WINDOW[1]}.
target: daily_revenue
window:
  start: {WINDOW[0]}
  end: {WINDOW[1]}
source_of_truth: orders
graph:                          # computed from daily_revenue: recomputed, gated and published with it
  - asset: monthly_revenue
    window: {{start: "2026-01-01", end: "2026-01-01"}}
downstream:
  - asset: published_revenue
    owners: [finance-bi, revenue-dashboards]
  - asset: revenue_report
    owners: [finance-bi]
execution:
  mode: overwrite
  idempotency: each partition is deleted and re-inserted from orders in one transaction, so a
    rerun yields the same rows (proved by fingerprints on the proof partition)
  proof_partitions: [{PROOF}]
  partitions_per_run: 4
  allow_empty_partitions: false
incremental:
  watermark: the daily schedule keeps its cursor; the plan claims its window while it is active
  metrics_comparable: one code version (2) for the whole window; the metric definitions are
    unchanged except the corrected net revenue
publish:
  freeze: true
  notify: ["#revenue-consumers"]
rollback:
  strategy: backfill rollback restores daily_revenue, monthly_revenue and their published tables
    for every written partition from the pre-run snapshots, checked by fingerprints
gates:
  row_count_parity: {{max_diff_pct: 0}}
  duplicates: {{max_rows: 0}}
  metrics:                      # DECIMAL money and counts: exact, per day and region
    - {{name: orders}}
    - {{name: gross}}
    - {{name: refunds}}
    - {{name: net_revenue}}
  contract: {{enforce: true}}
approvals:
  required: 2
  granted: []
"""


def step(number: int, title: str) -> None:
    print(f"\n== {number}. {title}", flush=True)


def run(*args: str, expect: int = 0) -> None:
    print(f"$ backfill {' '.join(_short(a) for a in args)}", flush=True)
    code = _CLI[0](list(args))
    if code != expect:
        raise UsageError(f"demo step `backfill {' '.join(args)}` exited {code}, expected {expect}",
                         fix="see the output above")


def _short(arg: str) -> str:
    """Paths inside the demo's home are shown relative to it, so the transcript stays readable."""
    return arg.replace(str(_HOME[0]) + "/", "") if _HOME else arg


_HOME: list[Path] = []
_CLI: list[Callable[[Sequence[str]], int]] = []  # the `backfill` command's main, for this story


def _prepare(home: Home) -> None:
    if home.root.exists() and any(home.root.iterdir()) and not (home.root / MARKER).exists():
        raise UsageError(f"{home.root} holds state that is not the demo's",
                         fix="pass --home to a new folder, or move that folder away")
    shutil.rmtree(home.root, ignore_errors=True)
    home.root.mkdir(parents=True)
    (home.root / MARKER).write_text("created by `backfill demo`; safe to delete\n")


def _keys(home: Home, names: list[str]) -> dict[str, Path]:
    """Throwaway SSH keys for the demo's people (bob's is RSA), and the allowed_signers file of
    olivia (the plan's owner), alice and bob."""
    folder = home.root / "demo-keys"
    folder.mkdir(mode=0o700)
    paths = {}
    for name in names:
        key = rsa.generate_private_key(public_exponent=65537, key_size=3072) if name == "bob" else \
            ed25519.Ed25519PrivateKey.generate()
        path = folder / name
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                           serialization.NoEncryption()))
        path.chmod(0o600)
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        (folder / f"{name}.pub").write_bytes(public + f" {name}\n".encode())
        paths[name] = path
    signers = home.root / "approvers" / "allowed_signers"
    signers.parent.mkdir()
    signers.write_text("# reviewed like code: who may approve replay plans, with which key\n" + "".join(
        f"{n} {(paths[n].parent / f'{n}.pub').read_text().split(' ' + n)[0]}\n" for n in ("olivia", "alice", "bob")))
    return paths


def _forge(home: Home, plan: Path, by: str, signature: Callable[[Statement], str]) -> None:
    """Append an entry by hand, as someone without `by`'s key would."""
    with open_warehouse(home).session(read_only=True) as session:
        root = trust_record.require(session)
    statement = plan_statement(load_plan(plan), root, code_identity_of([DAILY_REVENUE, MONTHLY_REVENUE]))
    plan.write_text(append_approval_text(plan.read_text(), entry_of(by, statement, signature(statement))))


def _net_revenue(home: Home, table: str) -> float:
    with open_warehouse(home).session() as session:
        return float(session.scalar(f"SELECT coalesce(sum(net_revenue), 0) FROM {table} "
                                    "WHERE order_date BETWEEN ? AND ?", list(WINDOW)))


def _month_revenue(home: Home) -> float:
    with open_warehouse(home).session() as session:
        return float(session.scalar("SELECT coalesce(sum(net_revenue), 0) FROM published_monthly_revenue "
                                    "WHERE month = DATE '2026-01-01'"))


def _truth(home: Home) -> float:
    with open_warehouse(home).session() as session:
        return float(session.scalar(
            "SELECT sum(amount) - coalesce(sum(amount) FILTER (WHERE status = 'refunded'), 0) "
            "FROM orders WHERE order_date BETWEEN ? AND ?", list(WINDOW)))


def _sql(home: Home, statement: str, params: list[Any] | None = None) -> None:
    with open_warehouse(home).session() as session:
        session.execute(statement, params or [])


def _in_process(home: Home, defs: dg.Definitions, instance: dg.DagsterInstance, assets: list[str],
                tags: dict[str, str]) -> dg.ExecuteInProcessResult:
    job = defs.resolve_implicit_global_asset_job_def()
    with terminal.dagster_output(home):
        return job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(a) for a in assets],
                                      tags=tags, raise_on_error=False, run_config=terminal.run_config())


def run_demo(home: Home, backfill: Callable[[Sequence[str]], int]) -> int:
    """Tell the story in `home`, running each `backfill` command through `backfill` (the CLI's
    main: arguments in, exit code out, its errors printed as a person sees them)."""
    started = time.monotonic()
    # the demo's commands load the demo's definitions (its daily table, monthly rollup and report),
    # wherever it is started from and whatever definitions the shell names
    os.environ["BACKFILL_DEFS"] = "backfill_assets.demo.definitions"
    os.environ["BACKFILL_HOME"] = str(home.root)  # its in-process runs resolve the warehouse as the CLI does
    enable_event_batching()
    _prepare(home)
    _HOME[:] = [home.root]
    _CLI[:] = [backfill]
    h = ["--home", str(home.root)]
    plan = home.root / "plans" / f"{PLAN_ID}.yaml"
    instance = instance_for(home)
    last = (FIRST_DAY + dt.timedelta(days=DAYS - 1)).isoformat()

    step(1, "Pin the team's approvers; sample orders, generated inside the warehouse")
    keys = _keys(home, ["olivia", "alice", "bob", "mallory"])
    run(*h, "init", "--allowed-signers", str(home.root / "approvers" / "allowed_signers"))
    run(*h, "sample", "--days", str(DAYS), "--rows-per-day", str(ROWS_PER_DAY), "--start", FIRST_DAY.isoformat())

    step(2, "The buggy release (refunds counted twice) loads and publishes the history, days then month")
    buggy = build_definitions(DAILY_REVENUE_V1, home=str(home.root), monthly=MONTHLY_REVENUE)
    seeded = _in_process(home, buggy, instance, ["daily_revenue", "published_revenue"], {
        "dagster/asset_partition_range_start": FIRST_DAY.isoformat(), "dagster/asset_partition_range_end": last})
    rolled_up = _in_process(home, buggy, instance, ["monthly_revenue", "published_monthly_revenue", "revenue_report"],
                            {"dagster/partition": "2026-01-01"}) if seeded.success else seeded
    if not seeded.success or not rolled_up.success:
        raise UsageError("seeding the buggy history failed: " + "; ".join(failure_messages(seeded)
                                                                          + failure_messages(rolled_up)),
                         fix=f"see {home.log_file}")
    before, month_before = _net_revenue(home, "published_revenue"), _month_revenue(home)
    print(f"published net revenue {WINDOW[0]}..{WINDOW[1]}: {before:,.2f} (orders say {_truth(home):,.2f}); "
          f"January's month: {month_before:,.2f}")

    step(3, "Without a plan, rewriting history is refused before any write: the data decides")
    fixed = build_definitions(DAILY_REVENUE, home=str(home.root), monthly=MONTHLY_REVENUE)
    for label, tags in (("the UI's Materialize of one old partition", {"dagster/partition": WINDOW[0],
                                                                        "dagster/from_ui": "true"}),
                        ("a UI backfill", {BACKFILL_TAG: "ui-demo", "dagster/partition": WINDOW[0]})):
        refused = _in_process(home, fixed, instance, ["daily_revenue"], tags)
        print(f"{label}: run {refused.run_id[:8]} {'FAILED' if not refused.success else 'succeeded?!'}: "
              + (failure_messages(refused) or ["?"])[0][:300])

    step(4, "Draft the replay plan; the guard refuses it until it is signed")
    plan.parent.mkdir(parents=True, exist_ok=True)
    plan.write_text(PLAN_TEXT)
    run(*h, "plan", "validate", str(plan))
    run(*h, "guard", str(plan), expect=1)

    step(5, "Forged approvals do not count; the owner and two approvers sign with their SSH keys")
    _forge(home, plan, "carol", lambda statement: "U1NIU0lHAAAAAQ==")  # typed by hand
    _forge(home, plan, "bob", lambda statement: sshsig.one_line(sshsig.sign(statement.message, keys["mallory"])))
    run(*h, "plan", "show", str(plan))
    run(*h, "plan", "approve", str(plan), "--by", "bob", "--key", str(keys["mallory"]), expect=1)
    mine = home.root / "approvers" / "mallory_signers"  # mallory lists her own key as alice and bob
    mine.write_text("".join(f"{n} {(keys['mallory'].parent / 'mallory.pub').read_text().split(' mallory')[0]}\n"
                            for n in ("alice", "bob")))
    run(*h, "approvers", "pin", str(mine), "--sign", f"alice={keys['mallory']}", "--sign", f"bob={keys['mallory']}",
        expect=1)
    for who in ("olivia", "alice", "bob"):
        run(*h, "plan", "approve", str(plan), "--by", who, "--key", str(keys[who]))
    run(*h, "guard", str(plan))

    step(6, "Proof slice, twice, through Dagster: identical fingerprints")
    run(*h, "run", PLAN_ID, "--proof")

    step(7, f"Late events with no region arrive for {LATE_DAY}; the window runs in slices")
    _sql(home, "INSERT INTO orders SELECT order_id + 10000000, customer_id, NULL, order_ts, order_date, amount, "
               "status FROM orders WHERE order_date = ? LIMIT 3", [LATE_DAY])
    run(*h, "run", PLAN_ID, "--dry-run")
    run(*h, "run", PLAN_ID, expect=1)

    step(8, "The gates say why; quarantine the bad events and re-run the failing partition")
    run(*h, "status", PLAN_ID)
    _sql(home, "CREATE TABLE IF NOT EXISTS orders_quarantine AS SELECT * FROM orders WHERE region IS NULL")
    _sql(home, "DELETE FROM orders WHERE region IS NULL")
    run(*h, "run", PLAN_ID, "--partitions", LATE_DAY)
    run(*h, "run", PLAN_ID)

    step(9, "What the backfill changed, key by key, before anyone sees it")
    run(*h, "diff", PLAN_ID, "--partitions", f"{WINDOW[0]},{LATE_DAY}", "--top", "2")

    step(10, "The reopen sensor sees every gate passed and requests the publish run")
    sensor = fixed.resolve_sensor_def("daily_revenue__reopen_publish")
    context = dg.build_sensor_context(instance=instance, definitions=fixed,
                                      resources={"warehouse": WarehouseResource(home=str(home.root))})
    [request] = sensor.evaluate_tick(context).run_requests or []
    published = _in_process(home, fixed, instance, ["published_revenue"], dict(request.tags))
    if not published.success:
        raise UsageError("the publish run failed: " + "; ".join(failure_messages(published)), fix=str(home.log_file))
    print(consumers_line(published.get_asset_materialization_events()) or "consumers see no change")
    print(f"published_monthly_revenue 2026-01 in the same transaction: {month_before:,.2f} -> "
          f"{_month_revenue(home):,.2f}")
    # its next tick refreshes the consumers downstream of the graph (a plain pandas report)
    for refresh in sensor.evaluate_tick(context).run_requests or []:
        report = _in_process(home, fixed, instance, [k.to_user_string() for k in refresh.asset_selection or []],
                             dict(refresh.tags))
        [materialized] = report.get_asset_materialization_events()
        total = materialized.materialization.metadata["net_revenue"].value
        print(f"the sensor refreshed {materialized.materialization.asset_key.to_user_string()} "
              f"({'ok' if report.success else 'FAILED'}): it reads {total:,.2f} for January")
    run(*h, "status", PLAN_ID)

    step(11, "Evidence for the audit, from the keyed hash chain")
    evidence = home.root / "evidence" / f"{PLAN_ID}.yaml"
    run(*h, "evidence", PLAN_ID, "--out", str(evidence))
    run(*h, "evidence", "verify")

    step(12, "Rollback rehearsal on a copy of the home (the real one is untouched)")
    with tempfile.TemporaryDirectory() as rehearsal:
        shutil.copy(home.warehouse, Path(rehearsal) / "warehouse.duckdb")
        shutil.copytree(home.evidence_key.parent, Path(rehearsal) / home.evidence_key.parent.name)
        run("--home", rehearsal, "rollback", PLAN_ID, "--dry-run")
        run("--home", rehearsal, "rollback", PLAN_ID)
        rolled = _net_revenue(Home(Path(rehearsal)), "published_revenue")
        print(f"rehearsal: published net revenue back to {rolled:,.2f}, January's month to "
              f"{_month_revenue(Home(Path(rehearsal))):,.2f} (the pre-backfill values)")

    after = _net_revenue(home, "published_revenue")
    print("\n== Repaired")
    print(f"published net revenue {WINDOW[0]}..{WINDOW[1]}: {before:,.2f} -> {after:,.2f} "
          f"(orders say {_truth(home):,.2f}; {after - before:+,.2f} restored)")
    print(f"published net revenue of January's month: {month_before:,.2f} -> {_month_revenue(home):,.2f}, "
          "repaired in the same publish")
    print(f"evidence   {evidence}")
    print(f"Dagster    {home.dagster_home}: `make ui` shows these runs, the checks and the plan; "
          f"demo took {time.monotonic() - started:.0f}s")
    return 0

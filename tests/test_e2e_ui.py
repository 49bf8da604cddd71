"""End to end through the Dagster UI: a real `dagster dev`, its GraphQL API, its daemon, a browser.

Backfills are launched the way the UI launches them (`launchPartitionBackfill` with an asset
selection and partition names); the run coordinator, the plan gate inside the asset, the reopen
sensor and the publish asset all run in the real webserver/daemon/run-worker processes. The
warehouse is read read-only between runs; the browser is Debian's Chromium, driven by Playwright.

The module takes a few minutes: the backfill daemon and the sensor tick every 30 seconds.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from backfill_assets.warehouse.connection import connection
from tests.e2e_support import (
    ROOT,
    RUN_DONE,
    DagsterDev,
    RunInfo,
    dagster_dev,
    plan_phase,
    query_warehouse,
    run_backfill_cli,
    table_exists,
    wait_until,
)
from tests.plans import complete_plan, write_plan

ASSET = "daily_revenue"
GATES = ("row_count_matches_source", "no_duplicate_business_keys", "metrics_match_source",
         "contract_holds", "single_code_version")
REGIONS = 5  # backfill sample writes orders for 5 regions a day: 5 rows per partition
SCREENSHOTS = ROOT / "docs" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

GATE_REFUSAL = ("Refused by the backfill plan gate: no approved replay plan covers partition {key} "
                "of daily_revenue; backfill runs may only write inside an approved plan's window")

# the approved plan of the main scenario
PLAN_ID = "ui-refund-fix"
WINDOW = ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"]
PROOF = "2026-01-02"
REST = [k for k in WINDOW if k != PROOF]


# --- fixtures -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DagsterDev]:
    tmp = tmp_path_factory.mktemp("e2e-ui")

    def sample(home: Path) -> None:
        run_backfill_cli("sample", "--days", "10", "--rows-per-day", "200", backfill_home=home)

    with dagster_dev(tmp, prepare=sample) as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser, ui: DagsterDev):
    ui.set_nux_seen()  # what "Skip" on the UI's first-visit community dialog records
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    try:
        yield context.new_page()
    finally:
        context.close()


def approve(ui: DagsterDev, document: dict) -> Path:
    plans = ui.backfill_home.parent / "plans"
    plans.mkdir(exist_ok=True)
    path = write_plan(plans / f"{document['plan_id']}.yaml", document)
    run_backfill_cli("plan", "approve", str(path), "--by", "alice", backfill_home=ui.backfill_home)
    run_backfill_cli("plan", "approve", str(path), "--by", "bob", backfill_home=ui.backfill_home)
    assert plan_phase(ui.warehouse, document["plan_id"]) == "approved"
    return path


def describe_plan(ui: DagsterDev, plan_id: str):
    def describe() -> str:
        runs = ui.runs_with_tag("backfill_assets/plan", plan_id)
        lines = [f"plan {plan_id} phase {plan_phase(ui.warehouse, plan_id)}"]
        lines += [f"  run {r.run_id[:8]} {r.partition} {r.status} {r.failure_messages}" for r in runs]
        return "\n".join(lines) + f"\n--- dagster dev log ---\n{ui.log_tail(30)}"

    return describe


@dataclass
class PublishedPlan:
    path: Path
    proof_backfills: list[tuple[str, dict]]
    window_backfill: tuple[str, dict]


@pytest.fixture(scope="module")
def published_plan(ui: DagsterDev) -> PublishedPlan:
    """An approved plan carried through the UI: proof twice, the sensor proves it, the window, publish."""
    path = approve(ui, complete_plan(plan_id=PLAN_ID, start=WINDOW[0], end=WINDOW[-1], proof=(PROOF,),
                                     max_concurrent=2))
    proofs = []
    for attempt in (1, 2):
        backfill_id = ui.launch_backfill(ASSET, [PROOF], title=f"{PLAN_ID} proof {attempt}")
        proofs.append((backfill_id, ui.wait_for_backfill(backfill_id)))
    # nobody runs `backfill run --proof`: the reopen sensor in the daemon records the proof
    wait_until(lambda: plan_phase(ui.warehouse, PLAN_ID) == "proven", timeout=100,
               what=f"the reopen sensor to move {PLAN_ID} to proven",
               describe=describe_plan(ui, PLAN_ID))
    backfill_id = ui.launch_backfill(ASSET, REST, title=f"{PLAN_ID} window")
    window = (backfill_id, ui.wait_for_backfill(backfill_id))
    wait_until(lambda: plan_phase(ui.warehouse, PLAN_ID) == "published", timeout=150,
               what=f"the reopen sensor's publish run to publish {PLAN_ID}",
               describe=describe_plan(ui, PLAN_ID))

    def publish_run_ended() -> bool:  # the run commits "published", then reports its own success
        runs = [r for r in ui.runs_with_tag("backfill_assets/plan", PLAN_ID)
                if "dagster/backfill" not in r.tags]
        return bool(runs) and all(r.status in RUN_DONE for r in runs)

    wait_until(publish_run_ended, timeout=60, what="the publish run to end",
               describe=describe_plan(ui, PLAN_ID))
    return PublishedPlan(path, proofs, window)


# --- helpers ------------------------------------------------------------------------------------

def rows_per_partition(ui: DagsterDev, table: str, keys: list[str]) -> dict[str, int]:
    if not table_exists(ui.warehouse, table):
        return {k: 0 for k in keys}
    rows = dict(query_warehouse(
        ui.warehouse, f"SELECT strftime(order_date, '%Y-%m-%d'), count(*) FROM {table} "
                      "WHERE strftime(order_date, '%Y-%m-%d') = ANY(?) GROUP BY 1", [keys]))
    return {k: rows.get(k, 0) for k in keys}


def max_overlap(runs: list[RunInfo]) -> int:
    """The most runs that were executing at the same moment (from their start/end times)."""
    edges = sorted([(r.start_time, 1) for r in runs] + [(r.end_time, -1) for r in runs],
                   key=lambda e: (e[0], e[1]))
    busy = peak = 0
    for _, step in edges:
        busy += step
        peak = max(peak, busy)
    return peak


def net_revenue(ui: DagsterDev, key: str) -> tuple[Decimal, Decimal, Decimal]:
    """(daily_revenue, published_revenue, recomputed from orders) net revenue of one day."""
    return query_warehouse(ui.warehouse, """
        SELECT (SELECT sum(net_revenue) FROM daily_revenue WHERE order_date = $1::DATE),
               (SELECT sum(net_revenue) FROM published_revenue WHERE order_date = $1::DATE),
               (SELECT sum(amount) - coalesce(sum(amount) FILTER (WHERE status = 'refunded'), 0)
                  FROM orders WHERE order_date = $1::DATE)""", [key])[0]


def save_screenshot(page, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    page.screenshot(path=str(shot))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, SCREENSHOTS / name)
    return shot


# --- tests --------------------------------------------------------------------------------------

def test_unapproved_window_is_refused_before_any_write(ui: DagsterDev):
    # two days of the window the next test's plan will hold, launched before any plan exists
    keys = ["2026-01-03", "2026-01-04"]
    active = query_warehouse(ui.warehouse, "SELECT plan_id FROM backfill_control.plans WHERE phase IN "
                                           "('approved', 'proving', 'proven', 'running', 'reconciled') "
                                           "AND window_start <= DATE '2026-01-04' "
                                           "AND window_end >= DATE '2026-01-03'")
    assert active == [], "precondition: no plan may cover the partitions of this test (run it first)"

    backfill_id = ui.launch_backfill(ASSET, keys, title="no plan")
    state = ui.wait_for_backfill(backfill_id)

    assert state["status"] == "COMPLETED_FAILED"
    assert sorted(state["partitionNames"]) == keys
    runs = ui.backfill_runs(backfill_id)
    assert sorted(r.partition for r in runs) == keys, [(r.partition, r.status) for r in runs]
    for run in runs:
        assert run.status == "FAILURE"
        # the coordinator refused it at submission: it never started, so the asset never ran
        failures = [e.message for e in run.events if e.type == "RUN_FAILURE"]
        assert len(failures) == 1, run.events
        assert failures[0].startswith(GATE_REFUSAL.format(key=run.partition)), failures[0]
        started = {"RUN_START", "STEP_START", "ASSET_MATERIALIZATION", "ASSET_CHECK_EVALUATION"}
        assert started.isdisjoint(run.event_types()), run.event_types()
        assert "backfill_assets/plan" not in run.tags

    # nothing reached the warehouse: no row, no recorded write, no gate result
    assert rows_per_partition(ui, "daily_revenue", keys) == {k: 0 for k in keys}
    assert query_warehouse(ui.warehouse, "SELECT count(*) FROM backfill_control.writes "
                                         "WHERE partition_key = ANY(?)", [keys]) == [(0,)]
    assert query_warehouse(ui.warehouse, "SELECT count(*) FROM backfill_control.gate_results "
                                         "WHERE partition_key = ANY(?)", [keys]) == [(0,)]
    # Dagster planned the 5 checks when it created each run; none was evaluated
    by_partition = {r.partition: r.run_id for r in runs}
    for key in keys:
        for gate in GATES:
            executions = ui.check_executions(ASSET, gate, key)
            assert [(e.status, e.passed, e.run_id) for e in executions] == \
                [("EXECUTION_FAILED", None, by_partition[key])], (key, gate, executions)


def test_approved_plan_proves_runs_and_publishes_through_the_ui(ui: DagsterDev,
                                                               published_plan: PublishedPlan):
    # the proof: two backfills of the proof partition, each one run under the plan, succeeded
    for backfill_id, state in published_plan.proof_backfills:
        assert state["status"] == "COMPLETED_SUCCESS", (backfill_id, state)
        runs = ui.backfill_runs(backfill_id)
        assert [(r.partition, r.status) for r in runs] == [(PROOF, "SUCCESS")]
        assert runs[0].tags["backfill_assets/plan"] == PLAN_ID
    fingerprints = query_warehouse(ui.warehouse, "SELECT fingerprint FROM backfill_control.writes "
                                                 "WHERE plan_id = ? AND partition_key = ? "
                                                 "ORDER BY recorded_at", [PLAN_ID, PROOF])
    assert len(fingerprints) == 2 and fingerprints[0] == fingerprints[1], fingerprints

    # the window: one run per partition, under the plan, at most max_concurrent_partitions at once
    backfill_id, state = published_plan.window_backfill
    assert state["status"] == "COMPLETED_SUCCESS", state
    runs = ui.backfill_runs(backfill_id)
    assert sorted((r.partition, r.status) for r in runs) == [(k, "SUCCESS") for k in REST]
    assert {r.tags["backfill_assets/plan"] for r in runs} == {PLAN_ID}
    assert {r.tags.get("backfill_assets/plan-cap-2") for r in runs} == {PLAN_ID}
    assert max_overlap(runs) <= 2

    # every partition of the window was written: 5 regions a day, figures equal to the source
    assert rows_per_partition(ui, "daily_revenue", WINDOW) == {k: REGIONS for k in WINDOW}
    mismatched = query_warehouse(ui.warehouse, """
        SELECT d.order_date FROM daily_revenue d
        JOIN (SELECT order_date, count(*) AS orders, sum(amount) AS gross FROM orders
              GROUP BY order_date) o USING (order_date)
        GROUP BY d.order_date, o.orders, o.gross
        HAVING sum(d.orders) <> o.orders OR sum(d.gross) <> o.gross""")
    assert mismatched == []

    # the check results per partition, through GraphQL: 5 blocking gates, all passed
    assert ui.asset_checks(ASSET) == {gate: True for gate in GATES}
    for key in WINDOW:
        latest = ui.latest_checks(ASSET, key, GATES)
        for gate, execution in latest.items():
            assert execution is not None, f"no {gate} execution for {key}"
            assert (execution.status, execution.passed, execution.partition) == ("SUCCEEDED", True, key), \
                (gate, key, execution)
            assert execution.metadata["partition"] == key

    # the phases, in order; the sensor (not the CLI) proved, reconciled and published the plan
    transitions = query_warehouse(ui.warehouse, """
        SELECT json_extract_string(payload, '$.to'), actor FROM backfill_control.evidence
        WHERE plan_id = ? AND kind = 'transition' ORDER BY seq""", [PLAN_ID])
    assert [to for to, _ in transitions] == ["approved", "proving", "proven", "running", "reconciled",
                                             "published"]
    assert dict(transitions)["proven"] == "reopen-sensor"
    assert dict(transitions)["reconciled"] == "reopen-sensor"
    assert plan_phase(ui.warehouse, PLAN_ID) == "published"

    # publish reopened: the sensor requested one publish run over the window, and it copied it
    publish_runs = [r for r in ui.runs_with_tag("backfill_assets/plan", PLAN_ID)
                    if "dagster/backfill" not in r.tags]
    assert [r.status for r in publish_runs] == ["SUCCESS"], [(r.tags, r.status) for r in publish_runs]
    publish = publish_runs[0]
    assert publish.tags["dagster/sensor_name"] == "daily_revenue__reopen_publish"
    assert (publish.tags["dagster/asset_partition_range_start"],
            publish.tags["dagster/asset_partition_range_end"]) == (WINDOW[0], WINDOW[-1])
    assert rows_per_partition(ui, "published_revenue", WINDOW) == {k: REGIONS for k in WINDOW}
    differences = query_warehouse(ui.warehouse, """
        SELECT count(*) FROM ((SELECT * FROM daily_revenue EXCEPT ALL SELECT * FROM published_revenue)
                              UNION ALL
                              (SELECT * FROM published_revenue EXCEPT ALL SELECT * FROM daily_revenue))""")
    assert differences == [(0,)]


def test_failed_gate_is_shown_in_the_ui_with_its_figures(ui: DagsterDev, published_plan: PublishedPlan,
                                                        page, tmp_path: Path):
    key = "2026-01-03"
    assert plan_phase(ui.warehouse, PLAN_ID) == "published"  # so the new plan may hold the day
    # a replay re-applies missing rows only; the rows a bad edit changed are left as they are
    approve(ui, complete_plan(plan_id="ui-replay-check", start=key, end=key, proof=(key,),
                              mode="replay", max_concurrent=1))
    with connection(ui.warehouse) as con:
        con.execute("UPDATE daily_revenue SET net_revenue = net_revenue + 10 WHERE order_date = ?", [key])
    target, published, source = net_revenue(ui, key)
    assert target - source == Decimal(10 * REGIONS) and published == source

    backfill_id = ui.launch_backfill(ASSET, [key], title="replay over a corrupted day")
    ui.wait_for_backfill(backfill_id)
    runs = ui.backfill_runs(backfill_id)
    assert [(r.partition, r.status) for r in runs] == [(key, "FAILURE")]
    run = runs[0]
    assert run.tags["backfill_assets/plan"] == "ui-replay-check"
    # the write happened and is recorded, then the blocking gate failed the step
    assert "ASSET_MATERIALIZATION" in run.event_types() and "STEP_FAILURE" in run.event_types()
    assert any("blocking asset check failed" in m and "metrics_match_source" in m
               for m in run.failure_messages), run.failure_messages

    detail = f"net_revenue: target {target:.2f} vs source {source:.2f}"
    latest = ui.latest_checks(ASSET, key, GATES)
    failed = latest["metrics_match_source"]
    assert failed is not None and failed.run_id == run.run_id
    assert (failed.status, failed.passed, failed.partition) == ("FAILED", False, key)
    assert failed.description.startswith(detail + " ("), failed.description
    assert failed.metadata["actual"]["net_revenue"] == float(target)
    assert failed.metadata["expected"]["net_revenue"] == float(source)
    assert failed.metadata["difference"]["net_revenue"] > failed.metadata["threshold"]["net_revenue"]
    others = {g: (e.status, e.run_id) for g, e in latest.items() if g != "metrics_match_source"}
    assert others == {g: ("SUCCEEDED", run.run_id) for g in GATES if g != "metrics_match_source"}
    # consumers keep the last good figures
    assert net_revenue(ui, key)[1] == source

    page.goto(f"{ui.url}/assets/{ASSET}?view=checks&checkDetail=metrics_match_source",
              wait_until="networkidle")
    page.get_by_text("Latest execution").wait_for(timeout=30_000)
    page.get_by_text(detail).first.wait_for(timeout=30_000)
    body = page.inner_text("body")
    assert "metrics_match_source" in body
    latest_section = body[body.index("Latest execution"):]
    assert detail in latest_section
    assert "Failed" in latest_section and key in latest_section
    assert re.search(r"This is a\s+blocking\s+asset check", body), body[:2000]
    # the list of checks beside it: only this gate failed on the latest materialization
    listed = dict(re.findall(rf"({'|'.join(GATES)})\n\1\n(Succeeded|Failed)\n", body))
    assert listed == {g: "Failed" if g == "metrics_match_source" else "Succeeded" for g in GATES}, body[:1500]
    shot = save_screenshot(page, tmp_path, "failed-gate.png")
    assert shot.stat().st_size > 20_000


def test_asset_graph_in_the_ui(ui: DagsterDev, page, tmp_path: Path):
    [location] = ui.location_names()
    page.goto(f"{ui.url}/locations/{location}/asset-groups/revenue", wait_until="networkidle")
    for asset in ("orders", ASSET, "published_revenue"):
        page.get_by_text(asset, exact=True).first.wait_for(timeout=30_000)
    page.get_by_text("Asset checks").first.wait_for(timeout=30_000)
    page.wait_for_timeout(1_000)  # let the graph finish its layout animation
    body = page.inner_text("body")
    assert "revenue" in body and "Asset checks" in body
    shot = save_screenshot(page, tmp_path, "asset-graph.png")
    assert shot.stat().st_size > 20_000

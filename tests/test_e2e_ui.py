"""End to end through the Dagster UI: a real `dagster dev` (webserver, daemon, run workers), its
GraphQL API and Debian's Chromium driven by Playwright.

The home is made the way a user makes it (`backfill init`, `backfill sample`), approvals are SSH
signatures made by the `backfill` command, and every decision is taken by the real processes: the
write-permission run coordinator in the daemon, the target asset in the run workers, the reopen
sensor in the daemon. The tests read the result through GraphQL, the warehouse and the browser.

One `dagster dev` serves the module; each test builds its own plan over its own partitions, so any
test passes alone. The slow scenarios (they wait for the daemon's 30-second backfill ticks and for
the sensor's, every 5 s here) start in threads as soon as the server is up, for the selected tests
only, so their waits overlap.
Screenshots go to a temp folder, or to $BACKFILL_SCREENSHOTS (`make screenshots`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import expect

from backfill_assets.gates.results import GATE_NAMES, METRICS_MATCH_SOURCE
from tests.e2e_browser import (
    UI_TIMEOUT_MS,
    chromium,
    launch_range_from_materialize_dialog,
    open_asset_from_catalog,
    save_screenshot,
    screenshot_folder,
)
from tests.e2e_support import (
    RUN_DONE,
    Background,
    DagsterDev,
    RunInfo,
    commands_forked_from,
    dagster_dev,
    execute_in_warehouse,
    plan_phase,
    query_warehouse,
    row_fingerprints,
    run_backfill_cli,
    wait_until,
    write_history,
)
from tests.plans import complete_plan, write_plan
from tests.world import make_keys, signers_text

# one worker runs the module, so its tests share one `dagster dev` (`make test`: pytest -n with --dist
# loadscope; pytest 9.2 ignores the group mark, which older ones honour under --dist loadgroup)
pytestmark = pytest.mark.xdist_group("e2e")
WHOLE_MODULE_ON_ONE_WORKER = ("loadscope", "loadfile", "loadgroup")

ASSET = "daily_revenue"
PUBLISHED = "published_revenue"
SENSOR = "daily_revenue__reopen_publish"
PLAN_STATE = "backfill_assets/plans"
REGIONS = 5  # `backfill sample` writes orders for 5 regions a day: 5 rows per partition
SAMPLE_DAYS, ROWS_PER_DAY = 10, 200  # 2026-01-01..2026-01-10
HISTORY = ("2026-01-07", "2026-01-10")  # written plan-free before the server starts

REFUSAL = ("Refused by the backfill write permission: no approved replay plan covers partitions "
           "{first}..{last} of daily_revenue, and {first} holds 5 row(s): rewriting it is a replay")
PLAN_COLUMNS = ("plan", "phase", "window", "approvals", "gates", "publish", "next step")  # at least these


# --- fixtures -----------------------------------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def _commands_forked(cli_server) -> Iterator[None]:
    """The module's `backfill` commands fork from the worker's CLI server (before `ui` starts)."""
    with commands_forked_from(cli_server):
        yield


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DagsterDev]:
    tmp = tmp_path_factory.mktemp("e2e-ui")

    def prepare(backfill_home: Path, dagster_home: Path) -> None:
        run_backfill_cli("sample", "--days", str(SAMPLE_DAYS), "--rows-per-day", str(ROWS_PER_DAY),
                         backfill_home=backfill_home)
        write_history(backfill_home, dagster_home, *HISTORY)

    with dagster_dev(tmp, prepare=prepare) as server:
        yield server


@dataclass(frozen=True)
class Team:
    """A team's repository: plans/ and the reviewed approvers/allowed_signers, and each approver's key."""

    root: Path
    keys: dict[str, Path]

    def approve(self, ui: DagsterDev, document: dict, *who: str) -> Path:
        path = write_plan(self.root / "plans" / f"{document['plan_id']}.yaml", document)
        for name in ("olivia", *(who or ("alice", "bob"))):  # the owner signs too
            run_backfill_cli("plan", "approve", str(path), "--by", name, "--key", str(self.keys[name]),
                             backfill_home=ui.backfill_home, cwd=self.root)
        assert plan_phase(ui.warehouse, document["plan_id"]) == "approved"
        return path

    def cli(self, ui: DagsterDev, *args: str, exit_code: int | None = 0):
        return run_backfill_cli(*args, backfill_home=ui.backfill_home, cwd=self.root, expect=exit_code)


@pytest.fixture(scope="module")
def team(ui: DagsterDev) -> Team:
    root = ui.backfill_home.parent / "repo"
    keys = make_keys(root / "keys")
    signers = root / "approvers" / "allowed_signers"
    signers.parent.mkdir(parents=True, exist_ok=True)
    signers.write_text(signers_text(keys))
    run_backfill_cli("init", "--allowed-signers", str(signers), backfill_home=ui.backfill_home, cwd=root)
    return Team(root, keys)


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return screenshot_folder(tmp_path_factory.mktemp("screenshots"))


@pytest.fixture
def page(browser, ui: DagsterDev):
    ui.set_nux_seen()  # what "Skip" on the UI's first-visit community dialog records
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    context.set_default_timeout(UI_TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


# --- helpers ------------------------------------------------------------------------------------

def days(first: int, last: int) -> list[str]:
    return [f"2026-01-{d:02d}" for d in range(first, last + 1)]


def keys_of(run: RunInfo, keys: list[str]) -> list[str]:
    first, last = run.span or ("", "")
    return [k for k in keys if first <= k <= last]


def count_rows(ui: DagsterDev, table: str, keys: list[str]) -> int:
    return query_warehouse(ui.warehouse, f"SELECT count(*) FROM backfill_control.{table} "
                                         "WHERE partition_key = ANY(?)", [keys])[0][0]


def plan_table(markdown: str) -> dict[str, dict[str, str]]:
    """The sensor's plan-state markdown table: plan id -> column -> cell."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    if len(lines) < 2:
        return {}
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert set(PLAN_COLUMNS) <= set(head), head
    rows = [dict(zip(head, (c.strip() for c in line.strip("|").split("|")), strict=True))
            for line in lines[2:]]
    return {row["plan"]: row for row in rows}


def describe_plan(ui: DagsterDev, plan_id: str):
    def describe() -> str:
        runs = ui.runs_with_tag("backfill_assets/plan", plan_id)
        lines = [f"plan {plan_id} phase {plan_phase(ui.warehouse, plan_id)}"]
        lines += [f"  run {r.run_id[:8]} {r.span} {r.status} {r.failure_messages[:1]}" for r in runs]
        return "\n".join(lines) + f"\n--- dagster dev log ---\n{ui.log_tail(30)}"

    return describe


# --- the slow scenarios, started early -----------------------------------------------------------

@dataclass(frozen=True)
class WindowRun:
    plan_id: str
    window: list[str]
    proof_output: str
    backfill_id: str
    backfill_status: str
    runs: list[RunInfo]
    publish_runs: list[RunInfo]


def run_window_through_the_ui(ui: DagsterDev, team: Team) -> WindowRun:
    """An approved plan (2 partitions a run), its proof by the CLI, then the window as a UI backfill
    and nothing else: the daemon submits the runs, the coordinator admits them under the plan, the
    reopen sensor reconciles the plan and requests the publish run."""
    plan_id, window = "ui-window", days(1, 4)
    team.approve(ui, complete_plan(plan_id=plan_id, start=window[0], end=window[-1], proof=("2026-01-02",),
                                   per_run=2))
    proved = team.cli(ui, "run", plan_id, "--proof")
    backfill_id = ui.launch_backfill(ASSET, window, title=f"{plan_id} window")
    runs = ui.wait_for_backfill_runs(backfill_id, window)
    wait_until(lambda: plan_phase(ui.warehouse, plan_id) == "published", timeout=180,
               what=f"the reopen sensor to reconcile {plan_id} and its publish run to publish it",
               describe=describe_plan(ui, plan_id))

    def publish_runs() -> list[RunInfo] | None:  # the run commits "published", then reports its success
        found = [r for r in ui.runs_with_tag("backfill_assets/plan", plan_id)
                 if r.tags.get("dagster/sensor_name")]
        return found if found and all(r.status in RUN_DONE for r in found) else None

    published = wait_until(publish_runs, timeout=60, what="the publish run to end",
                           describe=describe_plan(ui, plan_id))
    state = wait_until(lambda: (s := ui.backfill(backfill_id))["status"] != "REQUESTED" and s, timeout=60,
                       what=f"the daemon to close backfill {backfill_id}")
    return WindowRun(plan_id, window, proved.stdout, backfill_id, state["status"], runs, published)


@dataclass(frozen=True)
class FailedProof:
    plan_id: str
    key: str
    output: str


def fail_a_proof_on_a_bad_edit(ui: DagsterDev, team: Team) -> FailedProof:
    """A bad hand edit of a written partition, then a replay plan over it: a replay re-applies missing
    rows only, so the edit stays and the metrics gate of the proof fails."""
    plan_id, key = "ui-replay-check", "2026-01-09"  # written plan-free before the server started
    execute_in_warehouse(ui.backfill_home, "UPDATE daily_revenue SET net_revenue = net_revenue + 10 "
                                           "WHERE order_date = ?", [key])
    team.approve(ui, complete_plan(plan_id=plan_id, start=key, end=key, proof=(key,), mode="replay"))
    proof = team.cli(ui, "run", plan_id, "--proof", exit_code=1)
    return FailedProof(plan_id, key, proof.stdout + proof.stderr)


def _started(what: str, work) -> Iterator[Background]:
    started = Background(what, work)
    yield started
    started.wait(timeout=300)  # never leave it running against a stopped server


@pytest.fixture(scope="module")
def window_run(ui: DagsterDev, team: Team) -> Iterator[Background[WindowRun]]:
    yield from _started("the window of an approved plan through the UI",
                        lambda: run_window_through_the_ui(ui, team))


@pytest.fixture(scope="module")
def failed_proof(ui: DagsterDev, team: Team) -> Iterator[Background[FailedProof]]:
    yield from _started("a failed proof", lambda: fail_a_proof_on_a_bad_edit(ui, team))


SCENARIOS = ("window_run", "failed_proof")


@pytest.fixture(scope="module", autouse=True)
def _start_selected_scenarios_early(request: pytest.FixtureRequest) -> None:
    """Start now the scenarios that the tests selected in this module will ask for. An xdist worker
    knows it runs them all only when the module is one unit of work; under any other distribution
    each test starts its own."""
    if os.environ.get("PYTEST_XDIST_WORKER") and \
            request.config.getoption("dist", None) not in WHOLE_MODULE_ON_ONE_WORKER:
        return
    wanted = {name for item in request.session.items if item.module is request.module
              for name in getattr(item, "fixturenames", ())}
    for name in SCENARIOS:
        if name in wanted:
            request.getfixturevalue(name)


# --- tests --------------------------------------------------------------------------------------

def test_a_backfill_launched_in_the_ui_dialog_over_written_partitions_is_refused_before_it_writes(
        ui: DagsterDev, page, screenshots: Path):
    keys = days(7, 8)  # written plan-free before the server started; no plan covers them
    before = row_fingerprints(ui.backfill_home, ASSET, keys)
    assert [f.rows for f in before.values()] == [REGIONS, REGIONS]
    writes, results = count_rows(ui, "writes", keys), count_rows(ui, "gate_results", keys)

    # Catalog -> daily_revenue -> Materialize… -> the partitions dialog -> Launch backfill
    open_asset_from_catalog(page, ui.url, ASSET)
    launched = launch_range_from_materialize_dialog(page, ASSET, keys[0], keys[-1], count=len(keys),
                                                    screenshot=screenshots / "ui-backfill-dialog.png")
    assert launched.params["partitionNames"] == keys
    assert launched.params["assetSelection"] == [{"path": [ASSET]}]
    assert {t["key"] for t in launched.params["tags"]} == {"dagster/from_ui"}

    # the daemon submits the backfill's run(s); the coordinator fails each before it starts
    runs = ui.wait_for_backfill_runs(launched.backfill_id, keys)
    assert sorted(k for r in runs for k in keys_of(r, keys)) == keys
    for run in runs:
        assert run.status == "FAILURE", (run.span, run.status)
        failures = [e.message for e in run.events if e.type == "RUN_FAILURE"]
        assert len(failures) == 1, run.events
        assert failures[0].startswith(REFUSAL.format(first=run.span[0], last=run.span[1])), failures[0]
        assert "backfill plan new" in failures[0]  # the way forward
        started = {"RUN_START", "STEP_START", "ASSET_MATERIALIZATION", "ASSET_CHECK_EVALUATION"}
        assert started.isdisjoint(run.event_types()), run.event_types()
        assert "backfill_assets/plan" not in run.tags

    # nothing reached the warehouse: the same rows, byte for byte; no recorded write or gate result
    assert row_fingerprints(ui.backfill_home, ASSET, keys) == before
    assert (count_rows(ui, "writes", keys), count_rows(ui, "gate_results", keys)) == (writes, results)
    # Dagster planned every gate of every partition when it created the run; none was evaluated
    refused = {r.run_id for r in runs}
    for key in keys:
        for gate, execution in ui.latest_checks(ASSET, key, GATE_NAMES).items():
            assert execution is not None and (execution.status, execution.run_id in refused) == \
                ("EXECUTION_FAILED", True), (key, gate, execution)

    # the run's page says why
    message = next(e.message for e in runs[0].events if e.type == "RUN_FAILURE")
    page.goto(f"{ui.url}/runs/{runs[0].run_id}")
    refusal = page.get_by_text(re.compile(r"^Refused by the backfill write permission")).first
    expect(refusal).to_be_visible(timeout=UI_TIMEOUT_MS)
    assert " ".join(refusal.inner_text().split()) == " ".join(message.split())
    expect(page.get_by_text("RUN_FAILURE", exact=True).first).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_text("Failure", exact=True).first).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_role("link", name=launched.backfill_id)).to_be_visible(timeout=UI_TIMEOUT_MS)
    save_screenshot(page, screenshots, "refused-backfill-run.png")


def test_a_failed_gate_and_the_plan_state_show_in_the_ui(
        ui: DagsterDev, failed_proof: Background[FailedProof], page, screenshots: Path):
    failed_run = failed_proof.result()
    plan_id, key = failed_run.plan_id, failed_run.key
    assert f"{key}: {METRICS_MATCH_SOURCE} failed" in failed_run.output, failed_run.output
    assert plan_phase(ui.warehouse, plan_id) == "proving"

    # the failed gate's figures are numeric metadata of its check execution, for that partition
    [failed] = ui.check_executions(ASSET, METRICS_MATCH_SOURCE, key, limit=1)
    assert (failed.status, failed.passed, failed.partition) == ("FAILED", False, key), failed
    figures = {k: v for k, v in failed.metadata.items() if k.startswith("figure.")}
    assert figures["figure.net_revenue.difference"] == pytest.approx(10.0 * REGIONS)
    assert figures["figure.net_revenue.actual"] - figures["figure.net_revenue.expected"] == \
        pytest.approx(10.0 * REGIONS)
    assert figures["figure.net_revenue.groups_differing"] == REGIONS
    assert figures["figure.orders.difference"] == 0.0
    assert all(isinstance(v, float) for v in figures.values()), figures
    assert failed.description.startswith(f"net_revenue differs in {REGIONS} group(s)"), failed.description
    others = ui.latest_checks(ASSET, key, [g for g in GATE_NAMES if g != METRICS_MATCH_SOURCE])
    assert {g: (e.status, e.run_id) for g, e in others.items()} == \
        dict.fromkeys(others, ("SUCCEEDED", failed.run_id))

    # ... and in the UI: the check's execution history (newest first, one row an execution), the
    # failed row of that partition, its metadata
    page.goto(f"{ui.url}/assets/{ASSET}?view=checks&checkDetail={METRICS_MATCH_SOURCE}")
    page.get_by_role("tab", name="Execution history").click()
    row = page.get_by_role("row").filter(has_text=key).filter(has_text="Failed")
    row.first.wait_for()
    assert row.count() == 1
    assert failed.description[:60] in " ".join(row.inner_text().split())
    row.get_by_role("button").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("figure.net_revenue.difference", exact=True).wait_for()
    shown = {" ".join(r.split()[:1]): " ".join(r.split()[1:])
             for r in dialog.get_by_role("row").all_inner_texts()}
    assert shown["figure.net_revenue.difference"] == "50"
    for figure in ("figure.net_revenue.actual", "figure.net_revenue.expected"):
        assert float(shown[figure]) == pytest.approx(figures[figure])
    assert shown["detail"] == " ".join(failed.description.split())
    save_screenshot(page, screenshots, "failed-gate.png")
    dialog.get_by_role("button", name="Close").click()

    # the Checks list agrees with the partition (issue 24: it had said "Skipped" for every gate).
    # A check is listed Failed when any partition's latest evaluation failed: after this module's
    # earlier runs (refused ones among them) every gate is; this test alone, only this one
    page.goto(f"{ui.url}/assets/{ASSET}?view=checks")
    page.get_by_text(METRICS_MATCH_SOURCE).first.wait_for()
    page.get_by_text("Failed").first.wait_for()
    listed = " ".join(page.locator("body").inner_text().split())
    assert f"{METRICS_MATCH_SOURCE} Failed" in listed and "Skipped" not in listed, listed
    save_screenshot(page, screenshots, "checks-list.png")

    # the reopen sensor records the plans' state on the asset: a markdown table, one row a plan
    def observed() -> dict[str, str] | None:
        for observation in ui.observations(ASSET, limit=3):
            row = plan_table(observation.metadata.get(PLAN_STATE) or "").get(plan_id)
            # settled: the failed proof's process has let go of the plan (while it still holds it,
            # a tick records "wait: backfill run ... is running it")
            if row is not None and row["phase"] == "proving" and "1 failed" in row["gates"] \
                    and not row["next step"].startswith("wait:"):
                return row
        return None

    row = wait_until(observed, timeout=150, what=f"the reopen sensor to record {plan_id} on {ASSET}",
                     describe=describe_plan(ui, plan_id))
    assert row["window"] == f"{key}..{key} (1)"
    assert row["approvals"] == "olivia (owner), alice, bob"
    assert row["gates"] == "0/1 passed, 1 failed"
    assert row["publish"].startswith("frozen")
    assert f"`backfill run {plan_id} --proof`" in row["next step"]

    # in the browser: the asset's page, Events, the newest observation: the table, rendered
    open_asset_from_catalog(page, ui.url, ASSET)
    page.get_by_role("tab", name="Events").click()
    observations = page.locator("div[data-index]").filter(
        has=page.get_by_role("img", name="observation", exact=True))
    observations.first.click()
    page.get_by_text(PLAN_STATE, exact=True).first.wait_for()
    header = page.locator("tr:not(:has(tr))", has_text="next step").first.locator("th").all_inner_texts()
    plan_row = page.locator("tr:not(:has(tr))", has_text=plan_id).first
    cells = [" ".join(c.split()) for c in plan_row.locator("td").all_inner_texts()]
    shown = dict(zip((h.strip() for h in header), cells, strict=True))
    assert {c: shown.get(c) for c in PLAN_COLUMNS} == {
        "plan": plan_id, "phase": "proving", "window": row["window"], "approvals": "olivia (owner), alice, bob",
        "gates": "0/1 passed, 1 failed", "publish": row["publish"],
        "next step": row["next step"].replace("`", "")}
    save_screenshot(page, screenshots, "plan-state.png")


def test_the_asset_graph_shows_the_replayable_table_between_its_source_and_its_publish(
        ui: DagsterDev, page, screenshots: Path):
    [location] = ui.location_names()
    page.goto(f"{ui.url}/locations/{location}/asset-groups/revenue")
    for asset in ("orders", ASSET, PUBLISHED):
        page.get_by_text(asset, exact=True).first.wait_for()
    # the target's node counts its 8 gates (blocking asset checks) and its partitions
    node = page.locator("div").filter(has=page.get_by_text(ASSET, exact=True)).filter(
        has_text="Asset checks").last
    expect(node).to_contain_text(re.compile(rf"Asset checks\s*\d+ / {len(GATE_NAMES)} Passed"),
                                 timeout=UI_TIMEOUT_MS)
    expect(node).to_contain_text(re.compile(r"\d+ partitions"), timeout=UI_TIMEOUT_MS)
    page.wait_for_timeout(1_000)  # the graph animates its layout
    save_screenshot(page, screenshots, "asset-graph.png")


def test_an_approved_plan_runs_from_the_ui_in_ranges_and_the_sensor_publishes_it(
        ui: DagsterDev, window_run: Background[WindowRun]):
    done = window_run.result()
    plan_id, window, runs = done.plan_id, done.window, done.runs
    assert "proof passed" in done.proof_output, done.proof_output

    # the window's runs: ranged, admitted under the plan (tagged with it and its run cap), succeeded
    assert [r.status for r in runs] == ["SUCCESS"] * len(runs), ui.describe_backfill(done.backfill_id)
    assert all("dagster/partition" not in r.tags and r.span for r in runs)  # range runs
    assert {r.tags["backfill_assets/plan"] for r in runs} == {plan_id}
    assert {r.tags.get("backfill_assets/plan-cap-1") for r in runs} == {plan_id}
    assert sorted(k for r in runs for k in keys_of(r, window)) == window
    assert done.backfill_status == "COMPLETED_SUCCESS"

    # each partition has its own check results, from the run that wrote it: every gate passed
    run_of = {k: r.run_id for r in runs for k in keys_of(r, window)}
    assert ui.asset_checks(ASSET) == dict.fromkeys(GATE_NAMES, True)  # all blocking
    for key in window:
        for gate, execution in ui.latest_checks(ASSET, key, GATE_NAMES).items():
            assert execution is not None, f"no {gate} execution for {key}"
            assert (execution.status, execution.passed, execution.partition, execution.run_id) == \
                ("SUCCEEDED", True, key, run_of[key]), (gate, key, execution)
            assert any(label.startswith("figure.") for label in execution.metadata), execution.metadata

    # the sensor (not the CLI) reconciled the plan and requested one publish run over the window
    transitions = query_warehouse(ui.warehouse, """
        SELECT json_extract_string(payload, '$.to'), actor FROM backfill_control.evidence
        WHERE plan_id = ? AND kind = 'transition' ORDER BY seq""", [plan_id])
    assert [to for to, _ in transitions] == ["approved", "proving", "proven", "running", "reconciled",
                                             "published"]
    assert dict(transitions)["reconciled"] == "reopen-sensor"
    assert dict(transitions)["published"].endswith("launched by reopen-sensor")
    [publish] = done.publish_runs
    assert publish.status == "SUCCESS" and publish.tags["dagster/sensor_name"] == SENSOR
    assert (publish.tags["dagster/asset_partition_range_start"],
            publish.tags["dagster/asset_partition_range_end"]) == (window[0], window[-1])
    # published_revenue holds exactly the rows that were checked
    written = row_fingerprints(ui.backfill_home, ASSET, window)
    assert [f.rows for f in written.values()] == [REGIONS] * len(window)
    assert row_fingerprints(ui.backfill_home, PUBLISHED, window) == written

    # a UI backfill runs ranges by the target's backfill policy (30 partitions a run in the demo),
    # not one run per partition; the plan's per_run applies to `backfill run`
    spans = sorted(r.span for r in runs)
    assert spans == [(window[0], window[-1])], f"the UI backfill ran {spans}"

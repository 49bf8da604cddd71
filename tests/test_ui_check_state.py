"""What Dagster's UI shows of a range run's gates, read back through its GraphQL API (issue 24).

The asset's Checks list aggregates each partitioned check over `partitionStatuses` (any failed
partition: "Failed"), and each check's partition bar counts them; Dagster counts a partition's
evaluation there only when it names the partition's latest materialization as its target. A range
run logs its evaluations itself (log_check_evaluations), so they must carry that target as a
yielded AssetCheckResult does; without it the failed partitions vanished from both while the
partition's own detail (`assetCheckExecutions`) said Failed."""

from __future__ import annotations

import dataclasses

from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster_graphql.test.utils import execute_dagster_graphql

from backfill_assets.demo.revenue import BUGGY_SELECT
from backfill_assets.gates.results import GATE_NAMES, METRICS_MATCH_SOURCE, UNCHANGED_SINCE_CHECKED
from tests.test_publish_and_sensor import reconciled_plan
from tests.world import FIXED, failure_text, keys

UNFIXED = dataclasses.replace(FIXED, select_sql=BUGGY_SELECT)  # fails metrics_match_source

# the fields of the asset's Checks tab (ui-core AssetChecksQuery) and of a partition's detail
CHECKS = """query ($asset: AssetKeyInput!) {
  assetNodeOrError(assetKey: $asset) { ... on AssetNode { assetChecksOrError { ... on AssetChecks {
    checks { name
      executionForLatestMaterialization { runId status partition evaluation { success partition
                                          targetMaterialization { runId } } }
      partitionStatuses { ... on AssetCheckTimePartitionStatuses { ranges { startKey endKey status } } } } } } } } }"""
DETAIL = """query ($asset: AssetKeyInput!, $check: String!, $partition: String) {
  assetCheckExecutions(assetKey: $asset, checkName: $check, partition: $partition, limit: 1) {
    runId status partition evaluation { success } } }"""
ASSET = {"path": ["daily_revenue"]}


def _ui(world, spec):
    """A request context of the webserver over the world's instance and definitions, in process."""
    defs = world.root / "ui_defs.py"
    defs.write_text("from backfill_assets.demo.definitions import build_definitions\n"
                    "from backfill_assets.table import TableSpec\n"
                    f"defs = build_definitions(TableSpec.from_json({spec.to_json()!r}), home={str(world.home)!r})\n")
    origin = InProcessCodeLocationOrigin(LoadableTargetOrigin(python_file=str(defs), attribute="defs"),
                                         location_name="ui")
    return WorkspaceProcessContext(world.instance, InProcessWorkspaceLoadTarget(origin))


def _statuses(check) -> dict[str, str]:
    """partition -> status, from the check's compressed time ranges."""
    ranges = (check["partitionStatuses"] or {}).get("ranges", [])
    all_keys = keys(1, 8)
    return {k: r["status"] for r in ranges for k in all_keys if r["startKey"] <= k <= r["endKey"]}


def test_the_checks_list_and_partition_bar_agree_with_the_partition_detail_after_a_failed_range_run(world):
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0  # one partition: the checks are yielded results
    world.approve_for(path, UNFIXED)
    wrong = world.plan_run("fix", keys(3, 4), spec=UNFIXED)  # a range run: the checks are logged
    assert not wrong.success and "metrics_match_source" in failure_text(wrong)

    with _ui(world, UNFIXED) as process:
        context = process.create_request_context()
        node = execute_dagster_graphql(context, CHECKS, {"asset": ASSET}).data["assetNodeOrError"]
        checks = {c["name"]: c for c in node["assetChecksOrError"]["checks"]}
        detail = {k: execute_dagster_graphql(context, DETAIL, {"asset": ASSET, "check": METRICS_MATCH_SOURCE,
                                                                 "partition": k}).data["assetCheckExecutions"]
                  for k in keys(2, 4)}

    assert set(checks) == set(GATE_NAMES)
    # the partition's detail: the range run's evaluation, failed
    for key in keys(3, 4):
        [latest] = detail[key]
        assert (latest["runId"], latest["status"], latest["evaluation"]["success"]) == (wrong.run_id, "FAILED", False)
    # the partition bar and the Checks list say the same, partition by partition
    expected = {keys(2, 2)[0]: "SUCCEEDED", **dict.fromkeys(keys(3, 4), "FAILED")}
    assert _statuses(checks[METRICS_MATCH_SOURCE]) == expected
    for name in set(GATE_NAMES) - {METRICS_MATCH_SOURCE}:
        assert _statuses(checks[name]) == dict.fromkeys(keys(2, 4), "SUCCEEDED"), name
    latest = checks[METRICS_MATCH_SOURCE]["executionForLatestMaterialization"]
    assert (latest["runId"], latest["status"]) == (wrong.run_id, "FAILED")
    assert latest["evaluation"]["targetMaterialization"] == {"runId": wrong.run_id}


def test_a_publish_refused_for_a_changed_partition_shows_as_a_failed_check_on_that_partition(world):
    """The publish asset records the refusal on the target's unchanged_since_checked check of the
    changed partition: the check's partition bar shows it failed, the other partitions as judged."""
    reconciled_plan(world)
    world.run_sql("UPDATE daily_revenue SET net_revenue = net_revenue + 1 WHERE order_date = '2026-01-03'")
    refused = world.publish(keys(1, 4))
    assert not refused.success and "changed since its gates checked it" in failure_text(refused)

    with _ui(world, FIXED) as process:
        node = execute_dagster_graphql(process.create_request_context(), CHECKS,
                                       {"asset": ASSET}).data["assetNodeOrError"]
    checks = {c["name"]: c for c in node["assetChecksOrError"]["checks"]}
    assert _statuses(checks[UNCHANGED_SINCE_CHECKED]) == {**dict.fromkeys(keys(1, 4), "SUCCEEDED"),
                                                          "2026-01-03": "FAILED"}
    latest = checks[UNCHANGED_SINCE_CHECKED]["executionForLatestMaterialization"]
    assert (latest["runId"], latest["status"], latest["partition"]) == (refused.run_id, "FAILED", "2026-01-03")


def _unchanged_statuses(world, spec=FIXED) -> dict[str, str]:
    with _ui(world, spec) as process:
        node = execute_dagster_graphql(process.create_request_context(), CHECKS,
                                       {"asset": ASSET}).data["assetNodeOrError"]
    return _statuses({c["name"]: c for c in node["assetChecksOrError"]["checks"]}[UNCHANGED_SINCE_CHECKED])


def test_a_cli_publish_refused_for_a_changed_partition_shows_as_a_failed_check_on_that_partition(world):
    """`backfill publish` refuses a partition edited since its gates ran before it launches its run,
    and records a failed unchanged_since_checked in the ledger: the UI kept showing the check passed
    there (found by an attack). It shows it failed, as when the publish run refuses."""
    reconciled_plan(world)
    world.run_sql("UPDATE daily_revenue SET net_revenue = net_revenue + 1 WHERE order_date = '2026-01-03'")
    assert world.cli("publish", "fix") == 1
    assert _unchanged_statuses(world) == {**dict.fromkeys(keys(1, 4), "SUCCEEDED"), "2026-01-03": "FAILED"}


def test_a_cli_reconcile_shows_the_gates_last_word_on_each_partition(world):
    """A partition edited by hand after the plan reconciled: `backfill reconcile` fails its gates
    and the plan goes back to running, while the UI kept every check passed there (found by an
    attack). It shows what the reconcile found; the edit undone, the next reconcile shows them passed."""
    reconciled_plan(world)
    edit = "UPDATE daily_revenue SET net_revenue = net_revenue {} 1 WHERE order_date = '2026-01-03'"
    world.run_sql(edit.format("+"))
    assert world.cli("reconcile", "fix") == 1 and world.phase() == "running"
    assert _unchanged_statuses(world) == {**dict.fromkeys(keys(1, 4), "SUCCEEDED"), "2026-01-03": "FAILED"}
    world.run_sql(edit.format("-"))
    assert world.cli("reconcile", "fix") == 0
    assert _unchanged_statuses(world) == dict.fromkeys(keys(1, 4), "SUCCEEDED")


def _check_statuses(world) -> dict[str, dict[str, str]]:
    """check -> partition -> status, as the asset's Checks tab and partition bars show them."""
    with _ui(world, FIXED) as process:
        node = execute_dagster_graphql(process.create_request_context(), CHECKS,
                                       {"asset": ASSET}).data["assetNodeOrError"]
    return {c["name"]: _statuses(c) for c in node["assetChecksOrError"]["checks"]}


def test_reconciling_an_older_plan_never_fails_the_check_of_a_newer_plans_write(world):
    """Plan fix was published and closed; late orders for 2026-01-03; plan fix2 rewrote 01-03..04
    and every gate passed. Re-checking fix, `backfill reconcile fix` fails fix's own write of 01-03
    (no longer what the table holds): that verdict, shown on the partition's latest materialization
    (fix2's), failed the check of a write whose gates passed (found by an attack). Only the verdicts
    of writes the table still holds are shown."""
    reconciled_plan(world)
    assert world.cli("publish", "fix") == 0 and world.cli("plan", "close", "fix") == 0
    world.run_sql("INSERT INTO orders SELECT order_id + 5000000, customer_id, region, order_ts, order_date, "
                  "amount + 500, status FROM orders WHERE order_date = ? AND status <> 'refunded' "
                  "ORDER BY order_id LIMIT 3", ["2026-01-03"])
    world.approved_plan("fix2", start="2026-01-03", end="2026-01-04", proof=("2026-01-03",))
    assert world.cli("run", "fix2", "--proof") == 0 and world.cli("run", "fix2") == 0
    assert world.cli("reconcile", "fix") == 1  # fix's write of 01-03 is no longer what the table holds
    shown = _check_statuses(world)
    assert {name: by_key.get("2026-01-03") for name, by_key in shown.items()} == dict.fromkeys(shown, "SUCCEEDED")


def test_after_a_later_plan_is_rolled_back_a_reconcile_shows_the_restored_writes_verdict(world):
    """fix wrote 2026-01-01..04, was published and closed; fix2 re-ran 01-03 with a release that
    fails metrics_match_source there (the UI: FAILED) and was rolled back, so the table holds fix's
    bytes of 01-03 again. `backfill reconcile fix` passes every gate on them, but the UI kept fix2's
    failed verdict: the ledger's latest write is still fix2's (a rollback writes none), and only
    the latest write's verdicts were shown (found by an attack). A write whose bytes the table
    holds is shown too."""
    reconciled_plan(world)
    assert world.cli("publish", "fix") == 0 and world.cli("plan", "close", "fix") == 0
    path = world.approved_plan("fix2", start="2026-01-03", end="2026-01-04", proof=("2026-01-03",))
    world.approve_for(path, UNFIXED)
    assert not world.plan_run("fix2", ["2026-01-03"], spec=UNFIXED).success
    assert world.cli("rollback", "fix2") == 0
    assert _check_statuses(world)[METRICS_MATCH_SOURCE].get("2026-01-03") == "FAILED"
    assert world.cli("reconcile", "fix") == 0
    shown = _check_statuses(world)
    assert {name: by_key.get("2026-01-03") for name, by_key in shown.items()} == dict.fromkeys(shown, "SUCCEEDED")


def test_reconciling_an_earlier_plan_never_shows_its_verdicts_on_a_later_plans_identical_write(world, capsys):
    """fix (a loose, signed tolerance on net_revenue) wrote 2026-01-01..04 with the release
    UNFIXED, passed, was published and closed; fix2 (exact metrics) re-ran 01-03 with the same
    release: identical bytes, and its metrics_match_source failed. `backfill reconcile fix` passed
    under fix's loose threshold and, the table holding fix's bytes, showed fix's verdicts on 01-03:
    the UI turned green on a write whose own gates failed (found by an attack). The bytes of a
    later write, identical or not, carry that write's verdicts."""
    import json

    from tests.plans import complete_plan, edited, write_plan

    loose = edited(complete_plan(plan_id="fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",)),
                   gates__metrics=[{"name": "net_revenue", "tolerance_pct": 100}, {"name": "orders"}])
    path = write_plan(world.root / "plans" / "fix.yaml", loose)
    world.approve_for(path, UNFIXED)
    defs = str(world.defs_file(UNFIXED))
    for step in (("run", "fix", "--proof"), ("run", "fix"), ("publish", "fix")):
        assert world.cli(*step, "--defs", defs) == 0
    assert world.cli("plan", "close", "fix") == 0
    before = world.fingerprints("daily_revenue", ["2026-01-03"])
    world.approve_for(world.plan("fix2", start="2026-01-03", end="2026-01-04", proof=("2026-01-03",)), UNFIXED)
    assert not world.plan_run("fix2", ["2026-01-03"], spec=UNFIXED).success
    assert world.fingerprints("daily_revenue", ["2026-01-03"]) == before  # identical bytes
    assert world.cli("reconcile", "fix", "--defs", defs) == 0
    capsys.readouterr()
    world.cli("status", "fix2", "--json")
    assert json.loads(capsys.readouterr().out)["failed"] == {"2026-01-03": [METRICS_MATCH_SOURCE]}
    assert _check_statuses(world)[METRICS_MATCH_SOURCE].get("2026-01-03") == "FAILED"

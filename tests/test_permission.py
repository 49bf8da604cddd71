"""The write permission on every execution path, with a real Dagster instance and DuckDB file.

The data decides, not the run's tags: a partition that holds rows, or was ever written, is written
only under an approved plan that covers it; one never written loads without a plan, whoever
launched the run (the schedule, a UI backfill, `backfill load`).
"""

from __future__ import annotations

import dataclasses

import dagster as dg
import yaml

from backfill_assets.demo.definitions import PARTITIONS
from backfill_assets.demo.definitions import defs as demo_defs
from backfill_assets.gates.results import GATE_NAMES
from backfill_assets.permission import PLAN_TAG
from backfill_assets.tags import BACKFILL_TAG
from tests.world import BUGGY, FIXED, failure_text, keys, per_partition


def test_definitions_load_with_stable_asset_and_check_keys():
    graph = demo_defs.resolve_asset_graph()
    assert sorted(k.to_user_string() for k in graph.get_all_asset_keys()) == [
        "daily_revenue", "monthly_revenue", "orders", "published_monthly_revenue", "published_revenue",
        "revenue_report"]
    assert sorted(c.to_user_string() for c in graph.asset_check_keys) == sorted(
        f"{table}:{name}" for table in ("daily_revenue", "monthly_revenue") for name in GATE_NAMES)
    assert demo_defs.resolve_sensor_def("daily_revenue__reopen_publish") is not None
    assert demo_defs.resolve_sensor_def("monthly_revenue__reopen_publish") is not None
    assert demo_defs.resolve_sensor_def("backfill_notice_relay") is not None


def test_ui_materialize_of_an_old_partition_is_refused_whatever_its_tags(world):
    assert world.materialize(keys(1, 3), spec=BUGGY).success  # plan-free: empty partitions
    before = world.fingerprints("daily_revenue", keys(1, 3))
    watermark = world.sql("SELECT partition_key FROM backfill_control.watermarks")
    for tags in ({"dagster/partition": "2026-01-02", "dagster/from_ui": "true"},  # the Materialize button
                 {"dagster/partition": "2026-01-02", "team": "finance"},  # hand-set tags
                 {"dagster/partition": "2026-01-02", "dagster/backfill": "abc"}):  # a UI backfill
        refused = world.materialize("2026-01-02", tags=tags)
        assert not refused.success
        text = failure_text(refused)
        assert "no approved replay plan covers partition 2026-01-02 of daily_revenue" in text
        assert "holds 5 row(s)" in text and "backfill plan new" in text
    assert world.fingerprints("daily_revenue", keys(1, 3)) == before
    assert world.sql("SELECT partition_key FROM backfill_control.watermarks") == watermark
    assert world.sql("SELECT count(*) FROM backfill_control.writes")[0][0] == 3


def test_a_partition_never_written_loads_without_a_plan_wherever_it_lies(world):
    """Writing a later day first does not make the earlier, empty days history."""
    assert world.materialize(keys(3, 3)).success
    assert world.materialize(keys(1, 1)).success  # before the watermark, but never written
    assert world.rows("daily_revenue", "2026-01-01") == 5
    assert world.sql("SELECT partition_key FROM backfill_control.watermarks") == [("2026-01-03",)]
    assert world.materialize(keys(4, 4)).success


def test_an_emptied_partition_is_still_history(world):
    assert world.materialize(keys(1, 2)).success
    world.run_sql("DELETE FROM daily_revenue WHERE order_date = '2026-01-02'")  # by hand, outside the product
    for tags in ({}, {"dagster/backfill": "bf"}, {"dagster/from_ui": "true"}):
        refused = world.materialize(keys(2, 2), tags=tags)
        assert not refused.success
        assert "no approved replay plan covers partition 2026-01-02 of daily_revenue, and it was written before " \
               "(it holds no rows now): rewriting it is a replay" in failure_text(refused)
    assert world.rows("daily_revenue", "2026-01-02") == 0


def test_a_ui_backfill_loads_new_partitions_without_a_plan_gated_and_published(world):
    """As the daemon submits a UI backfill's ranged run: tagged dagster/backfill, target and publish."""
    loaded = world.backfill(keys(1, 4), publish=True)
    assert loaded.success, failure_text(loaded)
    assert world.fingerprints("published_revenue", keys(1, 4)) == world.fingerprints("daily_revenue", keys(1, 4))
    assert world.sql("SELECT count(DISTINCT partition_key) FROM backfill_control.gate_results "
                     "WHERE passed AND plan_id IS NULL") == [(4,)]
    # the same backfill again: those days are history now, refused before any write
    before = world.fingerprints("daily_revenue", keys(1, 4))
    again = world.backfill(keys(3, 5), publish=True)
    assert not again.success
    assert "no approved replay plan covers partition 2026-01-03 of daily_revenue, and it holds 5 row(s)" \
        in failure_text(again)
    assert world.fingerprints("daily_revenue", keys(1, 4)) == before and world.rows("daily_revenue", keys(5, 5)[0]) == 0


def test_a_backfill_may_not_mix_new_partitions_with_a_plans(world):
    world.approved_plan("fix", start="2026-01-03", end="2026-01-03", proof=("2026-01-03",))
    for span in (keys(2, 3), keys(3, 4)):
        refused = world.backfill(span)
        assert not refused.success and "mix plan fix" in failure_text(refused), failure_text(refused)
    assert [world.rows("daily_revenue", k) for k in keys(2, 4)] == [0, 0, 0]


def test_a_plan_tag_never_grants_a_write(world):
    assert world.materialize(keys(1, 1)).success
    forged = world.plan_run("fix", keys(1, 1))
    assert not forged.success and "plan fix is not in the control record" in failure_text(forged)


def test_before_the_proof_only_the_proof_partitions_are_written(world):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-06", proof=("2026-01-02",))
    refused = world.backfill(keys(3, 3))
    assert not refused.success
    assert "only its proof partitions (2026-01-02) may run until the proof passes" \
        in failure_text(refused)
    assert world.rows("daily_revenue", "2026-01-03") == 0
    assert world.backfill(keys(2, 2)).success
    assert world.rows("daily_revenue", "2026-01-02") == 5
    assert world.phase() == "proving"


def test_a_backfill_of_history_outside_every_window_is_refused(world):
    assert world.materialize(keys(5, 5), spec=BUGGY).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    before = world.fingerprints("daily_revenue", keys(5, 5))
    result = world.backfill(keys(5, 5))
    assert not result.success
    assert "no approved replay plan covers partition 2026-01-05 of daily_revenue, and it holds 5 row(s)" \
        in failure_text(result)
    assert world.fingerprints("daily_revenue", keys(5, 5)) == before


def test_an_edited_file_changes_nothing_the_record_holds(world):
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-06", proof=("2026-01-02",))
    path.write_text(path.read_text().replace("partitions_per_run: 2", "partitions_per_run: 3"))
    # the gate reads the plan of record, not the file: the run proceeds under the approved version
    assert world.backfill(keys(2, 2)).success
    version = world.sql("SELECT approved_sha256 FROM backfill_control.plans")[0][0]
    assert world.sql("SELECT count(*) FROM backfill_control.plan_versions WHERE sha256 = ?", [version]) == [(1,)]


def test_a_widened_window_cannot_write_before_its_own_approvals(world):
    """Approve 01-01..01-03, widen the file to 01-06, give one of two approvals, revert."""
    assert world.materialize(keys(5, 5), spec=BUGGY).success  # history: only a plan may rewrite it
    before = world.fingerprints("daily_revenue", keys(5, 5))
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    original = path.read_text()
    doc = yaml.safe_load(original)
    doc["window"]["end"] = "2026-01-06"
    doc["approvals"]["granted"] = []
    path.write_text(yaml.safe_dump(doc))
    world.approve(path, "carol")
    path.write_text(original)
    assert world.backfill(keys(2, 2)).success
    assert world.plan_run("fix", keys(2, 2)).success
    # the proof passed on 01-02 twice; even past the proof, 01-05 is outside the record's window
    assert world.cli("run", "fix", "--proof") == 0
    refused = world.backfill(keys(5, 5))
    assert not refused.success and "no approved replay plan covers partition 2026-01-05" in failure_text(refused)
    assert world.fingerprints("daily_revenue", keys(5, 5)) == before


def test_an_untagged_run_on_a_frozen_partition_writes_nothing(world):
    assert world.materialize(keys(1, 1), spec=BUGGY).success
    before = world.fingerprints("daily_revenue", keys(1, 1))
    cursor = world.sql("SELECT partition_key FROM backfill_control.watermarks")
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    frozen = world.materialize(keys(1, 1), spec=BUGGY)
    assert not frozen.success
    assert "claimed by active plan fix" in failure_text(frozen)
    assert "backfill run fix --partitions 2026-01-01" in failure_text(frozen)
    assert world.fingerprints("daily_revenue", keys(1, 1)) == before
    assert world.plan_run("fix", keys(1, 1)).success  # the plan writes its own partition
    assert world.sql("SELECT partition_key FROM backfill_control.watermarks") == cursor
    assert world.materialize(keys(6, 6)).success  # a new day outside the window still runs
    assert world.sql("SELECT partition_key FROM backfill_control.watermarks") == [("2026-01-06",)]


def test_a_second_overlapping_plan_cannot_be_approved_until_the_first_ends(world, capsys):
    world.approved_plan("first", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    second = world.plan("second", start="2026-01-04", end="2026-01-06", proof=("2026-01-05",))
    assert world.cli("plan", "approve", str(second), "--by", "alice", "--key", str(world.keys["alice"])) == 1
    assert "plan first (approved) already holds daily_revenue 2026-01-01..2026-01-04" in capsys.readouterr().err
    assert yaml.safe_load(second.read_text())["approvals"]["granted"] == []
    assert world.cli("plan", "withdraw", "first") == 0  # a command, not a hand edit, ends it
    world.approve(second)
    assert world.phase("second") == "approved"


def test_a_plan_that_does_not_fit_its_table_is_never_approved(world, capsys):
    cases = {
        "a window outside the partitions": dict(start="2025-12-20", end="2026-01-02", proof=("2026-01-01",)),
        "a target that does not exist": dict(target="daily_refunds"),
        "another source of truth": dict(source="payments"),
    }
    for name, kwargs in cases.items():
        path = world.plan(name.replace(" ", "-"), **kwargs)
        code = world.cli("plan", "approve", str(path), "--by", "alice", "--key", str(world.keys["alice"]))
        err = capsys.readouterr().err
        assert code in (1, 2), name
        assert "cannot be approved" in err or "is not a replayable table" in err, (name, err)
    assert world.plan_ids() == []


def test_business_keys_and_metrics_are_checked_against_the_loaded_table(world, capsys):
    path = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    text = path.read_text().replace("- name: orders", "- name: ordres")
    path.write_text(text.replace("execution:\n", "execution:\n  business_keys: [order_date, customer_id]\n"))
    assert world.cli("plan", "approve", str(path), "--by", "alice", "--key", str(world.keys["alice"])) == 1
    err = capsys.readouterr().err
    assert "execution.business_keys" in err and "daily_revenue's business keys are [order_date, region]" in err
    assert "ordres" in err and "declares no such metric" in err


def test_the_run_uses_the_spec_of_the_definitions_it_loaded(world):
    # building the buggy definitions first must not leak into the fixed ones (no global registry)
    world.defs(BUGGY)
    from backfill_assets.graph import find_tables

    tables = find_tables(world.defs(FIXED))
    assert tables["daily_revenue"][0].code_version == FIXED.code_version
    assert tables["daily_revenue"][0] == FIXED


def test_a_plan_closed_between_the_check_and_the_write_cannot_write(world):
    """`recheck` repeats the permission inside the write transaction."""
    from backfill_assets.control import record
    from backfill_assets.errors import PartitionRefused
    from backfill_assets.execution.write import write_partitions
    from backfill_assets.permission import permit

    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    with world.warehouse().session() as session:
        permission = permit(session, FIXED, world.scheme, ["2026-01-02"], {PLAN_TAG: "fix"})
        world_cli_code = None
    world_cli_code = world.cli("plan", "withdraw", "fix")
    assert world_cli_code == 0
    with world.warehouse().session() as session:
        try:
            write_partitions(session, FIXED, world.scheme, permission, run_id=None, actor="test")
            raise AssertionError("the write went through")
        except PartitionRefused as exc:
            assert "plan fix is withdrawn" in str(exc)
        assert record.require(session, "fix").phase.value == "withdrawn"
    assert world.rows("daily_revenue", "2026-01-02") == 0


def test_leaky_recomputation_and_merge_stay_inside_their_partition(world):
    from backfill_assets.errors import WriteRefused
    from backfill_assets.warehouse.writes import ensure_table, write_rows

    assert world.materialize(keys(1, 3)).success
    before = world.fingerprints("daily_revenue", keys(1, 3))
    day = per_partition(FIXED)
    leaky = dataclasses.replace(day, select_sql=day.select_sql.replace(
        "WHERE order_date = $partition", "WHERE order_date >= $partition"))
    with world.warehouse().session() as session:
        try:
            with session.transaction():
                write_rows(session, leaky, world.scheme, ["2026-01-02"], "overwrite")
            raise AssertionError("a leaky recomputation was written")
        except WriteRefused as exc:
            assert "whose order_date is outside 2026-01-02" in str(exc)
    assert world.fingerprints("daily_revenue", keys(1, 3)) == before
    by_region = dataclasses.replace(FIXED, business_keys=("order_date", "region"))
    with world.warehouse().session() as session:
        ensure_table(session, by_region)
        with session.transaction():
            write_rows(session, by_region, world.scheme, ["2026-01-02"], "merge")
    assert world.fingerprints("daily_revenue", ["2026-01-01", "2026-01-03"]) == \
        {k: before[k] for k in ("2026-01-01", "2026-01-03")}
    assert world.rows("daily_revenue", "2026-01-02") == 5


def _reconciled(world):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix") == 0
    assert world.phase() == "reconciled"


def _checks_only(world, tags: dict[str, str]):
    """A run of the target's checks alone, as the UI's "Execute" on a check launches it."""
    defs = world.defs()
    checks = dg.AssetSelection.checks_for_assets(dg.AssetKey("daily_revenue"))
    job = dg.define_asset_job("checks_only", selection=checks, partitions_def=PARTITIONS)
    with world.deployed():
        return dg.Definitions.merge(defs, dg.Definitions(jobs=[job])).resolve_job_def("checks_only") \
            .execute_in_process(instance=world.instance, tags=tags, raise_on_error=False)


def _writes(world) -> list[tuple]:
    return world.sql("SELECT partition_key, plan_id FROM backfill_control.writes ORDER BY write_id")


def test_a_run_of_the_checks_alone_writes_nothing_and_moves_no_plan(world):
    """Executing a replayable table's checks alone (the UI's "Execute" on a check, an asset job
    selecting only the checks) ran the target's body: it rewrote the partition under the plan named
    by the run's tags, moving a reconciled plan back to running, and filled a never-written
    partition without a plan, before Dagster failed the step on the materialization it had not
    selected, so the UI showed no materialization of bytes the ledger holds (found by an attack).
    Gates are judged on the write they belong to: a run of the checks alone is refused before it
    writes, naming the commands that do what it asked."""
    _reconciled(world)
    before, published = _writes(world), world.phase()
    for tags in ({"dagster/partition": "2026-01-02", PLAN_TAG: "fix"},
                 {"dagster/partition": "2026-01-02", BACKFILL_TAG: "ui-bf"},
                 {"dagster/partition": "2026-01-07"}):
        result = _checks_only(world, tags)
        assert not result.success
        assert "checks alone" in failure_text(result), failure_text(result)
        assert _writes(world) == before, tags
        assert world.phase() == published == "reconciled"
    assert world.rows("daily_revenue", "2026-01-07") == 0
    # the target with its checks still writes as before
    assert world.materialize("2026-01-07").success and world.rows("daily_revenue", "2026-01-07") > 0

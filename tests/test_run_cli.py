"""`backfill run` as a user types it: dry runs, refusals, slices, resumption, the demo."""

from __future__ import annotations

import json
import re

from tests.conftest import BIN, ROOT


def test_dry_run_prints_the_slices_and_writes_nothing(world, cli):
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-07", proof=("2026-01-03",),
                               max_concurrent=2)
    result = cli("run", str(path), "--dry-run")
    assert result.code == 0, result.err
    assert "mode overwrite, window 2026-01-01..2026-01-07, slices of 2" in result.out
    assert "slice 1: 2026-01-01, 2026-01-02\n" in result.out
    assert "slice 3: 2026-01-06, 2026-01-07\n" in result.out
    proof = cli("run", str(path), "--proof", "--dry-run")
    assert "proof x2: 1 partition(s) in 1 slice(s)" in proof.out
    assert world.sql("SELECT count(*) FROM backfill_control.writes")[0][0] == 0
    assert world.sql("SELECT phase FROM backfill_control.plans")[0][0] == "approved"


def test_window_is_refused_until_proven_then_runs_in_slices_and_resumes(world, cli):
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-05", proof=("2026-01-03",),
                               max_concurrent=2)
    early = cli("run", str(path))
    assert early.code == 1 and "the window runs only after the proof passed" in early.err
    assert "--proof" in early.err and "Traceback" not in early.err

    proof = cli("run", str(path), "--proof")
    assert proof.code == 0, proof.err
    assert "proof passed: fingerprints identical on both runs" in proof.out
    window = cli("run", str(path))
    assert window.code == 0, window.err
    assert re.search(r"window \[#+\] 4/4 partitions\s+elapsed\s+[\d.]+s\s+ETA\s+0\.0s",
                     window.err), window.err
    assert "plan fix is reconciled" in window.out
    runs = world.sql("SELECT count(DISTINCT run_id) FROM backfill_control.writes")[0][0]
    assert runs == 2 + 2  # proof twice, then two slices of two partitions (one range run each)
    again = cli("run", str(path))
    assert again.code == 0 and "nothing to run" in again.out


def test_halts_at_the_first_failing_slice_and_partitions_rerun_after_a_fix(world, cli):
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-07", proof=("2026-01-01",),
                               max_concurrent=2)
    assert cli("run", str(path), "--proof").code == 0
    world.sql("INSERT INTO orders SELECT order_id + 1000000, customer_id, NULL, order_ts, "
              "order_date, amount, status FROM orders WHERE order_date = '2026-01-04' LIMIT 2")
    halted = cli("run", str(path))
    assert halted.code == 1
    assert "2026-01-04: row_count_matches_source, contract_holds failed" in halted.out
    assert "halted at window slice 2026-01-04, 2026-01-05" in halted.out
    assert world.rows("daily_revenue", "2026-01-06") == 0  # later slices never ran
    world.sql("DELETE FROM orders WHERE region IS NULL")
    fixed = cli("run", str(path), "--partitions", "2026-01-04")
    assert fixed.code == 0, fixed.err
    rest = cli("run", str(path))
    assert rest.code == 0 and "slice 1: 2026-01-06, 2026-01-07" in rest.out
    assert "plan fix is reconciled" in rest.out


def test_bad_windows_and_partitions_exit_2_without_writing(world, cli):
    early = world.approved_plan("early", start="2025-12-30", end="2026-01-02",
                                proof=("2026-01-01",))
    result = cli("run", str(early), "--proof")
    assert result.code == 2
    assert "reaches outside daily_revenue's partitions" in result.err and "2025-12-30" in result.err
    path = world.approved_plan("fix", start="2026-01-03", end="2026-01-04", proof=("2026-01-03",))
    outside = cli("run", str(path), "--partitions", "2026-01-05")
    assert outside.code == 2 and "not in the window 2026-01-03..2026-01-04" in outside.err
    assert world.sql("SELECT count(*) FROM backfill_control.writes")[0][0] == 0


def test_unknown_metric_in_the_plan_is_refused_with_the_known_ones(world, cli):
    path = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    path.write_text(path.read_text().replace("name: orders", "name: order_count"))
    world.approve(path)
    result = cli("run", str(path), "--proof")
    assert result.code == 2
    assert "declares no metric 'order_count'" in result.err and "net_revenue" in result.err


def test_the_demo_tells_the_whole_story(tmp_path, run_subprocess):
    result = run_subprocess("demo", "--home", str(tmp_path / "demo"), timeout=600)
    assert result.code == 0, result.out[-3000:] + result.err[-3000:]
    out = result.out
    for marker in ("REFUSED: 1 gating item(s) open", "ALLOWED: the plan is complete",
                   "proof passed: fingerprints identical", "halted at window slice",
                   "all gates passed", "refund-double-count-fix: published",
                   "evidence chain verified", "is rolled_back"):
        assert marker in out, marker
    match = re.search(r"published net revenue 2026-01-05\.\.2026-01-18: ([\d,.]+) -> ([\d,.]+) "
                      r"\(orders say ([\d,.]+);", out)
    assert match, out[-2000:]
    before, after, truth = (float(g.replace(",", "")) for g in match.groups())
    assert after == truth and before < truth
    assert (tmp_path / "demo" / "evidence" / "refund-double-count-fix.yaml").exists()
    again = run_subprocess("demo", "--home", str(tmp_path / "demo"), timeout=600)
    assert again.code == 0  # rerunnable: the demo's own folder is reset
    foreign = tmp_path / "mine"
    (foreign / "plans").mkdir(parents=True)
    refused = run_subprocess("demo", "--home", str(foreign))
    assert refused.code == 2 and "not the demo's" in refused.err


def test_publish_says_what_blocks_it_and_status_says_what_is_next(world, cli):
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    blocked = cli("publish", str(path))
    assert blocked.code == 1
    assert "publish of plan fix is blocked: 2026-01-02: materialized 0 time(s)" in blocked.err
    status = cli("status", str(path), "--json")
    assert status.code == 0
    report = json.loads(status.out)
    assert report["phase"] == "approved" and report["publish"] == "paused"
    assert report["next"].startswith("run the proof: backfill run")
    assert cli("run", str(path), "--proof").code == 0
    assert cli("run", str(path)).code == 0
    published = cli("publish", str(path))
    assert published.code == 0 and "downstream owners notified" in published.out
    final = json.loads(cli("status", str(path), "--json").out)
    assert (final["phase"], final["written"], final["reconciled"]) == ("published", 3, 3)
    assert final["publish"].startswith("reopened at")


def test_workspace_definitions_validate_with_the_dagster_cli(run_subprocess):
    result = run_subprocess(command=[str(BIN / "dagster"), "definitions", "validate", "-w",
                                     str(ROOT / "workspace.yaml")], timeout=300)
    assert result.code == 0, result.err[-2000:]
    assert "All code locations passed validation" in result.err + result.out

"""`backfill run` as a user types it: dry runs, refusals, slices, resumption, pause, the demo."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.conftest import BIN, ROOT


def test_a_dry_run_summarises_the_runs_and_writes_nothing(world, run_cli):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-08", proof=("2026-01-03",), per_run=2)
    result = run_cli("run", "fix", "--dry-run")
    assert result.code == 0, result.err
    assert "mode overwrite, window 2026-01-01..2026-01-08 (8 partitions), 2 per run" in result.out
    assert "window: 7 partition(s) in 4 run(s)" in result.out
    assert "  run 1: 2026-01-01..2026-01-02 (2)\n" in result.out  # the proof partition is skipped
    assert "  run 4: 2026-01-08\n" in result.out
    proof = run_cli("run", "fix", "--proof", "--dry-run")
    assert "proof x2: 1 partition(s) in 1 run(s)" in proof.out
    assert world.sql("SELECT count(*) FROM backfill_control.writes") == [(0,)]
    assert world.phase() == "approved"


def test_the_window_is_refused_until_proven_then_runs_in_slices_and_resumes(world, run_cli):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-05", proof=("2026-01-03",), per_run=2)
    early = run_cli("run", "fix")
    assert early.code == 1 and "the window runs only after the proof passed" in early.err
    assert "--proof" in early.err and "Traceback" not in early.err
    proof = run_cli("run", "fix", "--proof")
    assert proof.code == 0, proof.err
    assert "proof passed: fingerprints identical on both runs" in proof.out
    window = run_cli("run", "fix")
    assert window.code == 0, window.err
    assert re.search(r"window \[#+\] 4/4 partitions\s+elapsed\s+[\d.]+s\s+ETA\s+0\.0s", window.err), window.err
    assert "plan fix is reconciled" in window.out
    assert "Stack Trace" not in window.out + window.err and "dagster - " not in window.err
    runs = world.sql("SELECT count(DISTINCT run_id) FROM backfill_control.writes")[0][0]
    assert runs == 2 + 2  # the proof twice, then two ranges of two partitions (one run each)
    again = run_cli("run", "fix")
    assert again.code == 0 and "nothing to run" in again.out


def test_it_halts_at_the_first_failing_slice_and_names_the_exact_fix(world, run_cli):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-07", proof=("2026-01-01",), per_run=2)
    assert run_cli("run", "fix", "--proof").code == 0
    world.run_sql("INSERT INTO orders SELECT order_id + 1000000, customer_id, NULL, order_ts, order_date, "
                  "amount, status FROM orders WHERE order_date = '2026-01-04' LIMIT 2")
    halted = run_cli("run", "fix")
    assert halted.code == 1
    assert "2026-01-04: contract_holds failed" in halted.err
    assert "halted at window run 2026-01-04..2026-01-05" in halted.err
    assert "Traceback" not in halted.out + halted.err and "Stack Trace" not in halted.out + halted.err
    assert world.rows("daily_revenue", "2026-01-06") == 0  # later slices never ran
    status = json.loads(run_cli("status", "fix", "--json").out)
    assert status["next"].startswith("fix the cause, then re-run the failing partitions: "
                                     "`backfill run fix --partitions 2026-01-04`")
    world.run_sql("DELETE FROM orders WHERE region IS NULL")
    assert run_cli("run", "fix", "--partitions", "2026-01-04").code == 0
    rest = run_cli("run", "fix")
    assert rest.code == 0 and "run 1: 2026-01-06..2026-01-07 (2)" in rest.out  # the stages, before the runs
    assert "plan fix is reconciled" in rest.out


def test_partitions_outside_the_window_exit_2_without_writing(world, run_cli):
    world.approved_plan("fix", start="2026-01-03", end="2026-01-04", proof=("2026-01-03",))
    outside = run_cli("run", "fix", "--partitions", "2026-01-05")
    assert outside.code == 2 and "not in the window 2026-01-03..2026-01-04" in outside.err
    assert world.sql("SELECT count(*) FROM backfill_control.writes") == [(0,)]


def test_partitions_take_ranges_lists_files_and_one_key_at_a_time(world, run_cli, tmp_path):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-08", proof=("2026-01-01",), per_run=8)
    assert run_cli("run", "fix", "--proof").code == 0
    ranged = run_cli("run", "fix", "--partitions", "2026-01-02..2026-01-04,2026-01-07", "--dry-run")
    assert ranged.code == 0 and "2026-01-02..2026-01-04" in ranged.out and "2026-01-07" in ranged.out, ranged
    assert run_cli("run", "fix", "--partitions", "2026-01-02..2026-01-04").code == 0
    listed = tmp_path / "keys.txt"
    listed.write_text("2026-01-06\n\n2026-01-05\r\n")
    assert run_cli("run", "fix", "--partitions-file", str(listed), "--partition", "2026-01-08").code == 0
    written = {k for (k,) in world.sql("SELECT DISTINCT partition_key FROM backfill_control.writes")}
    assert written == {f"2026-01-0{d}" for d in (1, 2, 3, 4, 5, 6, 8)}
    backwards = run_cli("run", "fix", "--partitions", "2026-01-04..2026-01-02")
    assert backwards.code == 2 and "2026-01-04 comes after 2026-01-02" in backwards.err
    diff = run_cli("diff", "fix", "--partitions", "2026-01-02..2026-01-03", "--json")
    assert diff.code == 0 and sorted(p["partition"] for p in json.loads(diff.out)["partitions"]) == \
        ["2026-01-02", "2026-01-03"], diff.out[:500]


def test_one_partition_key_may_contain_commas_and_dots():
    import argparse

    from backfill_assets.cli.partition_args import chosen
    from backfill_assets.errors import WindowError

    window = ["eu,north", "eu,south", "us", "a..b"]

    def named(partition=None, partitions=None, partitions_file=None):
        return chosen(argparse.Namespace(partition=partition, partitions=partitions,
                                         partitions_file=partitions_file), window, "p")

    assert named(partition=["eu,south"]) == ["eu,south"]
    assert named(partition=["us", "eu,north"]) == ["eu,north", "us"]  # in the window's order
    assert named(partitions="us..a..b") == ["us", "a..b"]  # the one split between two keys of the window
    assert named(partitions="a..b") == ["a..b"]  # a key itself, before any range
    assert named() is None
    with pytest.raises(WindowError, match="partitions eu are not in the window eu,north..a..b of plan p"):
        named(partitions="eu")


def test_pause_stops_before_the_next_slice_and_run_resumes(world, run_cli):
    path = world.plan("fix", start="2026-01-01", end="2026-01-06", proof=("2026-01-01",), per_run=1)
    doc = yaml.safe_load(path.read_text())
    doc["execution"]["max_partitions_per_minute"] = 600  # a throttle: 0.1 s a partition
    path.write_text(yaml.safe_dump(doc))
    world.approve(path)
    assert run_cli("run", "fix", "--proof").code == 0
    assert run_cli("pause", "fix").code == 0
    stopped = run_cli("run", "fix")  # `backfill run` is how a paused plan resumes
    assert stopped.code == 0 and "plan fix is reconciled" in stopped.out
    assert world.sql("SELECT hold FROM backfill_control.plans") == [(None,)]
    kinds = [r[0] for r in world.sql("SELECT payload FROM backfill_control.evidence WHERE kind = 'hold' "
                                     "ORDER BY seq")]
    assert ['"to":"paused"' in kinds[0], '"to":null' in kinds[1]] == [True, True]


def test_cancel_ends_the_runs_and_says_what_to_roll_back(world, run_cli):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert run_cli("run", "fix", "--proof").code == 0
    cancelled = run_cli("cancel", "fix")
    assert cancelled.code == 0 and "backfill rollback fix" in cancelled.out
    refused = run_cli("run", "fix")
    assert refused.code == 1 and "was cancelled" in refused.err
    assert run_cli("rollback", "fix").code == 0 and world.phase() == "rolled_back"
    fresh = world.approved_plan("other", start="2026-01-05", end="2026-01-06", proof=("2026-01-05",))
    assert run_cli("cancel", "other").code == 0 and world.phase("other") == "withdrawn"
    assert fresh.exists()


def test_a_pause_typed_after_a_cancel_never_lets_the_cancelled_plan_run_again(world, run_cli):
    """`cancel` ends a plan's runs: "a cancelled one only rolls back". A `pause` typed after it (a
    colleague's, or a hurried second thought) replaced the cancel with a pause, and `backfill run`
    resumed the cancelled plan: it wrote its window again and could go on to publish (found by an
    attack)."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-01",))
    assert run_cli("run", "fix", "--proof").code == 0
    cancelled = run_cli("cancel", "fix")
    assert cancelled.code == 0, cancelled.err
    writes_before = world.sql("SELECT count(*) FROM backfill_control.writes")[0][0]
    run_cli("pause", "fix")
    assert world.sql("SELECT hold FROM backfill_control.plans WHERE plan_id = 'fix'") == [("cancelled",)]
    resumed = run_cli("run", "fix")
    assert resumed.code == 1 and "cancelled" in resumed.err, resumed.out + resumed.err
    assert world.sql("SELECT count(*) FROM backfill_control.writes")[0][0] == writes_before
    assert world.phase("fix") == "proven"



def test_a_cancel_typed_while_backfill_run_resumes_a_paused_plan_stays(world, run_cli):
    """`backfill run` of a paused plan lifts the pause as it starts, judged on the plan it read
    before taking its lease: a cancel committed in between was lifted with it, and the cancelled
    plan ran (found by an attack on holds). The pause is lifted only if it is still the hold."""
    from backfill_assets import lifecycle
    from backfill_assets.control import record

    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-01",))
    assert run_cli("run", "fix", "--proof").code == 0 and run_cli("pause", "fix").code == 0
    with world.warehouse().session() as session:
        read = record.require(session, "fix")  # what `backfill run` read as it started: paused
    assert run_cli("cancel", "fix").code == 0  # a colleague's cancel, meanwhile
    with world.warehouse().session() as session:
        lifecycle.run_resumed(session, read, "ops")
    assert world.sql("SELECT hold FROM backfill_control.plans WHERE plan_id = 'fix'") == [("cancelled",)]

def test_publish_says_what_blocks_it_and_status_says_what_is_next(world, run_cli):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    blocked = run_cli("publish", "fix")
    assert blocked.code == 1 and "plan fix is approved" in blocked.err
    assert "backfill run fix --proof" in blocked.err
    report = json.loads(run_cli("status", "fix", "--json").out)
    assert report["phase"] == "approved" and report["publish"].startswith("frozen")
    assert report["next"] == "run the proof: `backfill run fix --proof`"
    assert run_cli("run", "fix", "--proof").code == 0
    assert run_cli("run", "fix").code == 0
    published = run_cli("publish", "fix")
    assert published.code == 0 and "downstream owners notified" in published.out
    final = json.loads(run_cli("status", "fix", "--json").out)
    assert (final["phase"], final["written"], final["reconciled"]) == ("published", 3, 3)
    assert final["publish"].startswith("published at") and "plan close fix" in final["next"]


def test_run_and_publish_proves_runs_reconciles_and_publishes_in_one_command(world, run_cli):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-05", proof=("2026-01-03",), per_run=2)
    days = [f"2026-01-0{d}" for d in range(1, 6)]
    done = run_cli("run", "fix", "--and-publish")
    assert done.code == 0, done.err
    out = done.out
    # each step in order, as its own command says it
    steps = ["proof passed: fingerprints identical on both runs", "plan fix is reconciled",
             "all gates passed; plan fix is reconciled", "published published_revenue for 2026-01-01..2026-01-05"]
    assert [out.find(s) for s in steps] == sorted(out.find(s) for s in steps) and -1 not in [out.find(s) for s in steps]
    assert "reopen sensor" not in out  # the next step is this command's, not the sensor's
    assert "Traceback" not in out + done.err and "dagster - " not in done.err
    assert world.phase() == "published"
    assert world.fingerprints("published_revenue", days) == world.fingerprints("daily_revenue", days)
    runs = world.sql("SELECT count(DISTINCT run_id) FROM backfill_control.writes")[0][0]
    assert runs == 2 + 2  # the proof twice, then the window's two ranges: nothing written twice
    again = run_cli("run", "fix", "--and-publish")  # a retry after success succeeds, doing nothing
    assert again.code == 0 and "plan fix is already published: nothing to run or publish" in again.out


def test_run_and_publish_of_a_published_plan_whose_published_table_was_edited_puts_the_checked_bytes_back(
        world, run_cli):
    """It answered "already published" from the record without looking, and consumers kept the
    edited bytes (found by an attack); `backfill publish` looks first, and so does it now."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    days = ["2026-01-01", "2026-01-02", "2026-01-03"]
    assert run_cli("run", "fix", "--and-publish").code == 0
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = '2026-01-02'")
    again = run_cli("run", "fix", "--and-publish")
    assert again.code == 0, again.err
    assert "already published" not in again.out and "this publish put the checked bytes back" in again.out
    assert world.fingerprints("published_revenue", days) == world.fingerprints("daily_revenue", days)
    assert world.phase() == "published"


def test_run_and_publish_stops_at_a_failing_slice_and_publishes_nothing(world, run_cli):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-05", proof=("2026-01-01",), per_run=2)
    world.run_sql("INSERT INTO orders SELECT order_id + 1000000, customer_id, NULL, order_ts, order_date, "
                  "amount, status FROM orders WHERE order_date = '2026-01-04' LIMIT 2")
    halted = run_cli("run", "fix", "--and-publish")
    assert halted.code == 1
    assert "proof passed" in halted.out and "2026-01-04: contract_holds failed" in halted.err
    assert "all gates passed" not in halted.out and "published " not in halted.out
    assert world.phase() == "running"
    assert world.rows("published_revenue", "2026-01-01") == 0  # consumers keep the last good data
    # the repair, then the same command goes on from where the plan stands (no second proof)
    world.run_sql("DELETE FROM orders WHERE region IS NULL")
    assert run_cli("run", "fix", "--partitions", "2026-01-04").code == 0
    rest = run_cli("run", "fix", "--and-publish")
    assert rest.code == 0, rest.err
    assert "proof passed" not in rest.out and world.phase() == "published"


@pytest.mark.parametrize("hold", ["pause", "cancel"])
@pytest.mark.parametrize("after", [1, 2])  # the operator in another shell: after the proof, after the window
def test_run_and_publish_stops_at_a_hold_issued_while_it_ran(world, run_cli, monkeypatch, hold, after):
    """A pause from another shell between the proof and the window was lifted by the window step
    (it read itself as a `backfill run` typed to resume); a cancel after the window was published
    (found by an attack). Only the command's first step resumes a plan paused before it started."""
    from backfill_assets.cli import run_cmds

    world.approved_plan("fix", start="2026-01-01", end="2026-01-05", proof=("2026-01-03",), per_run=2)
    step, calls = run_cmds._run, []

    def operator_holds_it_after(*args, **kwargs):
        code = step(*args, **kwargs)
        calls.append(code)
        if len(calls) == after:
            assert run_cli(hold, "fix").code == 0  # as if typed in another shell while the chain ran
        return code

    monkeypatch.setattr(run_cmds, "_run", operator_holds_it_after)
    chained = run_cli("run", "fix", "--and-publish")
    word = {"pause": "paused", "cancel": "cancelled"}[hold]
    assert chained.code == 1 and f"plan fix was {word} while this command ran" in chained.err, chained.err
    assert "Traceback" not in chained.err and "published published_revenue" not in chained.out
    assert len(calls) == after  # nothing ran after the hold
    assert world.rows("published_revenue", "2026-01-01") == 0
    status = json.loads(run_cli("status", "fix", "--json").out)
    assert status["hold"] == word


def test_run_and_publish_refuses_a_target_edited_after_its_reconcile_and_publishes_nothing(world, run_cli, monkeypatch):
    """Its publish launches the run without asking first what blocks it (reconcile has just passed):
    the run asks under its lock, and what changed since is refused there, in one line."""
    from backfill_assets.cli import report_cmds

    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    reconcile = report_cmds.reconcile_plan

    def then_edited(*args, **kwargs):
        code = reconcile(*args, **kwargs)
        world.run_sql("UPDATE daily_revenue SET net_revenue = net_revenue + 1 WHERE order_date = '2026-01-03'")
        return code

    monkeypatch.setattr(report_cmds, "reconcile_plan", then_edited)
    refused = run_cli("run", "fix", "--and-publish")
    assert refused.code == 1 and "2026-01-03: changed since its gates checked it" in refused.err, refused.err
    assert "Traceback" not in refused.err and refused.err.strip().splitlines()[-1].startswith("backfill: ")
    assert "published published_revenue for" not in refused.out and world.phase() == "reconciled"
    assert world.rows("published_revenue", "2026-01-01") == 0  # consumers keep the last good data


def test_run_and_publish_of_a_plan_paused_before_it_started_resumes_it(world, run_cli):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    assert run_cli("pause", "fix").code == 0
    done = run_cli("run", "fix", "--and-publish")
    assert done.code == 0, done.err
    assert world.phase() == "published"


@pytest.mark.parametrize("extra", [["--proof"], ["--dry-run"], ["--partitions", "2026-01-02"]])
def test_run_and_publish_takes_no_step_options(world, run_cli, extra):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    refused = run_cli("run", "fix", "--and-publish", *extra)
    assert refused.code == 2 and "--and-publish runs the whole plan from where it stands" in refused.err
    assert world.sql("SELECT count(*) FROM backfill_control.writes") == [(0,)] and world.phase() == "approved"


def test_the_demo_tells_the_whole_story(tmp_path, run_subprocess):
    # the demo's own definitions: the days, their month and the report its plan names
    # the console script itself, with Python's own warning filters as a user's shell has them (the
    # tests' command server ignores warnings): a Dagster warning about the team's jobs, which a
    # check read, reached the demo's terminal (found by a review)
    result = run_subprocess(timeout=600, command=[str(BIN / "backfill"), "demo", "--home", str(tmp_path / "demo")],
                            env={"BACKFILL_DEFS": "backfill_assets.demo.definitions", "PYTHONWARNINGS": ""})
    assert result.code == 0, result.out[-3000:] + result.err[-3000:]
    out = result.out + result.err
    for marker in ("REFUSED: 2 gating item(s) open", "ALLOWED: the plan is complete",
                   "signature refused", "proof passed: fingerprints identical",
                   "halted at window run", "refund-double-count-fix: published",
                   "impact of plan refund-double-count-fix", "evidence chain verified", "is rolled_back",
                   "graph     monthly_revenue 2026-01-01, recomputed from daily_revenue",
                   "published_monthly_revenue 2026-01 in the same transaction",
                   "the sensor refreshed revenue_report (ok)", "restored 1 partition(s) of published_monthly_revenue"):
        assert marker in out, marker
    assert "Traceback" not in out and "Stack Trace" not in out and " - dagster - " not in out
    assert "Warning" not in out, out[out.index("Warning") - 300:][:600]
    match = re.search(r"published net revenue 2026-01-05\.\.2026-01-18: ([\d,.]+) -> ([\d,.]+) "
                      r"\(orders say ([\d,.]+);", out)
    assert match, out[-2000:]
    before, after, truth = (float(g.replace(",", "")) for g in match.groups())
    assert after == truth and before < truth
    month = re.search(r"net revenue of January's month: ([\d,.]+) -> ([\d,.]+), repaired in the same publish", out)
    assert month, out[-2000:]
    month_before, month_after = (float(g.replace(",", "")) for g in month.groups())
    assert round(month_after - month_before, 2) == round(after - before, 2)  # the window's repair, rolled up
    assert (tmp_path / "demo" / "evidence" / "refund-double-count-fix.yaml").exists()
    foreign = tmp_path / "mine"
    (foreign / "plans").mkdir(parents=True)
    refused = run_subprocess("demo", "--home", str(foreign))
    assert refused.code == 2 and "not the demo's" in refused.err


def test_workspace_definitions_validate_with_the_dagster_cli(run_subprocess):
    result = run_subprocess(command=[str(BIN / "dagster"), "definitions", "validate", "-w",
                                     str(ROOT / "workspace.yaml")], timeout=300)
    assert result.code == 0, result.err[-2000:]
    assert "All code locations passed validation" in result.err + result.out


def test_sample_refuses_an_orders_table_it_did_not_create_unless_forced(engine_world, capfd):
    world = engine_world
    assert world.cli("sample", "--days", "2", "--rows-per-day", "10") == 0  # the world's sample: its own
    world.run_sql("DROP TABLE orders")
    world.run_sql("DROP TABLE backfill_sample_tables")
    world.run_sql("CREATE TABLE orders (order_id BIGINT, customer_id BIGINT, region VARCHAR, order_ts TIMESTAMP, "
                  "order_date DATE, amount DECIMAL(18,2), status VARCHAR)")
    world.run_sql("INSERT INTO orders VALUES (1, 7, 'north', TIMESTAMP '2026-01-01 10:00:00', DATE '2026-01-01', "
                  "12.50, 'completed')")  # a team's real order
    capfd.readouterr()
    assert world.cli("sample", "--days", "2", "--rows-per-day", "10") == 1
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "orders in " in err and "was not created by `backfill sample`" in err, err
    assert "--force" in err
    assert world.sql("SELECT order_id, amount FROM orders") == [(1, 12.5)]
    assert world.cli("sample", "--days", "2", "--rows-per-day", "10", "--force") == 0
    assert world.sql("SELECT count(*) FROM orders") == [(20,)]
    assert world.cli("sample", "--days", "2", "--rows-per-day", "10") == 1  # forced once is still theirs


def test_status_after_a_code_version_mix_names_what_fixes_it_not_the_same_rerun(world, run_cli):
    from dataclasses import replace

    from tests.world import FIXED

    world.approved_plan("ver", start="2026-01-01", end="2026-01-04", proof=("2026-01-01", "2026-01-02",
                                                                          "2026-01-03"), per_run=3)
    assert run_cli("run", "ver", "--proof").code == 0
    newer = replace(FIXED, code_version="3")  # a new release, signed for, wrote the last day
    world.approve_for(world.root / "plans" / "ver.yaml", newer)
    assert not world.plan_run("ver", ["2026-01-04"], spec=newer).success
    status = json.loads(run_cli("status", "ver", "--json").out)
    assert status["failed"] == {"2026-01-04": ["single_code_version"]}
    hint = status["next"]
    assert hint == ("2026-01-04 were written by code version 3, the window by 2: re-running them helps only with "
                    "code version 2 deployed (then `backfill run ver --partitions 2026-01-04`); with the new code "
                    "re-run the whole window, `backfill run ver --partitions 2026-01-01..2026-01-04`; or roll it "
                    "back, `backfill rollback ver`"), hint
    # the same re-run under the new code fails the same way; under the window's code it passes
    assert not world.plan_run("ver", ["2026-01-04"], spec=newer).success
    assert run_cli("run", "ver", "--partitions", "2026-01-04").code == 0  # the demo's code: version 2
    assert json.loads(run_cli("status", "ver", "--json").out)["failed"] == {}


def test_status_never_suggests_a_run_the_approvals_no_longer_authorise(world, run_cli):
    """Signed for one release, the definitions loaded now are another: `status` names re-signing
    (which works), not `backfill run --proof` (which the permission refuses)."""
    from dataclasses import replace

    from tests.world import FIXED

    plan = world.plan("ver", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    world.approve_for(plan, replace(FIXED, code_version="9"))
    assert world.phase("ver") == "approved"
    refused = run_cli("run", "ver", "--proof")
    assert refused.code != 0 and "the table changed" in refused.err, refused.err
    hint = json.loads(run_cli("status", "ver", "--json").out)["next"]
    assert "--proof" not in hint and "backfill plan approve" in hint and "code" in hint, hint
    assert hint.endswith("or roll it back, `backfill rollback ver`") and "\n" not in hint, hint
    assert run_cli("pause", "ver").code == 0  # paused: resuming alone would be refused too
    paused = json.loads(run_cli("status", "ver", "--json").out)["next"]
    assert "backfill plan approve" in paused and paused.endswith("or end it, `backfill cancel ver`"), paused
    assert run_cli("run", "ver", "--proof").code != 0
    world.approve(plan)  # signed again for the code loaded now: the hint's command
    # resumed by the proof: `backfill run ver` alone is refused until the proof passed
    assert json.loads(run_cli("status", "ver", "--json").out)["next"] == \
        "resume with `backfill run ver --proof`, or end it with `backfill cancel ver`"
    assert run_cli("run", "ver", "--proof").code == 0


def test_publish_of_a_rolled_back_plan_says_there_is_nothing_to_publish(world, run_cli):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    assert run_cli("run", "fix", "--proof").code == 0 and run_cli("run", "fix").code == 0
    assert run_cli("rollback", "fix").code == 0
    refused = run_cli("publish", "fix")
    assert refused.code == 1 and "plan fix is rolled_back: it has nothing to publish" in refused.err, refused.err
    assert "every gate" not in refused.err  # it was no gate that stopped it


@pytest.mark.parametrize("verb", ["pause", "cancel"])
def test_a_hold_that_waited_on_a_rollback_is_judged_on_the_plan_as_it_is_then(world, run_cli, verb):
    """On PostgreSQL a cancel typed during a rollback waited for its lock, then held the rolled-back
    plan on the state it had read before: status said to roll it back, and rollback said there was
    nothing to do (found by an attack). The hold is judged again under the plan's row lock."""
    from backfill_assets import lifecycle
    from backfill_assets.control import record
    from backfill_assets.errors import PlanRefused

    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    assert run_cli("run", "fix", "--proof").code == 0
    with world.warehouse().session() as session:
        read_before = record.require(session, "fix")  # what the waiting command had read
    assert read_before.active
    assert run_cli("rollback", "fix").code == 0  # the command it waited on
    with world.warehouse().session() as session:
        with pytest.raises(PlanRefused, match=f"plan fix is rolled_back; there is nothing to {verb}"):
            (lifecycle.paused if verb == "pause" else lifecycle.cancelled)(session, read_before, "op@host")
    status = json.loads(run_cli("status", "fix", "--json").out)
    assert (status["phase"], status["hold"]) == ("rolled_back", None)

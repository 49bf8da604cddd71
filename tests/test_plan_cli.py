"""The plan, its approvals and the guard, through the CLI runner and as a subprocess."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.plans import complete_plan, edited, write_plan


def approve_twice(run_cli, plan: Path) -> None:
    assert run_cli("plan", "approve", str(plan), "--by", "alice").code == 0
    assert run_cli("plan", "approve", str(plan), "--by", "bob").code == 0


def test_complete_plan_approved_by_two_distinct_non_owners_passes_guard(tmp_path, run_cli):
    plan = write_plan(tmp_path / "plan.yaml", complete_plan())
    assert run_cli("plan", "validate", str(plan)).code == 0
    refused = run_cli("guard", str(plan))
    assert refused.code == 1
    assert "- [ ] approvals captured: 0/2 counted" in refused.out

    first = run_cli("plan", "approve", str(plan), "--by", "alice")
    assert first.code == 0 and "1/2 counted, needs more approvals" in first.out
    assert run_cli("guard", str(plan)).code == 1
    second = run_cli("plan", "approve", str(plan), "--by", "bob")
    assert second.code == 0 and "2/2 counted, approved" in second.out

    allowed = run_cli("guard", str(plan))
    assert allowed.code == 0, allowed.out
    assert "- [x] approvals captured: 2/2 counted (alice, bob)" in allowed.out
    assert allowed.out.count("- [x]") == 7  # the three execution items are not done yet
    assert "- [ ] dry run or slice proof completed" in allowed.out
    granted = yaml.safe_load(plan.read_text())["approvals"]["granted"]
    assert [g["by"] for g in granted] == ["alice", "bob"]


def test_owner_cannot_approve_and_hand_written_owner_approval_does_not_count(tmp_path, run_cli):
    plan = write_plan(tmp_path / "plan.yaml", complete_plan())
    refused = run_cli("plan", "approve", str(plan), "--by", "Olivia")
    assert refused.code == 1
    assert "olivia" in refused.err.lower() and "cannot approve" in refused.err
    assert yaml.safe_load(plan.read_text())["approvals"]["granted"] == []

    # an owner approval slipped in by hand is void, and the guard says why
    assert run_cli("plan", "approve", str(plan), "--by", "alice").code == 0
    doc = yaml.safe_load(plan.read_text())
    forged = dict(doc["approvals"]["granted"][0], by="olivia")
    doc["approvals"]["granted"].append(forged)
    write_plan(plan, doc)
    shown = run_cli("plan", "show", str(plan))
    assert "void     olivia" in shown.out and "owner cannot approve" in shown.out
    assert "1/2 counted" in shown.out
    assert run_cli("guard", str(plan)).code == 1


def test_repeated_approver_counts_once(tmp_path, run_cli):
    plan = write_plan(tmp_path / "plan.yaml", complete_plan())
    assert run_cli("plan", "approve", str(plan), "--by", "alice").code == 0
    again = run_cli("plan", "approve", str(plan), "--by", "alice")
    assert again.code == 1 and "already approved" in again.err
    doc = yaml.safe_load(plan.read_text())
    doc["approvals"]["granted"].append(dict(doc["approvals"]["granted"][0]))
    write_plan(plan, doc)
    guard = run_cli("guard", str(plan))
    assert guard.code == 1
    assert "1/2 counted (alice)" in guard.out and "counts once" in guard.out


def test_edit_after_approval_voids_every_approval(tmp_path, run_cli):
    plan = write_plan(tmp_path / "plan.yaml", complete_plan())
    approve_twice(run_cli, plan)
    assert run_cli("guard", str(plan)).code == 0
    doc = yaml.safe_load(plan.read_text())
    doc["window"]["end"] = "2026-01-07"
    write_plan(plan, doc)
    guard = run_cli("guard", str(plan))
    assert guard.code == 1
    assert "0/2 counted" in guard.out and "edited since approval" in guard.out
    # re-approval binds to the new hash
    approve_twice(run_cli, plan)
    assert run_cli("guard", str(plan)).code == 0


def test_comments_and_layout_survive_approval(tmp_path, run_cli):
    text = (ROOT / "templates" / "backfill-plan.yaml").read_text()
    doc = complete_plan()
    plan = write_plan(tmp_path / "plan.yaml", doc)
    # a plan written from the template keeps its comments when approved
    created = run_cli("plan", "new", str(tmp_path / "fresh.yaml"), "--id", "x1", "--owner", "o")
    assert created.code == 0
    assert (tmp_path / "fresh.yaml").read_text().startswith(text.splitlines()[0])
    approve_twice(run_cli, plan)
    assert run_cli("guard", str(plan)).code == 0


@pytest.mark.parametrize("key", ["owner", "reason", "window", "source_of_truth", "rollback",
                                 "execution__idempotency", "execution__proof_partitions",
                                 "checks__duplicates", "publish__notify", "approvals__required",
                                 "incremental__watermark"])
def test_each_missing_key_is_named(tmp_path, run_cli, key):
    plan = write_plan(tmp_path / "plan.yaml", edited(complete_plan(), **{key: None}))
    result = run_cli("plan", "validate", str(plan))
    assert result.code == 1
    assert f"{key.replace('__', '.')} is missing" in result.err
    assert "Traceback" not in result.err


def test_every_todo_placeholder_is_named_at_once(tmp_path, run_cli):
    doc = edited(complete_plan(), owner="TODO", rollback__strategy="TODO: write it")
    doc["checks"]["metrics"][0]["name"] = "TODO"
    result = run_cli("plan", "validate", str(write_plan(tmp_path / "p.yaml", doc)))
    assert result.code == 1
    for key in ("owner", "rollback.strategy", "checks.metrics.0.name"):
        assert f"  - {key} = " in result.err and "still a placeholder" in result.err
    assert "3 problem(s)" in result.err


def test_unknown_key_is_an_error(tmp_path, run_cli):
    doc = complete_plan()
    doc["execution"]["max_concurent_partitions"] = 4
    result = run_cli("plan", "validate", str(write_plan(tmp_path / "p.yaml", doc)))
    assert result.code == 1
    assert "execution.max_concurent_partitions = 4: unknown key" in result.err


def test_reversed_window_is_refused(tmp_path, run_cli):
    doc = complete_plan(start="2026-01-06", end="2026-01-01", proof=("2026-01-03",))
    result = run_cli("plan", "validate", str(write_plan(tmp_path / "p.yaml", doc)))
    assert result.code == 1 and "start is after end" in result.err


def test_future_window_is_refused(tmp_path, run_cli):
    tomorrow = (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)).isoformat()
    doc = complete_plan(end=tomorrow)
    result = run_cli("plan", "validate", str(write_plan(tmp_path / "p.yaml", doc)))
    assert result.code == 1 and "window.end" in result.err and "in the future" in result.err
    assert run_cli("guard", str(tmp_path / "p.yaml")).code == 1


def test_proof_partition_outside_window_is_refused(tmp_path, run_cli):
    doc = complete_plan(proof=("2025-12-31",))
    result = run_cli("plan", "validate", str(write_plan(tmp_path / "p.yaml", doc)))
    assert result.code == 1 and "outside the window" in result.err


def test_malformed_yaml_exits_2_with_one_line(tmp_path, run_subprocess):
    bad = tmp_path / "bad.yaml"
    bad.write_text("plan_id: x\nwindow:\n  start: [2026-01-01\n")
    for command in (["plan", "validate"], ["guard"], ["plan", "approve"]):
        args = [*command, str(bad)] + (["--by", "alice"] if command[-1] == "approve" else [])
        result = run_subprocess(*args)
        assert result.code == 2, (command, result)
        assert len(result.err.strip().splitlines()) == 1
        assert "malformed YAML" in result.err and "Traceback" not in result.err


def test_missing_file_and_misuse_exit_2(tmp_path, run_subprocess):
    assert run_subprocess("plan", "validate", str(tmp_path / "nope.yaml")).code == 2
    misuse = run_subprocess("plan", "approve", str(tmp_path / "nope.yaml"))  # no --by
    assert misuse.code == 2 and "Traceback" not in misuse.err


def test_subprocess_flow_and_sh_hook_return_the_same_codes(tmp_path, run_subprocess, home):
    plan = write_plan(tmp_path / "plan.yaml", complete_plan())
    hook = [str(ROOT / "hooks" / "backfill-guard.sh"), str(plan), "--home", str(home)]
    assert run_subprocess("guard", str(plan)).code == 1
    assert run_subprocess(command=hook).code == 1
    assert run_subprocess("plan", "approve", str(plan), "--by", "alice").code == 0
    assert run_subprocess("plan", "approve", str(plan), "--by", "bob").code == 0
    guard = run_subprocess("guard", str(plan))
    assert guard.code == 0
    hooked = run_subprocess(command=hook)
    assert hooked.code == 0 and hooked.out == guard.out
    bad = tmp_path / "bad.yaml"
    bad.write_text("{unclosed")
    assert run_subprocess("guard", str(bad)).code == 2
    assert run_subprocess(command=[hook[0], str(bad)]).code == 2
    assert run_subprocess(command=[hook[0]]).code == 2


def test_plan_new_fills_given_values(tmp_path, run_cli):
    path = tmp_path / "plans" / "fix.yaml"
    result = run_cli("plan", "new", str(path), "--id", "fix-1", "--target", "daily_revenue",
                     "--start", "2026-01-01", "--end", "2026-01-03", "--owner", "olivia")
    assert result.code == 0
    doc = yaml.safe_load(path.read_text())
    assert doc["plan_id"] == "fix-1" and doc["target"] == "daily_revenue"
    assert doc["window"] == {"start": dt.date(2026, 1, 1), "end": dt.date(2026, 1, 3)}
    assert run_cli("plan", "new", str(path)).code == 2  # never overwrites


def test_show_lists_partitions_hash_and_approvals(tmp_path, run_cli):
    plan = write_plan(tmp_path / "plan.yaml", complete_plan())
    approve_twice(run_cli, plan)
    shown = run_cli("plan", "show", str(plan))
    assert shown.code == 0
    assert "2026-01-01, 2026-01-02, 2026-01-03, 2026-01-04, 2026-01-05, 2026-01-06" in shown.out
    assert "2/2 counted (approved)" in shown.out
    assert "counted  alice" in shown.out and "counted  bob" in shown.out


def test_schema_and_rule_problems_are_reported_together(tmp_path, run_cli):
    doc = complete_plan(start="2026-01-18", end="2026-01-05", proof=("2026-01-06",))
    doc["reason"] = "TODO"
    doc["execution"]["max_concurent_partitions"] = 4
    result = run_cli("plan", "validate", str(write_plan(tmp_path / "p.yaml", doc)))
    assert result.code == 1
    assert "3 problem(s)" in result.err
    assert "  - reason = 'TODO': still a placeholder" in result.err
    assert "  - execution.max_concurent_partitions = 4: unknown key" in result.err
    assert "  - window = '2026-01-18..2026-01-05': start is after end; swap them" in result.err


def test_the_guard_does_not_load_dagster(run_subprocess):
    """The guard runs as a CI step or git hook: it must stay light."""
    import sys

    probe = ("import sys; from backfill_assets.cli import main; "
             "main(['guard', '/nonexistent.yaml']); print('dagster' in sys.modules)")
    result = run_subprocess(command=[sys.executable, "-c", probe])
    assert result.out.strip() == "False", result

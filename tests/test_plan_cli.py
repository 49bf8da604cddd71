"""`backfill plan new | validate | show`, the guard and its hook, approvals that keep the file as
written, and a plan hash that survives releases."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml

from backfill_assets.plan.identity import canonical_text, plan_from_canonical, plan_sha256
from backfill_assets.plan.loading import collect_problems, load_plan
from backfill_assets.plan.model import Duplicates, Execution, Plan
from backfill_assets.yaml_document import read_yaml_text
from tests.conftest import BIN, ROOT
from tests.plans import complete_plan, edited, write_plan
from tests.world import signers_text

HOOK = ROOT / "hooks" / "backfill-guard.sh"
PROBLEM = re.compile(r"^  - (?P<key>\S+) (?:= (?P<value>.+?)|is missing): (?P<fix>.+)$")

GRAPH_DEFS = "backfill_assets.demo.definitions"  # the days, their month and the report


def packaged_template() -> str:
    return resources.files("backfill_assets").joinpath("templates/backfill-plan.yaml").read_text("utf-8")


def problems_in(err: str) -> dict[str, str]:
    """The problem lines of a refused plan, by key, each as `  - key = value: fix`; each problem is
    exactly one line, and a plan with one problem is refused in one line: `backfill: PATH: problem`."""
    if len(err.splitlines()) == 1:
        line = err.splitlines()[0]
        assert line.startswith("backfill: ") and "problem(s)" not in line, err
        rest = line[len("backfill: "):]
        while ": " in rest:  # after the path (and "does not fit TABLE"): the problem
            rest = rest.split(": ", 1)[1]
            match = PROBLEM.match(f"  - {rest}")
            if match and "/" not in match["key"]:
                return {match["key"]: f"  - {rest}"}
        raise AssertionError(f"no `key = value: fix` problem in {line!r}")
    lines = [ln for ln in err.splitlines() if ln.startswith("  - ")]
    found = {}
    for line in lines:
        match = PROBLEM.match(line)
        assert match, f"not a `key = value: fix` line: {line!r}"
        assert match["key"] not in found, f"{match['key']} reported twice"
        found[match["key"]] = line
    count = re.search(r": (\d+) problem\(s\)$", err.splitlines()[0])
    assert count and int(count.group(1)) == len(lines), err
    return found


def comment_of(line: str) -> str | None:
    return line[line.index("#"):] if "#" in line else None


def filled_template() -> str:
    """The template with every TODO filled in by hand, the way a person edits it (comments kept)."""
    fills = {
        "plan_id: TODO": "plan_id: fix", "owner: TODO": "owner: olivia",
        "reason: TODO": "reason: refunds counted twice", "target: TODO": "target: daily_revenue",
        "start: TODO": "start: 2026-01-02", "end: TODO": "end: 2026-01-05",
        "source_of_truth: TODO": "source_of_truth: orders", "asset: TODO": "asset: published_revenue",
        "owners: [TODO]": "owners: [finance-bi]", "mode: TODO": "mode: overwrite",
        "idempotency: TODO": "idempotency: delete and insert per partition in one transaction",
        "proof_partitions: [TODO]": "proof_partitions: [2026-01-03]",
        "watermark: TODO": "watermark: the cursor stays put",
        "metrics_comparable: TODO": "metrics_comparable: one code version",
        "notify: [TODO]": "notify: ['#revenue']", "strategy: TODO": "strategy: restore the snapshots",
        "name: TODO": "name: net_revenue",
    }
    text = packaged_template()
    for old, new in fills.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new, 1)
    return text


# --- plan new ----------------------------------------------------------------------------------------


def test_plan_new_copies_the_packaged_template_byte_for_byte(tmp_path, run_subprocess):
    # a subprocess from an empty folder: the template comes from the installed package, not ./templates
    assert not (tmp_path / "templates").exists()
    result = run_subprocess("plan", "new", "plans/blank.yaml")
    assert result.code == 0, result.err
    written = (tmp_path / "plans" / "blank.yaml").read_text(encoding="utf-8")
    assert written == packaged_template()
    todo = len(collect_problems(read_yaml_text(written, "t"))[1])
    assert todo == 17
    assert f"wrote plans/blank.yaml; {todo} key(s) still to fill" in result.out


def test_plan_new_fills_the_given_fields_and_keeps_every_comment(tmp_path, run_cli, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no workspace.yaml, no dg project: no definitions to fill from
    path = tmp_path / "plans" / "fix.yaml"
    result = run_cli("plan", "new", str(path), "--id", "fix-1", "--target", "daily_revenue",
                     "--start", "2026-01-01", "--end", "2026-01-03", "--owner", "olivia")
    assert result.code == 0, result.err
    assert "12 key(s) still to fill" in result.out
    assert "not pre-filled from the definitions: no definitions to load" in result.out
    before, after = packaged_template().splitlines(), path.read_text(encoding="utf-8").splitlines()
    assert len(before) == len(after)
    changed = {b: a for b, a in zip(before, after, strict=True) if b != a}
    assert {b.split("#")[0].strip(): a.split("#")[0].strip() for b, a in changed.items()} == {
        "plan_id: TODO": "plan_id: fix-1", "owner: TODO": "owner: olivia",
        "target: TODO": "target: daily_revenue", "start: TODO": "start: 2026-01-01",
        "end: TODO": "end: 2026-01-03"}
    assert all(comment_of(b) == comment_of(a) for b, a in changed.items())
    document = read_yaml_text(path.read_text(encoding="utf-8"), "p")
    assert document["window"] == {"start": "2026-01-01", "end": "2026-01-03"}
    remaining = problems_in(run_cli("plan", "validate", str(path)).err)
    assert not {"plan_id", "owner", "target", "window.start", "window.end"} & set(remaining)
    assert {"reason", "execution.mode", "rollback.strategy"} <= set(remaining)


def test_plan_new_fills_what_the_spec_and_the_graph_answer(tmp_path, run_cli):
    path = tmp_path / "plans" / "fix.yaml"
    result = run_cli("plan", "new", str(path), "--id", "fix-1", "--target", "daily_revenue", "--start",
                     "2026-01-05", "--end", "2026-01-18", "--owner", "olivia", "--defs", GRAPH_DEFS)
    assert result.code == 0, result.err
    # the metrics every table of the graph declares: monthly_revenue has no `customers`, and a plan
    # naming it was approved, wrote the days, then halted at the month (found by a review)
    assert ("filled from the definitions: source_of_truth orders; gates.metrics (orders, gross, refunds, "
            "net_revenue); execution.proof_partitions [2026-01-05]; graph (monthly_revenue); "
            "downstream (revenue_report)") in result.out
    assert "8 key(s) still to fill" in result.out  # 12 without definitions
    document = read_yaml_text(path.read_text(encoding="utf-8"), "p")
    assert document["source_of_truth"] == "orders"
    assert [m["name"] for m in document["gates"]["metrics"]] == ["orders", "gross", "refunds", "net_revenue"]
    assert document["execution"]["proof_partitions"] == ["2026-01-05"]
    assert document["graph"] == [{"asset": "monthly_revenue", "window": {"start": "2026-01-01", "end": "2026-01-01"}}]
    assert document["downstream"] == [{"asset": "revenue_report", "owners": ["TODO"]}]
    # what is left is what only people know; filled, the plan fits the graph as drafted
    text = path.read_text(encoding="utf-8").replace("mode: TODO", "mode: overwrite").replace("TODO", "ops")
    path.write_text(text, encoding="utf-8")
    fits = run_cli("plan", "validate", str(path), "--defs", GRAPH_DEFS)
    assert fits.code == 0, fits.err
    assert "complete and fits daily_revenue" in fits.out and "graph     monthly_revenue 2026-01-01" in fits.out
    # a metric the target declares but a table of its graph does not: the graph's run could never pass
    path.write_text(text.replace("    - name: net_revenue\n", "    - name: net_revenue\n    - name: customers\n", 1),
                    encoding="utf-8")
    refused = run_cli("plan", "validate", str(path), "--defs", GRAPH_DEFS)
    assert refused.code == 1
    assert ("gates.metrics.name = 'customers': monthly_revenue, of the plan's graph, declares no such metric; "
            "keep the metrics every table of the graph declares: orders, gross, refunds, net_revenue") in refused.err


def test_a_downstream_asset_the_graph_does_not_hold_is_one_line(tmp_path, run_cli):
    path = tmp_path / "plans" / "fix.yaml"
    assert run_cli("plan", "new", str(path), "--id", "fix-1", "--target", "daily_revenue", "--start",
                   "2026-01-05", "--end", "2026-01-18", "--owner", "olivia", "--defs", GRAPH_DEFS).code == 0
    text = path.read_text(encoding="utf-8").replace("mode: TODO", "mode: overwrite").replace("TODO", "ops")
    path.write_text(text.replace("  - asset: revenue_report\n", "  - asset: revenue_report\n    owners: [ops]\n"
                                 "  - asset: revenue_reprot\n", 1), encoding="utf-8")
    refused = run_cli("plan", "validate", str(path), "--defs", GRAPH_DEFS)
    assert refused.code == 1
    assert ("downstream.1.asset = 'revenue_reprot': no such asset in the loaded definitions; name the asset key "
            "of a consumer (as the Dagster UI shows it)") in refused.err
    assert len([line for line in refused.err.splitlines() if "revenue_reprot" in line]) == 1
    # a consumer the graph holds, left out: its owners would not be told, so the plan is refused
    left_out = text.replace("  - asset: revenue_report\n", "  - asset: orders\n", 1)  # an asset, no consumer
    assert left_out != text
    path.write_text(left_out, encoding="utf-8")
    missing = run_cli("plan", "validate", str(path), "--defs", GRAPH_DEFS)
    assert missing.code == 1
    assert "revenue_report reads" in missing.err and "add `- {asset: revenue_report, owners: [...]}`" in missing.err


def test_plan_new_never_overwrites_and_refuses_values_that_would_inject_yaml(tmp_path, run_cli):
    path = tmp_path / "fix.yaml"
    path.write_text("mine\n")
    again = run_cli("plan", "new", str(path), "--id", "x")
    assert again.code == 2 and "already exists" in again.err
    assert path.read_text() == "mine\n"
    other = tmp_path / "other.yaml"
    injected = run_cli("plan", "new", str(other), "--owner", "olivia\napprovals: {required: 1}")
    assert injected.code == 2 and "is not a plain value" in injected.err
    assert len(injected.err.strip().splitlines()) == 1
    assert not other.exists()
    # an id no plan may have is refused here, not written for `plan validate` to refuse (found by an attack)
    bad_id = run_cli("plan", "new", str(other), "--id", "../../evil")
    assert bad_id.code == 2 and "--id '../../evil' is not a plan id" in bad_id.err, bad_id.err
    assert not other.exists()


# --- plan validate -----------------------------------------------------------------------------------


def test_validate_reports_every_problem_on_one_line_naming_key_value_and_fix(tmp_path, run_cli):
    doc = edited(complete_plan(), owner="TODO", rollback=None, execution__mode="upsert",
                 gates__row_count_parity={"max_diff_pct": 150})
    doc["window"]["timezone"] = "UTC"
    path = write_plan(tmp_path / "p.yaml", doc)
    result = run_cli("plan", "validate", str(path))
    assert result.code == 1 and result.out == ""
    assert result.err.splitlines()[0] == f"backfill: {path}: 5 problem(s)"
    found = problems_in(result.err)
    assert found == {
        "owner": "  - owner = 'TODO': still a placeholder; name the person who runs the backfill, as their "
                 "principal (e.g. olivia)",
        "rollback": "  - rollback is missing: required; give {strategy: ...}",
        "execution.mode": "  - execution.mode = 'upsert': Input should be 'overwrite', 'merge' or 'replay'; "
                          "use one of overwrite, merge, replay",
        "gates.row_count_parity.max_diff_pct":
            "  - gates.row_count_parity.max_diff_pct = 150: Input should be less than or equal to 100; "
            "give a percentage between 0 and 100",
        "window.timezone":
            "  - window.timezone = 'UTC': unknown key; remove it or check its spelling against "
            "templates/backfill-plan.yaml",
    }
    assert "Traceback" not in result.err


def test_the_fresh_template_names_every_todo_placeholder_and_nothing_else(tmp_path, run_cli):
    path = tmp_path / "blank.yaml"
    assert run_cli("plan", "new", str(path)).code == 0
    result = run_cli("plan", "validate", str(path))
    assert result.code == 1
    found = problems_in(result.err)
    assert set(found) == {
        "plan_id", "owner", "reason", "target", "window.start", "window.end", "source_of_truth",
        "downstream.0.asset", "downstream.0.owners.0", "execution.mode", "execution.idempotency",
        "execution.proof_partitions.0", "incremental.watermark", "incremental.metrics_comparable",
        "publish.notify.0", "rollback.strategy", "gates.metrics.0.name"}
    assert all("= 'TODO': still a placeholder; " in line for line in found.values())
    # a TODO inside a sentence is still a placeholder; one inside a word is not
    doc = edited(complete_plan(), reason="fix the TODO: explain", rollback__strategy="restore TODOS later")
    partial = problems_in(run_cli("plan", "validate", str(write_plan(tmp_path / "p.yaml", doc))).err)
    assert set(partial) == {"reason"}


@pytest.mark.parametrize(("where", "key", "value", "fix"), [
    ((), "notes", "x", "unknown key; remove it or check its spelling"),
    (("execution",), "max_concurent_partitions", 4, "unknown key"),
    (("execution",), "max_concurrent_partitions", 4, "renamed: use partitions_per_run"),
    (("gates", "metrics", 0), "tolerance", 1, "name the unit: tolerance_pct (percent) or tolerance_abs"),
    (("publish",), "Pause", True, "unknown key"),
])
def test_unknown_keys_are_errors_naming_the_dotted_key(tmp_path, run_cli, where, key, value, fix):
    doc = complete_plan()
    node = doc
    for step in where:
        node = node[step]
    node[key] = value
    result = run_cli("plan", "validate", str(write_plan(tmp_path / "p.yaml", doc)))
    assert result.code == 1
    dotted = ".".join(str(s) for s in (*where, key))
    assert problems_in(result.err)[dotted].startswith(f"  - {dotted} = {value!r}: {fix}")


@pytest.mark.parametrize("key", ["owner", "window", "window__end", "downstream", "execution__idempotency",
                                 "execution__proof_partitions", "gates__contract", "approvals__required",
                                 "publish__notify", "incremental"])
def test_a_missing_required_key_is_named_with_its_fix(tmp_path, run_cli, key):
    result = run_cli("plan", "validate", str(write_plan(tmp_path / "p.yaml", edited(complete_plan(),
                                                                                      **{key: None}))))
    assert result.code == 1
    dotted = key.replace("__", ".")
    assert problems_in(result.err) == {dotted: problems_in(result.err)[dotted]}
    assert problems_in(result.err)[dotted].startswith(f"  - {dotted} is missing: required; ")


def test_a_complete_plan_validates_and_names_its_hash(tmp_path, run_cli):
    path = write_plan(tmp_path / "p.yaml", complete_plan())
    result = run_cli("plan", "validate", str(path), "--defs", "backfill_assets.demo.daily")
    assert result.code == 0, result.err
    sha = plan_sha256(load_plan(path))
    assert f"complete and fits daily_revenue (plan revenue-refund-fix, sha256 {sha[:12]}, 6 partition(s))" \
        in result.out



def test_validate_treats_backfill_defs_as_it_treats_defs(tmp_path, run_cli, monkeypatch):
    """`--defs` / `BACKFILL_DEFS` are one setting (README, Configuration): `--defs` naming a module
    that does not import was one line, exit 2, while the same in BACKFILL_DEFS said the plan was
    complete, exit 0, and told the user to pass --defs (found by a review); a setting the definitions
    refuse names its own fix, not --defs."""
    monkeypatch.chdir(tmp_path)
    path = write_plan(tmp_path / "p.yaml", complete_plan())
    given = run_cli("plan", "validate", str(path), "--defs", "nosuch_module_x")
    assert given.code == 2 and "cannot import definitions module nosuch_module_x" in given.err, given
    monkeypatch.setenv("BACKFILL_DEFS", "nosuch_module_x")
    from_env = run_cli("plan", "validate", str(path))
    assert from_env.code == 2 and from_env.err == given.err, from_env
    monkeypatch.delenv("BACKFILL_DEFS")
    (tmp_path / "team_defs.py").write_text("from backfill_assets.demo.definitions import build_definitions\n"
                                           "defs = build_definitions()\n")  # built afresh: reads the setting
    (tmp_path / "workspace.yaml").write_text("load_from:\n  - python_file: team_defs.py\n")
    monkeypatch.setenv("BACKFILL_REOPEN_INTERVAL_SECONDS", "0")
    unchecked = run_cli("plan", "validate", str(path))
    assert "NOT checked against daily_revenue: BACKFILL_REOPEN_INTERVAL_SECONDS='0'" in unchecked.out, unchecked
    assert "pass --defs" not in unchecked.out and "unset it for 30" in unchecked.out, unchecked


UNREADABLE = {
    "missing": (None, "no such plan file"),
    "directory": ("dir", "is a directory"),
    "not-utf8": (b"plan_id: caf\xe9\n", "not UTF-8 (byte 12 on line 1)"),
    "malformed": (b"plan_id: x\nwindow:\n  start: [2026-01-01\n", "malformed YAML at line 4"),
    "empty": (b"", "the plan is empty"),
    "a-list": (b"- plan_id: x\n", "expected a mapping of plan keys at the top level, found list"),
}


@pytest.mark.parametrize("case", list(UNREADABLE))
def test_unreadable_plan_files_exit_2_with_one_line(tmp_path, run_cli, case):
    content, message = UNREADABLE[case]
    path = tmp_path / "plan.yaml"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    for command in (["plan", "validate"], ["guard"], ["plan", "show"]):
        result = run_cli(*command, str(path))
        assert result.code == 2, (command, result)
        assert result.err.count("\n") == 1 and result.err.startswith(f"backfill: {path}: "), result.err
        assert message in result.err and "Traceback" not in result.err
        assert result.out == ""


# --- guard and its hook --------------------------------------------------------------------------------


def hook(run_subprocess, plan: Path, home: Path, *extra: str, env: dict[str, str] | None = None):
    return run_subprocess(command=[str(HOOK), str(plan), "--home", str(home), *extra], env=env)


def guard(world, capsys, plan: Path) -> tuple[int, str]:
    capsys.readouterr()
    code = world.cli("guard", str(plan))
    return code, capsys.readouterr().out


def test_guard_checklist_and_exit_codes_and_the_sh_hook_gives_the_same(world, run_subprocess, capsys):
    draft = write_plan(world.root / "plans" / "draft.yaml", edited(complete_plan(plan_id="draft"),
                                                                    rollback__strategy="TODO"))
    code, out = guard(world, capsys, draft)
    assert code == 1
    assert out.startswith("Backfill checklist:\n- [ ] templates/backfill-plan.yaml drafted with owner and reason: "
                          "the plan does not validate yet\n")
    assert "- [ ] rollback strategy documented: rollback.strategy = 'TODO': still a placeholder" in out
    assert "- [ ] approvals captured: the plan does not validate yet" in out
    assert out.count("- [ ]") == 10 and "- [x]" not in out
    assert out.rstrip().endswith("REFUSED: 7 gating item(s) open; fix them and run the guard again")
    drafted = hook(run_subprocess, draft, world.home)
    assert (drafted.code, drafted.out) == (1, out)

    path = world.plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    code, out = guard(world, capsys, path)
    assert code == 1 and "- [ ] approvals captured: owner olivia has not signed; 0/2 approver signature(s)" in out
    assert "- [x] affected window and partitions bounded: 2026-01-01..2026-01-04, proof 2026-01-02" in out
    assert hook(run_subprocess, path, world.home).code == 1

    world.approve(path)
    code, out = guard(world, capsys, path)
    assert code == 0, out
    assert "- [x] approvals captured: owner olivia signed; 2/2 approver signature(s) counted (alice, bob)" in out
    assert "- [x] signatures counted under the team's trust root: the pinned trust root v1 " in out
    assert out.count("- [x]") == 8 and out.count("- [ ]") == 3  # execution items are not gating
    assert "- [ ] dry run or single-partition proof completed: not run yet: `backfill run PLAN --proof`" in out
    assert out.rstrip().endswith("ALLOWED: the plan is complete, fits its table, and is signed by enough "
                                 "approvers")
    allowed = hook(run_subprocess, path, world.home)
    assert (allowed.code, allowed.out, allowed.err) == (0, out, "")

    path.write_text(path.read_text().replace("end: '2026-01-04'", "end: '2026-01-05'"))
    code, out = guard(world, capsys, path)
    assert code == 1 and "0/2 approver signature(s) counted" in out and "(edited since it was signed)" in out
    assert hook(run_subprocess, path, world.home).code == 1

    broken = world.root / "plans" / "broken.yaml"
    broken.write_text("{unclosed")
    unreadable = hook(run_subprocess, broken, world.home)
    assert unreadable.code == 2 and unreadable.out == ""
    assert unreadable.err.count("\n") == 1 and "malformed YAML" in unreadable.err
    usage = run_subprocess(command=[str(HOOK)])
    assert usage.code == 2 and usage.err.startswith("usage: ")


def test_a_guard_that_cannot_find_the_table_refuses_instead_of_claiming_the_plan_fits(world, run_subprocess):
    path = world.approve(world.plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",)))
    # a CI job outside the project: no workspace.yaml in its folder, no BACKFILL_DEFS
    lost = hook(run_subprocess, path, world.home, env={"BACKFILL_DEFS": ""})
    assert lost.code == 1, lost
    assert "- [ ] plan checked against its table: not checked against daily_revenue: " in lost.out
    assert "pass --defs" in lost.out
    assert "ALLOWED" not in lost.out
    assert lost.out.rstrip().endswith("REFUSED: 1 gating item(s) open; fix them and run the guard again")
    found = hook(run_subprocess, path, world.home, "--defs", "backfill_assets.demo.daily",
                 env={"BACKFILL_DEFS": ""})
    assert found.code == 0 and "plan checked against its table" not in found.out, found
    assert found.out.rstrip().endswith("ALLOWED: the plan is complete, fits its table, and is signed by enough "
                                       "approvers")


def test_the_hook_finds_the_project_backfill_when_it_is_not_on_path(tmp_path, run_subprocess):
    plan = write_plan(tmp_path / "plan.yaml", complete_plan())
    bare = {"PATH": "/usr/bin:/bin", "BACKFILL_DEFS": ""}
    assert shutil.which("backfill", path=bare["PATH"]) is None
    result = run_subprocess(command=[str(HOOK), str(plan)], env=bare)
    assert result.code == 1 and "REFUSED" in result.out, result.err


# --- plan show ---------------------------------------------------------------------------------------


def test_show_summarises_a_long_window_and_its_proof_keys(tmp_path, run_cli):
    proof = tuple(f"2020-01-0{d}" for d in range(1, 9))
    path = write_plan(tmp_path / "p.yaml", complete_plan(start="2020-01-01", end="2026-01-01", proof=proof))
    result = run_cli("plan", "show", str(path))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert "window     2020-01-01..2026-01-01  (2,193 partitions)" in lines
    assert "proof      2020-01-01, 2020-01-02, 2020-01-03, ... 2020-01-07, 2020-01-08" in lines
    assert len(lines) == 11 and len(result.out) < 1800  # never one line per partition


@pytest.mark.separate_processes
def test_show_prints_the_hash_and_a_signing_command_that_ssh_keygen_runs(world, capsys, tmp_path):
    path = world.plan("fix", start="2026-01-01", end="2026-01-08", proof=("2026-01-02",))
    sha = plan_sha256(load_plan(path))
    capsys.readouterr()
    assert world.cli("plan", "show", str(path)) == 0
    out = capsys.readouterr().out
    assert f"sha256     {sha}\n" in out
    assert "window     2026-01-01..2026-01-08  (8 partitions)\n" in out
    assert "approvals  owner olivia has not signed; 0/2 approver signature(s) counted" in out
    # unsigned: the definitions are not loaded (a pull request's would run with the reviewer's rights)
    assert re.search(r"^signs      plan [0-9a-f]{12}; code \(not loaded: the definitions, which a pull request may "
                     r"change, load only once the plan's signatures count; `backfill plan statement` shows the code "
                     r"to sign\); warehouse wh-[0-9a-f]{16}; expires at most 14 day\(s\) after signing$",
                     out, re.M), out
    command = re.search(r"^to sign    (.+)$", out, re.MULTILINE).group(1)
    assert str(path) in command and "-n backfill-plan" in command

    # carol runs the printed command as is, with her key where the command expects it
    person = tmp_path / "carol-home"
    (person / ".ssh").mkdir(parents=True)
    shutil.copy(world.keys["carol"], person / ".ssh" / "id_ed25519")
    (person / ".ssh" / "id_ed25519").chmod(0o600)
    env = {**os.environ, "HOME": str(person), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "BACKFILL_HOME": str(world.home)}
    signed = subprocess.run(["bash", "-c", command], cwd=person, env=env, capture_output=True, text=True, timeout=60)
    assert signed.returncode == 0, signed.stderr
    assert world.cli("plan", "approve", str(path), "--by", "carol", "--signature", str(person / "statement.txt.sig"),
                     "--statement", str(person / "statement.txt")) == 0
    capsys.readouterr()
    assert world.cli("plan", "show", str(path)) == 0
    shown = capsys.readouterr().out
    assert "1/2 approver signature(s) counted (carol)" in shown and "  counted  carol (SHA256:" in shown


# --- the file keeps its comments and layout through approval -----------------------------------------

HANDWRITTEN = """\
# Replay of the refund double count (INC-4711).
# Reviewed in PR #88; do not reformat: reviewers diff this file.

plan_id: fix                       # the id
owner: olivia
reason: >                          # folded on purpose
  refunds were counted twice
  since the 2025-12 release
target: daily_revenue
window: {start: 2026-01-02, end: 2026-01-05}   # flow style, kept as written

approvals:
    required: 2        # two people other than olivia
    # the signed entries are appended below by `backfill plan approve`
    granted: []        # never by hand

# everything after the approvals block must stay where it is
source_of_truth: orders
downstream:
  - asset: published_revenue
    owners: ["finance-bi"]     # quoted
execution:
  mode: overwrite
  idempotency: 'delete and insert: one transaction per partition'
  proof_partitions: [2026-01-03]
incremental:
  watermark: cursor untouched
  metrics_comparable: one code version
publish: {freeze: true, notify: ["#revenue"]}
rollback:
  strategy: restore the snapshots
gates:
  row_count_parity: {max_diff_pct: 0}
  duplicates: {max_rows: 0}
  metrics:
    - name: net_revenue   # exact
  contract: {enforce: true}
# trailing comment, no newline at the end"""


def approve_file(world, text: str) -> tuple[str, str, list[str], list[str], int]:
    """Write the plan as given, have alice and bob approve it through the CLI; the text after, the
    plan's sha256, the lines before and after, and the index of the `granted:` line."""
    path = world.root / "plans" / "fix.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    sha = plan_sha256(load_plan(path))
    world.approve(path, "alice", "bob", owner=False)
    after = path.read_text(encoding="utf-8")
    before_lines = text.splitlines(keepends=True)
    at = next(i for i, ln in enumerate(before_lines) if ln.lstrip().startswith("granted:"))
    # the file is still the same plan, now approved by both
    assert plan_sha256(load_plan(path)) == sha
    assert [g.by for g in load_plan(path).approvals.granted] == ["alice", "bob"]
    return after, sha, before_lines, after.splitlines(keepends=True), at


@pytest.mark.parametrize("source", ["handwritten", "template"])
def test_comments_and_layout_survive_approval_byte_for_byte(world, source):
    text = HANDWRITTEN if source == "handwritten" else filled_template()
    after, sha, before_lines, after_lines, at = approve_file(world, text)
    indent = before_lines[at][: len(before_lines[at]) - len(before_lines[at].lstrip())]
    added = [i for i, ln in enumerate(after_lines) if ln.startswith(f'{indent}  - {{by: "')]
    assert len(added) == 2 and added[1] == added[0] + 1
    for i, who in zip(added, ("alice", "bob"), strict=True):
        assert after_lines[i].startswith(f'{indent}  - {{by: "{who}", at: "')
        assert f'plan_sha256: "{sha}"' in after_lines[i] and after_lines[i].count("\n") == 1
    kept = [ln for i, ln in enumerate(after_lines) if i not in added]
    # the `granted: []` line loses only its `[]`; every other byte, comments included, is as written
    assert kept[at] == f"{indent}granted:  {comment_of(before_lines[at])}"
    assert kept[:at] == before_lines[:at] and kept[at + 1:] == before_lines[at + 1:]
    assert [comment_of(ln) for ln in after_lines if comment_of(ln)] == \
        [comment_of(ln) for ln in before_lines if comment_of(ln)]


def test_approval_entries_go_right_under_granted_not_below_the_next_sections_comment(world):
    # HANDWRITTEN: `granted: []`, a blank line, then a top-level comment that opens the next section
    after, _sha, before_lines, after_lines, at = approve_file(world, HANDWRITTEN)
    assert after_lines[at + 1].lstrip().startswith('- {by: "alice"'), "".join(after_lines[at:at + 5])
    assert after_lines[at + 2].lstrip().startswith('- {by: "bob"')
    assert after_lines[at + 3:] == before_lines[at + 1:]


# --- the plan hash (issue 15) --------------------------------------------------------------------------

# complete_plan() as released: the hash of a plan already approved must never change with a release
PINNED_SHA = "bef7c33b06f6a7641cfb8cebdfc78a07880e1616247d3945b37c7723dd6dcdf2"


def sha_of(document) -> str:
    plan, problems = collect_problems(document)
    assert plan is not None, problems
    return plan_sha256(plan)


def test_the_hash_of_an_existing_plan_is_pinned_across_releases():
    assert sha_of(complete_plan()) == PINNED_SHA
    read_back = plan_from_canonical(canonical_text(Plan.model_validate(complete_plan())))
    assert plan_sha256(read_back) == PINNED_SHA


def _old_spelling(document: dict) -> dict:
    """A plan as release 0.2 wrote it: `checks:` for the gates, `publish.pause` for the freeze."""
    old = {("checks" if key == "gates" else key): value for key, value in document.items()}
    old["publish"] = {("pause" if key == "freeze" else key): value for key, value in document["publish"].items()}
    return old


def test_a_plan_in_the_old_spelling_loads_with_the_same_identity(tmp_path):
    old = _old_spelling(complete_plan())
    assert "checks" in old and "pause" in old["publish"]
    assert sha_of(old) == PINNED_SHA  # approvals signed over a 0.2 plan stay valid
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(old, sort_keys=False))
    assert plan_sha256(load_plan(path)) == PINNED_SHA


def test_both_spellings_of_a_renamed_key_are_refused_naming_the_one_to_keep():
    both = {**complete_plan(), "checks": complete_plan()["gates"]}
    both["publish"] = {**both["publish"], "pause": True}
    plan, problems = collect_problems(both)
    assert plan is None
    assert {(p.key, p.fix) for p in problems} == {
        ("checks", "the old spelling of gates, given too; keep only gates"),
        ("publish.pause", "the old spelling of publish.freeze, given too; keep only freeze")}


class ExecutionNextRelease(Execution):
    max_retries: int = 3
    retry_delay_seconds: float | None = None


class PlanNextRelease(Plan):
    execution: ExecutionNextRelease
    labels: list[str] | None = None
    audit_copy: Duplicates = Duplicates(max_rows=0)


def test_a_release_adding_optional_fields_with_defaults_keeps_the_hash_of_existing_plans():
    document = complete_plan()
    today = Plan.model_validate(document)
    tomorrow = PlanNextRelease.model_validate(document)
    assert isinstance(tomorrow.execution, ExecutionNextRelease) and tomorrow.execution.max_retries == 3
    assert plan_sha256(tomorrow) == plan_sha256(today) == PINNED_SHA
    # writing the new field's default changes nothing; using it is a change of meaning
    explicit = edited(document, execution__max_retries=3, labels=None)
    assert plan_sha256(PlanNextRelease.model_validate(explicit)) == PINNED_SHA
    used = edited(document, execution__max_retries=4)
    assert plan_sha256(PlanNextRelease.model_validate(used)) != PINNED_SHA
    assert plan_sha256(PlanNextRelease.model_validate({**document, "labels": ["q1"]})) != PINNED_SHA


def test_reindenting_recommenting_reordering_and_restyling_keep_the_hash():
    document = complete_plan()
    block = yaml.safe_dump(document, sort_keys=False)
    variants = [
        block,
        yaml.safe_dump(document, sort_keys=True, indent=4),
        yaml.safe_dump(document, default_flow_style=True, width=10_000),
        "# header comment\n" + block.replace("owner: olivia", "owner:    olivia   # the owner")
        .replace("mode: overwrite", "mode: 'overwrite'") + "# the end\n",
        block.replace("\n", "\r\n"),
        block.replace("owner: olivia", "owner: Olivia"),  # the same principal, canonically
        block.replace("max_diff_pct: 0", "max_diff_pct: 0.0"),
    ]
    for text in variants:
        assert sha_of(read_yaml_text(text, "p")) == PINNED_SHA, text


@pytest.mark.parametrize(("block", "key", "value"), [
    ("execution", "allow_empty_partitions", False),
    ("execution", "runs_at_once", 1),
    ("execution", "max_partitions_per_minute", None),
    ("execution", "business_keys", None),
    ("gates", "source_duplicates", {"max_rows": 0}),
    ("publish", "webhook_url", None),
    ("approvals", "granted", []),
])
def test_writing_a_default_explicitly_keeps_the_hash(block, key, value):
    document = complete_plan()
    document[block][key] = value
    assert sha_of(document) == PINNED_SHA


def test_allow_empty_partitions_false_written_in_the_file_keeps_the_hash():
    text = yaml.safe_dump(complete_plan(), sort_keys=False)
    assert "allow_empty_partitions" not in text
    explicit = text.replace("  partitions_per_run: 2\n",
                            "  partitions_per_run: 2\n  allow_empty_partitions: false\n")
    assert sha_of(read_yaml_text(explicit, "p")) == PINNED_SHA
    # and the default partitions_per_run, written or not, is one plan too
    without = edited(complete_plan(), execution__partitions_per_run=None)
    assert sha_of(without) == sha_of(edited(without, execution__partitions_per_run=30)) != PINNED_SHA


def test_signed_approvals_in_the_file_are_not_part_of_the_hash():
    document = complete_plan()
    document["approvals"]["granted"] = [{"by": "alice", "at": "2026-01-02T03:04:05Z",
                                         "plan_sha256": PINNED_SHA, "signature": "U1NIU0lH"}]
    assert sha_of(document) == PINNED_SHA


def test_a_metric_tolerance_written_as_its_default_keeps_the_hash():
    document = complete_plan()
    document["gates"]["metrics"][0].update(tolerance_pct=0, tolerance_abs=0.0)
    assert sha_of(document) == PINNED_SHA


CHANGES_OF_MEANING = {
    "window.end": {"window": {"start": "2026-01-01", "end": "2026-01-05"}},
    "mode": {"execution__mode": "merge"},
    "proof": {"execution__proof_partitions": ["2026-01-03"]},
    "per run": {"execution__partitions_per_run": 3},
    "allow empty": {"execution__allow_empty_partitions": True},
    "runs at once": {"execution__runs_at_once": 2},
    "throttle": {"execution__max_partitions_per_minute": 60},
    "business keys": {"execution__business_keys": ["order_date", "region"]},
    "threshold": {"gates__row_count_parity": {"max_diff_pct": 0.5}},
    "duplicates": {"gates__duplicates": {"max_rows": 1}},
    "source duplicates": {"gates__source_duplicates": {"max_rows": 1}},
    "metric tolerance": {"gates__metrics": [{"name": "net_revenue", "tolerance_abs": 0.05},
                                             {"name": "orders"}]},
    "metric dropped": {"gates__metrics": [{"name": "net_revenue"}]},
    "required": {"approvals__required": 3},
    "owner": {"owner": "oscar"},
    "reason": {"reason": "refunds were counted twice in daily_revenue since the 2025-11 release"},
    "notify": {"publish__notify": ["#revenue-consumers", "#finance"]},
    "webhook": {"publish__webhook_url": "https://hooks.example/notify"},
    "downstream": {"downstream": [{"asset": "published_revenue", "owners": ["finance-bi", "ceo"]}]},
    "rollback": {"rollback__strategy": "restore from the nightly backup"},
    "source": {"source_of_truth": "orders_v2"},
    "plan id": {"plan_id": "revenue-refund-fix-2"},
    "expect nothing to change": {"expect": {}},
    "expect a change": {"expect": {"changes": [{"name": "net_revenue"}]}},
    "expect its direction": {"expect": {"changes": [{"name": "net_revenue", "direction": "up"}]}},
    "expect a bound": {"expect": {"changes": [{"name": "net_revenue", "per_partition": {"max_pct": 5}}]}},
    "expect rows added": {"expect": {"rows_added": True}},
    "expect partitions": {"expect": {"partitions": ["2026-01-02"]}},
    "scenario": {"scenario": {"kind": "incident", "incident_id": "INC-1", "link": "https://x.example/INC-1"}},
    "scenario's id": {"scenario": {"kind": "incident", "incident_id": "INC-2", "link": "https://x.example/INC-1"}},
}


def test_any_change_of_meaning_changes_the_hash():
    hashes = {"base": PINNED_SHA}
    for name, change in CHANGES_OF_MEANING.items():
        hashes[name] = sha_of(edited(complete_plan(), **change))
    assert len(set(hashes.values())) == len(hashes), hashes


@pytest.mark.parametrize("spelling", ["gates", "checks"])
def test_a_metric_listed_twice_is_refused_in_either_spelling(spelling):
    document = complete_plan()
    metrics = document["gates"]["metrics"]
    document["gates"]["metrics"] = [*metrics, {**metrics[0], "tolerance_abs": 5}]  # the looser one would win
    if spelling == "checks":
        document = _old_spelling(document)
    plan, problems = collect_problems(document)
    assert plan is None
    assert [(p.key, p.value, p.fix) for p in problems] == [
        ("gates.metrics.name", metrics[0]["name"], "listed twice; keep one")]


def test_problems_of_a_plan_in_the_old_spelling_name_its_own_keys_once():
    document = _old_spelling(complete_plan())
    document["checks"]["bogus"] = 1
    document["checks"]["duplicates"]["max_rows"] = "TODO"
    document["publish"]["pause"] = False
    plan, problems = collect_problems(document)
    assert plan is None
    assert sorted((p.key, p.value) for p in problems) == [
        ("checks.bogus", 1), ("checks.duplicates.max_rows", "TODO"), ("publish.pause", False)]


def test_the_parser_built_once_a_process_carries_nothing_from_one_command_to_the_next():
    from backfill_assets.cli import build_parser

    parser = build_parser()
    assert build_parser() is parser
    signed = parser.parse_args(["--home", "/elsewhere", "rollback", "p1", "--sign", "alice=key", "--sign", "bob=k2"])
    bare = parser.parse_args(["rollback", "p1"])
    assert signed.sign == ["alice=key", "bob=k2"] and signed.home == "/elsewhere"
    assert bare.sign == [] and bare.signature == [] and getattr(bare, "home", None) is None


VERDICT = "ALLOWED: the plan is complete, fits its table, and is signed by enough approvers"
# a plan file's name, as a pull request may commit it: a line break, a forged verdict and summary,
# then ESC[8m, which conceals everything the terminal prints after it (the real checklists)
FORGED_NAME = f"fix\n{VERDICT}\n2 of 2 plan(s) allowed\x1b[8m $(touch pwned) .yaml"


def _checkout(tmp_path: Path, ssh_keys: dict[str, Path]) -> tuple[Path, Path, Path]:
    """A pull request's checkout with an unsigned plan under a file name of its choosing, another
    plan beside it, and the default branch's allowed_signers, as CI names it."""
    plans = tmp_path / "checkout" / "plans"
    write_plan(plans / "another.yaml", complete_plan(plan_id="another"))
    forged = write_plan(plans / FORGED_NAME, complete_plan(plan_id="fix"))
    signers = tmp_path / "default-branch" / "allowed_signers"
    signers.parent.mkdir()
    signers.write_text(signers_text(ssh_keys))
    return plans / "another.yaml", forged, signers


def test_a_plan_file_name_never_prints_a_forged_verdict_in_the_guard(tmp_path, ssh_keys, run_subprocess):
    """The guard printed each plan's file name as it is (`plans/*.yaml` in CI): a name holding a line
    break printed a forged ALLOWED line and summary for two unsigned plans, and ESC[8m concealed the
    real checklists and verdicts after it (found by an attack)."""
    another, forged, signers = _checkout(tmp_path, ssh_keys)
    env = {"BACKFILL_HOME": str(tmp_path / "ci-no-warehouse")}
    done = run_subprocess(command=[str(HOOK), str(another), str(forged), "--allowed-signers", str(signers)],
                          env=env, cwd=tmp_path / "checkout")
    assert done.code == 1, done
    assert "\x1b" not in done.out and VERDICT not in done.out.splitlines(), done.out
    assert "2 of 2 plan(s) allowed" not in done.out.splitlines()
    assert done.out.splitlines()[-1] == "0 of 2 plan(s) allowed", done.out
    assert done.out.count("REFUSED:") == 2


def test_plan_show_and_validate_print_a_plan_file_name_on_one_line_and_quoted_to_paste(tmp_path, ssh_keys,
                                                                                       run_subprocess):
    """`plan show` (a reviewer on a pull request's checkout) printed the file name as it is in its
    `to sign` and `then` commands: a name holding ESC and a line break put a forged line on the
    reviewer's screen, and `$(...)` in it ran as a command when the printed line was pasted; `plan
    validate` printed it first on its line (found by an attack)."""
    _, forged, signers = _checkout(tmp_path, ssh_keys)
    env = {"BACKFILL_HOME": str(tmp_path / "no-warehouse")}
    shown = run_subprocess("plan", "show", str(forged), "--allowed-signers", str(signers), env=env,
                           cwd=tmp_path / "checkout")
    assert shown.code == 0, shown
    assert "\x1b" not in shown.out and VERDICT not in shown.out.splitlines(), shown.out
    to_sign = next(line for line in shown.out.splitlines() if line.startswith("to sign"))
    # pasted into a shell, the printed command names the file and runs nothing else
    pasted = to_sign.removeprefix("to sign").strip().split(" && ")[0]
    where = tmp_path / "paste"
    where.mkdir()
    subprocess.run(["bash", "-c", "backfill() { printf '%s\\0' \"$@\"; }; " + pasted], cwd=where, timeout=30,
                   check=True)
    assert not (where / "pwned").exists()
    assert (where / "statement.txt").read_bytes().split(b"\0")[:4] == \
        [b"plan", b"statement", str(forged).encode(), b""], pasted
    validated = run_subprocess("plan", "validate", str(forged), env=env, cwd=tmp_path / "checkout")
    assert "\x1b" not in validated.out + validated.err, validated
    assert VERDICT not in validated.out.splitlines(), validated.out


def test_the_guard_exits_with_its_verdict_when_its_reader_leaves_early(tmp_path, ssh_keys):
    """The guard exited 0, "allowed", when the pipe it printed into closed before it finished (`| head`
    in a CI step): a pull request adding plans enough to fill the reader's lines had two unsigned
    plans pass a `set -o pipefail` job (found by an attack). Its exit code is the verdict, said or not."""
    another, forged, signers = _checkout(tmp_path, ssh_keys)
    for i in range(8):  # more than the first write's worth of output
        write_plan(another.parent / f"more-{i}.yaml", complete_plan(plan_id=f"more-{i}"))
    env = {**os.environ, "BACKFILL_HOME": str(tmp_path / "ci-no-warehouse"),
           "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    for reader in ("head -3", "true"):
        script = (f'set -o pipefail; "{HOOK}" plans/*.yaml --allowed-signers "{signers}" 2>/dev/null | {reader}; '
                  'echo "guard exited ${PIPESTATUS[0]}"')
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                              cwd=tmp_path / "checkout", timeout=300)
        assert done.stdout.splitlines()[-1] == "guard exited 1", (reader, done.stdout, done.stderr)


def test_a_home_committed_in_a_checkout_without_git_is_never_read_as_the_default_home(tmp_path, run_subprocess,
                                                                                     monkeypatch):
    """A pull request commits a whole home (warehouse, evidence key, a trust root listing its author's
    keys) at `./.backfill`, where the hook looks by default. In a git checkout the guard refuses it as
    tracked; in a checkout without `.git` (a tarball: actions/checkout's REST fallback where the job
    has no git, a build context that leaves `.git` out) git could not say, the home was read as a
    developer's own, and the bare hook said ALLOWED for a plan only the author signed (found by an
    attack). A home found by default where no git work tree can say what is committed is not read."""
    from tests.world import DEMO_DEFS

    monkeypatch.setenv("BACKFILL_DEFS", DEMO_DEFS)
    repo = tmp_path / "checkout"
    repo.mkdir()
    assert not any((p / ".git").exists() for p in (repo, *repo.parents))
    planted = _plant_signed_home(repo, tmp_path)
    env = {"BACKFILL_HOME": ""}  # unset: the hook's default home, ./.backfill of the checkout
    for command in ([str(HOOK), "plans/other.yaml"], [str(BIN / "backfill"), "plan", "show", "plans/other.yaml"]):
        shown = run_subprocess(command=command, env=env, cwd=repo)
        assert "ALLOWED" not in shown.out and "(approved)" not in shown.out, shown.out
        assert "no git work tree" in shown.out, shown.out
    # named explicitly, a home outside any work tree is the operator's choice, and it is read
    named = run_subprocess(command=[str(HOOK), "plans/other.yaml"], env={"BACKFILL_HOME": str(planted)}, cwd=repo)
    assert named.code == 0 and "ALLOWED" in named.out, named.out
    # in a git checkout, `.backfill` committed as a link to a home outside it (a self-hosted runner's
    # staging home, whose root lists test keys) resolved out of the work tree and was read too
    elsewhere = tmp_path / "staging-home"
    planted.rename(elsewhere)
    planted.symlink_to(elsewhere)
    for args in (["init", "-q"], ["add", "-f", ".backfill", "plans", "signers"], ["commit", "-q", "-m", "plans"]):
        subprocess.run(["git", "-c", "user.name=pr", "-c", "user.email=pr@example.com", *args], cwd=repo,
                       check=True, capture_output=True, timeout=60)
    linked = run_subprocess(command=[str(HOOK), "plans/other.yaml"], env=env, cwd=repo)
    assert linked.code == 1 and "ALLOWED" not in linked.out and "tracked by git" in linked.out, linked.out


def test_a_file_committed_under_the_default_home_never_switches_the_record_off(world, run_subprocess, tmp_path):
    """A CI job given the warehouse (BACKFILL_WAREHOUSE_URL) but not the evidence key runs the guard
    in the pull request's checkout with the default branch's files named: beside the record, a
    version the plan of record replaced is refused (its old signatures name no adoption). The pull
    request reverts the plan to v1 and commits any file under `./.backfill/`: the guard then read no
    record at all, counted v1's old signatures under the named files and said ALLOWED, while every run
    refuses v1 (found by an attack). A home holding files git tracks now refuses the verdict."""
    from tests.test_plan_replacement import _fix_version

    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    world.approve_replacing(_fix_version(world, "v2", "2026-01-03", "v2: three days"))
    repo = tmp_path / "checkout"
    (repo / "plans").mkdir(parents=True)
    (repo / "plans" / "fix.yaml").write_text(v1.read_text())  # v1, with its old signatures, from history

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=pr", "-c", "user.email=pr@example.com", *args], cwd=repo,
                       check=True, capture_output=True, timeout=60)

    git("init", "-q")
    git("add", "plans")
    git("commit", "-q", "-m", "revert the plan to v1")
    env = {"BACKFILL_HOME": "", "BACKFILL_WAREHOUSE_URL": f"duckdb:///{world.warehouse_path}"}
    signers = str(world.root / "approvers" / "allowed_signers")
    beside = run_subprocess(command=[str(HOOK), "plans/fix.yaml", "--allowed-signers", signers], env=env, cwd=repo)
    assert beside.code == 1 and "ALLOWED" not in beside.out, beside.out  # the record says what v1 must name
    (repo / ".backfill").mkdir()
    (repo / ".backfill" / "notes.txt").write_text("nothing\n")
    git("add", "-f", ".backfill")
    git("commit", "-q", "-m", "a file under the default home")
    switched = run_subprocess(command=[str(HOOK), "plans/fix.yaml", "--allowed-signers", signers], env=env, cwd=repo)
    assert switched.code == 1 and "ALLOWED" not in switched.out, switched.out
    assert "tracked by git" in switched.out, switched.out


def test_a_trust_file_option_given_twice_is_refused(tmp_path, ssh_keys):
    """A CI step gives the guard the changed plans through a plain `xargs`, after its own
    `--allowed-signers`: a pull request's file named `x.yaml --allowed-signers evil/allowed_signers`
    was split at its blanks, the later option won, and the guard counted the author's own keys as
    olivia's, alice's and bob's under the pull request's own file: ALLOWED (found by an attack). An
    option that names what the guard trusts, given twice, is misuse (exit 2)."""
    from backfill_assets.plan.approvals import append_approval_text, entry_of, plan_statement
    from backfill_assets.plan.loading import load_plan
    from backfill_assets.signing import sshsig
    from backfill_assets.signing.allowed_signers import AllowedSigners
    from backfill_assets.trust.policy import Policy
    from backfill_assets.trust.root import TrustRoot
    from tests.world import FIXED, make_keys

    repo = tmp_path / "checkout"
    theirs = make_keys(tmp_path / "theirs")  # the pull request's author's own keys
    (repo / "evil").mkdir(parents=True)
    (repo / "evil" / "allowed_signers").write_text(signers_text(theirs, ("olivia", "alice", "bob")))
    path = write_plan(repo / "plans" / "x.yaml", complete_plan(plan_id="x"))
    plan = load_plan(path)
    root = TrustRoot(0, "wh-anything", AllowedSigners.load(repo / "evil" / "allowed_signers"), Policy.default())
    for who in ("olivia", "alice", "bob"):
        statement = plan_statement(plan, root, FIXED.code_identity)
        signature = sshsig.one_line(sshsig.sign(statement.message, theirs[who]))
        path.write_text(append_approval_text(path.read_text(), entry_of(who, statement, signature)))
    (repo / "plans" / "x.yaml --allowed-signers evil").mkdir()
    (repo / "plans" / "x.yaml --allowed-signers evil" / "allowed_signers").write_text("# the split's last word\n")
    team = tmp_path / "default-branch" / "allowed_signers"
    team.parent.mkdir()
    team.write_text(signers_text(ssh_keys))
    env = {**os.environ, "BACKFILL_HOME": str(tmp_path / "ci-no-warehouse"),
           "BACKFILL_DEFS": "backfill_assets.demo.daily", "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    # what `git diff --name-only origin/main -- plans` prints, one name a line
    names = "plans/x.yaml\nplans/x.yaml --allowed-signers evil/allowed_signers\n"
    script = f'xargs backfill guard --allowed-signers "{team}"; echo "guard exited $?"'
    done = subprocess.run(["bash", "-c", script], input=names, capture_output=True, text=True, env=env, cwd=repo,
                          timeout=300)
    assert "ALLOWED" not in done.stdout, done.stdout
    assert done.stdout.splitlines()[-1] != "guard exited 0", done.stdout
    assert "--allowed-signers given twice" in done.stderr, done.stderr


def _git(repo, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=dev", "-c", "user.email=dev@example.com", *args], cwd=repo,
                   check=True, capture_output=True, timeout=60)


def test_a_default_home_linked_elsewhere_and_ignored_by_git_is_the_developers(tmp_path, run_subprocess,
                                                                              monkeypatch):
    """A developer's project is a git repo whose `.backfill` is a link, ignored by .gitignore, to the
    team's home elsewhere (a shared disk): the link resolved out of the work tree and the guard and plan
    show refused it as 'the default home of the current folder, in no git work tree', which it is
    not (found by a review). A link git does not track is the developer's; one git tracks (a pull
    request's) is still refused, named as tracked."""
    from backfill_assets.cli import main as cli_main
    from tests.world import DEMO_DEFS, make_keys

    monkeypatch.setenv("BACKFILL_DEFS", DEMO_DEFS)
    repo = tmp_path / "project"
    repo.mkdir()
    keys = make_keys(tmp_path / "keys")
    (tmp_path / "signers").write_text(signers_text(keys, ("olivia", "alice", "bob")))
    home = tmp_path / "shared" / "home"
    assert cli_main(["--home", str(home), "init", "--allowed-signers", str(tmp_path / "signers")]) == 0
    path = write_plan(repo / "plans" / "fix.yaml", complete_plan(plan_id="fix"))
    for who in ("olivia", "alice", "bob"):
        assert cli_main(["--home", str(home), "plan", "approve", str(path), "--by", who, "--key",
                         str(keys[who])]) == 0
    (repo / ".gitignore").write_text(".backfill\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".gitignore", "plans")
    _git(repo, "commit", "-q", "-m", "plans")
    (repo / ".backfill").symlink_to(home)
    env = {"BACKFILL_HOME": ""}  # the default home, ./.backfill
    shown = run_subprocess(command=[str(HOOK), "plans/fix.yaml"], env=env, cwd=repo)
    assert "no git work tree" not in shown.out, shown.out
    assert shown.code == 0 and "ALLOWED" in shown.out, shown.out
    show = run_subprocess(command=[str(BIN / "backfill"), "plan", "show",
                                   "plans/fix.yaml"], env=env, cwd=repo)
    assert "root       the pinned trust root" in show.out, show.out
    # the same link committed (a pull request's) is refused, and named as tracked
    _git(repo, "add", "-f", ".backfill")
    _git(repo, "commit", "-q", "-m", "link")
    tracked = run_subprocess(command=[str(HOOK), "plans/fix.yaml"], env=env, cwd=repo)
    assert tracked.code == 1 and "ALLOWED" not in tracked.out and "tracked by git" in tracked.out, tracked.out


def _pasted(word: str, tmp_path) -> bytes:
    where = tmp_path / "paste"
    where.mkdir(exist_ok=True)
    done = subprocess.run(["bash", "-c", f"printf '%s' {word}"], cwd=where, capture_output=True, timeout=30,
                          check=True)
    return done.stdout


def test_a_plan_path_with_a_leading_dash_is_pasted_as_a_file_not_an_option(tmp_path):
    """A plan file named `-x.yaml` (given as `-- -x.yaml`) was printed bare in plan show's commands
    to paste: `backfill plan statement -x.yaml` reads it as an option (found by a review). It is
    printed `./-x.yaml`."""
    from backfill_assets.cli.common import shell_word

    word = shell_word("-x.yaml")
    assert _pasted(word, tmp_path) == b"./-x.yaml", word  # a word bash passes on as a path, not an option
    assert shell_word("plans/x.yaml") == "plans/x.yaml"  # a plain path is still plain
    assert shell_word("/abs/-x.yaml") == "/abs/-x.yaml"


def test_a_plan_path_with_bytes_not_utf8_is_pasted_as_those_bytes(tmp_path):
    """A plan file whose name holds a byte that is not UTF-8 (a Latin-1 `\\xe9` from an old tool) was
    printed as bash `$'\\udce9'`, which names another file (found by a review); it is `\\xe9`."""
    from backfill_assets.cli.common import shell_word

    for raw in (b"plans/caf\xe9.yaml", b"plans/\xff\n.yaml"):
        name = os.fsdecode(raw)
        assert _pasted(shell_word(name), tmp_path) == raw, shell_word(name)
    for name in ("plans/a b.yaml", "plans/it's \"q\".yaml", "plans/é.yaml", "plans/数据.yaml", "plans/x\n\x1b[8m.yaml"):
        assert _pasted(shell_word(name), tmp_path) == name.encode(), shell_word(name)


def test_a_home_option_given_twice_is_refused(world, run_subprocess, tmp_path):
    """A CI job runs `backfill guard --home H --allowed-signers S` over the changed plans through a plain
    `xargs`: --allowed-signers given twice is refused since 358318e, --home was not. A pull request
    reverts its plan to a version the plan of record replaced and names a plan
    `fix.yaml --home plans`: split at its blanks, the later --home won, a folder with no warehouse,
    so the guard read no record and counted the old version's signatures under the job's files:
    ALLOWED, while every run refuses it (found by a review). The guard's and plan show's --home,
    given twice (after the command or before it), is misuse (exit 2)."""
    from tests.test_plan_replacement import _fix_version

    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    world.approve_replacing(_fix_version(world, "v2", "2026-01-03", "v2: three days"))
    repo = tmp_path / "checkout"
    (repo / "plans").mkdir(parents=True)
    (repo / "plans" / "fix.yaml").write_text(v1.read_text())
    signers = str(world.root / "approvers" / "allowed_signers")
    job = [str(BIN / "backfill"), "guard", "--home", str(world.home), "--allowed-signers", signers]
    env = {"BACKFILL_HOME": ""}
    alone = run_subprocess(command=[*job, "plans/fix.yaml"], env=env, cwd=repo)
    assert alone.code == 1 and "ALLOWED" not in alone.out, alone.out  # the record says what v1 must name
    for split in ([*job, "plans/fix.yaml", "--home", "plans"],
                  [str(BIN / "backfill"), "--home", str(world.home), "guard", *job[4:], "plans/fix.yaml",
                   "--home", "plans"],
                  [str(BIN / "backfill"), "plan", "show", "--home", str(world.home), "plans/fix.yaml",
                   "--home", "plans"]):
        done = run_subprocess(command=split, env=env, cwd=repo)
        assert done.code == 2 and "ALLOWED" not in done.out and "(approved)" not in done.out, (split, done)
        assert "--home given twice" in done.err and len(done.err.strip().splitlines()) == 1, done.err


def test_a_work_tree_git_cannot_read_names_the_fix(tmp_path, run_subprocess):
    """A developer's checkout that git cannot read (owned by another user: 'detected dubious
    ownership', a worktree whose main repository moved) holding the ignored default home: the guard
    refused, rightly, with git's first line alone, which names no fix (found by a review). The
    refusal names the ways out: let git read the work tree, or name a home outside it."""
    from backfill_assets.cli import main as cli_main
    from tests.world import make_keys

    repo = tmp_path / "project"
    home = repo / ".backfill"
    (tmp_path / "signers").write_text(signers_text(make_keys(tmp_path / "keys"), ("olivia", "alice", "bob")))
    assert cli_main(["--home", str(home), "init", "--allowed-signers", str(tmp_path / "signers")]) == 0
    path = write_plan(repo / "plans" / "fix.yaml", complete_plan(plan_id="fix"))
    (repo / ".git").write_text(f"gitdir: {tmp_path / 'moved'}\n")  # a worktree whose repository moved
    shown = run_subprocess(command=[str(HOOK), str(path.relative_to(repo))], env={"BACKFILL_HOME": ""}, cwd=repo)
    line = next(x for x in shown.out.splitlines() if "git cannot list" in x)
    assert shown.code == 1 and "safe.directory" in line and "BACKFILL_HOME" in line, shown.out


def test_a_checkout_without_git_inside_another_work_tree_is_not_read(tmp_path, run_subprocess, monkeypatch):
    """A pull request's tarball (no .git: actions/checkout's REST fallback, a downloaded archive)
    unpacked in a folder of another git work tree (the base branch's checkout, a runner's folder
    under git): its committed `.backfill` was untracked there, so git 'said' it was a developer's
    ignored home and the bare hook read the pull request's whole record: ALLOWED for a plan only the
    author's keys signed (found by a review). A default home whose folder holds no file git tracks
    is not read."""
    from tests.world import DEMO_DEFS

    monkeypatch.setenv("BACKFILL_DEFS", DEMO_DEFS)
    outer = tmp_path / "base"
    (outer / "src").mkdir(parents=True)
    (outer / "src" / "x.txt").write_text("base\n")
    _git(outer, "init", "-q")
    _git(outer, "add", "src")
    _git(outer, "commit", "-q", "-m", "base")
    repo = outer / "pr"
    repo.mkdir()
    _plant_signed_home(repo, tmp_path)
    env = {"BACKFILL_HOME": ""}
    for command in ([str(HOOK), "plans/other.yaml"], [str(BIN / "backfill"), "plan", "show", "plans/other.yaml"]):
        shown = run_subprocess(command=command, env=env, cwd=repo)
        assert "ALLOWED" not in shown.out and "(approved)" not in shown.out, shown.out
        assert "no file git tracks" in shown.out, shown.out


def _plant_signed_home(repo, tmp_path):
    """A pull request's own `.backfill` in `repo` (returned): a trust root of the author's keys, and
    plans/other.yaml signed by them as owner and both approvers."""
    from backfill_assets.cli import main as cli_main
    from tests.world import make_keys

    theirs = make_keys(tmp_path / "theirs")
    (repo / "signers").write_text(signers_text(theirs, ("olivia", "alice", "bob")))
    planted = repo / ".backfill"
    assert cli_main(["--home", str(planted), "init", "--allowed-signers", str(repo / "signers")]) == 0
    path = write_plan(repo / "plans" / "other.yaml", complete_plan(plan_id="other"))
    for who in ("olivia", "alice", "bob"):
        assert cli_main(["--home", str(planted), "plan", "approve", str(path), "--by", who, "--key",
                         str(theirs[who])]) == 0
    return planted

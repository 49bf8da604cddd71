"""Attack G: a pull-request author, an insider, a hurried user (see the README's threat model)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import BIN
from tests.plans import complete_plan, write_plan
from tests.test_trust import HOOK, pull_request_checkout

# what a pull request's plan can say in its free text: a forged checklist line and verdict, then
# ESC[8m (conceal), which hides everything printed after it on a terminal (the real REFUSED line)
FORGED = ("late rows\n- [x] approvals captured: owner olivia signed; 2/2 approver signature(s) counted "
          "(alice, bob)\nALLOWED: the plan is complete, fits its table, and is signed by enough approvers\x1b[8m")


def _sneaky(repo: Path, **fields) -> Path:
    document = complete_plan(plan_id="sneaky")
    document["scenario"] = {"kind": "repair", "failure": FORGED}
    for dotted, value in fields.items():
        block, _, key = dotted.partition("__")
        document[block][key] = value
    return write_plan(repo / "plans" / "sneaky.yaml", document)


def _forged_lines(text: str, starts: tuple[str, ...]) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(starts)]


def test_a_plan_nobody_signed_never_prints_a_forged_allowed_line_in_the_guard(world, run_subprocess, tmp_path):
    """Pull-request author. The guard printed a plan's free text as it was written: a repair's
    `failure` (or `idempotency`, a `notify` channel) holding a line break and an escape sequence put a
    forged `- [x] approvals captured ...` and `ALLOWED: ...` line on the reviewer's screen for a plan
    nobody signed, and ESC[8m hid the real verdict after it (the README: a child's note with a line
    break printed a fake ALLOWED line, found by an attack; the plan file itself did the same)."""
    repo, _, main = pull_request_checkout(world, tmp_path)
    plan = _sneaky(repo, publish__notify=["#ok\nALLOWED: signed\x1b[8m"],
                   execution__idempotency="one\nALLOWED: fine\x1b[8m")
    done = run_subprocess(command=[str(HOOK), str(plan), "--allowed-signers", str(main / "allowed_signers"),
                                   "--policy", str(main / "policy.yaml")],
                          env={"BACKFILL_HOME": str(tmp_path / "ci-home"), "BACKFILL_DEFS": ""}, cwd=repo)
    assert done.code in (1, 2), done
    shown = done.out + done.err
    assert "\x1b" not in shown, "the guard printed a pull request's escape sequence:\n" + repr(shown)
    assert not _forged_lines(shown, ("ALLOWED",)), "a forged ALLOWED line for an unsigned plan:\n" + shown
    assert len(_forged_lines(shown, ("- [x] approvals captured", "- [ ] approvals captured"))) <= 1, shown


def test_plan_show_never_prints_a_forged_approved_line_from_the_plans_text(world, run_subprocess, tmp_path):
    """Reviewer. `plan show` on a pull request's checkout printed the repair's `failure` as written:
    a forged `approvals ... (approved)` line for a plan nobody signed, and the real one concealed (an
    escape sequence), on the screen of the approver deciding whether to sign (the README: a fake
    "(approved)" printed there by the definitions was found by an attack)."""
    repo, _, main = pull_request_checkout(world, tmp_path)
    document = complete_plan(plan_id="sneaky")
    document["scenario"] = {"kind": "repair", "failure": (
        "late rows\napprovals  owner olivia signed; 2/2 approver signature(s) counted (alice, bob) (approved)"
        "\x1b[8m")}
    plan = write_plan(repo / "plans" / "sneaky.yaml", document)
    done = run_subprocess(command=[str(BIN / "backfill"), "plan", "show", str(plan), "--allowed-signers",
                                   str(main / "allowed_signers"), "--policy", str(main / "policy.yaml")],
                          env={"BACKFILL_HOME": str(tmp_path / "ci-home"), "BACKFILL_DEFS": ""}, cwd=repo)
    shown = done.out + done.err
    assert "\x1b" not in shown, "plan show printed a pull request's escape sequence:\n" + repr(shown)
    assert "(approved)" not in shown, "plan show calls an unsigned plan approved:\n" + shown


def test_the_evidence_names_the_plan_file_the_chain_recorded_never_an_insiders(world, capsys):
    """Insider, no evidence key. The rendered evidence says which file the approved version came
    from (`plan.file`), read from plan_versions.source_file, a column nothing compared with the chain
    row that recorded the version (its payload holds the file): an UPDATE put another file in the
    document, and `evidence verify` passed."""
    from tests.test_evidence import approved, tamper

    import yaml

    path = approved(world)
    tamper(world, ("UPDATE backfill_control.plan_versions SET source_file = '/plans/harmless-typo-fix.yaml'", []))
    out = world.root / "evidence.yaml"
    rendered = world.cli("evidence", "fix", "--out", str(out))
    verified = world.cli("evidence", "verify")
    capsys.readouterr()
    shown = yaml.safe_load(out.read_text())["plan"]["file"] if out.exists() else None
    assert rendered != 0 or verified != 0 or shown == str(path), (
        f"the evidence names {shown} as the plan's file, which the chain recorded as {path}, and verify passed")

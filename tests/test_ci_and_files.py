"""Attacks as a pull-request author in CI and as a hurried user with files, on the guard and the
commands around it (round `ci`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.plans import complete_plan, write_plan
from tests.test_hurried_user import unreadable_policy
from tests.world import signers_text

HOOK = Path(__file__).resolve().parents[1] / "hooks" / "backfill-guard.sh"
VERDICT = "ALLOWED: the plan is complete, fits its table, and is signed by enough approvers"


def _signed_by(path: Path, keys: dict[str, Path], signers: Path, who: tuple[str, ...]) -> Path:
    """The plan file signed offline by `who` under `signers` and the default policy."""
    from backfill_assets.plan.approvals import append_approval_text, entry_of, plan_statement
    from backfill_assets.plan.loading import load_plan
    from backfill_assets.signing import sshsig
    from backfill_assets.signing.allowed_signers import AllowedSigners
    from backfill_assets.trust.policy import Policy
    from backfill_assets.trust.root import TrustRoot
    from tests.world import FIXED

    plan = load_plan(path)
    root = TrustRoot(0, "wh-anything", AllowedSigners.load(signers), Policy.default())
    for name in who:
        statement = plan_statement(plan, root, FIXED.code_identity)
        signature = sshsig.one_line(sshsig.sign(statement.message, keys[name]))
        path.write_text(append_approval_text(path.read_text(), entry_of(name, statement, signature)))
    return path


STRICT_POLICY = """\
approvals:
  minimum: 3
  valid_days: 14
targets: []
groups: {}
trust_root:
  quorum: 2
"""


@pytest.mark.parametrize("kind", ["dangling symlink", "named pipe", "directory"])
def test_the_guard_never_counts_under_the_default_policy_over_a_policy_beside_it_cannot_read(
        tmp_path, ssh_keys, run_subprocess, kind):
    """`backfill guard PLAN --allowed-signers approvers/allowed_signers` (no --policy, no record) counts
    under the policy.yaml beside the file. When that name exists but is no readable file (a link into a
    checkout that moved, a pipe, a folder), the guard passed it over and counted under the default
    policy (2 approvers) instead of the team's 3: ALLOWED for a plan the team's policy refuses. `init`
    refuses the same file (test_hurried_user); the guard and `plan show` must not pass it over."""
    approvers = tmp_path / "approvers"
    approvers.mkdir()
    signers = approvers / "allowed_signers"
    signers.write_text(signers_text(ssh_keys))
    (tmp_path / "moved").mkdir()
    (tmp_path / "moved" / "policy.yaml").write_text(STRICT_POLICY)
    policy = approvers / "policy.yaml"
    unreadable_policy(policy, kind, tmp_path)
    plan = _signed_by(write_plan(tmp_path / "plans" / "fix.yaml", complete_plan(plan_id="fix")), ssh_keys, signers,
                      ("olivia", "alice", "bob"))
    env = {"BACKFILL_HOME": str(tmp_path / "ci-no-warehouse")}
    checked = run_subprocess(command=[str(HOOK), str(plan), "--allowed-signers", str(signers)], env=env,
                             timeout=120)
    assert checked.code != 0 and VERDICT not in checked.out, (checked.code, checked.out[-600:])
    assert "policy.yaml" in checked.out + checked.err, (checked.out[-600:], checked.err)
    shown = run_subprocess("plan", "show", str(plan), "--allowed-signers", str(signers), env=env, timeout=120)
    assert "(approved)" not in shown.out, shown.out


def test_plan_new_prints_the_file_name_on_one_line_and_quoted_to_paste(tmp_path, run_subprocess):
    """`plan new` printed the file's name as given, in its line and in the `backfill plan validate`
    command it asks to run: a name with a blank pasted as two arguments, one holding `$(...)` ran
    it when pasted, and one holding a line break and ESC printed a line of its own (README: a plan
    file's name is printed with escapes, quoted in a command to paste)."""
    import subprocess

    name = "my plan $(touch pwned)\n\x1b[8m.yaml"
    made = run_subprocess("plan", "new", name, "--id", "x", cwd=tmp_path)
    assert made.code == 0, made
    assert (tmp_path / name).is_file()
    assert "\x1b" not in made.out and len(made.out.splitlines()) == 1, made.out
    pasted = made.out.split("run `", 1)[1].rsplit("`", 1)[0]
    where = tmp_path / "paste"
    where.mkdir()
    done = subprocess.run(["bash", "-c", "backfill() { printf '%s\\0' \"$@\"; }; " + pasted], cwd=where,
                          capture_output=True, timeout=30, check=True)
    assert not (where / "pwned").exists(), pasted
    assert done.stdout.split(b"\0")[:3] == [b"plan", b"validate", name.encode()], (pasted, done.stdout)
    again = run_subprocess("plan", "new", name, "--id", "x", cwd=tmp_path)
    assert again.code == 2 and "\x1b" not in again.err and len(again.err.splitlines()) == 1, again


@pytest.mark.parametrize("command", [("plan", "show"), ("plan", "validate"), ("plan", "statement")])
def test_an_incomplete_plan_file_name_never_prints_a_forged_line_for_a_reviewer(tmp_path, run_subprocess, command):
    """A reviewer runs `backfill plan show` (or validate, statement) on a pull request's plan that is not
    complete yet: the refusal printed the file's name as it is, so a name holding a line break and
    ESC[8m put `approvals  2 of 2 counted (approved)` on a line of its own and concealed every problem
    after it (README: a plan file's name is printed with escapes)."""
    forged = "approvals  2 of 2 approver signature(s) counted (approved)"
    name = f"x.yaml: 0 problem(s)\n{forged}\n\x1b[8m"
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / name).write_text("plan_id: x\nowner: olivia\n")
    done = run_subprocess(*command, f"plans/{name}", env={"BACKFILL_HOME": str(tmp_path / "no-home")}, cwd=tmp_path)
    assert done.code in (1, 2), done
    assert "\x1b" not in done.out + done.err, done.err
    assert forged not in (done.out + done.err).splitlines(), done.err
    assert done.err.splitlines()[0].startswith("backfill: plans/x.yaml: 0 problem(s)\\n"), done.err


@pytest.mark.parametrize("saved_as", ["latin-1", "named pipe"])
def test_a_plan_file_changed_under_an_approval_after_its_commit_is_one_line_never_a_hang(world, monkeypatch,
                                                                                        saved_as):
    """`plan approve` commits the signature, then copies the record's signatures into the plan file.
    A hurried user's editor saved the file in between (in Latin-1), or the name came to be a named
    pipe: the copy read it whole as UTF-8, unbounded and blocking, so the command ended in an
    internal error (exit 3) over an approval that committed, or hung holding the table's turn. It is
    the one line saying the approval is recorded and the file was not updated."""
    import threading
    import time

    from backfill_assets import faults

    path = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    world.sign_into_file(path, "olivia")
    seen = faults.reached("approve.after_commit")
    monkeypatch.setenv(faults.STALL_ENV, f"approve.after_commit@{seen + 1}=60")
    codes: list[int] = []
    approving = threading.Thread(target=lambda: codes.append(
        world.cli("plan", "approve", str(path), "--by", "alice", "--key", str(world.keys["alice"]))))
    approving.start()
    deadline = time.monotonic() + 60
    while faults.reached("approve.after_commit") <= seen and time.monotonic() < deadline:
        time.sleep(0.02)
    text = path.read_text()
    path.unlink()
    if saved_as == "latin-1":
        path.write_bytes(text.replace("reason: ", "reason: café ", 1).encode("latin-1"))
    else:
        os.mkfifo(path)
    monkeypatch.setenv(faults.RELEASE_ENV, "approve.after_commit")
    approving.join(timeout=30)
    hung = approving.is_alive()
    if hung:  # let the blocked read go, so the test ends
        with open(path, "w") as writer:
            writer.write(text)
        approving.join(timeout=30)
    assert not hung, "plan approve hung reading a named pipe put where the plan file was"
    assert codes == [1], codes
    assert world.sql("SELECT count(*) FROM backfill_control.approvals WHERE principal = 'alice'") == [(1,)]


@pytest.mark.parametrize("kind", ["named pipe", "endless device"])
def test_a_pyproject_that_is_no_file_is_one_line_never_a_hang(tmp_path, run_subprocess, kind):
    """Without --defs, BACKFILL_DEFS or workspace.yaml, the definitions are the `dg` project's that
    `pyproject.toml` in the current folder names. A pull request's checkout (or a hurried user's)
    holding it as a named pipe, or a link to /dev/zero, had the command read it unbounded and
    blocking: `plan validate` hung (workspace.yaml beside it is read bounded and refused), and the guard's
    child for a signed plan with it, until its 600 s timeout."""
    import subprocess

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    plan = write_plan(checkout / "plans" / "fix.yaml", complete_plan(plan_id="fix"))
    if kind == "named pipe":
        os.mkfifo(checkout / "pyproject.toml")
    else:
        (checkout / "pyproject.toml").symlink_to("/dev/zero")
    try:
        done = run_subprocess("plan", "validate", str(plan), env={"BACKFILL_DEFS": ""}, cwd=checkout, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`plan validate` hung on a pyproject.toml that is a {kind}")
    # refused in one line, which validate reports as why the fit was not checked
    said = done.out + done.err
    assert f"pyproject.toml is a {'named pipe' if kind == 'named pipe' else 'character device'}" in said, done
    assert "NOT checked" in done.out and "fits" not in done.out and done.err == "", done


def test_status_names_the_recorded_plan_file_escaped_and_quoted_to_paste(world, cli):
    """`status` tells the team to sign the plan again when the code loaded is not the code its
    approvals name, with `backfill plan approve FILE` naming the file the approval recorded. That
    name (a pull request's, typed by an approver) was printed with its ESC as is, and its blanks
    folded to one (a command naming another file): ESC[8m concealed the rest of the operator's line."""
    import subprocess

    from tests.world import BUGGY

    path = world.root / "plans" / "fix  two\x1b[8m.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",)).read_text())
    world.approve(path)
    shown = cli("status", "fix", env={"BACKFILL_DEFS": str(world.defs_file(BUGGY))})
    assert shown.code in (0, 1), shown
    line = next(ln for ln in shown.out.splitlines() if "backfill plan approve " in ln)
    assert "\x1b" not in shown.out, line
    pasted = line.split("`backfill plan approve ", 1)[1].split(" --by", 1)[0]
    done = subprocess.run(["bash", "-c", f"printf '%s' {pasted}"], capture_output=True, timeout=30, check=True)
    assert done.stdout == str(path.resolve()).encode(), (pasted, done.stdout)

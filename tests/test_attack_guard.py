"""Attacks on the guard by a pull-request author in CI (and the reviewer's `plan show`).

Each test reproduces one attack through the product's own doors (the hook and the console script
as subprocesses, real ssh-keygen keys), then states what holds now.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import BIN, ROOT
from tests.plans import complete_plan, write_plan
from tests.world import signers_text

HOOK = ROOT / "hooks" / "backfill-guard.sh"
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
    from backfill_assets.cli import main as cli_main
    from tests.world import DEMO_DEFS, make_keys

    monkeypatch.setenv("BACKFILL_DEFS", DEMO_DEFS)
    repo = tmp_path / "checkout"
    repo.mkdir()
    assert not any((p / ".git").exists() for p in (repo, *repo.parents))
    theirs = make_keys(tmp_path / "theirs")
    (repo / "signers").write_text(signers_text(theirs, ("olivia", "alice", "bob")))
    planted = repo / ".backfill"
    assert cli_main(["--home", str(planted), "init", "--allowed-signers", str(repo / "signers")]) == 0
    path = write_plan(repo / "plans" / "other.yaml", complete_plan(plan_id="other"))
    for who in ("olivia", "alice", "bob"):
        assert cli_main(["--home", str(planted), "plan", "approve", str(path), "--by", who, "--key",
                         str(theirs[who])]) == 0
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
    assert linked.code == 1 and "ALLOWED" not in linked.out and "no git work tree" in linked.out, linked.out


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

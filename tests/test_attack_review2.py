"""Review of the guard round's fixes: false refusals and bypasses of the default home and the
commands printed for pasting."""

from __future__ import annotations

import os
import subprocess

from tests.conftest import BIN
from tests.plans import complete_plan, write_plan
from tests.test_plan_cli import HOOK
from tests.world import signers_text


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
    from backfill_assets.cli import main as cli_main
    from tests.world import DEMO_DEFS, make_keys

    monkeypatch.setenv("BACKFILL_DEFS", DEMO_DEFS)
    outer = tmp_path / "base"
    (outer / "src").mkdir(parents=True)
    (outer / "src" / "x.txt").write_text("base\n")
    _git(outer, "init", "-q")
    _git(outer, "add", "src")
    _git(outer, "commit", "-q", "-m", "base")
    repo = outer / "pr"
    repo.mkdir()
    theirs = make_keys(tmp_path / "theirs")
    (repo / "signers").write_text(signers_text(theirs, ("olivia", "alice", "bob")))
    planted = repo / ".backfill"
    assert cli_main(["--home", str(planted), "init", "--allowed-signers", str(repo / "signers")]) == 0
    path = write_plan(repo / "plans" / "other.yaml", complete_plan(plan_id="other"))
    for who in ("olivia", "alice", "bob"):
        assert cli_main(["--home", str(planted), "plan", "approve", str(path), "--by", who, "--key",
                         str(theirs[who])]) == 0
    env = {"BACKFILL_HOME": ""}
    for command in ([str(HOOK), "plans/other.yaml"], [str(BIN / "backfill"), "plan", "show", "plans/other.yaml"]):
        shown = run_subprocess(command=command, env=env, cwd=repo)
        assert "ALLOWED" not in shown.out and "(approved)" not in shown.out, shown.out
        assert "no file git tracks" in shown.out, shown.out

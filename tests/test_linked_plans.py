"""A pull-request author in CI: a plan file committed as a link out of the repository (round `ci`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import BIN, ROOT
from tests.plans import complete_plan, write_plan

HOOK = ROOT / "hooks" / "backfill-guard.sh"
SECRET = "Z2l0aHViLWJvdDpnaHBfU0VDUkVUVE9LRU4xMjM0NTY3ODkw"  # base64 of a registry login and token


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=pr", "-c", "user.email=pr@example.com", *args], cwd=repo,
                   check=True, capture_output=True, timeout=60)


def test_a_plan_linked_to_a_file_of_the_machine_never_prints_it_in_ci(run_subprocess, tmp_path):
    """The pull request commits `plans/x.yaml` as a symbolic link to a file of the CI machine
    (`~/.docker/config.json`, which a `docker login` step left, JSON and so YAML). `backfill plan
    validate` (and `plan show`) followed the link and printed the file's unknown key with its value,
    the registry's base64 login, into the job's public log (`auths = {'ghcr.io': {'auth':
    'Z2l0aHViLWJvdDpnaHBfU0VDUkVUVE9LRU4...`). A plan file that is a link out of its git work tree
    (or into its `.git`) is now refused in one line, unread; a link inside the work tree still
    reads (found by an attack)."""
    machine = tmp_path / "runner-home" / ".docker"
    machine.mkdir(parents=True)
    (machine / "config.json").write_text('{"auths": {"ghcr.io": {"auth": "' + SECRET + '"}}}\n')
    repo = tmp_path / "checkout"
    (repo / "plans").mkdir(parents=True)
    (repo / "plans" / "x.yaml").symlink_to(machine / "config.json")
    (repo / ".git-config-link.yaml").symlink_to(repo / ".git" / "description")
    (repo / "drafts").symlink_to(machine, target_is_directory=True)  # a folder linked out, not the file
    write_plan(repo / "archive" / "fix.yaml", complete_plan(plan_id="fix"))
    (repo / "plans" / "fix.yaml").symlink_to(Path("..") / "archive" / "fix.yaml")  # inside: the team's own
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "a plan")
    env = {"BACKFILL_HOME": str(tmp_path / "ci-home")}
    for command in ([str(BIN / "backfill"), "plan", "validate", "plans/x.yaml"],
                    [str(BIN / "backfill"), "plan", "show", "plans/x.yaml", "--allowed-signers", "/dev/null"],
                    [str(HOOK), "plans/x.yaml", "--allowed-signers", "/dev/null"],
                    [str(BIN / "backfill"), "plan", "validate", "drafts/config.json"]):
        shown = run_subprocess(command=command, env=env, cwd=repo)
        assert SECRET[:12] not in shown.out + shown.err, (command, shown.out, shown.err)
        assert shown.code == 2 and "link" in shown.err and "outside" in shown.err, (command, shown.out, shown.err)
        assert len(shown.err.strip().splitlines()) == 1, shown.err
    into_git = run_subprocess(command=[str(BIN / "backfill"), "plan", "validate", ".git-config-link.yaml"], env=env,
                              cwd=repo)
    assert into_git.code == 2 and ".git" in into_git.err, into_git.err
    inside = run_subprocess(command=[str(BIN / "backfill"), "plan", "validate", "plans/fix.yaml"], env=env, cwd=repo)
    assert inside.code == 0, (inside.out, inside.err)


def test_a_folder_linked_to_another_work_tree_of_the_machine_is_refused_too(run_subprocess, tmp_path):
    """The pull request commits `drafts` as a link to the root of another checkout on the runner (a
    repository an earlier job cloned, holding its own files). The work tree was looked for from the
    plan's path through the link, found at the other checkout's `.git`, and the file read as that
    tree's own: a link out of the work tree that holds the plan is refused wherever it leads."""
    other = tmp_path / "runner-work" / "deploy-secrets"
    other.mkdir(parents=True)
    (other / "config.json").write_text('{"auths": {"ghcr.io": {"auth": "' + SECRET + '"}}}\n')
    _git(other, "init", "-q")
    repo = tmp_path / "checkout"
    repo.mkdir()
    (repo / "drafts").symlink_to(other, target_is_directory=True)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "a plan")
    shown = run_subprocess(command=[str(BIN / "backfill"), "plan", "validate", "drafts/config.json"],
                           env={"BACKFILL_HOME": str(tmp_path / "ci-home")}, cwd=repo)
    assert SECRET[:12] not in shown.out + shown.err, (shown.out, shown.err)
    assert shown.code == 2 and "outside" in shown.err, (shown.out, shown.err)

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

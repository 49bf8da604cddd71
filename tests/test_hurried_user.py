"""A hurried user's faults, found by an attack (each test failed first): a named pipe or a folder
where the log file goes, a policy file beside allowed_signers that cannot be read, a load killed
between its write and its publish and then run again, commands started together on a new home, a
line break pasted into `--partitions`. Every command runs as a process of its own."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.conftest import BIN
from tests.world import keys, signers_text

pytestmark = pytest.mark.separate_processes  # the commands under test run as processes of their own

KILLED = -9


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("backfill: "), err
    assert "internal error" not in err, err
    return err


@pytest.mark.parametrize("kind", ["named pipe", "directory"])
def test_a_log_file_that_is_a_named_pipe_or_a_folder_is_one_line_never_a_hang(world, cli, kind):
    """`backfill run` appends Dagster's output to BACKFILL_HOME/logs/backfill.log: a named pipe there
    blocked the open forever (no reader), a folder there was an internal error (exit 3)."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    log = world.home / "logs" / "backfill.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if log.exists():
        log.unlink()
    os.mkfifo(log) if kind == "named pipe" else log.mkdir()
    try:
        done = cli("run", "fix", "--proof", timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`backfill run fix --proof` hung with {log} a {kind}")
    assert done.code == 2 and str(log) in one_line(done.err), done.err
    assert world.sql("SELECT count(*) FROM backfill_control.writes") == [(0,)]



def unreadable_policy(policy, kind: str, tmp_path) -> None:
    """A policy.yaml that is there but no readable file: a link into a checkout that moved, a named
    pipe, a folder."""
    if kind == "dangling symlink":
        policy.symlink_to(tmp_path / "moved-checkout" / "policy.yaml")
    elif kind == "named pipe":
        os.mkfifo(policy)
    else:
        policy.mkdir()

@pytest.mark.parametrize("kind", ["dangling symlink", "named pipe", "directory"])
def test_init_never_pins_the_default_policy_over_a_policy_file_it_cannot_read(tmp_path, ssh_keys, run_subprocess,
                                                                              kind):
    """`init --allowed-signers FILE` pins the policy.yaml beside FILE. When that name exists but is no
    readable file (a link into a checkout that moved, a pipe, a folder), it pinned the default policy
    (2 approvers, 14 days) instead, and `init` never replaces a root."""
    reviewed = tmp_path / "approvers"
    reviewed.mkdir()
    (reviewed / "allowed_signers").write_text(signers_text(ssh_keys))
    policy = reviewed / "policy.yaml"
    unreadable_policy(policy, kind, tmp_path)
    done = run_subprocess("init", "--allowed-signers", str(reviewed / "allowed_signers"), timeout=60)
    shown = run_subprocess("approvers", "show", timeout=60)
    assert done.code == 2 and "policy.yaml" in one_line(done.err), (done.code, done.err)
    assert "trust root v1" not in shown.out, shown.out


def test_a_killed_load_converges_when_run_again_publishing_what_it_wrote(world, cli):
    """A load killed after a ranged run's write committed (gated, passed) but before that run's
    publish left those partitions written and unpublished; the same load again refused them as
    history and `status` named nothing: no command put them in front of consumers."""
    span = ("--start", "2026-01-01", "--end", "2026-01-04", "--per-run", "2")
    killed = cli("load", "daily_revenue", *span, env={"BACKFILL_CRASH_AT": "write.after_commit@1"})
    assert killed.code == KILLED, killed.err
    assert [world.rows("daily_revenue", k) for k in keys(1, 2)] == [5, 5]  # written and gated
    assert [world.rows("published_revenue", k) for k in keys(1, 2)] == [0, 0]  # never published
    again = cli("load", "daily_revenue", *span)
    assert again.code == 0, again.err
    assert "2 partition(s) loaded before, gated and unchanged: not written again; 2 of them published now" \
        in again.err, again.err
    assert world.fingerprints("published_revenue", keys(1, 4)) == world.fingerprints("daily_revenue", keys(1, 4))
    assert [world.rows("published_revenue", k) for k in keys(1, 4)] == [5] * 4
    assert world.sql("SELECT count(*) FROM backfill_control.writes") == [(4,)]  # none written twice
    # and once more: nothing to do
    done = cli("load", "daily_revenue", *span)
    assert done.code == 0 and "nothing to load" in done.out, done


def test_commands_started_together_on_a_new_home_never_exit_3(tmp_path, ssh_keys, run_subprocess, cli_server):
    """`init` writes dagster.yaml, not Dagster's sqlite storage: the first commands to open the
    instance create its tables, and several at once raced (`table alembic_version already
    exists`, exit 3)."""
    from tests.conftest import BIN

    signers = tmp_path / "allowed_signers"
    signers.write_text(signers_text(ssh_keys))
    home = tmp_path / "home"
    assert run_subprocess("init", "--allowed-signers", str(signers)).code == 0
    env = {**os.environ, "BACKFILL_HOME": str(home), "PYTHONWARNINGS": "ignore",
           "BACKFILL_DEFS": "backfill_assets.demo.daily"}
    started = [cli_server.start([str(BIN / "backfill"), "status"], env, tmp_path) for _ in range(4)]
    ended = [(command.communicate(timeout=120), command.returncode) for command in started]
    bad = [(code, err.strip()) for (_, err), code in ended if code != 0]
    assert not bad, bad


def test_a_partitions_value_with_a_line_break_is_still_one_line(world, run_cli):
    """A key pasted with its line break (`--partitions "$(cat keys.txt)"`) was echoed as it was, so
    the one-line refusal became two lines, the second starting with whatever the value held. Line
    breaks separate keys as commas do."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    for command in ("diff", "run"):
        refused = run_cli(command, "fix", "--partitions", "2026-01-02\nbackfill: ALLOWED")
        assert refused.code == 2 and "backfill: ALLOWED are not in the window" in one_line(refused.err), refused.err
    listed = run_cli("run", "fix", "--partitions", "2026-01-02\n2026-01-03", "--dry-run")
    assert listed.code == 0 and "2026-01-02..2026-01-03" in listed.out, listed


def test_two_commands_at_once_in_one_process_leave_the_terminal_as_it_was(tmp_path, capfd):
    """Commands run in threads of one process (a test's, a notebook's): each redirected stdout to the
    log file and put back the streams it had found, so the first to end closed the log stream the
    other then put back: stdout was a closed file ("I/O operation on closed file", a test flaked
    under load). They share one redirection; the last to end puts the terminal back."""
    import sys
    import threading

    from backfill_assets import terminal
    from backfill_assets.home import Home

    before = sys.stdout
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with terminal.dagster_output(Home(tmp_path / "a")):
            first_in.set()
            assert second_in.wait(timeout=30)
        first_out.set()

    def second() -> None:
        assert first_in.wait(timeout=30)
        with terminal.dagster_output(Home(tmp_path / "b")):
            second_in.set()
            assert first_out.wait(timeout=30)
            print("from the second command, after the first ended")  # noqa: T201 - the log file

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sys.stdout is before and not sys.stdout.closed
    print("the terminal again")  # noqa: T201
    assert "the terminal again" in capfd.readouterr().out


@pytest.mark.parametrize("named", ["allowed_signers", "policy"])
@pytest.mark.parametrize("kind", ["named pipe", "directory", "missing"])
def test_the_guard_never_says_allowed_over_a_named_file_it_cannot_read(world, cli, named, kind):
    """`backfill guard PLAN --allowed-signers FILE [--policy FILE]` where the warehouse's pinned root
    can be read: a named file that cannot be read (a typo'd path, a pipe, a folder) was dropped
    without a word and the guard said ALLOWED under the pinned root, as if the file named agreed."""
    plan = world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    good = world.root / "approvers" / "allowed_signers"
    bad = world.root / f"bad-{named}"
    if kind == "named pipe":
        os.mkfifo(bad)
    elif kind == "directory":
        bad.mkdir()
    args = ["--allowed-signers", str(bad)] if named == "allowed_signers" else \
        ["--allowed-signers", str(good), "--policy", str(bad)]
    checked = cli("guard", str(plan), *args, timeout=60)
    assert checked.code != 0 and "\nALLOWED:" not in checked.out, (checked.code, checked.out[-800:])
    assert str(bad) in checked.out + checked.err, (checked.out[-800:], checked.err)
    # refused in one line (exit 2), or its checklist item names the fix: not a re-pin of a typo
    assert "re-pin" not in checked.out + checked.err, checked.out[-800:]
    assert checked.code == 2 or "name files that can be read" in checked.out, checked.out[-800:]


def test_a_run_a_rollback_got_in_between_stops_saying_so_not_to_approve_the_plan(world, cli):
    """A `backfill rollback` typed while a DuckDB `backfill run` holds the file gets in between two
    of its runs (as a pause does) and rolls the plan back, rightly. The run then launched its next
    Dagster run anyway, which the permission refused with "approve the plan (backfill plan approve)
    or name an active one": a rolled-back plan is never approved again, and a failed Dagster run was
    left in the UI. The run checked only for a hold between its runs; it stops at an ended plan too."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.test_faults import _first_run_held, _release_once_waited_for, dagster_runs, proven, written

    proven(world)  # 02..08 left, in four runs of two
    with ThreadPoolExecutor(2) as pool:
        running = _first_run_held(world, cli, pool)
        rolling = pool.submit(cli, "rollback", "fix")
        _release_once_waited_for(world, running, rolling)
        rolled, ran = rolling.result(), running.result()
    assert rolled.code == 0 and world.phase("fix") == "rolled_back", rolled.err[-1500:]
    assert ran.code == 1, (ran.out, ran.err)
    assert "plan fix was rolled_back while this run went: stopped before 2026-01-04" in ran.err, ran.err
    assert "backfill plan approve" not in ran.err + ran.out, ran.err
    failed = [r.run_id[:8] for r in dagster_runs(world) if r.is_failure]
    assert failed == [], f"a Dagster run was launched for the rolled-back plan and failed: {failed}"
    assert written(world) == {"2026-01-01", "2026-01-02", "2026-01-03"}
    assert world.rows("daily_revenue", "2026-01-02") == 0  # restored: empty before the plan



LOG_FULL_THEN_SAY = """
import logging, os, resource, sys
from pathlib import Path
from backfill_assets import terminal
from backfill_assets.home import Home
home, gap, limit = Path(sys.argv[1]), int(sys.argv[2]), 1 << 20
(home / "logs").mkdir(parents=True, exist_ok=True)
with open(home / "logs" / "backfill.log", "wb") as handle:
    handle.truncate(limit - gap)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    with terminal.dagster_output(Home(home)):
        logging.getLogger("dagster").error("a run failed: " + "z" * 300)
except OSError:
    pass
sys.stderr.write("backfill: the command's one line\\n")
"""


@pytest.mark.parametrize("gap", [0, 100])
def test_a_log_file_that_cannot_grow_leaves_a_failed_command_its_one_line(tmp_path, run_subprocess, gap):
    """A full disk: the log file's last bytes could not be written as a command put the terminal
    back, so the descriptors stayed on the log file and a failed `backfill publish` (on a small
    tmpfs, full) exited 1 with nothing on the terminal at all: its one line went into the full log.
    Here the log cannot grow past the file size limit (`ulimit -f`: EFBIG, as a full disk's ENOSPC),
    the redirection run alone: a limit below the warehouse's size can also corrupt the DuckDB file
    (see the report of this attack), so a whole command is not run under it."""
    import sys

    done = run_subprocess(command=[sys.executable, "-c", LOG_FULL_THEN_SAY, str(tmp_path / "home"), str(gap)],
                          timeout=120)
    assert done.code == 0 and one_line(done.err) == "backfill: the command's one line\n", (done.code, done.err)


@pytest.mark.parametrize("reader", ["2>/dev/null | true", "2>/dev/null | head -1", "2>&1 | head -1"])
def test_a_command_whose_reader_leaves_early_finishes_its_work_and_exits_with_its_own_code(world, reader):
    """`backfill run PLAN --and-publish | head -1` in a CI step: the reader left after a line, the
    command's next line raised a closed pipe, and the command stopped there, after the proof, exiting
    0, so a `set -o pipefail` step passed on a plan never published (found by an attack). Whether
    anyone reads it, a command does its work and exits with its own code (and `evidence verify` on a
    chain an insider cut still fails)."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}", "PYTHONWARNINGS": "ignore"}

    def piped(*args: str) -> int:
        script = f'set -o pipefail; backfill --home "{world.home}" {" ".join(args)} {reader}; ' \
                 'echo "exited ${PIPESTATUS[0]}"'
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=300)
        return int(done.stdout.splitlines()[-1].removeprefix("exited "))

    assert piped("run", "fix", "--and-publish") == 0
    assert world.phase("fix") == "published"
    world.run_sql("DELETE FROM backfill_control.evidence WHERE seq = (SELECT max(seq) FROM backfill_control.evidence)")
    assert piped("evidence", "verify") == 1


@pytest.mark.parametrize("hold", ["pause", "cancel"])
def test_a_hold_typed_while_a_long_range_run_goes_stops_it_at_its_next_transaction(world, monkeypatch, hold):
    """A team's UI backfill of a whole window in one Dagster run (a single-run backfill policy) writes
    it in transactions of PARTITIONS_PER_TRANSACTION partitions. A pause or cancel typed after its
    first transaction committed did not stop it: it wrote the rest of the window under the held plan
    (found by an attack). The next transaction refuses, naming the hold; what was written is whole."""
    import threading

    from backfill_assets import faults
    from backfill_assets.execution import write

    world.approved_plan("fix", start="2026-01-01", end="2026-01-08", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0
    monkeypatch.setattr(write, "PARTITIONS_PER_TRANSACTION", 2)  # the window's 7 partitions: 4 transactions
    monkeypatch.setenv(faults.STALL_ENV, "write.after_commit@1=60")
    before = faults.reached("write.after_commit")
    keys = [f"2026-01-0{d}" for d in range(2, 9)]
    done: list = []
    runner = threading.Thread(target=lambda: done.append(world.plan_run("fix", keys)))
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while faults.reached("write.after_commit") == before and runner.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert world.cli(hold, "fix") == 0
    finally:
        monkeypatch.setenv(faults.RELEASE_ENV, "write.after_commit")
        runner.join(timeout=120)
    assert done and not done[0].success
    written = world.sql("SELECT DISTINCT partition_key FROM backfill_control.writes WHERE plan_id = 'fix' "
                        "ORDER BY 1")
    assert [k for (k,) in written] == ["2026-01-01", "2026-01-02", "2026-01-03"]

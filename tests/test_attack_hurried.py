"""A hurried user on the embedded DuckDB default, attacked (each test failed first): what a command
given a file it cannot read, killed, or raced does."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.separate_processes  # the commands under test run as processes of their own


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("backfill: "), err
    assert "internal error" not in err, err
    return err


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


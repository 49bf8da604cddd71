"""Attack round 57: a hurried user on the PostgreSQL engine (many runs at once, the scale-out setup),
with real servers and real processes: kill -9 at statement points, sessions the server ends, two
commands at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)


def bf(world, tmp_path: Path, *args: str, env: dict[str, str] | None = None, wait: bool = True):
    """`backfill ARGS` as a process of its own on the world's home and warehouse."""
    full = {**os.environ, "PYTHONWARNINGS": "ignore", "BACKFILL_DEFS": "backfill_assets.demo.daily",
            "BACKFILL_HOME": str(world.home), "BACKFILL_WAREHOUSE_URL": world.url, **(env or {})}
    command = [str(Path(sys.executable).parent / "backfill"), "--home", str(world.home), *args]
    if not wait:
        return subprocess.Popen(command, env=full, cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    return subprocess.run(command, env=full, cwd=tmp_path, text=True, capture_output=True, timeout=300)


def _until(predicate, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("never reached")


def test_a_session_the_server_ends_between_an_approvals_transactions_is_one_line_not_an_internal_error(
        engine_world, tmp_path):
    """`backfill plan approve` committed the approval; before its next transaction (the plan file's
    update) an operator's `pg_terminate_backend` (or a server restart) ended its session. The command
    ended in `internal error: AdminShutdown ...` (a bug, with a traceback): the BEGIN the session sends
    itself was not turned into the one-line error its statements give. It now says in one line that
    PostgreSQL ended the session, that the open transaction committed nothing, and to run the command
    again, which then succeeds (found by an attack)."""
    from tests.pg_server import admin_sql
    from tests.world import OWNER

    world = engine_world
    path = world.plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    world.sign_into_file(path, OWNER, "alice")
    release = tmp_path / "release"
    stall = {"BACKFILL_STALL_AT": "approve.after_commit=120", "BACKFILL_STALL_RELEASE_FILE": str(release)}
    approve = ("plan", "approve", str(path), "--by", "bob", "--key", str(world.keys["bob"]))
    proc = bf(world, tmp_path, *approve, env=stall, wait=False)
    try:
        _until(lambda: proc.poll() is not None or world.phase() == "approved")
        admin_sql(world.url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                             "current_database() AND pid <> pg_backend_pid() AND application_name = 'backfill-assets'")
    finally:
        release.touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode not in (0, 3), (proc.returncode, err)
    assert err.count("\n") == 1 and "internal error" not in err and "committed nothing" in err, err
    status = bf(world, tmp_path, "status", "fix")
    assert status.returncode == 0 and "`backfill run fix --proof`" in status.stdout, status.stdout
    again = bf(world, tmp_path, *approve)
    assert again.returncode == 0, again.stderr
    assert bf(world, tmp_path, "evidence", "verify").returncode == 0


def test_a_lock_timeout_the_team_sets_is_one_line_when_a_control_table_is_busy_as_a_transaction_begins(
        engine_world, tmp_path):
    """The team set `lock_timeout` on the database (as the README invites); an operator's maintenance
    (`VACUUM FULL`, a schema change) held a control table (the run leases') while the hurried user typed `backfill pause
    fix`. Every transaction begins by locking the control tables, and that statement, sent by the
    session itself, ended the command in `internal error: LockNotAvailable` (a bug, with a traceback)
    where every other lock wait says in one line that it gave up waiting. It now does, says nothing
    was committed and to run it again, and once the table is free the pause goes through (found by
    an attack)."""
    import psycopg

    from tests.pg_server import admin_sql, as_admin

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    admin_sql(world.url, f"ALTER DATABASE \"{world.url.rsplit('/', 1)[1]}\" SET lock_timeout = '1s'")
    with psycopg.connect(as_admin(world.url)) as maintenance:  # its transaction holds the table
        maintenance.execute("LOCK TABLE backfill_control.leases IN ACCESS EXCLUSIVE MODE")
        busy = bf(world, tmp_path, "pause", "fix")
    assert busy.returncode not in (0, 3), (busy.returncode, busy.stderr)
    assert busy.stderr.count("\n") == 1 and "internal error" not in busy.stderr and "lock_timeout" in busy.stderr, \
        busy.stderr
    assert world.phase() == "approved" and world.sql(
        "SELECT hold FROM backfill_control.plans WHERE plan_id = 'fix'")[0][0] is None
    assert bf(world, tmp_path, "pause", "fix").returncode == 0
    assert bf(world, tmp_path, "evidence", "verify").returncode == 0

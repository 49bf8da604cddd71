"""Warehouse faults on each engine: a commit that fails for real, the stage table, lock waits."""

from __future__ import annotations

import contextlib
import struct

import pytest

from backfill_assets.errors import WarehouseError

pytestmark = pytest.mark.separate_processes  # other processes open the warehouse beside the test's


def _make_the_next_commit_fail(engine, session) -> None:
    """Inside `session`'s open transaction, a row whose commit fails: on PostgreSQL a deferred
    unique constraint checked at COMMIT, on DuckDB a second connection committing the same key first."""
    if engine.name == "postgresql":
        session.execute("SET CONSTRAINTS ALL DEFERRED")  # our transactions begin with them immediate
        session.execute("INSERT INTO t VALUES (1)")
        session.execute("INSERT INTO t VALUES (1)")  # deferred: accepted until COMMIT
        return
    session.execute("INSERT INTO t VALUES (1)")
    with engine.session() as other:
        other.execute("INSERT INTO t VALUES (1)")  # committed first: ours conflicts at COMMIT


def test_after_commit_actions_of_a_failed_commit_never_run(engine):
    ran: list[str] = []
    with engine.session() as session:
        session.execute("CREATE TABLE t (i INTEGER, CONSTRAINT t_once UNIQUE (i) DEFERRABLE INITIALLY DEFERRED)"
                        if engine.name == "postgresql" else "CREATE TABLE t (i INTEGER PRIMARY KEY)")
        with pytest.raises(WarehouseError, match="(?i)duplicate key|unique"):
            with session.transaction():
                _make_the_next_commit_fail(engine, session)
                session.after_commit(lambda: ran.append("a head for a row never committed"))
        with session.transaction():  # the write path retries on the same session
            session.execute("INSERT INTO t VALUES (2)")
            session.after_commit(lambda: ran.append("committed"))
        assert ran == ["committed"]
        assert session.rows("SELECT i FROM t ORDER BY i") == ([(1,), (2,)] if engine.name == "duckdb" else [(2,)])


def test_a_users_own_backfill_stage_table_survives_every_write(engine_world):
    from tests.world import keys

    world = engine_world
    world.run_sql("CREATE TABLE backfill_stage (note VARCHAR)")
    world.run_sql("INSERT INTO backfill_stage VALUES ('the team keeps this')")
    assert world.materialize(keys(1, 2)).success  # a plan-free write of empty partitions stages them
    assert world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0
    assert world.sql("SELECT note FROM backfill_stage") == [("the team keeps this",)]


SENSOR = "daily_revenue__reopen_publish"


def _tick(world):
    import dagster as dg

    from backfill_assets.defs.resources import WarehouseResource

    defs = world.defs()
    context = dg.build_sensor_context(instance=world.instance, definitions=defs,
                                      resources={"warehouse": WarehouseResource(home=str(world.home))})
    return defs.resolve_sensor_def(SENSOR).evaluate_tick(context)


def _hold_the_warehouse(world):
    """Another process holding the DuckDB file, or another PostgreSQL session holding the plans
    table, until the returned callable releases it; returns once the lock is held (a barrier)."""
    import subprocess
    import sys

    if world.url is None:
        holder = subprocess.Popen(
            [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('held', flush=True); "
                                   "sys.stdin.read()", str(world.warehouse_path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"

        def release():
            holder.stdin.close()
            holder.wait(timeout=30)
        return release
    import psycopg

    con = psycopg.connect(world.url, autocommit=True)
    con.execute("BEGIN")
    con.execute("LOCK TABLE backfill_control.plans IN ACCESS EXCLUSIVE MODE")
    return con.close


def test_the_sensor_says_busy_only_while_a_lock_is_held(engine_world, monkeypatch):
    from backfill_assets.defs import sensor

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    monkeypatch.setattr(sensor, "SENSOR_LOCK_WAIT_SECONDS", 0.5)  # a setting, kept short for the test
    release = _hold_the_warehouse(world)
    try:
        tick = _tick(world)
    finally:
        release()
    assert not tick.run_requests
    assert tick.skip_message.startswith("warehouse busy, retrying next tick"), tick.skip_message


def test_a_sensor_tick_that_hits_another_error_fails_naming_it(engine_world):
    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    world.run_sql("DROP TABLE backfill_control.leases")
    with pytest.raises(Exception, match="leases") as raised:
        _tick(world)
    assert "busy" not in str(raised.value)


def test_a_lock_wait_is_its_own_error_type_on_each_engine(engine_world):
    from backfill_assets.errors import LockWaitTimeout

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    release = _hold_the_warehouse(world)
    try:
        with pytest.raises(LockWaitTimeout):
            with world.warehouse().session(wait_seconds=0.3) as session:
                session.rows("SELECT count(*) FROM backfill_control.plans")
    finally:
        release()


def _other_process_opens(path) -> bool:
    import subprocess
    import sys

    probe = ("import duckdb, sys\ntry:\n    duckdb.connect(sys.argv[1]).close()\nexcept duckdb.IOException:\n"
             "    sys.exit(3)\n")
    return subprocess.run([sys.executable, "-c", probe, str(path)], timeout=60).returncode == 0


def test_a_kept_database_is_held_only_while_kept_and_never_after_release(tmp_path):
    """`kept_open` keeps a command's DuckDB database loaded between its sessions (the file locked
    meanwhile); `release_kept` (before a notice's receiver is waited on) and the end of the
    outermost use let it go, and nothing is kept again until that end."""
    from backfill_assets.warehouse import kept_open, release_kept
    from backfill_assets.warehouse.duckdb_engine import DuckDBEngine

    path = tmp_path / "w.duckdb"
    engine = DuckDBEngine(path)
    with engine.session() as session:
        session.execute("CREATE TABLE t (a INTEGER)")
    assert _other_process_opens(path)
    with kept_open():
        with engine.session(read_only=True) as session:  # read first: loaded once, for writing
            assert session.rows("SELECT count(*) FROM t") == [(0,)]
        assert not _other_process_opens(path)
        with kept_open():  # nested: the outermost use decides
            with engine.session() as session:
                session.execute("INSERT INTO t VALUES (1)")
        assert not _other_process_opens(path)
        release_kept()
        assert _other_process_opens(path)
        with engine.session() as session:  # after a release, sessions open and close again
            session.execute("INSERT INTO t VALUES (2)")
        assert _other_process_opens(path)
    assert _other_process_opens(path)
    with engine.session(read_only=True) as session:
        assert session.rows("SELECT count(*) FROM t") == [(2,)]


def _waiter(path, statement: str):
    """Another process that opens the DuckDB file (waiting up to 60 s for it) and runs `statement`."""
    import subprocess
    import sys

    script = ("import sys\nfrom backfill_assets.warehouse.duckdb_engine import DuckDBEngine\n"
              "with DuckDBEngine(sys.argv[1]).session(wait_seconds=60) as s:\n"
              "    s.execute(sys.argv[2])\n")
    return subprocess.Popen([sys.executable, "-c", script, str(path), statement])


def test_a_kept_database_lets_a_waiting_process_in_between_two_steps(tmp_path):
    """A process waiting for the file leaves its pid beside it; the holder (a run between two
    waves) sees it, closes the file until the waiter has it, and keeps it again afterwards. A dead
    waiter's mark is removed, not waited for."""
    import time

    from backfill_assets.warehouse import kept_open
    from backfill_assets.warehouse.duckdb_engine import DuckDBEngine

    path = tmp_path / "w.duckdb"
    engine = DuckDBEngine(path)
    waiting = tmp_path / "w.duckdb.waiting"
    waiting.mkdir()
    (waiting / "999999999").touch()  # a pid no process has: a waiter killed while it waited
    with kept_open():
        with engine.session() as session:
            session.execute("CREATE TABLE t (a INTEGER)")
        assert engine.waiters() == [] and not (waiting / "999999999").exists()
        assert engine.yield_to_waiters() is False  # none waits: the file stays held
        assert not _other_process_opens(path)
        child = _waiter(path, "INSERT INTO t VALUES (2)")
        deadline = time.monotonic() + 60
        while engine.waiters() != [child.pid]:
            assert time.monotonic() < deadline and child.poll() is None, "the waiter never announced itself"
            time.sleep(0.05)
        assert engine.yield_to_waiters() is True
        with engine.session() as session:  # waits for the waiter's session to end
            assert session.rows("SELECT a FROM t") == [(2,)]
            session.execute("INSERT INTO t VALUES (3)")
        assert child.wait(timeout=60) == 0
        assert not _other_process_opens(path)  # kept again
    assert not waiting.exists()  # the last waiter took its mark and the folder with it
    assert _other_process_opens(path)


def test_a_planted_waiting_mark_neither_slows_a_holder_nor_leads_a_waiter_elsewhere(tmp_path):
    """Someone who can write the home plants a mark for a live process that waits for nothing (it
    goes stale: a waiter renews its mark at every poll), or points the folder elsewhere (a waiter
    never follows it)."""
    import os
    import time

    from backfill_assets.warehouse import kept_open
    from backfill_assets.warehouse.duckdb_engine import DuckDBEngine

    path = tmp_path / "w.duckdb"
    engine = DuckDBEngine(path)
    waiting = tmp_path / "w.duckdb.waiting"
    waiting.mkdir()
    planted = waiting / str(os.getppid())  # alive, and waits for no warehouse
    planted.touch()
    old = time.time() - 30
    os.utime(planted, (old, old))
    assert engine.waiters() == []
    started = time.monotonic()
    assert engine.yield_to_waiters() is False
    assert time.monotonic() - started < 0.5
    planted.unlink()
    waiting.rmdir()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    waiting.symlink_to(elsewhere)
    with kept_open():
        with engine.session() as session:
            session.execute("CREATE TABLE t (a INTEGER)")
        child = _waiter(path, "CREATE TABLE u (a INTEGER)")
        time.sleep(1.5)  # it polls the lock meanwhile
        assert list(elsewhere.iterdir()) == [] and engine.waiters() == []
    assert child.wait(timeout=60) == 0  # it got in once the holder ended


def test_waiting_marks_planted_as_pipes_odd_names_or_future_times_neither_hang_nor_stall(tmp_path):
    """A named pipe where a waiter's mark goes (it would block the waiter, and the run once it waits
    itself), names a pid cannot have, and a mark dated ahead (never stale) are all nothing."""
    import os
    import subprocess
    import sys
    import time

    from backfill_assets.errors import LockWaitTimeout
    from backfill_assets.warehouse.duckdb_engine import DuckDBEngine

    path = tmp_path / "w.duckdb"
    engine = DuckDBEngine(path)
    waiting = tmp_path / "w.duckdb.waiting"
    waiting.mkdir()
    for name in ("\u00b2", "99999999999999999999", "0", "-1"):
        (waiting / name).touch()
    future = waiting / str(os.getppid())  # a live process, dated ten years ahead
    future.touch()
    ahead = time.time() + 10 * 365 * 86400
    os.utime(future, (ahead, ahead))
    assert engine.waiters() == []
    os.mkfifo(waiting / str(os.getpid()))  # where this process's own mark will go
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time\nc = duckdb.connect(sys.argv[1])\n"
                               "print('held', flush=True)\ntime.sleep(60)\n", str(path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(LockWaitTimeout):  # waited its limit, never blocked on the pipe
            with engine.session(wait_seconds=1.0):
                pass
        assert time.monotonic() - started < 10
    finally:
        holder.kill()
        holder.wait()


def test_a_waiting_mark_never_leads_a_waiter_to_touch_or_remove_a_file_elsewhere(tmp_path):
    """The folder swapped for a symlink after a waiter's first mark: its renewals and its removal
    stay in the folder it opened."""
    import time

    from backfill_assets.warehouse import kept_open
    from backfill_assets.warehouse.duckdb_engine import DuckDBEngine

    path = tmp_path / "w.duckdb"
    engine = DuckDBEngine(path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with kept_open():
        with engine.session() as session:
            session.execute("CREATE TABLE t (a INTEGER)")
        child = _waiter(path, "INSERT INTO t VALUES (1)")
        waiting = tmp_path / "w.duckdb.waiting"
        deadline = time.monotonic() + 60
        while engine.waiters() != [child.pid]:
            assert time.monotonic() < deadline and child.poll() is None, "the waiter never announced itself"
            time.sleep(0.05)
        precious = elsewhere / str(child.pid)
        precious.write_text("precious")
        waiting.rename(tmp_path / "moved")
        waiting.symlink_to(elsewhere)
        time.sleep(1.2)  # a few of the waiter's polls
        assert precious.read_text() == "precious" and engine.waiters() == []
    assert child.wait(timeout=60) == 0
    assert precious.read_text() == "precious"


def test_a_command_lets_the_warehouse_go_when_it_ends(world):
    assert world.cli("status") == 0
    assert _other_process_opens(world.warehouse_path)


def test_reading_commands_read_beside_another_reader(world, monkeypatch, capfd):
    """A reading command opens the warehouse to read, as asked, also now that writing commands keep
    theirs open: another process reading it (a consumer's `duckdb -readonly`, a BI tool) never makes
    it wait (found by review: a kept session opened for writing waited out the lock and failed)."""
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys\ncon = duckdb.connect(sys.argv[1], "
                               "read_only=True)\nprint('ready', flush=True)\nsys.stdin.readline()\n",
                               str(world.warehouse_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "ready\n"
        monkeypatch.setenv("BACKFILL_LOCK_WAIT_SECONDS", "2")
        for command in (("status",), ("approvers", "show"), ("evidence", "verify")):
            capfd.readouterr()
            assert world.cli(*command) == 0, (command, capfd.readouterr())
    finally:
        holder.communicate("\n", timeout=30)


def test_a_file_of_the_home_pointing_at_the_warehouse_stops_the_command_before_it_trusts_or_writes(world):
    """Found by an attack: DuckDB locks its file with a POSIX record lock, which a process loses when
    it closes any descriptor of that file. An insider who can write the home (DuckDB makes its WAL
    there) pointed the log file at the warehouse: a command opened and closed it around its runs,
    went on believing no other process could write the database (what it checked is remembered on
    that belief, `Session.memo_while_locked`), and another process wrote it meanwhile. Now the lock is looked up
    before anything remembered is trusted and before each commit: lost, one line, nothing written."""
    import os

    from backfill_assets import terminal
    from backfill_assets.control import evidence_log
    from backfill_assets.home import Home

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    home = Home(world.home)
    orders = world.sql("SELECT count(*) FROM orders")[0][0]
    home.log_file.parent.mkdir(parents=True, exist_ok=True)
    home.log_file.unlink(missing_ok=True)
    os.symlink(world.warehouse_path, home.log_file)  # planted while no command held the file
    with world.warehouse().session() as session:
        evidence_log.check_index(session)
        assert session.memo_while_locked() is not None
        with pytest.raises(WarehouseError, match="is the warehouse"):
            terminal.log_file(home)  # said up front where the log is opened
        os.close(os.open(world.warehouse_path, os.O_RDONLY))  # what opening and closing it did
        with pytest.raises(WarehouseError, match="lost its lock on the warehouse"):
            session.memo_while_locked()
        with pytest.raises(WarehouseError, match="lost its lock on the warehouse"), session.transaction():
            session.execute("INSERT INTO orders SELECT * FROM orders LIMIT 1")
    home.log_file.unlink()
    world.warehouse().engine.let_go()  # the test's kept database (the fixture's) goes too, as a command's ends
    with world.warehouse().session() as session:  # opened again, it holds the lock again
        assert session.memo_while_locked() is not None
        assert session.scalar("SELECT count(*) FROM orders") == orders


def test_a_lock_not_seen_as_the_session_opens_lets_no_commit_through(world, monkeypatch):
    """Found by an attack: the insider may rename files of the home at any time (the lock guards the
    file's bytes, not its name). A rename loop that lands between DuckDB opening the warehouse and
    the session looking up its lock left the lock unknown, which switched the check before each
    commit off for the command; a file linked to the warehouse, opened and closed, then released the
    real lock, and a second process wrote beside the command, whose checkpoint overwrote it. Where
    this system shows locks, a commit without a lock it can see is refused."""
    import os
    import shutil
    import subprocess
    import sys

    from backfill_assets.warehouse import duckdb_engine as de

    engine = world.warehouse().engine
    engine.let_go()
    path = world.warehouse_path
    copy, aside = path.with_name("copy.duckdb"), path.with_name("aside.duckdb")
    shutil.copy(path, copy)  # while no command holds it
    before = world.sql("SELECT count(*) FROM orders")[0][0]
    engine.let_go()
    real_connect, real_lock_of = de.DuckDBEngine._connect, de._lock_of

    def connect(self, *args, **kwargs):
        con = real_connect(self, *args, **kwargs)
        os.rename(path, aside)  # the insider's rename loop lands right after the open ...
        os.rename(copy, path)
        return con

    def lock_of(p):
        try:
            return real_lock_of(p)
        finally:
            os.rename(path, copy)  # ... and swaps back
            os.rename(aside, path)

    monkeypatch.setattr(de.DuckDBEngine, "_connect", connect)
    monkeypatch.setattr(de, "_lock_of", lock_of)
    with world.warehouse().session() as session:
        monkeypatch.setattr(de.DuckDBEngine, "_connect", real_connect)
        monkeypatch.setattr(de, "_lock_of", real_lock_of)
        assert session.memo_while_locked() is None  # nothing remembered without a lock seen
        os.close(os.open(path, os.O_RDONLY))  # a file of the home linked to the warehouse, opened and closed
        other = subprocess.run(
            [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
             "c.execute('INSERT INTO orders SELECT * FROM orders LIMIT 2'); c.close()", str(path)],
            capture_output=True, text=True, timeout=120)
        assert other.returncode == 0, other.stderr  # a real second process wrote the file beside this one
        try:
            with pytest.raises(WarehouseError, match="its lock on the warehouse"), session.transaction():
                session.execute("INSERT INTO orders SELECT * FROM orders LIMIT 1")
        finally:
            engine.let_go()
    engine.let_go()
    assert world.sql("SELECT count(*) FROM orders")[0][0] == before + 2  # the other process's rows survive
    engine.let_go()


def test_a_log_file_linked_to_the_write_ahead_log_before_it_exists_is_refused(world):
    """A lead of the same attack: `samefile` of a link to a file not there yet is False, so a log
    linked to the warehouse's write-ahead log before DuckDB made it passed, and the log would have
    been appended into it. The link's target is compared by name too."""
    import os

    from backfill_assets import terminal
    from backfill_assets.home import Home

    home = Home(world.home)
    wal = home.warehouse.with_name(home.warehouse.name + ".wal")
    home.log_file.parent.mkdir(parents=True, exist_ok=True)
    home.log_file.unlink(missing_ok=True)
    os.symlink(os.path.relpath(wal, home.log_file.parent), home.log_file)
    with pytest.raises(WarehouseError, match="is the warehouse"):
        terminal.log_file(home)


def test_a_log_file_linked_to_the_warehouse_the_url_names_is_refused(world, monkeypatch, tmp_path):
    """Found by a review: the log file was compared with the home's own warehouse file, not with the
    DuckDB file BACKFILL_WAREHOUSE_URL names, where a link would have the log appended into it."""
    import os

    from backfill_assets import terminal
    from backfill_assets.home import Home

    elsewhere = tmp_path / "elsewhere" / "w.duckdb"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(b"")
    monkeypatch.setenv("BACKFILL_WAREHOUSE_URL", f"duckdb:///{elsewhere}")
    home = Home(world.home)
    home.log_file.parent.mkdir(parents=True, exist_ok=True)
    home.log_file.unlink(missing_ok=True)
    os.symlink(elsewhere, home.log_file)
    with pytest.raises(WarehouseError, match="is the warehouse"):
        terminal.log_file(home)


@pytest.mark.parametrize("swap", ["a symlink to another file", "a symlink to a link of the same file",
                                  "a copy renamed over it"])
def test_a_path_made_to_name_another_file_while_a_command_keeps_it_stops_the_command(tmp_path, swap):
    """Found by an attack: the path swapped for a symlink to a hard link of the held file, while a
    command kept it, opened a second DuckDB instance of it; that session's end closed a descriptor
    of the file, dropping this process's lock, and the kept memo (reset to that instance's files,
    filled by its checks) was trusted after another process wrote the file: publish copied bytes no
    gate checked. A path that names another file (or the same one by another way) is refused."""
    import os
    import shutil

    from backfill_assets.warehouse import engine_for
    from backfill_assets.warehouse.duckdb_engine import kept_open

    path = tmp_path / "w.duckdb"
    engine = engine_for(f"duckdb:///{path}")
    with engine.session() as session, session.transaction():
        session.execute("CREATE TABLE t (i INTEGER)")
    with kept_open():
        with engine.session() as session:
            assert session.memo_while_locked() is not None  # its lock seen: checks are remembered
        if swap == "a copy renamed over it":
            shutil.copy(path, tmp_path / "b.duckdb")
            os.rename(tmp_path / "b.duckdb", path)
        else:
            other = tmp_path / "b.duckdb"
            if swap == "a symlink to another file":
                shutil.copy(path, other)
            else:
                os.link(path, other)
            os.symlink(other, tmp_path / "tmp")
            os.rename(tmp_path / "tmp", path)
        with pytest.raises(WarehouseError, match="names another file than the one this command holds"):
            with engine.session():
                pass
    with pytest.raises(WarehouseError, match="symbolic link") if swap != "a copy renamed over it" else \
            contextlib.nullcontext():
        with engine.session() as session:  # and once it let go: a link is never opened
            assert session.rows("SELECT count(*) FROM t") == [(0,)]


def test_a_symlink_at_the_write_ahead_log_is_refused_and_what_it_names_untouched(tmp_path):
    """Found by an attack: DuckDB writes its log through a `.wal` symlink planted while no command
    held the file, into whatever file the link names (a stand-in for `authorized_keys` had its
    lines replaced by the log's records)."""
    import os

    from backfill_assets.warehouse import engine_for

    path = tmp_path / "w.duckdb"
    engine = engine_for(f"duckdb:///{path}")
    with engine.session() as session, session.transaction():
        session.execute("CREATE TABLE t (v VARCHAR)")
    victim = tmp_path / "authorized_keys"
    victim.write_text("ssh-ed25519 AAAA service\n")
    os.symlink(victim, tmp_path / "w.duckdb.wal")
    with pytest.raises(WarehouseError, match="write-ahead log .* is a symbolic link, not the file itself"):
        with engine.session() as session, session.transaction():
            session.execute("INSERT INTO t VALUES ('ssh-ed25519 AAAA insider')")
    assert victim.read_text() == "ssh-ed25519 AAAA service\n"


_PIPE_AT_THE_LOG = """
import os, sys
from backfill_assets.errors import WarehouseError
from backfill_assets.warehouse import engine_for
from backfill_assets.warehouse.duckdb_engine import kept_open
path = sys.argv[1]
engine = engine_for(f"duckdb:///{path}")
with kept_open():
    with engine.session() as session, session.transaction():
        session.execute("CREATE TABLE t (i INTEGER)")
    with engine.session() as session:
        session.execute("CHECKPOINT")  # no log on disk now
    try:
        with engine.session() as session:
            os.mkfifo(path + ".wal")  # the insider, while the command holds the file
            with session.transaction():
                session.execute("INSERT INTO t VALUES (1)")
    except WarehouseError as exc:
        print(exc)
"""


def test_a_named_pipe_put_at_the_log_while_a_command_keeps_the_file_is_refused_at_the_commit(tmp_path):
    """Found by an attack: checked only as a session opened the file, a pipe put at the log
    afterwards blocked the next commit for ever, with the file locked: every other command waited
    on it."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _PIPE_AT_THE_LOG, str(tmp_path / "w.duckdb")],
                          capture_output=True, text=True, timeout=60)
    assert "write-ahead log" in done.stdout and "is a named pipe" in done.stdout, done.stdout + done.stderr[-2000:]


# the POSIX ACL `user::rwx, user:1234:rwx, group::r-x, mask::rwx, other::r-x`, as `setfacl` writes it
_ACL_LETTING_ANOTHER_WRITE = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, who) for tag, perm, who in (
    (0x01, 7, 0xFFFFFFFF), (0x02, 7, 1234), (0x04, 5, 0xFFFFFFFF), (0x10, 7, 0xFFFFFFFF), (0x20, 5, 0xFFFFFFFF)))


@pytest.mark.parametrize("shared", ["the warehouse's folder writable by all", "the spill folder a link",
                                    "an ACL letting another account write", "a folder above writable by all"])
def test_a_warehouse_where_another_account_can_put_a_link_is_refused_before_duckdb_opens_it(tmp_path, shared):
    """Found by attacks: a writer of the warehouse's folder put a link where DuckDB writes, between
    our check and DuckDB's open (the log, 3 ms after a fresh open; a spill file of a command run
    under a memory limit emptied the head log through it, and a cancelled plan published); an ACL
    let another account write behind the mode's bits; a member of a team folder above swapped the
    warehouse's folder for theirs mid-command. No check of such a path closes the race: a folder
    another account can write, or a folder above it they can rename it out of (a sticky one such
    as /tmp aside, above every test's), is refused, and so is a linked spill folder. A folder
    group-writable for the owner's own private group (a umask of 002) is not another's."""
    import os

    from backfill_assets.warehouse import engine_for

    team = tmp_path / "team"
    folder = team / "wh"
    folder.mkdir(parents=True)
    path = folder / "w.duckdb"
    engine = engine_for(f"duckdb:///{path}")
    with engine.session() as session, session.transaction():
        session.execute("CREATE TABLE t (i INTEGER)")
    os.chmod(folder, 0o775)  # its owner's own group (root's, in CI): no other account
    with engine.session() as session:
        assert session.rows("SELECT count(*) FROM t") == [(0,)]
    os.chmod(folder, 0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    refusal = "can be written by every account"
    if shared == "the spill folder a link":
        os.symlink(elsewhere, folder / "w.duckdb.tmp")
        refusal = "spill folder .* is a symbolic link"
    elif shared == "an ACL letting another account write":
        os.setxattr(folder, "system.posix_acl_access", _ACL_LETTING_ANOTHER_WRITE)
        refusal = "has an access control list"
    elif shared == "a folder above writable by all":
        os.chmod(team, 0o777)
        refusal = "above the warehouse's folder, can be written by every account"
    else:
        os.chmod(folder, 0o777)
    with pytest.raises(WarehouseError, match=refusal):
        with engine.session():
            pass
    assert list(elsewhere.iterdir()) == []


def test_marks_in_a_waiting_folder_of_another_account_are_not_waiters(tmp_path):
    """Found by an attack: a `.waiting` folder made by another account while the home was shared
    outlived a `chmod go-w`; marks it renewed there, named after any live process, had a command
    that keeps the file let go of it between every two steps, for nothing."""
    import os

    from backfill_assets.warehouse import engine_for

    path = tmp_path / "w.duckdb"
    engine = engine_for(f"duckdb:///{path}")
    with engine.session() as session, session.transaction():
        session.execute("CREATE TABLE t (i INTEGER)")
    waiting = tmp_path / "w.duckdb.waiting"
    waiting.mkdir()
    (waiting / str(os.getppid())).touch()  # a live process, as if it waited
    assert engine.waiters() == [os.getppid()]  # the folder is ours: a waiter
    os.chown(waiting, 1234, 1234)  # another account's (the test runs as root)
    assert engine.waiters() == []


def test_the_folder_backfill_makes_for_the_warehouse_is_writable_by_its_account_alone(tmp_path):
    """Found by an attack: under a umask of 002 in a setgid team folder, the folder backfill made
    itself was group-writable, and its next command refused it."""
    import os
    import stat

    from backfill_assets.warehouse import engine_for

    old = os.umask(0o002)
    try:
        with engine_for(f"duckdb:///{tmp_path / 'made' / 'w.duckdb'}").session() as session:
            assert session.rows("SELECT 1") == [(1,)]
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "made").st_mode) == 0o755

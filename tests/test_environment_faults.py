"""Faults of the environment a user gives the CLI: named pipes and devices where a file is
expected, a full disk, a read-only home, quotes in the home's path. Each is one line naming the
file and the fix, exit 1 or 2, before anything commits; never a hang, never exit 3."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import psycopg
import pytest

from backfill_assets.plan.loading import load_plan
from tests.world import keys as day_keys

pytestmark = pytest.mark.separate_processes  # the commands under test run as processes of their own

FIFO_TIMEOUT = 60  # seconds: a FIFO opened for reading would block forever


def one_line(result) -> str:
    err = result.err if hasattr(result, "err") else result.stderr
    assert err.count("\n") == 1 and err.startswith("backfill: "), err
    assert "internal error" not in err, err
    return err


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("case", ["plan file", "private key", "signature file", "allowed_signers",
                                  "init allowed_signers", "status plan", "evidence file", "partitions file",
                                  "workspace", "evidence key", "evidence head log"])
def test_a_named_pipe_given_as_a_file_is_one_line_never_a_hang(world, cli, fifo, case):
    plan = world.plan("fix")
    if case == "status plan":
        assert world.cli("init") == 0
    if case in ("partitions file", "evidence key", "evidence head log"):
        world.approve(plan)
    if case == "workspace":  # the definitions are found through ./workspace.yaml (cwd is tmp_path)
        os.replace(fifo, fifo.parent / "workspace.yaml")
        fifo = fifo.parent / "workspace.yaml"
    args = {
        "plan file": ("plan", "validate", str(fifo)),
        "private key": ("plan", "approve", str(plan), "--by", "alice", "--key", str(fifo)),
        "signature file": ("plan", "approve", str(plan), "--by", "alice", "--signature", str(fifo),
                           "--statement", str(world.keys["alice"].parent / "alice.pub")),
        "allowed_signers": ("plan", "approve", str(plan), "--by", "alice", "--key", str(world.keys["alice"]),
                            "--allowed-signers", str(fifo)),
        "init allowed_signers": ("init", "--allowed-signers", str(fifo)),
        "status plan": ("status", str(fifo)),
        "partitions file": ("run", "fix", "--partitions-file", str(fifo)),
        "workspace": ("run", "fix"),
        "evidence file": ("evidence", "verify", "--against", str(fifo)),
        "evidence key": ("run", "fix", "--proof"),
        "evidence head log": ("run", "fix", "--proof"),
    }[case]
    env = {"workspace": {"BACKFILL_DEFS": ""}, "evidence key": {"BACKFILL_EVIDENCE_KEY_FILE": str(fifo)},
           "evidence head log": {"BACKFILL_EVIDENCE_HEADS_FILE": str(fifo)}}.get(case)
    result = cli(*args, timeout=FIFO_TIMEOUT, env=env)
    assert result.code == 2, result.err
    line = one_line(result)
    assert str(fifo) in line and "named pipe" in line, line
    if case in ("evidence key", "evidence head log"):  # refused before the run's lease or anything else committed
        assert world.phase() == "approved"
        assert world.sql("SELECT count(*) FROM backfill_control.leases") == [(0,)]


@pytest.mark.parametrize("name", ["warehouse.duckdb", "warehouse.duckdb.wal"])
def test_a_named_pipe_where_the_warehouse_file_is_is_one_line_never_a_hang(world, cli, name):
    """DuckDB opens its file and its write-ahead log for reading: a FIFO there would block the
    command (and the webserver's sensors) forever."""
    assert world.cli("init") == 0
    pipe = world.home / name
    if pipe.exists():
        pipe.unlink()
    os.mkfifo(pipe)
    for args in (("status",), ("evidence", "verify")):
        result = cli(*args, timeout=FIFO_TIMEOUT)
        assert result.code == 1, (args, result.err)
        line = one_line(result)
        assert str(pipe) in line and "named pipe" in line and "move it" in line, line


# --- a full disk, a read-only home, quotes in the home's path -----------------------------------

def _backfill(world, *args, limit: int | None = None, read_only: bool | Path = False, timeout: float = 300):
    """The console script as a subprocess: under RLIMIT_FSIZE `limit` (every write past that offset
    fails with EFBIG, as on a full disk), or with the home (or the folder `read_only` names)
    bind-mounted read-only in a private mount namespace (root ignores chmod 0555, not a read-only
    mount)."""
    import resource
    import subprocess

    from tests.conftest import BIN

    env = {**os.environ, "BACKFILL_HOME": str(world.home), "PYTHONWARNINGS": "ignore",
           "BACKFILL_DEFS": "backfill_assets.demo.daily"}
    command = [str(BIN / "backfill"), "--home", str(world.home), *args]
    if read_only:
        folder = str(world.home if read_only is True else read_only)
        command = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" '
                   '&& exec "$@"', folder, *command]

    def limit_writes() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=world.root, timeout=timeout,
                          preexec_fn=limit_writes)


def _unchanged(world) -> None:
    assert world.phase() == "approved"
    assert world.sql("SELECT count(*) FROM backfill_control.writes") == [(0,)]
    assert world.sql("SELECT count(*) FROM backfill_control.leases") == [(0,)]


def test_a_full_disk_is_one_line_and_commits_nothing(world):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    size = 1024  # no file may grow: the warehouse's WAL and Dagster's sqlite storage both fail
    for args in (("run", "fix", "--proof"), ("sample", "--days", "2", "--rows-per-day", "10"), ("status",)):
        done = _backfill(world, *args, limit=size)
        if args == ("status",):  # a reading command still answers
            assert done.returncode == 0 and "plan       fix: approved" in done.stdout, done.stderr
            continue
        assert done.returncode == 1, (args, done.stderr)
        one_line(done)
        assert ("file size limit" in done.stderr or "disk I/O error" in done.stderr), done.stderr
        assert "the step that failed committed nothing" in done.stderr
        _unchanged(world)
    assert world.cli("run", "fix", "--proof") == 0  # with room again, the same command completes


def test_a_read_only_home_is_one_line_and_reading_commands_still_answer(world):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    status = _backfill(world, "status", read_only=True)
    assert status.returncode == 0 and "plan       fix: approved" in status.stdout, status.stderr
    for args in (("run", "fix", "--proof"), ("init",), ("sample", "--days", "2", "--rows-per-day", "10")):
        done = _backfill(world, *args, read_only=True)
        assert done.returncode in (1, 2), (args, done.stderr)
        line = one_line(done)
        assert "read-only file system" in line.lower() and "a folder you can write" in line, line
    _unchanged(world)


# every mark in one path (a world costs seconds to make): a double and a single quote (SQL, YAML),
# spaces (shell words), `#` (a URL's fragment, a YAML comment) and `:` (a URL's scheme, a YAML key)
def test_quotes_and_marks_in_the_home_path_are_just_a_path(tmp_path, ssh_keys, monkeypatch):
    name = 'ho"me my team\'s home#1 c:home'
    from backfill_assets.dagster_setup import instance_for
    from backfill_assets.home import Home
    from tests.world import DEMO_DEFS, make_world

    root = tmp_path / name
    monkeypatch.setenv("BACKFILL_DEFS", DEMO_DEFS)
    monkeypatch.setenv("DAGSTER_HOME", str(root / "home" / "dagster"))
    with instance_for(Home(root / "home")) as instance:
        world = make_world(root, instance, ssh_keys)
        assert world.cli("init") == 0
        world.approved_plan("fix", start="2026-01-01", end="2026-01-01", proof=("2026-01-01",))
        assert world.cli("run", "fix", "--proof") == 0
        assert world.cli("status", "fix") == 0
    import yaml

    config = yaml.safe_load((root / "home" / "dagster" / "dagster.yaml").read_text())
    named = config["run_coordinator"]["config"]["backfill_home"]  # of the file's folder: the home moves with it
    assert named == ".." and (root / "home" / "dagster" / named).resolve() == (root / "home").resolve()


@pytest.mark.own_dagster_home  # a fresh event log grows with each run: the worker's shared one has free pages
def test_a_full_disk_during_a_load_says_what_failed_committed_nothing_not_the_command(world):
    """`backfill load` over four days in runs of one, on a disk that fills up while Dagster records
    the first run (its sqlite event log cannot grow; the warehouse's write-ahead log still can): the
    first run's write transaction committed (2026-01-01 written and gated, not published), then
    Dagster's storage failed, and the command said `... run the command again: nothing was
    committed`, while the day was history already (found by an attack). The line names the step
    that failed; the same load goes on from what committed."""
    from backfill_assets.home import Home
    from tests.world import keys

    events = Home(world.home).dagster_home / "event_log" / "event_log.db"
    limit = events.stat().st_size + 140_000  # room for the warehouse's WAL, not for Dagster's event log
    done = _backfill(world, "load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-04",
                     "--per-run", "1", limit=limit)
    assert done.returncode == 1, (done.returncode, done.stderr)
    said = done.stderr.strip().splitlines()[-1]  # after the load's progress lines
    assert "nothing was committed" not in said and "the step that failed committed nothing" in said, said
    written = world.sql("SELECT count(*) FROM backfill_control.writes")[0][0]
    loaded = _backfill(world, "load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-04")
    assert loaded.returncode == 0, loaded.stderr
    assert all(world.rows("published_revenue", k) > 0 for k in keys(1, 4)), (written, loaded.stdout)


# --- a publish that committed, then Dagster could not record it ---------------------------------------

DAYS = day_keys(1, 3)


def _disk_fills_when_dagster_records_the_publish(monkeypatch, world) -> None:
    """The disk fills just after the publish's warehouse transaction committed: Dagster's event log
    cannot store the published asset's materialization (ENOSPC), as on a full disk (reproduced with
    RLIMIT_FSIZE too: `the step that failed committed nothing` while the plan was published)."""
    from backfill_assets.dagster_storage import PooledSqliteEventLogStorage as Storage

    store, batch = Storage.store_event, Storage.store_event_batch

    def full(events) -> None:
        for event in events:
            dagster_event = getattr(event, "dagster_event", None)
            if dagster_event is not None and dagster_event.is_step_materialization and \
                    dagster_event.asset_key is not None and dagster_event.asset_key.path == ["published_revenue"]:
                raise OSError(errno.ENOSPC, "No space left on device", str(world.home / "dagster"))

    monkeypatch.setattr(Storage, "store_event", lambda self, event: (full([event]), store(self, event))[1])
    monkeypatch.setattr(Storage, "store_event_batch", lambda self, events: (full(events), batch(self, events))[1])


@pytest.mark.parametrize("command", [("run", "fix", "--and-publish"), ("publish", "fix")])
def test_a_publish_that_committed_is_never_reported_as_nothing_published(world, run_cli, monkeypatch, command):
    """The copy committed (consumers read the new bytes, the plan is published), then Dagster could not
    record it: the command said `the publish run ... failed, nothing was published` (found by an
    attack). It says the plan is published and what Dagster lacks."""
    world.approved_plan("fix", start=DAYS[0], end=DAYS[-1], proof=(DAYS[1],))
    if command[0] == "publish":
        assert run_cli("run", "fix", "--proof").code == 0
        assert run_cli("run", "fix").code == 0
    _disk_fills_when_dagster_records_the_publish(monkeypatch, world)
    done = run_cli(*command)
    # what happened: the copy committed, consumers read the plan's bytes
    assert world.phase() == "published" and all(world.rows("published_revenue", k) == 5 for k in DAYS)
    assert done.code == 1 and done.err.count("backfill: ") == 1, done.err
    assert "plan fix is published" in done.err and "publish run failed (OSError: [Errno 28]" in done.err, done.err
    assert "nothing was published" not in done.err and "committed nothing" not in done.err, done.err


def test_run_and_publish_with_dagster_home_a_file_is_one_line(world, run_subprocess):
    """`run PLAN --proof` says it in one line; `--and-publish` printed two `backfill:` lines (a warning
    from recording the plan's state on the way out, then the problem)."""
    world.approved_plan("fix", start=DAYS[0], end=DAYS[-1], proof=(DAYS[1],))
    not_a_folder = world.root / "dagster-home-file"
    not_a_folder.write_text("x")
    alone = run_subprocess("--home", str(world.home), "run", "fix", "--proof", env={"DAGSTER_HOME": str(not_a_folder)})
    assert alone.code == 2 and alone.err.count("\n") == 1, alone.err
    chained = run_subprocess("--home", str(world.home), "run", "fix", "--and-publish",
                             env={"DAGSTER_HOME": str(not_a_folder)})
    assert chained.code == 2, chained.err
    assert chained.err.count("\n") == 1 and chained.err.startswith("backfill: "), chained.err
    assert world.phase() == "approved"


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_pg_failed_publish_never_claims_consumers_read_checked_bytes_after_an_insider_edit(
        engine_world, monkeypatch, capfd):
    """The publish's copy commits, then Dagster cannot store the run (a full disk). Before the
    command read the plan's state again, an insider committed an edit of the published table from
    another connection, and the command said `consumers read the checked bytes`: it looked at the
    phase only (found by an attack). It says what it knows: published, and where to look."""
    from backfill_assets.dagster_storage import PooledSqliteEventLogStorage as Storage

    world = engine_world
    world.approved_plan("fix", start=DAYS[0], end=DAYS[-1], proof=(DAYS[1],))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    store, batch = Storage.store_event, Storage.store_event_batch

    def full(events) -> None:
        for event in events:
            de = getattr(event, "dagster_event", None)
            if de is not None and de.is_step_materialization and de.asset_key is not None \
                    and de.asset_key.path == ["published_revenue"]:
                # the copy has committed: the insider edits what consumers read, then the disk fills
                with psycopg.connect(world.url, autocommit=True) as insider:
                    insider.execute("UPDATE published_revenue SET orders = orders + 1000")
                raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Storage, "store_event", lambda self, e: (full([e]), store(self, e))[1])
    monkeypatch.setattr(Storage, "store_event_batch", lambda self, es: (full(es), batch(self, es))[1])
    capfd.readouterr()
    code = world.cli("publish", "fix")
    out = capfd.readouterr()
    monkeypatch.setattr(Storage, "store_event", store)
    monkeypatch.setattr(Storage, "store_event_batch", batch)
    assert code != 0
    assert world.phase("fix") == "published"
    capfd.readouterr()
    world.cli("status", "fix")
    seen = capfd.readouterr()
    status = seen.out + seen.err
    # the product itself knows consumers do not read the checked bytes
    assert "edited" in status or "differ" in status or "changed" in status, status
    # what consumers read now is not the checked bytes: the command must not say they are
    assert "consumers read the checked bytes" not in out.err, out.err
    assert "plan fix is published" in out.err and "`backfill status fix` says what consumers read now" in out.err


@pytest.mark.separate_processes
def test_an_approval_that_committed_is_never_reported_as_committing_nothing(world):
    """The plan sits in a checkout on a read-only mount: bob's `plan approve --key` completes the
    approval in the warehouse (his row, the plan of record adopted, the freeze announced), then copying
    the signatures into the plan file fails. The command said "the step that failed committed
    nothing" and to move BACKFILL_HOME, the opposite of what happened (found by an attack). Now it
    says the approval is recorded, that the file the guard reads was not updated, and how to sync it;
    the same command, once the folder can be written, does."""
    plan = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    world.approve(plan, "alice")  # the owner and alice: bob's signature completes it
    assert world.phase() == "drafted"
    approve = ("plan", "approve", str(plan), "--by", "bob", "--key", str(world.keys["bob"]))
    done = _backfill(world, *approve, read_only=plan.parent)
    assert done.returncode == 1, done.stderr
    one_line(done)
    assert world.phase() == "approved" and "approved: it is the plan of record" in done.stdout, done.stdout
    assert "committed nothing" not in done.stderr and "BACKFILL_HOME" not in done.stderr, done.stderr
    assert "is recorded" in done.stderr and str(plan) in done.stderr and "plan approve" in done.stderr, done.stderr
    assert "bob" not in {g.by for g in load_plan(plan).approvals.granted}
    assert world.cli(*approve) == 0  # the folder writable again: the file gets every recorded signature
    assert "bob" in {g.by for g in load_plan(plan).approvals.granted}


@pytest.mark.own_dagster_home
@pytest.mark.separate_processes
def test_a_reconcile_whose_verdicts_the_ui_cannot_take_says_they_are_recorded(world):
    """A reconcile whose verdicts changed shows them in the UI by a run of its own; with DAGSTER_HOME
    on a read-only mount the run cannot be stored: the verdicts are committed all the same, the
    reconcile's own answer stands (its table, exit 1 for a failed gate), and one line says the UI
    was not shown them, never that nothing was committed."""
    from backfill_assets.control import ledger
    from tests.test_publish_and_sensor import reconciled_plan

    reconciled_plan(world)
    world.run_sql("UPDATE daily_revenue SET net_revenue = net_revenue + 1 WHERE order_date = '2026-01-03'")
    done = _backfill(world, "reconcile", "fix", read_only=world.home / "dagster")
    assert done.returncode == 1 and "NOT reconciled" in done.stdout, (done.stdout, done.stderr)
    assert "the verdicts are recorded, but the Dagster UI was not shown them" in done.stderr, done.stderr
    assert "committed nothing" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    with world.warehouse().session() as session:
        assert not ledger.latest(session, "daily_revenue", ["2026-01-03"], figures=False)["2026-01-03"].passed


@pytest.mark.own_dagster_home
@pytest.mark.separate_processes
@pytest.mark.parametrize("first", ["reconcile", "publish"])
def test_verdicts_the_ui_could_not_take_are_shown_by_the_next_reconcile(world, first):
    """A reconcile (or a publish refused before its run) whose verdicts the Dagster instance could
    not take: the next reconcile, the home writable again, compared them with the ledger, which held
    them already, and showed nothing, so the UI kept the check passed for good (found by an attack).
    A reconcile shows every verdict the UI does not show as the gates gave it."""
    from tests.test_publish_and_sensor import reconciled_plan
    from tests.test_ui_check_state import _unchanged_statuses

    reconciled_plan(world)
    world.run_sql("UPDATE daily_revenue SET net_revenue = net_revenue + 1 WHERE order_date = '2026-01-03'")
    done = _backfill(world, first, "fix", read_only=world.home / "dagster")
    assert done.returncode == 1 and "`backfill reconcile fix` shows them there" in done.stderr, done.stderr
    assert world.cli("reconcile", "fix") == 1
    assert _unchanged_statuses(world) == {**dict.fromkeys(day_keys(1, 4), "SUCCEEDED"), "2026-01-03": "FAILED"}

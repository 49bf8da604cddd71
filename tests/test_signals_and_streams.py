"""A hurried user at a shell: Ctrl-C (SIGINT), SIGTERM and the terminal closed, sent to real
`backfill` processes at the moments they do their work; what is left is read back from the
warehouse (found by an attack)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import BIN


def started(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """The console script itself, as a shell starts it (its own pid, to send a signal to)."""
    full = {**os.environ, "BACKFILL_HOME": str(home), "PYTHONWARNINGS": "ignore", **(env or {})}
    # a shell's foreground command gets Ctrl-C; a runner started in the background (`cmd &` in a
    # script) passes SIGINT down ignored, and Python then never raises KeyboardInterrupt
    return subprocess.Popen([str(BIN / "backfill"), "--home", str(home), *args], env=full, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def holds_open(pid: int, path: Path, timeout: float = 15) -> None:
    """Until the process opened `path` (its DuckDB file): past its imports, at its statements."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(os.path.realpath(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd")):
                return
        except FileNotFoundError:
            break  # it ended
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            break  # it ended
        time.sleep(0.02)
    raise AssertionError(f"process {pid} never opened {path}")


def test_ctrl_c_while_duckdb_runs_a_statement_is_an_interrupt_not_an_internal_error(world, cli):
    """The user pressed Ctrl-C while `backfill sample` inserted twenty million orders: DuckDB answered
    the signal by cancelling its statement with a bare `RuntimeError: Query interrupted`, which the
    command reported as `backfill: internal error: RuntimeError: Query interrupted (traceback in
    ...)`, exit 3, the code of a bug, for every Ctrl-C that lands in a DuckDB statement (most of a
    DuckDB command's time); a Ctrl-C is exit 130 and says it was interrupted (found by an attack)."""
    before = world.sql("SELECT count(*) FROM orders")[0][0]
    proc = started(world.home, "sample", "--days", "200", "--rows-per-day", "100000", "--start", "2020-01-01")
    try:
        holds_open(proc.pid, world.warehouse_path)
    except AssertionError:
        raise AssertionError(proc.communicate()) from None
    time.sleep(1.5)  # in the insert (~10 s alone on a core)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert "internal error" not in err and "Traceback" not in err, err
    assert err.splitlines()[-1] == "backfill: interrupted; every partition is either old or new", err
    assert world.sql("SELECT count(*) FROM orders")[0][0] == before  # nothing half inserted


def maps(pid: int, library: str, timeout: float = 60) -> None:
    """Until the process mapped `library`: it is importing what a command needs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if library in Path(f"/proc/{pid}/maps").read_text():
                return
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.005)
    raise AssertionError(f"process {pid} never mapped {library}")


def test_ctrl_c_while_the_command_starts_is_one_line_never_a_traceback(world):
    """The user typed `backfill status`, then Ctrl-C at once, while the command still imported
    what it runs (about half a second, longer on a cold disk): Python printed a 40-line traceback
    ending in `KeyboardInterrupt` on the terminal, and the process died of the signal; the handler
    that says "interrupted" in one line was entered only once the arguments were parsed (found by
    an attack)."""
    proc = started(world.home, "status")
    maps(proc.pid, "pydantic_core")  # the package's modules import it early on
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert (proc.returncode, err) == (130, "backfill: interrupted; every partition is either old or new\n"), \
        (proc.returncode, out, err)


def test_a_run_whose_terminal_closed_finishes_its_work_and_exits_with_its_own_code(world, cli):
    """`backfill run fix --and-publish &`, then `disown` and the terminal window closed (or an ssh
    session dropped under a shell that sends no hangup to a disowned job): the command lives on, and
    its next write to the terminal gets EIO, not the closed pipe `reader_may_leave` handles. The
    progress bar's write raised it mid-window and the command stopped there, exit 1, the plan left
    `running` and never published; whether anyone reads it, a command does all its work and exits
    with its own code (found by an attack)."""
    import pty
    import select

    from tests.test_faults import seed_history

    seed_history(world)
    world.approved_plan("fix", start="2026-01-01", end="2026-01-20", proof=("2026-01-01",), per_run=2)
    terminal, its_side = pty.openpty()
    env = {**os.environ, "BACKFILL_HOME": str(world.home), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen([str(BIN / "backfill"), "--home", str(world.home), "run", "fix", "--and-publish"],
                            env=env, stdin=its_side, stdout=its_side, stderr=its_side, start_new_session=True)
    os.close(its_side)
    shown, deadline = b"", time.monotonic() + 120
    while b"window [" not in shown:  # the window's first run done: the terminal closes now
        assert time.monotonic() < deadline and proc.poll() is None, shown.decode(errors="replace")
        if select.select([terminal], [], [], 0.1)[0]:
            shown += os.read(terminal, 65536)
    os.close(terminal)
    assert proc.wait(timeout=300) == 0, (world.home / "logs" / "backfill.log").read_text()[-3000:]
    assert world.phase("fix") == "published"
    assert cli("evidence", "verify").code == 0


@pytest.mark.parametrize("closed", [">&-", "2>&-", ">&- 2>&-", "<&- >&- 2>&-"])
def test_a_command_run_with_its_streams_closed_does_its_work_and_exits_with_its_own_code(world, cli, closed):
    """A cron line or a script ran `backfill run fix --and-publish >&-` (or `2>&-`): Python starts
    such a process with `sys.stdout` (`sys.stderr`) None, and the first line the command printed
    raised AttributeError inside `reader_may_leave`'s wrapper: the run did nothing, and every
    command, `status` and `evidence verify` included, exited 120 with "Exception ignored" tracebacks
    on the terminal. A closed stream is one no one reads: the command does all its work and exits
    with its own code (found by an attack)."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}", "PYTHONWARNINGS": "ignore"}

    def closed_run(*args: str) -> tuple[int, str]:
        # the exit code on descriptor 9, which the command does not have
        script = f'exec 9>&1; backfill --home "{world.home}" {" ".join(args)} {closed} 9>&-; echo "exited $?" >&9'
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=300)
        return int(done.stdout.splitlines()[-1].removeprefix("exited ")), done.stderr

    for args in (("run", "fix", "--and-publish"), ("status", "fix"), ("evidence", "verify")):
        code, err = closed_run(*args)
        assert (code, "Traceback" in err) == (0, False), (args, code, err[-2000:])
    assert world.phase("fix") == "published"
    done = cli("evidence", "verify")
    assert done.code == 0, done.err


def test_ctrl_c_while_a_run_writes_says_interrupted_and_the_plan_goes_on_from_there(world, cli):
    """Ctrl-C while `backfill run fix` wrote its window's second run: Dagster turned the signal into a
    failed run, and the command said `run failed: dagster._core.errors.DagsterExecutionInterruptedError`,
    `2026-01-04: not written`, `halted at window run ...`, exit 1, as if the plan's code had failed;
    the user stopped it, which is exit 130 and `interrupted`. Every partition stays wholly old or
    new, and the same command goes on from there (found by an attack)."""
    from backfill_assets.permission import PLAN_TAG
    from tests.test_faults import DAYS, dagster_runs, proven, written

    proven(world)  # 02..08 left, in runs of two
    proc = started(world.home, "run", "fix", env={"BACKFILL_STALL_AT": "write.after_snapshot@2=120"})
    deadline = time.monotonic() + 120
    while len([r for r in dagster_runs(world) if r.tags.get(PLAN_TAG) == "fix"]) < 4:  # 2 proof, 2 window
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    time.sleep(2)  # in its write, held at the point
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert err.splitlines()[-1] == "backfill: interrupted; every partition is either old or new", err
    assert "Dagster" not in err and "run failed" not in err, err
    assert written(world) == {"2026-01-01", "2026-01-02", "2026-01-03"}
    status = cli("status", "fix")
    assert "next       run the rest of the window: `backfill run fix`" in status.out, status.out
    assert cli("run", "fix").code == 0
    assert written(world) == set(DAYS) and world.phase("fix") == "reconciled"
    assert cli("evidence", "verify").code == 0

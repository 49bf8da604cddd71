"""A clean terminal: Dagster's own log lines and stack traces go to a log file in the home.

While a run executes in-process, file descriptors 1 and 2 point at `BACKFILL_HOME/logs/
backfill.log`, so nothing Dagster prints (or a library below it) reaches the terminal; our own
one-line messages are written between runs, or to the saved terminal descriptor. `--verbose`
leaves the terminal alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from backfill_assets.bounded import refuse_non_regular
from backfill_assets.errors import WarehouseError
from backfill_assets.home import Home, duckdb_file

_verbose = False
_terminal_fd: int | None = None


def set_verbose(verbose: bool) -> None:
    global _verbose
    _verbose = verbose


def verbose() -> bool:
    return _verbose


def log_file(home: Home) -> Path:
    """The log file, its folder made; one line when something other than a file is there (opening
    a named pipe to append blocks until a reader comes, a folder cannot be opened)."""
    path = home.log_file
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_non_regular(path, "the log file", "move it out of the way: backfill appends its log there")
    named = duckdb_file(home.warehouse_url)  # the warehouse in use: BACKFILL_WAREHOUSE_URL's DuckDB file too
    warehouse = Path(named) if named is not None else home.warehouse
    for database in (warehouse, warehouse.with_name(warehouse.name + ".wal")):
        # closing a descriptor of the warehouse releases this process's lock on it (DuckDB's is a
        # POSIX record lock): another process could then write it beside this one; and a link to
        # the write-ahead log before it exists would have the log appended into it
        if _same_file(path, database):
            raise WarehouseError(f"the log file {path} is the warehouse {database} (a link)",
                                 fix="remove the link: backfill appends its log there")
    return path


def _same_file(a: Path, b: Path) -> bool:
    try:
        if os.path.realpath(a) == os.path.realpath(b):
            return True
        return os.path.samefile(a, b)  # a hard link
    except OSError:
        return False


def write(text: str) -> None:
    """Text for the user's terminal (stderr), even while Dagster's output goes to the log file."""
    if _terminal_fd is not None:
        os.write(_terminal_fd, text.encode("utf-8", errors="replace"))
    else:
        sys.stderr.write(text)
        sys.stderr.flush()


def terminal_is_tty() -> bool:
    try:
        return os.isatty(_terminal_fd if _terminal_fd is not None else sys.stderr.fileno())
    except (OSError, ValueError):
        return False


def say(message: str) -> None:
    """A line for the user, even while Dagster's output goes to the log file."""
    write(message + "\n")


def note(message: str) -> None:
    """A one-line caveat about an answer on stdout, on stderr where scripts reading stdout skip it."""
    sys.stderr.write(f"backfill: note: {message}\n")
    sys.stderr.flush()


UNVERIFIED = ("read without the evidence key, so this {what} is unverified (its rows are whatever was written to "
              "the warehouse): {fix}")


def run_config() -> dict[str, Any]:
    level = "DEBUG" if _verbose else "INFO"
    return {"loggers": {"console": {"config": {"log_level": level}}}}


# one redirection a process, however many commands run in it at once (a test's threads, a notebook's):
# each command saved the streams it found and put them back as it ended, so two at once left stdout
# the other's closed log stream ("I/O operation on closed file", found as a test flaked under load)
_REDIRECT_LOCK = threading.Lock()
_redirected: list[Any] = []  # [depth, restore] while redirected


@contextmanager
def dagster_output(home: Home) -> Iterator[Path]:
    """Route everything written to stdout/stderr (fds included) to the log file, unless verbose.
    Commands running at once in one process share the first one's redirection; the last to end
    puts the terminal back."""
    path = log_file(home)
    if _verbose:
        yield path
        return
    with _REDIRECT_LOCK:
        if _redirected:
            _redirected[0] += 1
        else:
            _redirected[:] = [1, _redirect(path)]
    try:
        yield path
    finally:
        with _REDIRECT_LOCK:
            _redirected[0] -= 1
            if _redirected[0] == 0:
                restore = _redirected[1]
                _redirected.clear()
                restore()


def _redirect(path: Path) -> Any:
    """Stdout and stderr (fds and Python objects) to the log file; returns what puts them back."""
    global _terminal_fd
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    handle = open(path, "ab")  # noqa: SIM115 - closed by restore, after the descriptors are restored
    _terminal_fd = saved_err
    handler = logging.StreamHandler(open(path, "a", encoding="utf-8"))  # noqa: SIM115
    logging.getLogger().addHandler(handler)
    text = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed by restore
    streams = sys.stdout, sys.stderr
    os.dup2(handle.fileno(), 1)
    os.dup2(handle.fileno(), 2)
    # and the Python objects too: a caller may have replaced them (a test harness, a notebook)
    sys.stdout = sys.stderr = text

    def restore() -> None:
        # the terminal first, whatever the log file's last bytes do: on a full disk (or past `ulimit
        # -f`) closing the log's streams raised, the descriptors stayed on the log file, and a failed
        # command's one line went into it: exit 1 with nothing shown (found by an attack)
        global _terminal_fd
        sys.stdout, sys.stderr = streams
        logging.getLogger().removeHandler(handler)
        for flush in (text.flush, sys.stdout.flush, sys.stderr.flush):
            with contextlib.suppress(OSError, ValueError):
                flush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        os.close(saved_out)
        os.close(saved_err)
        _terminal_fd = None
        for close in (text.close, handler.stream.close, handle.close):
            with contextlib.suppress(OSError, ValueError):
                close()  # what the full log could not take is lost: the log is best effort

    return restore

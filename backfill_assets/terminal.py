"""A clean terminal: Dagster's own log lines and stack traces go to a log file in the home.

While a run executes in-process, file descriptors 1 and 2 point at `BACKFILL_HOME/logs/
backfill.log`, so nothing Dagster prints (or a library below it) reaches the terminal; our own
one-line messages are written between runs, or to the saved terminal descriptor. `--verbose`
leaves the terminal alone.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import logging
import os
import stat
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from backfill_assets.bounded import refuse_non_regular
from backfill_assets.errors import WarehouseError
from backfill_assets.home import Home, duckdb_file

_verbose = False
_terminal_fd: int | None = None

# What rewrites the commands a command prints for pasting (each backticked `backfill ...`), and
# whether its stdout is advice too: set by the CLI for the command running in this context
_ADVICE: contextvars.ContextVar[tuple[Callable[[str], str], bool] | None] = \
    contextvars.ContextVar("backfill_advice", default=None)


@contextmanager
def advice_rewritten(rewrite: Callable[[str], str], *, stdout: bool) -> Iterator[None]:
    """Text this command writes to the terminal passes through `rewrite` for the block: its stderr
    always (refusals, notes, progress), its stdout unless `stdout` is False (data: rendered evidence,
    JSON, a statement to sign, which must stay byte for byte what the product made)."""
    token = _ADVICE.set((rewrite, stdout))
    try:
        yield
    finally:
        _ADVICE.reset(token)


def advised(text: str, *, stdout: bool) -> str:
    """`text` as this command's advice rewriter has it (unchanged where none is set)."""
    found = _ADVICE.get()
    if found is None or (stdout and not found[1]):
        return text
    return found[0](text)


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


def reader_left(exc: OSError, fd: int) -> bool:
    """Whether a write to `fd` failed because no one reads it any more: a closed pipe (`| head`), or
    a terminal that hung up (EIO: its window closed under a job that lives on, `&` then `disown`; the
    progress bar's next write stopped a run mid-window, found by an attack). EIO from a file (a
    failing disk, NFS) is a failed write, not a reader gone: only a terminal's counts (a review)."""
    if isinstance(exc, BrokenPipeError):
        return True
    if exc.errno != errno.EIO:
        return False
    try:
        return stat.S_ISCHR(os.fstat(fd).st_mode)
    except OSError:
        return False


def write(text: str) -> None:
    """Text for the user's terminal (stderr), even while Dagster's output goes to the log file."""
    text = advised(text, stdout=False)
    if _terminal_fd is not None:
        try:
            os.write(_terminal_fd, text.encode("utf-8", errors="replace"))
        except OSError as exc:
            if not reader_left(exc, _terminal_fd):
                raise
            _to_nowhere(_terminal_fd)
    else:
        sys.stderr.write(text)
        sys.stderr.flush()


def _to_nowhere(fd: int) -> None:
    """The reader of `fd` left: what is written there from now on goes to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class _ReaderMayLeave:
    """A standard stream whose reader may leave early (`backfill run ... | head -1`): what is written
    after it left goes to /dev/null, and the command goes on to its end and its own exit code. The
    closed pipe's error stopped a run mid-window and exited 0, so a `set -o pipefail` CI step passed
    on a plan never published (found by an attack)."""

    def __init__(self, stream: Any, *, stdout: bool) -> None:
        self._stream = stream
        self._stdout = stdout

    def write(self, text: str) -> Any:
        try:
            # what the caller wrote is what it counts: the count of the text as rewritten differs
            self._stream.write(advised(text, stdout=self._stdout))
            return len(text)  # what the stream returns (a count, or None for some)
        except OSError as exc:
            if not reader_left(exc, self._fileno()):
                raise
            self._reader_left()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            if not reader_left(exc, self._fileno()):
                raise
            self._reader_left()

    def _fileno(self) -> int:
        try:
            return int(self._stream.fileno())
        except (OSError, ValueError, AttributeError):
            return -1  # no descriptor (a test's capture): no terminal either

    def _reader_left(self) -> None:
        _to_nowhere(self._stream.fileno())
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()  # what its buffer still holds, to /dev/null now

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _SharedByCommands:
    """A change of this process's streams that commands running at once in it (a test's threads, a
    notebook's) share: the first to start makes it, the last to end undoes it. Each command saving
    what it found and putting it back as it ended left stdout another's closed log stream ("I/O
    operation on closed file", found as a test flaked under load)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._undo: Callable[[], None] | None = None

    @contextmanager
    def held(self, make: Callable[[], Callable[[], None]]) -> Iterator[None]:
        """`make()` (which returns its undo) unless another command's is in place, for the block."""
        with self._lock:
            if self._depth == 0:
                self._undo = make()
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                undo = self._undo if self._depth == 0 else None
                if undo is not None:
                    self._undo = None
                    undo()


def _may_leave() -> Callable[[], None]:
    found = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _ReaderMayLeave(sys.stdout, stdout=True), _ReaderMayLeave(sys.stderr, stdout=False)

    def undo() -> None:  # what it found, unless something else replaced them meanwhile
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        if isinstance(sys.stdout, _ReaderMayLeave):
            sys.stdout = found[0]
        if isinstance(sys.stderr, _ReaderMayLeave):
            sys.stderr = found[1]

    return undo


_LEAVING = _SharedByCommands()


def reader_may_leave() -> contextlib.AbstractContextManager[None]:
    """Stdout and stderr as `_ReaderMayLeave` while a command runs (`dagster_output`'s log file may
    replace them meanwhile: its own end puts them back)."""
    return _LEAVING.held(_may_leave)


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


_REDIRECTED = _SharedByCommands()  # one redirection a process, however many commands run in it at once


@contextmanager
def dagster_output(home: Home) -> Iterator[Path]:
    """Route everything written to stdout/stderr (fds included) to the log file, unless verbose.
    Commands running at once in one process share the first one's redirection; the last to end
    puts the terminal back."""
    path = log_file(home)
    if _verbose:
        yield path
        return
    with _REDIRECTED.held(lambda: _redirect(path)):
        yield path


def _redirect(path: Path) -> Callable[[], None]:
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


# the plan file a printed `backfill plan new` drafts, where the product has no id to suggest: pasted
# into bash, `plans/<id>.yaml` was two redirections (`<id`, `>.yaml`), drafted nothing and could write
# over a file `.yaml` (found by an attack). This one is a name `plan new` writes as pasted.
NEW_PLAN_FILE = "plans/new-plan.yaml"


def shell_word(path: str | os.PathLike[str]) -> str:
    """A file name in a command printed for pasting: quoted, so `$(...)` in it runs nothing, and in
    bash's $'...' form with escapes where it holds what a terminal would not show as written."""
    import shlex

    text = str(path)
    if text.startswith("-"):  # `-x.yaml` pasted bare was read as an option (found by a review)
        text = f"./{text}"
    if text.isprintable():
        return shlex.quote(text)
    # a byte that is not UTF-8 comes as a lone surrogate (os.fsdecode): `\udce9` named another file
    escaped = "".join("\\\\" if c == "\\" else "\\'" if c == "'" else c if c.isprintable() else
                      f"\\x{ord(c):02x}" if ord(c) < 0x80 else
                      f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else
                      f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}" for c in text)
    return f"$'{escaped}'"


def partitions_option(keys: Sequence[str], *, as_range: bool = False) -> str:
    """Partition keys as options of a printed `backfill run` or `diff` (cli/partition_args.py reads
    them): `--partitions K1,K2` (`FIRST..LAST` for `as_range`, keys in the window's order)
    shell-quoted, or `--partition KEY` once a key where one cannot sit in the comma list (a comma in
    it, blanks around it, a line break; a range's end holding `..`). Static keys are text:
    `--partitions north west` pasted was split by the shell ("unrecognized arguments: west"), and a
    key holding `;` ran the rest as a command (found by an attack)."""
    ends = [keys[0], keys[-1]] if as_range else list(keys)
    if all(_listable(k, in_range=as_range) for k in ends):
        return f"--partitions {shell_word(f'{keys[0]}..{keys[-1]}' if as_range else ','.join(keys))}"
    return " ".join(f"--partition {shell_word(k)}" for k in keys)


def _listable(key: str, *, in_range: bool) -> bool:
    """Whether `key` reads back as itself from a `--partitions` comma list (or a range's end)."""
    return (bool(key) and key == key.strip() and not any(c in key for c in ",\n\r")
            and not (in_range and ".." in key))

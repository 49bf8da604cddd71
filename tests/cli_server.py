"""The `backfill` command as a real child process, forked from a server that imported it once.

A `backfill` process spends most of its CPU importing (Dagster, DuckDB, the package: ~1.5 s of the
~2.4 s `backfill status` takes); the suite runs it over a hundred times. This server imports
them once per test worker and forks a child per command: a separate process with its own pid,
environment, working folder, file descriptors and exit code, that runs `main` and exits through
the interpreter's normal shutdown (threads joined, atexit run), as the console script does. What a
fork cannot be is the console script itself: the packaging test and the tests that kill a command
(`kill -9`, signals) start the real executable.

What a child takes from the server rather than from the test's `env`: what Python reads only when
it starts (PYTHONPATH, PYTHONHASHSEED: the children share one hash seed, PYTHONIOENCODING, the
locale, warnings other than `ignore`); its stdin is /dev/null; every module of the package is
imported already (an import-order fault would hide here, not in `test_package`'s fresh install).
The imported objects are frozen (`gc.freeze`): the collector of a child never walks them.
No test sets those for a command.

Protocol, on a Unix socket: the client sends one JSON line (argv, env, cwd) with the descriptors of
its stdout and stderr files attached (SCM_RIGHTS); the server answers with the child's pid, then
its exit code. The server is single-threaded (forking from a process with threads is unsafe) and
serves commands concurrently: it forks at once and reaps children as they end.

Run as `python -m tests.cli_server SOCKET`.
"""

from __future__ import annotations

import gc
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

MAX_REQUEST = 1 << 20


# What a command imports on its way after the package: Dagster's instance (its storages, secrets
# and the libraries its state storage reads paths with) and the in-process executor. Found by
# listing the modules a preloaded process imported during `backfill demo`. Not preloaded: the demo's
# definitions, which read settings from the command's environment when they are built
# (BACKFILL_REOPEN_INTERVAL_SECONDS), and pandas, which only the demo's report imports.
_LAZY_IMPORTS = (
    "dagster._core.instance.factory", "dagster._core.instance.runs.run_domain", "dagster._core.secrets.env_file",
    "dagster._core.storage.legacy_storage", "dagster._core.storage.root",
    "dagster._core.storage.schedules.sqlite.sqlite_schedule_storage",
    "dagster._core.definitions.external_asset",
    "dagster._core.definitions.repository_definition.repository_data_builder",
    "dagster._core.execution.execute_in_process", "dagster._core.executor.in_process",
    "dagster._core.system_config.composite_descent", "dagster._core.types.transform_typing",
    "dateutil", "dotenv", "fsspec", "upath",
)


def _preload() -> None:
    """What commands import on their way: the package, the libraries below it and `_LAZY_IMPORTS`;
    and Dagster's migration scripts, which every command's instance reads."""
    import importlib
    import pkgutil

    import backfill_assets

    for module in pkgutil.walk_packages(backfill_assets.__path__, "backfill_assets."):
        if not module.name.startswith("backfill_assets.demo"):
            importlib.import_module(module.name)
    import dagster._core.execution.api  # noqa: F401
    import dagster._core.instance  # noqa: F401

    for name in _LAZY_IMPORTS:
        importlib.import_module(name)
    from backfill_assets.dagster_storage import read_migration_scripts

    read_migration_scripts()


def _receive(conn: socket.socket) -> tuple[dict, list[int]] | None:
    data, fds, _flags, _addr = socket.recv_fds(conn, MAX_REQUEST, 2)
    if not data:
        return None
    while not data.endswith(b"\n"):
        more = conn.recv(MAX_REQUEST)
        if not more:
            return None
        data += more
    return json.loads(data), fds


def _become_command(request: dict, fds: list[int]) -> None:
    """In the child: the command's process state, then `main`, then a normal exit."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # ^C is KeyboardInterrupt, as in a new process
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in (devnull, *fds):
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    if request["env"].get("PYTHONWARNINGS") == "ignore":
        import warnings

        warnings.simplefilter("ignore")
    sys.argv = list(request["argv"])
    sys.path[0] = str(Path(request["argv"][0]).parent)  # the console script's: not this repository
    from backfill_assets.console import entrypoint

    entrypoint()  # raises SystemExit: the interpreter exits as the console script's does


def serve(path: str) -> None:
    _preload()
    # the preloaded heap moves to the permanent generation: a child's collections never walk it, so
    # they never write to (and copy) its pages: a forked `backfill status` 0.59 -> 0.20 CPU-s
    gc.freeze()
    sys.stdout.flush()
    sys.stderr.flush()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    waiting: dict[int, socket.socket] = {}  # child pid -> the client waiting for its exit code
    print("ready", flush=True)
    while True:
        for _key, _events in selector.select(timeout=0.02):
            conn, _ = listener.accept()
            received = _receive(conn)
            if received is None:
                conn.close()
                continue
            request, fds = received
            pid = os.fork()
            if pid == 0:
                selector.close()
                listener.close()
                for other in waiting.values():
                    other.close()
                conn.close()
                _become_command(request, fds)
                os._exit(70)  # not reached: entrypoint exits
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            waiting[pid] = conn
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass  # the client gave up on it (a timeout)
                conn.close()


def _text(data: bytes) -> str:
    """As `subprocess.run(text=True)` decodes: UTF-8 here, universal newlines."""
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


class Forked:
    """A command the server forked, running: what the tests use of `subprocess.Popen` (`pid`,
    `poll`, `wait`, `communicate`, `kill`, `returncode`; output as text once it has ended)."""

    def __init__(self, argv: list[str], pid: int, conn: socket.socket, reader, out, err) -> None:
        self.args, self.pid, self.returncode = argv, pid, None
        self._conn, self._reader, self._out, self._err = conn, reader, out, err

    def _ended(self, line: str) -> int:
        if not line:
            raise RuntimeError(f"the CLI server lost command {self.args} (pid {self.pid})")
        self.returncode = int(line)
        self._reader.close()
        self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            ready, _, _ = select.select([self._conn], [], [], 0)
            if ready:
                self._ended(self._reader.readline())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                self._ended(self._reader.readline())
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        texts = []
        for file in (self._out, self._err):
            file.seek(0)
            texts.append(_text(file.read()))
            file.close()
        return texts[0], texts[1]

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it ended meanwhile: the server reports its exit


@dataclass
class Server:
    """One server per test worker, started on first use."""

    folder: Path
    process: subprocess.Popen | None = None
    starting: threading.Lock = field(default_factory=threading.Lock)  # tests start commands from threads

    @property
    def path(self) -> str:
        return str(self.folder / "cli.sock")

    def _start(self) -> None:
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        self.process = subprocess.Popen([sys.executable, "-m", "tests.cli_server", self.path],
                                        cwd=Path(__file__).resolve().parents[1], env=env,
                                        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the CLI server did not start (exit {self.process.wait()})")

    def run(self, argv: list[str], env: dict[str, str], cwd: Path,
            timeout: float) -> subprocess.CompletedProcess:
        command = self.start(argv, env, cwd)
        out, err = command.communicate(timeout=timeout)
        return subprocess.CompletedProcess(argv, command.returncode, out, err)

    def start(self, argv: list[str], env: dict[str, str], cwd: Path) -> Forked:
        """The command forked and running; its output goes to files read when it has ended."""
        with self.starting:
            if self.process is None or self.process.poll() is not None:
                self._start()
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.path)
        request = json.dumps({"argv": argv, "env": env, "cwd": str(cwd)}).encode() + b"\n"
        socket.send_fds(conn, [request], [out.fileno(), err.fileno()])
        reader = conn.makefile("r")
        return Forked(argv, int(reader.readline()), conn, reader, out, err)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker's ^C reaches the commands, not the server
    serve(sys.argv[1])

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
No test sets those for a command.

Protocol, on a Unix socket: the client sends one JSON line (argv, env, cwd) with the descriptors of
its stdout and stderr files attached (SCM_RIGHTS); the server answers with the child's pid, then
its exit code. The server is single-threaded (forking from a process with threads is unsafe) and
serves commands concurrently: it forks at once and reaps children as they end.

Run as `python -m tests.cli_server SOCKET`.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MAX_REQUEST = 1 << 20


def _preload() -> None:
    """What commands import on their way: the package (but the demo definitions, which a command
    loads from the environment it is given) and the libraries below it."""
    import importlib
    import pkgutil

    import backfill_assets

    for module in pkgutil.walk_packages(backfill_assets.__path__, "backfill_assets."):
        if not module.name.startswith("backfill_assets.demo"):
            importlib.import_module(module.name)
    import dagster._core.execution.api  # noqa: F401
    import dagster._core.instance  # noqa: F401


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
    from backfill_assets.cli import entrypoint

    entrypoint()  # raises SystemExit: the interpreter exits as the console script's does


def serve(path: str) -> None:
    _preload()
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


@dataclass
class Server:
    """One server per test worker, started on first use."""

    folder: Path
    process: subprocess.Popen | None = None

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
        if self.process is None or self.process.poll() is not None:
            self._start()
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.path)
            request = json.dumps({"argv": argv, "env": env, "cwd": str(cwd)}).encode() + b"\n"
            socket.send_fds(conn, [request], [out.fileno(), err.fileno()])
            reader = conn.makefile("r")
            pid = int(reader.readline())
            conn.settimeout(timeout)
            started = time.monotonic()
            try:
                line = reader.readline()
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(argv, time.monotonic() - started) from None
            if not line:
                raise RuntimeError(f"the CLI server lost command {argv} (pid {pid})")
            code = int(line)
            out.seek(0)
            err.seek(0)
            return subprocess.CompletedProcess(argv, code, _text(out.read()), _text(err.read()))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker's ^C reaches the commands, not the server
    serve(sys.argv[1])

"""A throwaway PostgreSQL server for tests.

`PostgresServer` runs `initdb` + `pg_ctl start` in a fresh temp dir, listening only on 127.0.0.1 on a
free port, with trust auth and durability switched off for speed; `stop()` shuts it down
(`pg_ctl stop -m immediate`) and deletes the temp dir. PostgreSQL refuses to run as root, so when we
are root the server runs as the system user `backfill-pg` (created on first use).

Fixtures, to import in conftest.py::

    from tests.pg_server import postgres_server, postgres_url  # noqa: F401

- `postgres_server` (session): one server per pytest process, i.e. one per xdist worker.
- `postgres_url` (function): a fresh, empty database on it, dropped after the test.

Binaries: `BACKFILL_PG_BIN` (a directory), else the highest `/usr/lib/postgresql/<v>/bin`, else
PATH. `scripts/ensure-system-packages.sh` installs Debian's `postgresql`.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import glob
import itertools
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from backfill_assets.environment import pid_running

PG_OS_USER = "backfill-pg"  # the OS user the server runs as when we are root
PG_ROLE = "backfill"  # the superuser role, and the default database's name
APP_ROLE = "backfill_app"  # the role the tests' databases belong to: no superuser, no CREATEROLE
_USERADD_LOCK = "/tmp/backfill-pg-useradd.lock"
_TMP_PREFIX = "backfill-pg-"
_OWNER_FILE = "owner.pid"  # in the temp dir: the pid of the process that started the server
_START_ATTEMPTS = 5
_START_TIMEOUT = 30  # seconds, for `pg_ctl start -w`


class PostgresServerError(RuntimeError):
    pass


def find_pg_bin() -> Path:
    """The directory holding initdb, pg_ctl and postgres."""
    needed = ("initdb", "pg_ctl", "postgres")
    override = os.environ.get("BACKFILL_PG_BIN")
    if override:
        if all(os.access(os.path.join(override, b), os.X_OK) for b in needed):
            return Path(override)
        raise PostgresServerError(f"BACKFILL_PG_BIN={override} lacks one of {', '.join(needed)}")

    def version(path: str) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", Path(path).parent.name)) or (0,)

    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True):
        if all(os.access(os.path.join(bindir, b), os.X_OK) for b in needed):
            return Path(bindir)
    found = [shutil.which(b) for b in needed]
    if all(found) and len({os.path.dirname(f) for f in found}) == 1:  # type: ignore[arg-type]
        return Path(found[0]).parent  # type: ignore[arg-type]
    raise PostgresServerError(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found under /usr/lib/postgresql/*/bin "
        "or on PATH; run `bash scripts/ensure-system-packages.sh` as root (installs Debian's postgresql)"
    )


def _ensure_os_user(name: str) -> pwd.struct_passwd:
    """Create the system user `name` once; safe when several processes (xdist workers) race."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    with open(_USERADD_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with contextlib.suppress(KeyError):
                return pwd.getpwnam(name)
            useradd = shutil.which("useradd") or "/usr/sbin/useradd"
            proc = subprocess.run(
                [useradd, "--system", "--no-create-home", "--user-group",
                 "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name],
                capture_output=True, text=True,
            )
            # 9: name already in use (another container/process without our lock got there first)
            if proc.returncode not in (0, 9):
                raise PostgresServerError(f"useradd {name} failed ({proc.returncode}): {proc.stderr.strip()}")
            return pwd.getpwnam(name)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no server log: {exc})"


def _traversable_by_others(path: str) -> bool:
    p = Path(path).resolve()
    return all(os.stat(d).st_mode & 0o001 for d in [p, *p.parents])


def reap_stale_servers(base: str | None = None) -> int:
    """Stop servers (and delete temp dirs) left by test processes that died without cleaning up."""
    base = base or _temp_base()
    reaped = 0
    for d in glob.glob(os.path.join(base, _TMP_PREFIX + "*")):
        owner = Path(d, _OWNER_FILE)
        try:
            pid = int(owner.read_text().strip())
        except (OSError, ValueError):
            continue
        if pid_running(pid):
            continue
        pidfile = Path(d, "data", "postmaster.pid")
        with contextlib.suppress(OSError, ValueError, IndexError):
            os.kill(int(pidfile.read_text().splitlines()[0]), signal.SIGQUIT)  # = immediate shutdown
        shutil.rmtree(d, ignore_errors=True)
        reaped += 1
    return reaped


def _temp_base() -> str:
    base = os.environ.get("BACKFILL_PG_TMPDIR") or tempfile.gettempdir()
    if os.geteuid() == 0 and not _traversable_by_others(base):
        base = "/tmp"  # the server's user must reach its data dir
    return base


class PostgresServer:
    """A PostgreSQL server in a temp dir, for one test process. Use as a context manager or call
    `start()`/`stop()`; an atexit handler stops it if the caller does not."""

    def __init__(self, *, bindir: str | Path | None = None, startup_timeout: float = _START_TIMEOUT):
        self.bindir = Path(bindir) if bindir else find_pg_bin()
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        self.tmpdir: Path | None = None
        self._uid: int | None = None
        self._gid: int | None = None
        self._db_counter = itertools.count(1)
        self._owner_pid: int | None = None

    # -- addresses ------------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return "127.0.0.1"

    def url_for(self, dbname: str = PG_ROLE, driver: str | None = None) -> str:
        """`postgresql://backfill@127.0.0.1:PORT/<dbname>`; `driver="psycopg2"` gives the
        `postgresql+psycopg2://` form for SQLAlchemy."""
        self._require_running()
        scheme = f"postgresql+{driver}" if driver else "postgresql"
        role = PG_ROLE if dbname == PG_ROLE else APP_ROLE
        return f"{scheme}://{role}@{self.host}:{self.port}/{dbname}"

    def dsn_for(self, dbname: str = PG_ROLE) -> str:
        self._require_running()
        return f"host={self.host} port={self.port} user={PG_ROLE} dbname={dbname}"

    @property
    def url(self) -> str:
        return self.url_for()

    @property
    def dsn(self) -> str:
        return self.dsn_for()

    @property
    def data_dir(self) -> Path:
        assert self.tmpdir is not None
        return self.tmpdir / "data"

    @property
    def log_path(self) -> Path:
        assert self.tmpdir is not None
        return self.tmpdir / "server.log"

    @property
    def running(self) -> bool:
        return self.port is not None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> PostgresServer:
        if self.running:
            return self
        reap_stale_servers()
        base = _temp_base()
        self.tmpdir = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=base))
        self._owner_pid = os.getpid()
        atexit.register(self._atexit_stop)
        try:
            (self.tmpdir / _OWNER_FILE).write_text(str(os.getpid()))
            (self.tmpdir / "sock").mkdir()
            if os.geteuid() == 0:
                user = _ensure_os_user(PG_OS_USER)
                self._uid, self._gid = user.pw_uid, user.pw_gid
                for p in (self.tmpdir, self.tmpdir / "sock"):
                    os.chown(p, self._uid, self._gid)
            self._initdb()
            self._start_on_free_port()
            self._wait_ready()
            self._psql_admin(f'CREATE DATABASE "{PG_ROLE}"')
            self._psql_admin(f'CREATE ROLE "{APP_ROLE}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE')
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        tmpdir, self.tmpdir = self.tmpdir, None
        self.port = None
        atexit.unregister(self._atexit_stop)
        if tmpdir is None:
            return
        data = tmpdir / "data"
        if (data / "postmaster.pid").exists():
            proc = self._run(
                [self.bindir / "pg_ctl", "stop", "-D", data, "-m", "immediate", "-w", "-t", "30"],
                check=False, cwd=tmpdir,
            )
            if proc.returncode != 0 and (data / "postmaster.pid").exists():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    os.kill(int((data / "postmaster.pid").read_text().splitlines()[0]), signal.SIGKILL)
        shutil.rmtree(tmpdir, ignore_errors=True)

    def _atexit_stop(self) -> None:
        if os.getpid() == self._owner_pid:  # not in a forked child that inherited the handler
            self.stop()

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- databases ------------------------------------------------------------------------------
    def create_database(self, name: str | None = None) -> str:
        """Create an empty database (a unique name when none is given); returns its URL."""
        name = name or f"test_{os.getpid()}_{next(self._db_counter)}"
        _check_identifier(name)
        # copied file by file: the default (WAL_LOG, PostgreSQL 15+) writes the template's pages
        # through the WAL, ~0.07 CPU-s more a test database (152 of them a suite)
        strategy = " STRATEGY = FILE_COPY" if self._version() >= 15 else ""
        self._psql_admin(f'CREATE DATABASE "{name}" OWNER "{APP_ROLE}"{strategy}')
        return self.url_for(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, disconnecting whoever is still connected (connection pools)."""
        _check_identifier(name)
        self._psql_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    # -- internals ------------------------------------------------------------------------------
    def _require_running(self) -> None:
        if not self.running:
            raise PostgresServerError("the PostgreSQL server is not running; call start() first")

    def _run(self, cmd: list, *, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
        cmd = [str(c) for c in cmd]
        if self._uid is not None:
            if shutil.which("setpriv"):
                cmd = ["setpriv", f"--reuid={self._uid}", f"--regid={self._gid}", "--clear-groups", *cmd]
            else:
                cmd = ["runuser", "-u", PG_OS_USER, "--", *cmd]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd or self.tmpdir,
                              stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise PostgresServerError(
                f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
            )
        return proc

    def _initdb(self) -> None:
        self._run([self.bindir / "initdb", "-D", self.data_dir, "-U", PG_ROLE, "--auth=trust",
                   "-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions"])
        assert self.tmpdir is not None
        (self.data_dir / "pg_hba.conf").write_text(
            "local all all trust\nhost all all 127.0.0.1/32 trust\n"
        )
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write(
                "\n# tests/pg_server.py\n"
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.tmpdir / 'sock'}'\n"
                "max_connections = 200\n"
                "shared_buffers = 64MB\n"
                "fsync = off\n"
                "synchronous_commit = off\n"
                "full_page_writes = off\n"
                "wal_level = minimal\n"
                "max_wal_senders = 0\n"
                # /dev/shm is 64 MB in Docker: keep parallel-query segments out of it
                "dynamic_shared_memory_type = mmap\n"
                "logging_collector = off\n"
            )

    def _start_on_free_port(self) -> None:
        last = ""
        for _ in range(_START_ATTEMPTS):
            port = _free_port()
            with contextlib.suppress(FileNotFoundError):
                self.log_path.unlink()
            proc = self._run(
                [self.bindir / "pg_ctl", "start", "-D", self.data_dir, "-l", self.log_path, "-w",
                 "-t", str(int(self.startup_timeout)), "-o", f"-p {port}"],
                check=False,
            )
            if proc.returncode == 0:
                self.port = port
                return
            last = _tail(self.log_path)
            if "already in use" not in last and "could not bind" not in last:
                break
            # another process took the port between our bind(0) and the server's bind: try again
            if (self.data_dir / "postmaster.pid").exists():
                self._run([self.bindir / "pg_ctl", "stop", "-D", self.data_dir, "-m", "immediate"],
                          check=False)
        raise PostgresServerError(
            f"PostgreSQL did not start (pg_ctl start, {self.bindir}); server log tail:\n{last}"
        )

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                with psycopg.connect(self.dsn_for("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise PostgresServerError(
                        f"PostgreSQL on port {self.port} not accepting connections after "
                        f"{self.startup_timeout:.0f} s: {exc}\nserver log tail:\n{_tail(self.log_path)}"
                    ) from exc
                time.sleep(0.05)

    def _version(self) -> int:
        """The server's major version (its data directory's PG_VERSION)."""
        return int((self.data_dir / "PG_VERSION").read_text().split(".")[0])

    def _psql_admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.dsn_for("postgres"), autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]


def as_admin(url: str) -> str:
    """The same database as the superuser: what only an administrator does in a test (making an
    insider's role, handing it a table), never the product, which runs as APP_ROLE."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{PG_ROLE}@{rest.partition('@')[2]}"


def admin_sql(url: str, *statements: str) -> None:
    """`statements` run by the superuser on `url`'s database, each on its own."""
    import psycopg

    with psycopg.connect(as_admin(url), autocommit=True) as con:
        for statement in statements:
            con.execute(statement)


def give_table(url: str, table: str, role: str) -> None:
    """`role` made the owner of `table`, which keeps the product's role's rights on it: a team's
    table the product writes is granted to it by its owner (who may hang code on it, and is the
    insider of the tests that do this)."""
    admin_sql(url, f"ALTER TABLE {table} OWNER TO {role}", f"GRANT ALL ON TABLE {table} TO {APP_ROLE}")


def _check_identifier(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name):
        raise ValueError(f"not a plain database name: {name!r}")


def _db_name_for(nodeid: str, n: int) -> str:
    stem = re.sub(r"[^a-z0-9_]+", "_", nodeid.rsplit("::", 1)[-1].lower()).strip("_")[:40]
    return f"t{n}_{stem or 'db'}"


_test_counter = itertools.count(1)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL server per pytest process (so one per xdist worker)."""
    try:
        server = PostgresServer()
    except PostgresServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    with server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer, request) -> Iterator[str]:
    """A fresh, empty database for this test (`postgresql://backfill@127.0.0.1:PORT/<name>`);
    dropped afterwards, even if connections are still open."""
    name = _db_name_for(request.node.nodeid, next(_test_counter))
    url = postgres_server.create_database(name)
    yield url
    postgres_server.drop_database(name)


__all__ = [
    "APP_ROLE",
    "PG_OS_USER",
    "PG_ROLE",
    "PostgresServer",
    "PostgresServerError",
    "admin_sql",
    "as_admin",
    "give_table",
    "find_pg_bin",
    "postgres_server",
    "postgres_url",
    "reap_stale_servers",
]

"""The throwaway PostgreSQL server of tests/pg_server.py: it starts, isolates databases, runs as a
non-root OS user when we are root, and leaves nothing behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from tests import pg_server
from tests.pg_server import PostgresServer, reap_stale_servers

# the fixtures (conftest.py may import them too; a local name keeps this module self-contained)
postgres_server = pg_server.postgres_server
postgres_url = pg_server.postgres_url

ROOT = Path(__file__).resolve().parents[1]


def _port_is_free(port: int) -> bool:
    """Could a new server listen on the port? SO_REUSEADDR, as PostgreSQL sets it, so connections
    of the stopped server still in TIME_WAIT (up to 60 s) do not count as a listener."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_fresh_database_accepts_tables(postgres_url):
    """The product's role in the tests is what README asks of it: no superuser, no CREATEROLE."""
    assert postgres_url.startswith("postgresql://backfill_app@127.0.0.1:")
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = current_user"
                            ).fetchone() == (False, False)
        assert conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone() == (0,)
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
        conn.commit()
        assert conn.execute("SELECT v FROM t ORDER BY id").fetchall() == [("a",), ("b",)]
        assert conn.execute("SELECT current_user").fetchone() == ("backfill_app",)
        assert conn.execute("SHOW fsync").fetchone() == ("off",)
        assert conn.execute("SHOW max_connections").fetchone() == ("200",)


def test_default_database_and_dsn(postgres_server):
    assert postgres_server.url == f"postgresql://backfill@127.0.0.1:{postgres_server.port}/backfill"
    with psycopg.connect(postgres_server.dsn) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("backfill",)


def test_databases_are_isolated(postgres_server):
    a = postgres_server.create_database("iso_a")
    b = postgres_server.create_database("iso_b")
    try:
        with psycopg.connect(a) as conn:
            conn.execute("CREATE TABLE only_in_a (x int)")
            conn.execute("INSERT INTO only_in_a VALUES (42)")
        with psycopg.connect(b) as conn:
            assert conn.execute("SELECT to_regclass('only_in_a')").fetchone() == (None,)
            conn.execute("CREATE TABLE only_in_a (x int)")  # same name, other database: no clash
            assert conn.execute("SELECT count(*) FROM only_in_a").fetchone() == (0,)
        with psycopg.connect(a) as conn:
            assert conn.execute("SELECT x FROM only_in_a").fetchall() == [(42,)]
        # drop works while a connection is still open (WITH (FORCE))
        held = psycopg.connect(a)
        postgres_server.drop_database("iso_a")
        held.close()
        with pytest.raises(psycopg.OperationalError, match="does not exist"):
            psycopg.connect(a).close()
    finally:
        postgres_server.drop_database("iso_a")
        postgres_server.drop_database("iso_b")


def test_server_runs_as_non_root_os_user(postgres_server):
    with psycopg.connect(postgres_server.dsn) as conn:
        data_dir, pid = conn.execute(
            "SELECT current_setting('data_directory'), pg_backend_pid()"
        ).fetchone()
        status = Path(f"/proc/{pid}/status").read_text()  # while the backend exists
    owner = os.stat(data_dir).st_uid
    backend_uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    if os.geteuid() == 0:
        assert owner != 0
        assert backend_uid != 0
    else:
        assert owner == os.geteuid() == backend_uid
    assert Path(data_dir).is_relative_to(postgres_server.tmpdir)


def test_stop_frees_port_and_removes_temp_dir():
    t0 = time.monotonic()
    with PostgresServer() as server:
        started = time.monotonic() - t0
        port, tmpdir = server.port, server.tmpdir
        assert not _port_is_free(port)
        with psycopg.connect(server.dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    assert started < 30, f"start took {started:.1f} s"
    deadline = time.monotonic() + 30  # `pg_ctl stop -m immediate` returns before the socket closes
    while not _port_is_free(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _port_is_free(port)
    assert not tmpdir.exists()
    assert not server.running
    server.stop()  # idempotent


def test_two_servers_start_at_once():
    servers = [PostgresServer(), PostgresServer()]
    errors: list[BaseException] = []

    def start(s: PostgresServer) -> None:
        try:
            s.start()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in servers]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert servers[0].port != servers[1].port
        for s in servers:
            with psycopg.connect(s.dsn) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        for s in servers:
            s.stop()


def test_server_of_a_killed_process_is_reaped():
    """A test process killed with SIGKILL runs no atexit handler; the next start reaps its server."""
    code = (
        "import sys, time\n"
        "from tests.pg_server import PostgresServer\n"
        "s = PostgresServer().start()\n"
        "print(s.port, s.tmpdir, flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        port_s, tmpdir_s = proc.stdout.readline().split()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    port, tmpdir = int(port_s), Path(tmpdir_s)
    # orphaned now (unless another xdist worker's start() has reaped it in the meantime)
    assert not _port_is_free(port) or not tmpdir.exists()
    reap_stale_servers(str(tmpdir.parent))
    deadline = time.monotonic() + 60  # a loaded machine takes its time to stop a server
    while not _port_is_free(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _port_is_free(port)
    assert not tmpdir.exists()

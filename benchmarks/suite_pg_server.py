"""The PostgreSQL server's own CPU during a test run: a pytest plugin that prints, as the session
ends, the CPU of the test server's processes (each postmaster's, with the backends it reaped),
which no test process counts (`suite_cpu.py` sees only the children a worker waits for).

    PYTHONPATH=benchmarks:. .venv/bin/pytest -q -s -p suite_pg_server tests/test_pg_rollback.py

Run it without `-n` (a worker's server is its own); the servers run as `tests/pg_server.py`'s
PG_OS_USER. A benchmark, not a test.
"""

from __future__ import annotations

import os
import subprocess

import pytest


def server_cpu_seconds(user: str = "backfill-pg") -> float:
    """User and system CPU of every `postgres` process of `user`, children reaped included."""
    found = subprocess.run(["pgrep", "-u", user, "-x", "postgres"], capture_output=True, text=True).stdout.split()
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in found:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115, PTH123
        except OSError:
            continue  # ended meanwhile
        total += sum(int(f) for f in fields[11:15]) / ticks  # utime, stime, cutime, cstime
    return total


def pytest_sessionfinish(session: pytest.Session) -> None:
    print(f"\nPostgreSQL server CPU: {server_cpu_seconds():.1f} s", flush=True)

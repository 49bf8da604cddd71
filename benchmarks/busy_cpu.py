"""Where the test suite's CPU goes, every test alone: a pytest plugin that writes, per test, the
machine's busy CPU seconds while it ran (from /proc/stat, so the commands a test forks, the CLI
server's children and daemons included, count with it) and its wall time. Run the suite serially,
with nothing else on the machine:

    BUSY_CPU_LOG=/tmp/busy.tsv PYTHONPATH=benchmarks .venv/bin/pytest -q -p busy_cpu -p no:xdist
    sort -rn /tmp/busy.tsv | head                                      # cpu s, wall s, test
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

_LOG = open(os.environ.get("BUSY_CPU_LOG", "/tmp/busy.tsv"), "a", encoding="utf-8")  # noqa: SIM115 - the session's


def _busy_seconds() -> float:
    with open("/proc/stat", encoding="ascii") as stat:
        ticks = [int(v) for v in stat.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    busy, started = _busy_seconds(), time.monotonic()
    yield
    _LOG.write(f"{_busy_seconds() - busy:.2f}\t{time.monotonic() - started:.2f}\t{item.nodeid}\n")
    _LOG.flush()

"""Where the test suite's CPU goes: a pytest plugin that writes, per test, the CPU of the worker
itself and of the child processes it waited for, the wall time, and the programs it started.

    SUITE_CPU_DIR=/tmp/cpu PYTHONPATH=benchmarks .venv/bin/pytest -q -n 4 --dist loadscope -p suite_cpu
    cat /tmp/cpu/*.tsv | sort -t$'\\t' -k2 -rn | head     # test, self s, children s, wall s, programs

Commands forked by the tests' CLI server count in the server, not in the test (its CPU reaches the
totals when the worker ends). This found Dagster's compute-log mirror: two `tail` and two Python
processes a run (see README, Performance).
"""

from __future__ import annotations

import collections
import os
import resource
import subprocess
import time
from pathlib import Path

import pytest

_started: collections.Counter[str] = collections.Counter()
_popen_init = subprocess.Popen.__init__


def _counting_init(self, args, *rest, **kwargs):  # type: ignore[no-untyped-def]
    program = args[0] if isinstance(args, list | tuple) else str(args).split()[0]
    _started[os.path.basename(str(program))] += 1
    return _popen_init(self, args, *rest, **kwargs)


subprocess.Popen.__init__ = _counting_init  # type: ignore[method-assign]


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # type: ignore[no-untyped-def]
    _started.clear()
    own, children, wall = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.time()
    yield
    folder = Path(os.environ.get("SUITE_CPU_DIR", "suite-cpu"))
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{os.getpid()}.tsv", "a", encoding="utf-8") as out:
        out.write(f"{item.nodeid}\t{_cpu(resource.RUSAGE_SELF) - own:.2f}\t"
                  f"{_cpu(resource.RUSAGE_CHILDREN) - children:.2f}\t{time.time() - wall:.2f}\t{dict(_started)}\n")

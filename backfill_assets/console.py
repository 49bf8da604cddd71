"""The `backfill` console script: the collector's thresholds set before anything is imported.

A command allocates millions of objects while it imports Dagster and builds its definitions, almost
none of them garbage. Collecting the youngest generation every 700 new container objects (Python's
default) ran the collector ~470 times in `backfill status` and took ~0.26 of its CPU-s; every 5,000,
65 times and ~0.13 s, and the command used 10% less CPU (2.67 -> 2.41 s, 8 interleaved runs each).
The older generations keep their ratios, so a long command still collects its cycles.
"""

from __future__ import annotations

import gc
import os
import sys

from backfill_assets.errors import INTERRUPTED, INTERRUPTED_EXIT

GC_THRESHOLDS = (5_000, 10, 10)


def standard_streams_open() -> None:
    """Descriptors 0, 1 and 2 open before the command opens anything: one the shell closed (`>&-`,
    `2>&-`, `<&-`) is /dev/null, read by no one, and its Python stream with it. Python starts such a
    process with `sys.stdout` None, and the command's first line raised: `run --and-publish >&-`
    did nothing and every command exited 120 with "Exception ignored" tracebacks (found by an
    attack); and a closed number is the next file opened's, which the log's redirection onto 1 and
    2 would close (the warehouse's, its lock with it)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)  # the lowest free number: `fd`, those below are open
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, encoding="utf-8", errors="backslashreplace",  # noqa: SIM115
                                    closefd=False))


def entrypoint() -> None:
    gc.set_threshold(*GC_THRESHOLDS)
    standard_streams_open()
    try:
        from backfill_assets.cli import entrypoint as run_command  # after: importing it allocates most
    except KeyboardInterrupt:  # typed while the command still imported what it runs (found by an attack)
        sys.stderr.write(INTERRUPTED)
        raise SystemExit(INTERRUPTED_EXIT) from None
    run_command()

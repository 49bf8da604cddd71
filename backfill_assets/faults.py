"""Named crash points, so the suite can rehearse a kill -9 at exactly that step.

`BACKFILL_CRASH_AT=approve.after_commit` (comma-separated names, optionally `name@N` for the Nth
time the point is reached) makes the process SIGKILL itself there. Unset, a checkpoint costs one
dictionary lookup. The names are listed where they are called.
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "BACKFILL_CRASH_AT"
_seen: dict[str, int] = {}


def checkpoint(name: str) -> None:
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    _seen[name] = _seen.get(name, 0) + 1
    for item in wanted.split(","):
        point, _, nth = item.strip().partition("@")
        if point == name and (not nth or int(nth) == _seen[name]):
            os.kill(os.getpid(), signal.SIGKILL)

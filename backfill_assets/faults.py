"""Named crash points, so the suite can rehearse a kill -9 at exactly that step.

`BACKFILL_CRASH_AT=approve.after_commit` (comma-separated names, optionally `name@N` for the Nth
time the point is reached) makes the process SIGKILL itself there. `BACKFILL_STALL_AT=name=SECONDS`
(same forms) makes it sleep there instead: a slow step, with whatever it holds still held, so a
second command can be started against it; a test in the same process ends the sleep early by
setting `BACKFILL_STALL_RELEASE` to the point's name, one in another process by making the file
`BACKFILL_STALL_RELEASE_FILE` names. Unset, a checkpoint costs two dictionary lookups. The names
are listed where they are called.
"""

from __future__ import annotations

import os
import signal
import time

CRASH_ENV = "BACKFILL_CRASH_AT"
STALL_ENV = "BACKFILL_STALL_AT"
RELEASE_ENV = "BACKFILL_STALL_RELEASE"
RELEASE_FILE_ENV = "BACKFILL_STALL_RELEASE_FILE"
_seen: dict[str, int] = {}


def checkpoint(name: str) -> None:
    crash, stall = os.environ.get(CRASH_ENV), os.environ.get(STALL_ENV)
    if not crash and not stall:
        return
    _seen[name] = _seen.get(name, 0) + 1
    if crash and _reached(crash, name):
        os.kill(os.getpid(), signal.SIGKILL)
    for item in (stall or "").split(","):
        point, _, seconds = item.strip().partition("=")
        if seconds and _reached(point, name):
            until, released = time.monotonic() + float(seconds), os.environ.get(RELEASE_FILE_ENV)
            while time.monotonic() < until and os.environ.get(RELEASE_ENV) != name and \
                    not (released and os.path.exists(released)):
                time.sleep(min(0.05, max(0.0, until - time.monotonic())))


def reached(name: str) -> int:
    """How many times this process reached the point `name` while a crash or stall was set: a test
    holding a command there waits for this to grow, not for a guessed time."""
    return _seen.get(name, 0)


def _reached(wanted: str, name: str) -> bool:
    for item in wanted.split(","):
        point, _, nth = item.strip().partition("@")
        if point == name and (not nth or int(nth) == _seen[name]):
            return True
    return False

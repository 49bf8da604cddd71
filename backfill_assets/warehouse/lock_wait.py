"""Waiting for a warehouse lock: visible while it lasts, bounded, and one line when it ends.

The CLI installs a reporter that prints to stderr; runs inside Dagster report through their log.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from backfill_assets.errors import LockWaitTimeout
from backfill_assets.settings import number

WAIT_ENV = "BACKFILL_LOCK_WAIT_SECONDS"
DEFAULT_WAIT_SECONDS = 120.0
REPORT_EVERY_SECONDS = 5.0

_reporter: Callable[[str], None] | None = None


def set_reporter(reporter: Callable[[str], None] | None) -> None:
    global _reporter
    _reporter = reporter


def seconds(explicit: float | None) -> float:
    return explicit if explicit is not None else number(WAIT_ENV, DEFAULT_WAIT_SECONDS, 0, 86400, "seconds")


def describe_pid(pid: int) -> str:
    """`PID 123 (backfill run plans/x.yaml)` from /proc when we can read it."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return f"PID {pid}"
    words = [w.decode(errors="replace") for w in raw.split(b"\0") if w]
    # `python .../bin/backfill run x` reads better as `backfill run x`
    while len(words) > 1 and ("python" in Path(words[0]).name or words[0] == "-m"):
        words = words[1:]
    if words:
        words[0] = Path(words[0]).name
    text = " ".join(words)
    return f"PID {pid} ({text[:80]})" if text else f"PID {pid}"


def holder_from_message(message: str) -> str:
    match = re.search(r"\(PID (\d+)\)", message)
    return describe_pid(int(match.group(1))) if match else "another process"


class Wait:
    def __init__(self, what: str, limit: float) -> None:
        self.what = what
        self.limit = limit
        self.started = time.monotonic()
        self.reported = self.started

    def still_waiting(self, holder: str) -> None:
        """Report every few seconds; raise one line once the limit is reached."""
        now = time.monotonic()
        waited = now - self.started
        if waited >= self.limit:
            raise LockWaitTimeout(
                f"the warehouse {self.what} stayed locked by {holder} for {waited:.0f}s",
                fix=f"wait for it to finish, or raise {WAIT_ENV} (now {self.limit:.0f})")
        if _reporter is not None and now - self.reported >= REPORT_EVERY_SECONDS:
            self.reported = now
            _reporter(f"waiting for the warehouse lock held by {holder}: {waited:.0f}s of "
                      f"{self.limit:.0f}s")

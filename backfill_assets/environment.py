"""Faults of the machine, not of the product: a full disk, a file size limit, a read-only home.

They reach us from many layers (an OSError, DuckDB's IO errors, SQLite inside Dagster's storage
through SQLAlchemy), each with its own text. `fault_of` recognises them anywhere in an exception's
chain and turns them into one line naming what could not be written and the fix. Every write of the
product is a transaction, so what failed never committed: the command can simply run again. And
whether a process still runs here (a lease's holder, a waiter for the DuckDB file).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator

from backfill_assets.errors import BackfillError

_BY_ERRNO = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
             errno.EFBIG: "a file size limit was reached", errno.EROFS: "it is on a read-only file system",
             errno.EACCES: "permission denied", errno.EPERM: "permission denied"}
_BY_TEXT = (("no space left on device", "the disk is full"), ("database or disk is full", "the disk is full"),
            ("disk quota exceeded", "the disk quota is used up"),
            ("file too large", "a file size limit was reached"),
            ("read-only file system", "it is on a read-only file system"),
            ("readonly database", "it is on a read-only file system"),
            ("disk i/o error", "a disk I/O error (a full disk, a size limit or a read-only file system)"),
            ("unable to open database file", "a file cannot be created there"),
            ("permission denied", "permission denied"))
_QUOTED_PATH = re.compile(r"[\"'](/[^\"']+)[\"']")


class EnvironmentFault(BackfillError):
    """The machine refused a write (full disk, size limit, read-only or unwritable folder)."""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo = [exc]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        todo.extend(x for x in (item.__cause__, item.__context__, getattr(item, "original", None),
                                getattr(item, "orig", None)) if isinstance(x, BaseException))


def _read_only(path: str) -> bool:
    import os

    probe = path
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:
        return bool(probe) and bool(os.statvfs(probe).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def reason_of(text: str) -> str | None:
    lowered = text.lower()
    return next((why for needle, why in _BY_TEXT if needle in lowered), None)


def fix_for(why: str, where: str) -> str:
    # the step that failed was one transaction; a command of several (a load's runs, a plan's
    # waves) keeps what its earlier ones committed, so "nothing was committed" misled (found by an
    # attack): status says what they did, and the same command goes on from there
    after = "the step that failed committed nothing (`backfill status` shows what the steps before it did)"
    if why.startswith("a disk I/O error"):
        return (f"free space on the disk that holds {where} (or raise the file size limit), or move it to a "
                f"writable file system, and run the command again: {after}")
    if why.startswith("it is on a read-only") or why == "permission denied":
        return (f"put BACKFILL_HOME (--home) and DAGSTER_HOME in a folder you can write ({where} is not), and run "
                f"the command again there: {after}")
    return (f"free space on the disk that holds {where} (or raise the file size limit) and run the command "
            f"again: {after}")


def fault_of(exc: BaseException, default_where: str) -> EnvironmentFault | None:
    """One line for a full disk / size limit / read-only home anywhere in `exc`'s chain, else None."""
    for item in _chain(exc):
        why, where = None, None
        if isinstance(item, OSError) and item.errno in _BY_ERRNO:
            why, where = _BY_ERRNO[item.errno], item.filename
        else:
            why = reason_of(str(item))
            found = _QUOTED_PATH.search(str(item))
            where = found.group(1) if found else None
        if why:
            where = str(where or default_where)
            if _read_only(where):  # the texts of SQLite and DuckDB often do not say so themselves
                why = "it is on a read-only file system"
            fault = EnvironmentFault(f"cannot write {where}: {why}", fix=fix_for(why, where))
            return fault
    return None


def pid_running(pid: int) -> bool:
    """Whether a process of this pid runs on this machine (another user's counts; a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has exited; it only waits to be reaped
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def process_identity(pid: int) -> str | None:
    """The process `pid` as no other process of this machine is, whatever its wall clock did since:
    the boot's id and the process's start in clock ticks after the boot (Linux's /proc), or None.
    A time read from the wall clock moves with it (a clock stepped forward ten minutes made a live
    lease holder look started after its own heartbeat, so another run took its lease over: found by
    an attack); these do not."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            ticks = int(handle.read().rsplit(")", 1)[-1].split()[19])  # field 22: starttime
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
    except (OSError, ValueError, IndexError):
        return None
    return f"{boot}:{ticks}" if boot and " " not in boot else None


def is_process(pid: int, identity: str) -> bool:
    """Whether the process `pid` runs on this machine and is the one `process_identity` named
    `identity` (where the identity cannot be read, a running pid counts)."""
    if not pid_running(pid):
        return False
    found = process_identity(pid)
    return found is None or found == identity

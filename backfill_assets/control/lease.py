"""One `backfill run` of a plan at a time: a lease in the control record.

The holder renews it between slices. A second run is refused naming the holder. A lease expires
when its holder's process is gone (same host: the pid no longer runs, or runs another process than
the holder, which got the pid once the holder died: told by the boot's id and the process's start
in ticks since boot, which no wall-clock step moves) or its heartbeat is
older than the time-to-live (another host), so a run killed with kill -9 never blocks the plan for
good.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from backfill_assets.control import evidence_log
from backfill_assets.control.names import SCHEMA
from backfill_assets.environment import is_process, pid_running, process_identity
from backfill_assets.errors import PartitionRefused, PlanRefused
from backfill_assets.tags import LAUNCHER_TAG
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import leases as store

TTL_SECONDS = 300.0
# what follows the time in `acquired_at`: the holder's `process_identity` (a column of its own would
# need a new schema); a heartbeat is the wall clock's, which a step moves (found by an attack)
_PROCESS = " process "


@dataclass(frozen=True)
class Lease:
    plan_id: str
    holder: str
    host: str
    pid: int
    acquired_at: str
    heartbeat_at: float

    @property
    def since(self) -> str:
        return self.acquired_at.split(_PROCESS, 1)[0]

    def alive(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        if self.host == socket.gethostname():
            process = self.acquired_at.split(_PROCESS, 1)[1] if _PROCESS in self.acquired_at else None
            # the holder's own process, named as no clock step changes (`process_identity`): a
            # process that got its pid once it died is not it; a row without the name (written
            # before, or planted) holds while its pid runs (its start, read against the heartbeat,
            # moves with the wall clock: a step had a live holder's lease taken, found by an attack)
            return is_process(self.pid, process) if process else pid_running(self.pid)
        # a heartbeat from further ahead than a time-to-live is no clock's skew: a row planted to
        # hold every run off for ever (leases are not sealed; found by an attack) is a dead lease
        return abs(now - self.heartbeat_at) < TTL_SECONDS

    def describe(self) -> str:
        return f"{self.holder} (pid {self.pid} on {self.host}, since {self.since})"


def current(session: Session, plan_id: str) -> Lease | None:
    """The plan's lease; held for update inside a writer's transaction, only read by a reader."""
    row = store.lease_row(session, plan_id, hold=not session.read_only and session.in_transaction)
    return _lease(row)


def _lease(row: tuple[Any, ...] | None) -> Lease | None:
    return Lease(row[0], row[1], row[2], int(row[3]), row[4], float(row[5])) if row else None


def acquire(session: Session, plan_id: str, holder: str) -> Lease:
    """Take the plan's lease or refuse naming its live holder; a dead holder's lease is taken over."""
    with session.transaction():
        session.lock(f"lease:{plan_id}")
        found = current(session, plan_id)
        mine = (socket.gethostname(), os.getpid())
        if found is not None and (found.host, found.pid) != mine and found.alive():
            raise PlanRefused(f"plan {plan_id} is already being run by {found.describe()}",
                              fix="wait for that run to finish (or stop it): a killed run's lease ends with "
                                  "its process on its host, elsewhere five minutes after its last heartbeat; "
                                  "one written by a release before this one (or planted), which names no "
                                  "process but a pid, holds while that pid runs, a backfill run or not: delete "
                                  f"its row in {SCHEMA}.leases then")
        process = process_identity(mine[1])
        since = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        lease = Lease(plan_id, holder, mine[0], mine[1], since + (f"{_PROCESS}{process}" if process else ""),
                      time.time())
        store.replace(session, lease.plan_id, lease.holder, lease.host, lease.pid, lease.acquired_at,
                      lease.heartbeat_at)
        if found is not None and (found.host, found.pid) != mine:
            evidence_log.append(session, plan_id=plan_id, kind="lease_taken_over", actor=holder,
                                payload={"from": found.describe()})
    _HELD_HERE.add(identity(lease))
    return lease


class LeaseLost(PlanRefused):
    """The run's lease is no longer its own: another runner took it over (or it was released)."""


def _same(found: Lease | None, lease: Lease) -> bool:
    return found is not None and (found.host, found.pid, found.acquired_at) == \
        (lease.host, lease.pid, lease.acquired_at)


def renew(session: Session, lease: Lease) -> None:
    """Extend our lease, or raise LeaseLost when it is no longer ours: a runner whose lease was
    taken over (it looked dead to another host) must not go on writing beside the new holder."""
    with session.transaction():
        found = current(session, lease.plan_id)  # held until the update commits
        if not _same(found, lease):
            who = found.describe() if found is not None else "nobody (it was released)"
            raise LeaseLost(f"the lease of plan {lease.plan_id} is now held by {who}",
                            fix=f"let that run finish; `backfill status {lease.plan_id}` shows it")
        store.beat(session, lease.plan_id, lease.host, lease.pid, time.time())


def launcher_label(lease: Lease) -> str:
    return f"{lease.host}:{lease.pid}"


Identity = tuple[str, str, int, str]

# the leases this process took (or, a worker, was handed by the process that took them): a run is
# the holder's only where its lease is known. The label alone is text anyone can copy into a run's
# tags from the refusal, which names the holder's pid and host (found by an attack); a pid alone is
# another container's too, where containers share a hostname (found by the next one)
_HELD_HERE: set[Identity] = set()


def identity(lease: Lease) -> Identity:
    return (lease.plan_id, lease.host, lease.pid, lease.acquired_at)


def held_here(known: Identity) -> None:
    """A worker process of the holder runs under its lease (handed over as an argument, never read
    from a run's tags or the environment)."""
    plan_id, host, pid, acquired_at = known  # rebuilt with its fields' own types, as `identity` makes it
    _HELD_HERE.add((str(plan_id), str(host), int(pid), str(acquired_at)))


def _in_holder(found: Lease) -> bool:
    return identity(found) in _HELD_HERE


def refuse_foreign_run(session: Session, plan_id: str, tags: Mapping[str, str], first_key: str) -> None:
    """While a `backfill run` holds the plan's lease, only the runs it launched may write the plan:
    a run launched elsewhere (the UI, `dagster asset materialize`) is refused before it writes."""
    found = _lease(store.lease_row(session, plan_id))
    if found is None or not found.alive() or (tags.get(LAUNCHER_TAG) == launcher_label(found) and _in_holder(found)):
        return
    raise PartitionRefused(f"plan {plan_id} is being run by {found.describe()}: no other run of the plan "
                           "may write meanwhile", plan_id=plan_id, partition=first_key,
                           fix=f"wait for that run to finish (`backfill status {plan_id}`), or pause it "
                               f"with `backfill pause {plan_id}` and relaunch")


def release(session: Session, lease: Lease) -> None:
    with session.transaction():  # a commit, so it passes the checks a commit makes (`Session._commit`)
        store.remove(session, lease.plan_id, lease.host, lease.pid)
    _HELD_HERE.discard(identity(lease))

"""The last publication of each partition of a published table, as the control record read and
checked it: against its seal, and against the chain's later publications (a write's permission asks
whether consumers saw a day; publish and rollback what they saw)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from backfill_assets.control import evidence_log, seals
from backfill_assets.control.names import SCHEMA
from backfill_assets.errors import ForgedRecord
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import Fingerprint
from backfill_assets.warehouse.state_store import publications as store
from backfill_assets.warehouse.state_store import seals as seal_store


@dataclass(frozen=True)
class Publication:
    partition_key: str
    fingerprint: Fingerprint
    write_id: int | None
    plan_id: str | None


def latest(session: Session, spec: TableSpec, keys: Sequence[str]) -> dict[str, Publication]:
    """The last publication of each key (checked against its seal); keys never published are left out."""
    if not keys:
        return {}
    top = evidence_log.last_before_reading(session)
    rows = store.latest(session, spec.publish_as, keys)
    seals.verify_read(session, "publications", ("asset", "partition_key", "row_count", "fingerprint", "write_id",
                                                "plan_id"), [(spec.publish_as, *r) for r in rows],
                      f" of {spec.publish_as}")
    _refuse_newer_in_chain(session, spec.publish_as, keys, {str(r[0]): int(r[5]) for r in rows}, top)
    return {k: Publication(k, Fingerprint(int(n), str(d)), None if w is None else int(w), p)
            for k, n, d, w, p, _ in rows}


def _refuse_newer_in_chain(session: Session, table: str, keys: Sequence[str], found: Mapping[str, int],
                           top: int) -> None:
    """No publication the chain recorded (up to `top`) of these keys is newer than the one read: a
    plan's publication group deleted, and the bytes before it put back in the published table,
    read as unedited, and `plan close` closed the plan over them (found by an attack). Publications
    recorded before their chain rows listed the keys (a range and a count) are not asked."""
    if not top:
        return
    wanted = set(keys)
    # from the chain's first row when a key was never published: its one publication may be hidden
    floor = min(found.values()) if wanted <= set(found) else 0
    for row in evidence_log.rows_after(session, floor, top):
        payload = row.payload if isinstance(row.payload, dict) else {}
        listed = payload.get("keys") or () if row.kind == "publication" and payload.get("table") == table else ()
        newer = [k for k in listed if k in wanted and row.seq > found.get(k, 0)]
        if newer:
            raise ForgedRecord(f"the publication of {table} {newer[0]} that evidence row {row.seq} recorded is gone "
                               f"from {SCHEMA}.publications (an older one reads as the latest)",
                               fix=evidence_log.FORGED_FIX)


def of_publish(session: Session, table: str, published_seq: int, plan_id: str) -> tuple[int, dict[str, Fingerprint]]:
    """What a publish gave consumers of `table` from `plan_id`'s partitions: the `publication` chain
    row it recorded (the last of `table` before its `published` row, appended in the same
    transaction) and the fingerprints that row seals, checked against it. ForgedRecord when the
    chain holds none or the rows no longer match their seal."""
    found = [r for r in evidence_log.rows(session, kind="publication")
             if r.seq < published_seq and isinstance(r.payload, dict) and r.payload.get("table") == table]
    if not found:
        raise ForgedRecord(f"the publication of {table} that evidence row {published_seq} published is not in the "
                           "evidence chain", fix=evidence_log.FORGED_FIX)
    seq = found[-1].seq
    evidence_log.by_seq(session, [seq])  # the chain row itself, verified
    seals.verify(session, "publications", [seq], f" of {table}")
    columns = seal_store.SEALED["publications"]
    at = {name: columns.index(name) for name in ("partition_key", "row_count", "fingerprint", "plan_id")}
    return seq, {str(r[at["partition_key"]]): Fingerprint(int(r[at["row_count"]]), str(r[at["fingerprint"]]))
                 for r in seal_store.rows_of_seq(session, "publications", seq) if r[at["plan_id"]] == plan_id}

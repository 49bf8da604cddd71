"""What consumers see: the bytes each publish left in the published table, and checks against them.

The copy is proven, not assumed: in the copy's transaction the published partitions' fingerprints
must equal the ones the gates checked (a published table whose column is DECIMAL(18,0) where the
contract says DECIMAL(18,2) would turn 7990.39 into 7990: refused, nothing changes). They are then
recorded (`publications`, sealed by a `publication` chain row), so an edit of the published table
later is found: by `reconcile` (the plan goes back to `repairing`; once its window passes again the
next publish puts the checked bytes back), by `status` and `plan close`, and by the next publish
of those partitions, which says it replaced edited data. (Not by the sensor's tick: fingerprinting
every published window each tick would cost more than the tick may.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from backfill_assets.control import evidence_log, seals

# the last publications are the control record's (a write's permission asks them too): named here as well
from backfill_assets.control.publications import Publication as Publication
from backfill_assets.control.publications import latest as latest
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session, type_kind
from backfill_assets.warehouse.fingerprints import EMPTY, Fingerprint, fingerprints
from backfill_assets.warehouse.state_store import publications as store


def given_by_a_publish(session: Session, spec: TableSpec, restored: Mapping[str, Fingerprint]) -> set[str]:
    """Of partitions a rollback put back (`restored`: key -> the bytes it put back), those whose bytes
    a publish of a gated write gave consumers before (checked against their seals). The others are
    rows backfill never published (a cutover's old side, a team's table adopted as `publish_as`)."""
    if not restored:
        return set()
    rows = store.from_writes(session, spec.publish_as, list(restored))
    seals.verify_read(session, "publications", ("asset", "partition_key", "row_count", "fingerprint", "write_id",
                                                "plan_id"), [(spec.publish_as, *r) for r in rows],
                      f" of {spec.publish_as}")
    return {str(k) for k, n, d, _, _, _ in rows if Fingerprint(int(n), str(d)) == restored[str(k)]}


def shape_problems(session: Session, spec: TableSpec) -> list[str]:
    """What makes the published table unable to hold the contract's partitions at all, before any
    copy: a missing or extra column, a partition column of another type (its partitions would not
    be the target's), or a column holding another kind of value than the contract says (text for
    numbers: its values' texts, all a fingerprint sees, would match). Another width, precision or
    length is judged by the bytes, after the copy."""
    if not session.engine.table_exists(session, spec.publish_table):
        return []
    from backfill_assets.warehouse.gate_sql import check_schema

    shape = check_schema(session, spec, spec.publish_table)
    # the partition column, and any column holding another kind of value than the contract's: a
    # value's text in a fingerprint is its cast to text, so DECIMAL 7990.39 copied into a VARCHAR
    # column (or BIGINT[] [1, 2] into VARCHAR[]) reads as the bytes checked, and consumers get strings
    # that sum() refuses and sort '100' < '99' (found by an attack); another width, precision or
    # length of the same kind is judged by the bytes, after the copy
    canonical = session.engine.canonical_types(session, [d for d, _ in shape.mismatched.values()])
    wrong_key = {c: (declared, found) for c, (declared, found) in shape.mismatched.items()
                 if c == spec.partition_column or type_kind(canonical[declared]) != type_kind(found)}
    return ([f"missing column {c}" for c in shape.missing] + [f"unexpected column {c}" for c in shape.extra]
            + [f"{c}: type {found}, contract says {declared}" for c, (declared, found) in wrong_key.items()])


@dataclass(frozen=True)
class Unreadable(Fingerprint):
    """What a published partition holds when no fingerprint of it can be taken: its table was dropped
    or reshaped. Equal to no fingerprint, so such a partition always counts as edited."""

    def __str__(self) -> str:
        return self.digest


def edited(session: Session, spec: TableSpec, scheme: PartitionScheme,
           keys: Sequence[str]) -> dict[str, tuple[Fingerprint, Fingerprint]]:
    """Published partitions whose bytes are not what their last publish left: {key: (now, published)}.
    A dropped or reshaped published table is an edit of every partition published into it: consumers
    no longer see what was proven, even where the contract's columns could still be fingerprinted."""
    last = latest(session, spec, keys)
    if not last:
        return {}
    if not session.engine.table_exists(session, spec.publish_table):
        gone = Unreadable(0, f"unreadable: {spec.publish_table} was dropped")
        return {k: (gone, p.fingerprint) for k, p in last.items()}
    shape = shape_problems(session, spec)
    if shape:
        reshaped = Unreadable(0, f"unreadable: {spec.publish_table} was reshaped ({shape[0]})")
        return {k: (reshaped, p.fingerprint) for k, p in last.items()}
    now = fingerprints(session, spec.publish_table, spec.columns, scheme, spec.partition_column, list(last))
    return {k: (now.get(k, EMPTY), p.fingerprint) for k, p in last.items() if now.get(k, EMPTY) != p.fingerprint}


class CopyChanged(Exception):
    """The published partitions do not carry the checked bytes after the copy (the transaction is
    rolled back by the caller)."""

    def __init__(self, differing: Mapping[str, tuple[Fingerprint, Fingerprint]], types: str,
                 at_commit: bool = False) -> None:
        self.differing = dict(differing)
        self.at_commit = at_commit  # proven, then changed by a later write of the same transaction
        first = next(iter(self.differing))
        now, checked = self.differing[first]
        super().__init__(f"{len(self.differing)} partition(s) of the published table would not hold the bytes "
                         f"the gates checked (first {first}: {now} there, {checked} checked){types}")


def prove_and_record(session: Session, spec: TableSpec, scheme: PartitionScheme,
                     checked: Mapping[str, tuple[Fingerprint, int | None, str | None]], actor: str) -> None:
    """In the copy's transaction: the published partitions hold exactly `checked` ({key: (fingerprint,
    write id, plan id)}), or CopyChanged; then record them, sealed."""
    keys = list(checked)

    def prove(at_commit: bool) -> None:
        now = fingerprints(session, spec.publish_table, spec.columns, scheme, spec.partition_column, keys)
        differing = {k: (now.get(k, EMPTY), fp) for k, (fp, _, _) in checked.items() if now.get(k, EMPTY) != fp}
        if differing:
            from backfill_assets.warehouse.gate_sql import check_schema

            problems = check_schema(session, spec, spec.publish_table).problems
            when = " as the publish was committing: a later write of it changed them" if at_commit else ""
            raise CopyChanged(differing, when + (f"; {spec.publish_table} against the contract: "
                                                 f"{'; '.join(problems[:3])}" if problems else ""), at_commit)

    prove(False)
    # a later copy of the same publish (another table of a graph) could change this one's partitions
    session.proven(lambda: prove(True))
    record(session, spec, checked, actor)


def record_restored(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: Sequence[str],
                    plan_id: str, actor: str) -> None:
    """In a rollback's transaction, once its restore of the published partitions was proven: what
    consumers see now is the snapshot's bytes, remembered as those partitions' last publication, so
    neither the next publish nor `status` takes the rollback for an edit."""
    if not keys:
        return
    now = fingerprints(session, spec.publish_table, spec.columns, scheme, spec.partition_column, list(keys))
    record(session, spec, {k: (now[k], None, None) for k in keys}, actor, restored_by_rollback_of=plan_id)


def record(session: Session, spec: TableSpec, published: Mapping[str, tuple[Fingerprint, int | None, str | None]],
           actor: str, **note: object) -> None:
    """Remember what the published partitions hold ({key: (fingerprint, write id, plan id)}), sealed
    by one `publication` chain row."""
    keys = list(published)
    at = evidence_log.now_iso()
    seq = evidence_log.next_seq(session)
    store.insert(session, spec.publish_as, at, seq,
                 [(key, fp.rows, fp.digest, write_id, plan_id) for key, (fp, write_id, plan_id) in published.items()])
    evidence_log.append(session, plan_id=None, kind="publication", actor=actor, seq=seq, payload={
        "table": spec.publish_as, "target": spec.name, "partitions": len(keys), "first": keys[0], "last": keys[-1],
        "keys": keys, **note,
        "seals": {"publications": seals.of_seq(session, "publications", seq, [
            {"asset": spec.publish_as, "partition_key": key, "row_count": fp.rows, "fingerprint": fp.digest,
             "write_id": write_id, "plan_id": plan_id, "recorded_at": at}
            for key, (fp, write_id, plan_id) in published.items()])}})

"""The control record's tables (schema `backfill_control`): when to create or upgrade them.

Written in the same transactions as the data they describe. Created idempotently by every command
that writes; readers never create them (`has_control_schema`). The statements themselves are the
state store's (`warehouse/state_store/schema.py`). The top of `control/`: the upgrade
writes evidence and seals through the modules below, which name the schema from `names.py`.
"""

from __future__ import annotations

from backfill_assets.control import evidence_log, record, seals
from backfill_assets.control.names import SCHEMA, SNAPSHOT_SCHEMA, next_id
from backfill_assets.errors import ForgedRecord, WarehouseError
from backfill_assets.plan.phases import ACTIVE
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import plans as plan_store
from backfill_assets.warehouse.state_store import schema as store

# SCHEMA, SNAPSHOT_SCHEMA and next_id were defined here before names.py; callers still import them
__all__ = ["SCHEMA", "SCHEMA_VERSION", "SNAPSHOT_SCHEMA", "ensure_schema", "has_control_schema", "next_id",
           "schema_version"]

SCHEMA_VERSION = "3"


def schema_version(session: Session) -> str | None:
    if session.engine.identity() in _CURRENT:
        return SCHEMA_VERSION
    if not store.has_table(session, "meta"):
        return None
    return store.meta(session, store.SCHEMA_VERSION_KEY) or "1"


_CURRENT: set[str] = set()  # warehouses (by identity) whose control record is this version's


def ensure_schema(session: Session) -> None:
    """Create the control record if missing, upgrade one of the previous release in place (when
    no plan is active), refuse any other version."""
    if session.engine.identity() in _CURRENT:
        return
    _ensure(session)
    _CURRENT.add(session.engine.identity())


def _ensure(session: Session) -> None:
    if has_control_schema(session):
        version = schema_version(session)
        if version == SCHEMA_VERSION:
            return
        if version == "2":
            _upgrade_from_2(session)
            return
        raise WarehouseError(
            f"the control record in {session.engine.describe()} was written by another version of "
            f"backfill-assets (schema {version or '1'}, this one reads {SCHEMA_VERSION})",
            fix="finish its plans with that version, or start from a fresh BACKFILL_HOME")
    with session.transaction():
        session.lock("backfill_control.schema")  # two first commands at once on a server engine
        store.create(session, SCHEMA_VERSION)


def _upgrade_from_2(session: Session) -> None:
    # rows written before carry no seal and old approvals sign only a plan hash: only when no plan
    # is active, and the chain then seals every row as it stands
    with session.transaction():
        session.lock("backfill_control.schema")
        if schema_version(session) == SCHEMA_VERSION:  # another process upgraded it meanwhile
            return
        active = plan_store.ids_in_phases(session, [p.value for p in ACTIVE])
        if active:
            raise WarehouseError(
                f"the control record in {session.engine.describe()} is of backfill-assets 0.2 (schema 2) "
                f"and plan(s) {', '.join(active)} are still active: their approvals sign only a plan hash "
                "and their records carry no seals",
                fix="finish, withdraw or roll them back with backfill-assets 0.2, then run this version")
        _refuse_a_record_this_version_wrote(session)
        store.upgrade_from_2(session, SCHEMA_VERSION)
        actor = "backfill-assets upgrade"
        evidence_log.append(session, plan_id=None, kind="upgrade", actor=actor, payload={
            "from": "2", "to": SCHEMA_VERSION})
        record.seal_upgraded_plans(session, actor)
        seals.seal_unsealed(session, actor)


# what only this version writes in the chain: 0.2 pinned its approvers in meta, and sealed only
# its publications (writes, snapshots and gate results gained their `evidence_seq` in schema 3)
_THIS_VERSIONS_KINDS = frozenset({"trust_root", "upgrade", "upgrade_seal"})
_THIS_VERSIONS_SEALS = frozenset({"writes", "snapshots", "gate_results"})


def _refuse_a_record_this_version_wrote(session: Session) -> None:
    """The upgrade seals every row as it stands, and "schema 2" is read from tables anyone who can
    write the warehouse can reshape: a record of this version made to look like 0.2's would have
    rows edited since their seals sealed anew. The keyed chain says who wrote the record: one that
    holds a row only this version writes (a pin, an upgrade, a seal) is refused, not upgraded."""
    evidence_log.verify(session)
    for row in evidence_log.verified(session, evidence_log.rows(session)):
        sealed = row.payload.get("seals") if isinstance(row.payload, dict) else None
        if row.kind in _THIS_VERSIONS_KINDS or (isinstance(sealed, dict) and _THIS_VERSIONS_SEALS & set(sealed)):
            raise ForgedRecord(
                f"the control record in {session.engine.describe()} says it is of backfill-assets 0.2 (schema 2), "
                f"but its evidence chain holds row {row.seq} ({row.kind}), which only this version writes: it was "
                "reshaped after this version wrote it, and is never upgraded (that would seal its rows anew)",
                fix=evidence_log.FORGED_FIX)


def has_control_schema(session: Session) -> bool:
    """Whether the control record exists, for readers that must not create it."""
    if session.engine.identity() in _CURRENT:
        return True
    return store.has_table(session, "plans")


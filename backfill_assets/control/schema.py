"""The control record's tables (schema `backfill_control`): when to create or upgrade them.

Written in the same transactions as the data they describe. Created idempotently by every command
that writes; readers never create them (`has_control_schema`). The statements themselves are the
state store's (`warehouse/state_store/schema.py`). The top of `control/`: the upgrade
writes evidence and seals through the modules below, which name the schema from `names.py`.
"""

from __future__ import annotations

from backfill_assets.control import evidence_log, record, seals
from backfill_assets.control.names import SCHEMA, SNAPSHOT_SCHEMA, next_id
from backfill_assets.errors import WarehouseError
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
        store.upgrade_from_2(session, SCHEMA_VERSION)
        actor = "backfill-assets upgrade"
        evidence_log.append(session, plan_id=None, kind="upgrade", actor=actor, payload={
            "from": "2", "to": SCHEMA_VERSION})
        record.seal_upgraded_plans(session, actor)
        seals.seal_unsealed(session, actor)


def has_control_schema(session: Session) -> bool:
    """Whether the control record exists, for readers that must not create it."""
    if session.engine.identity() in _CURRENT:
        return True
    return store.has_table(session, "plans")


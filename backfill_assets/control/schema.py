"""The control record's tables (schema `backfill_control`), portable across engines.

Written in the same transactions as the data they describe. Created idempotently by every command
that writes; readers never create them (`has_control_schema`). The top of `control/`: the upgrade
writes evidence and seals through the modules below, which name the schema from `names.py`.
"""

from __future__ import annotations

from backfill_assets.control import evidence_log, record, seals
from backfill_assets.control.names import SCHEMA, SNAPSHOT_SCHEMA, next_id
from backfill_assets.errors import WarehouseError
from backfill_assets.plan.phases import ACTIVE
from backfill_assets.warehouse.engine import Session

# SCHEMA, SNAPSHOT_SCHEMA and next_id were defined here before names.py; callers still import them
__all__ = ["SCHEMA", "SCHEMA_VERSION", "SNAPSHOT_SCHEMA", "ensure_schema", "has_control_schema", "next_id",
           "schema_version"]

SCHEMA_VERSION = "3"

_TABLES = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE SCHEMA IF NOT EXISTS {SNAPSHOT_SCHEMA};
CREATE SEQUENCE IF NOT EXISTS {SCHEMA}.ids;
CREATE TABLE IF NOT EXISTS {SCHEMA}.meta (
    key VARCHAR PRIMARY KEY,
    value VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.plans (
    plan_id VARCHAR PRIMARY KEY,
    phase VARCHAR NOT NULL,
    target VARCHAR NOT NULL,
    owner VARCHAR NOT NULL,
    approved_sha256 VARCHAR,
    hold VARCHAR,
    updated_at VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.plan_versions (
    sha256 VARCHAR PRIMARY KEY,
    plan_id VARCHAR NOT NULL,
    content VARCHAR NOT NULL,
    partition_keys VARCHAR NOT NULL,
    source_file VARCHAR,
    recorded_at VARCHAR NOT NULL,
    evidence_seq BIGINT
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.approvals (
    approval_id BIGINT PRIMARY KEY,
    sha256 VARCHAR NOT NULL,
    plan_id VARCHAR NOT NULL,
    principal VARCHAR NOT NULL,
    statement VARCHAR NOT NULL,
    signature VARCHAR NOT NULL,
    key_fingerprint VARCHAR NOT NULL,
    trust_version INTEGER NOT NULL,
    actor VARCHAR NOT NULL,
    approved_at VARCHAR NOT NULL,
    evidence_seq BIGINT
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.writes (
    write_id BIGINT PRIMARY KEY,
    plan_id VARCHAR,
    asset VARCHAR NOT NULL,
    partition_key VARCHAR NOT NULL,
    mode VARCHAR NOT NULL,
    run_id VARCHAR,
    code_version VARCHAR,
    row_count BIGINT NOT NULL,
    fingerprint VARCHAR NOT NULL,
    recorded_at VARCHAR NOT NULL,
    impact VARCHAR,
    evidence_seq BIGINT,
    code_identity VARCHAR
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.snapshots (
    plan_id VARCHAR NOT NULL,
    table_name VARCHAR NOT NULL,
    partition_key VARCHAR NOT NULL,
    row_count BIGINT NOT NULL,
    fingerprint VARCHAR NOT NULL,
    snapshot_table VARCHAR NOT NULL,
    recorded_at VARCHAR NOT NULL,
    evidence_seq BIGINT,
    PRIMARY KEY (plan_id, table_name, partition_key)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.gate_results (
    result_id BIGINT PRIMARY KEY,
    write_id BIGINT,
    plan_id VARCHAR,
    asset VARCHAR NOT NULL,
    partition_key VARCHAR NOT NULL,
    gate VARCHAR NOT NULL,
    passed BOOLEAN NOT NULL,
    checked_fingerprint VARCHAR,
    figures VARCHAR NOT NULL,
    recorded_at VARCHAR NOT NULL,
    evidence_seq BIGINT
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.publications (
    publish_id BIGINT PRIMARY KEY,
    asset VARCHAR NOT NULL,
    partition_key VARCHAR NOT NULL,
    row_count BIGINT NOT NULL,
    fingerprint VARCHAR NOT NULL,
    write_id BIGINT,
    plan_id VARCHAR,
    recorded_at VARCHAR NOT NULL,
    evidence_seq BIGINT
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.watermarks (
    asset VARCHAR PRIMARY KEY,
    partition_key VARCHAR NOT NULL,
    recorded_at VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.outbox (
    notice_id BIGINT PRIMARY KEY,
    plan_id VARCHAR NOT NULL,
    event VARCHAR NOT NULL,
    recipients VARCHAR NOT NULL,
    message VARCHAR NOT NULL,
    body VARCHAR NOT NULL,
    webhook_url VARCHAR,
    attempts INTEGER NOT NULL,
    last_error VARCHAR,
    delivered_at VARCHAR,
    recorded_at VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.outbox_retries (
    notice_id BIGINT PRIMARY KEY,
    next_attempt_at DOUBLE PRECISION NOT NULL,
    last_attempt_at VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.evidence (
    seq BIGINT PRIMARY KEY,
    recorded_at VARCHAR NOT NULL,
    plan_id VARCHAR,
    kind VARCHAR NOT NULL,
    actor VARCHAR NOT NULL,
    payload VARCHAR NOT NULL,
    prev_hash VARCHAR NOT NULL,
    row_hash VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.trust_roots (
    version INTEGER PRIMARY KEY,
    warehouse_id VARCHAR NOT NULL,
    signers_text VARCHAR NOT NULL,
    signers_sha256 VARCHAR NOT NULL,
    policy_text VARCHAR NOT NULL,
    policy_sha256 VARCHAR NOT NULL,
    signatures VARCHAR NOT NULL,
    pinned_by VARCHAR NOT NULL,
    pinned_at VARCHAR NOT NULL,
    evidence_seq BIGINT
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.leases (
    plan_id VARCHAR PRIMARY KEY,
    holder VARCHAR NOT NULL,
    host VARCHAR NOT NULL,
    pid INTEGER NOT NULL,
    acquired_at VARCHAR NOT NULL,
    heartbeat_at DOUBLE PRECISION NOT NULL
);
"""

_INDEXES = f"""
CREATE INDEX IF NOT EXISTS writes_by_partition ON {SCHEMA}.writes (asset, partition_key);
CREATE INDEX IF NOT EXISTS results_by_write ON {SCHEMA}.gate_results (write_id);
CREATE INDEX IF NOT EXISTS evidence_by_plan ON {SCHEMA}.evidence (plan_id, seq);
CREATE INDEX IF NOT EXISTS evidence_by_kind ON {SCHEMA}.evidence (kind, plan_id);
CREATE INDEX IF NOT EXISTS publications_by_partition ON {SCHEMA}.publications (asset, partition_key);
"""

# Schema 2 (backfill-assets 0.2) to 3: the ledger rows are sealed by the evidence rows that record
# them; approvals are statements under a pinned trust root. Rows written before carry no seal and
# old approvals sign only a plan hash, so the upgrade runs only when no plan is active. DuckDB
# alters no table an index depends on: the indexes are dropped first and made again after.
_UPGRADE_FROM_2 = f"""
DROP INDEX IF EXISTS {SCHEMA}.writes_by_partition;
DROP INDEX IF EXISTS {SCHEMA}.results_by_write;
ALTER TABLE {SCHEMA}.plan_versions ADD COLUMN evidence_seq BIGINT;
ALTER TABLE {SCHEMA}.writes ADD COLUMN evidence_seq BIGINT;
ALTER TABLE {SCHEMA}.writes ADD COLUMN code_identity VARCHAR;
ALTER TABLE {SCHEMA}.snapshots ADD COLUMN evidence_seq BIGINT;
ALTER TABLE {SCHEMA}.gate_results ADD COLUMN evidence_seq BIGINT;
ALTER TABLE {SCHEMA}.approvals RENAME TO approvals_v2
"""


def schema_version(session: Session) -> str | None:
    if session.engine.identity() in _CURRENT:
        return SCHEMA_VERSION
    if not session.engine.table_exists(session, "meta", SCHEMA):
        return None
    return session.scalar(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'schema_version'") or "1"


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
        _run(session, _TABLES + _INDEXES)
        session.execute(f"INSERT INTO {SCHEMA}.meta VALUES ('schema_version', ?) "
                        "ON CONFLICT (key) DO NOTHING", [SCHEMA_VERSION])


def _run(session: Session, script: str) -> None:
    for statement in script.split(";"):
        if statement.strip():
            session.execute(statement)


def _upgrade_from_2(session: Session) -> None:
    with session.transaction():
        session.lock("backfill_control.schema")
        if schema_version(session) == SCHEMA_VERSION:  # another process upgraded it meanwhile
            return
        phases = [p.value for p in ACTIVE]
        active = [r[0] for r in session.rows(
            f"SELECT plan_id FROM {SCHEMA}.plans WHERE phase IN ({', '.join('?' for _ in phases)}) "
            "ORDER BY plan_id", phases)]
        if active:
            raise WarehouseError(
                f"the control record in {session.engine.describe()} is of backfill-assets 0.2 (schema 2) "
                f"and plan(s) {', '.join(active)} are still active: their approvals sign only a plan hash "
                "and their records carry no seals",
                fix="finish, withdraw or roll them back with backfill-assets 0.2, then run this version")
        _run(session, _UPGRADE_FROM_2 + ";" + _TABLES + _INDEXES)
        session.execute(f"UPDATE {SCHEMA}.meta SET value = ? WHERE key = 'schema_version'", [SCHEMA_VERSION])
        actor = "backfill-assets upgrade"
        evidence_log.append(session, plan_id=None, kind="upgrade", actor=actor, payload={
            "from": "2", "to": SCHEMA_VERSION})
        record.seal_upgraded_plans(session, actor)
        seals.seal_unsealed(session, actor)


def has_control_schema(session: Session) -> bool:
    """Whether the control record exists, for readers that must not create it."""
    if session.engine.identity() in _CURRENT:
        return True
    return session.engine.table_exists(session, "plans", SCHEMA)


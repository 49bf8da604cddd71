"""The control record's tables (schema `backfill_control`), portable across engines.

Written in the same transactions as the data they describe. Created idempotently by every command
that writes; readers never create them (`has_control_schema`).
"""

from __future__ import annotations

from backfill_assets.errors import WarehouseError
from backfill_assets.warehouse.engine import Session

SCHEMA = "backfill_control"
SNAPSHOT_SCHEMA = "backfill_snapshots"
SCHEMA_VERSION = "2"

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
    recorded_at VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.approvals (
    sha256 VARCHAR NOT NULL,
    plan_id VARCHAR NOT NULL,
    principal VARCHAR NOT NULL,
    signature VARCHAR NOT NULL,
    key_fingerprint VARCHAR NOT NULL,
    signers_sha256 VARCHAR NOT NULL,
    actor VARCHAR NOT NULL,
    approved_at VARCHAR NOT NULL,
    PRIMARY KEY (sha256, principal)
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
    impact VARCHAR
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.snapshots (
    plan_id VARCHAR NOT NULL,
    table_name VARCHAR NOT NULL,
    partition_key VARCHAR NOT NULL,
    row_count BIGINT NOT NULL,
    fingerprint VARCHAR NOT NULL,
    snapshot_table VARCHAR NOT NULL,
    recorded_at VARCHAR NOT NULL,
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
    recorded_at VARCHAR NOT NULL
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
"""


def ensure_schema(session: Session) -> None:
    """Create the control record if missing; refuse one written by another schema version."""
    if has_control_schema(session):
        version = session.scalar(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'schema_version'") \
            if session.engine.table_exists(session, "meta", SCHEMA) else None
        if version == SCHEMA_VERSION:
            return
        raise WarehouseError(
            f"the control record in {session.engine.describe()} was written by another version of "
            f"backfill-assets (schema {version or '1'}, this one reads {SCHEMA_VERSION})",
            fix="finish its plans with that version, or start from a fresh BACKFILL_HOME")
    with session.transaction():
        session.lock("backfill_control.schema")  # two first commands at once on a server engine
        for statement in (_TABLES + _INDEXES).split(";"):
            if statement.strip():
                session.execute(statement)
        session.execute(f"INSERT INTO {SCHEMA}.meta VALUES ('schema_version', ?) "
                        "ON CONFLICT (key) DO NOTHING", [SCHEMA_VERSION])


def has_control_schema(session: Session) -> bool:
    """Whether the control record exists, for readers that must not create it."""
    return session.engine.table_exists(session, "plans", SCHEMA)


def next_id(session: Session) -> int:
    return int(session.scalar(f"SELECT nextval('{SCHEMA}.ids')"))

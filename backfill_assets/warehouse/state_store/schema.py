"""Creating and upgrading the control record's tables, and its `meta` values.

Portable across engines but for the id sequence (`Engine.create_sequence_sql`) and the first
`meta` row (`Engine.upsert_sql`). The caller holds the transaction and the schema's lock.
"""

from __future__ import annotations

import functools
import re

from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import IDS, SCHEMA, SNAPSHOT_SCHEMA

SCHEMA_VERSION_KEY = "schema_version"

_TABLES = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE SCHEMA IF NOT EXISTS {SNAPSHOT_SCHEMA};
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
# them; approvals are statements under a pinned trust root. DuckDB alters no table an index
# depends on: the indexes are dropped first and made again after.
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


_COLUMN = re.compile(r"^\s+(\w+) (DOUBLE PRECISION|[A-Z]+)\b", re.M)


@functools.cache
def column_types() -> dict[tuple[str, str], str]:
    """The type each column of the record is made with, by (table, column), as `_TABLES` spells it
    (DOUBLE PRECISION as DuckDB names it, DOUBLE). Both engines refuse a control column of another
    type as a session opens: `evidence_seq` altered to text sorts '0123' after '99', so an older
    gate result read as the latest while its seal still verified (found by an attack)."""
    found: dict[tuple[str, str], str] = {}
    for table, body in re.findall(r"CREATE TABLE IF NOT EXISTS \S+\.(\w+) \((.*?)\n\);", _TABLES, re.S):
        for column, kind in _COLUMN.findall(body):
            if column != "PRIMARY":  # a table's key clause
                found[(table, column)] = "DOUBLE" if kind == "DOUBLE PRECISION" else kind
    return found


def _statements(script: str) -> list[str]:
    return [s for s in script.split(";") if s.strip()]


def _create_all(session: Session) -> None:
    statements = _statements(_TABLES)
    # the sequence after the schemas, as the record always created it
    statements.insert(2, session.engine.create_sequence_sql(IDS))
    for statement in statements + _statements(_INDEXES):
        session.execute(statement)


def create(session: Session, version: str) -> None:
    """Every table, index and the sequence that is missing, and the version when none is stored."""
    _create_all(session)
    session.execute(session.engine.upsert_sql(f"{SCHEMA}.meta", ("key", "value"), ("key",)),
                    [SCHEMA_VERSION_KEY, version])


def upgrade_from_2(session: Session, version: str) -> None:
    """Schema 2's tables altered to this version's, the new ones created, the version stored."""
    for statement in _statements(_UPGRADE_FROM_2):
        session.execute(statement)
    _create_all(session)
    session.execute(f"UPDATE {SCHEMA}.meta SET value = ? WHERE key = ?", [version, SCHEMA_VERSION_KEY])


def has_table(session: Session, table: str) -> bool:
    return session.engine.table_exists(session, table, SCHEMA)


def meta(session: Session, key: str) -> str | None:
    found = session.scalar(f"SELECT value FROM {SCHEMA}.meta WHERE key = ?", [key])
    return None if found is None else str(found)


def add_meta(session: Session, key: str, value: str) -> None:
    session.execute(f"INSERT INTO {SCHEMA}.meta VALUES (?, ?)", [key, value])


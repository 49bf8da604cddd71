"""DDL of the `backfill_control` schema. Created idempotently by every command that writes."""

from __future__ import annotations

import duckdb

SCHEMA = "backfill_control"
SNAPSHOT_SCHEMA = "backfill_snapshots"

DDL = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE SCHEMA IF NOT EXISTS {SNAPSHOT_SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.plans (
    plan_id VARCHAR PRIMARY KEY,
    sha256 VARCHAR NOT NULL,
    approved_sha256 VARCHAR,
    target VARCHAR NOT NULL,
    window_start DATE NOT NULL,
    window_end DATE NOT NULL,
    proof_keys VARCHAR[] NOT NULL,
    max_concurrent_partitions INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    path VARCHAR NOT NULL,
    owner VARCHAR NOT NULL,
    plan_json VARCHAR NOT NULL,
    updated_at VARCHAR NOT NULL
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
CREATE TABLE IF NOT EXISTS {SCHEMA}.writes (
    plan_id VARCHAR,
    asset VARCHAR NOT NULL,
    partition_key VARCHAR NOT NULL,
    mode VARCHAR NOT NULL,
    run_id VARCHAR,
    code_version VARCHAR,
    row_count BIGINT NOT NULL,
    fingerprint VARCHAR NOT NULL,
    recorded_at VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.snapshots (
    plan_id VARCHAR NOT NULL,
    table_name VARCHAR NOT NULL,
    partition_key VARCHAR NOT NULL,
    row_count BIGINT NOT NULL,
    fingerprint VARCHAR NOT NULL,
    snapshot_table VARCHAR NOT NULL,
    recorded_at VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.gate_results (
    plan_id VARCHAR,
    asset VARCHAR NOT NULL,
    partition_key VARCHAR NOT NULL,
    gate VARCHAR NOT NULL,
    passed BOOLEAN NOT NULL,
    figures VARCHAR NOT NULL,
    write_at VARCHAR,
    recorded_at VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.watermarks (
    asset VARCHAR PRIMARY KEY,
    partition_key VARCHAR NOT NULL,
    recorded_at VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.outbox (
    plan_id VARCHAR NOT NULL,
    event VARCHAR NOT NULL,
    recipients VARCHAR NOT NULL,
    message VARCHAR NOT NULL,
    webhook_url VARCHAR,
    webhook_status VARCHAR,
    recorded_at VARCHAR NOT NULL
);
"""


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(DDL)


def has_control_schema(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the control record exists, for readers that must not create it."""
    return bool(con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = "
        "'plans'", [SCHEMA]).fetchone()[0])

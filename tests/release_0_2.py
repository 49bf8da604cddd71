"""A home as release 0.2 (schema 2) left it, made from one this release wrote: the columns and
tables 0.2 lacked removed, its approvers pinned by sha256 alone and, optionally, every recorded
fingerprint recomputed by 0.2's md5 sum. The first writing command then upgrades it in place."""

from __future__ import annotations

import hashlib
import json

from backfill_assets.control import evidence_log, schema
from backfill_assets.control.schema import SCHEMA
from backfill_assets.demo.revenue import DAILY_REVENUE
from backfill_assets.warehouse.fingerprints import LEGACY_EMPTY, fingerprints_like

DOWNGRADE = f"""
DROP INDEX {SCHEMA}.writes_by_partition;
DROP INDEX {SCHEMA}.results_by_write;
DROP INDEX {SCHEMA}.evidence_by_plan;
DROP INDEX {SCHEMA}.evidence_by_kind;
ALTER TABLE {SCHEMA}.plan_versions DROP COLUMN evidence_seq;
ALTER TABLE {SCHEMA}.writes DROP COLUMN evidence_seq;
ALTER TABLE {SCHEMA}.writes DROP COLUMN code_identity;
ALTER TABLE {SCHEMA}.snapshots DROP COLUMN evidence_seq;
ALTER TABLE {SCHEMA}.gate_results DROP COLUMN evidence_seq;
DROP TABLE {SCHEMA}.approvals;
CREATE TABLE {SCHEMA}.approvals (sha256 VARCHAR NOT NULL, plan_id VARCHAR NOT NULL, principal VARCHAR NOT NULL,
    signature VARCHAR NOT NULL, key_fingerprint VARCHAR NOT NULL, signers_sha256 VARCHAR NOT NULL,
    actor VARCHAR NOT NULL, approved_at VARCHAR NOT NULL, PRIMARY KEY (sha256, principal));
DROP TABLE {SCHEMA}.trust_roots;
DELETE FROM {SCHEMA}.meta WHERE key = '{evidence_log.KEY_ID_META}';
UPDATE {SCHEMA}.meta SET value = '2' WHERE key = 'schema_version';
CREATE INDEX writes_by_partition ON {SCHEMA}.writes (asset, partition_key);
CREATE INDEX results_by_write ON {SCHEMA}.gate_results (write_id)
"""


def _legacy(session, world, table: str, keys: list[str], schema: str | None = None) -> dict:
    return fingerprints_like(session, table, DAILY_REVENUE.columns, world.scheme, "order_date",
                             dict.fromkeys(keys, LEGACY_EMPTY), schema)


def _without_pins_in_the_chain(session, world) -> None:
    """0.2 pinned its approvers in meta and wrote no chain row for it, sealed only publications and
    indexed nothing:
    the world's first pin (a `trust_root` row) becomes a row of another kind, the seals of the
    other tables leave the payloads, and the chain and its head log are re-hashed under the home's
    key, as if 0.2 had written them."""
    from backfill_assets.home import Home

    home = Home(world.home)
    key = evidence_log.read_key(home)
    prev, seq = evidence_log.GENESIS, 0
    for seq, at, plan_id, kind, actor, payload in session.rows(
            f"SELECT seq, recorded_at, plan_id, kind, actor, payload FROM {SCHEMA}.evidence ORDER BY seq"):
        kind = "note" if kind == "trust_root" else kind
        body = json.loads(payload)
        if isinstance(body, dict) and evidence_log.INDEX in body:  # 0.2's rows carried no chain index
            body.pop(evidence_log.INDEX)
            payload = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
        if kind == "approval" and isinstance(body, dict) and "statement" in body:  # 0.2 signed the plan's hash
            body.pop("statement")
            payload = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
        if isinstance(body, dict) and isinstance(body.get("seals"), dict):  # 0.2 sealed only publications
            kept = {t: d for t, d in body["seals"].items() if t == "publications"}
            if kept != body["seals"]:
                body["seals"] = kept
                if not kept:
                    body.pop("seals")
                payload = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
        row_hash = evidence_log._row_hash(key, prev, seq, at, plan_id, kind, actor, payload)
        session.execute(f"UPDATE {SCHEMA}.evidence SET kind = ?, payload = ?, prev_hash = ?, row_hash = ? "
                        "WHERE seq = ?", [kind, payload, prev, row_hash, seq])
        prev = row_hash
    home.evidence_heads.write_text(f"{seq} {prev}\n" if seq else "", encoding="ascii")


def as_release_0_2(world, *, legacy_fingerprints: bool = False) -> str:
    """Turn the world's home (DuckDB) into a 0.2 one; returns the pinned allowed_signers' sha256."""
    from backfill_assets.warehouse.snapshots import snapshot_table

    signers = (world.root / "approvers" / "allowed_signers").read_text()
    sha = hashlib.sha256(signers.encode()).hexdigest()
    with world.warehouse().session() as session:
        if legacy_fingerprints:  # 0.2 recorded every fingerprint as an md5 sum
            for (key,) in session.rows(f"SELECT DISTINCT partition_key FROM {SCHEMA}.writes"):
                old = _legacy(session, world, "daily_revenue", [key])[key]
                session.execute(f"UPDATE {SCHEMA}.writes SET fingerprint = ? WHERE partition_key = ?",
                                [old.digest, key])
                session.execute(f"UPDATE {SCHEMA}.gate_results SET checked_fingerprint = ? WHERE partition_key = ? "
                                "AND checked_fingerprint IS NOT NULL", [old.digest, key])
            snapshots = session.rows(f"SELECT plan_id, table_name, partition_key FROM {SCHEMA}.snapshots")
            for plan_id, table, key in snapshots:
                old = _legacy(session, world, snapshot_table(plan_id, table), [key], "backfill_snapshots")[key]
                session.execute(f"UPDATE {SCHEMA}.snapshots SET fingerprint = ? WHERE plan_id = ? AND table_name = ? "
                                "AND partition_key = ?", [old.digest, plan_id, table, key])
        for statement in DOWNGRADE.split(";"):
            session.execute(statement)
        _without_pins_in_the_chain(session, world)
        session.execute(f"INSERT INTO {SCHEMA}.meta VALUES ('approvers_pin', ?)",
                        [json.dumps({"sha256": sha, "source": "approvers/allowed_signers", "by": "x", "at": "y"})])
    schema._CURRENT.clear()  # what a process started after the downgrade knows: nothing yet
    return sha


def upgrade(world, run_cli) -> None:
    """What a team does after installing this release: the first writing command upgrades the record
    in place, then `init --allowed-signers` pins the same approvers as the trust root."""
    done = run_cli("init", "--allowed-signers", str(world.root / "approvers" / "allowed_signers"))
    assert done.code == 0, done

"""A home of release 0.2 (schema 2) upgrades in place: its rows are sealed as they stand, its
approvers pin is kept, and a home with an active plan is refused before anything changes."""

from __future__ import annotations

import json

from backfill_assets.control import evidence_log
from backfill_assets.control.schema import SCHEMA, schema_version
from tests.world import keys

CONTROL = SCHEMA

# what 0.2 had where 0.3 adds seals, signed statements and trust roots
DOWNGRADE = f"""
DROP INDEX {CONTROL}.writes_by_partition;
DROP INDEX {CONTROL}.results_by_write;
DROP INDEX {CONTROL}.evidence_by_plan;
DROP INDEX {CONTROL}.evidence_by_kind;
ALTER TABLE {CONTROL}.plan_versions DROP COLUMN evidence_seq;
ALTER TABLE {CONTROL}.writes DROP COLUMN evidence_seq;
ALTER TABLE {CONTROL}.writes DROP COLUMN code_identity;
ALTER TABLE {CONTROL}.snapshots DROP COLUMN evidence_seq;
ALTER TABLE {CONTROL}.gate_results DROP COLUMN evidence_seq;
DROP TABLE {CONTROL}.approvals;
CREATE TABLE {CONTROL}.approvals (sha256 VARCHAR NOT NULL, plan_id VARCHAR NOT NULL, principal VARCHAR NOT NULL,
    signature VARCHAR NOT NULL, key_fingerprint VARCHAR NOT NULL, signers_sha256 VARCHAR NOT NULL,
    actor VARCHAR NOT NULL, approved_at VARCHAR NOT NULL, PRIMARY KEY (sha256, principal));
DROP TABLE {CONTROL}.trust_roots;
DELETE FROM {CONTROL}.meta WHERE key = '{evidence_log.KEY_ID_META}';
UPDATE {CONTROL}.meta SET value = '2' WHERE key = 'schema_version';
CREATE INDEX writes_by_partition ON {CONTROL}.writes (asset, partition_key);
CREATE INDEX results_by_write ON {CONTROL}.gate_results (write_id)
"""


def as_release_0_2(world) -> str:
    """The world's home as 0.2 left it: a published, closed plan, its approvers pinned by sha256."""
    import hashlib

    world.approved_plan("old", start="2026-01-01", end="2026-01-02", proof=("2026-01-02",))
    assert world.cli("run", "old", "--proof") == 0 and world.cli("run", "old") == 0
    assert world.cli("publish", "old") == 0 and world.cli("plan", "close", "old") == 0
    signers = (world.root / "approvers" / "allowed_signers").read_text()
    sha = hashlib.sha256(signers.encode()).hexdigest()
    with world.warehouse().session() as session:
        for statement in DOWNGRADE.split(";"):
            session.execute(statement)
        session.execute(f"INSERT INTO {CONTROL}.meta VALUES ('approvers_pin', ?)",
                        [json.dumps({"sha256": sha, "source": "approvers/allowed_signers", "by": "x", "at": "y"})])
    return sha


def test_a_0_2_home_upgrades_in_place_and_keeps_its_approvers(world, tmp_path, run_cli):
    as_release_0_2(world)
    before = world.fingerprints("published_revenue", keys(1, 2))
    with world.warehouse().session() as session:
        assert schema_version(session) == "2"
    # the first command upgrades it; every existing row is sealed, the chain still verifies
    assert world.cli("evidence", "verify") == 1  # a reader: never upgrades, and 0.2 rows are unsealed
    assert run_cli("plan", "withdraw", "nothing-here").code == 2  # a writer: upgrades, then says what is wrong
    with world.warehouse().session() as session:
        assert schema_version(session) == "3"
    assert world.cli("evidence", "verify") == 0
    assert world.fingerprints("published_revenue", keys(1, 2)) == before
    # the approvers pin of 0.2 is kept: only that same file becomes the first trust root
    from tests.world import make_keys, signers_text

    others = make_keys(tmp_path / "others")
    forged = tmp_path / "others" / "allowed_signers"
    forged.write_text(signers_text(others))
    refused = run_cli("init", "--allowed-signers", str(forged))
    assert refused.code == 1 and "before its upgrade" in refused.err, refused
    assert run_cli("init", "--allowed-signers", str(world.root / "approvers" / "allowed_signers")).code == 0
    # and the upgraded home works: a new plan is approved, runs and publishes
    world.approved_plan("new", start="2026-01-03", end="2026-01-03", proof=("2026-01-03",))
    assert world.cli("run", "new", "--proof") == 0 and world.cli("publish", "new") == 0
    assert world.cli("evidence", "verify") == 0


def test_a_0_2_home_with_an_active_plan_is_refused_unchanged(world, run_cli):
    as_release_0_2(world)
    world.run_sql(f"UPDATE {CONTROL}.plans SET phase = 'running' WHERE plan_id = 'old'")
    refused = run_cli("plan", "withdraw", "old")
    assert refused.code == 1 and "old are still active" in refused.err and refused.err.count("\n") == 1, refused
    with world.warehouse().session() as session:
        assert schema_version(session) == "2"

"""A home of release 0.2 (schema 2) upgrades in place: its rows are sealed as they stand, its
approvers pin is kept, and a home with an active plan is refused before anything changes."""

from __future__ import annotations

from backfill_assets.control.schema import SCHEMA, schema_version
from tests.release_0_2 import as_release_0_2
from tests.world import keys

CONTROL = SCHEMA


def closed_plan_in_0_2(world) -> None:
    """A published, closed plan, in a home 0.2 left behind."""
    world.approved_plan("old", start="2026-01-01", end="2026-01-02", proof=("2026-01-02",))
    assert world.cli("run", "old", "--proof") == 0 and world.cli("run", "old") == 0
    assert world.cli("publish", "old") == 0 and world.cli("plan", "close", "old") == 0
    as_release_0_2(world)


def test_a_0_2_home_upgrades_in_place_and_keeps_its_approvers(world, tmp_path, run_cli):
    closed_plan_in_0_2(world)
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
    closed_plan_in_0_2(world)
    world.run_sql(f"UPDATE {CONTROL}.plans SET phase = 'running' WHERE plan_id = 'old'")
    refused = run_cli("plan", "withdraw", "old")
    assert refused.code == 1 and "old are still active" in refused.err and refused.err.count("\n") == 1, refused
    with world.warehouse().session() as session:
        assert schema_version(session) == "2"

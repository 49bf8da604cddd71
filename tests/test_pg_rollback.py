"""A rollback on PostgreSQL restores exactly the snapshot's bytes, or nothing (two holes found by an
attack; each test failed first): a plan id long enough that its snapshot tables' names passed
PostgreSQL's 63 bytes could never be rolled back (the names were cut silently, and looked for whole),
and a constraint trigger deferred to COMMIT changed a restored partition after the rollback proved it."""

from __future__ import annotations

import pytest

from tests.world import BUGGY, keys

# a valid plan id (PLAN_ID_PATTERN allows 1-63 characters); its snapshot tables'
# names (`<id>_<8 hex>__<table>`) are longer than PostgreSQL's 63-byte identifiers
LONG_ID = "refund-correction-for-the-january-2026-double-count-incident"


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_rollback_of_a_plan_with_a_long_valid_id_restores_on_postgresql(engine_world, capfd):
    world = engine_world
    assert len(LONG_ID) <= 63
    window = keys(1, 4)
    assert world.materialize(window, spec=BUGGY, publish=True).success
    target_before = world.fingerprints("daily_revenue", window)
    published_before = world.fingerprints("published_revenue", window)
    world.approved_plan(LONG_ID, start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", LONG_ID, "--proof") == 0 and world.cli("run", LONG_ID) == 0
    assert world.phase(LONG_ID) == "reconciled"
    assert world.cli("publish", LONG_ID) == 0
    capfd.readouterr()
    code = world.cli("rollback", LONG_ID)
    out = capfd.readouterr()
    assert code == 0, out.err
    assert world.fingerprints("daily_revenue", window) == target_before
    assert world.fingerprints("published_revenue", window) == published_before
    assert world.cli("evidence", "verify") == 0


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_deferred_trigger_on_the_target_never_changes_a_rollback_after_its_proof(engine_world, capfd):
    """The insider's constraint trigger, DEFERRABLE INITIALLY DEFERRED, fires at the rollback's
    COMMIT, after put_back compared the restored fingerprints with the snapshot's."""
    world = engine_world
    window = keys(1, 4)
    assert world.materialize(window, spec=BUGGY, publish=True).success
    target_before = world.fingerprints("daily_revenue", window)
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    world.run_sql("CREATE FUNCTION nudge_later() RETURNS trigger AS $$ BEGIN "
                  "UPDATE daily_revenue SET orders = orders + 1 WHERE order_date = NEW.order_date "
                  "AND region = NEW.region; RETURN NULL; END $$ LANGUAGE plpgsql")
    world.run_sql("CREATE CONSTRAINT TRIGGER nudge_later AFTER INSERT ON daily_revenue "
                  "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.region = 'north') "
                  "EXECUTE FUNCTION nudge_later()")
    capfd.readouterr()
    code = world.cli("rollback", "fix")
    out = capfd.readouterr()
    # whole or not at all: either refused (nothing changed) or the bytes are exactly the snapshot's
    if code == 0:
        assert "every fingerprint equals the one taken before the plan's first write" in out.out
        assert world.fingerprints("daily_revenue", window) == target_before
    else:  # the trigger fired before the proof: refused in one line, nothing changed
        assert out.err.count("\n") == 1 and "differ" in out.err, out.err
        assert world.phase() != "rolled_back"

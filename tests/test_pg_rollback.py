"""A rollback on PostgreSQL restores exactly the snapshot's bytes, or nothing (holes found by
attacks; each test failed first): a plan id long enough that its snapshot tables' names passed
PostgreSQL's 63 bytes could never be rolled back (the names were cut silently, and looked for whole),
a constraint trigger deferred to COMMIT changed a restored partition after the rollback proved it,
and code of a table's owner run inside the rollback's session changed what its statements named."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from tests.pg_server import admin_sql, give_table
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
    else:  # refused in one line, nothing changed: a deferrable trigger of one's own is refused
        assert out.err.count("\n") == 1 and ("differ" in out.err or "deferrable constraint trigger" in out.err), \
            out.err
        world.run_sql("DROP TRIGGER nudge_later ON daily_revenue")
        assert world.phase() != "rolled_back"


# --- code of a table's owner changing the rollback's own session (found by an attack) -------------

def ran_fix(world) -> list[str]:
    """The buggy window written and published plan-free, then plan `fix` approved, proven and run
    over it (reconciled, not published): the window."""
    window = keys(1, 4)
    assert world.materialize(window, spec=BUGGY, publish=True).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    return window


def rollback_refused(world, window: list[str], fixed: dict, capfd, *cleanup: str) -> None:
    """`rollback fix` under the insider's code: then `cleanup` (as the product's role), and the
    refusal required (`refused_in_one_line`)."""
    capfd.readouterr()
    code = world.cli("rollback", "fix")
    out = capfd.readouterr()
    for statement in cleanup:
        world.run_sql(statement)
    refused_in_one_line(world, window, fixed, code, out)


def refused_in_one_line(world, window: list[str], fixed: dict, code: int, out) -> None:
    """The rollback was refused in one line and nothing of it committed: the target still holds the
    plan's bytes (`fixed`) and the plan is not rolled back. Required, not merely allowed: an attack
    whose code stopped firing would let the rollback through, and the test would say so."""
    assert code != 0 and out.err.count("\n") == 1, (code, out.out, out.err)
    assert world.fingerprints("daily_revenue", window) == fixed and world.phase() != "rolled_back"


def _insider_owning_target(world):
    role = f"insider_{uuid.uuid4().hex[:8]}"
    admin_sql(world.url, f"CREATE ROLE {role} LOGIN NOSUPERUSER", f"GRANT USAGE, CREATE ON SCHEMA public TO {role}")
    give_table(world.url, "daily_revenue", role)
    return psycopg.connect(f"postgresql://{role}@{world.url.partition('@')[2]}", autocommit=True)


# the statement trigger creates a temporary copy of the target, which every later statement of the
# session naming "daily_revenue" reads and writes instead: put_back's INSERT and its proof
SHADOW = ("CREATE FUNCTION public.shadow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
          "CREATE TEMP TABLE IF NOT EXISTS daily_revenue (LIKE public.daily_revenue); RETURN NULL; END $$",
          "CREATE TRIGGER shadow AFTER DELETE ON daily_revenue FOR EACH STATEMENT EXECUTE FUNCTION public.shadow()")
# a plain trigger defers constraint triggers again after the transaction made them immediate: the
# deferrable one above fires at COMMIT, after the proof
DEFER = ("CREATE FUNCTION public.defer_all() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
         "SET CONSTRAINTS ALL DEFERRED; RETURN NULL; END $$",
         "CREATE TRIGGER defer_all BEFORE DELETE ON daily_revenue FOR EACH STATEMENT "
         "EXECUTE FUNCTION public.defer_all()",
         "CREATE FUNCTION public.nudge_later() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
         "UPDATE public.daily_revenue SET orders = orders + 1 WHERE order_date = NEW.order_date "
         "AND region = NEW.region; RETURN NULL; END $$",
         "CREATE CONSTRAINT TRIGGER nudge_later AFTER INSERT ON daily_revenue DEFERRABLE INITIALLY IMMEDIATE "
         "FOR EACH ROW WHEN (NEW.region = 'north') EXECUTE FUNCTION public.nudge_later()")
# fired by the proof's `SET CONSTRAINTS ALL IMMEDIATE`, a constraint trigger defers all again and
# queues a second, which would change the restored rows at COMMIT, after the proof
REDEFER = (*DEFER[:2],
           "CREATE FUNCTION public.first() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
           "SET CONSTRAINTS ALL DEFERRED; UPDATE public.daily_revenue SET orders = orders "
           "WHERE order_date = NEW.order_date AND region = NEW.region; RETURN NULL; END $$",
           "CREATE CONSTRAINT TRIGGER first AFTER INSERT ON daily_revenue DEFERRABLE INITIALLY IMMEDIATE "
           "FOR EACH ROW WHEN (NEW.region = 'north') EXECUTE FUNCTION public.first()",
           "CREATE FUNCTION public.second() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
           "UPDATE public.daily_revenue SET orders = orders + 1 WHERE order_date = NEW.order_date "
           "AND region = NEW.region; RETURN NULL; END $$",
           "CREATE CONSTRAINT TRIGGER second AFTER UPDATE ON daily_revenue DEFERRABLE INITIALLY IMMEDIATE "
           "FOR EACH ROW WHEN (NEW.region = 'north' AND NEW.orders = OLD.orders) "
           "EXECUTE FUNCTION public.second()")
# the search path keeps its text (`"$user", public`), but `"$user"` comes to name a schema the
# trigger makes as the product (which may create schemas), holding a copy of the target
USER_SCHEMA = ("CREATE FUNCTION public.user_shadow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
               "EXECUTE pg_catalog.format('CREATE SCHEMA IF NOT EXISTS %I', current_user); "
               "EXECUTE pg_catalog.format('CREATE TABLE IF NOT EXISTS %I.daily_revenue "
               "(LIKE public.daily_revenue)', current_user); RETURN NULL; END $$",
               "CREATE TRIGGER user_shadow AFTER DELETE ON daily_revenue FOR EACH STATEMENT "
               "EXECUTE FUNCTION public.user_shadow()")
# the search path turned to a schema of the insider's, for the rest of the session
DETOUR = ("CREATE TABLE detour.daily_revenue (LIKE public.daily_revenue)",
          "CREATE FUNCTION public.detour() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
          "PERFORM pg_catalog.set_config('search_path', 'detour, public', false); RETURN NULL; END $$",
          "CREATE TRIGGER detour AFTER DELETE ON daily_revenue FOR EACH STATEMENT EXECUTE FUNCTION public.detour()")


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
@pytest.mark.parametrize("way", ["shadow", "defer", "redefer", "user schema", "earlier schema", "detour"])
def test_code_in_the_rollbacks_session_never_gets_a_wrong_restore_proven(engine_world, way, capfd):
    """Insider owning the target only: its trigger, run by the rollback's DELETE as the product,
    changed the rest of the session. A temporary `daily_revenue` took the restore and its proof (the
    real partitions left empty, the rollback reporting every fingerprint restored); constraints
    deferred again had a trigger change the restored rows at COMMIT, as did one deferred again while
    the proof fired them; a search path turned to the insider's schema, or a schema `"$user"` comes to
    name, had the restore read and written there (each found by an attack)."""
    world = engine_world
    window = ran_fix(world)
    fixed = world.fingerprints("daily_revenue", window)
    if way == "earlier schema":  # `"$user"` names a schema from the start: the path resolves alike throughout
        world.run_sql("CREATE SCHEMA backfill")
    if way == "detour":  # a schema the insider may create in
        world.run_sql("CREATE SCHEMA detour")
        world.run_sql("GRANT USAGE, CREATE ON SCHEMA detour TO PUBLIC")
    with _insider_owning_target(world) as con:
        for statement in {"shadow": SHADOW, "defer": DEFER, "redefer": REDEFER, "user schema": USER_SCHEMA,
                          "earlier schema": USER_SCHEMA, "detour": DETOUR}[way]:
            con.execute(statement)
        capfd.readouterr()
        code = world.cli("rollback", "fix")
        out = capfd.readouterr()
        for (name,) in con.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = 'public.daily_revenue'::regclass "
                                   "AND NOT tgisinternal").fetchall():  # what a refusal asks to remove
            con.execute(f"DROP TRIGGER {name} ON public.daily_revenue")
    world.run_sql("DROP SCHEMA IF EXISTS backfill CASCADE")  # `"$user"`'s, made as the product
    refused_in_one_line(world, window, fixed, code, out)


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_trigger_on_a_control_table_is_refused_before_it_can_change_a_proven_rollback(engine_world, capfd):
    """Insider with any SQL on backfill_control: a trigger on the evidence chain's table fires when
    the rollback records what it proved, and edits the target after the proof, in the same
    transaction."""
    world = engine_world
    window = ran_fix(world)
    fixed = world.fingerprints("daily_revenue", window)
    with psycopg.connect(world.url, autocommit=True) as insider:
        insider.execute("CREATE FUNCTION public.after_proof() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                        "UPDATE public.daily_revenue SET orders = orders + 1 WHERE region = 'north'; "
                        "RETURN NULL; END $$")
        insider.execute("CREATE TRIGGER after_proof AFTER INSERT ON backfill_control.evidence FOR EACH STATEMENT "
                        "EXECUTE FUNCTION public.after_proof()")
        capfd.readouterr()
        assert world.cli("rollback", "fix") != 0
        err = capfd.readouterr().err
        assert "backfill_control has the trigger after_proof on evidence" in err and err.count("\n") == 1, err
        insider.execute("DROP TRIGGER after_proof ON backfill_control.evidence")  # what the refusal says to do
    assert world.fingerprints("daily_revenue", window) == fixed and world.phase() != "rolled_back"


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_pg_a_refill_changed_by_a_trigger_on_the_snapshot_is_refused_whole(engine_world, capfd):
    """Snapshot rows of one day deleted (the hurried user), then a BEFORE INSERT trigger on the
    snapshot table (the insider) changes what the rollback refills from the published copy: refused
    whole, the plan's bytes left (a guard of the refill, checked by an attack)."""
    world = engine_world
    window = keys(1, 4)
    assert world.materialize(window, publish=True).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    fixed = world.fingerprints("daily_revenue", window)
    snap = world.sql("SELECT tablename FROM pg_tables WHERE schemaname = 'backfill_snapshots' "
                     "AND tablename LIKE '%daily_revenue'")[0][0]
    world.run_sql(f"DELETE FROM backfill_snapshots.\"{snap}\" WHERE order_date = DATE '2026-01-02'")
    world.run_sql("CREATE FUNCTION public.bump() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                  "NEW.orders := NEW.orders + 1; RETURN NEW; END $$")
    world.run_sql(f'CREATE TRIGGER bump BEFORE INSERT ON backfill_snapshots."{snap}" FOR EACH ROW '
                  "EXECUTE FUNCTION public.bump()")
    capfd.readouterr()
    assert world.cli("rollback", "fix") == 1
    said = capfd.readouterr().err
    assert "does not hold the rows taken once copied from published_revenue" in said, said
    assert world.fingerprints("daily_revenue", window) == fixed and world.phase() != "rolled_back"

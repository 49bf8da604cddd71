"""An insider on PostgreSQL (a non-superuser role that owns tables and may create objects in
`public`, but cannot read the evidence key) hangs code on a table, which runs inside the writer's
statements: found by an attack, each test failed first.

A seal was computed from the rows read back after the writer's INSERT (`seals.of_seq`), so whatever
changed a ledger row on its way in was sealed as the writer's own: a BEFORE INSERT trigger setting a
failing gate's `passed`. And a trigger's function, like a CHECK constraint's, runs with the rights
of the role whose statement fires it: on a data table the insider owns, it runs their SQL as the
writer, which owns `backfill_control`. A seal is now of the values the writer gave: a row changed on
its way in is refused, the transaction rolled back, and publish has nothing unjudged to copy.
"""

from __future__ import annotations

import re
import uuid

import psycopg
import pytest

from tests.pg_server import admin_sql, give_table
from tests.world import BUGGY, keys

CONTROL = "backfill_control"

# every gate result the writer inserts is flipped to `passed` before it lands (and so before it is
# read back and sealed)
FLIP = ("CREATE FUNCTION public.flip_gate() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN NEW.passed := true; RETURN NEW; END $$")


def _insider(world):
    """A non-superuser role with CREATE on `public`; its URL."""
    role = f"insider_{uuid.uuid4().hex[:8]}"
    admin_sql(world.url, f"CREATE ROLE {role} LOGIN NOSUPERUSER")
    admin_sql(world.url, f"GRANT USAGE, CREATE ON SCHEMA public TO {role}")
    _, _, rest = world.url.partition("@")
    url = f"postgresql://{role}@{rest}"
    with psycopg.connect(url, autocommit=True) as con:
        assert not con.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]
    return role, url


def _hang_on_gate_results(world, function: str, name: str) -> None:
    """The insider owns `backfill_control.gate_results` and the source `orders`: 2026-01-03's orders
    loaded twice (its gates fail now), and `function` hung on each gate result the writer inserts."""
    role, url = _insider(world)
    admin_sql(world.url, f"GRANT USAGE ON SCHEMA {CONTROL} TO {role}")
    give_table(world.url, f"{CONTROL}.gate_results", role)
    give_table(world.url, "orders", role)
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("INSERT INTO orders SELECT * FROM orders WHERE order_date = '2026-01-03' LIMIT 2")
        con.execute(function)
        con.execute(f"CREATE TRIGGER {name} BEFORE INSERT ON {CONTROL}.gate_results "
                    f"FOR EACH ROW EXECUTE FUNCTION public.{name}()")


def _raw(world, query: str) -> int:
    """One number, read on a connection of one's own: the product's sessions refuse a warehouse
    with a trigger on a control table, before and inside every transaction."""
    with psycopg.connect(world.url, autocommit=True) as con:
        return int(con.execute(query).fetchone()[0])


REFUSED_TRIGGER = "has the trigger|a trigger or rule was hung on a table of backfill_control"


def _failing_window(world):
    """A plan whose proof passed, then the source of 2026-01-03 loaded twice: that day's gates fail."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_trigger_on_gate_results_never_gets_a_failing_gate_sealed_as_passed(engine_world):
    """Insider owning `backfill_control.gate_results` (and the source `orders`): a BEFORE INSERT
    trigger sets `passed = true` on each row the writer inserts. `record_results` then reads the rows
    back (`seals.of_seq`) and seals them as they landed: the forged pass verifies, the plan reconciles
    and publish copies a day whose gates failed (revenue of orders loaded twice)."""
    world = engine_world
    _failing_window(world)
    _hang_on_gate_results(world, FLIP, "flip_gate")
    assert world.cli("run", "fix") != 0  # refused: a trigger hangs on a control table
    published = world.cli("publish", "fix")
    assert published == 1 and _raw(world, "SELECT count(*) FROM published_revenue WHERE order_date = "
                                          "'2026-01-03'") == 0, \
        "a trigger's forged `passed` was sealed: publish copied a day whose gates failed"


# the function each way runs as the writer: it plants, on `backfill_control.gate_results` (which
# the writer owns), the BEFORE INSERT trigger of the test above
PLANT = (f"IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'flip') THEN CREATE TRIGGER flip BEFORE INSERT "
         f"ON {CONTROL}.gate_results FOR EACH ROW EXECUTE FUNCTION public.flip_gate(); END IF;")
ON_THE_TARGET = {
    # a statement trigger, fired by the write's INSERT
    "trigger": ("CREATE FUNCTION public.plant() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN {PLANT} RETURN NULL; END $$",
                "CREATE TRIGGER plant AFTER INSERT ON daily_revenue FOR EACH STATEMENT "
                "EXECUTE FUNCTION public.plant()"),
    # no trigger on any table the insider owns: a CHECK (`NOT VALID`: adding it evaluates nothing)
    # evaluated on each row the write inserts; refusing targets with triggers would not close this
    "check": ("CREATE FUNCTION public.plant_ok() RETURNS boolean LANGUAGE plpgsql VOLATILE AS "
              f"$$ BEGIN {PLANT} RETURN true; END $$",
              "ALTER TABLE daily_revenue ADD CONSTRAINT looks_harmless CHECK (public.plant_ok()) NOT VALID"),
}


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
@pytest.mark.parametrize("way", list(ON_THE_TARGET))
def test_code_on_the_target_running_as_the_writer_never_gets_gate_results_forged(engine_world, way):
    """Insider owning only the data tables (`daily_revenue`, the source `orders`) and CREATE on
    `public`, no right at all on `backfill_control`. Code they hang on the target runs with the
    writer's rights when the write's INSERT fires it, and plants the rewriting trigger on
    `backfill_control.gate_results` (owned by the writer): the gates of the same write transaction
    then recorded, and sealed, every result as passed."""
    world = engine_world
    _failing_window(world)
    role, url = _insider(world)
    give_table(world.url, "daily_revenue", role)
    give_table(world.url, "orders", role)
    with psycopg.connect(url, autocommit=True) as con:
        assert con.execute("SELECT has_schema_privilege(current_user, 'backfill_control', 'USAGE')"
                           ).fetchone()[0] is False
        con.execute("INSERT INTO orders SELECT * FROM orders WHERE order_date = '2026-01-03' LIMIT 2")
        con.execute(FLIP)
        for statement in ON_THE_TARGET[way]:
            con.execute(statement)
    assert world.cli("run", "fix") != 0
    planted = _raw(world, "SELECT count(*) FROM pg_trigger WHERE tgname = 'flip'")  # rolled back with the write
    published = world.cli("publish", "fix")
    assert published == 1 and _raw(world, "SELECT count(*) FROM published_revenue WHERE order_date = "
                                          "'2026-01-03'") == 0, \
        f"the target's {way} ran as the writer (planted {planted} trigger on gate_results): publish " \
        "copied a day whose gates failed"


# --- the ids the warehouse generates: set by a trigger as the row lands (found by a second attack) ---
# A seal compares the values the writer gave; an id comes from the warehouse's sequence, so a
# trigger may set it (below every earlier one) and it is sealed as it landed. "The latest" row was
# the highest id; it is now the latest chain row (a row under another number is outside its seal).

# every publication row the writer inserts gets an id below every earlier one: a value the writer
# did not give, so `of_seq` does not compare it, and the seal covers it as it landed
SINK = ("CREATE FUNCTION public.sink_id() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN NEW.publish_id := -NEW.publish_id; RETURN NEW; END $$")


def _published_then_republished(world, plant, capfd) -> bool:
    """The buggy days published, kept aside by the insider; then plan `fix` published over them,
    with `plant` run (as the insider) before its publish."""
    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    buggy = world.fingerprints("published_revenue", keys(1, 4))
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    role, url = _insider(world)
    give_table(world.url, "published_revenue", role)
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE TABLE public.kept AS SELECT * FROM published_revenue")
        plant(world, role, con)
    capfd.readouterr()
    if world.cli("publish", "fix") != 0:  # refused in one line: the trigger, before anything committed
        err = capfd.readouterr().err
        assert re.search(REFUSED_TRIGGER, err) and err.count("\n") == 1, err
        assert _raw(world, f"SELECT count(*) FROM {CONTROL}.publications WHERE plan_id = 'fix'") == 0
        return False
    fixed = world.fingerprints("published_revenue", keys(1, 4))
    assert fixed != buggy and fixed == world.fingerprints("daily_revenue", keys(1, 4))
    # the insider puts the buggy bytes back where consumers read (a direct edit, which must be found)
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("DELETE FROM published_revenue")
        con.execute("INSERT INTO published_revenue SELECT * FROM public.kept")
    assert world.fingerprints("published_revenue", keys(1, 4)) == buggy
    return True


def _own_publications(world, role, con):
    admin_sql(world.url, f"GRANT USAGE ON SCHEMA {CONTROL} TO {role}")
    give_table(world.url, f"{CONTROL}.publications", role)
    con.execute(SINK)
    con.execute(f"CREATE TRIGGER sink BEFORE INSERT ON {CONTROL}.publications "
                "FOR EACH ROW EXECUTE FUNCTION public.sink_id()")


def _through_the_published_table(world, role, con):
    """No right on backfill_control: a statement trigger on the published table (a team's table
    the insider owns) runs as the writer during publish's copy, and hangs the id-sinking trigger on
    `publications` (owned by the writer) before the copy's publication rows are inserted."""
    assert con.execute(f"SELECT has_schema_privilege(current_user, '{CONTROL}', 'USAGE')").fetchone()[0] is False
    con.execute(SINK)
    con.execute("CREATE FUNCTION public.plant_sink() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'sink') THEN "
                f"CREATE TRIGGER sink BEFORE INSERT ON {CONTROL}.publications "
                "FOR EACH ROW EXECUTE FUNCTION public.sink_id(); END IF; RETURN NULL; END $$")
    con.execute("CREATE TRIGGER plant_sink AFTER INSERT ON published_revenue "
                "FOR EACH STATEMENT EXECUTE FUNCTION public.plant_sink()")


@pytest.mark.parametrize("plant", [_own_publications, _through_the_published_table],
                         ids=["owner_of_publications", "through_published_table"])
@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_publication_id_sunk_below_older_ones_never_hides_an_edit_of_the_published_table(
        engine_world, plant, capfd):
    """The publication of plan `fix` lands with publish_id below the buggy load's: "the last
    publication" (ORDER BY publish_id DESC) is then the buggy one, sealed and verifying. The insider
    puts the buggy bytes back into the published table: `status` finds no edit, the plan stays
    published and `plan close` accepts, while consumers read the bytes the plan replaced."""
    world = engine_world
    if not _published_then_republished(world, plant, capfd):
        return  # the publish was refused: the fix's publication never landed, sunk or not
    ids = world.sql(f"SELECT min(publish_id) FROM {CONTROL}.publications")[0][0]
    capfd.readouterr()
    world.cli("status", "fix")
    out = capfd.readouterr().out
    closed = world.cli("plan", "close", "fix")
    assert "EDITED since" in out and closed != 0, \
        f"consumers read the replaced (buggy) bytes, yet status saw no edit and plan close returned {closed} " \
        f"(phase {world.phase()}; lowest publish_id {ids}: the fix's publication sank below the buggy one)"


# every gate result the writer inserts gets an id below every earlier one
SINK_RESULT = ("CREATE FUNCTION public.sink_result() RETURNS trigger LANGUAGE plpgsql AS "
               "$$ BEGIN NEW.result_id := -NEW.result_id; RETURN NEW; END $$")


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_result_id_sunk_below_older_ones_never_lets_publish_copy_a_day_whose_latest_gates_failed(
        engine_world, capfd):
    """Insider owning `backfill_control.gate_results` and the source `orders`. The plan reconciled;
    then 2026-01-03's orders are loaded twice and `backfill reconcile` judges the same write again:
    its gates fail on those very bytes, and the results are recorded (and sealed) with result ids
    below the earlier passing ones. "The latest result of each gate" (ORDER BY result_id DESC) is
    the old pass: the plan stays reconciled and publish copies the day its latest gates failed."""
    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.phase() == "reconciled"
    _hang_on_gate_results(world, SINK_RESULT, "sink_result")
    capfd.readouterr()
    assert world.cli("reconcile", "fix") != 0  # refused: a trigger hangs on a control table
    failing = _raw(world, f"SELECT count(*) FROM {CONTROL}.gate_results WHERE partition_key = '2026-01-03' "
                          "AND NOT passed")
    with psycopg.connect(world.url, autocommit=True) as con:
        phase = con.execute(f"SELECT phase FROM {CONTROL}.plans WHERE plan_id = 'fix'").fetchone()[0]
    published = world.cli("publish", "fix")
    assert published == 1 and _raw(world, "SELECT count(*) FROM published_revenue WHERE order_date = "
                                          "'2026-01-03'") == 0, \
        f"reconcile recorded {failing} failing result(s) on 2026-01-03's latest write, yet the plan is " \
        f"{phase} and publish copied it: the failures' sunk result ids made older passes 'the latest'"

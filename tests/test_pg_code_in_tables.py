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

import uuid

import psycopg
import pytest

CONTROL = "backfill_control"

# every gate result the writer inserts is flipped to `passed` before it lands (and so before it is
# read back and sealed)
FLIP = ("CREATE FUNCTION public.flip_gate() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN NEW.passed := true; RETURN NEW; END $$")


def _insider(world):
    """A non-superuser role with CREATE on `public`; its URL."""
    role = f"insider_{uuid.uuid4().hex[:8]}"
    world.run_sql(f"CREATE ROLE {role} LOGIN NOSUPERUSER")
    world.run_sql(f"GRANT USAGE, CREATE ON SCHEMA public TO {role}")
    _, _, rest = world.url.partition("@")
    url = f"postgresql://{role}@{rest}"
    with psycopg.connect(url, autocommit=True) as con:
        assert not con.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]
    return role, url


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
    role, url = _insider(world)
    world.run_sql(f"GRANT USAGE ON SCHEMA {CONTROL} TO {role}")
    world.run_sql(f"ALTER TABLE {CONTROL}.gate_results OWNER TO {role}")
    world.run_sql(f"ALTER TABLE orders OWNER TO {role}")
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("INSERT INTO orders SELECT * FROM orders WHERE order_date = '2026-01-03' LIMIT 2")
        con.execute(FLIP)
        con.execute(f"CREATE TRIGGER flip BEFORE INSERT ON {CONTROL}.gate_results "
                    "FOR EACH ROW EXECUTE FUNCTION public.flip_gate()")
    assert world.cli("run", "fix") != 0  # 2026-01-03's gates fail (the command says so)
    published = world.cli("publish", "fix")
    assert published == 1 and world.rows("published_revenue", "2026-01-03") == 0, \
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
    world.run_sql(f"ALTER TABLE daily_revenue OWNER TO {role}")
    world.run_sql(f"ALTER TABLE orders OWNER TO {role}")
    with psycopg.connect(url, autocommit=True) as con:
        assert con.execute("SELECT has_schema_privilege(current_user, 'backfill_control', 'USAGE')"
                           ).fetchone()[0] is False
        con.execute("INSERT INTO orders SELECT * FROM orders WHERE order_date = '2026-01-03' LIMIT 2")
        con.execute(FLIP)
        for statement in ON_THE_TARGET[way]:
            con.execute(statement)
    assert world.cli("run", "fix") != 0
    planted = world.sql("SELECT count(*) FROM pg_trigger WHERE tgname = 'flip'")[0][0]
    published = world.cli("publish", "fix")
    assert published == 1 and world.rows("published_revenue", "2026-01-03") == 0, \
        f"the target's {way} ran as the writer (planted {planted} trigger on gate_results): publish " \
        "copied a day whose gates failed"

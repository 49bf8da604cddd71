"""Code that runs after a table's proof but before COMMIT, through plain (IMMEDIATE) triggers, rules
or cascading foreign keys on a table the product writes later in the same transaction: a rollback
restores the target and then the published table, a graph's publish copies the days and then the
month (found by a fourth attack; each test failed first). Each proof is taken again just before the
commit (`Session.proven`): the command is refused in one line and nothing changes."""

from __future__ import annotations

import pytest

from tests.test_pg_rollback import _insider_owning_target, ran_fix, refused_in_one_line, rollback_refused

LATE = "CREATE FUNCTION public.late() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN " \
       "UPDATE public.daily_revenue SET orders = orders + 1 WHERE region = 'north'; RETURN NULL; END $$"
# run as the product by the target's restore (DELETE), it hangs a plain trigger on published_revenue,
# which the product owns: the published restore, after the target's proof, fires it
PLANT = ("CREATE FUNCTION public.plant() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
         "CREATE OR REPLACE TRIGGER late AFTER INSERT ON public.published_revenue FOR EACH STATEMENT "
         "EXECUTE FUNCTION public.late(); RETURN NULL; END $$",
         "CREATE TRIGGER plant AFTER DELETE ON daily_revenue FOR EACH STATEMENT EXECUTE FUNCTION public.plant()")


def _setup(world) -> list[str]:
    window = ran_fix(world)
    assert world.cli("publish", "fix") == 0
    return window


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_insider_owning_target_plants_trigger_on_published_table(engine_world, capfd):
    world = engine_world
    window = _setup(world)
    fixed = world.fingerprints("daily_revenue", window)
    with _insider_owning_target(world) as con:
        con.execute(LATE)
        for s in PLANT:
            con.execute(s)
        capfd.readouterr()
        code = world.cli("rollback", "fix")
        out = capfd.readouterr()
        con.execute("DROP TRIGGER plant ON public.daily_revenue")
    world.run_sql("DROP TRIGGER IF EXISTS late ON published_revenue")
    refused_in_one_line(world, window, fixed, code, out)


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_owner_of_published_table_edits_target_after_its_proof(engine_world, capfd):
    """Insider owning the published table (a consumer-facing table) only."""
    world = engine_world
    window = _setup(world)
    fixed = world.fingerprints("daily_revenue", window)
    world.run_sql(LATE)
    world.run_sql("CREATE TRIGGER late AFTER INSERT ON published_revenue FOR EACH STATEMENT "
                  "EXECUTE FUNCTION public.late()")
    rollback_refused(world, window, fixed, capfd, "DROP TRIGGER late ON published_revenue")


# --- a graph's publish: the days' copy proven, then the month's copy fires code changing the days -----

@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
@pytest.mark.parametrize("planted", [False, True, None])
def test_graph_publish_days_changed_after_their_proof(engine_world, monkeypatch, capfd, planted):
    from tests.test_graph import JANUARY, buggy_january_published, reconciled_graph

    world = buggy_january_published(engine_world, monkeypatch)
    world.run_sql("CREATE FUNCTION public.late_days() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                  "UPDATE public.published_revenue SET orders = orders + 1 WHERE region = 'north'; "
                  "RETURN NULL; END $$")
    con = None
    if planted:  # insider owning the target only: a write of the plan, as the product, hangs it
        con = _insider_owning_target(world)
        con.execute("CREATE FUNCTION public.plant_m() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    "CREATE OR REPLACE TRIGGER late_days AFTER INSERT ON public.published_monthly_revenue "
                    "FOR EACH STATEMENT EXECUTE FUNCTION public.late_days(); RETURN NULL; END $$")
        con.execute("CREATE TRIGGER plant_m AFTER INSERT ON daily_revenue FOR EACH STATEMENT "
                    "EXECUTE FUNCTION public.plant_m()")
    reconciled_graph(world)
    if planted:
        con.execute("DROP TRIGGER plant_m ON daily_revenue")  # gone before publish: nothing of the target's runs
        con.close()
    elif planted is False:  # the owner of the month's published table
        world.run_sql("CREATE TRIGGER late_days AFTER INSERT ON published_monthly_revenue FOR EACH STATEMENT "
                      "EXECUTE FUNCTION public.late_days()")
    before = world.fingerprints("published_revenue", JANUARY)
    capfd.readouterr()
    code = world.cli("publish", "fix")
    out = capfd.readouterr()
    world.run_sql("DROP TRIGGER IF EXISTS late_days ON published_monthly_revenue")
    published = world.fingerprints("published_revenue", JANUARY)
    if planted is None:  # no one's code: the publish proved (and sealed) the days' checked bytes
        assert code == 0, out.err
        assert published == world.fingerprints("daily_revenue", JANUARY)
    else:  # refused in one line: consumers keep the last good data
        assert code != 0 and out.err.count("\n") == 1 and "as the publish was committing" in out.err, out.err
        assert published == before


# --- no trigger of anyone's at the rollback: a foreign key ON DELETE CASCADE from the target into
# published_revenue (internal triggers only); the published restore's DELETE, after the target's
# proof, deletes the restored days again ---------------------------------------------------------

@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_cascading_foreign_key_from_target_into_published_table(engine_world, capfd):
    world = engine_world
    window = _setup(world)
    fixed = world.fingerprints("daily_revenue", window)
    with _insider_owning_target(world) as con:
        # run once as the product by any write of the target (here fired by hand with an UPDATE):
        # the product owns published_revenue, so it may give it a key and let others reference it
        con.execute("CREATE FUNCTION public.open_up() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    "IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'pub_key') THEN "
                    "ALTER TABLE public.published_revenue ADD CONSTRAINT pub_key UNIQUE (order_date, region); "
                    "GRANT REFERENCES ON public.published_revenue TO PUBLIC; END IF; RETURN NULL; END $$")
        con.execute("CREATE TRIGGER open_up AFTER UPDATE ON daily_revenue FOR EACH STATEMENT "
                    "EXECUTE FUNCTION public.open_up()")
        world.run_sql("UPDATE daily_revenue SET orders = orders WHERE false")  # stands for the product's next write
        con.execute("DROP TRIGGER open_up ON daily_revenue")
        con.execute("ALTER TABLE daily_revenue ADD CONSTRAINT cascade_fk FOREIGN KEY (order_date, region) "
                    "REFERENCES public.published_revenue (order_date, region) ON DELETE CASCADE")
        capfd.readouterr()
        code = world.cli("rollback", "fix")
        out = capfd.readouterr()
        con.execute("ALTER TABLE daily_revenue DROP CONSTRAINT cascade_fk")
    refused_in_one_line(world, window, fixed, code, out)


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_rule_on_published_table_edits_target_after_its_proof(engine_world, capfd):
    world = engine_world
    window = _setup(world)
    fixed = world.fingerprints("daily_revenue", window)
    world.run_sql("CREATE RULE late AS ON INSERT TO published_revenue DO ALSO "
                  "UPDATE public.daily_revenue SET orders = orders + 1 WHERE region = 'north'")
    rollback_refused(world, window, fixed, capfd, "DROP RULE late ON published_revenue")


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_snapshot_a_publish_set_aside_is_never_edited_by_its_later_copy(engine_world, capfd):
    """The owner of the published table: the publish sets the published partitions aside (the
    rollback's snapshot), then copies over them, which fires the owner's trigger as the product: it
    edits the snapshot. Committed, the plan could never be rolled back (found by a review)."""
    world = engine_world
    window = ran_fix(world)
    published = world.fingerprints("published_revenue", window)
    world.run_sql("CREATE FUNCTION public.edit_aside() RETURNS trigger LANGUAGE plpgsql AS $$ DECLARE r record; "
                  "BEGIN FOR r IN SELECT tablename FROM pg_tables WHERE schemaname = 'backfill_snapshots' LOOP "
                  "EXECUTE format('UPDATE backfill_snapshots.%I SET orders = orders + 1', r.tablename); END LOOP; "
                  "RETURN NULL; END $$")
    world.run_sql("CREATE TRIGGER edit_aside AFTER INSERT ON published_revenue FOR EACH STATEMENT "
                  "EXECUTE FUNCTION public.edit_aside()")
    capfd.readouterr()
    code = world.cli("publish", "fix")
    err = capfd.readouterr().err
    world.run_sql("DROP TRIGGER edit_aside ON published_revenue")
    assert code != 0 and err.count("\n") == 1 and "the snapshot of published_revenue" in err, err
    assert world.fingerprints("published_revenue", window) == published  # consumers keep the last good data
    assert world.cli("publish", "fix") == 0  # once the trigger is gone
    assert world.cli("rollback", "fix") == 0  # and the snapshot it took rolls back
    assert world.fingerprints("published_revenue", window) == published

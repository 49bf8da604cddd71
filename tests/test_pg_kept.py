"""PostgreSQL connections kept between a command's sessions (`warehouse.kept_open`): one server
process serves them, and no session inherits another's state, nor skips a check because its
connection is an old one."""

from __future__ import annotations

import os
import time

import psycopg
import pytest

from backfill_assets.errors import ForgedRecord
from backfill_assets.warehouse import engine_for, kept_open
from backfill_assets.warehouse.state_store import SCHEMA
from tests.pg_server import APP_ROLE, admin_sql, give_table


def _backend(session) -> int:
    return int(session.scalar("SELECT pg_backend_pid()"))


def _gone(url: str, pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as watch:
        while time.monotonic() < deadline:
            if not watch.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()[0]:
                return True
            time.sleep(0.05)
    return False


def test_sessions_in_kept_open_share_a_server_process_and_none_of_its_state(postgres_url):
    engine = engine_for(postgres_url)
    with engine.session() as first, engine.session() as second:  # nested: two connections
        assert _backend(first) != _backend(second)
    with engine.session() as session:
        default_zone = session.scalar("SHOW TimeZone")
        alone = _backend(session)
    with engine.session() as session:
        assert _backend(session) != alone  # outside kept_open each session connects anew

    with kept_open():
        with engine.session() as session:
            kept = _backend(session)
            session.execute("SET TimeZone = 'Pacific/Chatham'")
            session.execute("SET extra_float_digits = 0")
            session.execute("CREATE TEMP TABLE left_behind (x INTEGER)")
            session.execute("SELECT pg_advisory_lock(42)")
        with engine.session(read_only=True, wait_seconds=2.0) as session:
            assert _backend(session) == kept
            assert session.scalar("SHOW TimeZone") == default_zone
            assert session.scalar("SHOW extra_float_digits") == "1"  # the engine's own, set again
            assert session.scalar("SELECT to_regclass('pg_temp.left_behind')") is None
            assert session.scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                  "AND pid = pg_backend_pid()") == 0
            assert session.scalar("SHOW default_transaction_read_only") == "on"
        with engine.session() as session:
            assert _backend(session) == kept
            assert session.scalar("SHOW default_transaction_read_only") == "off"  # a read-only session's end
            assert session.scalar("SHOW lock_timeout") == "0"
            with session.transaction():
                session.execute("CREATE TABLE written (x INTEGER)")
            session.execute("SELECT count(*) FROM written")  # a statement prepared now and kept
            for _ in range(6):
                session.execute("SELECT count(*) FROM written WHERE x > ?", [1])
        with engine.session() as session:  # psycopg's prepared statements still answer
            assert _backend(session) == kept
            for _ in range(2):
                assert session.scalar("SELECT count(*) FROM written WHERE x > ?", [1]) == 0
        with pytest.raises(RuntimeError), engine.session() as session:
            raise RuntimeError("a session that failed")
        with engine.session() as session:  # a failed session's connection is closed, not kept
            assert _backend(session) != kept
            again = _backend(session)
    assert _gone(postgres_url, kept) and _gone(postgres_url, again)  # closed when kept_open ends


def test_a_forked_child_never_uses_nor_closes_its_parents_kept_connection(postgres_url):
    engine = engine_for(postgres_url)
    with kept_open():
        with engine.session() as session:
            kept = _backend(session)
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # the child: its own connection, kept until its kept_open ends
            code = 1
            try:
                os.close(read)
                with kept_open(), engine.session() as session:
                    os.write(write, str(_backend(session)).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        childs = int(os.read(read, 64) or 0)
        os.close(read)
        assert childs and childs != kept
        with engine.session() as session:  # the parent's connection still serves it
            assert _backend(session) == kept
            assert session.scalar("SELECT 1") == 1


def test_a_kept_connection_still_checks_the_control_schema_at_every_session(postgres_url):
    """Guard: a control table swapped for a view between two sessions is refused by the second,
    whose connection the first used."""
    engine = engine_for(postgres_url)
    with engine.session() as session:
        session.execute(f"CREATE SCHEMA {SCHEMA}")
        session.execute(f"CREATE TABLE {SCHEMA}.plans (plan_id VARCHAR)")
    with kept_open():
        with engine.session() as session:
            kept = _backend(session)
        with psycopg.connect(postgres_url, autocommit=True) as insider:
            insider.execute(f"ALTER TABLE {SCHEMA}.plans RENAME TO plans_real")
            insider.execute(f"CREATE VIEW {SCHEMA}.plans AS SELECT * FROM {SCHEMA}.plans_real")
        with pytest.raises(ForgedRecord, match="plans is a view, not a plain table"), engine.session():
            pass
        assert _gone(postgres_url, kept)  # and its connection closed, not kept


# --- an insider's PREPARE under one of the product's statement names --------------------------------

@pytest.fixture
def poisoner(postgres_url):
    """A non-superuser owning `public.target` (a table the product writes) and the control schema's
    `plans`, whose trigger, run in the product's session as the product's role, replaces the
    product's prepared statement of the control check's relation list with one answering nothing."""
    import uuid

    role = f"insider_{uuid.uuid4().hex[:8]}"
    engine = engine_for(postgres_url)
    admin_sql(postgres_url, f"CREATE ROLE {role} LOGIN NOSUPERUSER", f"GRANT USAGE, CREATE ON SCHEMA public TO {role}",
              f"CREATE SCHEMA {SCHEMA} AUTHORIZATION {role}", f"GRANT USAGE, CREATE ON SCHEMA {SCHEMA} TO {APP_ROLE}",
              f"CREATE TABLE {SCHEMA}.plans (plan_id VARCHAR)", "CREATE TABLE public.target (x INTEGER)")
    give_table(postgres_url, f"{SCHEMA}.plans", role)
    give_table(postgres_url, "public.target", role)
    url = f"postgresql://{role}@{postgres_url.partition('@')[2]}"
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(r"""
CREATE FUNCTION public.poison() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE s record;
BEGIN
  FOR s IN SELECT name FROM pg_catalog.pg_prepared_statements
           WHERE statement LIKE '%c.relname, c.relkind, c.relrowsecurity%' LOOP
    EXECUTE format('DEALLOCATE %I', s.name);
    EXECUTE format('PREPARE %I(text) AS SELECT NULL::name, NULL::"char", NULL::boolean WHERE $1 IS NULL', s.name);
  END LOOP;
  RETURN NULL;
END $f$;
CREATE TRIGGER poison AFTER INSERT ON public.target FOR EACH STATEMENT EXECUTE FUNCTION public.poison();""")
    yield engine, url


REFUSED = "prepared by SQL in this warehouse session|plans is a view"


def _swap_plans_for_a_view(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as insider:
        insider.execute(f"ALTER TABLE {SCHEMA}.plans RENAME TO plans_real")
        insider.execute(f"CREATE VIEW {SCHEMA}.plans AS SELECT * FROM {SCHEMA}.plans_real")


def _writes_firing_the_trigger(session) -> None:
    for _ in range(3):  # a run's few transactions: the check's statements are prepared by then
        with session.transaction():
            session.execute(f"SELECT plan_id FROM {SCHEMA}.plans")
    with session.transaction():
        session.execute("INSERT INTO public.target VALUES (1)")  # the trigger replaces one of them


def test_a_trigger_that_replaces_a_prepared_check_gets_the_next_session_of_the_command_refused(poisoner):
    """Insider (owner of a table the product writes): its trigger re-prepared the control check's
    statement on the kept connection, and the next session of the command ran the insider's
    statement as the check: a control table swapped for a view meanwhile passed (found by an
    attack)."""
    engine, url = poisoner
    with kept_open():
        with engine.session() as session:
            _writes_firing_the_trigger(session)
        _swap_plans_for_a_view(url)
        with pytest.raises(ForgedRecord, match=REFUSED), engine.session():
            pass


def test_a_trigger_that_replaces_a_prepared_check_gets_the_next_transaction_refused(poisoner):
    """The same within one session, kept or not: the next transaction's check is refused."""
    engine, url = poisoner
    with engine.session() as session:
        _writes_firing_the_trigger(session)
        _swap_plans_for_a_view(url)
        with pytest.raises(ForgedRecord, match=REFUSED), session.transaction():
            pass


def test_no_statement_but_the_control_checks_is_prepared(postgres_url):
    """A decision's read run many times in a session is sent unprepared each time: no prepared
    statement of the product's but the check's own, which is verified before each use, for a
    trigger to replace."""
    engine = engine_for(postgres_url)
    with engine.session() as session:
        session.execute(f"CREATE SCHEMA {SCHEMA}")
        session.execute(f"CREATE TABLE {SCHEMA}.plans (plan_id VARCHAR)")
    with kept_open():
        for _ in range(3):
            with engine.session() as session:
                for _ in range(10):
                    with session.transaction():
                        session.rows(f"SELECT plan_id FROM {SCHEMA}.plans WHERE plan_id = ?", ["fix"])
        with engine.session() as session:
            prepared = [str(r[0]) for r in session.rows("SELECT statement FROM pg_catalog.pg_prepared_statements")]
    assert prepared and all("pg_catalog.pg_class" in s for s in prepared), prepared
    assert not [s for s in prepared if f"FROM {SCHEMA}.plans WHERE" in s], prepared

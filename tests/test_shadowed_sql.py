"""An insider who can write the warehouse (any SQL as a table owner, not superuser) but cannot read
the evidence key made a fingerprint see other bytes than those stored, or than the next statement
reads, through objects of their own that answer the fingerprint SQL's calls (found by an attack;
each test failed first, on a real DuckDB file or a real PostgreSQL 15 server).

The shared cause: the fingerprint SQL (and relation_kind's catalog question) call functions and
operators by their bare names, and both engines let a user's object answer such a call:
- DuckDB: a persistent `CREATE MACRO sha256(...)` (or `current_schema()`, `lower`, ...) in the
  database's `main` schema shadows the built-in for every later connection to the file.
- PostgreSQL: `pg_catalog` is searched first only among functions of *identical* argument types; a
  user's `public.convert_to(text, text)` wins over `pg_catalog.convert_to(text, name)` for the
  literal 'UTF8' (text is the preferred string type), and a user's operator `=(oid, regclass)` is an
  exact match where pg_catalog has only `=(oid, oid)`. And the owner of a type (composite, enum)
  may `CREATE CAST (its_type AS text) WITH FUNCTION ...`, which `CAST(col AS TEXT)` then calls.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from backfill_assets.errors import ForgedRecord, WarehouseError
from backfill_assets.warehouse import engine_for
from backfill_assets.warehouse.duckdb_engine import kept_open
from backfill_assets.warehouse.fingerprints import fingerprints
from tests.pg_server import APP_ROLE, admin_sql, give_table
from tests.test_fingerprints import COLUMNS, KEYS, SCHEME, make_table

# the tampering: alice's 12.50 becomes 999.00; in a row's canonical text `5:12.50` becomes `6:999.00`
TAMPER = "UPDATE golden SET amount = 999 WHERE name = 'alice'"


def _amount_of_alice(session) -> str:
    return str(session.scalar("SELECT amount FROM golden WHERE name = 'alice'"))


def two_faced_view(execute) -> None:
    """`tampered` (golden with alice's amount 999.00) and the view `seen`: golden's rows to a
    statement that names sha256 (a fingerprint), tampered's to every other."""
    execute("CREATE TABLE tampered AS SELECT * FROM golden")
    execute("UPDATE tampered SET amount = 999 WHERE name = 'alice'")
    execute("CREATE VIEW seen AS SELECT * FROM golden WHERE current_query() LIKE '%sha256%' "
            "UNION ALL SELECT * FROM tampered WHERE current_query() NOT LIKE '%sha256%'")


# --- DuckDB: a user macro shadows a built-in the fingerprint calls --------------------------------

def test_duckdb_a_user_macro_named_sha256_keeps_a_tampered_partition_s_fingerprint(tmp_path):
    """Insider (warehouse write). A macro persisted in the database file's `main` schema shadows
    DuckDB's built-in `sha256` in every later connection, the fingerprint's included. It calls the
    real one (`system.main.sha256`) over the row's text with the tampered field put back: alice's
    amount is changed to 999.00 in the stored bytes, and the fingerprint still equals the one
    recorded over 12.50 (what a publish check, a snapshot proof or an expectation compares with)."""
    engine = engine_for(f"duckdb:///{tmp_path / 'w.duckdb'}")
    with engine.session() as session:
        make_table(session)
        recorded = fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)
    with engine.session() as insider:  # another connection, another time: the macro is persistent
        insider.execute(TAMPER)
        # the row digest's argument is VARCHAR (its field put back), the partition digest's a BLOB (as is)
        insider.execute("CREATE MACRO sha256(x) AS system.main.sha256(CASE WHEN typeof(x) = 'BLOB' "
                        "THEN CAST(x AS BLOB) ELSE encode(replace(CAST(x AS VARCHAR), '6:999.00', '5:12.50')) END)")
    # refused as the session opens: a macro shadowing a built-in answers every statement calling it
    with pytest.raises(ForgedRecord, match="macro.s. sha256 shadow built-ins"), engine.session() as session:
        fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)
    assert recorded["2026-01-01"].rows == 3


def test_duckdb_a_user_macro_named_current_schema_lets_a_view_pass_as_no_relation(tmp_path):
    """Insider (warehouse write). relation_kind asks duckdb_tables()/duckdb_views() for
    `coalesce(?, current_schema())`; a persistent macro `current_schema()` answering another schema
    makes it find nothing, so it returns None, which `_grouped` accepts like 'table' (a missing
    table). The statement's own `FROM "seen"` still resolves by the search path to the view, which
    answers the fingerprint the recorded rows and every other statement the tampered ones."""
    engine = engine_for(f"duckdb:///{tmp_path / 'w.duckdb'}")
    with engine.session() as session:
        make_table(session)
        two_faced_view(session.execute)
        session.execute("CREATE MACRO current_schema() AS 'elsewhere'")
    with pytest.raises(ForgedRecord, match="current_schema shadow built-ins"), engine.session() as session:
        fingerprints(session, "seen", COLUMNS, SCHEME, "day", KEYS)


def test_duckdb_what_a_command_found_in_the_catalog_is_asked_again_once_another_process_had_the_file(tmp_path):
    """Insider (warehouse write), between two steps of one command. A command keeping the database
    open (`kept_open`) remembers what the catalog said (no macro shadows a built-in, `golden` is a
    plain table): no other process can change it while the file is held. Once the command lets go
    of the file (a waiter took its turn), another process makes a macro and swaps the table for a
    two-faced view; the command's next fingerprint must see both, never the remembered answers."""
    path = tmp_path / "w.duckdb"
    engine = engine_for(f"duckdb:///{path}")
    swap = ("import duckdb, sys; con = duckdb.connect(sys.argv[1]); "
            "con.execute('ALTER TABLE golden RENAME TO kept'); "
            "con.execute('CREATE TABLE tampered AS SELECT * FROM kept'); "
            f"con.execute({TAMPER.replace('golden', 'tampered')!r}); "
            "con.execute(\"CREATE VIEW golden AS SELECT * FROM kept WHERE current_query() LIKE '%sha256%' "
            "UNION ALL SELECT * FROM tampered WHERE current_query() NOT LIKE '%sha256%'\")")
    with kept_open():
        with engine.session() as session:
            make_table(session)
        for _ in range(2):  # the second joins the kept database and its remembered answers
            with engine.session() as session:
                recorded = fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)
        engine.let_go()
        subprocess.run([sys.executable, "-c", swap, str(path)], check=True)
        with engine.session() as session:
            assert _amount_of_alice(session) == "999.00"  # what every other statement reads now
            with pytest.raises(ForgedRecord, match="golden is a view"):
                fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)
        engine.let_go()
        subprocess.run([sys.executable, "-c", "import duckdb, sys; duckdb.connect(sys.argv[1]).execute("
                        "\"CREATE MACRO SHA256(x) AS system.main.sha256(x)\")", str(path)], check=True)
        with pytest.raises(ForgedRecord, match="sha256 shadow built-ins"), engine.session() as session:
            fingerprints(session, "kept", COLUMNS, SCHEME, "day", KEYS)
    assert recorded["2026-01-01"].rows == 3


# the same, with the warehouse's path swapped for a symlink elsewhere while a command keeps the file
# (found by an attack on the remembered answers: the path then opened another database)

# Another process (the insider's): it never opens the held file with DuckDB (the lock stops it),
# only copies its bytes (an advisory lock stops no reader), forges the copy (FORGERIES), and puts a
# symlink to it in place of the warehouse file (one rename in the warehouse's folder, which anyone
# who can open the warehouse for writing can write: DuckDB creates the .wal there).
SWAP = r"""
import os, shutil, sys, duckdb
path = sys.argv[1]
forge = path + ".forge"
shutil.copyfile(path, forge)
if os.path.exists(path + ".wal"):
    shutil.copyfile(path + ".wal", forge + ".wal")
con = duckdb.connect(forge)
for statement in sys.argv[2:]:
    con.execute(statement)
con.close()
os.symlink(forge, path + ".link")
os.replace(path + ".link", path)
"""

FORGERIES = {
    # `golden` a two-faced view: the recorded rows to a statement naming sha256, tampered ones to the rest
    "golden is a view": ("ALTER TABLE golden RENAME TO kept", "CREATE TABLE tampered AS SELECT * FROM kept",
                         TAMPER.replace("golden", "tampered"),
                         "CREATE VIEW golden AS SELECT * FROM kept WHERE current_query() LIKE '%sha256%' "
                         "UNION ALL SELECT * FROM tampered WHERE current_query() NOT LIKE '%sha256%'"),
    # `golden` tampered in place, and a macro `sha256` putting the field back in each row's text
    "sha256 shadow built-ins": (TAMPER, "CREATE MACRO sha256(x) AS system.main.sha256(CASE WHEN typeof(x) = "
                                "'BLOB' THEN CAST(x AS BLOB) ELSE encode(replace(CAST(x AS VARCHAR), '6:999.00', "
                                "'5:12.50')) END)"),
}


@pytest.mark.parametrize("refusal", list(FORGERIES))
def test_duckdb_a_forgery_behind_the_kept_path_swapped_for_a_symlink_is_refused(tmp_path, refusal):
    """Insider (warehouse write, i.e. write access to the warehouse's folder), between two steps of
    one command that keeps the file (`kept_open`: a run worker, a CLI command). The command's first
    fingerprint remembered "golden is a plain table, no macro shadows a built-in" under the key
    (pid, abspath). The insider swaps the path for a symlink to a forged database: the kept
    connection still holds the old one, but `duckdb.connect(path)` resolves the symlink and opened
    the forged database with the old one's answers: the fingerprint equalled the recorded one over
    rows every other statement reads as tampered."""
    path = tmp_path / "w.duckdb"
    engine = engine_for(f"duckdb:///{path}")
    with kept_open():
        with engine.session() as session:
            make_table(session)
        with engine.session() as session:
            recorded = fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)
        subprocess.run([sys.executable, "-c", SWAP, str(path), *FORGERIES[refusal]], check=True)
        # refused as the session opens: the path names another file than the one the command holds
        with pytest.raises(WarehouseError, match="names another file than the one this command holds"), \
                engine.session() as session:
            seen = fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)
            assert seen == recorded  # the insider's win: the tampered partition keeps its record


# --- PostgreSQL: a user function, operator or cast answers the fingerprint's call ------------------

@pytest.fixture
def insider(postgres_url):
    """A non-superuser role that may create objects in `public` (the schema the app's tables live
    in, on its search path) and owns the table `golden`; its URL and the app's engine."""
    import psycopg

    role = f"insider_{uuid.uuid4().hex[:8]}"
    engine = engine_for(postgres_url)
    admin_sql(postgres_url, f"CREATE ROLE {role} LOGIN NOSUPERUSER", f"GRANT USAGE, CREATE ON SCHEMA public TO {role}")
    with engine.session() as session:
        make_table(session)
    give_table(postgres_url, "golden", role)
    user, _, rest = postgres_url.partition("@")
    url = f"postgresql://{role}@{rest}"
    with psycopg.connect(url, autocommit=True) as con:
        assert not con.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]
    yield engine, url
    admin_sql(postgres_url, f"DROP OWNED BY {role} CASCADE", f"DROP ROLE {role}")


def test_postgres_a_user_convert_to_text_text_keeps_a_tampered_partition_s_fingerprint(insider):
    """Insider (table owner, CREATE on public). The row digest is `sha256(convert_to(text, 'UTF8'))`:
    the literal is of unknown type, and PostgreSQL prefers a candidate taking `text` (the preferred
    string type) over pg_catalog's `convert_to(text, name)`, wherever pg_catalog stands on the
    search path. The insider's `public.convert_to(text, text)` puts the tampered field back before
    encoding: the stored amount is 999.00, the fingerprint is the one recorded over 12.50."""
    import psycopg

    engine, url = insider
    with engine.session() as session:
        recorded = fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(TAMPER)
        con.execute("CREATE FUNCTION public.convert_to(t text, e text) RETURNS bytea LANGUAGE sql IMMUTABLE "
                    "AS $$ SELECT pg_catalog.convert_to(replace(t, '6:999.00', '5:12.50'), 'UTF8') $$")
    with engine.session() as session:
        assert _amount_of_alice(session) == "999.00"
        now = fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)
    assert now["2026-01-01"] != recorded["2026-01-01"], \
        "public.convert_to(text, text) made different stored bytes give the recorded fingerprint"


def test_postgres_a_user_operator_oid_eq_regclass_lets_a_view_pass_as_no_relation(insider):
    """Insider (CREATE on public). relation_kind asks `WHERE c.oid = to_regclass(?)`: pg_catalog
    has `=(oid, oid)` only, so the insider's `public.=(oid, regclass)` is the exact match and is
    chosen. It answers false for the view `seen`: relation_kind returns None, `_grouped` goes on, and
    the view answers the fingerprint the recorded rows and every other statement the tampered ones."""
    import psycopg

    engine, url = insider
    with psycopg.connect(url, autocommit=True) as con:
        two_faced_view(con.execute)
        con.execute(f"GRANT SELECT ON tampered, seen TO {APP_ROLE}")  # the owner's grant: the product reads them
        con.execute("CREATE FUNCTION public.oid_is(l oid, r regclass) RETURNS boolean LANGUAGE sql STABLE "
                    "AS $$ SELECT l OPERATOR(pg_catalog.=) r::oid AND r::text <> 'seen' $$")
        con.execute("CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regclass, FUNCTION = public.oid_is)")
    with engine.session() as session:
        assert str(session.scalar("SELECT amount FROM seen WHERE name = 'alice'")) == "999.00"
        with pytest.raises(ForgedRecord, match="operator.s. = over pg_catalog's types"):
            fingerprints(session, "seen", COLUMNS, SCHEME, "day", KEYS)


def test_postgres_a_user_cast_of_its_own_type_to_text_hides_a_column_from_the_fingerprint(insider):
    """Insider (table owner). A column of a type the insider owns (a composite here; an enum works
    alike) takes `CAST(col AS TEXT)` in the fingerprint, and the owner of a type may
    `CREATE CAST (its_type AS text) WITH FUNCTION f`: f, not the type's output, then gives the
    value's text. With f ignoring the amount, two partitions storing different amounts (and a
    partition before and after its amount is changed) share one fingerprint; relation_kind says
    'table'."""
    import psycopg

    engine, url = insider
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE TYPE price AS (amount numeric, currency text)")
        con.execute("CREATE TABLE priced (day DATE, p price)")
        con.execute("INSERT INTO priced VALUES (DATE '2026-01-01', ROW(12.50, 'EUR')), "
                    "(DATE '2026-01-02', ROW(999.00, 'EUR'))")
        con.execute(f"GRANT SELECT ON priced TO {APP_ROLE}")
        con.execute("CREATE FUNCTION price_text(v price) RETURNS text LANGUAGE sql IMMUTABLE "
                    "AS $$ SELECT (v).currency $$")
        con.execute("CREATE CAST (price AS text) WITH FUNCTION price_text(price)")
    with engine.session() as session:
        assert session.scalar("SELECT count(DISTINCT (p).amount) FROM priced") == 2
        with pytest.raises(ForgedRecord, match="priced is a table with columns of types outside pg_catalog"):
            fingerprints(session, "priced", ["p"], SCHEME, "day", KEYS[:2])


def test_duckdb_a_macro_named_like_a_built_in_in_other_case_is_not_refused(tmp_path):
    """DuckDB keeps a macro's name as written (`SHA256`) but resolves calls case-insensitively:
    `sha256(...)` in the fingerprint calls the insider's `SHA256` macro. relation_kind compares the
    non-internal names with the built-in names case-sensitively, so 'SHA256' was not refused (found
    by an attack)."""
    engine = engine_for(f"duckdb:///{tmp_path / 'w.duckdb'}")
    with engine.session() as session:
        make_table(session)
        recorded = fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)
    with engine.session() as insider_session:
        insider_session.execute(TAMPER)
        insider_session.execute(
            "CREATE MACRO SHA256(x) AS system.main.sha256(CASE WHEN typeof(x) = 'BLOB' "
            "THEN CAST(x AS BLOB) ELSE encode(replace(CAST(x AS VARCHAR), '6:999.00', '5:12.50')) END)")
    try:
        with engine.session() as session:
            now = fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)
    except ForgedRecord:
        return  # refused (as the session opens): the hole is closed
    assert now["2026-01-01"] != recorded["2026-01-01"], \
        "macro SHA256 (other case) made different stored bytes give the recorded fingerprint"


def test_postgres_a_table_named_in_other_case_lies_about_a_column_type(insider):
    """PostgreSQL: table_columns matches `lower(c.relname) = lower(?)`, relation_kind and the
    statement resolve `"golden"` exactly. The insider's `"GOLDEN"` (CREATE on public, no function
    at all) declares `n` DOUBLE PRECISION at a later attnum, so the merged dict reports golden.n
    (BIGINT) as a float: the fingerprint then takes `float8send(CAST(n AS DOUBLE PRECISION))`, and
    9007199254740993 and 9007199254740992 (one double) gave one fingerprint (found by an attack)."""
    import psycopg

    engine, url = insider
    with psycopg.connect(url, autocommit=True) as con:
        con.execute('CREATE TABLE public."GOLDEN" (p1 int, p2 int, p3 int, p4 int, n double precision)')
    with engine.session() as session:
        assert engine.relation_kind(session, "golden") == "table"
        recorded = fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("UPDATE golden SET n = 9007199254740992 WHERE n = 9007199254740993")
    with engine.session() as session:
        assert session.scalar("SELECT count(*) FROM golden WHERE n = 9007199254740992") == 1
        now = fingerprints(session, "golden", COLUMNS, SCHEME, "day", KEYS)
    assert now["2026-01-01"] != recorded["2026-01-01"], \
        '"GOLDEN" made different stored bytes give the recorded fingerprint'


def test_postgres_a_user_eq_varchar_varchar_hides_a_partition_s_rows_from_the_fingerprint(insider):
    """PostgreSQL: an equality scheme's predicate is `t.region IN (?)` with a str parameter (type
    unknown, taken as the column's type). pg_catalog has no `=(varchar, varchar)` (varchar compares
    through text's), so the insider's `public.=(varchar, varchar)` is the exact match and is chosen.
    It answers false inside any statement that names sha256: partition 'eu' was recorded empty, a
    row is stored in it, every other statement reads it, and the fingerprint is still EMPTY.
    relation_kind said 'table' (found by an attack): such an operator is refused now."""
    import psycopg

    from backfill_assets.partitions import PartitionScheme
    from backfill_assets.warehouse.fingerprints import EMPTY

    scheme = PartitionScheme("equality", lambda k: (k, None), ("eu", "us"), "regional")
    engine, url = insider
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE TABLE regional (region VARCHAR(8), amount NUMERIC(18,2))")
        con.execute("INSERT INTO regional VALUES ('us', 1.00)")
        con.execute(f"GRANT SELECT ON regional TO {APP_ROLE}")
    with engine.session() as session:
        recorded = fingerprints(session, "regional", ["region", "amount"], scheme, "region", ["eu", "us"])
    assert recorded["eu"] == EMPTY
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("INSERT INTO regional VALUES ('eu', 999.00)")
        con.execute("CREATE FUNCTION public.vc_eq(l varchar, r varchar) RETURNS boolean LANGUAGE sql STABLE AS "
                    "$$ SELECT l::text OPERATOR(pg_catalog.=) r::text "
                    "AND pg_catalog.current_query() NOT LIKE '%sha256%' $$")
        con.execute("CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.vc_eq)")
    with engine.session() as session:
        assert session.scalar("SELECT count(*) FROM regional WHERE region IN (?)", ["eu"]) == 1
        try:
            now = fingerprints(session, "regional", ["region", "amount"], scheme, "region", ["eu", "us"])
        except ForgedRecord:
            return
    assert now["eu"] != recorded["eu"], "public.=(varchar, varchar) hid the stored row from the fingerprint"

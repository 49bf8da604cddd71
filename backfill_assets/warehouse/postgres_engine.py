"""PostgreSQL, the scale-out engine (psycopg 3): many writers at once, each partition in its own
transaction, serialised only where they must be.

- Locks: `lock(name)` is a transaction-scoped advisory lock (approvals of one plan, the run lease,
  writes of one partition, the evidence chain); a writer holds its plan's row `FOR SHARE` while it
  writes, so a withdraw or rollback (`FOR UPDATE`) waits for it or makes it refuse; publish holds
  the target in `SHARE` mode between its fingerprint check and its copy.
- SQL: the portable statements the seam sends use `?` and `$name` placeholders; they become
  psycopg's `%s` / `%(name)s` here, outside string literals, quoted identifiers and comments.

Fingerprints (documented per engine, defined in warehouse/fingerprints.py): a value's text is its
cast to `text` as PostgreSQL prints it under the ISO DateStyle psycopg needs anyway (numeric keeps
its scale, date is ISO, timestamp is `YYYY-MM-DD HH:MM:SS[.ffffff]`), except a float (the 16 hex
digits of `float8send`, every NaN as `NaN`: the cast depends on extra_float_digits, and below 1
rounds two doubles to one text) and a timestamptz (its UTC wall-clock time, whatever the session's
TimeZone). A row's digest is `sha256(convert_to(text, 'UTF8'))`, bytea, which sorts bytewise
under any collation; the partition's is the sha256 of their `string_agg`. For the same values this
equals DuckDB's fingerprint (tests/test_fingerprints.py pins both).
"""

from __future__ import annotations

import functools
import os
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from urllib.parse import urlsplit

from backfill_assets.errors import LockWaitTimeout, WarehouseError
from backfill_assets.identifiers import qualified, quote
from backfill_assets.warehouse import kept as kept_scope
from backfill_assets.warehouse import lock_wait
from backfill_assets.warehouse.engine import Engine, Params, Session, raise_no_chain_key, type_family
from backfill_assets.warehouse.postgres_operators import catalog_named, team
from backfill_assets.warehouse.postgres_spelling import PostgresSpelling

_TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/|\?|\$([A-Za-z_][A-Za-z0-9_]*)|%",
                    re.DOTALL)


def translate(sql: str) -> str:
    """For a statement with parameters: `?` -> `%s` and `$name` -> `%(name)s` outside literals and
    comments (`--` and `/* */`), and every `%` doubled, inside them too: psycopg reads `%` as a
    placeholder wherever it stands (`LIKE 'refund%'` would fail)."""
    def swap(match: re.Match[str]) -> str:
        token: str = match.group(0)
        if token == "?":
            return "%s"
        if token == "%":
            return "%%"
        if match.group(1):
            return f"%({match.group(1)})s"
        return token.replace("%", "%%")  # a literal or a comment
    return _TOKEN.sub(swap, sql)


_TEXT_TYPES = {"VARCHAR", "CHARACTER VARYING", "CHAR", "CHARACTER", "BPCHAR", "TEXT", "STRING", "NAME"}
_EXACT_TYPES = {"SMALLINT", "INTEGER", "INT", "INT2", "INT4", "INT8", "BIGINT", "DECIMAL", "NUMERIC",
                "HUGEINT", "TINYINT"}
_FLOAT_TYPES = {"REAL", "FLOAT", "FLOAT4", "FLOAT8", "DOUBLE", "DOUBLE PRECISION"}
_TIME_TYPES = {"DATE", "TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP WITHOUT TIME ZONE"}


def _comparison_type(declared: str) -> str:
    """The type two values of a key declared `declared` are compared in: wide enough for any
    member of its family, so no value is cut, rounded or refused on the way."""
    base = declared.split("(")[0].strip().upper()
    if base in _TEXT_TYPES:
        return "TEXT"
    if base in _EXACT_TYPES:
        return "NUMERIC"
    if base in _FLOAT_TYPES:
        return "DOUBLE PRECISION"
    if base in _TIME_TYPES:
        return "TIMESTAMPTZ"
    return base  # BOOLEAN, UUID, TIME, ...: the declared type without its length


class PostgresStatementError(WarehouseError):
    """A statement failed inside PostgreSQL; the first line of its message says why."""

    def __init__(self, exc: Exception) -> None:
        import psycopg

        self.original = exc
        self.sqlstate = getattr(exc, "sqlstate", None)
        # a session the server ended (an administrator, a restart) or a connection lost has no
        # SQLSTATE of its own, or one of class 08 / 57P0x
        lost = isinstance(exc, psycopg.OperationalError) and (
            self.sqlstate is None or self.sqlstate.startswith("08") or self.sqlstate in _ENDED)
        super().__init__(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                         fix=RETRY_FIX if self.sqlstate in RETRYABLE else
                         _FIXES.get(self.sqlstate or "") or (_ENDED_FIX if lost else None))

    @property
    def retryable(self) -> bool:
        # serialization failure, deadlock: the transaction can simply run again
        return self.sqlstate in RETRYABLE


RETRYABLE = ("40001", "40P01")  # serialization failure, deadlock
RETRY_FIX = ("another command held what this one needed and PostgreSQL ended this one's transaction, which "
             "committed nothing: run the command again")


# what the server's own limits end, said with what to do (the server's text alone said neither)
_FIXES = {
    "57014": ("PostgreSQL cancelled the statement (the database's or role's statement_timeout, or an "
              "administrator) and its transaction committed nothing: run the command again; if it keeps "
              "happening, give backfill's role a longer statement_timeout (ALTER ROLE ... SET "
              "statement_timeout = ...): a command waits for other commands' locks"),
    "55P03": ("another session held what this one needed longer than a lock_timeout (the database's, the role's, "
              "or the short one a sensor tick or a notice's delivery sets), and the transaction committed nothing: "
              "run the command again when it is done (`pg_stat_activity` shows who holds it)"),
    "25P03": ("PostgreSQL ended the session (idle_in_transaction_session_timeout) and its transaction "
              "committed nothing: run the command again; if it keeps happening, give backfill's role a "
              "longer idle_in_transaction_session_timeout"),
}


_ENDED = ("57P01", "57P02", "57P03")  # admin_shutdown (pg_terminate_backend), crash_shutdown, cannot_connect_now
_ENDED_FIX = ("PostgreSQL ended this command's session (an administrator's pg_terminate_backend, a server restart): "
              "the transaction it was in committed nothing, unless the session ended during its COMMIT; what the "
              "command committed before stands: `backfill status` says where the plan is, and the same command "
              "run again goes on from there")


def _statement_error(exc: Exception) -> PostgresStatementError:
    """A psycopg error as the one-line error a command reports."""
    if getattr(exc, "sqlstate", None) == LOCK_NOT_AVAILABLE:
        return PostgresLockWait(exc)
    return PostgresStatementError(exc)


@contextmanager
def _statement_errors() -> Iterator[None]:
    """psycopg's errors of the statements a session sends itself (BEGIN, its checks, its settings)
    as the one-line errors of the ones it is asked to run: the server ending the session between two
    transactions failed the next BEGIN with an `internal error: AdminShutdown` (found by an attack)."""
    import psycopg

    try:
        yield
    except psycopg.Error as exc:
        raise _statement_error(exc) from exc


class PostgresLockWait(PostgresStatementError, LockWaitTimeout):
    """A statement gave up waiting for a lock (`lock_timeout`, SQLSTATE 55P03): busy, not broken."""


LOCK_NOT_AVAILABLE = "55P03"


_EQ, _NE = "OPERATOR(pg_catalog.=)", "OPERATOR(pg_catalog.<>)"
_CATALOG = "'pg_catalog'::pg_catalog.regnamespace"
# What makes a plain table of the control schema answer each statement differently all the same
# (found by an attack): a column of a type of one's own (a domain with its own `=`, which then reads
# `current_query()`), or of a collation of one's own; a table inheriting from it (its rows join every
# read); a comparison operator of one's own over pg_catalog's types (`=(varchar, varchar)` is the
# exact match where pg_catalog has none, so it wins in every `kind = ?`); a function named like
# pg_catalog's over its types (below).
_ODD_FIX = ("drop or rename it: nothing of one's own may stand in for PostgreSQL's tables, types, operators or "
            "functions where backfill reads (a view of yours belongs in another schema, a function under another "
            "name); restore a replaced table from backup; `backfill evidence verify` then checks the record")
_PREPARE_FIX = ("find the function that runs PREPARE (`SELECT oid::regprocedure FROM pg_proc WHERE prosrc ILIKE "
                "'%prepare%'`) on the tables backfill writes or reads, and drop it or its trigger; then run the "
                "command again")
# the settings that change which table a name is, how a value prints (and so its fingerprint) or
# whether triggers and row security apply; with the role and the schemas the path resolves to, as
# one JSON array
_WATCHED_SETTINGS = ("search_path", "extra_float_digits", "DateStyle", "IntervalStyle", "TimeZone", "bytea_output",
                     "lc_monetary", "standard_conforming_strings", "session_replication_role", "row_security",
                     "transform_null_equals")
_SETTINGS_SQL = ("pg_catalog.json_build_array(CURRENT_USER::pg_catalog.text, " + ", ".join(
    f"pg_catalog.current_setting('{name}'::pg_catalog.text)" for name in _WATCHED_SETTINGS)
    + ", pg_catalog.current_schemas(false)::pg_catalog.text)::pg_catalog.text")
# the session's role and settings, and the first temporary relation or type of its own that is
# none of the product's (a write's staging table, `writes.STAGE_PREFIX`, its row type and array type)
# a comparison operator or a function or aggregate of one's own named like pg_catalog's over its
# types, which PostgreSQL picks over pg_catalog's in the product's SQL and the gates'
_NAMESAKES_SQL = (
    "SELECT 'the operator ' OPERATOR(pg_catalog.||) o.oid::pg_catalog.regoperator::pg_catalog.text "
    "FROM pg_catalog.pg_operator AS o JOIN pg_catalog.pg_type AS l ON l.oid "
    f"{_EQ} o.oprleft JOIN pg_catalog.pg_type AS r ON r.oid {_EQ} o.oprright WHERE o.oprnamespace {_NE} {_CATALOG} "
    f"AND l.typnamespace {_EQ} {_CATALOG} AND r.typnamespace {_EQ} {_CATALOG} AND o.oprname "
    "OPERATOR(pg_catalog.=) ANY ('{=,<>,<,>,<=,>=}'::pg_catalog.name[]) "
    # and a function or aggregate of one's own named like pg_catalog's over pg_catalog's types:
    # `count(varchar)` is an exact match where pg_catalog's `count("any")` is not, so it wins in the
    # product's SQL and the gates' (a withdraw passed over a plan's writes, a duplicates gate over a
    # doubled source: found by an attack)
    "UNION ALL SELECT 'the function ' OPERATOR(pg_catalog.||) f.pronamespace::pg_catalog.regnamespace::pg_catalog.text "
    "OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) f.proname::pg_catalog.text OPERATOR(pg_catalog.||) '(' "
    "OPERATOR(pg_catalog.||) pg_catalog.pg_get_function_identity_arguments(f.oid) OPERATOR(pg_catalog.||) ')' "
    # (the name looked up for each of the few functions outside pg_catalog: as an EXISTS, PostgreSQL
    # probed those with each of pg_catalog's ~2,600 names instead, 3 of the 4 ms of every check)
    f"FROM pg_catalog.pg_proc AS f WHERE f.pronamespace {_NE} {_CATALOG} "
    "AND f.pronargs OPERATOR(pg_catalog.>) 0::pg_catalog.int2 AND (SELECT 1 FROM pg_catalog.pg_proc AS g "
    f"WHERE g.pronamespace {_EQ} {_CATALOG} AND g.proname {_EQ} f.proname LIMIT 1) IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(f.proargtypes::pg_catalog.oid[]) AS x(t) "
    f"JOIN pg_catalog.pg_type AS y ON y.oid {_EQ} x.t WHERE y.typnamespace {_NE} {_CATALOG})")

_SESSION_STATE_SQL = (
    f"SELECT {_SETTINGS_SQL}, "
    "(SELECT x.what FROM (SELECT 'table ' OPERATOR(pg_catalog.||) c.relname::pg_catalog.text AS what, "
    "c.relname::pg_catalog.text AS named FROM pg_catalog.pg_class AS c WHERE c.relnamespace "
    "OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema() UNION ALL SELECT 'type ' OPERATOR(pg_catalog.||) "
    "t.typname::pg_catalog.text, pg_catalog.ltrim(t.typname::pg_catalog.text, '_'::pg_catalog.text) "
    "FROM pg_catalog.pg_type AS t WHERE t.typnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()) AS x "
    "WHERE NOT pg_catalog.starts_with(x.named, 'backfill_stage_'::pg_catalog.text) LIMIT 1), "
    # and a trigger or rule hung on a control table meanwhile (by a trigger of the target's, as
    # the product: `control_relations_plain` refuses them as a transaction begins)
    "(SELECT pg_catalog.count(*) FROM pg_catalog.pg_trigger AS t JOIN pg_catalog.pg_class AS c ON c.oid "
    "OPERATOR(pg_catalog.=) t.tgrelid WHERE c.relnamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace("
    "%s::pg_catalog.text) AND NOT t.tgisinternal) OPERATOR(pg_catalog.+) (SELECT pg_catalog.count(*) "
    "FROM pg_catalog.pg_rewrite AS r JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) r.ev_class "
    "WHERE c.relnamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace(%s::pg_catalog.text) "
    "AND r.rulename OPERATOR(pg_catalog.<>) '_RETURN'::pg_catalog.name), "
    # and a constraint trigger of one's own that can be deferred, on any table: code of the
    # target's run as the product can defer it again, each time deferred triggers are fired, so it
    # runs at COMMIT, after the proof (found by an attack: fired by `SET CONSTRAINTS ALL IMMEDIATE`,
    # a first one deferred all again and queued a second, which changed restored rows at COMMIT)
    "(SELECT t.tgname::pg_catalog.text OPERATOR(pg_catalog.||) ' on ' OPERATOR(pg_catalog.||) "
    "t.tgrelid::pg_catalog.regclass::pg_catalog.text FROM pg_catalog.pg_trigger AS t "
    "WHERE t.tgdeferrable AND NOT t.tgisinternal LIMIT 1), "
    # and a namesake made since the transaction began (`control_relations_plain` refuses one as it
    # begins): `count(bigint)` made while a run judged its slice answered the gates' SQL, and the
    # verdict it gave was sealed (found by an attack)
    # (where the control schema is, as that check: a bare warehouse's fingerprints name pg_catalog's)
    f"(SELECT x.what FROM ({_NAMESAKES_SQL}) AS x(what) WHERE pg_catalog.to_regnamespace(%s::pg_catalog.text) "
    "IS NOT NULL LIMIT 1), "
    # and a function, aggregate or operator made, changed or removed by this transaction itself (the
    # product makes none): a namesake made after the transaction's check whose final function
    # (SECURITY DEFINER) dropped it again inside the statement it answered left no namesake for a
    # check to find (found by an attack: the team's `count(DISTINCT customer_id)` wrote 0 customers)
    "(SELECT pg_catalog.sum(s.n_tup_ins OPERATOR(pg_catalog.+) s.n_tup_upd OPERATOR(pg_catalog.+) s.n_tup_del) "
    "FROM pg_catalog.pg_stat_xact_sys_tables AS s WHERE s.relid OPERATOR(pg_catalog.=) ANY (ARRAY["
    "'pg_catalog.pg_proc'::pg_catalog.regclass, 'pg_catalog.pg_aggregate'::pg_catalog.regclass, "
    "'pg_catalog.pg_operator'::pg_catalog.regclass]))")
_FUNCTION_FIX = ("find the function that runs CREATE, ALTER or DROP of a function, aggregate or operator (`SELECT "
                 "oid::regprocedure FROM pg_proc WHERE prosrc ~* 'function|aggregate|operator'`) and drop it; then "
                 "run the command again")
_SESSION_FIX = ("find the trigger, rule or constraint whose function runs CREATE TEMP, CREATE TRIGGER or RULE, "
                "set_config, SET ROLE or SET CONSTRAINTS on the tables backfill writes or reads (`SELECT "
                "oid::regprocedure FROM pg_proc WHERE prosrc ~* 'temp|trigger|rule|set_config|search_path|"
                "constraints|role'`), and drop it (and what it hung on backfill_control); then run the command again")
# statements of this session PREPAREd by SQL (none of the product's: psycopg prepares over the
# protocol), with the session's role and settings (what `PostgresSession.unaltered` compares later)
_FOREIGN_PREPARED_SQL = ("SELECT (SELECT pg_catalog.count(*) FROM pg_catalog.pg_prepared_statements WHERE from_sql), "
                         f"{_SETTINGS_SQL}")
# psycopg's `prepare_threshold`: it prepares a statement only when asked (`prepare=True`), never
# after its Nth execution (None would refuse to prepare even when asked)
PREPARED_ONLY_WHEN_ASKED = 1 << 62
# whether the evidence chain's table still has its primary key on seq (see `raise_no_chain_key`)
_CHAIN_KEY_SQL = (
    "SELECT pg_catalog.count(*) FROM pg_catalog.pg_constraint AS k JOIN pg_catalog.pg_class AS c "
    f"ON c.oid {_EQ} k.conrelid JOIN pg_catalog.pg_namespace AS n ON n.oid {_EQ} c.relnamespace "
    f"JOIN pg_catalog.pg_attribute AS a ON a.attrelid {_EQ} c.oid AND a.attnum {_EQ} k.conkey[1] "
    f"WHERE n.nspname {_EQ} %s::pg_catalog.text AND c.relname {_EQ} 'evidence'::pg_catalog.name "
    f"AND k.contype {_EQ} 'p'::pg_catalog.\"char\" AND pg_catalog.array_length(k.conkey, 1) {_EQ} "
    f"1::pg_catalog.int4 AND a.attname {_EQ} 'seq'::pg_catalog.name")

_ODD_CONTROL_SQL = (
    "SELECT 'the column ' OPERATOR(pg_catalog.||) c.relname OPERATOR(pg_catalog.||) '.' "
    "OPERATOR(pg_catalog.||) a.attname OPERATOR(pg_catalog.||) ' of type ' OPERATOR(pg_catalog.||) "
    "pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute AS a "
    f"JOIN pg_catalog.pg_class AS c ON c.oid {_EQ} a.attrelid JOIN pg_catalog.pg_namespace AS n "
    f"ON n.oid {_EQ} c.relnamespace JOIN pg_catalog.pg_type AS t ON t.oid {_EQ} a.atttypid "
    f"LEFT JOIN pg_catalog.pg_collation AS k ON k.oid {_EQ} a.attcollation "
    f"WHERE n.nspname {_EQ} %s::pg_catalog.text AND a.attnum OPERATOR(pg_catalog.>) 0::pg_catalog.int2 "
    f"AND NOT a.attisdropped AND (t.typnamespace {_NE} {_CATALOG} OR t.typtype {_NE} 'b'::pg_catalog.\"char\" "
    f"OR (k.oid IS NOT NULL AND k.collnamespace {_NE} {_CATALOG})) "
    "UNION ALL SELECT 'the table ' OPERATOR(pg_catalog.||) i.inhrelid::pg_catalog.regclass::pg_catalog.text "
    "OPERATOR(pg_catalog.||) ', which inherits from it' FROM pg_catalog.pg_inherits AS i "
    f"JOIN pg_catalog.pg_class AS p ON p.oid {_EQ} i.inhparent JOIN pg_catalog.pg_namespace AS n "
    f"ON n.oid {_EQ} p.relnamespace WHERE n.nspname {_EQ} %s::pg_catalog.text "
    "UNION ALL " + _NAMESAKES_SQL)

# the type names PostgreSQL gives the control schema's column types (`pg_catalog.format_type`)
_PG_TYPE = {"BIGINT": "bigint", "INTEGER": "integer", "VARCHAR": "character varying", "BOOLEAN": "boolean",
            "DOUBLE": "double precision"}


@functools.cache
def _odd_control_sql() -> str:
    """`_ODD_CONTROL_SQL` and a control column of another type than the schema makes it with, each
    a pg_catalog type all the same (`evidence_seq` as text sorts '0123' after '99': an older gate
    result read as the latest while its seal verified; found by an attack on DuckDB)."""
    from backfill_assets.warehouse.state_store.schema import column_types

    made = ", ".join(f"('{table}'::pg_catalog.text, '{column}'::pg_catalog.text, '{_PG_TYPE[kind]}'::pg_catalog.text)"
                     for (table, column), kind in sorted(column_types().items()))
    other = (
        " UNION ALL SELECT 'the column ' OPERATOR(pg_catalog.||) c.relname OPERATOR(pg_catalog.||) '.' "
        "OPERATOR(pg_catalog.||) a.attname OPERATOR(pg_catalog.||) ' of type ' OPERATOR(pg_catalog.||) "
        "pg_catalog.format_type(a.atttypid, a.atttypmod) OPERATOR(pg_catalog.||) ', made ' OPERATOR(pg_catalog.||) e.t "
        f"FROM pg_catalog.pg_attribute AS a JOIN pg_catalog.pg_class AS c ON c.oid {_EQ} a.attrelid "
        f"JOIN pg_catalog.pg_namespace AS n ON n.oid {_EQ} c.relnamespace JOIN (VALUES {made}) AS e(r, k, t) "
        f"ON e.r {_EQ} c.relname::pg_catalog.text AND e.k {_EQ} a.attname::pg_catalog.text "
        f"WHERE n.nspname {_EQ} %s::pg_catalog.text AND a.attnum OPERATOR(pg_catalog.>) 0::pg_catalog.int2 "
        f"AND NOT a.attisdropped AND pg_catalog.format_type(a.atttypid, a.atttypmod) {_NE} e.t")
    # and code hung on a control table (a trigger, a rule) runs in backfill's transactions after
    # what they proved, before they commit: a write of the record could change the target again
    code = (
        " UNION ALL SELECT 'the trigger ' OPERATOR(pg_catalog.||) t.tgname::pg_catalog.text OPERATOR(pg_catalog.||) "
        "' on ' OPERATOR(pg_catalog.||) c.relname::pg_catalog.text FROM pg_catalog.pg_trigger AS t "
        f"JOIN pg_catalog.pg_class AS c ON c.oid {_EQ} t.tgrelid JOIN pg_catalog.pg_namespace AS n "
        f"ON n.oid {_EQ} c.relnamespace WHERE n.nspname {_EQ} %s::pg_catalog.text AND NOT t.tgisinternal"
        " UNION ALL SELECT 'the rule ' OPERATOR(pg_catalog.||) r.rulename::pg_catalog.text OPERATOR(pg_catalog.||) "
        "' on ' OPERATOR(pg_catalog.||) c.relname::pg_catalog.text FROM pg_catalog.pg_rewrite AS r "
        f"JOIN pg_catalog.pg_class AS c ON c.oid {_EQ} r.ev_class JOIN pg_catalog.pg_namespace AS n "
        f"ON n.oid {_EQ} c.relnamespace WHERE n.nspname {_EQ} %s::pg_catalog.text "
        f"AND r.rulename {_NE} '_RETURN'::pg_catalog.name")
    return _ODD_CONTROL_SQL + other + code + " LIMIT 1"


# one schema of a `search_path` setting's text: a quoted name (`""` inside), or an unquoted one
_PATH_ITEM = re.compile(r'\s*("(?:[^"]|"")*"|[^,\s][^,]*?)\s*(?:,|$)')


def _catalog_first(con: Any, settings: str) -> bool:
    """pg_catalog searched first for functions, operators and types, as PostgreSQL searches it when
    the path leaves it out; True when the path had to change. Listed after another schema (`public,
    pg_catalog`, in a role's setting or a URL's options), a function of that schema named like one of
    pg_catalog's with the same arguments wins their tie: `public.count(*)`, which no check of
    namesakes over pg_catalog's types sees, answered the product's `count(*)` (found by an attack).
    pg_catalog is taken off the path rather than put first: the first schema listed is where an
    unqualified CREATE TABLE goes, and the others keep their order, so every table name resolves
    and is created as before."""
    import json

    path = str(json.loads(settings)[1])
    items = [m.group(1) for m in _PATH_ITEM.finditer(path)]
    kept = [i for i in items if (i[1:-1].replace('""', '"') if i.startswith('"') else i.lower()) != "pg_catalog"]
    if len(kept) == len(items):
        return False
    with _statement_errors():
        con.execute("SELECT pg_catalog.set_config('search_path'::pg_catalog.text, %s::pg_catalog.text, false)",
                    [", ".join(kept)], prepare=False)
    return True


class PostgresSession(Session):
    runs_table_code = True

    def __init__(self, engine: PostgresEngine, con: Any) -> None:
        super().__init__(engine)
        self.con = con
        self._opened_as: str | None = None  # the role and `_WATCHED_SETTINGS` as the session opened

    def _cursor_run(self, sql: str, params: Params, fetch: bool) -> list[tuple[Any, ...]]:
        import psycopg

        try:
            with self.con.cursor() as cur:
                bound = params if isinstance(params, dict) else (list(params) or None)
                # each operator and function named with pg_catalog (`catalog_named`); without
                # parameters psycopg sends the text as it is: `%` stays single
                sql = catalog_named(sql)
                cur.execute(translate(sql) if bound else sql, bound)
                return cur.fetchall() if fetch and cur.description is not None else []
        except psycopg.Error as exc:
            raise _statement_error(exc) from exc

    def execute(self, sql: str, params: Params = ()) -> None:
        self._cursor_run(sql, params, False)

    def rows(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        return self._cursor_run(sql, params, True)

    def _begin(self) -> None:
        with _statement_errors():
            self._begin_checked()

    def _begin_checked(self) -> None:
        self.con.execute("BEGIN")
        # a constraint trigger the table's owner declared DEFERRABLE INITIALLY DEFERRED would fire
        # at COMMIT, after every check this transaction made (a rollback's restored fingerprints,
        # a write's judged ones): it changed a restored partition after its proof (found by an
        # attack). Immediate here, it fires at its statement's end, before the checks that follow.
        self.con.execute("SET CONSTRAINTS ALL IMMEDIATE")
        try:
            self.control_relations_plain(lock=True)
        except BaseException:
            self._rollback()  # never left inside a transaction the caller did not get to start
            raise

    def control_relations_plain(self, lock: bool) -> None:
        """Every relation of the control schema a plain table (or its index or sequence), without row
        security; checked as a session opens, and in a transaction locked until it ends. A view (or
        a policy) can answer each statement differently, through `current_query()`: the statement a
        decision read rows with saw a record without the cancel or the re-pin, the statements that
        checked the record saw all of it, and `evidence verify` passed (found by an attack). Locked
        first, then checked: a rename or a swap for a view waits until the transaction ends."""
        from backfill_assets.warehouse.state_store import SCHEMA

        # The check's statements are the only ones prepared (planned again only after psycopg
        # forgets them, at a ROLLBACK, DROP or ALTER; ~2 of the check's ~3 ms on a kept
        # connection), and only while no statement of this session was prepared by SQL: a trigger or a
        # function of the insider's, run by a write of ours, can DEALLOCATE one of ours and PREPARE
        # its own under the name, answering no view where there is one (found by an attack).
        # Prepared over the protocol, ours are never `from_sql`; every other statement is sent
        # unprepared (`PREPARED_ONLY_WHEN_ASKED`), so there is nothing else to replace.
        foreign, settings = self.con.execute(_FOREIGN_PREPARED_SQL, prepare=False).fetchone()
        if self._opened_as is None:  # as the session opens, before any statement that runs others' code
            if _catalog_first(self.con, settings):
                foreign, settings = self.con.execute(_FOREIGN_PREPARED_SQL, prepare=False).fetchone()
            self._opened_as = settings
        if foreign:
            from backfill_assets.errors import ForgedRecord

            raise ForgedRecord("a statement was prepared by SQL in this warehouse session: a trigger or function run "
                               "by one of its writes (of a table's owner) can put its own statement under the name "
                               "of one of backfill's, and answer its checks otherwise", fix=_PREPARE_FIX)
        relations = ("SELECT c.relname, c.relkind, c.relrowsecurity FROM pg_catalog.pg_class AS c JOIN "
                     "pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace "
                     "WHERE n.nspname OPERATOR(pg_catalog.=) %s::pg_catalog.text AND c.relkind "
                     "OPERATOR(pg_catalog.<>) ALL (ARRAY['i', 'I', 'S', 'c']::pg_catalog.\"char\"[])")
        found = self.con.execute(relations, [SCHEMA], prepare=True).fetchall()
        if found and lock:
            from psycopg import sql

            self.con.execute(sql.SQL("LOCK TABLE {} IN ACCESS SHARE MODE").format(
                sql.SQL(", ").join(sql.Identifier(SCHEMA, r[0]) for r in found)), prepare=False)
            found = self.con.execute(relations, [SCHEMA], prepare=True).fetchall()
        bad = [r for r in found if r[1] != "r" or r[2]]
        if any(r[0] == "evidence" for r in found) and not bad and \
                not self.con.execute(_CHAIN_KEY_SQL, [SCHEMA], prepare=True).fetchone()[0]:
            raise_no_chain_key(SCHEMA)
        if found and not bad:
            odd = self.con.execute(_odd_control_sql(), [SCHEMA] * 5, prepare=True).fetchall()
            if odd:
                from backfill_assets.errors import ForgedRecord

                if str(odd[0][0]).startswith(("the trigger ", "the rule ")):
                    raise ForgedRecord(f"{SCHEMA} has {odd[0][0]}: code of its own runs in backfill's transactions "
                                       "after what they proved, and can change it before they commit",
                                       fix=f"drop it (`DROP TRIGGER` / `DROP RULE`); nothing may hang on {SCHEMA}'s "
                                           "tables; `backfill evidence verify` then checks the record")

                if str(odd[0][0]).startswith("the column ") and ", made " in str(odd[0][0]):
                    raise ForgedRecord(f"{SCHEMA} holds {odd[0][0]}: it can answer a statement otherwise than the "
                                       "record was written", fix="restore the table from backup (or the column's "
                                                                 "type); `backfill evidence verify` then checks the "
                                                                 "record")
                raise ForgedRecord(f"the warehouse would read {SCHEMA} and the gates' tables through {odd[0][0]}, "
                                   "not PostgreSQL's own: it can answer each statement differently", fix=_ODD_FIX)
        if bad:
            name, kind, secured = bad[0]
            what = "has row security" if secured else {"v": "is a view", "m": "is a materialized view",
                                                       "p": "is a partitioned table", "f": "is a foreign table"
                                                       }.get(str(kind), f"is a relation of kind {kind!r}")
            from backfill_assets.errors import ForgedRecord

            raise ForgedRecord(f"{SCHEMA}.{name} {what}, not a plain table: it can answer each statement "
                               "differently", fix=_ODD_FIX)

    def unaltered(self) -> None:
        """Nothing run inside this session changed what its statements mean since it opened: code of
        a table's owner (a trigger, a CHECK's function) runs as the product and may create a
        temporary table or type (searched first: the next `INSERT INTO "daily_revenue"`, and the
        proof that read it back, went to its temporary copy, and a rollback proved a restore that
        left the table empty), change `search_path` or a setting for the session, make the schema
        `"$user"` names, hang code on a control table, or defer constraint triggers again (`SET
        CONSTRAINTS ALL DEFERRED`: a deferred trigger changed a rollback's rows at COMMIT, after its
        proof; all found by attacks), so no deferrable constraint trigger of one's own may exist. In a
        transaction, deferred triggers pending fire first, so what follows reads their doing."""
        from backfill_assets.warehouse.state_store import SCHEMA

        with _statement_errors():
            if self.in_transaction:
                self.con.execute("SET CONSTRAINTS ALL IMMEDIATE", prepare=False)
            found = self.con.execute(_SESSION_STATE_SQL, [SCHEMA, SCHEMA, SCHEMA], prepare=False).fetchone()
        problem = None
        if found[5]:
            from backfill_assets.errors import ForgedRecord

            raise ForgedRecord("code run inside this warehouse session made, changed or removed a function, aggregate "
                               "or operator, which may have answered its statements in PostgreSQL's stead: nothing "
                               "it did is committed", fix=_FUNCTION_FIX)
        if found[4]:
            from backfill_assets.errors import ForgedRecord

            raise ForgedRecord(f"the warehouse would read {SCHEMA} and the gates' tables through {found[4]}, made "
                               "while this warehouse session worked, not PostgreSQL's own: nothing it did is "
                               "committed", fix=_ODD_FIX)
        if found[3]:
            from backfill_assets.errors import ForgedRecord

            raise ForgedRecord(f"the database holds the deferrable constraint trigger {found[3]}: code run inside "
                               "backfill's transactions can defer it past what they proved, to their commit",
                               fix="drop it, or create it again NOT DEFERRABLE (`CREATE CONSTRAINT TRIGGER ... "
                                   "NOT DEFERRABLE`)")
        if found[2]:
            problem = f"a trigger or rule was hung on a table of {SCHEMA}"
        elif found[1]:
            problem = f"a temporary {found[1]} appeared in it, which its statements would read for the table or type"
        elif found[0] != self._opened_as:
            import json

            was, now = json.loads(self._opened_as or "[]"), json.loads(found[0])
            changed = [(name, a, b) for name, a, b in zip(("role", *_WATCHED_SETTINGS, "schemas on the search path"),
                                                          was, now, strict=False)
                       if a != b] or [("settings", was, now)]
            problem = f"its {changed[0][0]} changed from {changed[0][1]!r} to {changed[0][2]!r}"
        if problem:
            from backfill_assets.errors import ForgedRecord

            raise ForgedRecord(f"code run inside this warehouse session changed it: {problem}; nothing it did "
                               "is committed", fix=_SESSION_FIX)

    def _commit(self) -> None:
        self.unaltered()
        self.execute("COMMIT")  # a failed commit is a statement error, one line

    def _rollback(self) -> None:
        import psycopg

        try:
            self.con.execute("ROLLBACK")
        except psycopg.Error:
            pass

    def lock(self, name: str) -> None:
        # named with pg_catalog as every call of ours is (no function of the database's own may answer it)
        self.execute("SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(CAST(? AS pg_catalog.text), "
                     "CAST(0 AS pg_catalog.int8)))", [name])

    def hold_table(self, table: str, *, writing: bool = False) -> None:
        from backfill_assets.identifiers import quote

        self.execute(f"LOCK TABLE {quote(table)} IN {'ROW EXCLUSIVE' if writing else 'SHARE'} MODE")

    def lock_rows_clause(self, exclusive: bool = False) -> str:
        return " FOR UPDATE" if exclusive else " FOR SHARE"


class _Kept(kept_scope.Kept):
    """Connections kept open between the sessions of a command (`kept_open`), each idle: a new
    connection's server process starts with empty catalog caches, and a session with one
    transaction, its checks included, took ~14 ms on one and ~4 ms on a kept one
    (benchmarks/pg_sessions.py). Each session still runs every check."""

    def __init__(self) -> None:
        super().__init__()
        self.idle: list[tuple[int, str, Any]] = []  # (the process that opened it, its URL, it)

    def take_all(self) -> list[Any]:
        pid = os.getpid()
        taken = [con for owner, _url, con in self.idle if owner == pid]
        self.idle.clear()
        return taken


_kept = _Kept()
# what `DISCARD ALL` does but for its `DEALLOCATE ALL`, which psycopg notices only the first time
# a connection sends that text: the next session's statement it had prepared again failed
# ("prepared statement _pg3_0 does not exist").
# The control check's prepared statements stay (`control_relations_plain`), and PostgreSQL plans
# them again when a table they read changes.
_RESET = ("CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; "
          "SELECT pg_catalog.pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES")
KEPT_IDLE = 2  # idle connections kept a process: sessions nest at most two deep


def _kept_connection(url: str) -> Any | None:
    pid = os.getpid()
    with _kept.lock:
        if not _kept.keeping:
            return None
        for i in range(len(_kept.idle) - 1, -1, -1):
            owner, kept_url, con = _kept.idle[i]
            if owner == pid and kept_url == url:
                del _kept.idle[i]
                return con
    return None


def _keep_or_close(url: str, con: Any) -> None:
    """The session's connection kept for the next session when `kept_open` lasts and it is idle,
    reset to a new connection's state first (`_RESET`); closed otherwise."""
    import psycopg
    from psycopg.pq import TransactionStatus

    pid = os.getpid()

    def room() -> bool:
        return _kept.keeping and sum(1 for owner, _u, _c in _kept.idle if owner == pid) < KEPT_IDLE

    with _kept.lock:
        wanted = room()
    if wanted and not con.closed and not con.broken and con.info.transaction_status is TransactionStatus.IDLE:
        try:
            con.execute(_RESET)
        except psycopg.Error:
            pass
        except BaseException:  # an interrupt while resetting: the connection is never left open
            con.close()
            raise
        else:
            with _kept.lock:
                if room():
                    _kept.idle.append((pid, url, con))
                    return
    con.close()


def release_kept() -> None:
    """Close the kept connections now, and keep none until the outermost `kept_open` ends."""
    kept_scope.release(_kept)


def kept_open() -> AbstractContextManager[None]:
    """While this lasts, a session's end keeps its connection for the next session of this
    process (`_Kept`). Nested uses end with the outermost."""
    return kept_scope.scope(_kept)


class PostgresEngine(PostgresSpelling, Engine):
    name = "postgresql"
    wide_int = "NUMERIC(38,0)"

    def __init__(self, url: str) -> None:
        self.url = url

    def describe(self) -> str:
        parts = urlsplit(self.url)
        return f"postgresql://{parts.hostname}:{parts.port or 5432}{parts.path}"

    def exists(self) -> bool:
        # a server that cannot be reached is not "no warehouse here": its error names the URL
        with self.session(wait_seconds=5.0):
            return True

    @contextmanager
    def session(self, *, read_only: bool = False, wait_seconds: float | None = None) -> Iterator[PostgresSession]:
        import psycopg

        waiting = lock_wait.Wait(self.describe(), lock_wait.seconds(wait_seconds))
        con = _kept_connection(self.url)
        if con is not None:
            try:
                con.execute("SELECT 1")  # its server process may have ended meanwhile (a restart)
            except psycopg.Error:
                con.close()
                con = None
            except BaseException:
                con.close()
                raise
        while con is None:
            try:
                con = psycopg.connect(self.url, autocommit=True, connect_timeout=10,
                                      application_name="backfill-assets", prepare_threshold=PREPARED_ONLY_WHEN_ASKED)
            except psycopg.Error as exc:  # OperationalError, or ProgrammingError for a malformed URL
                text = str(exc).strip().splitlines()[0] if str(exc).strip() else "cannot connect"
                if not isinstance(exc, psycopg.OperationalError) or (
                        "too many clients" not in text and "starting up" not in text):
                    raise WarehouseError(f"cannot connect to {self.describe()}: {text}",
                                         fix="check BACKFILL_WAREHOUSE_URL and that the server runs") from None
                waiting.still_waiting(self.describe())
                time.sleep(0.2)
        try:
            # a float's text (inside an array or a row value too, where fingerprints take the cast)
            # is exact only with extra_float_digits >= 1; a database or role setting of 0 or less
            # would print two different doubles alike, and so give two different rows one fingerprint
            with _statement_errors():
                con.execute("SET extra_float_digits = 1")
                if read_only:
                    con.execute("SET default_transaction_read_only = on")
                if wait_seconds is not None:  # a caller that must stay short (a sensor tick, the relay)
                    con.execute(f"SET lock_timeout = {max(1, int(wait_seconds * 1000))}")
                session = PostgresSession(self, con)
                session.control_relations_plain(lock=False)  # and what it opened as (`unaltered`)
            yield session
        except BaseException:
            con.close()
            raise
        else:
            _keep_or_close(self.url, con)

    # --- dialect --------------------------------------------------------------------------------
    def team_sql(self, sql: str) -> str:
        # marked so that `catalog_named`, which names each operator and function of the product's
        # own statements with pg_catalog, leaves it as the team wrote it
        return team(sql)

    def builtin(self, name: str) -> str:
        # a function of one's own named like pg_catalog's is the better match for a bare call where
        # pg_catalog's takes "any" or another type (`count(bigint)` over `count("any")`), and one made
        # after a transaction's check that drops itself inside the statement it answers is gone by the
        # next check: the gates' `count(DISTINCT order_id)` sealed a doubled source as clean (found by
        # an attack). Named with its schema, only pg_catalog's is ever called.
        return f"pg_catalog.{name}"

    def text_of(self, expr: str) -> str:
        return f"CAST({expr} AS TEXT)"

    def value_text_sql(self, expr: str, column_type: str) -> str:
        family = type_family(column_type)
        if family == "float":
            double = f"CAST({expr} AS DOUBLE PRECISION)"  # real widens exactly
            return (f"CASE WHEN {double} OPERATOR(pg_catalog.=) 'NaN'::pg_catalog.float8 THEN 'NaN' "
                    f"ELSE pg_catalog.encode(pg_catalog.float8send({double}), 'hex'::pg_catalog.text) END")
        if family == "timestamptz":
            return self.text_of(f"{expr} AT TIME ZONE 'UTC'")
        return self.text_of(expr)

    def row_digest_sql(self, text_sql: str) -> str:
        # named with their schema, the literal typed: `public.convert_to(text, text)` beat
        # pg_catalog's (text, name) for an untyped 'UTF8' (found by an attack)
        return f"pg_catalog.sha256(pg_catalog.convert_to({text_sql}, 'UTF8'::pg_catalog.name))"

    def digest_of_rows_sql(self, row_digest: str) -> str:
        # bytea compares bytewise, never by the database's collation
        return (f"pg_catalog.encode(pg_catalog.sha256(coalesce(pg_catalog.string_agg({row_digest}, "
                f"''::pg_catalog.bytea ORDER BY {row_digest}), ''::pg_catalog.bytea)), 'hex'::pg_catalog.text)")

    def same_key_sql(self, left: str, right: str, declared: str) -> str:
        # IS NOT DISTINCT FROM is neither hashable nor mergeable in PostgreSQL: a join on it
        # compares each key of a partition with every other (8.8 s instead of 0.18 s for 3 x 7,000
        # keys, benchmarks/key_match.py). One-element arrays compare NULL equal to NULL and hash-
        # and merge-join, but only arrays of one type: both sides go to the lossless type of the
        # declared key's family (VARCHAR(3) against TEXT as TEXT, INTEGER against BIGINT or
        # NUMERIC(10,3) as NUMERIC, DATE against TIMESTAMP as TIMESTAMPTZ, as PostgreSQL itself
        # compares them), never to the declared type itself, which would truncate or round.
        kind = _comparison_type(declared)
        # pg_catalog's `=`, by name: `=(text[], text[])` of one's own is the exact match where
        # pg_catalog's takes anyarray, and paired key groups crosswise (found by an attack)
        return f"ARRAY[CAST({left} AS {kind})] {_EQ} ARRAY[CAST({right} AS {kind})]"

    def transient_row_hash_sql(self, columns: Sequence[str], alias: str = "",
                               types: Sequence[str] | None = None) -> str:  # noqa: ARG002 - text tells bytes apart
        from backfill_assets.identifiers import quote

        prefix = f"{alias}." if alias else ""
        # of the row's text: hash_record_extended has no hash for JSON, XML, POINT or MONEY columns
        row = ", ".join(prefix + quote(c) for c in columns)
        return f"pg_catalog.hashtextextended(CAST(ROW({row}) AS pg_catalog.text), CAST(0 AS pg_catalog.int8))"

    def hash_int_sql(self, exprs: Sequence[str]) -> str:
        return (f"(pg_catalog.hashtextextended(pg_catalog.concat_ws(CAST(',' AS pg_catalog.text), {', '.join(exprs)}), "
                "CAST(0 AS pg_catalog.int8)) OPERATOR(pg_catalog.&) CAST(9223372036854775807 AS pg_catalog.int8))")

    def temp_table_name(self, prefix: str) -> str:
        return f"pg_temp.{prefix}_{uuid.uuid4().hex[:16]}"  # the session's own temporary schema

    def table_exists(self, session: Session, table: str, schema: str | None = None) -> bool:
        # resolved as the statements' `FROM "table"` resolves it (search path, case, and a name over
        # 63 bytes cut as PostgreSQL cuts it in every statement): asked of information_schema with
        # the whole name, an adopted table with a long name held no rows, and its history was written
        # without a plan
        return bool(session.scalar(
            "SELECT pg_catalog.count(*) FROM pg_catalog.pg_class AS c WHERE c.oid OPERATOR(pg_catalog.=) "
            "pg_catalog.to_regclass(?::pg_catalog.text) AND c.relkind OPERATOR(pg_catalog.=) "
            "ANY ('{r,p,v,m,f}'::pg_catalog.\"char\"[])",
            [qualified(schema, table) if schema else quote(table)]))

    def relation_kind(self, session: Session, table: str, schema: str | None = None) -> str | None:
        # the relation the statements' `FROM "table"` reads, resolved as they resolve it (search
        # path, case): never another whose name differs only in case
        # every function, operator and type named with its schema and every literal typed: a
        # function or operator of the insider's own wins over pg_catalog's where its argument types
        # match better (found by an attack); and a column of a type of their own is cast to text by
        # a cast they may define, so it is no plain table's either
        if isinstance(session, PostgresSession):  # before any bytes are read (`PostgresSession.unaltered`)
            session.unaltered()
        eq, gt = "OPERATOR(pg_catalog.=)", "OPERATOR(pg_catalog.>)"
        columns = (f"FROM pg_catalog.pg_attribute AS a WHERE a.attrelid {eq} c.oid AND a.attnum {gt} "
                   "0::pg_catalog.int2 AND NOT a.attisdropped")
        # and an operator of theirs over pg_catalog's types (`=(varchar, varchar)`) is the exact
        # match where pg_catalog has none, in every predicate that picks a partition's rows
        shadowing = session.rows(
            "SELECT o.oprname FROM pg_catalog.pg_operator AS o JOIN pg_catalog.pg_type AS l "
            f"ON l.oid {eq} o.oprleft JOIN pg_catalog.pg_type AS r ON r.oid {eq} o.oprright "
            "WHERE o.oprnamespace OPERATOR(pg_catalog.<>) 'pg_catalog'::pg_catalog.regnamespace "
            f"AND l.typnamespace {eq} 'pg_catalog'::pg_catalog.regnamespace "
            f"AND r.typnamespace {eq} 'pg_catalog'::pg_catalog.regnamespace LIMIT 3")
        if shadowing:
            return (f"table in a database whose operator(s) {', '.join(str(r[0]) for r in shadowing)} over "
                    "pg_catalog's types are not pg_catalog's")
        if not schema and session.scalar(
                "SELECT pg_catalog.count(*) FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n "
                f"ON n.oid {eq} c.relnamespace WHERE c.relname {eq} ?::pg_catalog.name AND n.nspname "
                f"{eq} ANY (pg_catalog.current_schemas(true)) AND c.relkind {eq} ANY "
                "(ARRAY['r', 'p', 'v', 'm', 'f']::pg_catalog.\"char\"[])", [table]) > 1:
            # a copy made in a schema earlier on the path (one the product may create in, made by
            # code run as it: found by an attack) would take the statements' reads and writes
            return "table whose name two schemas of the search path hold"
        found = session.rows(
            f"SELECT c.relkind, c.relrowsecurity, EXISTS (SELECT 1 {columns} AND a.attgenerated {eq} "
            "'v'::pg_catalog.\"char\"), EXISTS (SELECT 1 FROM pg_catalog.pg_type AS t WHERE t.oid IN "
            f"(SELECT a.atttypid {columns}) AND t.typnamespace OPERATOR(pg_catalog.<>) "
            "'pg_catalog'::pg_catalog.regnamespace), "
            # a collation of one's own may be nondeterministic (ICU's case-insensitive `und-u-ks-level2`):
            # every comparison, join and hash of the column honours it, while the bytes and their
            # fingerprint do not change (NOCASE hid an undeclared key change from changes_as_expected
            # on DuckDB: found by an attack); pg_catalog's are all deterministic
            "EXISTS (SELECT 1 FROM pg_catalog.pg_collation AS k WHERE k.oid IN "
            f"(SELECT a.attcollation {columns}) AND k.collnamespace OPERATOR(pg_catalog.<>) "
            "'pg_catalog'::pg_catalog.regnamespace) "
            f"FROM pg_catalog.pg_class AS c WHERE c.oid {eq} pg_catalog.to_regclass(?::pg_catalog.text)",
            [qualified(schema, table) if schema else quote(table)])
        if not found:
            return None
        kind, row_security, computed, own_types, own_collations = found[0]
        if kind in ("r", "p"):
            return "table under row security" if row_security else \
                "table with computed columns" if computed else \
                "table with columns of types outside pg_catalog" if own_types else \
                "table with a collated column (a collation outside pg_catalog)" if own_collations else "table"
        return {"v": "view", "m": "materialized view", "f": "foreign table"}.get(str(kind), f"relation of kind {kind}")

    def table_columns(self, session: Session, table: str, schema: str | None = None) -> dict[str, str]:
        # the relation the statements' `FROM "table"` reads, resolved as relation_kind resolves it:
        # never the columns of another whose name differs only in case (found by an attack)
        rows = session.rows(
            "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute AS a "
            "WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(?::pg_catalog.text) "
            "AND a.attnum OPERATOR(pg_catalog.>) 0::pg_catalog.int2 AND NOT a.attisdropped ORDER BY a.attnum",
            [qualified(schema, table) if schema else quote(table)])
        # keyed by the lower-case name the callers look a column up by; PostgreSQL keeps "Net_Revenue"
        # and net_revenue apart, and folded to one key the other went unseen: an insider's column
        # beside the contract's was no unexpected column of the published table (found by an attack).
        # A name another column's folds to keeps its own spelling, so it shows as a column of its own
        names = [str(name) for name, _ in rows]
        folded = [n.lower() for n in names]
        keys = [f if n == f or (f not in names and folded.index(f) == i) else n
                for i, (n, f) in enumerate(zip(names, folded, strict=True))]
        return {key: str(kind).upper() for key, (_, kind) in zip(keys, rows, strict=True)}

    def canonical_types(self, session: Session, types: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for declared in dict.fromkeys(types):
            # types passed Column's plain-type pattern, so naming them in a cast is safe; a
            # savepoint keeps an unknown name from aborting the caller's transaction
            inside = session.in_transaction
            if inside:
                session.execute("SAVEPOINT backfill_type")
            try:
                # named with their schema, the literal typed: `public.format_type(regtype, integer)`,
                # made while publish waited for its turn (after its transaction's check of the
                # database's functions), beat pg_catalog's `(oid, integer)` and called DECIMAL
                # 'character varying', so a VARCHAR published column passed (found by an attack)
                base = str(session.scalar(
                    "SELECT pg_catalog.format_type(CAST(pg_catalog.pg_typeof(CAST(NULL AS "
                    f"{declared})) AS pg_catalog.regtype), CAST(NULL AS pg_catalog.int4))")).upper()
                match = re.search(r"\(\s*\d+(\s*,\s*\d+)?\s*\)", declared)
                out[declared] = base + (match.group(0).replace(" ", "") if match and "(" not in base else "")
            except WarehouseError:
                if inside:
                    session.execute("ROLLBACK TO SAVEPOINT backfill_type")
                out[declared] = declared.upper()
            else:
                if inside:
                    session.execute("RELEASE SAVEPOINT backfill_type")
        return out

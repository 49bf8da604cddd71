"""The warehouse seam: the one small interface every engine implements.

Plan, gate, publish and evidence logic never speak a dialect: they call functions of warehouse/
(the control record's statements are the state store's, `warehouse/state_store/`), which send
portable SQL through a `Session` (`?` placeholders, standard joins, window functions) and ask the
`Engine` for the few pieces that differ: how to connect and lock, the type of a wide integer, the
canonical text of a value and the sha256 digests a fingerprint is made of, the catalog's view of a
table, how to bind a table's `$partition` parameters, and the constructs SQL spells differently
per engine (sequences, upserts, RETURNING, a bound list, a filtered count, a VALUES table). One
module per engine implements it: `duckdb_engine` (the embedded default) and `postgres_engine`
(scale-out). A new engine (Snowflake, BigQuery, ...) implements exactly the abstract methods
below, and overrides the portable defaults where it has a better spelling.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

from backfill_assets.identifiers import quote

if TYPE_CHECKING:
    from backfill_assets.home import Home

Params = Sequence[Any] | Mapping[str, Any]

_FLOATS = {"DOUBLE", "DOUBLE PRECISION", "FLOAT", "FLOAT4", "FLOAT8", "REAL"}


def type_family(column_type: str) -> str:
    """'float', 'timestamptz' or 'other', for a type as either engine's catalog names it: the
    families whose text differs between engines or depends on the session (`value_text_sql`)."""
    name = " ".join(column_type.upper().split())
    if name in _FLOATS:
        return "float"
    if name.startswith(("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE")) or (
            name.startswith("TIMESTAMP(") and name.endswith("WITH TIME ZONE")):
        return "timestamptz"
    return "other"


# the words of a type's name that name one kind of value, whatever its width, precision or length
_KINDS = [(re.compile(p), k) for p, k in (
    (r"\((\s*\d+\s*)(,\s*-?\d+\s*)?\)", ""),  # (18,2), (20): width, precision and length
    # PostgreSQL's blank-padded CHARACTER(n): 'EU' is stored with trailing spaces its cast to text
    # drops, so a VARCHAR copied into one kept its fingerprint and consumers read padded strings
    # (found by an attack); DuckDB's catalog calls CHAR(n) VARCHAR
    (r"\bCHARACTER\b(?! VARYING)|\b(CHAR|BPCHAR|NCHAR)\b", "PADDEDTEXT"),
    (r"\bCHARACTER VARYING\b|\b(VARCHAR|TEXT|CHARACTER|CHAR|BPCHAR|STRING|NVARCHAR|NCHAR|CITEXT|NAME)\b", "TEXT"),
    (r"\bDOUBLE PRECISION\b|\b(DOUBLE|REAL|FLOAT4|FLOAT8|FLOAT)\b", "FLOAT"),
    (r"\bU?(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|INT2|INT4|INT8|INT)\b", "INT"),
    (r"\bNUMERIC\b", "DECIMAL"), (r"\bJSONB\b", "JSON"))]


def type_kind(column_type: str) -> str:
    """What kind of values a type holds, as either engine's catalog or a contract names it, nested
    types by their parts (`BIGINT[]` and `VARCHAR[]` differ, `DECIMAL(18,0)` and `DECIMAL(18,2)` do
    not): a value cast into another kind can keep its text (7990.39 as VARCHAR, [1, 2] as VARCHAR[])
    and so its fingerprint, which only tells values of one kind apart by their bytes."""
    name = " ".join(column_type.upper().split())
    if "[" in name:
        # a list's text is each element's shortest text, which does not tell a REAL from the DOUBLE
        # it was rounded from ([0.1] either way): DOUBLE[] copied into FLOAT[] lost each element's
        # precision and still 'proved' the checked bytes (found by an attack), so within a list a
        # float's width is its kind (a catalog's FLOAT is DuckDB's 4-byte one; PostgreSQL says real)
        name = _NESTED_FLOAT4.sub("FLOAT32", name)
    for pattern, kind in _KINDS:
        name = pattern.sub(kind, name)
    return name.replace(" ", "")


_NESTED_FLOAT4 = re.compile(r"\b(REAL|FLOAT4|FLOAT)\b(?!\s*\()")


def raise_no_chain_key(schema: str) -> NoReturn:
    """The evidence chain is exactly its rows numbered 1 to the last, checked by counting them: a
    table recreated without its primary key can hold a row twice, so a row removed is not missed
    (a lead of an attack). Either engine's `control_relations_plain` refuses it so."""
    from backfill_assets.errors import ForgedRecord

    raise ForgedRecord(f"{schema}.evidence has no primary key on seq: its rows could repeat a number, so a row "
                       "removed would not be missed", fix="restore the control record from backup (`backfill "
                                                         "evidence verify` then checks it)")


class Session(ABC):
    """One connection, used by one thread, for one unit of work."""

    # Every statement of a transaction reads one snapshot (and the transaction's own writes): what
    # a statement read earlier in it is still what the table holds for it (DuckDB). PostgreSQL's
    # READ COMMITTED reads each statement at its own snapshot, so nothing is remembered there.
    snapshot_transactions = False
    # Code a table's owner hangs on a table (a trigger, a rule, a cascading foreign key) runs inside
    # the product's transactions (PostgreSQL): a write after a proof, of another table, can change
    # what was proven, so each proof is taken again as the transaction commits (`proven`)
    runs_table_code = False

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.home: Home | None = None  # set by Warehouse.session: where the evidence key lives
        self.read_only = False  # set by Warehouse.session: a reader never needs the evidence key
        self._depth = 0
        self._transactions = 0  # outermost transactions begun: which snapshot `snapshot_number` names
        self._after_commit: list[Callable[[], None]] = []
        self._proofs: list[Callable[[], object]] = []  # taken again before the commit (`proven`)

    def memo_while_locked(self) -> dict[str, Any] | None:
        """What this process found in the warehouse while it holds it so that no other process can
        write it (DuckDB locks the file for one writer: kept for as long as this process keeps it
        open, dropped when it lets go), or None where another connection may commit at any moment
        (PostgreSQL): the chain index and the seals checked are then not asked again. This
        process's own code only appends to what it remembers there (rows under new chain numbers)."""
        return None

    def refuse_shadowed_code(self) -> None:  # noqa: B027 - an engine whose session checks it all as it opens
        """Before a decision reads the control record: refused (ForgedRecord) when code the database
        defines would answer a built-in's calls (DuckDB: a macro named like a built-in)."""

    # --- statements -----------------------------------------------------------------------------
    @abstractmethod
    def execute(self, sql: str, params: Params = ()) -> None:
        """Run a statement; `?` placeholders with a sequence, `$name` ones with a mapping."""

    @abstractmethod
    def rows(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        """Run a query and return every row (callers only ever fetch aggregates)."""

    def one(self, sql: str, params: Params = ()) -> tuple[Any, ...] | None:
        found = self.rows(sql, params)
        return found[0] if found else None

    def scalar(self, sql: str, params: Params = ()) -> Any:
        row = self.one(sql, params)
        return row[0] if row else None

    # --- transactions ---------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """BEGIN ... COMMIT, rolled back on any exception: the unit of 'old or new, never half'.

        Nested calls join the outer transaction. Work registered with `after_commit` (notices,
        the evidence head log) runs only once the outermost transaction committed: no side
        effect ever happens inside one.
        """
        if self._depth:
            self._depth += 1
            try:
                yield self
            finally:
                self._depth -= 1
            return
        self._begin()
        self._depth = 1
        self._transactions += 1
        try:
            yield self
        except BaseException:
            self._depth = 0
            self._after_commit.clear()
            self._proofs.clear()
            self._rollback()
            raise
        proofs, self._proofs = self._proofs, []
        try:  # after every write of the transaction, before its commit
            for proof in proofs:
                proof()
        except BaseException:
            self._depth = 0
            self._after_commit.clear()
            self._rollback()
            raise
        self._depth = 0
        # taken before the commit: when the commit fails (a deferred constraint, a conflict) the
        # actions belong to work that never committed and must not run after a later commit
        pending, self._after_commit = self._after_commit, []
        try:
            self._commit()
        except BaseException:
            self._rollback()
            raise
        for action in pending:
            action()

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

    @property
    def snapshot_number(self) -> int | None:
        """Which transaction's snapshot the next statement reads, when it is one that every
        statement of the transaction reads (`snapshot_transactions`); else None."""
        return self._transactions if self._depth and self.snapshot_transactions else None

    def proven(self, proof: Callable[[], object]) -> None:
        """A proof this transaction took (it raises when the bytes differ), taken again after the
        transaction's last write, just before it commits, where code of others runs inside it
        (`runs_table_code`): a rollback proved a restore, then restored the published table, whose
        owner's trigger changed the restored target (found by an attack)."""
        if self._depth and self.runs_table_code:
            self._proofs.append(proof)

    def after_commit(self, action: Callable[[], None]) -> None:
        if self._depth:
            self._after_commit.append(action)
        else:
            action()

    @abstractmethod
    def _begin(self) -> None: ...

    @abstractmethod
    def _commit(self) -> None: ...

    @abstractmethod
    def _rollback(self) -> None: ...

    def lock(self, name: str) -> None:  # noqa: B027 - a no-op unless the engine needs it
        """Serialise every holder of `name` until this transaction ends (approve, lease, publish).

        Engines whose writers are already serialised (DuckDB: one writing process) do nothing.
        """

    def hold_table(self, table: str, *, writing: bool = False) -> None:  # noqa: B027 - a no-op unless needed
        """Keep other writers off `table` until this transaction ends (publish's check-then-copy);
        `writing`: take the lock a write of it takes (other writers go on, a holder waits), before the
        evidence chain, so a write never holds the chain while it waits for the table.

        Engines whose writers are already serialised do nothing.
        """

    def lock_rows_clause(self, exclusive: bool = False) -> str:
        """Appended to a SELECT inside a transaction to hold its rows until it ends: shared (other
        holders may read and share it) or exclusive (for the one who will update them)."""
        return ""


class Engine(ABC):
    """Connection, locking and the dialect pieces of one warehouse engine."""

    name: str = "abstract"
    #: a type that holds a sum of billions of unsigned 64-bit row hashes exactly
    wide_int: str = "DECIMAL(38,0)"
    #: whether a connection held open while in-process runs write makes their connections cheap
    #: (DuckDB: they join the open database instead of loading it); a server engine gains nothing
    #: and would hold an idle connection that a server or pooler may time out
    hold_during_runs: bool = False

    @abstractmethod
    def session(self, *, read_only: bool = False,
                wait_seconds: float | None = None) -> AbstractContextManager[Session]:
        """A connection for one unit of work; waits (visibly, boundedly) for locks."""

    def yield_to_waiters(self) -> bool:
        """Between two steps of a process that keeps the warehouse open: let in the processes
        waiting for it, if any (a server engine's locks are rows, taken in turn by the server)."""
        return False

    def let_go(self) -> None:  # noqa: B027 - a server engine keeps nothing open between sessions
        """Close what this process keeps open between sessions, before it waits on something else."""

    @abstractmethod
    def exists(self) -> bool:
        """Whether the warehouse is there at all (readers must never create one)."""

    @abstractmethod
    def describe(self) -> str:
        """Where the warehouse is, for messages (never a password)."""

    def identity(self) -> str:
        """Which warehouse this is now, for caches of what it holds: a file replaced at the same path
        is another warehouse."""
        return self.describe()

    # --- dialect --------------------------------------------------------------------------------
    @abstractmethod
    def text_of(self, expr: str) -> str:
        """`expr` cast to the engine's text type."""

    def row_text_sql(self, columns: Sequence[str], alias: str = "",
                     types: Sequence[str] | None = None) -> str:
        """The canonical text of a row: per column `~` for NULL, else `<length>:<text>`.

        Length-prefixed fields cannot run into each other, so two different rows never share a
        text. With `types` (each column's type as `table_columns` reports it) a value's text is
        `value_text_sql`, the same on every engine and in every session; without them it is the
        engine's plain cast to text (business-key texts, and the legacy fingerprint, which must
        keep the text it was recorded with).
        """
        prefix = f"{alias}." if alias else ""
        parts = []
        for i, column in enumerate(columns):
            expr = prefix + quote(column)
            value = self.value_text_sql(expr, types[i]) if types is not None else self.text_of(expr)
            parts.append(f"coalesce({self.text_of(f'length({value})')} || ':' || {value}, '~')")
        return " || ".join(parts) if parts else "''"

    def value_text_sql(self, expr: str, column_type: str) -> str:
        """The text of a value of a column of `column_type` (a `table_columns` name) in a
        fingerprint: distinct values give distinct texts, and the same value the same text on
        every engine, whatever the session's settings. The engine's cast to text where it already
        is (integers, DECIMAL with its scale, DATE, TIMESTAMP, text); engines override the rest
        (floats, TIMESTAMPTZ)."""
        return self.text_of(expr)

    @abstractmethod
    def row_digest_sql(self, text_sql: str) -> str:
        """sha256 of the UTF-8 bytes of `text_sql`, in a form the engine aggregates cheaply and
        that sorts in the order of the raw 32 bytes (lowercase hex text, or the bytes)."""

    @abstractmethod
    def digest_of_rows_sql(self, row_digest: str) -> str:
        """An aggregate: the lowercase hex sha256 of the concatenation of the group's raw 32-byte
        row digests (`row_digest_sql`) in ascending byte order, duplicates kept; over no rows, the
        sha256 of no bytes."""

    @abstractmethod
    def transient_row_hash_sql(self, columns: Sequence[str], alias: str = "",
                               types: Sequence[str] | None = None) -> str:
        """A fast engine-native 64-bit integer hash of a row, for comparing two tables at one moment
        (a diff); sum it as `wide_int`. Never stored: engines do not promise it stays the same
        across versions. With `types` (as `table_columns` reports them), rows whose bytes differ hash
        apart wherever the engine's own hash would call them equal (`changes_as_expected` takes
        rows of equal hashes for unchanged)."""

    def same_key_sql(self, left: str, right: str, declared: str) -> str:
        """NULL-safe equality of two values of a key declared `declared` in the contract (NULL
        matches NULL), that the engine can hash- or merge-join on: a join on business keys must
        never fall back to comparing every row of a partition with every other. Either side may
        hold another type than the declared one (a source column, a table made before the
        contract); the comparison must neither fail on that nor lose information (no truncation,
        no rounding)."""
        return f"{left} IS NOT DISTINCT FROM {right}"

    def keys_match_sql(self, left_alias: str, right_alias: str, columns: Sequence[str],
                       declared: Sequence[str]) -> str:
        """`same_key_sql` for each of `columns` (SQL names) between two aliases, with each key's
        declared type."""
        return " AND ".join(self.same_key_sql(f"{left_alias}.{c}", f"{right_alias}.{c}", t)
                            for c, t in zip(columns, declared, strict=True)) or "TRUE"

    def key_text_sql(self, columns: Sequence[str], alias: str = "") -> str:
        """A text that identifies the business-key values (NULL included) of a row."""
        return self.row_text_sql(columns, alias)

    @abstractmethod
    def hash_int_sql(self, exprs: Sequence[str]) -> str:
        """A deterministic non-negative integer hash of the expressions (sample data, not fingerprints)."""

    @abstractmethod
    def table_columns(self, session: Session, table: str, schema: str | None = None) -> dict[str, str]:
        """Lower-cased column name -> the type as the catalog reports it; empty if no table.
        `schema`: the current one when None."""

    @abstractmethod
    def canonical_types(self, session: Session, types: Sequence[str]) -> dict[str, str]:
        """Declared type name -> the name `table_columns` would report for it."""

    @abstractmethod
    def table_exists(self, session: Session, table: str, schema: str | None = None) -> bool: ...

    @abstractmethod
    def relation_kind(self, session: Session, table: str, schema: str | None = None) -> str | None:
        """'table' for a plain table whose rows every statement reads alike; else what it is (a
        view, a table under row security), or None when there is none."""

    @abstractmethod
    def temp_table_name(self, prefix: str) -> str:
        """A fresh name, qualified by the engine's session-temporary schema, for a table that lives
        only in this session: never a user's table of the same name, never another use's."""

    def team_sql(self, sql: str) -> str:
        """The team's own SQL (`select_sql`, a metric, a key's source expression) as it goes into a
        statement of the product's: left as the team wrote it where the engine names the product's
        own operators and functions with its schema (PostgreSQL, `postgres_operators`)."""
        return sql

    def named(self, sql: str) -> str:
        """A table's SQL with `$name` parameters, ready for a mapping of parameters."""
        return sql

    # --- constructs without one portable spelling ------------------------------------------------
    @abstractmethod
    def create_sequence_sql(self, name: str) -> str:
        """Create the sequence `name` (schema-qualified) unless it exists, starting at 1."""

    @abstractmethod
    def next_value_sql(self, name: str) -> str:
        """An expression that takes the sequence's next value (in a SELECT list, once per row)."""

    @abstractmethod
    def upsert_sql(self, table: str, columns: Sequence[str], key: Sequence[str],
                   update: Sequence[str] = ()) -> str:
        """INSERT one row of `columns` (each bound as `?`, in order); when a row of the same `key`
        (a primary key) exists already, leave it (no `update`) or set its `update` columns to the
        new row's values. Atomic against a concurrent insert of the same key."""

    def returning_sql(self, insert_sql: str, columns: Sequence[str]) -> str | None:
        """`insert_sql` returning `columns` of each row it inserted, or None when the engine cannot:
        the caller then reads the rows back by what identifies them."""
        return None

    def in_list_sql(self, expr: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """`expr` is one of `values`, and the parameters to bind: portably one `?` per value."""
        if not values:
            return "FALSE", []
        return f"{expr} IN ({', '.join('?' for _ in values)})", list(values)

    def values_sql(self, rows: Sequence[Sequence[str]], columns: Sequence[str], alias: str) -> str:
        """A derived table `alias(columns)` of these rows of expressions (`?`, or a cast of a
        `$name`), its parameters bound row by row. Portably a UNION ALL of one-row SELECTs."""
        selects = [f"SELECT {', '.join(f'{e} AS {c}' for e, c in zip(row, columns, strict=True))}" if not i
                   else f"SELECT {', '.join(row)}" for i, row in enumerate(rows)]
        return f"({' UNION ALL '.join(selects)}) AS {alias}"

    def rows_table_sql(self, rows: Sequence[Sequence[object]], columns: Sequence[str],
                       alias: str) -> tuple[str, list[object]]:
        """A derived table `alias(columns)` holding these rows of values, and the parameters it
        binds (in the order they appear): portably `values_sql` of one `?` a value."""
        return (self.values_sql(bound_rows(len(rows), len(columns)), columns, alias),
                [v for row in rows for v in row])

    def aggregate_where_sql(self, function: str, argument: str, condition: str, rest: str = "") -> str:
        """`function(argument rest)` over the group's rows for which `condition` holds (`rest`: what
        follows the argument inside the call, e.g. a separator and ORDER BY). Portably the argument
        is NULL on the other rows, which every aggregate used here skips."""
        value = "1" if argument == "*" else argument
        return f"{function}(CASE WHEN {condition} THEN {value} END{rest})"

    def joined_text_where_sql(self, argument: str, separator: str, order_by: str, condition: str) -> str:
        """The group's texts `argument` for which `condition` holds, joined by the literal
        `separator` in the order of `order_by`. Portably SQL:2016's LISTAGG ... WITHIN GROUP."""
        return f"LISTAGG(CASE WHEN {condition} THEN {argument} END, {separator}) WITHIN GROUP (ORDER BY {order_by})"

    def count_where_sql(self, condition: str) -> str:
        """The number of the group's rows for which `condition` holds."""
        return self.aggregate_where_sql(self.builtin("count"), "*", condition)

    def builtin(self, name: str) -> str:
        """The engine's own function `name` as a statement calls it (portably its bare name): where
        a function of the database's own named alike could answer the bare call (PostgreSQL), named
        with the schema of the engine's functions."""
        return name


def bound_rows(count: int, width: int) -> list[list[str]]:
    """`count` rows of `width` `?` placeholders, for `Engine.values_sql`."""
    return [["?"] * width for _ in range(count)]

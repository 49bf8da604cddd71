"""How DuckDB and PostgreSQL both spell what SQL has no one portable spelling for.

DuckDB's dialect follows PostgreSQL's for all of these (sequences, `ON CONFLICT ... excluded`,
`RETURNING`, `= ANY(?)` with a bound list, `VALUES ... AS v(...)`, `FILTER (WHERE ...)`,
`string_agg`), so both engines take them from here; an engine that spells one differently overrides it in its module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class PostgresSpelling:
    def create_sequence_sql(self, name: str) -> str:
        return f"CREATE SEQUENCE IF NOT EXISTS {name}"

    def next_value_sql(self, name: str) -> str:
        return f"nextval('{name}')"

    def upsert_sql(self, table: str, columns: Sequence[str], key: Sequence[str],
                   update: Sequence[str] = ()) -> str:
        action = ("DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in update)) if update else "DO NOTHING"
        return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)}) "
                f"ON CONFLICT ({', '.join(key)}) {action}")

    def returning_sql(self, insert_sql: str, columns: Sequence[str]) -> str | None:
        return f"{insert_sql} RETURNING {', '.join(columns)}"

    def in_list_sql(self, expr: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        # one parameter, a list, whatever its length: one statement text for every slice
        return f"{expr} = ANY(?)", [list(values)]

    def values_sql(self, rows: Sequence[Sequence[str]], columns: Sequence[str], alias: str) -> str:
        listed = ", ".join(f"({', '.join(row)})" for row in rows)
        return f"(VALUES {listed}) AS {alias}({', '.join(columns)})"

    def aggregate_where_sql(self, function: str, argument: str, condition: str, rest: str = "") -> str:
        return f"{function}({argument}{rest}) FILTER (WHERE {condition})"

    def joined_text_where_sql(self, argument: str, separator: str, order_by: str, condition: str) -> str:
        return f"{self.builtin('string_agg')}({argument}, {separator} ORDER BY {order_by}) FILTER (WHERE {condition})"

    def builtin(self, name: str) -> str:
        return name  # `Engine.builtin`; PostgreSQL names its schema

"""The statement that creates a table of a contract: above the table spec, whose contract it reads."""

from __future__ import annotations

from collections.abc import Iterable

from backfill_assets.identifiers import quote
from backfill_assets.table import TableSpec


def create_table_sql(table: str, columns: Iterable[tuple[str, str]]) -> str:
    """`table` with these (name, type) columns, unless it exists."""
    # no NOT NULL in the DDL: the contract gate must see a bad transform's NULLs and block
    # publish, rather than the write failing half-way through a window
    cols = ", ".join(f"{quote(name)} {kind}" for name, kind in columns)
    return f"CREATE TABLE IF NOT EXISTS {quote(table)} ({cols})"


def create_sql(spec: TableSpec, table: str | None = None) -> str:
    """The statement that creates the contract's table (its own name when `table` is None)."""
    return create_table_sql(table or spec.table, [(c.name, c.type) for c in spec.contract])

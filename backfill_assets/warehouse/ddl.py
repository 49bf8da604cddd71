"""The statement that creates a table of a contract: below the table spec, which names it."""

from __future__ import annotations

from collections.abc import Iterable

from backfill_assets.warehouse.identifiers import quote


def create_table_sql(table: str, columns: Iterable[tuple[str, str]]) -> str:
    """`table` with these (name, type) columns, unless it exists."""
    # no NOT NULL in the DDL: the contract gate must see a bad transform's NULLs and block
    # publish, rather than the write failing half-way through a window
    cols = ", ".join(f"{quote(name)} {kind}" for name, kind in columns)
    return f"CREATE TABLE IF NOT EXISTS {quote(table)} ({cols})"

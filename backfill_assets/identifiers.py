"""Identifiers from YAML or code become SQL only after validation and quoting here."""

from __future__ import annotations

import re

from backfill_assets.errors import IdentifierError

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def validated(name: str, what: str = "identifier") -> str:
    if not isinstance(name, str) or not _PLAIN.match(name):
        raise IdentifierError(
            f"{what} {name!r} is not a plain SQL identifier",
            fix="use letters, digits and underscores, starting with a letter",
        )
    return name


def quote(name: str, what: str = "identifier") -> str:
    return '"' + validated(name, what) + '"'


def qualified(schema: str, table: str) -> str:
    return f"{quote(schema, 'schema')}.{quote(table, 'table')}"


def table_for_asset(asset_key: str) -> str:
    """The warehouse table of an asset key: path parts joined by '__'."""
    return validated("__".join(asset_key.split("/")), "asset table")

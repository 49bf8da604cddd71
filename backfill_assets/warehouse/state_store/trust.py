"""The `trust_roots` table: every pinned trust root (allowed_signers, policy, signatures), in order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import SCHEMA

COLUMNS = ("version", "warehouse_id", "signers_text", "signers_sha256", "policy_text", "policy_sha256",
           "signatures", "pinned_by", "pinned_at", "evidence_seq")
_ROW = ", ".join(COLUMNS)


def roots_and_pins(session: Session) -> tuple[list[tuple[Any, ...]], int, int | None]:
    """Every pinned root (COLUMNS), oldest first, with how many pins the chain recorded and the
    number of its last pin, read in one statement."""
    found = session.rows(
        f"SELECT {_ROW}, c.pins, c.last_pin FROM (SELECT count(*) AS pins, max(seq) AS last_pin "
        f"FROM {SCHEMA}.evidence WHERE kind = 'trust_root') AS c LEFT JOIN {SCHEMA}.trust_roots ON TRUE "
        "ORDER BY version")
    return [r[:-2] for r in found if r[0] is not None], int(found[0][-2]), found[0][-1]


def insert(session: Session, row: Sequence[object]) -> None:
    """A pinned root (COLUMNS)."""
    session.execute(f"INSERT INTO {SCHEMA}.trust_roots ({_ROW}) VALUES ({', '.join('?' for _ in COLUMNS)})",
                    list(row))

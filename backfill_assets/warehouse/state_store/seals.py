"""The rows a seal covers: each ledger table's sealed columns, and its rows by the chain row
(`evidence_seq`) that sealed them. `control/seals.py` computes and checks the digests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import SCHEMA, rows_in

# the columns a seal covers, the first of them ordering the rows
SEALED: dict[str, tuple[str, ...]] = {
    "writes": ("write_id", "plan_id", "asset", "partition_key", "mode", "run_id", "code_version", "row_count",
               "fingerprint", "recorded_at", "code_identity"),
    "gate_results": ("result_id", "write_id", "plan_id", "asset", "partition_key", "gate", "passed",
                     "checked_fingerprint", "figures", "recorded_at"),
    "snapshots": ("table_name", "partition_key", "plan_id", "row_count", "fingerprint", "snapshot_table",
                  "recorded_at"),
    "publications": ("publish_id", "asset", "partition_key", "row_count", "fingerprint", "write_id", "plan_id",
                     "recorded_at"),
}


def _columns(table: str) -> str:
    return ", ".join(SEALED[table])  # `table` is always one of SEALED's, never a name from outside


def rows_of_seq(session: Session, table: str, seq: int) -> list[tuple[Any, ...]]:
    """The sealed columns of the rows of `table` that carry `seq`."""
    return session.rows(f"SELECT {_columns(table)} FROM {SCHEMA}.{table} WHERE evidence_seq = ?", [seq])


def rows_of_seqs(session: Session, table: str, seqs: Sequence[int]) -> list[tuple[Any, ...]]:
    """The sealed columns, then `evidence_seq`, of the rows of `table` that carry any of `seqs`."""
    return rows_in(session, f"SELECT {_columns(table)}, evidence_seq FROM {SCHEMA}.{table} WHERE", "evidence_seq",
                   seqs)


def sealing_seqs(session: Session, table: str) -> list[int]:
    """Every chain row that seals rows of `table`."""
    return [int(s) for (s,) in session.rows(f"SELECT DISTINCT evidence_seq FROM {SCHEMA}.{table} "
                                            "WHERE evidence_seq IS NOT NULL")]


def count_rows(session: Session, table: str, *, unsealed: bool = False) -> int:
    """How many rows `table` holds (only those without a seal, with `unsealed`)."""
    where = " WHERE evidence_seq IS NULL" if unsealed else ""
    return int(session.scalar(f"SELECT count(*) FROM {SCHEMA}.{table}{where}") or 0)


def unsealed_rows(session: Session, table: str) -> list[tuple[Any, ...]]:
    """The sealed columns of the rows of `table` that carry no seal (written before seals existed)."""
    return session.rows(f"SELECT {_columns(table)} FROM {SCHEMA}.{table} WHERE evidence_seq IS NULL")


def seal_unsealed(session: Session, table: str, seq: int) -> None:
    """Every row of `table` without a seal is sealed by chain row `seq`."""
    session.execute(f"UPDATE {SCHEMA}.{table} SET evidence_seq = ? WHERE evidence_seq IS NULL",
                    [seq])

"""The ledger's tables: `writes` (every partition write), `gate_results` (what the gates said of
each) and `watermarks` (the incremental cursor of each table).

Rows are returned as stored; `control/ledger.py` checks them against their seals.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import IDS, SCHEMA


def insert_writes(session: Session, *, plan_id: str | None, asset: str, mode: str, run_id: str | None,
                  code_version: str, code_identity: str, at: str, seq: int,
                  written: Sequence[tuple[str, int, str]]) -> dict[str, int]:
    """One row per (partition, rows, fingerprint) written, in one statement, all sealed by chain row
    `seq`; returns each partition's write id."""
    engine = session.engine
    rows_sql, values = engine.rows_table_sql(written, ("k", "n", "d"), "v")
    insert = (f"INSERT INTO {SCHEMA}.writes (write_id, plan_id, asset, partition_key, mode, run_id, code_version, "
              f"row_count, fingerprint, recorded_at, impact, evidence_seq, code_identity) "
              f"SELECT {engine.next_value_sql(IDS)}, ?, ?, k, ?, ?, ?, CAST(n AS BIGINT), d, ?, NULL, ?, ? "
              f"FROM {rows_sql}")
    params = [plan_id, asset, mode, run_id, code_version, at, seq, code_identity, *values]
    returning = engine.returning_sql(insert, ("partition_key", "write_id"))
    if returning is not None:
        rows = session.rows(returning, params)
    else:  # the rows chain row `seq` seals are exactly these
        session.execute(insert, params)
        rows = session.rows(f"SELECT partition_key, write_id FROM {SCHEMA}.writes WHERE evidence_seq = ?", [seq])
    return {str(k): int(w) for k, w in rows}


#: a gate result as `insert_results` takes it
RESULT_COLUMNS = ("write_id", "plan_id", "asset", "partition_key", "gate", "passed", "checked_fingerprint",
                  "figures", "recorded_at")


def insert_results(session: Session, seq: int, results: Sequence[Sequence[object]]) -> None:
    """Gate results (each in RESULT_COLUMNS order), in one statement, all sealed by chain row `seq`."""
    engine = session.engine
    rows_sql, values = engine.rows_table_sql(results, ("w", "p", "a", "k", "g", "ok", "c", "f", "t"), "v")
    session.execute(
        f"INSERT INTO {SCHEMA}.gate_results (result_id, write_id, plan_id, asset, partition_key, gate, passed, "
        f"checked_fingerprint, figures, recorded_at, evidence_seq) SELECT {engine.next_value_sql(IDS)}, "
        f"CAST(w AS BIGINT), p, a, k, g, CAST(ok AS BOOLEAN), c, f, t, CAST(? AS BIGINT) FROM {rows_sql}",
        [seq, *values])


def latest_writes(session: Session, asset: str, keys: Sequence[str],
                  plan_id: str | None = None, figures: bool = True) -> list[tuple[Any, ...]]:
    """Per key, its latest write (of the plan, when given) joined to the latest result of each gate
    on it: (partition_key, write_id, plan_id, recorded_at, row_count, fingerprint, code_version,
    code_identity, evidence_seq, gate, passed, figures, checked_fingerprint, result evidence_seq),
    one row per gate (one with gate NULL for a write no gate judged yet). Without `figures`, that
    column is NULL: a verdict over a whole window needs only which gates passed. Latest in the
    chain's order, never the ids': a trigger may set an id as its row lands (a failing result's
    below an older passing one's, found by an attack), while a row's chain row is its seal's."""
    within, listed = session.engine.in_list_sql("partition_key", keys)
    plan_filter, params = ("AND plan_id = ?", [plan_id]) if plan_id is not None else ("", [])
    return session.rows(
        f"""
        WITH w AS (
            SELECT write_id, partition_key, plan_id, recorded_at, row_count, fingerprint, code_version,
                   code_identity, evidence_seq,
                   row_number() OVER (PARTITION BY partition_key
                                      ORDER BY evidence_seq DESC NULLS FIRST, write_id DESC) AS rk
            FROM {SCHEMA}.writes WHERE asset = ? AND {within} {plan_filter}),
        g AS (
            SELECT write_id, gate, passed, figures, checked_fingerprint, evidence_seq,
                   row_number() OVER (PARTITION BY write_id, gate
                                      ORDER BY evidence_seq DESC NULLS FIRST, result_id DESC) AS rk
            FROM {SCHEMA}.gate_results WHERE write_id IN (SELECT write_id FROM w WHERE rk = 1))
        SELECT w.partition_key, w.write_id, w.plan_id, w.recorded_at, w.row_count, w.fingerprint,
               w.code_version, w.code_identity, w.evidence_seq, g.gate, g.passed, {"g.figures" if figures else "NULL"},
               g.checked_fingerprint, g.evidence_seq
        FROM w LEFT JOIN g ON g.write_id = w.write_id AND g.rk = 1
        WHERE w.rk = 1 ORDER BY w.partition_key, g.gate
        """, [asset, *listed, *params])


def latest_code_versions(session: Session, asset: str, plan_id: str) -> list[tuple[Any, ...]]:
    """(partition_key, code_version, evidence_seq) of the latest write of each partition the plan wrote."""
    return session.rows(
        f"""SELECT partition_key, code_version, evidence_seq FROM (
                SELECT partition_key, code_version, evidence_seq,
                       row_number() OVER (PARTITION BY partition_key
                                          ORDER BY evidence_seq DESC NULLS FIRST, write_id DESC) AS rk
                FROM {SCHEMA}.writes WHERE asset = ? AND plan_id = ?) AS w
            WHERE rk = 1""", [asset, plan_id])


def fingerprints_of(session: Session, asset: str, plan_id: str, key: str) -> list[tuple[Any, ...]]:
    """(fingerprint, evidence_seq) of every write of `key` under the plan, oldest first."""
    return session.rows(f"SELECT fingerprint, evidence_seq FROM {SCHEMA}.writes WHERE plan_id = ? AND asset = ? "
                        "AND partition_key = ? ORDER BY evidence_seq, write_id", [plan_id, asset, key])


def keys_ever_written(session: Session, asset: str, keys: Sequence[str]) -> set[str]:
    """Those of `keys` of `asset` that any write ever wrote."""
    within, listed = session.engine.in_list_sql("partition_key", keys)
    return {str(r[0]) for r in session.rows(
        f"SELECT DISTINCT partition_key FROM {SCHEMA}.writes WHERE asset = ? AND {within}", [asset, *listed])}


def rewrites_without_plan(session: Session, asset: str | None = None,
                          keys: Sequence[str] = ()) -> list[tuple[Any, ...]]:
    """(asset, partition, write id, the first write id before it) of each write under no plan of a
    partition some write wrote before it, in chain order (all, or of `asset`'s `keys`)."""
    where, params = "", []
    if asset is not None:
        within, listed = session.engine.in_list_sql("w.partition_key", keys)
        where, params = f" AND w.asset = ? AND {within}", [asset, *listed]
    return session.rows(
        f"SELECT w.asset, w.partition_key, w.write_id, min(e.write_id) FROM {SCHEMA}.writes AS w "
        f"JOIN {SCHEMA}.writes AS e ON e.asset = w.asset AND e.partition_key = w.partition_key "
        f"AND coalesce(e.evidence_seq, 0) < coalesce(w.evidence_seq, 0) WHERE w.plan_id IS NULL{where} "
        "GROUP BY w.asset, w.partition_key, w.write_id ORDER BY w.asset, w.partition_key, w.write_id", params)


def tables_claimed(session: Session) -> list[tuple[str, str | None]]:
    """(asset, the target that wrote it) of every table the ledger has: each target written
    (itself), and each published table with the target whose write it published (None: put back
    by a rollback)."""
    return [(str(a), None if t is None else str(t)) for a, t in session.rows(
        f"SELECT DISTINCT asset, asset FROM {SCHEMA}.writes UNION "
        f"SELECT DISTINCT p.asset, w.asset FROM {SCHEMA}.publications AS p "
        f"LEFT JOIN {SCHEMA}.writes AS w ON w.write_id = p.write_id")]


def keys_of_plan(session: Session, plan_id: str, asset: str) -> set[str]:
    """The partitions of `asset` the plan wrote."""
    return {str(k) for (k,) in session.rows(f"SELECT DISTINCT partition_key FROM {SCHEMA}.writes WHERE plan_id = ? "
                                            "AND asset = ?", [plan_id, asset])}


def count_keys_of_plan(session: Session, plan_id: str) -> int:
    """How many distinct partitions the plan wrote (of any table)."""
    # the engine's own count: `count(varchar)` of one's own is the better match (a withdraw passed
    # over a plan's writes: found by an attack)
    return int(session.scalar(f"SELECT {session.engine.builtin('count')}(DISTINCT partition_key) "
                              f"FROM {SCHEMA}.writes WHERE plan_id = ?", [plan_id]) or 0)


def writers_since(session: Session, asset: str, keys: Sequence[str], plan_id: str,
                  ended_phase: str) -> list[tuple[Any, ...]]:
    """(writer, partition) of every write of these partitions after the plan's first write, by others
    (`incremental runs` for plan-free writes) but plans now in `ended_phase`, by partition."""
    within, listed = session.engine.in_list_sql("partition_key", keys)
    return session.rows(
        f"""SELECT DISTINCT coalesce(plan_id, 'incremental runs'), partition_key FROM {SCHEMA}.writes
            WHERE asset = ? AND {within} AND (plan_id IS NULL OR plan_id <> ?)
              AND evidence_seq > (SELECT min(evidence_seq) FROM {SCHEMA}.writes WHERE plan_id = ?)
              AND (plan_id IS NULL OR plan_id NOT IN
                   (SELECT plan_id FROM {SCHEMA}.plans WHERE phase = ?))
            ORDER BY 2""", [asset, *listed, plan_id, plan_id, ended_phase])


def failed_results(session: Session, plan_id: str) -> list[tuple[Any, ...]]:
    """(asset, partition_key, gate, figures, recorded_at, write_id, evidence_seq) of every failing
    result recorded under the plan, oldest first."""
    return session.rows(f"SELECT asset, partition_key, gate, figures, recorded_at, write_id, evidence_seq "
                        f"FROM {SCHEMA}.gate_results WHERE plan_id = ? AND NOT passed ORDER BY evidence_seq, result_id",
                        [plan_id])


def writes_of_plan(session: Session, plan_id: str) -> list[tuple[Any, ...]]:
    """(asset, code_version, code_identity, partition_key, recorded_at, evidence_seq) of each write of
    the plan."""
    return session.rows(f"SELECT asset, code_version, code_identity, partition_key, recorded_at, evidence_seq "
                        f"FROM {SCHEMA}.writes WHERE plan_id = ?", [plan_id])


def watermark(session: Session, asset: str) -> str | None:
    """The partition the incremental runs of `asset` last wrote."""
    key: str | None = session.scalar(f"SELECT partition_key FROM {SCHEMA}.watermarks WHERE asset = ?", [asset])
    return key


def set_watermark(session: Session, asset: str, key: str, at: str) -> None:
    session.execute(f"DELETE FROM {SCHEMA}.watermarks WHERE asset = ?", [asset])
    session.execute(f"INSERT INTO {SCHEMA}.watermarks VALUES (?, ?, ?)", [asset, key, at])

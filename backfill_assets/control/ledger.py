"""The ledger: every partition write, and what the gates said about each.

A gate result names the write it judged (`write_id`) and the fingerprint of the data it checked.
The publish rule trusts only results on a partition's latest write whose checked fingerprint is
the write's own, and the data it copies must still carry that fingerprint.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from backfill_assets.control import evidence_log
from backfill_assets.control.schema import SCHEMA
from backfill_assets.gates.results import GateResult
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import Fingerprint


@dataclass(frozen=True)
class LatestWrite:
    partition_key: str
    write_id: int
    plan_id: str | None
    recorded_at: str
    fingerprint: Fingerprint
    code_version: str | None
    gates: dict[str, tuple[bool, dict]] = field(default_factory=dict)  # gate -> (passed, figures)
    checked: dict[str, str | None] = field(default_factory=dict)  # gate -> checked fingerprint

    @property
    def passed(self) -> bool:
        return bool(self.gates) and all(p for p, _ in self.gates.values())

    @property
    def failed(self) -> list[str]:
        return [g for g, (p, _) in self.gates.items() if not p]


def record_writes(session: Session, *, plan_id: str | None, asset: str, mode: str, run_id: str | None,
                  code_version: str, written: Mapping[str, Fingerprint]) -> tuple[dict[str, int], str]:
    """One ledger row per partition written ({key: fingerprint after the write}), in one statement;
    returns each key's write id and the time recorded."""
    at = evidence_log.now_iso()
    if not written:
        return {}, at
    values: list[object] = []
    for key, fingerprint in written.items():
        values += [key, fingerprint.rows, fingerprint.digest]
    placeholders = ", ".join(["(?, ?, ?)"] * len(written))
    rows = session.rows(
        f"INSERT INTO {SCHEMA}.writes SELECT nextval('{SCHEMA}.ids'), ?, ?, k, ?, ?, ?, CAST(n AS BIGINT), d, ?, "
        f"NULL FROM (VALUES {placeholders}) AS v(k, n, d) RETURNING partition_key, write_id",
        [plan_id, asset, mode, run_id, code_version, at, *values])
    return {str(k): int(w) for k, w in rows}, at


def record_results(session: Session, *, plan_id: str | None, asset: str,
                   judged: Sequence[tuple[int | None, str, Fingerprint, list[GateResult]]]) -> None:
    """Store results: one (write_id, partition, checked fingerprint, results) per partition, in one
    statement for the whole slice."""
    at = evidence_log.now_iso()
    values: list[object] = []
    for write_id, key, checked, results in judged:
        for result in results:
            values += [write_id, plan_id, asset, key, result.gate, result.passed,
                       checked.digest if checked else None, json.dumps(result.to_json(), default=str), at]
    if not values:
        return
    rows = len(values) // 9
    placeholders = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * rows)
    session.execute(
        f"INSERT INTO {SCHEMA}.gate_results (result_id, write_id, plan_id, asset, partition_key, gate, passed, "
        f"checked_fingerprint, figures, recorded_at) SELECT nextval('{SCHEMA}.ids'), CAST(w AS BIGINT), p, a, k, g, "
        f"CAST(ok AS BOOLEAN), c, f, t FROM (VALUES {placeholders}) AS v(w, p, a, k, g, ok, c, f, t)", values)


def latest(session: Session, asset: str, keys: Sequence[str],
           plan_id: str | None = None) -> dict[str, LatestWrite | None]:
    """The latest write per key (of the plan, when given) and the latest result of each gate on it."""
    keys = list(dict.fromkeys(keys))
    out: dict[str, LatestWrite | None] = {k: None for k in keys}
    if not keys:
        return out
    plan_filter, params = ("AND plan_id = ?", [plan_id]) if plan_id is not None else ("", [])
    rows = session.rows(
        f"""
        WITH w AS (
            SELECT write_id, partition_key, plan_id, recorded_at, row_count, fingerprint, code_version,
                   row_number() OVER (PARTITION BY partition_key ORDER BY write_id DESC) AS rk
            FROM {SCHEMA}.writes WHERE asset = ? AND partition_key = ANY(?) {plan_filter}),
        g AS (
            SELECT write_id, gate, passed, figures, checked_fingerprint,
                   row_number() OVER (PARTITION BY write_id, gate ORDER BY result_id DESC) AS rk
            FROM {SCHEMA}.gate_results WHERE write_id IN (SELECT write_id FROM w WHERE rk = 1))
        SELECT w.partition_key, w.write_id, w.plan_id, w.recorded_at, w.row_count, w.fingerprint,
               w.code_version, g.gate, g.passed, g.figures, g.checked_fingerprint
        FROM w LEFT JOIN g ON g.write_id = w.write_id AND g.rk = 1
        WHERE w.rk = 1 ORDER BY w.partition_key, g.gate
        """, [asset, keys, *params])
    for key, wid, pid, at, n, digest, version, gate, passed, figures, checked in rows:
        entry = out.get(key)
        if entry is None:
            entry = LatestWrite(key, int(wid), pid, at, Fingerprint(int(n), str(digest)), version)
            out[key] = entry
        if gate is not None:
            entry.gates[gate] = (bool(passed), json.loads(figures))
            entry.checked[gate] = checked
    return out


def code_versions(session: Session, asset: str, plan_id: str) -> dict[str, str | None]:
    """The code version of the latest write of each partition the plan wrote (one light query)."""
    return dict(session.rows(
        f"""SELECT partition_key, code_version FROM (
                SELECT partition_key, code_version,
                       row_number() OVER (PARTITION BY partition_key ORDER BY write_id DESC) AS rk
                FROM {SCHEMA}.writes WHERE asset = ? AND plan_id = ?) AS w
            WHERE rk = 1""", [asset, plan_id]))

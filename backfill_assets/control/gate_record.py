"""Gate results as recorded against the latest write of each partition.

This is what the publish rule trusts: a result counts only if it judged the partition's latest
write, whichever run (same or later, UI, schedule or CLI) produced it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb

from backfill_assets.control.schema import SCHEMA


@dataclass(frozen=True)
class LatestGates:
    partition_key: str
    plan_id: str | None
    write_at: str
    fingerprint: str
    code_version: str | None
    gates: dict[str, tuple[bool, dict]]  # gate -> (passed, figures)

    @property
    def passed(self) -> bool:
        return bool(self.gates) and all(p for p, _ in self.gates.values())

    @property
    def failed(self) -> list[str]:
        return [g for g, (p, _) in self.gates.items() if not p]


def latest(con: duckdb.DuckDBPyConnection, asset: str, keys: Sequence[str],
           plan_id: str | None = None) -> dict[str, LatestGates | None]:
    """Latest write per key (of the plan, when given) with the gate results recorded against it."""
    plan_filter = "AND plan_id = ?" if plan_id is not None else ""
    params: list[object] = [asset, list(keys)] + ([plan_id] if plan_id is not None else [])
    rows = con.execute(
        f"""
        WITH latest AS (
            SELECT partition_key, arg_max(plan_id, recorded_at) AS plan_id,
                   max(recorded_at) AS write_at, arg_max(fingerprint, recorded_at) AS fingerprint,
                   arg_max(code_version, recorded_at) AS code_version
            FROM {SCHEMA}.writes
            WHERE asset = ? AND partition_key = ANY(?) {plan_filter}
            GROUP BY partition_key)
        SELECT l.partition_key, l.plan_id, l.write_at, l.fingerprint, l.code_version,
               g.gate, g.passed, g.figures
        FROM latest l LEFT JOIN {SCHEMA}.gate_results g
          ON g.asset = ? AND g.partition_key = l.partition_key AND g.write_at = l.write_at
        ORDER BY l.partition_key, g.recorded_at
        """, [*params, asset]).fetchall()
    out: dict[str, LatestGates | None] = {k: None for k in keys}
    for key, pid, write_at, fp, version, gate, passed, figures in rows:
        entry = out.get(key)
        if entry is None:
            entry = LatestGates(key, pid, write_at, fp, version, {})
            out[key] = entry
        if gate is not None:
            entry.gates[gate] = (bool(passed), json.loads(figures))
    return out

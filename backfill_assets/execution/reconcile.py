"""Re-running the gates of a plan's window on the data as it is now, and recording them.

Recorded results judge the latest write of each partition; re-evaluating catches a partition
edited after its write (the fresh, failing result then blocks publish).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from backfill_assets.control import gate_record
from backfill_assets.control.record import PlanState
from backfill_assets.execution.progress import advance
from backfill_assets.execution.slice_write import PartitionWrite, gate_slice
from backfill_assets.gates.results import GATE_NAMES, GateResult
from backfill_assets.plan.gate import Clearance
from backfill_assets.plan.resolved import ResolvedPlan
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.fingerprints import Fingerprint


@dataclass(frozen=True)
class Reconciliation:
    state: PlanState
    results: dict[str, list[GateResult] | None]  # None: partition not written under the plan

    @property
    def passed(self) -> bool:
        return all(r is not None and all(g.passed for g in r) for r in self.results.values())

    def rows(self) -> list[dict]:
        out = []
        for key, results in self.results.items():
            if results is None:
                out.append({"partition": key, "written": False, "passed": False, "gates": {}})
                continue
            out.append({"partition": key, "written": True,
                        "passed": all(g.passed for g in results),
                        "gates": {g.gate: {"passed": g.passed, "expected": g.expected,
                                           "actual": g.actual, "threshold": g.threshold,
                                           "difference": g.difference, "detail": g.detail}
                                  for g in results}})
        return out

    def table(self) -> str:
        short = dict(zip(GATE_NAMES, ("rows", "dupes", "metrics", "contract", "version"), strict=True))
        header = f"{'partition':<12}" + "".join(f"{short[g]:>10}" for g in GATE_NAMES)
        lines = [header]
        failures = []
        for key, results in self.results.items():
            if results is None:
                lines.append(f"{key:<12}" + f"{'-':>10}" * len(GATE_NAMES) + "  (not written)")
                continue
            lines.append(f"{key:<12}" + "".join(f"{'ok' if g.passed else 'FAIL':>10}"
                                                for g in results))
            failures += [f"  {key} {g.gate}: {g.detail}" for g in results if not g.passed]
        return "\n".join(lines + failures)


def reconcile(con: duckdb.DuckDBPyConnection, spec: TableSpec, state: PlanState,
              resolved: ResolvedPlan, actor: str) -> Reconciliation:
    latest = gate_record.latest(con, spec.name, state.partition_keys, state.plan_id)
    writes = [PartitionWrite(k, 0, Fingerprint(0, e.fingerprint), e.write_at)
              for k, e in latest.items() if e is not None]
    results: dict[str, list[GateResult] | None] = {k: None for k in state.partition_keys}
    if writes:
        clearance = Clearance(tuple(w.partition_key for w in writes), state, resolved)
        results.update(gate_slice(con, spec, clearance, writes, actor))
    return Reconciliation(advance(con, state, actor), results)

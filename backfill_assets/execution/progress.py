"""Moving a plan forward on evidence: proving → proven, running → reconciled.

Both the CLI and the reopen sensor call these, so a backfill launched from the Dagster UI moves
through the same phases on the same evidence as one launched by `backfill run`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from backfill_assets.control import evidence_log, gate_record, record
from backfill_assets.control.record import PlanState
from backfill_assets.control.schema import SCHEMA
from backfill_assets.plan.phases import Phase
from backfill_assets.warehouse.connection import transaction


@dataclass(frozen=True)
class Verdict:
    passed: bool
    blockers: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)


def proof_verdict(con: duckdb.DuckDBPyConnection, state: PlanState) -> Verdict:
    """Every proof partition written at least twice with identical fingerprints, all gates passed."""
    blockers, details = [], {}
    for key in state.proof_keys:
        prints = [r[0] for r in con.execute(
            f"SELECT fingerprint FROM {SCHEMA}.writes WHERE plan_id = ? AND asset = ? AND "
            "partition_key = ? ORDER BY recorded_at", [state.plan_id, state.target, key]
        ).fetchall()]
        details[key] = prints[-2:]
        if len(prints) < 2:
            blockers.append(f"{key}: materialized {len(prints)} time(s), the proof needs 2")
        elif prints[-1] != prints[-2]:
            blockers.append(f"{key}: fingerprints differ between the last two runs "
                            f"({prints[-2][-12:]} vs {prints[-1][-12:]}); the write is not idempotent")
    gates = gate_record.latest(con, state.target, list(state.proof_keys), state.plan_id)
    for key, entry in gates.items():
        if entry is not None and not entry.passed:
            blockers.append(f"{key}: gates failed: {', '.join(entry.failed) or 'not evaluated'}")
    return Verdict(not blockers, blockers, details)


def window_verdict(con: duckdb.DuckDBPyConnection, state: PlanState) -> Verdict:
    """Every partition of the window written under the plan and every gate passed on its latest write."""
    gates = gate_record.latest(con, state.target, state.partition_keys, state.plan_id)
    missing = [k for k, e in gates.items() if e is None]
    failed = {k: e.failed or ["not evaluated"] for k, e in gates.items() if e and not e.passed}
    blockers = []
    if missing:
        blockers.append(f"{len(missing)} partition(s) not written yet: {', '.join(missing[:5])}"
                        + (" ..." if len(missing) > 5 else ""))
    blockers += [f"{k}: {', '.join(g)} failed" for k, g in failed.items()]
    versions: dict[str, list[str]] = {}
    for key, entry in gates.items():
        if entry is not None:
            versions.setdefault(str(entry.code_version), []).append(key)
    if len(versions) > 1:
        # judged on the whole window now: a result recorded slice by slice may predate the mix
        blockers.append("the window mixes code versions: " + "; ".join(
            f"{v} ({len(ks)} partition(s), e.g. {ks[0]})" for v, ks in sorted(versions.items()))
            + "; re-run the odd partitions with one version")
    return Verdict(not blockers, blockers,
                   {"partitions": len(gates), "missing": missing, "failed": failed})


def advance(con: duckdb.DuckDBPyConnection, state: PlanState, actor: str) -> PlanState:
    """Take every step the evidence allows; record each in the evidence log."""
    if state.phase is Phase.PROVING:
        verdict = proof_verdict(con, state)
        with transaction(con):
            if verdict.passed:
                evidence_log.append(con, plan_id=state.plan_id, kind="proof", actor=actor, payload={
                    "passed": True, "partitions": list(state.proof_keys),
                    "fingerprints": verdict.details, "sha256": state.approved_sha256})
                state = record.transition(con, state.plan_id, Phase.PROVEN, actor,
                                          note="proof slice idempotent and gates passed")
    if state.phase is Phase.RECONCILED:
        verdict = window_verdict(con, state)
        if not verdict.passed:
            with transaction(con):
                state = record.transition(con, state.plan_id, Phase.RUNNING, actor,
                                          note="no longer reconciled: " + verdict.blockers[0])
        return state
    if state.phase in (Phase.PROVEN, Phase.RUNNING):
        verdict = window_verdict(con, state)
        if verdict.passed:
            with transaction(con):
                if state.phase is Phase.PROVEN:
                    state = record.transition(con, state.plan_id, Phase.RUNNING, actor,
                                              note="window already written by the proof")
                evidence_log.append(con, plan_id=state.plan_id, kind="window_reconciled",
                                    actor=actor, payload={"partitions": state.partition_keys,
                                                          "sha256": state.approved_sha256})
                state = record.transition(con, state.plan_id, Phase.RECONCILED, actor,
                                          note="every gate passed on every partition")
    return state

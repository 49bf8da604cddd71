"""Running a slice's gates in the engine and recording what they found.

Results are recorded against the write they judged and carry the fingerprint of the data they
checked. The evidence log gets one row per slice (counts, failures, a digest of every result),
not one per gate and partition, so it stays small for thousands of partitions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from backfill_assets.control import ledger
from backfill_assets.control.record import PlanState
from backfill_assets.control.snapshots import snapshotted
from backfill_assets.errors import WarehouseError
from backfill_assets.gates.changes import changes_result, not_judged
from backfill_assets.gates.cutover import cutover_of
from backfill_assets.gates.dual_run import with_dual_run
from backfill_assets.gates.expectation import Expectation
from backfill_assets.gates.results import (
    CHANGES_AS_EXPECTED,
    CONTRACT_HOLDS,
    GATE_NAMES,
    SINGLE_CODE_VERSION,
    GateResult,
    Thresholds,
    Tolerance,
    as_number,
)
from backfill_assets.gates.verdicts import (
    contract_result,
    duplicate_result,
    metrics_result,
    row_count_result,
    source_duplicates_result,
    unchanged_result,
)
from backfill_assets.identifiers import quote
from backfill_assets.partitions import PartitionScheme
from backfill_assets.plan.model import Scenario
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.change_sql import ChangeFigures, change_figures
from backfill_assets.warehouse.dual_run_sql import dual_run_figures
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import Fingerprint
from backfill_assets.warehouse.gate_sql import SchemaCheck, check_schema, slice_figures
from backfill_assets.warehouse.snapshots import checked_copy, drop_checked_copy, separate_reads, session_copy

UNKNOWN_VERSION = "unknown"


def default_thresholds(spec: TableSpec) -> Thresholds:
    """Gates of plan-free (incremental) writes: exact counts, no duplicates, every metric exact."""
    return Thresholds(0.0, 0, {m.name: Tolerance() for m in spec.metrics})


def thresholds_for(spec: TableSpec, plan: PlanState | None) -> Thresholds:
    return Thresholds.from_plan(plan.approved.plan) if plan is not None else default_thresholds(spec)


def code_version_results(keys: list[str], window: Mapping[str, str | None] | None,
                         required: str | None = None) -> dict[str, GateResult]:
    """One code version per window: every partition's latest write by the window's majority, or by
    `required` (a logic change's new version) when the plan names it."""
    if window is None:
        return {k: GateResult(SINGLE_CODE_VERSION, k, True, None, None, None, None,
                              "not tracked for writes outside a plan") for k in keys}
    counts: dict[str, int] = {}
    for version in window.values():
        label = version or UNKNOWN_VERSION
        counts[label] = counts.get(label, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    majority = ranked[0][0] if ranked and (len(ranked) == 1 or ranked[0][1] > ranked[1][1]) else None
    mix = ", ".join(f"{v} ({n} partition(s))" for v, n in sorted(counts.items()))
    out = {}
    for key in keys:
        version = window.get(key) or UNKNOWN_VERSION
        if required is not None:
            passed = version == required
            detail = (f"code version {version}, the logic change's new version" + (f"; others: {mix}"
                                                                                    if len(counts) > 1 else "")
                      if passed else f"written by code version {version}; the plan's logic change requires "
                      f"{required} in every partition: {mix}")
            out[key] = GateResult(SINGLE_CODE_VERSION, key, passed, required, version,
                                  "the logic change's new code version", dict(counts), detail,
                                  numbers={"versions": len(counts)})
            continue
        if majority is None:
            passed, detail = False, f"the window mixes code versions with no majority: {mix}"
        elif version != majority or version == UNKNOWN_VERSION:
            passed, detail = False, f"written by code version {version}, the window's is {majority}: {mix}"
        elif len(counts) > 1:
            passed, detail = True, f"code version {version}, the window's majority; others: {mix}"
        else:
            passed, detail = True, f"code version {version}, as every written partition of the window"
        out[key] = GateResult(SINGLE_CODE_VERSION, key, passed, majority, version,
                              "one code version per window", dict(counts), detail,
                              numbers={"versions": len(counts)})
    return out


def expectation_results(session: Session, spec: TableSpec, scheme: PartitionScheme, plan: PlanState | None,
                        keys: list[str], data: str | None = None) -> dict[str, GateResult]:
    """`changes_as_expected` for a slice: the plan's snapshot against the data, in one statement.
    `data`: the data's rows as fingerprinted (`_data_as_judged`)."""
    if plan is None:
        return {k: not_judged(k, "not tracked for writes outside a plan") for k in keys}
    expectation = Expectation.for_table(plan.approved.plan, spec)
    if expectation is None:
        why = "no expectation declared" if spec.name == plan.target or plan.approved.plan.expect is None else \
            f"no expectation declared for {spec.name} (the plan's expect: is of its target {plan.target})"
        return {k: not_judged(k, why) for k in keys}
    taken = snapshotted(session, plan.plan_id, spec.table, keys)
    # compared with the rows as checked: on a server engine, a copy of them one statement made
    source, edited = checked_copy(session, spec, scheme, plan.plan_id, spec.table, taken)
    figures = change_figures(session, spec, scheme, plan.plan_id, [k for k in keys if k in taken and k not in edited],
                             expectation, source, data)
    drop_checked_copy(session, source)
    window = _window_sums(session, spec, plan, figures, expectation)
    return {k: changes_result(k, figures[k], expectation, window) if k in figures else
            GateResult(CHANGES_AS_EXPECTED, k, False, None, None, None, None,
                       f"plan {plan.plan_id}'s snapshot of {k} holds other rows ({edited[k][0]}) than were taken "
                       f"({edited[k][1]}): it was edited, so there is nothing true to compare with" if k in edited else
                       f"plan {plan.plan_id} holds no snapshot of {k}: there is nothing to compare with")
            for k in keys}


def dual_run_results(session: Session, spec: TableSpec, scheme: PartitionScheme, scenario: Scenario,
                     changes: Mapping[str, GateResult], data: str | None = None) -> dict[str, GateResult]:
    """A cutover's dual run for a slice: the shadow against the published table in one statement,
    carried by each partition's `changes_as_expected` result (sealed with it); `data`: the shadow's
    rows as fingerprinted (`_data_as_judged`)."""
    assert scenario.tolerance is not None
    figures = dual_run_figures(session, spec, scheme, list(changes), scenario.tolerance.abs, scenario.tolerance.pct,
                               data)
    return {k: with_dual_run(r, figures[k], scenario) for k, r in changes.items()}


def _window_sums(session: Session, spec: TableSpec, plan: PlanState, figures: Mapping[str, ChangeFigures],
                 expectation: Expectation) -> dict[str, tuple[float, float]] | None:
    """Per metric judged over the window: the sums of its old and new figures over every partition
    of the window written so far: this slice's, and the others' as their latest results recorded
    them (figures, not rows: the window is judged without reading it again)."""
    if not expectation.judges_window:
        return None
    names = [n for n, r in expectation.metrics.items() if r.judges_window]
    others = [k for k in plan.keys_of(spec.name) if k not in figures]
    stored = [e.gates[CHANGES_AS_EXPECTED][1].get("numbers") or {}
              for e in ledger.latest(session, spec.name, others, plan.plan_id).values()
              if e is not None and CHANGES_AS_EXPECTED in e.gates] if others else []
    sums = {}
    for name in names:
        # summed as decimals of each figure's shortest text: float sums would drift in the last bits
        old = sum(Decimal(repr(float(as_number(f.old.get(name)) or 0))) for f in figures.values()) + \
            sum(Decimal(repr(float(n.get(f"{name}.old", 0)))) for n in stored)
        new = sum(Decimal(repr(float(as_number(f.new.get(name)) or 0))) for f in figures.values()) + \
            sum(Decimal(repr(float(n.get(f"{name}.new", 0)))) for n in stored)
        sums[name] = (float(old), float(new))
    return sums


def unjudgeable(key: str, spec: TableSpec, schema: SchemaCheck) -> list[GateResult]:
    why = f"not evaluated: {spec.table} lacks column(s) {', '.join(schema.missing)} (see contract_holds)"
    contract = GateResult(CONTRACT_HOLDS, key, False, {"columns": schema.declared},
                          {"missing": list(schema.missing), "extra": list(schema.extra),
                           "mismatched": {c: found for c, (_, found) in schema.mismatched.items()}},
                          0, len(schema.problems), "; ".join(schema.problems),
                          numbers={"problems": len(schema.problems)})
    return [contract if name == CONTRACT_HOLDS else GateResult(name, key, False, None, None, None, None, why)
            for name in GATE_NAMES]


def judge(session: Session, spec: TableSpec, scheme: PartitionScheme, plan: PlanState | None,
          written: Mapping[str, tuple[int | None, Fingerprint | None]], actor: str,
          *, record_results: bool = True, just_written: bool = False) -> dict[str, list[GateResult]]:
    """Every gate on every partition of `written` ({key: (write_id, write fingerprint)}).

    `just_written`: called inside the write's own transaction, holding the writers' lock on the
    partitions (DuckDB: the file; a server engine: each partition's advisory lock), so the data
    checked is the data written, uncommitted still. Its fingerprint is still computed again, in the
    gates' own statement, and compared with the write's: a writer that ignores our locks (another
    session's committed insert between two statements of a server engine's transaction, a trigger
    on the target) could otherwise have the gates pass on bytes other than the ones the write
    recorded, which publish would then copy.
    """
    keys = list(written)
    if not keys:
        return {}
    thresholds = thresholds_for(spec, plan)
    schema = check_schema(session, spec)
    if schema.missing:
        # the slice statement reads every contract column, so without one it cannot run: the
        # contract gate says which is missing and every other gate fails as not evaluated
        results = {k: unjudgeable(k, spec, schema) for k in keys}
        if record_results:
            with session.transaction():
                ledger.record_results(session, plan_id=plan.plan_id if plan else None, asset=spec.name,
                                      judged=[(written[k][0], k, None, results[k]) for k in keys], actor=actor,
                                      summary=summary(spec.name, results, plan.approved_sha256 if plan else None))
        return results
    null_columns = [c.name for c in spec.contract if not c.nullable and c.name not in schema.missing]
    if just_written:
        if not session.in_transaction:
            raise WarehouseError("judging just-written partitions needs their write's transaction",
                                 fix="this is a bug: report it with the log file")
    figures = slice_figures(session, spec, scheme, keys, thresholds, null_columns)
    window = None
    if plan is not None:
        window = ledger.code_versions(session, spec.name, plan.plan_id)
        window.update({k: spec.code_version for k in keys if k not in window})
    scenario = plan.approved.plan.scenario if plan is not None else None
    required = scenario.new_code_version if scenario is not None and scenario.kind == "logic_change" \
        and plan is not None and spec.name == plan.target else None
    versions = code_version_results(keys, window, required)
    data, moved = _data_as_judged(session, spec, scheme, plan, {k: figures[k].fingerprint for k in keys})
    changes = expectation_results(session, spec, scheme, plan, keys, data)
    cutover = cutover_of(plan.approved.plan, spec.name) if plan is not None else None
    if cutover is not None:
        changes = dual_run_results(session, spec, scheme, cutover, changes, data)
    drop_checked_copy(session, data)
    changes.update({k: GateResult(CHANGES_AS_EXPECTED, k, False, None, None, None, None,
                                  f"{k} changed while its gates ran (now {now}): another session wrote it between "
                                  "their statements, so what was compared is not what was judged")
                    for k, now in moved.items()})
    results = {}
    for key in keys:
        f = figures[key]
        results[key] = [
            row_count_result(key, f, thresholds.max_row_diff_pct),
            duplicate_result(key, spec, f, thresholds.max_duplicate_rows),
            metrics_result(key, f, thresholds.metric_tolerances),
            contract_result(key, spec, schema, f),
            versions[key],
            source_duplicates_result(key, spec, f, thresholds.max_source_duplicates),
            unchanged_result(key, f.fingerprint, written[key][1]),
            changes[key],
        ]
        assert [r.gate for r in results[key]] == list(GATE_NAMES)
    if record_results:
        with session.transaction():
            sha = plan.approved_sha256 if plan else None
            ledger.record_results(session, plan_id=plan.plan_id if plan else None, asset=spec.name,
                                  judged=[(written[k][0], k, figures[k].fingerprint, results[k]) for k in keys],
                                  actor=actor, summary=summary(spec.name, results, sha))
    return results


def _data_as_judged(session: Session, spec: TableSpec, scheme: PartitionScheme, plan: PlanState | None,
                    judged: Mapping[str, Fingerprint]) -> tuple[str | None, dict[str, Fingerprint]]:
    """The data the snapshot and the published table are compared with, as the other gates judged
    it. On a server engine another session commits between two statements: the insider's edit of
    the day committed after the gates' fingerprint and before `changes_as_expected` (or the dual
    run) read it, put back after, had the comparison pass on bytes no gate fingerprinted, and
    publish copied the written ones (found by an attack). There the rows are copied by one statement
    into a table of this session's own and fingerprinted: the comparisons read the copy, and a key
    whose copy is not what the gates judged fails them ({key: its fingerprint there})."""
    if plan is None or not separate_reads(session):
        return None, {}
    copy, now = session_copy(session, spec, scheme, quote(spec.table), judged)
    return copy, {k: now[k] for k, fp in judged.items() if now[k] != fp}


def summary(table: str, results: Mapping[str, list[GateResult]], sha: str | None) -> dict[str, Any]:
    """Counts, every failure in full, and a digest of all results (the evidence of a slice)."""
    failed = {k: [r.gate for r in rs if not r.passed] for k, rs in results.items()}
    failed = {k: g for k, g in failed.items() if g}
    digest = hashlib.sha256(json.dumps({k: [r.to_json() for r in rs] for k, rs in sorted(results.items())},
                                       sort_keys=True, default=str).encode()).hexdigest()
    return {"table": table, "partitions": len(results), "first": min(results), "last": max(results),
            "passed": len(results) - len(failed), "failed": failed, "results_sha256": digest,
            "sha256": sha}

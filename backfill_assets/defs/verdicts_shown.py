"""Verdicts the ledger records outside a target's run, shown in the UI as that run's are.

A target's run logs its gates as check evaluations, and the publish asset a refusal of a partition
changed since its gates ran. A CLI `reconcile` judging the window again, and `backfill publish`
refusing before it launches its run, recorded theirs in the ledger only: the UI kept showing the
checks passed on partitions the gates, run last, had failed (found by an attack). Here they become
check evaluations of the target, each on its partition and aimed at the partition's latest
materialization (the check's partition status counts no other), logged by a run of their own
(`backfill_verdicts`, tagged with the plan and the command): Dagster stores a second run-less
evaluation of one partition's check as a duplicate row of its executions table and fails.
"""

# no `from __future__ import annotations`: Dagster reads the op's `context` annotation as a type
from collections.abc import Iterable, Mapping
from typing import Any

import dagster as dg

from backfill_assets.gates.results import UNCHANGED_SINCE_CHECKED, GateResult
from backfill_assets.graph import asset_key
from backfill_assets.tags import VERDICTS_JOB
from backfill_assets.warehouse.fingerprints import Fingerprint

# a partition changed since its gates ran: {partition: (fingerprint now, fingerprint checked, write id)}
Changed = Mapping[str, tuple[Fingerprint, Fingerprint, int]]


def gate_metadata(result: GateResult) -> dict[str, Any]:
    """What a gate's check shows: a passing gate its numbers and its detail; a failing one also its
    whole figures as JSON (the non-numeric ones too, e.g. the code versions): a window stores eight
    evaluations a partition, and the JSON, which repeats the numbers, took a fifth of the time to
    serialize each."""
    metadata: dict[str, Any] = {f"figure.{k}": dg.MetadataValue.float(v) for k, v in result.numbers.items()}
    metadata["detail"] = dg.MetadataValue.text(result.detail)
    if not result.passed:
        metadata["figures"] = dg.MetadataValue.json({"expected": result.expected, "actual": result.actual,
                                                     "threshold": result.threshold,
                                                     "difference": result.difference})
    return metadata


def gate_evaluation(key: dg.AssetKey, result: GateResult, partition: str) -> dg.AssetCheckEvaluation:
    """A gate's result on a partition as the target's check shows it."""
    return dg.AssetCheckEvaluation(asset_key=key, check_name=result.gate, passed=result.passed,
                                   metadata=gate_metadata(result), severity=dg.AssetCheckSeverity.ERROR,
                                   description=result.detail[:1000], blocking=True, partition=partition)


def changed_evaluations(changed_by_asset: Mapping[str, Changed]) -> list[dg.AssetCheckEvaluation]:
    """A failed `unchanged_since_checked` on each partition changed since its gates ran, of each
    table (its target asset's name -> its changed partitions)."""
    return [dg.AssetCheckEvaluation(
        asset_key=asset_key(asset), check_name=UNCHANGED_SINCE_CHECKED, passed=False, partition=key,
        severity=dg.AssetCheckSeverity.ERROR, blocking=True,
        description=f"changed since its gates checked it: now {now}, checked {written}",
        metadata={"now": str(now), "checked": str(written)})
        for asset, changed in changed_by_asset.items() for key, (now, written, _) in changed.items()]


def out_of_date(instance: dg.DagsterInstance,
                verdicts: Mapping[str, Mapping[str, list[GateResult]]]) -> list[dg.AssetCheckEvaluation]:
    """Of each table's (its target asset's name) partitions and their gates' verdicts, the
    evaluations of every partition where the UI's check shows another (or none): all its gates."""
    from backfill_assets.dagster_storage import shown_checks  # Dagster's storages: only when there is one

    out = []
    for asset, parts in verdicts.items():
        key = asset_key(asset)
        names = sorted({g.gate for gates in parts.values() for g in gates})
        shown = shown_checks(instance, key, names, sorted(parts))
        for partition, gates in parts.items():
            if any(shown.get((partition, g.gate)) is not g.passed for g in gates):
                out += [gate_evaluation(key, g, partition) for g in gates]
    return out


def report(instance: dg.DagsterInstance, evaluations: Iterable[dg.AssetCheckEvaluation],
           tags: Mapping[str, str]) -> str | None:
    """The evaluations logged by a run of their own, each aimed at its partition's latest
    materialization; the run's id (None: nothing to show, no run)."""
    from backfill_assets.dagster_storage import with_targets  # Dagster's storages: only when there is one

    aimed = with_targets(instance, list(evaluations))
    if not aimed:
        return None

    @dg.op(name="verdicts")
    def shown(context: dg.OpExecutionContext) -> None:
        for evaluation in aimed:
            context.log_event(evaluation)

    @dg.job(name=VERDICTS_JOB, description="Gate verdicts recorded outside a target's run (reconcile, a publish "
                                           "refused before its run)")
    def job() -> None:
        shown()

    return job.execute_in_process(instance=instance, tags=dict(tags)).run_id

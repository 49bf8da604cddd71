"""The one place that reads Dagster internals: per-partition asset check results.

Dagster 1.13 has no public API to read check results. `tests/test_dagster_compat.py` fails loudly
when an upgrade moves these names; pyproject pins the tested range (dagster>=1.13,<1.14).
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg
from dagster._core.event_api import PartitionKeyFilter


@dataclass(frozen=True)
class CheckState:
    name: str
    status: str          # PLANNED, SUCCEEDED, FAILED, ...
    passed: bool | None  # None until evaluated
    metadata: dict


def latest_check_results(instance: dg.DagsterInstance, asset_key: dg.AssetKey,
                         check_names: list[str], partition: str) -> dict[str, CheckState]:
    keys = [dg.AssetCheckKey(asset_key, name) for name in check_names]
    records = instance.event_log_storage.get_latest_asset_check_execution_by_key(
        keys, partition_filter=PartitionKeyFilter(key=partition))
    out: dict[str, CheckState] = {}
    for key, rec in records.items():
        evaluation = rec.evaluation
        out[key.name] = CheckState(
            key.name, rec.status.value,
            evaluation.passed if evaluation is not None else None,
            {k: v.value for k, v in evaluation.metadata.items()} if evaluation is not None else {})
    return out

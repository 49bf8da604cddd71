"""A cutover's dual run on a partition's `changes_as_expected` result: the figures of the shadow
against the published table (`warehouse/dual_run_sql.py`), told in numbers and one clause.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from backfill_assets.gates.cutover import MATCHED
from backfill_assets.gates.results import CHANGES_AS_EXPECTED, GateResult, as_number

if TYPE_CHECKING:  # the figures are only read here: results stay readable without the warehouse
    from backfill_assets.plan.model import Scenario
    from backfill_assets.warehouse.dual_run_sql import DualRunFigures


def with_dual_run(result: GateResult, f: DualRunFigures, scenario: Scenario) -> GateResult:
    """`changes_as_expected`'s result carrying the partition's dual run: its figures as numbers (the
    UI plots `dual_run.matched` across partitions), the comparison in `actual`, one clause in the
    detail. Its verdict stays the expectation's: the streak, not the partition, decides the cutover."""
    assert result.gate == CHANGES_AS_EXPECTED and scenario.tolerance is not None
    tolerance = scenario.tolerance
    numbers = dict(result.numbers)
    numbers.update({MATCHED: 1 if f.matched else 0, "dual_run.keys.shadow": f.shadow_keys,
                    "dual_run.keys.published": f.published_keys, "dual_run.keys.missing": f.missing,
                    "dual_run.keys.extra": f.extra, "dual_run.keys.mismatched": f.mismatched,
                    "dual_run.tolerance_abs": tolerance.abs, "dual_run.tolerance_pct": tolerance.pct})
    for name, count in f.differing.items():
        numbers[f"dual_run.{name}.keys_differing"] = count
        shadow, published = as_number(f.shadow.get(name)), as_number(f.published.get(name))
        if shadow is not None:
            numbers[f"dual_run.{name}.shadow"] = shadow
        if published is not None:
            numbers[f"dual_run.{name}.published"] = published
        if shadow is not None and published is not None:
            numbers[f"dual_run.{name}.difference"] = shadow - published
    if f.matched:
        clause = (f"dual run: the shadow matches the published table in all {f.shadow_keys} key(s) "
                  f"({tolerance.describe()})")
    else:
        parts = [f"{n} differs in {c} key(s)" for n, c in f.differing.items() if c]
        parts += [f"{f.missing} published key(s) not in the shadow"] if f.missing else []
        parts += [f"{f.extra} shadow key(s) not published"] if f.extra else []
        clause = (f"dual run MISMATCH against the published table ({tolerance.describe()}): {', '.join(parts)}; "
                  f"worst: {f.worst}")
    actual = dict(result.actual) if isinstance(result.actual, dict) else {}
    actual["dual_run"] = {"matched": f.matched, "worst": f.worst, "differing": dict(f.differing),
                          "missing": f.missing, "extra": f.extra,
                          "published_fingerprint": f.published_fingerprint.digest,
                          "published_rows": f.published_fingerprint.rows}
    return dataclasses.replace(result, actual=actual, detail=f"{result.detail}; {clause}", numbers=numbers)

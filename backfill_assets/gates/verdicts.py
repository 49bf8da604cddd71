"""Six gates' verdicts on one partition, from the figures the warehouse computed for its slice.

The statements are the warehouse's (`warehouse/gate_sql.py`): they return counts and totals, and
know no threshold's meaning. Judging them against the plan's thresholds, and saying why in words
and numbers, is the gates' own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from backfill_assets.gates.results import (
    CONTRACT_HOLDS,
    METRICS_MATCH_SOURCE,
    NO_DUPLICATE_BUSINESS_KEYS,
    ROW_COUNT_MATCHES_SOURCE,
    SOURCE_HAS_NO_DUPLICATES,
    UNCHANGED_SINCE_CHECKED,
    GateResult,
    Tolerance,
    as_number,
)
from backfill_assets.table import TableSpec

if TYPE_CHECKING:  # the figures are only read here: results stay readable without the warehouse
    from backfill_assets.warehouse.fingerprints import Fingerprint
    from backfill_assets.warehouse.gate_sql import SchemaCheck, SliceFigures


def row_count_result(key: str, f: SliceFigures, max_pct: float) -> GateResult:
    expected, actual = f.source_groups, f.rows
    diff = abs(actual - expected)
    pct = (diff / expected * 100) if expected else (0.0 if actual == 0 else 100.0)
    passed = pct <= max_pct
    detail = (f"target {actual} rows vs {expected} key groups in the source "
              f"({pct:.2f}% {'<=' if passed else '>'} {max_pct:g}%)")
    return GateResult(ROW_COUNT_MATCHES_SOURCE, key, passed, expected, actual, max_pct, diff, detail,
                      numbers={"expected": expected, "actual": actual, "difference": diff,
                               "threshold_pct": max_pct, "difference_pct": pct})


def duplicate_result(key: str, spec: TableSpec, f: SliceFigures, max_rows: int) -> GateResult:
    passed = f.duplicate_rows <= max_rows
    keys = f"({', '.join(spec.business_keys)})"
    detail = (f"no duplicate {keys}" if not f.duplicate_rows else
              f"{f.duplicate_rows} duplicate row(s) on {keys} ({'<=' if passed else '>'} {max_rows} allowed)")
    return GateResult(NO_DUPLICATE_BUSINESS_KEYS, key, passed, 0, f.duplicate_rows, max_rows,
                      f.duplicate_rows, detail,
                      numbers={"actual": f.duplicate_rows, "threshold": max_rows})


def metrics_result(key: str, f: SliceFigures, tolerances: Mapping[str, Tolerance]) -> GateResult:
    failing = [n for n, count in f.differing.items() if count]
    passed = not failing and not f.missing_groups and not f.extra_groups
    numbers: dict[str, float] = {}
    difference: dict[str, object] = {}
    for name in tolerances:
        exp, act = as_number(f.source_totals.get(name)), as_number(f.target_totals.get(name))
        if exp is not None:
            numbers[f"{name}.expected"] = exp
        if act is not None:
            numbers[f"{name}.actual"] = act
        if exp is not None and act is not None:
            numbers[f"{name}.difference"] = act - exp
            difference[name] = act - exp
        numbers[f"{name}.groups_differing"] = f.differing.get(name, 0)
        numbers[f"{name}.tolerance_abs"] = tolerances[name].abs
        numbers[f"{name}.tolerance_pct"] = tolerances[name].pct
    numbers["groups.missing"], numbers["groups.extra"] = f.missing_groups, f.extra_groups
    if passed:
        detail = (f"{len(tolerances)} metric(s) match the source in all {f.target_groups} key group(s): "
                  + ", ".join(f"{n} {t.describe()}" for n, t in tolerances.items()))
    else:
        parts = [f"{n} differs in {f.differing[n]} group(s) ({tolerances[n].describe()})" for n in failing]
        if f.missing_groups:
            parts.append(f"{f.missing_groups} source group(s) missing in the target")
        if f.extra_groups:
            parts.append(f"{f.extra_groups} target group(s) not in the source")
        detail = "; ".join(parts) + (f"; worst: {f.worst}" if f.worst else "")
    return GateResult(METRICS_MATCH_SOURCE, key, passed, f.source_totals, f.target_totals,
                      {n: {"pct": t.pct, "abs": t.abs} for n, t in tolerances.items()}, difference,
                      detail, numbers=numbers)


def contract_result(key: str, spec: TableSpec, schema: SchemaCheck, f: SliceFigures) -> GateResult:
    null_problems = [f"{c}: {n} NULL(s) in a non-nullable column" for c, n in f.nulls.items() if n]
    problems = schema.problems + null_problems
    difference = sum(f.nulls.values()) + len(schema.problems)
    detail = "; ".join(problems) if problems else (
        f"{len(schema.declared)} columns and types as declared; no NULLs in non-nullable columns")
    return GateResult(CONTRACT_HOLDS, key, not problems,
                      {"columns": schema.declared, "nulls": {c.name: 0 for c in spec.contract if not c.nullable}},
                      {"nulls": f.nulls, "missing": list(schema.missing), "extra": list(schema.extra),
                       "mismatched": {c: found for c, (_, found) in schema.mismatched.items()}},
                      0, difference, detail, numbers={"problems": difference})


def source_duplicates_result(key: str, spec: TableSpec, f: SliceFigures, max_rows: int) -> GateResult:
    if not spec.source_event_id:
        return GateResult(SOURCE_HAS_NO_DUPLICATES, key, True, 0, None, max_rows, None,
                          "not tracked: the table declares no source_event_id")
    passed = f.source_duplicates <= max_rows
    detail = (f"no duplicated {spec.source_event_id} among {f.source_rows} source rows"
              if not f.source_duplicates else
              f"{f.source_duplicates} duplicated {spec.source_event_id} value(s) in the source "
              f"({'<=' if passed else '>'} {max_rows} allowed): a double-loaded source inflates the target")
    return GateResult(SOURCE_HAS_NO_DUPLICATES, key, passed, 0, f.source_duplicates, max_rows,
                      f.source_duplicates, detail,
                      numbers={"actual": f.source_duplicates, "source_rows": f.source_rows})


def unchanged_result(key: str, checked: Fingerprint, written: Fingerprint | None) -> GateResult:
    if written is None:
        return GateResult(UNCHANGED_SINCE_CHECKED, key, False, None, str(checked), "equal", None,
                          "no write recorded for this partition")
    passed = checked == written and not written.legacy
    if written.legacy:
        # a sum of md5s: other rows with the same one can be found, so it shows nothing unchanged
        detail = (f"its write was fingerprinted before the upgrade ({written}), by an algorithm that "
                  "cannot show the data unchanged: re-run the partition through the plan")
    elif passed:
        detail = f"fingerprint {checked} equals the write's"
    else:
        detail = (f"the data now ({checked}) is not what its write produced ({written}): it was "
                  "changed after the write")
    return GateResult(UNCHANGED_SINCE_CHECKED, key, passed, written.digest, checked.digest, "equal",
                      checked.rows - written.rows, detail,
                      numbers={"rows.written": written.rows, "rows.now": checked.rows})

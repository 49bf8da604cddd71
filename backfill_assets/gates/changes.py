"""The gate `changes_as_expected`'s verdict on one partition: the figures of its change against the
plan's snapshot (`warehouse/change_sql.py`), judged against what the plan's `expect` declares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from backfill_assets.gates.expectation import Expectation, difference, judge_movement, percent, same
from backfill_assets.gates.results import CHANGES_AS_EXPECTED, GateResult, as_number

if TYPE_CHECKING:  # the figures are only read here: results stay readable without the warehouse
    from backfill_assets.warehouse.change_sql import ChangeFigures


def not_judged(key: str, why: str) -> GateResult:
    # `judged` 0 plots beside the partitions a plan's expectation did judge (1)
    return GateResult(CHANGES_AS_EXPECTED, key, True, None, None, None, None, why, numbers={"judged": 0})


def changes_result(key: str, f: ChangeFigures, expectation: Expectation,
                   window: Mapping[str, tuple[float, float]] | None = None) -> GateResult:
    """The verdict on one partition. `window`: per metric judged over the window, the (old, new)
    sums over every partition of the window written so far, this one included."""
    problems: list[str] = []
    numbers: dict[str, float] = {"judged": 1 if expectation.declared else 0,
                                 "rows.before": f.rows_before, "rows.after": f.rows_after,
                                 "rows.added": f.added, "rows.removed": f.removed, "rows.changed": f.changed,
                                 "violations": f.violations}
    numbers.update({f"column.{c}.changed": n for c, n in f.columns.items()})
    observed: dict[str, object] = {}
    for name in expectation.all_metrics:
        old, new = f.old.get(name), f.new.get(name)
        diff = difference(old, new)
        for label, value in (("old", old), ("new", new), ("difference", diff)):
            number = as_number(value)
            if number is not None:
                numbers[f"{name}.{label}"] = number
        pct = percent(old, diff or 0.0)
        if pct is not None and diff is not None:
            numbers[f"{name}.difference_pct"] = pct
        observed[name] = {"old": old, "new": new, "difference": diff}
        if not expectation.declared:
            continue
        rule = expectation.metrics.get(name)
        if rule is None:
            if not same(old, new):
                problems.append(f"metric {name} changed {old} -> {new}, not declared in expect.changes")
            continue
        problems += judge_movement(name, old, new, rule.direction, rule.per_partition, "")
    for name, (old, new) in (window or {}).items():
        rule = expectation.metrics[name]
        numbers[f"{name}.window_old"], numbers[f"{name}.window_new"] = old, new
        problems += judge_movement(name, old, new, rule.direction, rule.window, " over the window")
    changed = {c: n for c, n in f.columns.items() if n}
    summary = (f"rows +{f.added} -{f.removed} ~{f.changed} against the snapshot"
               + (f"; changed: {', '.join(f'{c} ({n})' for c, n in changed.items())}" if changed else ""))
    if expectation.declared:
        if expectation.partitions is not None and key not in expectation.partitions and f.any_change:
            problems.insert(0, f"partition {key} may not change (expect.partitions) but did: {f.worst}")
        elif f.violations:
            problems.insert(0, f"{f.violations} key(s) changed beyond expect: {f.worst}")
    passed = not problems
    if not expectation.declared:
        detail = f"no expectation declared; recorded: {summary}"
    elif passed:
        detail = f"as expected: {summary}"
    else:
        detail = "; ".join(problems)
    expected = expectation.to_json() if expectation.declared else None
    actual = {"added": f.added, "removed": f.removed, "changed": f.changed, "columns": changed,
              "metrics": observed}
    return GateResult(CHANGES_AS_EXPECTED, key, passed, expected, actual,
                      {"window": {n: list(v) for n, v in (window or {}).items()}} if window else None,
                      f.violations, detail, numbers=numbers)


"""What a plan says its replay may change (`expect:`), resolved against the table it writes, and
how a declared metric's movement is judged (direction and bounds, per partition and for the window).

The gate `changes_as_expected` compares the plan's snapshot (the partition before the plan's first
write) with the data written: every value column not declared must be byte for byte the same key by
key, keys may appear or disappear only when declared, partitions outside `expect.partitions` may
not change at all, and a metric not declared must keep its figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from types import MappingProxyType
from typing import TYPE_CHECKING

from backfill_assets.gates.results import as_number

if TYPE_CHECKING:
    from backfill_assets.plan.model import Bounds, Plan
    from backfill_assets.table import TableSpec

# An undeclared metric keeps its figure: exactly for DECIMAL and integer figures; a float sum over
# the same rows read in another order may differ in its last bits, which is no change
FLOAT_SAME = 1e-12


@dataclass(frozen=True)
class Limit:
    """Bounds on a metric's movement; each given must hold."""

    max_abs: float | None = None
    max_pct: float | None = None

    @classmethod
    def of(cls, bounds: Bounds | None) -> Limit:
        return cls(bounds.max_abs, bounds.max_pct) if bounds is not None else cls()

    def describe(self) -> str:
        parts = ([f"<= {self.max_abs:g}"] if self.max_abs is not None else []) + \
            ([f"<= {self.max_pct:g}%"] if self.max_pct is not None else [])
        return " and ".join(parts) or "unbounded"


@dataclass(frozen=True)
class MetricRule:
    direction: str | None = None  # up | down | None (either way)
    per_partition: Limit = Limit()
    window: Limit = Limit()

    @property
    def judges_window(self) -> bool:
        return self.direction is not None or self.window != Limit()


@dataclass(frozen=True)
class Expectation:
    """`expect:` against one table. `declared` False: the plan states nothing (a logic change
    without `expect:`), so the comparison is recorded and judges nothing."""

    columns: frozenset[str]                      # value columns that may differ per key
    metrics: Mapping[str, MetricRule]            # metrics whose figures may move, and how
    partitions: frozenset[str] | None = None     # only these may change; None: any
    rows_added: bool = False
    rows_removed: bool = False
    declared: bool = True
    all_metrics: tuple[str, ...] = field(default=())  # every metric of the table, compared
    summary: str = ""                                  # the plan's words (`Expect.describe`)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metrics", MappingProxyType(dict(self.metrics)))

    @property
    def judges_window(self) -> bool:
        return self.declared and any(r.judges_window for r in self.metrics.values())

    def to_json(self) -> dict[str, object]:
        return {"columns": sorted(self.columns), "partitions": sorted(self.partitions) if self.partitions else None,
                "rows_added": self.rows_added, "rows_removed": self.rows_removed,
                "metrics": {n: {"direction": r.direction,
                                "per_partition": {"max_abs": r.per_partition.max_abs,
                                                  "max_pct": r.per_partition.max_pct},
                                "window": {"max_abs": r.window.max_abs, "max_pct": r.window.max_pct}}
                            for n, r in self.metrics.items()}}

    @classmethod
    def for_table(cls, plan: Plan, spec: TableSpec) -> Expectation | None:
        """What the plan expects of `spec`; None when there is nothing to compare (no `expect:` and
        no logic change, or a table of the graph other than the plan's target)."""
        if spec.name != plan.target:
            return None
        metrics = tuple(m.name for m in spec.metrics)
        expect = plan.expect
        if expect is None:
            if plan.scenario is not None and plan.scenario.kind == "logic_change":
                return cls(frozenset(spec.value_columns), {m: MetricRule() for m in metrics}, None, True, True,
                           declared=False, all_metrics=metrics)
            return None
        names = {c.name for c in expect.changes}
        rules = {c.name: MetricRule(c.direction, Limit.of(c.per_partition), Limit.of(c.window))
                 for c in expect.changes if c.name in metrics}
        return cls(frozenset(n for n in names if n in spec.value_columns), rules,
                   frozenset(expect.partitions) if expect.partitions is not None else None,
                   expect.rows_added, expect.rows_removed, all_metrics=metrics, summary=expect.describe())

    def unexpected(self, partition: str, status: str, moved: list[str]) -> list[str]:
        """What of one key's change the plan did not declare (`backfill diff` marks it): the
        partition, a key added or removed, or each moved metric or column not declared."""
        if not self.declared:
            return []
        if self.partitions is not None and partition not in self.partitions:
            return ["partition"]
        if status == "added" and not self.rows_added:
            return ["added"]
        if status == "removed" and not self.rows_removed:
            return ["removed"]
        return [n for n in moved if n not in self.metrics and n not in self.columns]


def difference(old: object, new: object) -> float | None:
    """new - old, a side without a figure counting as 0 (no rows); exact for DECIMALs and integers."""
    if old is None and new is None:
        return None
    if isinstance(old, int | Decimal | None) and isinstance(new, int | Decimal | None) \
            and not isinstance(old, bool) and not isinstance(new, bool):
        return float(Decimal(new or 0) - Decimal(old or 0))
    return (as_number(new) or 0.0) - (as_number(old) or 0.0)


def same(old: object, new: object) -> bool:
    if old is None or new is None:
        return old is None and new is None
    if isinstance(old, float) or isinstance(new, float):
        a, b = as_number(old), as_number(new)
        return a is not None and b is not None and math.isclose(a, b, rel_tol=FLOAT_SAME, abs_tol=0.0)
    return old == new


def percent(old: object, diff: float) -> float | None:
    """The movement in percent of the old figure; None when the old figure is 0 or none and it moved
    (no percentage measures it: every max_pct fails)."""
    base = abs(as_number(old) or 0.0)
    if base == 0:
        return 0.0 if diff == 0 else None
    return abs(diff) / base * 100


def judge_movement(name: str, old: object, new: object, direction: str | None, limit: Limit,
                   where: str) -> list[str]:
    """What is wrong with a metric moving from `old` to `new` (`where`: "" or " over the window")."""
    diff = difference(old, new) or 0.0
    problems = []
    if direction == "up" and diff < 0:
        problems.append(f"{name}{where} went down {_fmt(old)} -> {_fmt(new)} ({diff:+.15g}); expected up")
    if direction == "down" and diff > 0:
        problems.append(f"{name}{where} went up {_fmt(old)} -> {_fmt(new)} ({diff:+.15g}); expected down")
    if limit.max_abs is not None and abs(diff) > limit.max_abs:
        problems.append(f"{name}{where} moved {diff:+.15g} ({_fmt(old)} -> {_fmt(new)}), more than "
                        f"max_abs {limit.max_abs:g}")
    if limit.max_pct is not None:
        pct = percent(old, diff)
        if pct is None or pct > limit.max_pct:
            shown = "from nothing" if pct is None else f"{pct:.4g}%"
            problems.append(f"{name}{where} moved {shown} ({_fmt(old)} -> {_fmt(new)}), more than "
                            f"max_pct {limit.max_pct:g}%")
    return problems


def _fmt(value: object) -> str:
    # 15 significant digits: a float's figure without the noise of its last bits
    return "NULL" if value is None else f"{value:.15g}" if isinstance(value, float) else str(value)

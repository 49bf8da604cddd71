"""Gate names, thresholds and per-partition gate results.

A result carries its figures as plain JSON values so it can be logged as Dagster check metadata and
stored in the control record without a custom encoder, and read back unchanged.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from backfill_assets.errors import UsageError

if TYPE_CHECKING:
    from backfill_assets.plan.model import Plan

ROW_COUNT_MATCHES_SOURCE = "row_count_matches_source"
NO_DUPLICATE_BUSINESS_KEYS = "no_duplicate_business_keys"
METRICS_MATCH_SOURCE = "metrics_match_source"
CONTRACT_HOLDS = "contract_holds"
SINGLE_CODE_VERSION = "single_code_version"

GATE_NAMES: tuple[str, ...] = (
    ROW_COUNT_MATCHES_SOURCE,
    NO_DUPLICATE_BUSINESS_KEYS,
    METRICS_MATCH_SOURCE,
    CONTRACT_HOLDS,
    SINGLE_CODE_VERSION,
)


@dataclass(frozen=True)
class Thresholds:
    """The plan's `checks` block: what each gate tolerates. Percentages are 0-100."""

    max_row_diff_pct: float
    max_duplicate_rows: int
    metric_tolerance_pct: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # a frozen dataclass holding a plain dict could still be mutated through that dict
        frozen = MappingProxyType({str(k): float(v) for k, v in self.metric_tolerance_pct.items()})
        object.__setattr__(self, "metric_tolerance_pct", frozen)
        if self.max_row_diff_pct < 0 or self.max_duplicate_rows < 0 or any(
                v < 0 for v in frozen.values()):
            raise UsageError("gate thresholds must not be negative",
                             fix="give percentages between 0 and 100 and a row count >= 0")

    def __hash__(self) -> int:
        # mappingproxy is not hashable; hash its items instead so Thresholds can key a cache
        return hash((self.max_row_diff_pct, self.max_duplicate_rows,
                     tuple(sorted(self.metric_tolerance_pct.items()))))

    @classmethod
    def from_plan(cls, plan: Plan) -> Thresholds:
        checks = plan.checks
        return cls(
            max_row_diff_pct=float(checks.row_count_parity.max_diff_pct),
            max_duplicate_rows=int(checks.duplicates.max_rows),
            metric_tolerance_pct={m.name: float(m.tolerance_pct) for m in checks.metrics},
        )


def pct_diff(expected: object, actual: object) -> float:
    """|actual - expected| / |expected| * 100; a zero baseline gives 0 or 100, never inf (not JSON).

    NULL (an aggregate over no rows) counts as 0, so a missing partition differs by 100%.
    """
    e, a = _decimal(expected), _decimal(actual)
    if e == 0:
        return 0.0 if a == 0 else 100.0
    return float(abs(a - e) / abs(e) * 100)


def _decimal(value: object) -> Decimal:
    if value is None:
        return Decimal(0)
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool | int):
        return Decimal(int(value))
    if isinstance(value, float):
        # via str so 0.1 compares as 0.1, not as its binary expansion
        return Decimal(repr(value))
    raise UsageError(f"gate figure {value!r} is not a number",
                     fix="make the metric or expected-rows expression return a number")


def plain(value: object) -> Any:
    """A JSON-able copy: Decimal -> float, dates -> ISO text, tuples -> lists, keys -> str."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        return float(value) if value.is_finite() else str(value)
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    return str(value)


@dataclass(frozen=True)
class GateResult:
    """One gate on one partition. Figures are plain JSON values (see `plain`)."""

    gate: str
    partition_key: str
    passed: bool
    expected: object
    actual: object
    threshold: object
    difference: object
    detail: str

    def __post_init__(self) -> None:
        if self.gate not in GATE_NAMES:
            raise UsageError(f"unknown gate {self.gate!r}", fix=f"use one of: {', '.join(GATE_NAMES)}")
        for name in ("expected", "actual", "threshold", "difference"):
            object.__setattr__(self, name, plain(getattr(self, name)))

    def metadata(self) -> dict[str, object]:
        """Dagster check metadata: scalars stay scalars, dicts become JSON metadata."""
        return {
            "partition": self.partition_key,
            "expected": self.expected,
            "actual": self.actual,
            "threshold": self.threshold,
            "difference": self.difference,
            "detail": self.detail,
        }

    def to_json(self) -> dict[str, object]:
        return {
            "gate": self.gate,
            "partition_key": self.partition_key,
            "passed": self.passed,
            "expected": self.expected,
            "actual": self.actual,
            "threshold": self.threshold,
            "difference": self.difference,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> GateResult:
        try:
            return cls(
                gate=str(data["gate"]),
                partition_key=str(data["partition_key"]),
                passed=bool(data["passed"]),
                expected=data.get("expected"),
                actual=data.get("actual"),
                threshold=data.get("threshold"),
                difference=data.get("difference"),
                detail=str(data.get("detail", "")),
            )
        except KeyError as exc:
            raise UsageError(f"stored gate result lacks {exc.args[0]!r}",
                             fix="store results with GateResult.to_json()") from None


def all_passed(results: Mapping[str, list[GateResult]]) -> bool:
    """True when every gate passed on every partition of a slice."""
    return all(r.passed for per_partition in results.values() for r in per_partition)


def failures(results: Mapping[str, list[GateResult]]) -> list[GateResult]:
    """The failed results of a slice, by partition then gate order."""
    return [r for key in sorted(results) for r in results[key] if not r.passed]

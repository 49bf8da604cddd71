"""Gate names, thresholds and per-partition gate results.

A result carries its figures as plain JSON values so it can be stored in the control record and
read back unchanged, and as numeric Dagster metadata so the UI can plot them across partitions.
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
SOURCE_HAS_NO_DUPLICATES = "source_has_no_duplicates"
UNCHANGED_SINCE_CHECKED = "unchanged_since_checked"
CHANGES_AS_EXPECTED = "changes_as_expected"

GATE_NAMES: tuple[str, ...] = (
    ROW_COUNT_MATCHES_SOURCE,
    NO_DUPLICATE_BUSINESS_KEYS,
    METRICS_MATCH_SOURCE,
    CONTRACT_HOLDS,
    SINGLE_CODE_VERSION,
    SOURCE_HAS_NO_DUPLICATES,
    UNCHANGED_SINCE_CHECKED,
    CHANGES_AS_EXPECTED,
)

GATE_DESCRIPTIONS = {
    ROW_COUNT_MATCHES_SOURCE: "The target holds one row per business-key group of the source, "
                              "within the plan's max_diff_pct.",
    NO_DUPLICATE_BUSINESS_KEYS: "Rows sharing the business keys stay within max_rows.",
    METRICS_MATCH_SOURCE: "Every checked metric matches the source in every business-key group "
                          "(no swapped, moved, missing or extra group), within tolerance.",
    CONTRACT_HOLDS: "Column names, types and nullability are as declared.",
    SINGLE_CODE_VERSION: "Every partition of the window was written by the same code version.",
    SOURCE_HAS_NO_DUPLICATES: "The source partition holds no duplicated event ids, so parity is "
                              "not measured against a double-loaded source.",
    UNCHANGED_SINCE_CHECKED: "The partition's data is byte for byte what its write produced and "
                             "the gates checked (fingerprints equal).",
    CHANGES_AS_EXPECTED: "Against the plan's snapshot, only what the plan's expect: declares changed: "
                         "every other column is byte for byte as before, key by key, and each declared "
                         "metric moved in its direction and within its bounds.",
}


@dataclass(frozen=True)
class Tolerance:
    """How far a metric may differ from the source: within either bound passes.

    `pct` is in percent of the source figure (0.01 means 0.01%, one part in ten thousand);
    `abs` is in the metric's own unit. Both 0 (the default) means exact.
    """

    pct: float = 0.0
    abs: float = 0.0

    def __post_init__(self) -> None:
        if not (0 <= self.pct <= 100) or self.abs < 0 or math.isnan(self.abs):
            raise UsageError("a metric tolerance must be 0-100 percent and a non-negative amount",
                             fix="give tolerance_pct between 0 and 100 and tolerance_abs >= 0")

    def describe(self) -> str:
        if not self.pct and not self.abs:
            return "exact"
        parts = ([f"{_num(self.abs)}"] if self.abs else []) + ([f"{_num(self.pct)}%"] if self.pct else [])
        return "within " + " or ".join(parts)


@dataclass(frozen=True)
class Thresholds:
    """The plan's `gates` block: what each gate tolerates."""

    max_row_diff_pct: float
    max_duplicate_rows: int
    metric_tolerances: Mapping[str, Tolerance] = field(default_factory=dict)
    max_source_duplicates: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "metric_tolerances", MappingProxyType(dict(self.metric_tolerances)))
        if self.max_row_diff_pct < 0 or self.max_duplicate_rows < 0 or self.max_source_duplicates < 0:
            raise UsageError("gate thresholds must not be negative",
                             fix="give percentages between 0 and 100 and row counts >= 0")

    def __hash__(self) -> int:
        return hash((self.max_row_diff_pct, self.max_duplicate_rows, self.max_source_duplicates,
                     tuple(sorted(self.metric_tolerances.items()))))

    @classmethod
    def from_plan(cls, plan: Plan) -> Thresholds:
        gates = plan.gates
        return cls(
            max_row_diff_pct=float(gates.row_count_parity.max_diff_pct),
            max_duplicate_rows=int(gates.duplicates.max_rows),
            metric_tolerances={m.name: Tolerance(float(m.tolerance_pct), float(m.tolerance_abs))
                               for m in gates.metrics},
            max_source_duplicates=int(gates.source_duplicates.max_rows),
        )


def as_number(value: object) -> float | None:
    """A figure as a float, or None when it is no number (NULL, text, a bool)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float | Decimal):
        return float(value)
    return None


def _num(value: float) -> str:
    return f"{value:g}"


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
    """One gate on one partition. Figures are plain JSON values (see `plain`).

    `numbers` are the figures worth plotting across partitions, by name (e.g.
    `net_revenue.expected`); Dagster shows them as numeric metadata.
    """

    gate: str
    partition_key: str
    passed: bool
    expected: object
    actual: object
    threshold: object
    difference: object
    detail: str
    numbers: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.gate not in GATE_NAMES:
            raise UsageError(f"unknown gate {self.gate!r}", fix=f"use one of: {', '.join(GATE_NAMES)}")
        for name in ("expected", "actual", "threshold", "difference"):
            object.__setattr__(self, name, plain(getattr(self, name)))
        clean = {k: float(v) for k, v in self.numbers.items()
                 if isinstance(v, int | float | Decimal) and not isinstance(v, bool)
                 and math.isfinite(float(v))}
        object.__setattr__(self, "numbers", MappingProxyType(clean))

    def to_json(self) -> dict[str, object]:
        return {"gate": self.gate, "partition_key": self.partition_key, "passed": self.passed,
                "expected": self.expected, "actual": self.actual, "threshold": self.threshold,
                "difference": self.difference, "detail": self.detail, "numbers": dict(self.numbers)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GateResult:
        try:
            return cls(gate=str(data["gate"]), partition_key=str(data["partition_key"]),
                       passed=bool(data["passed"]), expected=data.get("expected"),
                       actual=data.get("actual"), threshold=data.get("threshold"),
                       difference=data.get("difference"), detail=str(data.get("detail", "")),
                       numbers=data.get("numbers") or {})
        except KeyError as exc:
            raise UsageError(f"stored gate result lacks {exc.args[0]!r}",
                             fix="store results with GateResult.to_json()") from None

"""Reconciliation gates: names, thresholds and per-partition results.

The SQL that computes them lives in `backfill_assets.warehouse.gate_sql.evaluate_slice`; this
package stays free of warehouse imports so results can be read back without DuckDB.
"""

from backfill_assets.gates.results import (
    CONTRACT_HOLDS,
    GATE_NAMES,
    METRICS_MATCH_SOURCE,
    NO_DUPLICATE_BUSINESS_KEYS,
    ROW_COUNT_MATCHES_SOURCE,
    SINGLE_CODE_VERSION,
    GateResult,
    Thresholds,
    all_passed,
    failures,
    pct_diff,
)

__all__ = [
    "CONTRACT_HOLDS",
    "GATE_NAMES",
    "METRICS_MATCH_SOURCE",
    "NO_DUPLICATE_BUSINESS_KEYS",
    "ROW_COUNT_MATCHES_SOURCE",
    "SINGLE_CODE_VERSION",
    "GateResult",
    "Thresholds",
    "all_passed",
    "failures",
    "pct_diff",
]

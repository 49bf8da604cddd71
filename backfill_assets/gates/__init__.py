"""Reconciliation gates: their names, thresholds and per-partition results.

The SQL that computes their figures lives in `backfill_assets.warehouse` (`gate_sql`, `change_sql`,
`dual_run_sql`), which imports nothing from here; the verdicts on those figures are here
(`verdicts`, `changes`, `dual_run`); running a slice's gates and recording them in
`backfill_assets.execution.audit`. This package imports the warehouse for type names only, so
results can be read back anywhere.
"""

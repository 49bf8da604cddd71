"""Reconciliation gates: their names, thresholds and per-partition results.

The SQL that computes them lives in `backfill_assets.warehouse.gate_sql`; running a slice's gates
and recording them in `backfill_assets.execution.audit`; this package stays free of warehouse
imports so results can be read back anywhere.
"""

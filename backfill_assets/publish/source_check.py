"""Late source rows: a plan's window is published only while its source is what its gates compared.

The gates judge a partition's bytes against the source as it stood then; publish checks the bytes,
and, for partitions an active plan holds, that the source's side of the gates is still the same:
its key groups, rows, duplicated event ids and each checked metric's total, computed again in one
statement under publish's locks and compared with the figures the latest verdicts recorded. A row
landing in the source after `reconcile` (late data) was published over, its verdict "matches the
source" no longer true (found by the seed round). Partitions written without a plan keep the rule
they had: a team's daily table whose source still receives rows for today is published as its gates
found it, and its next run picks the rows up.

Totals are not all the gates compared: they compare the target with the source key group by key
group. A late correction that moved an order from one region to another left every figure above as
recorded, and publish copied a day whose two regions no longer matched the source (found by an
attack); so the window's groups are compared with the source again, as the gates did, with the
plan's tolerances (`gate_sql.slice_figures`), for the partitions whose figures held.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from backfill_assets.control import ledger
from backfill_assets.gates.results import (
    METRICS_MATCH_SOURCE,
    ROW_COUNT_MATCHES_SOURCE,
    SOURCE_HAS_NO_DUPLICATES,
    Thresholds,
    as_number,
    plain,
)
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import TableSpec
from backfill_assets.warehouse import SLICE_PARTITIONS
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.gate_sql import SourceFigures, slice_figures, source_figures


def source_moved(session: Session, spec: TableSpec, scheme: PartitionScheme,
                 held: Mapping[str, Thresholds]) -> dict[str, str]:
    """{key: what changed} for each key (of `held`: key -> its plan's thresholds) whose source is not
    what its latest verdicts compared; read in slices (the recorded figures of a few thousand
    partitions would not stay small in Python)."""
    moved: dict[str, str] = {}
    keys = list(held)
    for i in range(0, len(keys), SLICE_PARTITIONS):
        part = keys[i:i + SLICE_PARTITIONS]
        recorded = {k: e.gates for k, e in ledger.latest(session, spec.name, part).items() if e is not None}
        names = sorted({n for gates in recorded.values()
                        for n in _figures(gates, METRICS_MATCH_SOURCE).get("expected") or {}})
        unknown = [n for n in names if n not in {m.name for m in spec.metrics}]
        if unknown:  # definitions other than the judging ones: refused by the code identity check too
            moved.update({k: f"its gates compared metric {unknown[0]}, which the loaded definitions do not declare"
                          for k in recorded})
            continue
        now = source_figures(session, spec, scheme, list(recorded), names)
        for key, gates in recorded.items():
            why = _difference(gates, now[key])
            if why:
                moved[key] = why
        moved.update(_groups_moved(session, spec, scheme, {k: held[k] for k in recorded if k not in moved}))
    return moved


def _groups_moved(session: Session, spec: TableSpec, scheme: PartitionScheme,
                  held: Mapping[str, Thresholds]) -> dict[str, str]:
    """{key: which groups} for each key whose target no longer matches its source group by group, by
    the gates' own statement and the plan's tolerances (the target's bytes are the ones they judged:
    publish checked their fingerprints)."""
    by_plan: dict[Thresholds, list[str]] = {}
    for key, thresholds in held.items():
        by_plan.setdefault(thresholds, []).append(key)
    out: dict[str, str] = {}
    for thresholds, keys in by_plan.items():
        for key, f in slice_figures(session, spec, scheme, keys, thresholds, []).items():
            parts = [f"{name} differs in {n} key group(s)" for name, n in f.differing.items() if n]
            if f.missing_groups:
                parts.append(f"{f.missing_groups} source key group(s) not in the target")
            if f.extra_groups:
                parts.append(f"{f.extra_groups} target key group(s) no longer in the source")
            if parts:
                out[key] = ", ".join(parts)
    return out


def _figures(gates: Mapping[str, tuple[bool, dict[str, Any]]], gate: str) -> dict[str, Any]:
    found = gates.get(gate)
    return found[1] if found is not None else {}


def _difference(gates: Mapping[str, tuple[bool, dict[str, Any]]], now: SourceFigures) -> str:
    """What differs between the source's figures the verdicts recorded and `now` ("" when nothing)."""
    rows = _figures(gates, ROW_COUNT_MATCHES_SOURCE)
    if rows and rows.get("expected") != now.groups:
        return f"{rows.get('expected')} key group(s) then, {now.groups} now"
    dupes = _figures(gates, SOURCE_HAS_NO_DUPLICATES)
    counted = (dupes.get("numbers") or {}).get("source_rows")
    if counted is not None and int(counted) != now.rows:
        return f"{int(counted)} row(s) then, {now.rows} now"
    if dupes.get("actual") is not None and dupes.get("actual") != now.duplicates:
        return f"{dupes.get('actual')} duplicated event id(s) then, {now.duplicates} now"
    for name, then in (_figures(gates, METRICS_MATCH_SOURCE).get("expected") or {}).items():
        if not _same(then, plain(now.totals.get(name))):
            return f"{name} {then} then, {plain(now.totals.get(name))} now"
    return ""


def _same(then: object, now: object) -> bool:
    """Totals as recorded (JSON: a DECIMAL's as a float) against totals now; a float sum's last bits
    depend on the order DuckDB adds in, never a row's worth."""
    a, b = as_number(then), as_number(now)
    if a is None or b is None:
        return then == now
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)

"""Late source rows: a plan's window is published only while its source is what its gates compared.

The gates judge a partition's bytes against the source as it stood then; publish checks the bytes,
and, for partitions an active plan holds, that the source's side of the gates is still the same:
its key groups, rows, duplicated event ids and each checked metric's total, computed again in one
statement under publish's locks and compared with the figures the latest verdicts recorded. A row
landing in the source after `reconcile` (late data) was published over, its verdict "matches the
source" no longer true (found by the seed round). Partitions written without a plan keep the rule
they had: a team's daily table whose source still receives rows for today is published as its gates
found it, and its next run picks the rows up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from backfill_assets.control import ledger
from backfill_assets.gates.results import (
    METRICS_MATCH_SOURCE,
    ROW_COUNT_MATCHES_SOURCE,
    SOURCE_HAS_NO_DUPLICATES,
    as_number,
    plain,
)
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import TableSpec
from backfill_assets.warehouse import SLICE_PARTITIONS
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.gate_sql import SourceFigures, source_figures


def source_moved(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: Sequence[str]) -> dict[str, str]:
    """{key: what changed} for each key whose source is not what its latest verdicts compared. The
    verdicts are read in slices, keeping only the source's figures (the whole figures of a few
    thousand partitions would not stay small in Python); the source in one statement."""
    keys = list(dict.fromkeys(keys))
    recorded: dict[str, Recorded] = {}
    for i in range(0, len(keys), SLICE_PARTITIONS):
        for key, entry in ledger.latest(session, spec.name, keys[i:i + SLICE_PARTITIONS]).items():
            if entry is not None:
                recorded[key] = _recorded(entry.gates)
    names = sorted({n for r in recorded.values() for n in r.totals})
    unknown = [n for n in names if n not in {m.name for m in spec.metrics}]
    if unknown:  # definitions other than the judging ones: refused by the code identity check too
        return {k: f"its gates compared metric {unknown[0]}, which the loaded definitions do not declare"
                for k in recorded}
    now = source_figures(session, spec, scheme, list(recorded), names) if recorded else {}
    return {key: why for key, r in recorded.items() if (why := _difference(r, now[key]))}


@dataclass(frozen=True)
class Recorded:
    """The source's figures a partition's latest verdicts recorded (None: that gate recorded none)."""

    groups: object
    rows: object
    duplicates: object
    totals: dict[str, object]


def _recorded(gates: Mapping[str, tuple[bool, dict[str, Any]]]) -> Recorded:
    dupes = _figures(gates, SOURCE_HAS_NO_DUPLICATES)
    return Recorded(_figures(gates, ROW_COUNT_MATCHES_SOURCE).get("expected"),
                    (dupes.get("numbers") or {}).get("source_rows"), dupes.get("actual"),
                    dict(_figures(gates, METRICS_MATCH_SOURCE).get("expected") or {}))


def _figures(gates: Mapping[str, tuple[bool, dict[str, Any]]], gate: str) -> dict[str, Any]:
    found = gates.get(gate)
    return found[1] if found is not None else {}


def _difference(then: Recorded, now: SourceFigures) -> str:
    """What differs between the source's figures the verdicts recorded and `now` ("" when nothing)."""
    if then.groups is not None and then.groups != now.groups:
        return f"{then.groups} key group(s) then, {now.groups} now"
    if then.rows is not None and as_number(then.rows) != now.rows:
        return f"{int(as_number(then.rows) or 0)} row(s) then, {now.rows} now"
    if then.duplicates is not None and then.duplicates != now.duplicates:
        return f"{then.duplicates} duplicated event id(s) then, {now.duplicates} now"
    for name, total in then.totals.items():
        if not _same(total, plain(now.totals.get(name))):
            return f"{name} {total} then, {plain(now.totals.get(name))} now"
    return ""


def _same(then: object, now: object) -> bool:
    """Totals as recorded (JSON: a DECIMAL's as a float) against totals now; a float sum's last bits
    depend on the order DuckDB adds in, never a row's worth."""
    a, b = as_number(then), as_number(now)
    if a is None or b is None:
        return then == now
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)

"""Late source rows: a plan's window is published only while its source is what its gates compared.

The gates judge a partition's bytes against the source as it stood then; publish checks the bytes,
and, for partitions an active plan holds, that the gates' comparison still holds: their own
statement again under publish's locks (one a slice), the target key group by key group against the
source with the plan's tolerances, and the source's figures (key groups, rows, duplicated event ids,
each checked metric's total) against the ones the latest verdicts recorded. A row landing in the
source after `reconcile` (late data) was published over, its verdict "matches the source" no longer
true (found by the seed round); a correction that moved an order between two regions of a day
changed no total (found by an attack). Partitions written without a plan keep the rule they had: a
team's daily table whose source still receives rows for today is published as its gates found it,
and its next run picks the rows up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
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
from backfill_assets.warehouse.gate_sql import SliceFigures, slice_figures

# (table, partition) -> the write whose gates this process compared with the source while it holds
# the warehouse (`Session.memo_while_locked`): marked by `reconcile` alone, which runs in the CLI,
# where no code but the product's own runs, so nothing wrote the source since
COMPARED = "source_check.compared"


def remember_compared(session: Session, spec: TableSpec, judged: Mapping[str, int]) -> None:
    """`reconcile` compared these partitions ({key: write id}) with the source just now: a publish in
    the same process, the file held all along (`run --and-publish`), need not compare them again
    (~0.25 s of a 365-partition publish's ~0.65). Marked once the verdicts commit."""
    held = session.memo_while_locked()
    if held is None:
        return
    marks: dict[tuple[str, str], int] = held.setdefault(COMPARED, {})

    def mark() -> None:
        marks.update({(spec.name, key): write_id for key, write_id in judged.items()})

    if session.in_transaction:
        session.after_commit(mark)
    else:
        mark()


def source_moved(session: Session, spec: TableSpec, scheme: PartitionScheme, held: Mapping[str, Thresholds],
                 latest: Mapping[str, ledger.LatestWrite | None] | None = None) -> dict[str, str]:
    """{key: what changed} for each key (of `held`: key -> its plan's thresholds) whose source is not
    what its latest verdicts compared: the gates' own statement again, one a slice (it returns the
    source's figures too), against the figures the verdicts recorded, read a slice at a time and
    kept compact (the whole figures of a few thousand partitions would not stay small in Python).
    Not asked again: a key whose latest write (`latest`, as the caller read it) this process's
    reconcile compared while it has held the warehouse since (`remember_compared`)."""
    moved: dict[str, str] = {}
    memo = session.memo_while_locked()
    compared: dict[tuple[str, str], int] = (memo or {}).get(COMPARED, {})
    keys = [k for k in held
            if not (latest is not None and (entry := latest.get(k)) is not None
                    and compared.get((spec.name, k)) == entry.write_id)]
    for i in range(0, len(keys), SLICE_PARTITIONS):
        read = ledger.latest(session, spec.name, keys[i:i + SLICE_PARTITIONS])
        recorded = {k: _recorded(e.gates) for k, e in read.items() if e is not None}
        by_plan: dict[Thresholds, list[str]] = {}
        for key in recorded:
            by_plan.setdefault(held[key], []).append(key)
        for thresholds, part in by_plan.items():
            unknown = [n for n in thresholds.metric_tolerances if n not in {m.name for m in spec.metrics}]
            if unknown:  # definitions other than the judging ones: refused by the code identity check too
                moved.update({k: f"its gates compared metric {unknown[0]}, which the loaded definitions do not "
                                 "declare" for k in part})
                continue
            for key, now in slice_figures(session, spec, scheme, part, thresholds, []).items():
                why = _difference(recorded[key], now) or _groups_differ(now)
                if why:
                    moved[key] = why
    return moved


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


def _difference(then: Recorded, now: SliceFigures) -> str:
    """What differs between the source's figures the verdicts recorded and `now` ("" when nothing)."""
    if then.groups is not None and then.groups != now.source_groups:
        return f"{then.groups} key group(s) then, {now.source_groups} now"
    if then.rows is not None and as_number(then.rows) != now.source_rows:
        return f"{int(as_number(then.rows) or 0)} row(s) then, {now.source_rows} now"
    if then.duplicates is not None and then.duplicates != now.source_duplicates:
        return f"{then.duplicates} duplicated event id(s) then, {now.source_duplicates} now"
    for name, total in then.totals.items():
        if name in now.source_totals and not _same(total, plain(now.source_totals[name])):
            return f"{name} {total} then, {plain(now.source_totals[name])} now"
    return ""


def _groups_differ(now: SliceFigures) -> str:
    """Key groups whose target no longer matches the source, by the plan's tolerances (a correction
    that moved an order between two regions of a day changes no total: found by an attack); the
    target's bytes are the ones the gates judged (their fingerprints were checked first)."""
    parts = [f"{name} differs in {n} key group(s)" for name, n in now.differing.items() if n]
    if now.missing_groups:
        parts.append(f"{now.missing_groups} source key group(s) not in the target")
    if now.extra_groups:
        parts.append(f"{now.extra_groups} target key group(s) no longer in the source")
    return ", ".join(parts)


def _same(then: object, now: object) -> bool:
    """Totals as recorded (JSON: a DECIMAL's as a float) against totals now; a float sum's last bits
    depend on the order DuckDB adds in, never a row's worth."""
    a, b = as_number(then), as_number(now)
    if a is None or b is None:
        return then == now
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)

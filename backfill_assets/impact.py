"""The impact of a backfill: what it changed, partition by partition and key by key.

Before is the snapshot taken before the plan's first write of each partition; after is the data
now. Computed in the engine: one hash pass per side finds the partitions that changed at all, then
one statement over those partitions only (as many at once as their rows allow) finds the rows that
differ by their row hash, the business keys they hold, and groups only those keys on each side to
evaluate the table's metric expressions per key. Only per-partition counts and totals and the few keys that changed
most come back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from backfill_assets.control.record import PlanState
from backfill_assets.control.snapshots import snapshotted
from backfill_assets.errors import ForgedRecord
from backfill_assets.gates.expectation import Expectation, judge_movement
from backfill_assets.gates.results import as_number
from backfill_assets.identifiers import qualified, quote
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import TableSpec
from backfill_assets.warehouse import SLICE_PARTITIONS
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.impact_sql import changed_rows, row_hash_totals
from backfill_assets.warehouse.snapshot_tables import SNAPSHOT_SCHEMA, snapshot_in
from backfill_assets.warehouse.snapshots import changed_rows as snapshot_changed

# rows (before and after) of the changed partitions one statement compares at most: the statement's
# working memory follows its rows, and each costs DuckDB ~15 ms of its own, so a window of small
# partitions is compared at once (2,526 TPC-H days of ~1.5 rows: 13 statements 0.28-0.35 s -> one,
# 0.15 s) and a table of large ones a few partitions at a time
IMPACT_ROWS_AT_ONCE = 1_000_000

# what of a key's change `expect:` did not declare, when it is the key as a whole
WHOLE = {"partition": "partition outside expect.partitions", "added": "key added", "removed": "key removed"}


@dataclass(frozen=True)
class KeyChange:
    keys: dict[str, object]
    status: str  # added | removed | changed
    metrics: dict[str, tuple[object, object, float | None]]  # name -> (old, new, new - old)
    columns: tuple[str, ...] = ()  # value columns whose values of the key changed (a changed key)


@dataclass(frozen=True)
class PartitionImpact:
    partition: str
    rows_before: int
    rows_after: int
    added: int = 0
    removed: int = 0
    changed: int = 0
    totals: dict[str, tuple[float | None, float | None, float | None]] = field(default_factory=dict)
    top: list[KeyChange] = field(default_factory=list)

    @property
    def unchanged(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def to_json(self) -> dict[str, Any]:
        return {"partition": self.partition, "rows_before": self.rows_before, "rows_after": self.rows_after,
                "added": self.added, "removed": self.removed, "changed": self.changed,
                "totals": {m: {"old": o, "new": n, "difference": d} for m, (o, n, d) in self.totals.items()},
                "top": [{"keys": c.keys, "status": c.status,
                         "metrics": {m: {"old": o, "new": n, "difference": d} for m, (o, n, d) in c.metrics.items()},
                         **({"columns": list(c.columns)} if c.columns else {})}
                        for c in self.top]}


def _diff(old: object, new: object) -> float | None:
    if old is None and new is None:
        return None
    if isinstance(old, int | Decimal | None) and isinstance(new, int | Decimal | None):
        # exact first: a float difference of two DECIMALs reads 2419.0200000000004
        return float(Decimal(new or 0) - Decimal(old or 0))
    return (as_number(new) or 0.0) - (as_number(old) or 0.0)


@dataclass(frozen=True)
class Impact:
    plan_id: str
    table: str
    metrics: list[str]
    partitions: list[PartitionImpact]
    # key -> (before, now) of the hash pass it was computed from (see `consumer_impact_holds`)
    prints: dict[str, tuple[Any, ...]] = field(default_factory=dict, compare=False, repr=False)
    # the plan's `expect:` for this table: `text` and `to_json` mark what it did not declare
    expected: Expectation | None = field(default=None, compare=False, repr=False)

    @property
    def totals(self) -> dict[str, Any]:
        out: dict[str, Any] = {"partitions_changed": sum(1 for p in self.partitions if not p.unchanged),
               "added": sum(p.added for p in self.partitions), "removed": sum(p.removed for p in self.partitions),
               "changed": sum(p.changed for p in self.partitions)}
        for m in self.metrics:
            # summed as decimals of the figures' shortest text: float sums would record 24804.25000000006
            old = sum(Decimal(repr(p.totals[m][0])) for p in self.partitions
                      if m in p.totals and p.totals[m][0] is not None)
            new = sum(Decimal(repr(p.totals[m][1])) for p in self.partitions
                      if m in p.totals and p.totals[m][1] is not None)
            out[m] = {"old": float(old), "new": float(new), "difference": float(new - old)}
        return out

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"plan_id": self.plan_id, "table": self.table, "totals": self.totals,
                    "partitions": [p.to_json() for p in self.partitions]}
        if self.expected is not None and self.expected.declared:
            document["expected"] = self.expected.to_json()
            for part, shown in zip(self.partitions, document["partitions"], strict=True):
                broken = self._broken(part)
                if broken:
                    shown["unexpected"] = broken
                for change, key in zip(part.top, shown["top"], strict=True):
                    key["unexpected"] = self._unexpected(part, change)
        return document

    def _unexpected(self, part: PartitionImpact, change: KeyChange) -> list[str]:
        moved = [m for m, (_, _, d) in change.metrics.items() if d]
        moved += [c for c in change.columns if c not in moved]
        if not self.expected:
            return []
        found = self.expected.unexpected(part.partition, change.status, moved)
        # a declared metric whose partition figure broke its direction or bounds is not expected
        # either: `changes_as_expected` fails the partition for it (diff marked each key's move of
        # it `expected` while the gate refused it: found by an attack)
        broken = self._broken(part)
        return found + [m for m in moved if m in broken and m not in found]

    def _broken(self, part: PartitionImpact) -> dict[str, list[str]]:
        """Per declared metric, what of the partition's movement its rule refuses (direction and
        per-partition bounds, as the gate judges them on the partition's figure)."""
        if self.expected is None or not self.expected.declared:
            return {}
        out = {}
        for name, rule in self.expected.metrics.items():
            if name not in part.totals:
                continue
            old, new, _ = part.totals[name]
            problems = judge_movement(name, old, new, rule.direction, rule.per_partition, "")
            if problems:
                out[name] = problems
        return out

    def of(self, plan_id: str, keys: Sequence[str]) -> Impact:
        """The part of this impact on `keys`, for one plan."""
        wanted = set(keys)
        return Impact(plan_id, self.table, self.metrics, [p for p in self.partitions if p.partition in wanted])

    def summary(self, limit: int = 50) -> dict[str, Any]:
        """Totals and the first `limit` changed partitions with their top keys: bounded for a
        notice or an evidence row however long the window."""
        changed = [p for p in self.partitions if not p.unchanged]
        return {"table": self.table, "totals": self.totals, "changed": [p.to_json() for p in changed[:limit]],
                "changed_not_listed": max(0, len(changed) - limit)}

    def metadata(self) -> dict[str, object]:
        """Numeric deltas (the UI plots them across materializations) and the markdown table."""
        totals = self.totals
        out: dict[str, object] = {f"impact_{k}": totals[k] for k in ("partitions_changed", "added", "removed",
                                                                     "changed")}
        for m in self.metrics:
            out[f"impact_{m}_difference"] = float(totals[m]["difference"])
        out["impact"] = self.markdown()
        return out

    def text(self, limit: int = 30) -> str:
        totals = self.totals
        lines = [f"impact of plan {self.plan_id} on {self.table}: {totals['partitions_changed']} of "
                 f"{len(self.partitions)} partition(s) changed; rows added {totals['added']}, removed "
                 f"{totals['removed']}, changed {totals['changed']}"]
        for m in self.metrics:
            t = totals[m]
            lines.append(f"  {m}: {t['old']:,.2f} -> {t['new']:,.2f} ({t['difference']:+,.2f})")
        marking = self.expected is not None and self.expected.declared
        if marking and self.expected is not None:
            lines.append(f"  expected: {self.expected.summary}; NOT EXPECTED marks the rest")
        shown = [p for p in self.partitions if not p.unchanged][:limit]
        for p in shown:
            lines.append(f"{p.partition}: +{p.added} -{p.removed} ~{p.changed} rows ({p.rows_before} -> "
                         f"{p.rows_after})")
            for problems in (self._broken(p) if marking else {}).values():
                lines.append(f"  NOT EXPECTED: {'; '.join(problems)}")
            for change in p.top:
                keys = ", ".join(f"{k}={v}" for k, v in change.keys.items())
                unexpected = self._unexpected(p, change) if marking else []
                figures = "; ".join([f"{m} {_fmt(o)} -> {_fmt(n)} ({_fmt(d, sign=True)})"
                                     + (" NOT EXPECTED" if m in unexpected else " expected" if marking else "")
                                     for m, (o, n, d) in change.metrics.items() if d]
                                    + [f"{c} changed" + (" NOT EXPECTED" if c in unexpected else
                                                         " expected" if marking else "")
                                       for c in change.columns if c not in change.metrics])
                whole = next((WHOLE[u] for u in unexpected if u in WHOLE), None)
                mark = f"  NOT EXPECTED ({whole})" if whole else ""
                lines.append(f"  {change.status:<8} {keys}" + (f": {figures}" if figures else "") + mark)
        hidden = sum(1 for p in self.partitions if not p.unchanged) - len(shown)
        if hidden > 0:
            lines.append(f"... {hidden} more changed partition(s) (--json for all)")
        return "\n".join(lines)

    def markdown(self, limit: int = 10) -> str:
        rows = ["| partition | added | removed | changed | " + " | ".join(f"{m} Δ" for m in self.metrics) + " |",
                "|---|---|---|---|" + "---|" * len(self.metrics)]
        for p in [p for p in self.partitions if not p.unchanged][:limit]:
            deltas = " | ".join(_fmt(p.totals.get(m, (None, None, None))[2], sign=True) for m in self.metrics)
            rows.append(f"| {p.partition} | {p.added} | {p.removed} | {p.changed} | {deltas} |")
        return "\n".join(rows) if len(rows) > 2 else f"No change in {len(self.partitions)} partition(s)."


def consumers_line(events: Iterable[Any]) -> str | None:
    """One line from a publish run's materialization events (`Impact.metadata` numbers, the same on
    each partition of a range), for a terminal; None when none carries them. Metrics that did not
    move are left out. The run's own published asset (its materialization counts the `rows` it
    copied) first: a graph's month, materialized by the same run and logged before it, carries its
    own impact."""
    found = [{k: v.value for k, v in event.materialization.metadata.items()} for event in events]
    found = [seen for seen in found if "impact_partitions_changed" in seen]
    for seen in sorted(found, key=lambda seen: "rows" not in seen):
        figures = "".join(f"; {k[len('impact_'):-len('_difference')]} {v:+,.2f}" for k, v in seen.items()
                          if k.startswith("impact_") and k.endswith("_difference") and v)
        return (f"consumers see {seen['impact_partitions_changed']} partition(s) changed: rows "
                f"+{seen['impact_added']} -{seen['impact_removed']} ~{seen['impact_changed']}{figures}")
    return None


def _fmt(value: object, sign: bool = False) -> str:
    number = as_number(value)
    if number is None:
        return "NULL"
    return f"{number:+,.2f}" if sign else f"{number:,.2f}"


def compare(session: Session, spec: TableSpec, scheme: PartitionScheme, before_source: str | None,
            keys: Sequence[str], top: int = 5,
            prints: dict[str, tuple[Any, ...]] | None = None) -> list[PartitionImpact]:
    """`before_source` (a quoted table; None: empty) against the spec's table now, for these keys.

    Which partitions changed at all is found with an engine-native hash over both tables (one pass
    each, a fraction of the fingerprints' cost), never stored, so its stability does not matter;
    then one statement over the changed partitions only (`IMPACT_ROWS_AT_ONCE` rows at a time).
    `prints`, when given, receives each key's (before, now) hash pass, to tell later whether either
    side moved since.
    """
    now: dict[str, tuple[int, str]] = {}
    before: dict[str, tuple[int, str]] = {}
    for i in range(0, len(keys), SLICE_PARTITIONS):
        part = keys[i:i + SLICE_PARTITIONS]
        now.update(row_hash_totals(session, spec, scheme, quote(spec.table), part))
        before.update(row_hash_totals(session, spec, scheme, before_source, part) if before_source
                      else {k: (0, "0") for k in part})
    if prints is not None:
        prints.update({k: (before[k], now[k]) for k in keys})
    changed = [k for k in keys if now[k] != before[k]]
    out = {k: PartitionImpact(k, before[k][0], now[k][0]) for k in keys if k not in changed}
    if changed and before_source:
        for batch in _by_rows(changed, {k: before[k][0] + now[k][0] for k in changed}, IMPACT_ROWS_AT_ONCE):
            out.update(_changed_keys(session, spec, scheme, before_source, batch,
                                     {k: (before[k][0], now[k][0]) for k in batch}, top))
    elif changed:  # nothing before: every row is new
        out.update({k: PartitionImpact(k, 0, now[k][0], added=now[k][0]) for k in changed})
    return [out[k] for k in keys if k in out]


def _by_rows(keys: Sequence[str], rows: dict[str, int], at_once: int) -> Iterable[list[str]]:
    """`keys` in order, in batches of at most `at_once` rows (both sides; a partition larger than
    that alone): a statement's cost follows its rows, so small partitions go many at once."""
    batch: list[str] = []
    held = 0
    for key in keys:
        if batch and held + rows[key] > at_once:
            yield batch
            batch, held = [], 0
        batch.append(key)
        held += rows[key]
    if batch:
        yield batch


def slice_impact(session: Session, spec: TableSpec, scheme: PartitionScheme, plan_id: str,
                 keys: Sequence[str], top: int = 5) -> list[PartitionImpact]:
    """Before (the plan's snapshot, taken before its first write) against now for these keys."""
    taken = snapshotted(session, plan_id, spec.table, keys)
    keys = [k for k in keys if k in taken]
    if not keys:
        return []
    # the snapshot's rows are as writable as any table's; its sealed record says what they were: a
    # snapshot the insider filled with the replayed rows had diff say the plan changed nothing (found
    # by an attack). A rollback and `changes_as_expected` compare it first too.
    edited = snapshot_changed(session, spec, scheme, plan_id, spec.table, {k: taken[k] for k in keys})
    if edited:
        key, (now, then) = next(iter(edited.items()))
        raise ForgedRecord(f"the snapshot of {spec.table} {key} (plan {plan_id}) holds other rows ({now}) than "
                           f"were taken ({then})" + (f" (+{len(edited) - 1} more)" if len(edited) > 1 else ""),
                           fix=f"restore {SNAPSHOT_SCHEMA} from backup (a rollback refuses this snapshot too)")
    snap = snapshot_in(session, plan_id, spec.table)
    have_snapshot = session.engine.table_exists(session, snap, SNAPSHOT_SCHEMA)
    return compare(session, spec, scheme, qualified(SNAPSHOT_SCHEMA, snap) if have_snapshot else None, keys, top)


def _changed_keys(session: Session, spec: TableSpec, scheme: PartitionScheme, before_source: str,
                  keys: list[str], rows: dict[str, tuple[int, int]], top: int) -> dict[str, PartitionImpact]:
    """The partitions known to differ, key by key (`warehouse/impact_sql.changed_rows`)."""
    metrics = list(spec.metrics)
    n_keys = len(spec.business_keys)
    out: dict[str, PartitionImpact] = {}
    for row in changed_rows(session, spec, scheme, before_source, keys, top):
        key = row[0]
        values = list(row[5 + n_keys:])
        per_key: dict[str, tuple[object, object, float | None]]
        totals, per_key = {}, {}
        for m in metrics:
            tb, ta, bm, am = values[:4]
            values = values[4:]
            totals[m.name] = (as_number(tb), as_number(ta), _diff(tb, ta))
            per_key[m.name] = (as_number(bm), as_number(am), _diff(bm, am))
        columns = tuple(c for c, flag in zip(spec.value_columns, values, strict=True) if flag)
        impact = out.get(key)
        if impact is None:
            impact = PartitionImpact(key, *rows[key], int(row[1]), int(row[2]), int(row[3]), totals, [])
            out[key] = impact
        if row[4] is not None and len(impact.top) < top:
            impact.top.append(KeyChange(dict(zip(spec.business_keys, row[5:5 + n_keys], strict=True)), row[4],
                                        per_key, columns))
    return out


def consumer_impact(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: Sequence[str],
                    top: int = 3) -> Impact:
    """What consumers will see change when `keys` are published: the published table now (before
    the copy) against the target."""
    prints: dict[str, tuple[Any, ...]] = {}
    parts = compare(session, spec, scheme, quote(spec.publish_table), list(keys), top, prints)
    return Impact("", spec.publish_as, [m.name for m in spec.metrics], parts, prints)


def consumer_impact_holds(session: Session, spec: TableSpec, scheme: PartitionScheme, impact: Impact) -> bool:
    """Whether neither table moved since `impact` was computed: the hash passes alone, two scans,
    so publish can compute the impact before it locks and only check it under the lock."""
    keys = list(impact.prints)
    for i in range(0, len(keys), SLICE_PARTITIONS):
        part = keys[i:i + SLICE_PARTITIONS]
        now = row_hash_totals(session, spec, scheme, quote(spec.table), part)
        before = row_hash_totals(session, spec, scheme, quote(spec.publish_table), part)
        if any(impact.prints[k] != (before[k], now[k]) for k in part):
            return False
    return True


def plan_impact(session: Session, spec: TableSpec, scheme: PartitionScheme, state: PlanState,
                keys: Sequence[str] | None = None, top: int = 10) -> Impact:
    """`backfill diff`: the plan's snapshotted partitions (or the named ones)."""
    wanted = list(keys) if keys else sorted(snapshotted(session, state.plan_id, spec.table),
                                            key=lambda k: scheme.position(k))
    parts = slice_impact(session, spec, scheme, state.plan_id, wanted, top)
    return Impact(state.plan_id, spec.name, [m.name for m in spec.metrics], parts,
                  expected=Expectation.for_table(state.version.plan, spec) if state.version else None)

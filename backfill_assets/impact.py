"""The impact of a backfill: what it changed, partition by partition and key by key.

Before is the snapshot taken before the plan's first write of each partition; after is the data
now. Computed in the engine: one fingerprint pass finds the partitions that changed at all, then
one hash join per slice over those partitions only, grouping each side by the business keys and
evaluating the table's metric expressions per key. Only per-partition counts and the few keys that
changed most come back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from backfill_assets.control.record import PlanState
from backfill_assets.control.schema import SNAPSHOT_SCHEMA
from backfill_assets.gates.results import as_number
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.grouping import grouping
from backfill_assets.warehouse.identifiers import qualified, quote
from backfill_assets.warehouse.snapshots import snapshot_table, snapshotted

SLICE = 200


@dataclass(frozen=True)
class KeyChange:
    keys: dict[str, object]
    status: str  # added | removed | changed
    metrics: dict[str, tuple[object, object, float | None]]  # name -> (old, new, new - old)


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

    def to_json(self) -> dict:
        return {"partition": self.partition, "rows_before": self.rows_before, "rows_after": self.rows_after,
                "added": self.added, "removed": self.removed, "changed": self.changed,
                "totals": {m: {"old": o, "new": n, "difference": d} for m, (o, n, d) in self.totals.items()},
                "top": [{"keys": c.keys, "status": c.status,
                         "metrics": {m: {"old": o, "new": n, "difference": d} for m, (o, n, d) in c.metrics.items()}}
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

    @property
    def totals(self) -> dict:
        out = {"partitions_changed": sum(1 for p in self.partitions if not p.unchanged),
               "added": sum(p.added for p in self.partitions), "removed": sum(p.removed for p in self.partitions),
               "changed": sum(p.changed for p in self.partitions)}
        for m in self.metrics:
            olds = [p.totals[m][0] for p in self.partitions if m in p.totals and p.totals[m][0] is not None]
            news = [p.totals[m][1] for p in self.partitions if m in p.totals and p.totals[m][1] is not None]
            out[m] = {"old": sum(olds), "new": sum(news), "difference": sum(news) - sum(olds)}
        return out

    def to_json(self) -> dict:
        return {"plan_id": self.plan_id, "table": self.table, "totals": self.totals,
                "partitions": [p.to_json() for p in self.partitions]}

    def text(self, limit: int = 30) -> str:
        totals = self.totals
        lines = [f"impact of plan {self.plan_id} on {self.table}: {totals['partitions_changed']} of "
                 f"{len(self.partitions)} partition(s) changed; rows added {totals['added']}, removed "
                 f"{totals['removed']}, changed {totals['changed']}"]
        for m in self.metrics:
            t = totals[m]
            lines.append(f"  {m}: {t['old']:,.2f} -> {t['new']:,.2f} ({t['difference']:+,.2f})")
        shown = [p for p in self.partitions if not p.unchanged][:limit]
        for p in shown:
            lines.append(f"{p.partition}: +{p.added} -{p.removed} ~{p.changed} rows ({p.rows_before} -> "
                         f"{p.rows_after})")
            for change in p.top:
                keys = ", ".join(f"{k}={v}" for k, v in change.keys.items())
                figures = "; ".join(f"{m} {_fmt(o)} -> {_fmt(n)} ({_fmt(d, sign=True)})"
                                    for m, (o, n, d) in change.metrics.items() if d)
                lines.append(f"  {change.status:<8} {keys}" + (f": {figures}" if figures else ""))
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
        return "\n".join(rows) if len(rows) > 2 else "No change against the pre-plan snapshot."


def _fmt(value: object, sign: bool = False) -> str:
    number = as_number(value)
    if number is None:
        return "NULL"
    return f"{number:+,.2f}" if sign else f"{number:,.2f}"


def _quick_prints(session: Session, spec: TableSpec, scheme: PartitionScheme, source: str,
                  keys: Sequence[str]) -> dict[str, tuple[int, str]]:
    """Per partition: rows and the sum of an engine-native row hash, compared at one moment only."""
    group = grouping(scheme, f"t.{quote(spec.partition_column)}", keys)
    hashed = session.engine.transient_row_hash_sql(spec.columns, "t")
    found = {group.key(v): (int(n), str(h)) for v, n, h in session.rows(
        f"SELECT {group.key_sql}, count(*), {session.engine.text_of(f'coalesce(sum({hashed}), 0)')} "
        f"FROM {source} AS t{group.join_sql} WHERE {group.where_sql} GROUP BY {group.key_sql}", group.params)}
    return {k: found.get(k, (0, "0")) for k in keys}


def compare(session: Session, spec: TableSpec, scheme: PartitionScheme, before_source: str | None,
            keys: Sequence[str], top: int = 5) -> list[PartitionImpact]:
    """`before_source` (a quoted table; None: empty) against the spec's table now, for these keys.

    Which partitions changed at all is found with an engine-native hash over both tables (one pass
    each, a fraction of the md5 fingerprints' cost), never stored, so its stability does not matter;
    then one hash join over the changed partitions only.
    """
    now = _quick_prints(session, spec, scheme, quote(spec.table), keys)
    before = _quick_prints(session, spec, scheme, before_source, keys) if before_source \
        else {k: (0, "0") for k in keys}
    changed = [k for k in keys if now[k] != before[k]]
    out = {k: PartitionImpact(k, before[k][0], now[k][0]) for k in keys if k not in changed}
    if changed and before_source:
        out.update(_join(session, spec, scheme, before_source, changed, top))
    elif changed:  # nothing before: every row is new
        out.update({k: PartitionImpact(k, 0, now[k][0], added=now[k][0]) for k in changed})
    return [out[k] for k in keys if k in out]


def slice_impact(session: Session, spec: TableSpec, scheme: PartitionScheme, plan_id: str,
                 keys: Sequence[str], top: int = 5) -> list[PartitionImpact]:
    """Before (the plan's snapshot, taken before its first write) against now for these keys."""
    taken = snapshotted(session, plan_id, spec.table, keys)
    keys = [k for k in keys if k in taken]
    if not keys:
        return []
    snap = snapshot_table(plan_id, spec.table)
    have_snapshot = session.engine.table_exists(session, snap, SNAPSHOT_SCHEMA)
    return compare(session, spec, scheme, qualified(SNAPSHOT_SCHEMA, snap) if have_snapshot else None, keys, top)


def _join(session: Session, spec: TableSpec, scheme: PartitionScheme, snapshot_sql: str,
          keys: list[str], top: int) -> dict[str, PartitionImpact]:
    metrics = list(spec.metrics)
    bkeys = list(spec.business_keys)
    kc = [f"k{i}" for i in range(len(bkeys))]
    b_group = grouping(scheme, f"b.{quote(spec.partition_column)}", keys)
    a_group = grouping(scheme, f"a.{quote(spec.partition_column)}", keys)

    def side(alias: str, source: str, group) -> str:
        cols = [f"{group.key_sql} AS pkey"] + [f"{alias}.{quote(k)} AS {c}" for k, c in zip(bkeys, kc, strict=True)]
        cols += ["count(*) AS n", f"sum({session.engine.transient_row_hash_sql(spec.columns, alias)}) AS fp"]
        cols += [f"({m.target_sql}) AS m{i}" for i, m in enumerate(metrics)]
        return (f"SELECT {', '.join(cols)} FROM {source} AS {alias}{group.join_sql} WHERE {group.where_sql} "
                f"GROUP BY {', '.join(str(i + 1) for i in range(1 + len(bkeys)))}")

    on = " AND ".join(["b.pkey = a.pkey"] + [f"b.{c} IS NOT DISTINCT FROM a.{c}" for c in kc])
    magnitude = " + ".join(f"abs(CAST(coalesce(a.m{i}, 0) AS DOUBLE PRECISION) - CAST(coalesce(b.m{i}, 0) "
                           "AS DOUBLE PRECISION))" for i in range(len(metrics))) or "0"
    status = ("CASE WHEN b.n IS NULL THEN 'added' WHEN a.n IS NULL THEN 'removed' "
              "WHEN b.fp <> a.fp OR b.n <> a.n THEN 'changed' ELSE 'same' END")
    totals = "".join(f", sum(bm{i}) AS tb{i}, sum(am{i}) AS ta{i}" for i in range(len(metrics)))
    sql = f"""
    WITH impact_before AS ({side('b', snapshot_sql, b_group)}),
         impact_after AS ({side('a', quote(spec.table), a_group)}),
         j AS (
            SELECT coalesce(b.pkey, a.pkey) AS pkey,
                   {', '.join(f'coalesce(b.{c}, a.{c}) AS {c}' for c in kc)},
                   coalesce(b.n, 0) AS bn, coalesce(a.n, 0) AS an, {status} AS status, {magnitude} AS size
                   {''.join(f', b.m{i} AS bm{i}, a.m{i} AS am{i}' for i in range(len(metrics)))}
            FROM impact_before AS b FULL OUTER JOIN impact_after AS a ON {on}),
         p AS (
            SELECT pkey, sum(bn) AS rows_before, sum(an) AS rows_after,
                   count(*) FILTER (WHERE status = 'added') AS added,
                   count(*) FILTER (WHERE status = 'removed') AS removed,
                   count(*) FILTER (WHERE status = 'changed') AS changed
                   {totals}
            FROM j GROUP BY pkey),
         top AS (
            SELECT * FROM (
                SELECT j.*, row_number() OVER (PARTITION BY pkey ORDER BY size DESC) AS rk
                FROM j WHERE status <> 'same') AS ranked
            WHERE rk <= ?)
    SELECT p.pkey, p.rows_before, p.rows_after, p.added, p.removed, p.changed, top.status,
           {', '.join('top.' + c for c in kc)}
           {''.join(f', p.tb{i}, p.ta{i}, top.bm{i}, top.am{i}' for i in range(len(metrics)))}
    FROM p LEFT JOIN top ON top.pkey = p.pkey ORDER BY p.pkey, top.rk
    """
    out: dict[str, PartitionImpact] = {}
    for row in session.rows(sql, [*b_group.params, *a_group.params, max(top, 1)]):
        key = b_group.key(row[0])
        n_keys = len(kc)
        values = list(row[7 + n_keys:])
        totals, per_key = {}, {}
        for m in metrics:
            tb, ta, bm, am = values[:4]
            values = values[4:]
            totals[m.name] = (as_number(tb), as_number(ta), _diff(tb, ta))
            per_key[m.name] = (as_number(bm), as_number(am), _diff(bm, am))
        impact = out.get(key)
        if impact is None:
            impact = PartitionImpact(key, int(row[1] or 0), int(row[2] or 0), int(row[3]), int(row[4]),
                                     int(row[5]), totals, [])
            out[key] = impact
        if row[6] is not None and len(impact.top) < top:
            impact.top.append(KeyChange(dict(zip(bkeys, row[7:7 + n_keys], strict=True)), row[6], per_key))
    return out


def plan_impact(session: Session, spec: TableSpec, scheme: PartitionScheme, state: PlanState,
                keys: Sequence[str] | None = None, top: int = 10) -> Impact:
    """`backfill diff`: the plan's snapshotted partitions (or the named ones), slice by slice."""
    wanted = list(keys) if keys else sorted(snapshotted(session, state.plan_id, spec.table),
                                            key=lambda k: scheme.position(k))
    parts: list[PartitionImpact] = []
    for i in range(0, len(wanted), SLICE):
        parts += slice_impact(session, spec, scheme, state.plan_id, wanted[i:i + SLICE], top)
    return Impact(state.plan_id, spec.name, [m.name for m in spec.metrics], parts)

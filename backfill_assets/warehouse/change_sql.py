"""The gate `changes_as_expected` as SQL inside the engine: the plan's snapshot against the data
written, for a whole slice of partitions in one statement.

1. Both sides' rows of the slice, each tagged with its side and an engine-native row hash; a hash
   whose copies are as many on both sides is a row unchanged, and ends there (nearly all rows). A
   column whose equal values can differ in bytes (DuckDB's INTERVAL '1 month' = '30 days', -0.0 =
   0.0) is hashed by its canonical text, or such a change would end here unseen.
2. The remaining rows paired by partition and business keys (a key's duplicates in the order of
   their hashes): a pair is a changed row, a row alone an added or a removed key.
3. Each value column compared in its canonical text (`value_text_sql`, the fingerprints' text: a
   difference is a difference of bytes, whatever the type), counted per column; a pair that
   changes an undeclared column, or a key added or removed when that is not declared, is a
   violation, and the first few are named with their old and new values.
4. Every metric of the table evaluated over each side of each partition (over no rows on a side
   that has none), for the declared ones' direction and bounds and the others' equality.

Only per-partition counts, figures and the few worst keys as text come back, never rows.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from backfill_assets.identifiers import qualified, quote
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import column_types
from backfill_assets.warehouse.grouping import grouping
from backfill_assets.warehouse.snapshot_tables import SNAPSHOT_SCHEMA, snapshot_in


class DeclaredChanges(Protocol):
    """What the statement needs of the plan's expectation (`gates.expectation.Expectation`): the
    changes it declares, so it can count the keys changed beyond them."""

    @property
    def columns(self) -> Collection[str]: ...
    @property
    def rows_added(self) -> bool: ...
    @property
    def rows_removed(self) -> bool: ...


WORST_KEYS = 3  # keys named per failing partition
# the statement's own columns beside the table's: the prefix the contract reserves for the framework
PKEY, SIDE, HASH, RANK = "backfill_stage_pkey", "backfill_stage_side", "backfill_stage_h", "backfill_stage_rn"


@dataclass(frozen=True)
class ChangeFigures:
    """What the statement returns for one partition."""

    rows_before: int
    rows_after: int
    added: int
    removed: int
    changed: int
    columns: dict[str, int]        # value column -> rows (keys) whose value changed
    violations: int                # keys changed in a way not declared
    worst: str                     # the first keys changed, violations first, as text
    old: dict[str, object]         # metric -> figure before
    new: dict[str, object]         # metric -> figure now

    @property
    def any_change(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def change_figures(session: Session, spec: TableSpec, scheme: PartitionScheme, plan_id: str,
                   keys: Sequence[str], expectation: DeclaredChanges,
                   before_source: str | None = None, after_source: str | None = None) -> dict[str, ChangeFigures]:
    """Run the slice's statement; every key gets figures (no rows on either side: zeros).
    `before_source`: the snapshot's rows as checked (`snapshots.checked_copy`), else the plan's
    snapshot table is read; `after_source`: the data's as fingerprinted (`snapshots.session_copy`),
    else the target is read."""
    engine = session.engine
    text = engine.text_of
    cols, values = spec.columns, spec.value_columns
    types = column_types(session, spec.table, cols)
    kinds = dict(zip(cols, types, strict=True))
    part = quote(spec.partition_column)
    snap = snapshot_in(session, plan_id, spec.table)
    if before_source is not None:
        before = before_source
    elif engine.table_exists(session, snap, SNAPSHOT_SCHEMA):
        before = qualified(SNAPSHOT_SCHEMA, snap)
    else:  # the plan snapshotted only empty partitions: nothing before
        before = f"(SELECT {', '.join(quote(c) for c in cols)} FROM {quote(spec.table)} WHERE FALSE)"
    sides = {"b": (before, grouping(session.engine, scheme, f"b.{part}", keys), -1),
             "a": (after_source or quote(spec.table), grouping(session.engine, scheme, f"a.{part}", keys), 1)}
    params: list[object] = []

    def scan(alias: str) -> str:
        source, group, side = sides[alias]
        params.extend(group.params)
        picked = ", ".join(f"{alias}.{quote(c)} AS {quote(c)}" for c in cols)
        return (f"SELECT {group.key_sql} AS {PKEY}, {side} AS {SIDE}, "
                f"{engine.transient_row_hash_sql(cols, alias, types)} AS {HASH}, {picked} "
                f"FROM {source} AS {alias}{group.join_sql} WHERE {group.where_sql}")

    bkeys = [quote(k) for k in spec.business_keys]
    metrics = list(spec.metrics)
    non_partition = [k for k in spec.business_keys if k != spec.partition_column]
    key_text = " || ', ' || ".join(
        f"'{k}=' || coalesce({text(f'coalesce(o.{quote(k)}, n.{quote(k)})')}, 'NULL')" for k in non_partition
    ) or "'(partition)'"
    moved = [f"(o.{SIDE} IS NOT NULL AND n.{SIDE} IS NOT NULL AND "
             f"{engine.value_text_sql(f'o.{quote(c)}', kinds[c])} IS DISTINCT FROM "
             f"{engine.value_text_sql(f'n.{quote(c)}', kinds[c])})" for c in values]
    undeclared = [f"x{i}" for i, c in enumerate(values) if c not in expectation.columns]
    violation = " OR ".join(undeclared + ([] if expectation.rows_added else ["status = 'added'"])
                            + ([] if expectation.rows_removed else ["status = 'removed'"])) or "FALSE"
    # a violating key names its undeclared columns; another (a partition that may not change at
    # all) names every column that changed
    shown = " || ".join(
        f"CASE WHEN x{i}{'' if c not in expectation.columns else ' AND NOT bad'} THEN ' {c} ' || "
        f"coalesce({text(f'o{i}')}, 'NULL') || ' -> ' || coalesce({text(f'n{i}')}, 'NULL') ELSE '' END"
        for i, c in enumerate(values)) or "''"
    same_key = engine.keys_match_sql("o", "n", bkeys, spec.key_types)
    metric_cols = ", ".join(f"({engine.team_sql(m.target_sql)}) AS m{i}" for i, m in enumerate(metrics))
    moved_count = [engine.count_where_sql(f"x{i}") for i in range(len(values))]
    worst = engine.joined_text_where_sql(
        f"CASE WHEN status = 'changed' THEN '(' || keytext || '):' || {shown} "
        "ELSE '(' || keytext || ') ' || status END", "'; '", "rk", f"rk <= {WORST_KEYS}")
    sql = f"""
    WITH u AS ({scan('b')} UNION ALL {scan('a')}),
    d AS (SELECT {PKEY}, {HASH} FROM u GROUP BY {PKEY}, {HASH} HAVING sum({SIDE}) <> 0),
    r AS (
        SELECT u.*, row_number() OVER (PARTITION BY u.{PKEY}, u.{SIDE}, {', '.join('u.' + k for k in bkeys)}
                                       ORDER BY u.{HASH}) AS {RANK}
        FROM u JOIN d ON d.{PKEY} = u.{PKEY} AND d.{HASH} = u.{HASH}),
    p AS (
        SELECT coalesce(o.{PKEY}, n.{PKEY}) AS pkey, {key_text} AS keytext,
               CASE WHEN o.{SIDE} IS NULL THEN 'added' WHEN n.{SIDE} IS NULL THEN 'removed'
                    ELSE 'changed' END AS status
               {''.join(f', {m} AS x{i}' for i, m in enumerate(moved))}
               {''.join(f', o.{quote(c)} AS o{i}, n.{quote(c)} AS n{i}' for i, c in enumerate(values))}
        FROM (SELECT * FROM r WHERE {SIDE} = -1) AS o
             FULL OUTER JOIN (SELECT * FROM r WHERE {SIDE} = 1) AS n
             ON o.{PKEY} = n.{PKEY} AND o.{RANK} = n.{RANK} AND {same_key}),
    q AS (SELECT p.*, ({violation}) AS bad FROM p),
    k AS (SELECT q.*, row_number() OVER (PARTITION BY pkey ORDER BY bad DESC, keytext) AS rk FROM q),
    g AS (
        SELECT pkey, {engine.count_where_sql("status = 'added'")}, {engine.count_where_sql("status = 'removed'")},
               {engine.count_where_sql("status = 'changed'")}, {engine.count_where_sql("bad")}
               {''.join(f', {moved_count[i]}' for i in range(len(values)))},
               {worst}
        FROM k GROUP BY pkey),
    m AS (SELECT {PKEY} AS pkey, {SIDE} AS side, count(*) AS n{', ' + metric_cols if metrics else ''}
          FROM u GROUP BY {PKEY}, {SIDE}),
    e AS ({f"SELECT {metric_cols} FROM {quote(spec.table)} WHERE 1 = 0" if metrics else "SELECT 1 AS none"}),
    parts AS (SELECT DISTINCT pkey FROM m)
    SELECT parts.pkey, coalesce(mb.n, 0), coalesce(ma.n, 0), g.*
           {''.join(f', CASE WHEN mb.pkey IS NULL THEN e.m{i} ELSE mb.m{i} END, '
                    f'CASE WHEN ma.pkey IS NULL THEN e.m{i} ELSE ma.m{i} END' for i in range(len(metrics)))}
    FROM parts CROSS JOIN e
         LEFT JOIN m AS mb ON mb.pkey = parts.pkey AND mb.side = -1
         LEFT JOIN m AS ma ON ma.pkey = parts.pkey AND ma.side = 1
         LEFT JOIN g ON g.pkey = parts.pkey
    """
    group = sides["a"][1]
    out: dict[str, ChangeFigures] = {}
    for row in session.rows(sql, params):
        key = group.key(row[0])
        rows_before, rows_after = int(row[1]), int(row[2])
        rest = list(row[4:])  # after g's pkey
        added, removed, changed, bad = (int(v or 0) for v in rest[:4])
        per_column = {c: int(rest[4 + i] or 0) for i, c in enumerate(values)}
        worst = str(rest[4 + len(values)] or "")
        figures = rest[5 + len(values):]
        old = {m.name: figures[2 * i] for i, m in enumerate(metrics)}
        new = {m.name: figures[2 * i + 1] for i, m in enumerate(metrics)}
        out[key] = ChangeFigures(rows_before, rows_after, added, removed, changed, per_column, bad, worst,
                                 old, new)
    nothing = dict.fromkeys(m.name for m in metrics)
    empty = ChangeFigures(0, 0, 0, 0, 0, dict.fromkeys(values, 0), 0, "", nothing, nothing)
    return {k: out.get(k, empty) for k in keys}

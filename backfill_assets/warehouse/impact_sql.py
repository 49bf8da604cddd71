"""The impact's SQL: what changed between two copies of a table, partition by partition and key by
key (`backfill_assets/impact.py` makes it a report).

One hash pass per side finds the partitions that changed at all (`row_hash_totals`), then one
statement per slice over those partitions only (`changed_rows`) finds the rows that differ by
their row hash, the business keys they hold, and groups only those keys on each side to evaluate
the table's metric expressions per key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backfill_assets.identifiers import quote
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.grouping import grouping


def _declared(spec: TableSpec) -> list[str]:
    """The contract's types, one per column: both sides hash a value by the same expression, and
    values the engine calls equal whose bytes differ (INTERVAL '1 month' and '30 days') apart (the
    report said no partition changed where every row had, found by an attack)."""
    return [spec.column(c).type for c in spec.columns]


def row_hash_totals(session: Session, spec: TableSpec, scheme: PartitionScheme, source: str,
                    keys: Sequence[str]) -> dict[str, tuple[int, str]]:
    """Per partition of `source` (a quoted table): rows and the sum of an engine-native row hash,
    compared at one moment only."""
    engine = session.engine
    group = grouping(session.engine, scheme, f"t.{quote(spec.partition_column)}", keys)
    hashed = f"CAST({engine.transient_row_hash_sql(spec.columns, 't', _declared(spec))} AS {engine.wide_int})"
    found = {group.key(v): (int(n), str(h)) for v, n, h in session.rows(
        f"SELECT {group.key_sql}, count(*), {engine.text_of(f'coalesce(sum({hashed}), 0)')} "
        f"FROM {source} AS t{group.join_sql} WHERE {group.where_sql} GROUP BY {group.key_sql}", group.params)}
    return {k: found.get(k, (0, "0")) for k in keys}


def changed_rows(session: Session, spec: TableSpec, scheme: PartitionScheme, before_source: str,
                 keys: Sequence[str], top: int) -> list[tuple[Any, ...]]:
    """One statement over partitions known to differ, in the engine, in four steps.

    1. Rows that differ: both sides' rows of these partitions, grouped by (partition, row hash);
       a hash whose copies are not as many on both sides is a row added or removed (a changed row
       is one of each). Identical rows, nearly all of them, end here: grouping on one integer is
       a fraction of the cost of grouping every row by its business keys.
    2. The business keys those rows hold.
    3. Each side grouped by business key, for those keys only: rows and metric values; a key only
       after was added, only before removed, on both sides changed.
    4. Each partition's metric totals, the metric evaluated over the whole partition on each side
       (as the gates evaluate it; over no rows on a side that has none: count 0, sum NULL), and
       the keys that changed most.

    One row per partition and changed key of its `top` (one with status NULL when none changed):
    (key, added, removed, changed, status, *business key values, then per metric: partition total
    before, after, the key's value before, after, then per value column 1 when the key's values of
    it changed), by partition, the key that changed most first.
    """
    engine = session.engine
    metrics = list(spec.metrics)
    bkeys = [quote(k) for k in spec.business_keys]
    kc = [f"k{i}" for i in range(len(bkeys))]
    part = quote(spec.partition_column)
    sides = {"b": (before_source, grouping(session.engine, scheme, f"b.{part}", keys)),
             "a": (quote(spec.table), grouping(session.engine, scheme, f"a.{part}", keys))}
    params: list[object] = []

    def scan(alias: str, columns: list[str], join: str = "", group_by: bool = False) -> str:
        """One side's rows of these partitions (its params go in the order the SQL reads); with
        `group_by`, grouped by the partition and the business keys (the first columns)."""
        source, group = sides[alias]
        params.extend(group.params)
        cols = [f"{group.key_sql} AS pkey", *columns]
        sql = (f"SELECT {', '.join(cols)} FROM {source} AS {alias}{group.join_sql}{join} "
               f"WHERE {group.where_sql}")
        return sql + (f" GROUP BY {', '.join(str(i + 1) for i in range(1 + len(bkeys)))}" if group_by else "")

    def hashed(alias: str) -> str:
        return f"{engine.transient_row_hash_sql(spec.columns, alias, _declared(spec))} AS h"

    def key_columns(alias: str) -> list[str]:
        return [f"{alias}.{k} AS {c}" for k, c in zip(bkeys, kc, strict=True)]

    def changed_key(alias: str) -> str:
        # a join, not EXISTS: DuckDB runs a NULL-safe correlated EXISTS as a grouping of every row;
        # impact_keys is DISTINCT, so a row meets at most one of its keys
        match = " AND ".join(engine.same_key_sql(f"{alias}.{k}", f"c.{c}", t)
                             for k, c, t in zip(bkeys, kc, spec.key_types, strict=True))
        return f" JOIN impact_keys AS c ON c.pkey = {sides[alias][1].key_sql} AND {match}"

    metric_cols = [f"({engine.team_sql(m.target_sql)}) AS m{i}" for i, m in enumerate(metrics)]
    # per key, each value column's values as one figure (a sum of their hashes): a key whose only
    # change is a column no metric reads showed as changed with nothing said of what changed
    values = list(spec.value_columns)
    declared = dict(zip(spec.columns, _declared(spec), strict=True))

    def value_sums(alias: str) -> list[str]:
        return [f"sum(CAST({engine.transient_row_hash_sql([c], alias, [declared[c]])} AS {engine.wide_int})) "
                f"AS v{j}" for j, c in enumerate(values)]
    magnitude = " + ".join(f"abs(CAST(coalesce(a.m{i}, 0) AS DOUBLE PRECISION) - CAST(coalesce(b.m{i}, 0) "
                           "AS DOUBLE PRECISION))" for i in range(len(metrics))) or "0"
    rows_sql = f"""
    WITH impact_rows AS (
        SELECT pkey, h FROM ({scan('b', ['-1 AS side', hashed('b')])}
                             UNION ALL {scan('a', ['1 AS side', hashed('a')])}) AS u
        GROUP BY pkey, h HAVING sum(side) <> 0),
    impact_keys AS (
        SELECT DISTINCT r.pkey, {', '.join('r.' + c for c in kc)}
        FROM ({scan('b', [hashed('b'), *key_columns('b')])}
              UNION ALL {scan('a', [hashed('a'), *key_columns('a')])}) AS r
        WHERE EXISTS (SELECT 1 FROM impact_rows AS d WHERE d.pkey = r.pkey AND d.h = r.h)),
    impact_before AS ({scan('b', [*key_columns('b'), 'count(*) AS n', *metric_cols, *value_sums('b')],
                            changed_key('b'), True)}),
    impact_after AS ({scan('a', [*key_columns('a'), 'count(*) AS n', *metric_cols, *value_sums('a')],
                           changed_key('a'), True)}),
    j AS (
        SELECT coalesce(b.pkey, a.pkey) AS pkey, {', '.join(f'coalesce(b.{c}, a.{c}) AS {c}' for c in kc)},
               CASE WHEN b.n IS NULL THEN 'added' WHEN a.n IS NULL THEN 'removed' ELSE 'changed' END AS status,
               {magnitude} AS size {''.join(f', b.m{i} AS bm{i}, a.m{i} AS am{i}' for i in range(len(metrics)))}
               {''.join(f', CASE WHEN b.n IS NOT NULL AND a.n IS NOT NULL AND b.v{j} IS DISTINCT FROM a.v{j} '
                        f'THEN 1 ELSE 0 END AS cv{j}' for j in range(len(values)))}
        FROM impact_before AS b FULL OUTER JOIN impact_after AS a
             ON b.pkey = a.pkey AND {engine.keys_match_sql('b', 'a', kc, spec.key_types)}),
    counts AS (
        SELECT pkey, {engine.count_where_sql("status = 'added'")} AS added,
               {engine.count_where_sql("status = 'removed'")} AS removed,
               {engine.count_where_sql("status = 'changed'")} AS changed
        FROM j GROUP BY pkey),
    totals_before AS ({scan('b', metric_cols)} GROUP BY 1),
    totals_after AS ({scan('a', metric_cols)} GROUP BY 1),
    partitions AS (SELECT pkey FROM totals_before UNION SELECT pkey FROM totals_after),
    no_rows AS (SELECT {', '.join(metric_cols) or '1 AS none'} FROM {quote(spec.table)} AS a WHERE 1 = 0),
    top AS (
        SELECT * FROM (
            SELECT j.*, row_number() OVER (PARTITION BY pkey ORDER BY size DESC, status,
                                           {', '.join(kc)}) AS rk
            FROM j) AS ranked
        WHERE rk <= ?)
    SELECT p.pkey, coalesce(c.added, 0), coalesce(c.removed, 0), coalesce(c.changed, 0), top.status,
           {', '.join('top.' + c for c in kc)}
           {''.join(f', CASE WHEN tb.pkey IS NULL THEN e.m{i} ELSE tb.m{i} END, '
                    f'CASE WHEN ta.pkey IS NULL THEN e.m{i} ELSE ta.m{i} END, top.bm{i}, top.am{i}'
                    for i in range(len(metrics)))}
           {''.join(f', top.cv{j}' for j in range(len(values)))}
    FROM partitions AS p CROSS JOIN no_rows AS e LEFT JOIN counts AS c ON c.pkey = p.pkey
         LEFT JOIN totals_before AS tb ON tb.pkey = p.pkey LEFT JOIN totals_after AS ta ON ta.pkey = p.pkey
         LEFT JOIN top ON top.pkey = p.pkey
    ORDER BY p.pkey, top.rk
    """
    params.append(max(top, 1))
    group = sides["b"][1]
    return [(group.key(row[0]), *row[1:]) for row in session.rows(rows_sql, params)]

"""The reconciliation gates as SQL inside the engine, for a whole slice of partitions at once.

One statement per slice: the target grouped by partition and business keys, the source grouped by
partition and the same keys (through `TableSpec.source_keys`), full-joined group to group. Only
per-partition aggregates come back: row counts, duplicate rows, NULLs, the fingerprint of the data
checked, per metric the totals and the number of groups that differ, and the few worst groups as
text. A swap of figures between groups, a row moved to another key, a missing or an extra group
therefore fails `metrics_match_source` even when the partition's totals agree.

Partition keys and tolerances are bound parameters; identifiers go through `quote()`; the metric
and key expressions come from the TableSpec (code reviewed like any other code). The verdicts on
these figures are the gates' (`gates/verdicts.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from backfill_assets.identifiers import quote
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import EMPTY, Fingerprint, column_types, digest_sql
from backfill_assets.warehouse.grouping import grouping
from backfill_assets.warehouse.key_compare import (
    key_text_sql,
    metric_differs_sql,
    metrics_text_sql,
    worst_keys_sql,
    worst_sql,
)


class MetricTolerance(Protocol):
    """A metric's tolerance as the statement binds it (the plan's `gates.results.Tolerance`)."""

    @property
    def abs(self) -> float: ...
    @property
    def pct(self) -> float: ...


class Tolerances(Protocol):
    """What the statement needs of the plan's thresholds: each metric it compares, and how far."""

    @property
    def metric_tolerances(self) -> Mapping[str, MetricTolerance]: ...


WORST_GROUPS = 3  # groups named per failing partition


@dataclass(frozen=True)
class SliceFigures:
    """What one statement returns for one partition."""

    rows: int
    target_groups: int
    source_groups: int
    source_rows: int
    fingerprint: Fingerprint
    duplicate_rows: int
    nulls: dict[str, int]
    target_totals: dict[str, object]
    source_totals: dict[str, object]
    differing: dict[str, int]  # metric -> groups whose figures differ beyond tolerance
    missing_groups: int        # in the source, not in the target
    extra_groups: int          # in the target, not in the source
    source_duplicates: int
    worst: str                 # the worst groups, as text


@dataclass(frozen=True)
class SchemaCheck:
    declared: dict[str, str]
    missing: tuple[str, ...]
    extra: tuple[str, ...]
    mismatched: dict[str, tuple[str, str]]

    @property
    def problems(self) -> list[str]:
        return ([f"missing column {c}" for c in self.missing]
                + [f"unexpected column {c}" for c in self.extra]
                + [f"{c}: type {found}, contract says {declared}"
                   for c, (declared, found) in self.mismatched.items()])


_CANONICAL: dict[tuple[str, str], str] = {}  # (engine, declared type) -> catalog name: fixed per engine


def _canonical(session: Session, types: list[str]) -> dict[str, str]:
    engine = session.engine.name
    missing = [t for t in types if (engine, t) not in _CANONICAL]
    if missing:
        for declared, name in session.engine.canonical_types(session, missing).items():
            _CANONICAL[(engine, declared)] = name
    return {t: _CANONICAL[(engine, t)] for t in types}


def check_schema(session: Session, spec: TableSpec, table: str | None = None) -> SchemaCheck:
    """The table (the target by default) against the contract."""
    found = session.engine.table_columns(session, table or spec.table)
    declared = {c.name: c.type for c in spec.contract}
    canonical = _canonical(session, list(declared.values()))
    names = {c.lower() for c in declared}
    return SchemaCheck(
        declared,
        tuple(c for c in declared if c.lower() not in found),
        tuple(c for c in found if c not in names),
        {c: (t, found[c.lower()]) for c, t in declared.items()
         if c.lower() in found and canonical[t] != found[c.lower()]})


def slice_figures(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: Sequence[str],
                  thresholds: Tolerances, null_columns: Sequence[str]) -> dict[str, SliceFigures]:
    """Run the slice's one statement; every key gets figures (an empty partition gets zeros), and the
    fingerprint of the very bytes the gates judged (the same statement, so the same snapshot)."""
    engine = session.engine
    text = engine.text_of
    # the engine's own aggregates, never one of the database's named alike (`Engine.builtin`)
    count, total, rank = engine.builtin("count"), engine.builtin("sum"), engine.builtin("row_number")
    names = list(thresholds.metric_tolerances)
    metrics = [spec.metric(n) for n in names]
    bkeys = list(spec.business_keys)
    kcols = [f"k{i}" for i in range(len(bkeys))]
    target_group = grouping(session.engine, scheme, f"t.{quote(spec.partition_column)}", keys)
    source_group = grouping(session.engine, scheme, f"s.{quote(spec.source_partition_column)}", keys)

    t_select = [f"{target_group.key_sql} AS pkey"]
    t_select += [f"t.{quote(k)} AS {c}" for k, c in zip(bkeys, kcols, strict=True)]
    t_select += [f"{count}(*) AS n"]
    t_select += [f"{engine.count_where_sql(f't.{quote(c)} IS NULL')} AS null_{i}"
                 for i, c in enumerate(null_columns)]
    t_select += [f"({engine.team_sql(m.target_sql)}) AS m{i}" for i, m in enumerate(metrics)]
    s_select = [f"{source_group.key_sql} AS pkey"]
    s_select += [f"({engine.team_sql(spec.source_key_sql(k))}) AS {c}" for k, c in zip(bkeys, kcols, strict=True)]
    s_select += [f"{count}(*) AS n"]
    s_select += [f"({engine.team_sql(m.source_sql)}) AS m{i}" for i, m in enumerate(metrics)]
    s_select += [f"{count}(*) - {count}(DISTINCT s.{quote(spec.source_event_id)}) AS dup"
                 if spec.source_event_id else "0 AS dup"]
    group_by = ", ".join(str(i + 1) for i in range(1 + len(bkeys)))

    tolerance_params: list[object] = []
    bad = []
    for i, name in enumerate(names):
        tol = thresholds.metric_tolerances[name]
        bad.append(metric_differs_sql("t", "s", i))  # relative to the source
        tolerance_params += [tol.abs, tol.pct]
    non_partition = [(k, c) for k, c in zip(bkeys, kcols, strict=True) if k != spec.partition_column]
    key_text = key_text_sql(text, non_partition, "t", "s")
    metric_text = metrics_text_sql(text, [m.name for m in metrics], "t", "s")
    join_on = f"t.pkey = s.pkey AND {engine.keys_match_sql('t', 's', kcols, spec.key_types)}"
    any_bad = " OR ".join([f"bad{i}" for i in range(len(metrics))] + ["tn IS NULL", "sn IS NULL"])
    worst = worst_sql(len(metrics), "t", "s")
    # the fingerprint is of the whole partition (its sorted row digests), not of a key group: its
    # own pass over the target, grouped by partition only
    digest = digest_sql(session, spec.columns, column_types(session, spec.table, spec.columns), "t")
    fp_cte = (f"f AS (SELECT {target_group.key_sql} AS pkey, {digest} AS fp FROM {quote(spec.table)} AS t"
              f"{target_group.join_sql} WHERE {target_group.where_sql} GROUP BY {target_group.key_sql}),")
    fp_join, fp_params = " LEFT JOIN f ON f.pkey = g.pkey", target_group.params
    bad_count = [engine.count_where_sql(f"bad{i}") for i in range(len(metrics))]
    sql = f"""
    WITH t AS (
        SELECT {', '.join(t_select)} FROM {quote(spec.table)} AS t{target_group.join_sql}
        WHERE {target_group.where_sql} GROUP BY {group_by}),
    s AS (
        SELECT {', '.join(s_select)} FROM {quote(spec.source_table)} AS s{source_group.join_sql}
        WHERE {source_group.where_sql} GROUP BY {group_by}),
    {fp_cte}
    j AS (
        SELECT coalesce(t.pkey, s.pkey) AS pkey, {key_text} AS keytext, t.n AS tn, s.n AS sn,
               s.dup AS dup
               {''.join(f', t.null_{i} AS null_{i}' for i in range(len(null_columns)))}
               {''.join(f', t.m{i} AS tm{i}, s.m{i} AS sm{i}' for i in range(len(metrics)))}
               {''.join(f', {b} AS bad{i}' for i, b in enumerate(bad))}
        FROM t FULL OUTER JOIN s ON {join_on}),
    r AS (
        SELECT j.*, ({any_bad}) AS anybad,
               {rank}() OVER (PARTITION BY pkey ORDER BY ({any_bad}) DESC, {worst} DESC) AS rk
        FROM j),
    g AS (
    SELECT pkey, coalesce({total}(tn), 0), {count}(tn), {count}(sn), coalesce({total}(sn), 0),
           coalesce({engine.aggregate_where_sql(total, "tn - 1", "tn > 1")}, 0),
           {engine.count_where_sql("tn IS NULL")}, {engine.count_where_sql("sn IS NULL")},
           coalesce({total}(dup), 0)
           {''.join(f', coalesce({total}(null_{i}), 0)' for i in range(len(null_columns)))}
           {''.join(f', {total}(tm{i}), {total}(sm{i}), {bad_count[i]}' for i in range(len(metrics)))},
           {worst_keys_sql(engine, "t", "s", metric_text, "missing in the target", "not in the source", WORST_GROUPS)}
    FROM r GROUP BY pkey)
    SELECT g.*, f.fp FROM g{fp_join}
    """
    # placeholders bind in the order they appear: the target's slice, the source's, the target's
    # again (the fingerprint's pass), tolerances
    params = [*target_group.params, *source_group.params, *fp_params, *tolerance_params]
    out: dict[str, SliceFigures] = {}
    for row in session.rows(sql, params):
        key = target_group.key(row[0])
        rows, tg, sg, srows, dups, missing, extra, sdup = row[1:9]
        # no digest: no target rows in this partition (only source groups)
        fp = Fingerprint(int(rows), str(row[-1])) if row[-1] is not None else EMPTY
        rest = list(row[9:-1])
        nulls = {c: int(rest.pop(0)) for c in null_columns}
        t_tot, s_tot, diff = {}, {}, {}
        for m in metrics:
            t_tot[m.name], s_tot[m.name], diff[m.name] = rest.pop(0), rest.pop(0), int(rest.pop(0))
        out[key] = SliceFigures(int(rows), int(tg), int(sg), int(srows), fp,
                                int(dups), nulls, t_tot, s_tot, diff, int(missing), int(extra),
                                int(sdup), str(rest.pop(0) or ""))
    empty = SliceFigures(0, 0, 0, 0, EMPTY, 0, dict.fromkeys(null_columns, 0),
                         dict.fromkeys(names), dict.fromkeys(names), dict.fromkeys(names, 0), 0, 0, 0, "")
    return {k: out.get(k, empty) for k in keys}

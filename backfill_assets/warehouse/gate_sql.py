"""The reconciliation gates as SQL inside the engine, for a whole slice of partitions at once.

One statement per slice: the target grouped by partition and business keys, the source grouped by
partition and the same keys (through `TableSpec.source_keys`), full-joined group to group. Only
per-partition aggregates come back: row counts, duplicate rows, NULLs, the fingerprint of the data
checked, per metric the totals and the number of groups that differ, and the few worst groups as
text. A swap of figures between groups, a row moved to another key, a missing or an extra group
therefore fails `metrics_match_source` even when the partition's totals agree.

Partition keys and tolerances are bound parameters; identifiers go through `quote()`; the metric
and key expressions come from the TableSpec (code reviewed like any other code).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from backfill_assets.gates.results import (
    CONTRACT_HOLDS,
    METRICS_MATCH_SOURCE,
    NO_DUPLICATE_BUSINESS_KEYS,
    ROW_COUNT_MATCHES_SOURCE,
    SOURCE_HAS_NO_DUPLICATES,
    UNCHANGED_SINCE_CHECKED,
    GateResult,
    Thresholds,
    Tolerance,
    as_number,
)
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import EMPTY, Fingerprint, column_types, digest_sql
from backfill_assets.warehouse.grouping import grouping
from backfill_assets.warehouse.identifiers import quote

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
                  thresholds: Thresholds, null_columns: Sequence[str]) -> dict[str, SliceFigures]:
    """Run the slice's one statement; every key gets figures (an empty partition gets zeros), and the
    fingerprint of the very bytes the gates judged (the same statement, so the same snapshot)."""
    engine = session.engine
    text = engine.text_of
    names = list(thresholds.metric_tolerances)
    metrics = [spec.metric(n) for n in names]
    bkeys = list(spec.business_keys)
    kcols = [f"k{i}" for i in range(len(bkeys))]
    target_group = grouping(scheme, f"t.{quote(spec.partition_column)}", keys)
    source_group = grouping(scheme, f"s.{quote(spec.source_partition_column)}", keys)

    t_select = [f"{target_group.key_sql} AS pkey"]
    t_select += [f"t.{quote(k)} AS {c}" for k, c in zip(bkeys, kcols, strict=True)]
    t_select += ["count(*) AS n"]
    t_select += [f"count(*) FILTER (WHERE t.{quote(c)} IS NULL) AS null_{i}"
                 for i, c in enumerate(null_columns)]
    t_select += [f"({m.target_sql}) AS m{i}" for i, m in enumerate(metrics)]
    s_select = [f"{source_group.key_sql} AS pkey"]
    s_select += [f"({spec.source_key_sql(k)}) AS {c}" for k, c in zip(bkeys, kcols, strict=True)]
    s_select += ["count(*) AS n"]
    s_select += [f"({m.source_sql}) AS m{i}" for i, m in enumerate(metrics)]
    s_select += [f"count(*) - count(DISTINCT s.{quote(spec.source_event_id)}) AS dup"
                 if spec.source_event_id else "0 AS dup"]
    group_by = ", ".join(str(i + 1) for i in range(1 + len(bkeys)))

    tolerance_params: list[object] = []
    bad = []
    for i, name in enumerate(names):
        tol = thresholds.metric_tolerances[name]
        # NULL against a figure is a difference; NULL against NULL (no rows either side) is not
        bad.append(
            f"NOT coalesce(t.m{i} IS NOT DISTINCT FROM s.m{i} OR CAST(abs(t.m{i} - s.m{i}) AS DOUBLE "  # not a join
            f"PRECISION) <= greatest(CAST(? AS DOUBLE PRECISION), CAST(? AS DOUBLE PRECISION) * "
            f"CAST(abs(s.m{i}) AS DOUBLE PRECISION) / 100.0), FALSE)")
        tolerance_params += [tol.abs, tol.pct]
    non_partition = [(k, c) for k, c in zip(bkeys, kcols, strict=True) if k != spec.partition_column]
    key_text = " || ', ' || ".join(
        f"'{k}=' || coalesce({text(f'coalesce(t.{c}, s.{c})')}, 'NULL')" for k, c in non_partition
    ) or "'(partition)'"
    metric_text = " || ".join(
        f"CASE WHEN bad{i} THEN ' {m.name} ' || coalesce({text(f'tm{i}')}, 'NULL') || ' vs ' || "
        f"coalesce({text(f'sm{i}')}, 'NULL') ELSE '' END" for i, m in enumerate(metrics)) or "''"
    join_on = f"t.pkey = s.pkey AND {engine.keys_match_sql('t', 's', kcols, spec.key_types)}"
    any_bad = " OR ".join([f"bad{i}" for i in range(len(metrics))] + ["tn IS NULL", "sn IS NULL"])
    worst = " + ".join(f"CASE WHEN bad{i} THEN coalesce(CAST(abs(tm{i} - sm{i}) AS DOUBLE PRECISION), "
                       "1e300) ELSE 0 END" for i in range(len(metrics))) or "0"
    # the fingerprint is of the whole partition (its sorted row digests), not of a key group: its
    # own pass over the target, grouped by partition only
    digest = digest_sql(session, spec.columns, column_types(session, spec.table, spec.columns), "t")
    fp_cte = (f"f AS (SELECT {target_group.key_sql} AS pkey, {digest} AS fp FROM {quote(spec.table)} AS t"
              f"{target_group.join_sql} WHERE {target_group.where_sql} GROUP BY {target_group.key_sql}),")
    fp_join, fp_params = " LEFT JOIN f ON f.pkey = g.pkey", target_group.params
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
               row_number() OVER (PARTITION BY pkey ORDER BY ({any_bad}) DESC, {worst} DESC) AS rk
        FROM j),
    g AS (
    SELECT pkey, coalesce(sum(tn), 0), count(tn), count(sn), coalesce(sum(sn), 0),
           coalesce(sum(tn - 1) FILTER (WHERE tn > 1), 0),
           count(*) FILTER (WHERE tn IS NULL), count(*) FILTER (WHERE sn IS NULL),
           coalesce(sum(dup), 0)
           {''.join(f', coalesce(sum(null_{i}), 0)' for i in range(len(null_columns)))}
           {''.join(f', sum(tm{i}), sum(sm{i}), count(*) FILTER (WHERE bad{i})' for i in range(len(metrics)))},
           string_agg(CASE WHEN tn IS NULL THEN '(' || keytext || ') missing in the target'
                           WHEN sn IS NULL THEN '(' || keytext || ') not in the source'
                           ELSE '(' || keytext || '):' || {metric_text} END, '; ' ORDER BY rk)
               FILTER (WHERE anybad AND rk <= {WORST_GROUPS})
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


# --- results -------------------------------------------------------------------------------------

def row_count_result(key: str, f: SliceFigures, max_pct: float) -> GateResult:
    expected, actual = f.source_groups, f.rows
    diff = abs(actual - expected)
    pct = (diff / expected * 100) if expected else (0.0 if actual == 0 else 100.0)
    passed = pct <= max_pct
    detail = (f"target {actual} rows vs {expected} key groups in the source "
              f"({pct:.2f}% {'<=' if passed else '>'} {max_pct:g}%)")
    return GateResult(ROW_COUNT_MATCHES_SOURCE, key, passed, expected, actual, max_pct, diff, detail,
                      numbers={"expected": expected, "actual": actual, "difference": diff,
                               "threshold_pct": max_pct, "difference_pct": pct})


def duplicate_result(key: str, spec: TableSpec, f: SliceFigures, max_rows: int) -> GateResult:
    passed = f.duplicate_rows <= max_rows
    keys = f"({', '.join(spec.business_keys)})"
    detail = (f"no duplicate {keys}" if not f.duplicate_rows else
              f"{f.duplicate_rows} duplicate row(s) on {keys} ({'<=' if passed else '>'} {max_rows} allowed)")
    return GateResult(NO_DUPLICATE_BUSINESS_KEYS, key, passed, 0, f.duplicate_rows, max_rows,
                      f.duplicate_rows, detail,
                      numbers={"actual": f.duplicate_rows, "threshold": max_rows})


def metrics_result(key: str, f: SliceFigures, tolerances: Mapping[str, Tolerance]) -> GateResult:
    failing = [n for n, count in f.differing.items() if count]
    passed = not failing and not f.missing_groups and not f.extra_groups
    numbers: dict[str, float] = {}
    difference: dict[str, object] = {}
    for name in tolerances:
        exp, act = as_number(f.source_totals.get(name)), as_number(f.target_totals.get(name))
        if exp is not None:
            numbers[f"{name}.expected"] = exp
        if act is not None:
            numbers[f"{name}.actual"] = act
        if exp is not None and act is not None:
            numbers[f"{name}.difference"] = act - exp
            difference[name] = act - exp
        numbers[f"{name}.groups_differing"] = f.differing.get(name, 0)
        numbers[f"{name}.tolerance_abs"] = tolerances[name].abs
        numbers[f"{name}.tolerance_pct"] = tolerances[name].pct
    numbers["groups.missing"], numbers["groups.extra"] = f.missing_groups, f.extra_groups
    if passed:
        detail = (f"{len(tolerances)} metric(s) match the source in all {f.target_groups} key group(s): "
                  + ", ".join(f"{n} {t.describe()}" for n, t in tolerances.items()))
    else:
        parts = [f"{n} differs in {f.differing[n]} group(s) ({tolerances[n].describe()})" for n in failing]
        if f.missing_groups:
            parts.append(f"{f.missing_groups} source group(s) missing in the target")
        if f.extra_groups:
            parts.append(f"{f.extra_groups} target group(s) not in the source")
        detail = "; ".join(parts) + (f"; worst: {f.worst}" if f.worst else "")
    return GateResult(METRICS_MATCH_SOURCE, key, passed, f.source_totals, f.target_totals,
                      {n: {"pct": t.pct, "abs": t.abs} for n, t in tolerances.items()}, difference,
                      detail, numbers=numbers)


def contract_result(key: str, spec: TableSpec, schema: SchemaCheck, f: SliceFigures) -> GateResult:
    null_problems = [f"{c}: {n} NULL(s) in a non-nullable column" for c, n in f.nulls.items() if n]
    problems = schema.problems + null_problems
    difference = sum(f.nulls.values()) + len(schema.problems)
    detail = "; ".join(problems) if problems else (
        f"{len(schema.declared)} columns and types as declared; no NULLs in non-nullable columns")
    return GateResult(CONTRACT_HOLDS, key, not problems,
                      {"columns": schema.declared, "nulls": {c.name: 0 for c in spec.contract if not c.nullable}},
                      {"nulls": f.nulls, "missing": list(schema.missing), "extra": list(schema.extra),
                       "mismatched": {c: found for c, (_, found) in schema.mismatched.items()}},
                      0, difference, detail, numbers={"problems": difference})


def source_duplicates_result(key: str, spec: TableSpec, f: SliceFigures, max_rows: int) -> GateResult:
    if not spec.source_event_id:
        return GateResult(SOURCE_HAS_NO_DUPLICATES, key, True, 0, None, max_rows, None,
                          "not tracked: the table declares no source_event_id")
    passed = f.source_duplicates <= max_rows
    detail = (f"no duplicated {spec.source_event_id} among {f.source_rows} source rows"
              if not f.source_duplicates else
              f"{f.source_duplicates} duplicated {spec.source_event_id} value(s) in the source "
              f"({'<=' if passed else '>'} {max_rows} allowed): a double-loaded source inflates the target")
    return GateResult(SOURCE_HAS_NO_DUPLICATES, key, passed, 0, f.source_duplicates, max_rows,
                      f.source_duplicates, detail,
                      numbers={"actual": f.source_duplicates, "source_rows": f.source_rows})


def unchanged_result(key: str, checked: Fingerprint, written: Fingerprint | None) -> GateResult:
    if written is None:
        return GateResult(UNCHANGED_SINCE_CHECKED, key, False, None, str(checked), "equal", None,
                          "no write recorded for this partition")
    passed = checked == written and not written.legacy
    if written.legacy:
        # a sum of md5s: other rows with the same one can be found, so it shows nothing unchanged
        detail = (f"its write was fingerprinted before the upgrade ({written}), by an algorithm that "
                  "cannot show the data unchanged: re-run the partition through the plan")
    elif passed:
        detail = f"fingerprint {checked} equals the write's"
    else:
        detail = (f"the data now ({checked}) is not what its write produced ({written}): it was "
                  "changed after the write")
    return GateResult(UNCHANGED_SINCE_CHECKED, key, passed, written.digest, checked.digest, "equal",
                      checked.rows - written.rows, detail,
                      numbers={"rows.written": written.rows, "rows.now": checked.rows})

"""The reconciliation gates as SQL inside DuckDB, for a whole slice of partitions at once.

Only per-partition aggregate figures leave the engine: one aggregate row per partition from the
target and one from the source, never the partitions' rows. Partition keys are bound as DATE
parameters; identifiers go through `quote()`. The metric and expected-rows expressions come from
the TableSpec (code reviewed like any other code) and are spliced as written.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

import duckdb

from backfill_assets.errors import UsageError, WarehouseError, WindowError
from backfill_assets.gates.results import (
    CONTRACT_HOLDS,
    METRICS_MATCH_SOURCE,
    NO_DUPLICATE_BUSINESS_KEYS,
    ROW_COUNT_MATCHES_SOURCE,
    SINGLE_CODE_VERSION,
    GateResult,
    Thresholds,
    pct_diff,
)
from backfill_assets.table import Metric, TableSpec
from backfill_assets.warehouse.identifiers import quote

# per_partition: one aggregate query per partition and table.
# grouped: one GROUP BY query per table over the whole slice.
# auto: grouped, except DISTINCT aggregates whose sets are expected to be large, which run per
#   partition. Measured by benchmarks/gates_vs_recompute.py (10M orders, 30 days): grouped wins
#   when the DISTINCT sets are small (per-query overhead dominates), per-partition wins for a
#   COUNT(DISTINCT) over ~25k values a day; auto tracks the faster of the two in both cases.
STRATEGIES = ("auto", "grouped", "per_partition")
DEFAULT_STRATEGY = "auto"
# DISTINCT entries (summed over the slice) above which a grouped hash table outgrows the cache
GROUPED_DISTINCT_LIMIT = 100_000

UNKNOWN_VERSION = "unknown"

_DISTINCT = re.compile(r"\bDISTINCT\b", re.IGNORECASE)


@dataclass(frozen=True)
class _TargetFigures:
    rows: int
    hashed_duplicates: int  # an upper bound: a hash collision adds, it never hides a duplicate
    nulls: dict[str, int]
    metrics: dict[str, object]


@dataclass(frozen=True)
class _SourceFigures:
    expected_rows: object
    metrics: dict[str, object]


@dataclass(frozen=True)
class _Schema:
    declared: dict[str, str]  # contract column -> type as declared
    found: dict[str, str]  # table column (lower case) -> type information_schema reports
    missing: tuple[str, ...]
    extra: tuple[str, ...]
    mismatched: dict[str, tuple[str, str]]  # column -> (declared, found)

    @property
    def problems(self) -> list[str]:
        out = [f"missing column {c}" for c in self.missing]
        out += [f"unexpected column {c}" for c in self.extra]
        out += [f"{c}: type {found}, contract says {declared}"
                for c, (declared, found) in self.mismatched.items()]
        return out


def partition_date(key: str) -> dt.date:
    """A daily partition key ('YYYY-MM-DD') as the DATE value it is bound as."""
    try:
        day = dt.date.fromisoformat(key)
    except (TypeError, ValueError):
        day = None
    if day is None or day.isoformat() != key:
        raise WindowError(f"partition key {key!r} is not a daily key", fix="use YYYY-MM-DD")
    return day


def evaluate_slice(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    partition_keys: Sequence[str],
    thresholds: Thresholds,
    code_versions: Mapping[str, str | None] | None = None,
    *,
    strategy: str = DEFAULT_STRATEGY,
) -> dict[str, list[GateResult]]:
    """Every gate on every partition of the slice: {partition key: [one result per GATE_NAMES]}.

    `code_versions` maps partition -> the code version that wrote it (None or absent: unknown) for
    the whole window, which may be wider than this slice; None means versions are not tracked.
    """
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown gate strategy {strategy!r}", fix=f"use one of: {', '.join(STRATEGIES)}")
    keys = list(dict.fromkeys(partition_keys))
    if not keys:
        return {}
    days = {key: partition_date(key) for key in keys}
    metrics = [spec.metric(name) for name in thresholds.metric_tolerance_pct]

    schema = _schema(con, spec)
    # a column the table lacks cannot be counted; the contract gate already reports it missing
    null_columns = [c.name for c in spec.contract if not c.nullable and c.name.lower() in schema.found]
    target = _target_figures(con, spec, days, metrics, null_columns, strategy)
    source = _source_figures(con, spec, days, metrics, target, strategy)
    versions = _code_version_results(keys, code_versions)

    results: dict[str, list[GateResult]] = {}
    for key in keys:
        tgt, src = target[key], source[key]
        # the hash count only alarms; the exact count decides (and is what gets reported)
        duplicates = _exact_duplicates(con, spec, days[key]) if tgt.hashed_duplicates > 0 else 0
        results[key] = [
            _row_count_result(key, tgt, src, thresholds),
            _duplicate_result(key, spec, duplicates, tgt.hashed_duplicates, thresholds),
            _metrics_result(key, tgt, src, thresholds),
            _contract_result(key, spec, schema, tgt),
            versions[key],
        ]
    return results


# --- SQL ------------------------------------------------------------------------------------------

def key_hash_sql(keys: Sequence[str]) -> str:
    """One 64-bit hash of the business keys; NULL keys hash like any value, as DISTINCT treats them."""
    return f"hash({', '.join(quote(k, 'business key') for k in keys)})"


def _apart(exprs: Sequence[str], strategy: str, estimates: Sequence[float]) -> list[bool]:
    """Which expressions run in per-partition queries (True) rather than the grouped pass.

    `estimates` is the expected size of each expression's DISTINCT set over the whole slice.
    """
    if strategy == "per_partition":
        return [True] * len(exprs)
    if strategy == "grouped":
        return [False] * len(exprs)
    # auto: a grouped DISTINCT keeps one hash table for the whole slice, and past cache size it
    # loses to small per-partition tables; below that, per-query overhead (1-3 ms) dominates
    return [bool(_DISTINCT.search(e)) and est > GROUPED_DISTINCT_LIMIT
            for e, est in zip(exprs, estimates, strict=True)]


def _aggregate(con: duckdb.DuckDBPyConnection, table: str, partition_column: str,
               days: Mapping[str, dt.date], exprs: Sequence[str], apart: Sequence[bool],
               what: str) -> dict[str, tuple]:
    """`exprs` aggregated over each partition's rows; a partition with no rows still gets a row.

    Expressions flagged in `apart` run in one query per partition, the others in one GROUP BY
    query over the whole slice.
    """
    column = quote(partition_column, "partition column")
    source = quote(table, "table")
    alone = [e for e, a in zip(exprs, apart, strict=True) if a]
    together = [e for e, a in zip(exprs, apart, strict=True) if not a]
    per_rows: dict[str, tuple] = {key: () for key in days}
    grouped_rows: dict[str, tuple] = {key: () for key in days}
    try:
        if alone:
            # no GROUP BY: an aggregate without one returns a row even for an empty partition
            sql = f"SELECT {', '.join(alone)} FROM {source} WHERE {column} = ?"
            per_rows = {key: _one_row(con, sql, [day]) for key, day in days.items()}
        if together:
            select = ", ".join(together)
            # IN with one bound value per key, not `= ANY(?)`: DuckDB plans the list form as a semi
            # join (1.6-1.7x slower measured), while IN values reach the scan as a row-group filter
            placeholders = ", ".join("?" for _ in days)
            sql = (f"SELECT {column}, {select} FROM {source} WHERE {column} IN ({placeholders}) "
                   f"GROUP BY {column}")
            by_day = {day: key for key, day in days.items()}
            found = {by_day[r[0]]: tuple(r[1:]) for r in con.execute(sql, list(days.values())).fetchall()}
            if len(found) < len(days):
                # what these aggregates give over no rows (0 for count, NULL for sum), as above
                empty = _one_row(con, f"SELECT {select} FROM {source} WHERE false", [])
                found.update({key: empty for key in days if key not in found})
            grouped_rows = found
    except duckdb.Error as exc:
        raise WarehouseError(
            f"{what} gate query on {table} failed: {str(exc).splitlines()[0]}",
            fix="check that the table exists and that the TableSpec's metric and expected-rows "
                "SQL match its columns",
        ) from exc
    out = {}
    for key in days:
        a, t = iter(per_rows[key]), iter(grouped_rows[key])
        out[key] = tuple(next(a) if flag else next(t) for flag in apart)
    return out


def _one_row(con: duckdb.DuckDBPyConnection, sql: str, params: list[object]) -> tuple:
    row = con.execute(sql, params).fetchone()
    if row is None:  # an aggregate without GROUP BY always yields a row
        raise WarehouseError(f"aggregate query returned no row: {sql}")
    return tuple(row)


def _table_rows(con: duckdb.DuckDBPyConnection, table: str) -> float:
    row = con.execute(
        "SELECT estimated_size FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = current_schema() AND lower(table_name) = lower(?)", [table]).fetchone()
    return float(row[0]) if row and row[0] is not None else math.inf


def _target_figures(con: duckdb.DuckDBPyConnection, spec: TableSpec, days: Mapping[str, dt.date],
                    metrics: Sequence[Metric], null_columns: Sequence[str],
                    strategy: str) -> dict[str, _TargetFigures]:
    exprs = ["count(*)", f"count(DISTINCT {key_hash_sql(spec.business_keys)})"]
    exprs += [f"count(*) FILTER (WHERE {quote(c)} IS NULL)" for c in null_columns]
    exprs += [f"({m.target_sql})" for m in metrics]
    # the slice holds at most the whole table: a cheap upper bound of any DISTINCT set's size
    size = _table_rows(con, spec.table) if strategy == "auto" else 0.0
    apart = _apart(exprs, strategy, [size] * len(exprs))
    rows = _aggregate(con, spec.table, spec.partition_column, days, exprs, apart, "target")
    out = {}
    n_nulls = len(null_columns)
    for key, row in rows.items():
        out[key] = _TargetFigures(
            rows=int(row[0]),
            hashed_duplicates=int(row[0]) - int(row[1]),
            nulls={c: int(v) for c, v in zip(null_columns, row[2:2 + n_nulls], strict=True)},
            metrics={m.name: v for m, v in zip(metrics, row[2 + n_nulls:], strict=True)},
        )
    return out


def _source_figures(con: duckdb.DuckDBPyConnection, spec: TableSpec, days: Mapping[str, dt.date],
                    metrics: Sequence[Metric], target: Mapping[str, _TargetFigures],
                    strategy: str) -> dict[str, _SourceFigures]:
    # expected rows and every metric in the same scan: the source is the big table
    exprs = [f"({spec.expected_rows_sql})"] + [f"({m.source_sql})" for m in metrics]
    # the target, already counted, says how large each DISTINCT set should be: expected rows
    # count what the target holds, and a distinct-count metric is the size of its own set. A wrong
    # estimate (a broken target) only picks the slower plan; the figures are the same either way.
    estimates = [float(sum(t.rows for t in target.values()))]
    estimates += [_magnitude(t.metrics[m.name] for t in target.values()) for m in metrics]
    apart = _apart(exprs, strategy, estimates)
    rows = _aggregate(con, spec.source_table, spec.source_partition_column, days, exprs, apart,
                      "source")
    return {key: _SourceFigures(row[0], {m.name: v for m, v in zip(metrics, row[1:], strict=True)})
            for key, row in rows.items()}


def _magnitude(values: Iterable[object]) -> float:
    total = 0.0
    for value in values:
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
            return math.inf  # not a count: no estimate, so no shared hash table either
        total += abs(float(value))
    return total


def _exact_duplicates(con: duckdb.DuckDBPyConnection, spec: TableSpec, day: dt.date) -> int:
    # row(...) is a struct even for one key, so a NULL key counts as a value, as in the hash pass
    keys = ", ".join(quote(k, "business key") for k in spec.business_keys)
    sql = (f"SELECT count(*) - count(DISTINCT row({keys})) FROM {quote(spec.table)} "
           f"WHERE {quote(spec.partition_column)} = ?")
    try:
        return int(_one_row(con, sql, [day])[0])
    except duckdb.Error as exc:
        raise WarehouseError(f"duplicate check on {spec.table} failed: {str(exc).splitlines()[0]}",
                             fix="check that the business keys are columns of the table") from exc


def _schema(con: duckdb.DuckDBPyConnection, spec: TableSpec) -> _Schema:
    rows = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_catalog = current_database() AND table_schema = current_schema() "
        "AND lower(table_name) = lower(?) ORDER BY ordinal_position",
        [spec.table],
    ).fetchall()
    if not rows:
        raise WarehouseError(f"target table {spec.table} does not exist",
                             fix="materialize the target before running its gates")
    found = {str(name).lower(): str(kind) for name, kind in rows}
    declared = {c.name: c.type for c in spec.contract}
    canonical = _canonical_types(con, declared.values())
    missing = tuple(c for c in declared if c.lower() not in found)
    contract_names = {c.lower() for c in declared}
    extra = tuple(str(name) for name, _ in rows if str(name).lower() not in contract_names)
    mismatched = {c: (t, found[c.lower()]) for c, t in declared.items()
                  if c.lower() in found and canonical[t] != _normalised(found[c.lower()])}
    return _Schema(declared, found, missing, extra, mismatched)


def _normalised(type_name: str) -> str:
    return " ".join(type_name.upper().replace(" (", "(").replace(", ", ",").split())


def _canonical_types(con: duckdb.DuckDBPyConnection, types: Iterable[str]) -> dict[str, str]:
    """Declared type -> the name information_schema would report (INT -> INTEGER, DECIMAL -> ...)."""
    unique = list(dict.fromkeys(types))
    # a separate cursor: a failed statement aborts the connection's transaction, and the caller
    # may be inside one. Types passed Column's plain-type pattern, so splicing them is safe.
    cur = con.cursor()
    try:
        try:
            row = _one_row(cur, "SELECT " + ", ".join(f"typeof(CAST(NULL AS {t}))" for t in unique), [])
            return {t: _normalised(str(c)) for t, c in zip(unique, row, strict=True)}
        except duckdb.Error:
            out = {}
            for t in unique:
                try:
                    out[t] = _normalised(str(_one_row(cur, f"SELECT typeof(CAST(NULL AS {t}))", [])[0]))
                except duckdb.Error:
                    # a name DuckDB does not know: compared as written, so it shows as a mismatch
                    out[t] = _normalised(t)
            return out
    finally:
        cur.close()


# --- results --------------------------------------------------------------------------------------

def _fmt_pct(value: float) -> str:
    if value == 0:
        return "0"
    # enough digits that a failing difference never prints equal to its tolerance
    return f"{value:.2f}" if value >= 1 else f"{value:.3g}"


def _fmt_value(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


def _row_count_result(key: str, tgt: _TargetFigures, src: _SourceFigures,
                      thresholds: Thresholds) -> GateResult:
    expected = 0 if src.expected_rows is None else src.expected_rows
    diff = pct_diff(expected, tgt.rows)
    passed = diff <= thresholds.max_row_diff_pct
    sign = "<=" if passed else ">"
    return GateResult(
        ROW_COUNT_MATCHES_SOURCE, key, passed, expected=expected, actual=tgt.rows,
        threshold=thresholds.max_row_diff_pct, difference=diff,
        detail=(f"target {tgt.rows} rows vs source {_fmt_value(expected)} expected "
                f"({_fmt_pct(diff)}% {sign} {_fmt_pct(thresholds.max_row_diff_pct)}%)"),
    )


def _duplicate_result(key: str, spec: TableSpec, duplicates: int, hashed: int,
                      thresholds: Thresholds) -> GateResult:
    passed = duplicates <= thresholds.max_duplicate_rows
    keys = f"({', '.join(spec.business_keys)})"
    if duplicates == 0:
        detail = f"no duplicate {keys}"
    else:
        sign = "<=" if passed else ">"
        detail = (f"{duplicates} duplicate row(s) on {keys} "
                  f"({sign} {thresholds.max_duplicate_rows} allowed)")
    if hashed != duplicates:
        detail += f"; the key hash flagged {hashed}, the exact count found {duplicates}"
    return GateResult(
        NO_DUPLICATE_BUSINESS_KEYS, key, passed, expected=0, actual=duplicates,
        threshold=thresholds.max_duplicate_rows, difference=duplicates, detail=detail,
    )


def _metrics_result(key: str, tgt: _TargetFigures, src: _SourceFigures,
                    thresholds: Thresholds) -> GateResult:
    tolerances = thresholds.metric_tolerance_pct
    diffs = {name: pct_diff(src.metrics[name], tgt.metrics[name]) for name in tolerances}
    failing = [name for name, diff in diffs.items() if diff > tolerances[name]]
    if not tolerances:
        detail = "no metrics checked"
    elif failing:
        detail = "; ".join(
            f"{name}: target {_fmt_value(tgt.metrics[name])} vs source {_fmt_value(src.metrics[name])} "
            f"({_fmt_pct(diffs[name])}% > {_fmt_pct(tolerances[name])}%)"
            for name in failing)
    else:
        detail = f"{len(diffs)} metric(s) within tolerance: {', '.join(diffs)}"
    return GateResult(
        METRICS_MATCH_SOURCE, key, not failing, expected=src.metrics, actual=tgt.metrics,
        threshold=dict(tolerances), difference=diffs, detail=detail,
    )


def _contract_result(key: str, spec: TableSpec, schema: _Schema, tgt: _TargetFigures) -> GateResult:
    null_problems = [f"{c}: {n} NULL(s) in a non-nullable column" for c, n in tgt.nulls.items() if n]
    problems = schema.problems + null_problems
    expected = {
        "columns": schema.declared,
        "nulls": {c.name: 0 for c in spec.contract if not c.nullable},
    }
    actual = {
        "nulls": tgt.nulls,
        "missing": list(schema.missing),
        "extra": list(schema.extra),
        "mismatched": {c: found for c, (_, found) in schema.mismatched.items()},
    }
    difference = sum(tgt.nulls.values()) + len(schema.problems)
    detail = "; ".join(problems) if problems else (
        f"{len(schema.declared)} columns and types as declared; no NULLs in non-nullable columns")
    return GateResult(CONTRACT_HOLDS, key, not problems, expected=expected, actual=actual,
                      threshold=0, difference=difference, detail=detail)


def _code_version_results(keys: Sequence[str],
                          code_versions: Mapping[str, str | None] | None) -> dict[str, GateResult]:
    if code_versions is None:
        return {key: GateResult(SINGLE_CODE_VERSION, key, True, expected=None, actual=None,
                                threshold=None, difference=None, detail="not tracked")
                for key in keys}
    # the window is the mapping plus this slice: a slice key absent from the mapping is unknown
    window = {**{k: code_versions.get(k) for k in keys}, **code_versions}
    counts = Counter(v for v in window.values() if v is not None)
    unknown = sum(1 for v in window.values() if v is None)
    spread = {str(v): n for v, n in sorted(counts.items())}
    if unknown:
        spread[UNKNOWN_VERSION] = unknown
    top = counts.most_common()
    # a tie has no majority to measure against: every tied version is the odd one out
    majority = top[0][0] if top and (len(top) == 1 or top[0][1] > top[1][1]) else None
    mix = ", ".join(f"{v} ({n} partition(s))" for v, n in spread.items())
    out = {}
    for key in keys:
        version = window.get(key)
        if not counts:
            passed, detail = True, "no code version recorded for any partition of the window"
        elif version is None:
            passed, detail = False, f"code version unknown while the window holds {mix}"
        elif majority is None:
            passed, detail = False, f"the window mixes code versions with no majority: {mix}"
        elif version != majority:
            passed, detail = False, f"written by code version {version}, the window's is {majority}: {mix}"
        elif len(spread) > 1:
            passed, detail = True, f"code version {version}, the window's majority; others: {mix}"
        else:
            passed, detail = True, f"code version {version}, as every partition of the window"
        out[key] = GateResult(SINGLE_CODE_VERSION, key, passed, expected=majority, actual=version,
                              threshold="one code version per window", difference=spread,
                              detail=detail)
    return out
